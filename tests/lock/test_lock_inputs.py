"""P2: the lock covers every input (corpus ids, texts and labels, tuning split, model files, catalog); ``run`` and a
resume refuse any change with one line; ``lock`` checks the inputs before recording anything; strict values."""

import json
import shutil

import pytest

from campaign_factory import callable_campaign, write_corpus_csv
from iteralab.lock.inputs import lock
from iteralab.cli import main
from iteralab.errors import ProtocolError
from iteralab.evidence.run import run_campaign
from iteralab.plan.protocol import parse_protocol
from iteralab.plan.lockfile import lock_path
from protocol_factory import protocol_toml, write_protocol

HINT = "Hint: restore the locked input, or amend: raise 'version' in the protocol and lock again"


class Stop(Exception):
    pass


def _stop_after_first_pass(kind, info):
    if kind == "done":
        raise Stop()


def _locked_at(protocol):
    return json.loads(lock_path(protocol).read_text())["locks"][-1]["locked_at"]


def _refusal(capsys, protocol, out):
    assert main(["run", str(protocol), "--out", str(out), "--json"]) == 2
    return capsys.readouterr().err.splitlines()


def test_dropping_rows_after_lock_is_refused(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1)
    csv_path = tmp_path / "corpus.csv"
    lines = csv_path.read_text().splitlines()
    csv_path.write_text("\n".join(lines[:-3]) + "\n")
    err = _refusal(capsys, protocol, tmp_path / "out")
    assert err == [f"Error: {protocol}: corpus: 3 ids missing (e.g. 'd09', 'd10', 'd11') since the lock at "
                   f"{_locked_at(protocol)}", HINT]
    assert not (tmp_path / "out").exists()


def test_text_and_label_edits_after_lock_are_refused(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1)
    csv_path = tmp_path / "corpus.csv"
    original = csv_path.read_text()
    csv_path.write_text(original.replace("good fun", "good  fun!"))
    assert _refusal(capsys, protocol, tmp_path / "out")[0] == (
        f"Error: {protocol}: corpus: 1 text changed (e.g. 'd01') since the lock at {_locked_at(protocol)}")
    csv_path.write_text(original.replace("d01,good fun,fresh", "d01,good fun,rotten"))
    assert _refusal(capsys, protocol, tmp_path / "out")[0] == (
        f"Error: {protocol}: corpus: 1 reference label changed (e.g. 'd01': 'fresh' → 'rotten') since the lock "
        f"at {_locked_at(protocol)}")


def test_tuning_edit_after_lock_is_refused(tmp_path, capsys):
    write_corpus_csv(tmp_path, rows=[("t1", "good good", "fresh"), ("t2", "a story again", "plot")],
                     name="tuning.csv", strata=False)
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    protocol.write_text(protocol.read_text().replace('path = "corpus.csv"',
                                                     'path = "corpus.csv"\ntuning_path = "tuning.csv"'))
    lock(protocol)
    tuning = tmp_path / "tuning.csv"
    tuning.write_text(tuning.read_text() + "t3,boring again,rotten\n")
    assert _refusal(capsys, protocol, tmp_path / "out")[0] == (
        f"Error: {protocol}: tuning split: 1 new id (e.g. 't3') since the lock at {_locked_at(protocol)}")


def test_catalog_edit_after_lock_is_refused(tmp_path, capsys):
    from iteralab.kit.calcul_forfaits import DEFAULT_CATALOG

    shutil.copyfile(DEFAULT_CATALOG, tmp_path / "catalog.csv")
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    protocol.write_text(protocol.read_text() + '\n[catalog]\npath = "catalog.csv"\n')
    lock(protocol)
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(catalog.read_text().replace("110.00", "99.00"))
    line = _refusal(capsys, protocol, tmp_path / "out")[0]
    assert line.startswith(f"Error: {protocol}: catalog: catalog.csv changed (sha256 ")
    assert line.endswith(f"…) since the lock at {_locked_at(protocol)}")


def _hf_campaign(tmp_path, model_dir, passes=2):
    shutil.copytree(model_dir, tmp_path / "model")
    write_corpus_csv(tmp_path)
    protocol = write_protocol(tmp_path, passes=passes)
    lock(protocol)
    return protocol


