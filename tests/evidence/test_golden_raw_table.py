"""The raw table (T1, T2) of a hand-written campaign folder, compared byte for byte with a golden CSV.

Nothing is run: the folder holds a locked protocol copy, the corpus copy, campaign.json, manifest.json, a
journal with fixed timestamps and fixed phase times, and the prediction files, all written here exactly as
the runner and a pass write them. ``write_raw_table`` must regenerate ``tests/golden/table/raw_table.csv``
from it; ``ITERALAB_UPDATE_GOLDEN=1`` rewrites the golden file (review its diff before keeping it). Apart
from the bytes, :func:`check_documented_cells` asserts the cells this docstring documents, on the produced
table and on the golden file; the update refuses to write a table that fails them, so a blind regeneration
cannot freeze a regression.

Campaign: one corpus (every row's ``dataset`` cell empty), protocol "golden-protocol" version 2, metric macro_f1 (threshold 0.5, tolerance 0.05, reference
variant b4), gating subgroup ``length`` by stratum, non-gating subgroup ``class`` by label, reproduction
target "bounded" (0.05), 4 rounds of the two variants of the series "precision": b4 (fp32) and b4-int8
(int8-dynamic), Williams order. The golden table's nine rows, in journal order:

1. r01-p01-b4-a1       ok, all 6 ids once, every label right: the reference pass, accepted (metric 1.0,
                       max_abs_prob_diff 0, docs_per_s 2.0).
2. r01-p02-b4-int8-a1  ok, quantized (``qint8 ... 12 layers``), d03 predicted wrong: below the reference
                       beyond the tolerance, gating subgroup length:long fails, probabilities 0.5 away from
                       the reference so the bounded reproduction fails; not accepted.
3. r02-p01-b4-int8-a1  ok, but d02 written twice: observed 7, duplicates 1, ids_match false, not accepted;
                       its manifest differs in one package version (manifest_diff and a note).
4. r02-p02-b4-a1       failed with an out-of-memory error after 4 of 6 inputs: pass_s and docs_per_s empty,
                       the prediction file holds the 4 completed ids (missing 2, coverage 0.666667); its
                       long stratum covers one text, a plot summary, so that stratum's macro-F1 averages the
                       plot class alone (the note lists the classes averaged).
5. r03-p01-b4-a1       aborted: started, its pass_finished line cut short (a damaged journal line), so the row
                       has only the schedule facts, ids_match false and the "aborted" note.
6. r03-p01-b4-a2       the same slot attempted again after the resume: ok and accepted, then excluded with a
                       reason (excluded true, exclusion_reason filled).
7. r03-p02-b4-int8-a1  ok, labels right, probabilities within 0.01 of the reference: accepted; its memory
                       could not be measured (empty cell, reason in notes).
8. r04-p01-b4-int8-a1  failed while loading: every phase, memory and prediction cell empty, the prediction
                       file is missing (observed_ids empty, coverage 0).
9. r04-p02-b4-a1       ok and accepted, a plain second reference-variant pass.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from iteralab.campaign.kinds.classification.output import encode

from iteralab.evidence.table import TABLE_NAME, write_raw_table

GOLDEN = (Path(__file__).resolve().parents[1] / "support") / "golden" / "table" / "raw_table.csv"
UPDATE = os.environ.get("ITERALAB_UPDATE_GOLDEN") == "1"

PROTOCOL = """schema_version = 1
name = "golden-protocol"
version = 2
question = "Does int8 keep the verified result of fp32 for a lower rental budget?"
scenario = "offline"

[corpus]
path = "corpus.csv"
classes = ["plot", "fresh", "rotten"]

[model]
kind = "hf_classifier"
path = "model"
max_length = 32

[metric]
name = "macro_f1"
threshold = 0.5
tolerance = 0.05
reference_variant = "b4"

[[subgroups]]
name = "length"
by = "stratum"
gating = true

[[subgroups]]
name = "class"
by = "label"
gating = false

[reproduction]
target = "bounded"
bound = 0.05

[warmup]
inputs = 2
passes = 1

[run]
passes = 4
isolation = "inprocess"
device = "cpu"

