"""Where a callable's work runs (``[model] runs_on``): a callable that sends its work to another machine (an API,
a vLLM server) is never priced as the machine that ran the caller, and the decision says what was observed. And
a callable's setting is said without the padding, bucketing and compile that apply to nothing it does."""

from __future__ import annotations

import json

import pytest

from iteralab.cli import main
from iteralab.decision.note import render_decision, write_decision
from iteralab.decision.rule import decide
from iteralab.errors import ProtocolError
from iteralab.plan.protocol import parse_protocol
from protocol_factory import protocol_toml
from answer_inputs import write_catalog
from stats_campaigns import build_campaign

CALLABLE = 'kind = "callable"\ncallable = "fake_models:keyword_classifier"'
SERVICE = "vLLM on the team's A100 server"
H100_ROW = "u1,2026-12-01,h100,NVIDIA H100 80GB HBM3,1,7,900.00,USD"


def remote_campaign(tmp_path, service: str | None = SERVICE):
    """A campaign on a machine with an H100 (that the catalog prices), whose callable sends its work elsewhere."""
    folder = build_campaign(tmp_path / "camp", hardware="h100")
    protocol = folder / "inputs" / "protocol.toml"
    remote = f'runs_on = "remote"\nservice = "{service}"' if service else ""
    protocol.write_text(protocol.read_text(encoding="utf-8").replace(
        'callable = "fake_models:keyword_classifier"', f'callable = "fake_models:keyword_classifier"\n{remote}'),
        encoding="utf-8")
    return folder


def test_the_model_table_declares_where_a_callable_runs():
    local = parse_protocol(protocol_toml(model=CALLABLE))
    assert local.model.runs_on == "local" and local.model.remote_service is None
    remote = parse_protocol(protocol_toml(model=f'{CALLABLE}\nruns_on = "remote"\nservice = "{SERVICE}"'))
    assert remote.model.runs_on == "remote" and remote.model.remote_service == SERVICE


@pytest.mark.parametrize("model, message", [
    (f'{CALLABLE}\nruns_on = "remote"', "key 'model': model.runs_on = 'remote' needs model.service"),
    (f'{CALLABLE}\nservice = "{SERVICE}"', "key 'model': model.service names a remote service: declare "
                                           "model.runs_on = 'remote'"),
    ('kind = "hf_classifier"\npath = "model"\nruns_on = "remote"\nservice = "x"',
     "key 'model': model.runs_on = 'remote' is for a callable that sends its work elsewhere; kind 'hf_classifier'"),
    (f'{CALLABLE}\nruns_on = "elsewhere"', "key 'model.runs_on': Input should be 'local' or 'remote'"),
])
def test_a_wrong_runs_on_is_one_line_naming_the_key(model, message):
    with pytest.raises(ProtocolError) as info:
        parse_protocol(protocol_toml(model=model), "p.toml")
    assert str(info.value).startswith(f"p.toml: {message}"), str(info.value)
    assert "\n" not in str(info.value)


def test_a_local_callable_on_a_priced_gpu_is_priced_as_that_gpu(tmp_path):
    # the counterpart of the next test: the same folder without runs_on is priced from the observed H100
    folder = remote_campaign(tmp_path, service=None)
    decision = decide([folder], catalog=write_catalog(tmp_path, [H100_ROW]))
    assert decision.chosen is not None and decision.chosen.pricing.gpu.gpu_id == "h100"


def test_a_remote_callable_is_never_priced_as_the_local_machine(tmp_path):
    folder = remote_campaign(tmp_path)
    decision = decide([folder], catalog=write_catalog(tmp_path, [H100_ROW]))
    assert decision.chosen is None
    assert all(c.pricing.budget is None and c.pricing.gpu is None for c in decision.configs)
    assert all(f"the model's work ran on the remote service {SERVICE!r}" in c.pricing.reason
               for c in decision.configs if not c.failures)
    assert decision.rental_line.startswith(f"not priced: the model's work ran on the remote service {SERVICE!r} "
                                           "(model.runs_on = 'remote'), which was not observed as rental hardware")
    assert decision.machines[0].hardware == f"remote service {SERVICE!r} (called from NVIDIA H100 80GB HBM3)"
    note = render_decision(decision)
    assert (f"hardware observed NVIDIA H100 80GB HBM3, which ran the caller only: the model's work ran on the "
            f"remote service {SERVICE!r} (model.runs_on = 'remote'), not observed") in note
    assert f"  - on remote service {SERVICE!r} (called from NVIDIA H100 80GB HBM3): b8" in note
    assert "h100 7-day" not in note
    assert note.count("which was not observed as rental hardware") == 3  # decision, rental, 'every configuration'


def test_decision_json_records_where_the_work_ran(tmp_path, capsys):
    folder = remote_campaign(tmp_path)
    assert main(["decide", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [campaign] = data["campaigns"]
    assert campaign["work_ran_on"] == {"runs_on": "remote", "service": SERVICE}
    assert data["rental"]["chosen"] is None and "remote service" in data["rental"]["answer"]


def test_a_callables_setting_names_no_padding_bucketing_or_compile(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    note = render_decision(decide([folder]))
    settings = [line for line in note.splitlines() if "setting: batch size" in line.lower()]
    assert settings, note
    assert all("padding" not in line.replace("precision and padding", "") and "bucketing" not in line
               and "compile" not in line for line in settings), settings
    assert "    setting: batch size 8 (the callable owns its model, precision and padding)" in settings
    paths = write_decision(decide([folder]), tmp_path / "out")
    assert "bucketing off" not in paths["decision_md"].read_text(encoding="utf-8")
