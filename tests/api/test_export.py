"""``iteralab export mlflow``: the runs read back with MLflow's own client from the local SQLite store hold every
variant, param and metric of the sealed folder's raw table and decision; a second export adds nothing; an unsealed
or tampered folder and a missing mlflow package are refused in one line."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from decimal import Decimal

import pytest

from iteralab.api.export import ARTIFACTS, FACTORS, export_mlflow
from iteralab.campaign.folder import read_raw_rows
from iteralab.cli import main
from iteralab.errors import VerificationError
from reported_campaigns import reported_campaign


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    return reported_campaign(tmp_path_factory.mktemp("export") / "campaign")


@pytest.fixture(scope="module")
def exported(sealed):
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install '.[mlflow]'; scripts/setup.sh installs it)")
    first = export_mlflow(sealed)
    second = export_mlflow(sealed)
    return first, second


@pytest.mark.slow  # MLflow's SQLite store builds its schema (alembic migrations): seconds of CPU per store
def test_the_runs_read_back_hold_the_raw_table_and_the_decision(sealed, exported):
    from mlflow.tracking import MlflowClient

    first, _ = exported
    assert first.created and first.tracking_uri == f"sqlite:///{sealed.resolve()}.mlflow/mlflow.db"
    client = MlflowClient(tracking_uri=first.tracking_uri)
    decision = json.loads((sealed / "decision.json").read_text(encoding="utf-8"))
    rows = read_raw_rows(sealed / "raw_table.csv")
    parent = client.get_run(first.parent_run_id)
    tags = parent.data.tags
    assert (tags["iteralab.protocol.name"], tags["iteralab.protocol.version"], tags["iteralab.protocol.sha256"]) == \
        (decision["protocol"]["name"], str(decision["protocol"]["version"]), decision["protocol"]["sha256"])
    assert tags["iteralab.decision.configuration"] == decision["configuration_per_machine"][0]["answer"]
    assert tags["iteralab.decision.rental"] == decision["rental"]["answer"]
    assert tags["iteralab.decision"] == decision["decision"]
    assert tags["iteralab.campaign_digest"] == (sealed / "SHA256SUMS.sha256").read_text().split()[0]
    assert sorted(a.path for a in client.list_artifacts(parent.info.run_id)) == sorted(ARTIFACTS)
    variants = list(dict.fromkeys(r.variant for r in rows))
    assert sorted(first.child_run_ids) == sorted(variants)
    priced = []
    for config in decision["configurations"]:
        name = config["variant"]
        run = client.get_run(first.child_run_ids[name])
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        own = [r for r in rows if r.variant == name]
        counted = [r for r in own if r.ok and not r.excluded]
        assert run.data.params == {f: own[0].cell(f) for f in FACTORS if own[0].cell(f)}
        assert run.data.params["batch_size"] == str(own[0].batch_size)
        metrics = run.data.metrics
        assert metrics["median_pass_s"] == config["median_pass_s"] == statistics.median(r.pass_s for r in counted)
        assert metrics["docs_per_s"] == pytest.approx(decision["corpus"]["size"] / config["median_pass_s"])
        assert metrics["macro_f1"] == statistics.median(r.metric for r in counted)
        assert metrics["macro_f1_vs_reference"] == pytest.approx(statistics.median(r.metric_delta for r in counted))
        assert metrics["peak_cuda_allocated_bytes"] == max(r.cuda_max_allocated_bytes for r in counted)
        cost = config["pricing"]["cost_per_result"]
        if cost is None or cost["per_result"] is None:  # not priced, or no verified corpus: no figure, never 0
            assert "cost_per_verified_corpus" not in metrics
        else:
            assert Decimal(str(metrics["cost_per_verified_corpus"])) == Decimal(cost["per_result"])
            priced.append(name)
        history = client.get_metric_history(run.info.run_id, "pass_s")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == \
            list(enumerate(config["times"])) == list(enumerate(r.pass_s for r in counted))
    assert "b8" in priced


@pytest.mark.slow
def test_a_second_export_adds_nothing(exported):
    from mlflow.tracking import MlflowClient

    first, second = exported
    assert not second.created
    assert (second.parent_run_id, second.child_run_ids) == (first.parent_run_id, first.child_run_ids)
    client = MlflowClient(tracking_uri=first.tracking_uri)
    assert len(client.search_runs([first.experiment_id])) == 1 + len(first.child_run_ids)


def _one_error_line(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    return err[0]


def test_an_unsealed_or_tampered_folder_is_refused_in_one_line(sealed, tmp_path, capsys):
    unsealed = shutil.copytree(sealed, tmp_path / "unsealed")
    (unsealed / "SHA256SUMS").unlink()
    line = _one_error_line(capsys, ["export", "mlflow", str(unsealed)])
    assert line.startswith(f"Error: {unsealed}: not exported: the folder is not sealed")
    tampered = shutil.copytree(sealed, tmp_path / "tampered")
    table = tampered / "raw_table.csv"
    table.write_text(table.read_text(encoding="utf-8").replace("3.8", "3.7", 1), encoding="utf-8")
    line = _one_error_line(capsys, ["export", "mlflow", str(tampered)])
    assert "differs from its seal: raw_table.csv: edited" in line
    with pytest.raises(VerificationError):
        export_mlflow(tampered, tracking_uri=f"sqlite:///{tmp_path / 'never.db'}")
    assert not (tmp_path / "never.db").exists() and not (tmp_path / "tampered.mlflow").exists()


def test_without_mlflow_the_command_says_how_to_install_the_extra(sealed, tmp_path, monkeypatch, capsys):
    for name in ["mlflow", "mlflow.tracking", "mlflow.exceptions", *(m for m in sys.modules if m.startswith("mlflow."))]:
        monkeypatch.setitem(sys.modules, name, None)  # ``import mlflow…`` now raises ImportError
    line = _one_error_line(capsys, ["export", "mlflow", str(sealed), "--tracking-uri",
                                    f"sqlite:///{tmp_path / 'store.db'}"])
    assert line == "Error: the MLflow export needs the mlflow package: pip install 'iteralab[mlflow]'"


@pytest.mark.slow
def test_a_store_mlflow_will_not_open_is_refused_in_one_line(sealed, tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install '.[mlflow]')")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = (tmp_path / "mlruns").as_uri()  # MLflow 3's file store: refused unless MLFLOW_ALLOW_FILE_STORE is set
    line = _one_error_line(capsys, ["export", "mlflow", str(sealed), "--tracking-uri", uri])
    assert line.startswith(f"Error: {uri}: MLflow refused the export: ")


@pytest.mark.slow
def test_an_export_stopped_half_way_is_made_again_whole(sealed, tmp_path):
    """A parent run left without its completion tag (the export was stopped) is deleted with its children, and the
    export is made again: one complete parent, one child per variant."""
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install '.[mlflow]')")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("half", artifact_location=(tmp_path / "artifacts").as_uri())
    digest = (sealed / "SHA256SUMS.sha256").read_text().split()[0]
    stale = client.create_run(experiment_id, tags={"iteralab.campaign_digest": digest, "iteralab.role": "campaign"})
    client.create_run(experiment_id, tags={"mlflow.parentRunId": stale.info.run_id, "iteralab.role": "variant"})
    done = export_mlflow(sealed, tracking_uri=uri, experiment="half")
    assert done.created and done.parent_run_id != stale.info.run_id
    active = client.search_runs([experiment_id])
    assert sorted(r.info.run_id for r in active) == sorted([done.parent_run_id, *done.child_run_ids.values()])
    assert client.get_run(stale.info.run_id).info.lifecycle_stage == "deleted"
