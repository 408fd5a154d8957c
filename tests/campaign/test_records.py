"""The records a pass exchanges (spec, result, failure, output) and the phases: one definition each, one JSON form.

The journal's ``pass_finished`` records are written through :class:`PassResult`, so a record read back and
written again is the same record: existing campaign folders read the same (the golden raw table proves the
reading side byte for byte)."""

import json
from pathlib import Path

import pytest

import fake_models
from campaign_factory import callable_campaign
from iteralab.campaign import folder
from iteralab.campaign.campaignrecord import (CampaignRecord, CampaignRecordError, SourceRecord, read_campaign,
                                              write_campaign)
from iteralab.campaign.journal import JOURNAL_NAME, read_journal
from iteralab.campaign.manifest import Manifest, read_manifest, rocm_compatibility, write_manifest
from iteralab.campaign.records import (CLASS_PROBABILITIES, PHASES, RUNNER_PHASES, STARTUP_PHASES, WORKER_PHASES,
                                       PassOutput, PassResult, PassSpec, failure, started)
from iteralab.common.files import dumps_json
from iteralab.errors import ProtocolError, RunError
from iteralab.plan.lockfile import LockEntry


def _spec_json(**changes):
    return {"pass_id": "r01-p01-b4-a1", "variant": {"name": "b4", "batch_size": 4}, "model": {"kind": "callable"},
            "classes": ["neg", "pos"], "corpus_path": "/c/inputs/corpus.csv", "prediction_dir": "/c/predictions",
            "warmup": {"inputs": 2, "passes": 1}, **changes}


# --------------------------------------------------------------------------------------------- phases


def test_every_phase_is_the_workers_or_the_runners_and_the_raw_table_lists_them_in_order():
    assert set(WORKER_PHASES) | set(RUNNER_PHASES) == set(PHASES) and not set(WORKER_PHASES) & set(RUNNER_PHASES)
    assert RUNNER_PHASES == ("evaluation_s",) and set(STARTUP_PHASES) < set(WORKER_PHASES)
    assert folder.PHASES is PHASES
    start = folder.COLUMNS.index(PHASES[0])
    assert folder.COLUMNS[start:start + len(PHASES)] == PHASES


# --------------------------------------------------------------------------------------------- the spec


def test_a_spec_reads_back_as_it_was_written():
    spec = PassSpec.from_json(_spec_json(seed=3, documents=12))
    assert spec.classes == ("neg", "pos") and spec.seed == 3 and spec.documents == 12 and spec.device == "auto"
    assert PassSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert spec.to_json()["classes"] == ["neg", "pos"]
    assert spec.with_changes(spawned_at=1.5).spawned_at == 1.5 and spec.spawned_at is None


def test_a_spec_with_an_unknown_or_missing_field_is_refused_by_name():
    with pytest.raises(RunError, match="spec.json: unknown field.s. workdir"):
        PassSpec.from_json(_spec_json(workdir="/tmp"), "spec.json")
    record = _spec_json()
    del record["corpus_path"]
    with pytest.raises(RunError, match="missing field.s. corpus_path"):
        PassSpec.from_json(record)


# --------------------------------------------------------------------------------------------- the result


def test_a_failure_has_every_worker_phase_empty_its_error_and_its_kind():
    record = failure("p1", "worker process ended (signal 9) without a result: ", "crash", completed=None,
                     retries=None, notes=["completed: unknown"])
    assert record["phases"] == dict.fromkeys(WORKER_PHASES)
    assert record["status"] == "failed" and record["error_kind"] == "crash"
    assert record["completed"] is None and record["retries"] is None  # unknown, never 0
    assert record["prediction_file"] is None and record["notes"] == ["completed: unknown"]
    assert failure("p1", "load failed", "load")["completed"] == 0  # a pass that never started processed nothing
    assert PassResult.from_json(record).to_json() == record


def test_a_running_pass_has_no_error_kind_until_it_fails():
    record = started("p1", engine="ray")
    assert "error_kind" not in record and record["status"] == "failed" and record["engine"] == "ray"
    assert record["startup"] == {} and record["file_hashes"] is None


def test_a_result_reads_back_as_it_was_written_engine_keys_included():
    record = {**started("p1"), "status": "ok", "completed": 12, "expected": 12, "order_hash": "ab",
              "concurrent_load": {"flagged": False}, "prediction_file": "predictions/p1.parquet",
              "prediction_sha256": "cd", "startup": {"imports_s": 0.5}, "file_hashes": {"w": "ef"},
              "environment": {"python": {"version": "3.11"}}}
    record["phases"]["pass_s"] = 2.0
    result = PassResult.from_json(record)
    assert result.ok and result.phase("pass_s") == 2.0 and result.completed == 12
    assert result.output == PassOutput(CLASS_PROBABILITIES, "predictions/p1.parquet", "cd")
    assert result.extra == {"order_hash": "ab", "concurrent_load": {"flagged": False}}
    assert result.to_json() == record
    journaled = result.to_json(journal=True)
    assert "environment" not in journaled and "file_hashes" not in journaled
    assert journaled == {k: v for k, v in record.items() if k not in ("environment", "file_hashes")}