def test_resume_after_weights_changed_is_refused_and_nothing_is_lost(tmp_path, capsys, tiny_classifier_dir):
    protocol = _hf_campaign(tmp_path, tiny_classifier_dir)
    out = tmp_path / "out"
    with pytest.raises(Stop):
        run_campaign(protocol, out, progress=_stop_after_first_pass)
    recorded = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    assert _refusal(capsys, protocol, out) == [
        f"Error: {protocol}: model files: model.safetensors changed since the lock at {_locked_at(protocol)}", HINT]
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == recorded


def test_resume_in_another_environment_is_refused_before_any_pass(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=2)
    out = tmp_path / "out"
    with pytest.raises(Stop):
        run_campaign(protocol, out, progress=_stop_after_first_pass)
    manifest = json.loads((out / "manifest.json").read_text())
    current = manifest["observed"]["environment"]["packages"]["torch"]
    manifest["observed"]["environment"]["packages"]["torch"] = "1.0.0"
    (out / "manifest.json").write_text(json.dumps(manifest))
    journal = (out / "journal.jsonl").read_bytes()
    err = _refusal(capsys, protocol, out)
    assert err[0] == (f"Error: {out}: resume refused: packages.torch was 1.0.0 for the passes already run, now "
                      f"{current}; the remaining passes would be another configuration")
    assert (out / "journal.jsonl").read_bytes() == journal