[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-int8"
batch_size = 4
precision = "int8-dynamic"

[[series]]
name = "precision"
factor = "precision"
variants = ["b4", "b4-int8"]
"""
CLASSES = ("plot", "fresh", "rotten")
CORPUS = [
    ("d00", "a story about a bank", "plot", "short"),
    ("d01", "good fun", "fresh", "short"),
    ("d02", "dull and long", "rotten", "short"),
    ("d03", 'the story of a dog, "told" twice', "plot", "long"),
    ("d04", "good acting, really good, and long enough", "fresh", "long"),
    ("d05", "boring from start to end, a weak script", "rotten", "long"),
]
DAY = "2026-03-23"
LOCKED_AT = f"{DAY}T08:00:00+00:00"
SOURCE = "/campaigns/golden/protocol.toml"
CPU_SCOPE = "process peak RSS (VmHWM) since process start (no reset requested)"
EXCLUSION_RULE = "a pass is excluded only for a documented external incident; the same rule applies to every variant"
QUANTIZATION = {"method": "torch.ao.quantization.quantize_dynamic", "dtype": "qint8", "modules": "torch.nn.Linear",
                "quantized_layers": 12, "engine": "x86", "torch_warnings": []}
VARIANTS = [
    {"name": "b4", "batch_size": 4, "precision": "fp32", "bucketing": False, "padding": "longest", "resume": False,
     "compile": False, "device": None},
    {"name": "b4-int8", "batch_size": 4, "precision": "int8-dynamic", "bucketing": False, "padding": "longest",
     "resume": False, "compile": False, "device": None},
]
SLOTS = [(1, 1, "b4"), (1, 2, "b4-int8"), (2, 1, "b4-int8"), (2, 2, "b4"),
         (3, 1, "b4"), (3, 2, "b4-int8"), (4, 1, "b4-int8"), (4, 2, "b4")]
NO_COMPILE = "compile_s: empty, the variant does not compile"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(items: list[str]) -> str:
    """The digest of a list of strings (common/digest.py), written out: each item's UTF-8 length as 8 bytes
    little-endian, then its bytes."""
    return _sha(b"".join(len(i.encode()).to_bytes(8, "little") + i.encode() for i in items))


def _json_file(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _journal_line(record: dict) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _probs(label: str, high: float = 0.8) -> list[float]:
    rest = round((1.0 - high) / 2, 7)
    return [high if c == label else rest for c in CLASSES]


def _prediction_bytes(records: list[tuple[str, str, list[float]]]) -> bytes:
    """The pass's format (Parquet: id, label, probs as float32), through the pass's own writer. The bytes, and so
    the recorded sha256, depend on pyarrow's version: regenerate the golden (ITERALAB_UPDATE_GOLDEN=1) after an
    upgrade that changes them, and check that only prediction_sha256 cells moved."""
    probs = np.asarray([p for _, _, p in records], dtype=np.float32).reshape(len(records), len(CLASSES))
    data = encode(pa.array([i for i, _, _ in records], pa.string()), list(CLASSES), probs)
    assert all(CLASSES[int(np.argmax(p))] == label for _, label, p in records)  # the writer derives the label
    return data


def _perfect() -> list[tuple[str, str, list[float]]]:
    return [(i, label, _probs(label)) for i, _, label, _ in CORPUS]


def _shifted() -> list[tuple[str, str, list[float]]]:
    """Right labels, each probability 0.01 away from the reference's: within the 0.05 bound."""
    out = []
    for i, _, label, _ in CORPUS:
        probs = [0.79 if c == label else 0.1 for c in CLASSES]
        probs[(CLASSES.index(label) + 1) % 3] = 0.11
        out.append((i, label, probs))
    return out


def _hf_workload(precision: str, quantization: dict | None) -> dict:
    return {"kind": "hf_classifier", "model_path": "/campaigns/golden/model", "model_class": "BertForSequenceClassification",
            "model_type": "bert", "classes": list(CLASSES), "precision": precision,
            "param_dtypes": ["float32"] if quantization is None else ["float32", "qint8"],
            "quantization": quantization, "compile": {"enabled": False}, "attn_implementation": "sdpa",
            "padding": "longest", "max_length": 32, "truncation": True, "device": "cpu",
            "parameter_count": 109484547, "trust_remote_code": False, "hub_revision": None,
            "tokenizer_class": "BertTokenizerFast", "head": None, "callable": None, "notes": []}


def _memory(rss: int | None) -> dict:
    if rss is None:
        return {"cpu_peak_rss_bytes": None, "scope": "process peak RSS",
                "reason": "not measured: /proc/self/status has no VmHWM on this platform"}
    return {"cpu_peak_rss_bytes": rss, "scope": CPU_SCOPE, "reason": None}


def build_folder(folder: Path) -> Path:
    """Write the campaign folder described in the module docstring; return it."""
    (folder / "inputs").mkdir(parents=True)
    (folder / "predictions").mkdir()
    protocol_bytes = PROTOCOL.encode("utf-8")
    (folder / "inputs" / "protocol.toml").write_bytes(protocol_bytes)
    protocol_sha = _sha(protocol_bytes)
    lock_entry = {"name": "golden-protocol", "version": 2, "sha256": protocol_sha, "locked_at": LOCKED_AT,
                  "protocol_file": "protocol.toml"}
    (folder / "inputs" / "protocol.toml.lock.json").write_text(
        _json_file({"schema_version": 1, "locks": [lock_entry]}), encoding="utf-8")

    # inputs/corpus.csv as the runner copies it: every cell quoted, "\n" line ends, a stratum column.
    corpus_text = "".join(",".join('"' + c.replace('"', '""') + '"' for c in row) + "\n"
                          for row in [("id", "text", "label", "stratum"), *CORPUS])
    (folder / "inputs" / "corpus.csv").write_bytes(corpus_text.encode("utf-8"))
    fingerprint = _digest([part for pair in sorted((i, t) for i, t, _, _ in CORPUS) for part in pair])
    corpus_order = _digest([i for i, *_ in CORPUS])
    pass_order = corpus_order  # the pass wrote the ids in file order

    campaign = {
        "schema_version": 1,
        "protocol": {"name": "golden-protocol", "version": 2, "sha256": protocol_sha, "locked_at": LOCKED_AT,
                     "source": SOURCE},
        "corpus": {"fingerprint": fingerprint, "order_hash": corpus_order, "size": len(CORPUS), "id_origin": "data",
                   "file": "inputs/corpus.csv", "file_sha256": _sha(corpus_text.encode("utf-8")),
                   "strata": {"long": 3, "short": 3}},
        "model": {"kind": "hf_classifier", "path": "/campaigns/golden/model", "head": None, "callable": None,
                  "max_length": 32, "truncation": True, "trust_remote_code": False},
        "schedule": {"design": "williams",
                     "slots": [{"round": r, "position": p, "variant": v, "seed": 0} for r, p, v in SLOTS]},
        "variants": VARIANTS,
        "series": [{"name": "precision", "factor": "precision", "variants": ["b4", "b4-int8"]}],
    }
    (folder / "campaign.json").write_text(_json_file(campaign), encoding="utf-8")
    environment = {"packages": {"torch": "2.13.0+cpu", "transformers": "4.57.1"},
                   "device_inventory": {"backend": "cpu", "torch": "2.13.0+cpu", "gpu_count": 0, "gpus": [],
                                        "driver_version": None, "cpu": {"model": "Test CPU 8-core"}}}
    manifest = {"schema_version": 1, "corpus": {"fingerprint": fingerprint, "order_hash": corpus_order},
                "workload": _hf_workload("fp32", None), "file_hashes": {"model.safetensors": "a" * 64},
                "environment": environment, "seeds": [0],
                "reproduction_target": {"target": "bounded", "bound": 0.05, "seeds": [0], "deterministic": True},
                "extra": {"first_pass": "r01-p01-b4-a1"},
                "observed": {"environment": environment, "file_hashes": {"model.safetensors": "a" * 64}}}
    (folder / "manifest.json").write_text(_json_file(manifest), encoding="utf-8")

    journal: list[str] = [_journal_line({"event": "campaign_started", "at": f"{DAY}T09:00:00.000+00:00",
                                         "protocol_sha256": protocol_sha, "corpus_fingerprint": fingerprint})]
    summary = {"devices": environment["device_inventory"]}

    def started(minute: int, pid: str, rnd: int, pos: int, variant: str, attempt: int = 1) -> None:
        journal.append(_journal_line({"event": "pass_started", "at": f"{DAY}T10:{minute:02d}:00.000+00:00",
                                      "pass_id": pid, "variant": variant, "round": rnd, "position": pos, "seed": 0,
                                      "attempt": attempt}))

    def finished(minute: int, pid: str, *, records, status="ok", phases, completed, expected=6, error=None,
                 error_kind=None, memory, workload, notes, manifest_diff=(), evaluation_s=0.125) -> None:
        pred_file = pred_sha = None
        if records is not None:
            data = _prediction_bytes(records)
            (folder / "predictions" / f"{pid}.parquet").write_bytes(data)
            pred_file, pred_sha = f"predictions/{pid}.parquet", _sha(data)
        result = {"pass_id": pid, "phases": phases, "notes": notes, "status": status, "completed": completed,
                  "expected": expected, "error": error, "retries": 0, "prediction_file": pred_file,
                  "prediction_sha256": pred_sha, "memory": memory, "workload": workload}
        if error_kind is not None:
            result["error_kind"] = error_kind
        if records is not None:
            result["order_hash"] = pass_order
        journal.append(_journal_line({"event": "pass_finished", "at": f"{DAY}T10:{minute:02d}:30.000+00:00",
                                      "manifest_diff": list(manifest_diff), "environment_summary": summary,
                                      **result}))
        journal.append(_journal_line({"event": "pass_evaluated", "at": f"{DAY}T10:{minute:02d}:40.000+00:00",
                                      "pass_id": pid, "evaluation_s": evaluation_s, "intrinsic": {}}))

    def phases(pass_s, load_s=2.5, warmup_s=0.375, writing_s=0.015625):
        return {"load_s": load_s, "compile_s": None, "warmup_s": warmup_s, "pass_s": pass_s, "writing_s": writing_s}

    fp32, int8 = _hf_workload("fp32", None), _hf_workload("int8-dynamic", QUANTIZATION)

    # 1. the reference pass
    started(1, "r01-p01-b4-a1", 1, 1, "b4")
    finished(1, "r01-p01-b4-a1", records=_perfect(), phases=phases(3.0), completed=6,
             memory=_memory(734003200), workload=fp32, notes=[NO_COMPILE])
    # 2. int8, one label wrong and probabilities far from the reference
    wrong = [(i, "fresh", [0.3, 0.6, 0.1]) if i == "d03" else (i, label, probs) for i, label, probs in _shifted()]
    started(2, "r01-p02-b4-int8-a1", 1, 2, "b4-int8")
    finished(2, "r01-p02-b4-int8-a1", records=wrong, phases=phases(1.5), completed=6,
             memory=_memory(612368384), workload=int8, notes=[NO_COMPILE])
    # 3. int8, d02 written twice
    dup = _shifted()
    dup.insert(3, dup[2])
    started(3, "r02-p01-b4-int8-a1", 2, 1, "b4-int8")
    finished(3, "r02-p01-b4-int8-a1", records=dup, phases=phases(1.25), completed=6,
             memory=_memory(612368384), workload=int8, notes=[NO_COMPILE],
             manifest_diff=["environment.packages.transformers"])
    # 4. fp32, out of memory after the first batch of 4
    err = "MemoryError: out of memory (simulated)"
    started(4, "r02-p02-b4-a1", 2, 2, "b4")
    finished(4, "r02-p02-b4-a1", records=_perfect()[:4], status="failed", phases=phases(None), completed=4,
             error=err, error_kind="oom", memory=_memory(2147483648), workload=fp32,
             notes=[NO_COMPILE, f"failed after 4 of 6 inputs: {err}; no retry with a smaller batch",
                    "pass_s: empty, the measured pass did not complete"])
    # 5. aborted: the pass_finished line was cut short by a kill
    started(5, "r03-p01-b4-a1", 3, 1, "b4")
    journal.append('{"at": "2026-03-23T10:05:30.000+00:00", "completed": 6, "environment_summary": {"dev\n')
    journal.append(_journal_line({"event": "campaign_resumed", "at": f"{DAY}T11:00:00.000+00:00",
                                  "aborted": ["r03-p01-b4-a1"]}))
    # 6. the same slot again: ok, excluded later
    started(6, "r03-p01-b4-a2", 3, 1, "b4", attempt=2)
    finished(6, "r03-p01-b4-a2", records=_perfect(), phases=phases(3.25), completed=6,
             memory=_memory(734003200), workload=fp32, notes=[NO_COMPILE], evaluation_s=0.25)
    # 7. int8 within the bound; memory not measured
    started(7, "r03-p02-b4-int8-a1", 3, 2, "b4-int8")
    finished(7, "r03-p02-b4-int8-a1", records=_shifted(), phases=phases(1.75), completed=6,
             memory=_memory(None), workload=int8, notes=[NO_COMPILE])
    # 8. int8 failed while loading: no prediction file, no measurement
    load_err = "OSError: model/model.safetensors: Input/output error"
    started(8, "r04-p01-b4-int8-a1", 4, 1, "b4-int8")
    finished(8, "r04-p01-b4-int8-a1", records=None, status="failed",
             phases={k: None for k in ("load_s", "compile_s", "warmup_s", "pass_s", "writing_s")}, completed=0,
             expected=None, error=load_err, error_kind="load", memory=None, workload=None,
             notes=[f"failed while loading: {load_err}"], evaluation_s=0.0625)
    # 9. a plain reference-variant pass
    started(9, "r04-p02-b4-a1", 4, 2, "b4")
    finished(9, "r04-p02-b4-a1", records=_perfect(), phases=phases(2.75), completed=6,
             memory=_memory(735051776), workload=fp32, notes=[NO_COMPILE])
    journal.append(_journal_line({"event": "pass_excluded", "at": f"{DAY}T12:00:00.000+00:00",
                                  "pass_id": "r03-p01-b4-a2", "variant": "b4",
                                  "reason": "host backup ran during the pass", "rule": EXCLUSION_RULE}))
    (folder / "journal.jsonl").write_bytes("".join(journal).encode("utf-8"))
    return folder


PASS_IDS = ["r01-p01-b4-a1", "r01-p02-b4-int8-a1", "r02-p01-b4-int8-a1", "r02-p02-b4-a1", "r03-p01-b4-a1",
            "r03-p01-b4-a2", "r03-p02-b4-int8-a1", "r04-p01-b4-int8-a1", "r04-p02-b4-a1"]
PHASE_CELLS = ("load_s", "compile_s", "warmup_s", "pass_s", "writing_s")
MEMORY_CELLS = ("cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "memory_scope")
#: macro-F1 of pass 2 (d03, a plot, predicted fresh): plot F1 2/3 (P 1, R 1/2), fresh F1 4/5 (P 2/3, R 1),
#: rotten 1 → 37/45; its long stratum (d03, d04, d05): plot 0, fresh 2/3, rotten 1 → 5/9.
INT8_WRONG_METRIC, INT8_WRONG_LONG = 37 / 45, 5 / 9


def _rows(table: bytes) -> dict[str, dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(table.decode("utf-8"), newline="")))
    assert [r["pass_id"] for r in rows] == PASS_IDS, "nine rows, in journal order"
    return {r["pass_id"]: r for r in rows}


def _notes(row: dict[str, str]) -> list[str]:
    return row["notes"].split(" | ") if row["notes"] else []


def check_documented_cells(table: bytes, folder: Path | None = None) -> None:
    """Assert the cells the module docstring documents, row by row, by column name (a new column does not
    disturb them). ``folder``: the campaign folder the table was written from, to check the prediction hashes
    against the files themselves."""
    rows = _rows(table)
    for pid, row in rows.items():
        assert (row["protocol_name"], row["protocol_version"], row["seed"], row["series"]) == \
            ("golden-protocol", "2", "0", "precision"), pid
        assert row["variant"] == ("b4-int8" if "int8" in pid else "b4"), pid
        assert row["dataset"] == "", pid  # one corpus: the dataset column is there, its cell empty
        assert (row["round"], row["position"], row["attempt"]) == (pid[1:3].lstrip("0"), pid[5:7].lstrip("0"),
                                                                     pid[-1]), pid
        assert row["precision"] == ("int8-dynamic" if "int8" in pid else "fp32"), pid
        assert row["excluded"] == ("" if row["status"] == "aborted" else
                                   "true" if pid == "r03-p01-b4-a2" else "false"), pid
        if row["status"] != "aborted":
            assert row["metric_name"] == "macro_f1" and row["metric_ref"] == "1.000000", pid
        if folder is not None and row["prediction_file"]:
            assert row["prediction_sha256"] == _sha((folder / row["prediction_file"]).read_bytes()), pid
    accepted = [pid for pid, r in rows.items() if r["corpus_accepted"] == "true"]
    assert accepted == ["r01-p01-b4-a1", "r03-p01-b4-a2", "r03-p02-b4-int8-a1", "r04-p02-b4-a1"]
    assert [pid for pid, r in rows.items() if r["corpus_accepted"] != "false"] == accepted

    ref = rows["r01-p01-b4-a1"]  # 1. the reference pass
    assert (ref["status"], ref["observed_ids"], ref["ids_match"], ref["duplicates"], ref["coverage"]) == \
        ("ok", "6", "true", "0", "1.000000")
    assert (ref["metric"], ref["metric_delta"], ref["max_abs_prob_diff"], ref["docs_per_s"], ref["pass_s"]) == \
        ("1.000000", "0.000000", "0.000000", "2.000000", "3.000000")
    assert (ref["threshold_ok"], ref["tolerance_ok"], ref["subgroups_ok"], ref["reproduction_ok"]) == \
        ("true",) * 4

    wrong = rows["r01-p02-b4-int8-a1"]  # 2. int8, d03 wrong, probabilities 0.5 away
    assert wrong["status"] == "ok" and wrong["ids_match"] == "true" and wrong["coverage"] == "1.000000"
    assert "qint8" in wrong["quantization"] and "12 layers" in wrong["quantization"]
    assert float(wrong["metric"]) == pytest.approx(INT8_WRONG_METRIC, abs=1e-6)
    assert float(wrong["metric_delta"]) == pytest.approx(INT8_WRONG_METRIC - 1, abs=1e-6)
    assert json.loads(wrong["subgroup_metrics"])["length:long"] == pytest.approx(INT8_WRONG_LONG)
    assert json.loads(wrong["subgroup_metrics"])["length:short"] == 1.0
    assert (wrong["threshold_ok"], wrong["tolerance_ok"], wrong["subgroups_ok"]) == ("true", "false", "false")
    assert (wrong["max_abs_prob_diff"], wrong["label_agreement"], wrong["reproduction_ok"]) == \
        ("0.500000", "0.833333", "false")
    assert "not accepted: outside tolerance, subgroup length:long, reproduction target 'bounded'" in _notes(wrong)

    dup = rows["r02-p01-b4-int8-a1"]  # 3. d02 written twice
    assert (dup["status"], dup["expected_ids"], dup["observed_ids"], dup["duplicates"], dup["missing"],
            dup["extra"], dup["ids_match"]) == ("ok", "6", "7", "1", "0", "0", "false")
    assert (dup["metric"], dup["tolerance_ok"], dup["reproduction_ok"]) == ("1.000000", "true", "true")
    assert dup["manifest_diff"] == "environment.packages.transformers"
    assert "manifest differs from the campaign's in: environment.packages.transformers" in _notes(dup)
    assert "not accepted: ids do not match" in _notes(dup)

    oom = rows["r02-p02-b4-a1"]  # 4. out of memory after 4 of 6 inputs
    assert (oom["status"], oom["pass_s"], oom["docs_per_s"], oom["completed"], oom["observed_ids"],
            oom["missing"], oom["coverage"], oom["ids_match"]) == \
        ("failed", "", "", "4", "4", "2", "0.666667", "false")
    assert oom["error"] == "MemoryError: out of memory (simulated)"
    assert oom["prediction_file"] == "predictions/r02-p02-b4-a1.parquet"
    assert json.loads(oom["subgroup_metrics"])["length:long"] == 1.0
    assert 'subgroup classes averaged (a class absent from the subgroup is left out of its macro_f1): ' \
           '{"length:long": ["plot"]}' in _notes(oom)
    assert "pass_s: empty, the measured pass did not complete" in _notes(oom)

    aborted = rows["r03-p01-b4-a1"]  # 5. aborted: only the schedule facts
    assert (aborted["status"], aborted["ids_match"], aborted["corpus_accepted"], aborted["expected_ids"]) == \
        ("aborted", "false", "false", "6")
    measured = ("observed_ids", "duplicates", "missing", "coverage", "completed", "metric", "metric_delta",
                "threshold_ok", "tolerance_ok", "subgroups_ok", "subgroup_metrics", "label_agreement",
                "max_abs_prob_diff", "reproduction_ok", "prediction_file", "prediction_sha256", "error",
                "evaluation_s", "docs_per_s")
    assert {k: aborted[k] for k in (*measured, *PHASE_CELLS, *MEMORY_CELLS) if aborted[k] != ""} == {}
    assert aborted["notes"].startswith("aborted: the process ended during this pass")

    again = rows["r03-p01-b4-a2"]  # 6. the slot again, accepted, then excluded
    assert (again["status"], again["attempt"], again["ids_match"], again["corpus_accepted"]) == \
        ("ok", "2", "true", "true")
    assert (again["excluded"], again["exclusion_reason"]) == ("true", "host backup ran during the pass")
    assert [r["exclusion_reason"] for p, r in rows.items() if p != "r03-p01-b4-a2"] == [""] * 8

    bounded = rows["r03-p02-b4-int8-a1"]  # 7. within the bound, memory not measured
    assert (bounded["status"], bounded["ids_match"], bounded["max_abs_prob_diff"], bounded["reproduction_ok"]) == \
        ("ok", "true", "0.010000", "true")
    assert bounded["cpu_peak_rss_bytes"] == ""
    assert "memory: not measured: /proc/self/status has no VmHWM on this platform" in _notes(bounded)

    load = rows["r04-p01-b4-int8-a1"]  # 8. failed while loading
    assert (load["status"], load["observed_ids"], load["coverage"], load["completed"], load["ids_match"]) == \
        ("failed", "", "0.000000", "0", "false")
    assert {k: load[k] for k in (*PHASE_CELLS, *MEMORY_CELLS, "prediction_file", "prediction_sha256",
                                 "docs_per_s", "metric") if load[k] != ""} == {}
    assert load["error"] == "OSError: model/model.safetensors: Input/output error"
    assert "prediction file r04-p01-b4-int8-a1.parquet is missing" in _notes(load)

    plain = rows["r04-p02-b4-a1"]  # 9. a plain second reference-variant pass
    assert (plain["status"], plain["ids_match"], plain["metric"], plain["max_abs_prob_diff"],
            plain["corpus_accepted"]) == ("ok", "true", "1.000000", "0.000000", "true")

    # the cells of every row that completed with its ids, and of none other
    assert [p for p, r in rows.items() if r["ids_match"] == "true"] == \
        ["r01-p01-b4-a1", "r01-p02-b4-int8-a1", "r03-p01-b4-a2", "r03-p02-b4-int8-a1", "r04-p02-b4-a1"]


def compare_or_update(produced: bytes, golden: Path, update: bool, folder: Path | None = None) -> None:
    """The documented cells first: ``update`` writes ``golden`` only when they hold; then the bytes."""
    check_documented_cells(produced, folder)
    if update:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(produced)
    assert golden.is_file(), f"missing golden file {golden}; set ITERALAB_UPDATE_GOLDEN=1 to write it"
    assert produced == golden.read_bytes()


def test_raw_table_matches_golden_byte_for_byte(tmp_path):
    folder = build_folder(tmp_path / "camp")
    target = write_raw_table(folder)
    assert target == folder / TABLE_NAME
    compare_or_update(target.read_bytes(), GOLDEN, UPDATE, folder)


def test_golden_file_holds_the_documented_cells():
    check_documented_cells(GOLDEN.read_bytes())


@pytest.mark.parametrize("pass_id, column, value", [
    ("r02-p01-b4-int8-a1", "ids_match", "true"),
    ("r02-p01-b4-int8-a1", "duplicates", "0"),
    ("r01-p02-b4-int8-a1", "metric", "1.000000"),
    ("r02-p02-b4-a1", "coverage", "1.000000"),
    ("r04-p01-b4-int8-a1", "load_s", "2.500000"),
    ("r03-p01-b4-a1", "status", "ok"),
    ("r01-p02-b4-int8-a1", "subgroup_metrics", '{"length:long": 1.0, "length:short": 1.0}'),
    ("r03-p02-b4-int8-a1", "corpus_accepted", "false"),
])
def test_update_refuses_a_table_whose_documented_cells_changed(tmp_path, pass_id, column, value):
    """One regressed cell: the comparison fails and ITERALAB_UPDATE_GOLDEN writes nothing."""
    folder = build_folder(tmp_path / "camp")
    rows = list(csv.DictReader(io.StringIO(write_raw_table(folder).read_text(encoding="utf-8"), newline="")))
    for row in rows:
        if row["pass_id"] == pass_id:
            row[column] = value
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    golden = tmp_path / "golden" / "raw_table.csv"
    with pytest.raises(AssertionError):
        compare_or_update(out.getvalue().encode("utf-8"), golden, True, folder)
    assert not golden.exists()


def test_raw_table_does_not_depend_on_the_folder_location(tmp_path):
    first = write_raw_table(build_folder(tmp_path / "one")).read_bytes()
    second = write_raw_table(build_folder(tmp_path / "elsewhere" / "two")).read_bytes()
    assert first == second