def test_the_output_of_a_pass_has_a_kind_and_an_unknown_kind_is_refused():
    assert PassResult.from_json(failure("p1", "x", "load")).output.kind == CLASS_PROBABILITIES
    assert "output_kind" not in PassOutput(file="predictions/p1.parquet").to_json()  # journals stay as they were
    with pytest.raises(RunError, match="kind 'embeddings' is not one of"):
        PassResult.from_json({**failure("p1", "x", "load"), "output_kind": "embeddings"})


def test_a_record_without_a_status_is_not_a_result():
    with pytest.raises(RunError, match="pass result: no status"):
        PassResult.from_json({"pass_id": "p1"})


@pytest.mark.parametrize("fn, status", [("fake_models:keyword_classifier", "ok"),
                                        ("fake_models:oom_on_third_call", "failed")])
def test_every_pass_finished_record_a_run_writes_reads_back_unchanged(tmp_path, fn, status):
    """The journal is written through the typed record, a success and a failure alike."""
    from iteralab.campaign.runner import run_passes

    fake_models.CALLS.clear()  # the failing model fails its third call: counted from this run
    protocol = callable_campaign(tmp_path, fn=fn, passes=1, isolation="inprocess", warmup="inputs = 0\npasses = 0")
    out = tmp_path / "out"
    run_passes(protocol, out)
    state = read_journal(out / JOURNAL_NAME)
    results = [PassResult.from_json(record) for record in state.finished.values()]
    assert status in {r.status for r in results}
    for record, result in zip(state.finished.values(), results):
        assert result.to_json(journal=True) == record
        assert set(result.phases) == set(WORKER_PHASES)
        assert result.output.file == f"{folder.PREDICTIONS}/{result.pass_id}.parquet"
        assert (result.error_kind is None) == result.ok


def test_a_prediction_file_holds_the_ids_and_one_output_kinds_columns():
    from iteralab.campaign.kinds.classification.output import OUTPUT_COLUMNS, schema

    assert set(OUTPUT_COLUMNS) == {CLASS_PROBABILITIES}
    assert tuple(schema(3).names) == ("id", *OUTPUT_COLUMNS[CLASS_PROBABILITIES])


def test_a_crash_record_of_an_earlier_run_reads_as_the_one_written_now():
    """Before the one constructor, a crashed worker's record held only its error, kind, count and notes."""
    earlier = {"pass_id": "p1", "status": "failed", "completed": None, "error_kind": "crash",
               "error": "worker process ended (signal 9) without a result: ", "notes": ["completed: unknown"]}
    now = PassResult.from_json(failure("p1", earlier["error"], "crash", completed=None, retries=None,
                                       notes=earlier["notes"]))
    read = PassResult.from_json(earlier)
    assert all(read.phase(p) is None and now.phase(p) is None for p in WORKER_PHASES)
    assert read.with_changes(phases=now.phases) == now


# --------------------------------------------------------------------------------------------- campaign.json

#: A stored campaign.json of an embedding job over two datasets, with a carried routine (the form on disk).
CAMPAIGN_SAMPLE = (Path(__file__).resolve().parents[1] / "support") / "golden" / "records" / "campaign.json"


def test_a_campaign_record_reads_and_writes_back_the_stored_form(tmp_path):
    stored = json.loads(CAMPAIGN_SAMPLE.read_text(encoding="utf-8"))
    record = read_campaign(CAMPAIGN_SAMPLE, tmp_path / "no-protocol.toml")
    assert record.kind == "embedding" and record.protocol.version == 3 and record.corpus.datasets == ("2026-10",
                                                                                                     "2026-11")
    assert [name for name, _ in record.sources()] == ["2026-10", "2026-11"]
    assert record.source("2026-11").size == 12 and record.source(None) is None
    assert record.model.job["embedding"]["pooling"] == "mean" and record.model.files["config.json"]["carried"]
    assert record.slots[1]["dataset"] == "2026-11" and record.routine["ref"] == "my_metric:score"
    write_campaign(tmp_path / "campaign.json", record)
    assert (tmp_path / "campaign.json").read_text(encoding="utf-8") == CAMPAIGN_SAMPLE.read_text(encoding="utf-8")
    assert record.to_json() == stored
    assert CampaignRecord.from_json(json.loads(json.dumps(record.to_json())), "again") == record