def test_lock_checks_inputs_before_recording(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    protocol.write_text(protocol.read_text().replace('path = "corpus.csv"',
                                                     'path = "corpus.csv"\ntext_column = "statement"'))
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"Error: {tmp_path / 'corpus.csv'} line 1: no text column 'statement' (columns found: 'id', "
                      "'text', 'label', 'stratum')")
    assert not lock_path(protocol).exists()
    protocol.write_text(protocol.read_text().replace('\ntext_column = "statement"', "")
                        .replace('callable = "fake_models:keyword_classifier"', 'callable = "no_such_module:f"'))
    assert main(["lock", str(protocol)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"Error: {protocol}: model.callable: module 'no_such_module' cannot be found")
    protocol.write_text(protocol.read_text().replace('kind = "callable"\ncallable = "no_such_module:f"',
                                                     'kind = "hf_classifier"\npath = "no-model"'))
    assert main(["lock", str(protocol)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"Error: {protocol}: model.path: folder {tmp_path / 'no-model'} does not exist")
    assert not lock_path(protocol).exists()


def test_relocking_same_protocol_after_input_change_is_refused(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1)
    csv_path = tmp_path / "corpus.csv"
    csv_path.write_text(csv_path.read_text().replace("d00,", "e00,"))
    with pytest.raises(ProtocolError, match=r"corpus: 1 id missing, 1 new id \(e.g. 'd00'\) since the lock"):
        lock(protocol)


@pytest.mark.parametrize("old, new, message", [
    ("threshold = 0.0", 'threshold = "0.8"', "key 'metric.threshold': expected a number, got the string '0.8'"),
    ("threshold = 0.0", "threshold = nan", "key 'metric.threshold': nan is not a finite number"),
    ("tolerance = 0.05", "tolerance = inf", "key 'metric.tolerance': inf is not a finite number"),
    ("passes = 2", 'passes = "5"', "key 'run.passes': expected a whole number, got the string '5'"),
    ("passes = 2", "passes = 5.0", "key 'run.passes': expected a whole number, got 5.0"),
    ("max_length = 32", "max_length = true", "key 'model.max_length': expected a whole number, got the boolean true"),
    ('question = "Which batch size is cheapest for the same verified result?"', "question = 7",
     "key 'question': expected a string, got int"),
])
def test_protocol_values_are_taken_as_written(old, new, message):
    text = protocol_toml().replace(old, new, 1)
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    assert str(err.value) == f"p.toml: {message}"


def test_lock_prints_schedule_and_refuses_a_huge_one(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, locked=False, passes=1_000_000)
    assert main(["lock", str(protocol)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"Error: {protocol}: 2 variants × 1000000 passes = 2,000,000 measured passes, rotated: more than 10,000 "
        "scheduled passes",
        "Hint: check run.passes and the variants; lock with --allow-large if this schedule is meant"]
    assert not lock_path(protocol).exists()
    assert main(["lock", str(protocol), "--allow-large"]) == 0
    assert "schedule: 2 variants × 1000000 passes = 2,000,000 measured passes, rotated" in capsys.readouterr().out


def test_stratum_subgroup_needs_declared_strata_and_a_tokenizer(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1, locked=False,
                                 subgroups='[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n')
    text = protocol.read_text()
    protocol.write_text(text.replace("strata = { short = [0, 8], long = [9] }\n", ""))
    with pytest.raises(ProtocolError) as err:
        lock(protocol)
    assert str(err.value) == (f"{protocol}: corpus.strata: a subgroup by 'stratum' needs the strata declared (e.g. "
                              "strata = { short = [0, 30], long = [31] }, token bounds, inclusive)")
    protocol.write_text(text.replace('\npath = "tokenizer"', ""))
    with pytest.raises(ProtocolError) as err:
        lock(protocol)
    assert str(err.value) == (f"{protocol}: model.path: length strata are counted with the model's tokenizer; this "
                              "callable names none")
    assert not lock_path(protocol).exists()


# ------------------------------------------ what the decision will not be able to do, said or refused at lock

NO_TASKS = ("calendar: no tasks, so decide will plan no window: it will price no rental{}; add dated "
            "[[calendar.tasks]] (raise 'version' and lock again) to price one")


def test_lock_warns_in_one_line_when_the_calendar_has_no_tasks(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    assert main(["lock", str(protocol)]) == 0
    assert capsys.readouterr().err.splitlines() == [f"Warning: {protocol}: " + NO_TASKS.format("")]
    assert lock_path(protocol).exists()  # a warning, not a refusal
    dated = tmp_path / "dated"
    dated.mkdir()
    protocol = callable_campaign(dated, passes=1, locked=False, extra='[calendar]\ndeadline = "2026-03-27T12:00"\n')
    assert main(["lock", str(protocol)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"Warning: {protocol}: " + NO_TASKS.format(" and cannot check the deadline 2026-03-27T12:00")]
    planned = tmp_path / "planned"
    planned.mkdir()
    protocol = callable_campaign(planned, passes=1, locked=False, extra=(
        '[calendar]\ntasks = [{ name = "all", start = "2026-03-23T09:00", end = "2026-03-27T09:00" }]\n'))
    assert main(["lock", str(protocol)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("calendar, message", [
    ('timezone = "Mars/Olympus"', "key 'calendar.timezone': unknown time zone 'Mars/Olympus'"),
    ('tasks = [{ name = "runs", start = "2026-03-27T09:00", end = "2026-03-23T09:00" }]',
     "key 'calendar.tasks[0] (runs).end': end 2026-03-23T09:00:00+00:00 is not after start 2026-03-27T09:00:00+00:00"),
    ('deadline = "2026-03-20T09:00"\ntasks = [{ name = "runs", start = "2026-03-23T09:00", end = "2026-03-27T09:00" }]',
     "key 'calendar.deadline': deadline 2026-03-20T09:00 is before the planned tasks end (task 'runs' ends "
     "2026-03-27T09:00): every configuration would miss it"),
])
def test_lock_refuses_a_calendar_that_decide_would_refuse(tmp_path, capsys, calendar, message):
    protocol = callable_campaign(tmp_path, passes=1, locked=False, extra=f"[calendar]\n{calendar}\n")
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0] == f"Error: {protocol}: {message}" and err[1].startswith("Hint: ")
    assert not lock_path(protocol).exists()


def test_lock_refuses_a_named_id_column_the_corpus_lacks(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, locked=False, corpus_extra='id_column = "doc_id"\n')
    assert main(["lock", str(protocol)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"Error: {tmp_path / 'corpus.csv'} line 1: no id column 'doc_id' (columns found: 'id', 'text', 'label', "
        "'stratum')",
        "Hint: check the spelling of corpus.id_column; without it, ids are derived from the texts"]
    assert not lock_path(protocol).exists()
    protocol.write_text(protocol.read_text().replace('id_column = "doc_id"', 'id_column = "id"'))
    assert main(["lock", str(protocol)]) == 0


def test_lock_says_in_one_line_when_ids_are_derived_from_the_texts(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in
                                                [("good fun", "fresh"), ("a story", "plot"), ("boring", "rotten")]))
    assert main(["lock", str(protocol)]) == 0
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"Warning: {protocol}: corpus.id_column: corpus.csv has no 'id' column and the protocol names none, so its "
        "ids are derived from the texts (content hash, recorded in the lock)"]
    assert json.loads(lock_path(protocol).read_text())["locks"][0]["inputs"]["corpus"]["id_origin"] == "content"
