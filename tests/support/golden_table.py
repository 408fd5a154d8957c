"""The hand-built campaign folder behind the golden raw table: its protocol, corpus, predictions and journal, built
byte for byte so that the table it yields is the golden one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from iteralab.campaign.kinds.classification.output import encode


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


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(items: list[str]) -> str:
    """The digest of a list of strings (common/digest.py), written out: each item's UTF-8 length as 8 bytes
    little-endian, then its bytes."""
    return sha256_hex(b"".join(len(i.encode()).to_bytes(8, "little") + i.encode() for i in items))


def _json_file(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _journal_line(record: dict) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def label_probs(label: str, high: float = 0.8) -> list[float]:
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


def perfect_predictions() -> list[tuple[str, str, list[float]]]:
    return [(i, label, label_probs(label)) for i, _, label, _ in CORPUS]


def shifted_predictions() -> list[tuple[str, str, list[float]]]:
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
    protocol_sha = sha256_hex(protocol_bytes)
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
                   "file": "inputs/corpus.csv", "file_sha256": sha256_hex(corpus_text.encode("utf-8")),
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
            pred_file, pred_sha = f"predictions/{pid}.parquet", sha256_hex(data)
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
    finished(1, "r01-p01-b4-a1", records=perfect_predictions(), phases=phases(3.0), completed=6,
             memory=_memory(734003200), workload=fp32, notes=[NO_COMPILE])
    # 2. int8, one label wrong and probabilities far from the reference
    wrong = [(i, "fresh", [0.3, 0.6, 0.1]) if i == "d03" else (i, label, probs)
             for i, label, probs in shifted_predictions()]
    started(2, "r01-p02-b4-int8-a1", 1, 2, "b4-int8")
    finished(2, "r01-p02-b4-int8-a1", records=wrong, phases=phases(1.5), completed=6,
             memory=_memory(612368384), workload=int8, notes=[NO_COMPILE])
    # 3. int8, d02 written twice
    dup = shifted_predictions()
    dup.insert(3, dup[2])
    started(3, "r02-p01-b4-int8-a1", 2, 1, "b4-int8")
    finished(3, "r02-p01-b4-int8-a1", records=dup, phases=phases(1.25), completed=6,
             memory=_memory(612368384), workload=int8, notes=[NO_COMPILE],
             manifest_diff=["environment.packages.transformers"])
    # 4. fp32, out of memory after the first batch of 4
    err = "MemoryError: out of memory (simulated)"
    started(4, "r02-p02-b4-a1", 2, 2, "b4")
    finished(4, "r02-p02-b4-a1", records=perfect_predictions()[:4], status="failed", phases=phases(None), completed=4,
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
    finished(6, "r03-p01-b4-a2", records=perfect_predictions(), phases=phases(3.25), completed=6,
             memory=_memory(734003200), workload=fp32, notes=[NO_COMPILE], evaluation_s=0.25)
    # 7. int8 within the bound; memory not measured
    started(7, "r03-p02-b4-int8-a1", 3, 2, "b4-int8")
    finished(7, "r03-p02-b4-int8-a1", records=shifted_predictions(), phases=phases(1.75), completed=6,
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
    finished(9, "r04-p02-b4-a1", records=perfect_predictions(), phases=phases(2.75), completed=6,
             memory=_memory(735051776), workload=fp32, notes=[NO_COMPILE])
    journal.append(_journal_line({"event": "pass_excluded", "at": f"{DAY}T12:00:00.000+00:00",
                                  "pass_id": "r03-p01-b4-a2", "variant": "b4",
                                  "reason": "host backup ran during the pass", "rule": EXCLUSION_RULE}))
    (folder / "journal.jsonl").write_bytes("".join(journal).encode("utf-8"))
    return folder