def test_a_one_corpus_record_has_its_corpus_as_its_only_source_and_no_optional_keys(tmp_path):
    stored = json.loads(CAMPAIGN_SAMPLE.read_text(encoding="utf-8"))
    for key in ("datasets", "routine"):
        del stored[key]
    del stored["corpus"]["datasets"]
    record = CampaignRecord.from_json(stored, "campaign.json")
    assert record.sources() == ((None, record.corpus),) and record.source(None).size == 24
    assert record.to_json() == stored  # no datasets, routine or queries key written for a campaign without them


def test_a_folder_written_before_the_kind_was_recorded_reads_it_from_its_protocol_copy(tmp_path):
    stored = json.loads(CAMPAIGN_SAMPLE.read_text(encoding="utf-8"))
    del stored["kind"]
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(stored), encoding="utf-8")
    protocol = tmp_path / "protocol.toml"
    assert read_campaign(path, protocol).kind == "classification"  # no protocol copy: the protocol's default
    protocol.write_text('name = "x"\n[task]\nkind = "generation"\n', encoding="utf-8")
    assert read_campaign(path, protocol).kind == "generation"
    protocol.write_text('name = "x"\n', encoding="utf-8")
    assert read_campaign(path, protocol).kind == "classification"


def test_a_damaged_campaign_record_is_refused_by_field(tmp_path):
    stored = json.loads(CAMPAIGN_SAMPLE.read_text(encoding="utf-8"))
    del stored["schedule"]
    with pytest.raises(CampaignRecordError, match="campaign.json: missing field.s. schedule"):
        CampaignRecord.from_json(stored, "campaign.json")
    with pytest.raises(CampaignRecordError, match="missing field.s. size"):
        SourceRecord.from_json({"fingerprint": "f", "order_hash": "o"}, "campaign.json")
    path = tmp_path / "campaign.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(CampaignRecordError, match="not valid JSON"):
        read_campaign(path, tmp_path / "protocol.toml")
    assert read_campaign(tmp_path / "absent.json", tmp_path / "protocol.toml") is None


def test_a_campaign_records_its_kind_once_and_its_folder_reads_it_typed(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "out"
    from iteralab.campaign.runner import prepare

    record = prepare(protocol, out)
    assert json.loads((out / folder.CAMPAIGN).read_text(encoding="utf-8"))["kind"] == "classification"
    opened = folder.CampaignFolder.open(out)
    assert opened.campaign == record and opened.corpus_size == record.corpus.size


# --------------------------------------------------------------------------------------------- manifest.json

MANIFEST_SAMPLE = (Path(__file__).resolve().parents[1] / "support") / "golden" / "records" / "manifest.json"


def test_a_manifest_reads_and_writes_back_the_stored_form(tmp_path):
    manifest = read_manifest(MANIFEST_SAMPLE)
    assert manifest.corpus["order_hash"].startswith("1b3d") and manifest.seeds == (0,)
    assert manifest.observed["workload"] == {"kind": "callable"} and manifest.extra["first_pass"] == "r01-p01-b4-a1"
    assert rocm_compatibility(manifest) is None  # written on a CPU, before C4 was recorded
    write_manifest(tmp_path / "manifest.json", manifest)
    assert (tmp_path / "manifest.json").read_text(encoding="utf-8") == MANIFEST_SAMPLE.read_text(encoding="utf-8")
    assert read_manifest(tmp_path / "absent.json") is None


def test_a_manifest_before_its_first_pass_has_no_observed_key_and_one_without_corpus_is_refused():
    stored = json.loads(MANIFEST_SAMPLE.read_text(encoding="utf-8"))
    del stored["observed"]
    manifest = Manifest.from_json(stored, "manifest.json")
    assert manifest.observed is None and manifest.to_json() == stored
    assert manifest.with_observed({"workload": {}}).to_json()["observed"] == {"workload": {}}
    with pytest.raises(RunError, match="manifest.json: not a campaign manifest"):
        Manifest.from_json({"schema_version": 1}, "manifest.json")


# --------------------------------------------------------------------------------------------- the lock entry

LOCK_SAMPLE = (Path(__file__).resolve().parents[1] / "support") / "golden" / "records" / "protocol.toml.lock.json"


def test_lock_entries_read_and_write_back_the_stored_form_an_early_one_without_inputs_included():
    stored = json.loads(LOCK_SAMPLE.read_text(encoding="utf-8"))
    early, entry = (LockEntry.from_json(e, LOCK_SAMPLE) for e in stored["locks"])
    assert early.inputs is None and early.schedule is None and early.version == 2
    assert entry.inputs["corpus"]["size"] == 24 and entry.protocol_file == "protocol.toml"
    written = {"schema_version": 1, "locks": [early.to_json(), entry.to_json()]}
    assert dumps_json(written) == LOCK_SAMPLE.read_text(encoding="utf-8")
    with pytest.raises(ProtocolError, match="not a protocol lock file"):
        LockEntry.from_json({"name": "x", "version": 1}, LOCK_SAMPLE)
