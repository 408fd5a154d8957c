"""The hand-built campaign the statistics, decision and economics tests share: a campaign folder with known times and
predictions, its calendar, and the golden check of what a stage renders from it."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from iteralab.campaign.kinds.classification.output import encode
from iteralab.evidence.table import COLUMNS, CONCURRENT_NOTE, render_csv
from protocol_factory import protocol_toml


GOLDEN = Path(__file__).resolve().parent / "golden" / "decision"
CLASSES = ("plot", "fresh", "rotten")
CORPUS = [
    ("d00", "a story about a bank", "plot", "short"),
    ("d01", "good fun", "fresh", "short"),
    ("d02", "dull and long", "rotten", "short"),
    ("d03", "<script>alert(1)</script> & a story", "plot", "long"),
    ("d04", "good acting, really good, and long enough", "fresh", "long"),
    ("d05", "boring & <b>weak</b>", "rotten", "long"),
]
WRONG = {"d03": "fresh"}  # every ok pass predicts d03 wrong: an example for the report
CALENDAR = """
[calendar]
timezone = "Europe/Paris"
deadline = "2026-03-27T12:00"
tasks = [
  { name = "setup and checks", start = "2026-03-23T09:00", end = "2026-03-23T18:00" },
  { name = "comparisons", start = "2026-03-23T14:00", end = "2026-03-26T18:00" },
  { name = "evaluation and export", start = "2026-03-26T18:00", end = "2026-03-27T09:00" },
]
"""
DEFAULT_VARIANTS = {
    "b1": {"batch_size": 1, "passes": [{"s": 10.0}, {"s": 10.4}, {"s": 9.8}]},
    "b4": {"batch_size": 4, "passes": [{"s": 4.0}, {"s": 4.3}, {"s": 3.9}]},
    "b8": {"batch_size": 8, "passes": [{"s": 3.8}, {"s": 4.5}, {"s": 3.6}]},
    "b16": {"batch_size": 16, "passes": [{"s": 3.0}, {"status": "failed", "completed": 3,
                                                      "error": "OutOfMemoryError: CUDA out of memory (simulated)"},
                                         {"s": 3.1}]},
    "b8-int8": {"batch_size": 8, "precision": "int8-dynamic",
                "passes": [{"s": 2.0, "metric": 0.80}, {"s": 2.1, "metric": 0.80}, {"s": 2.05, "metric": 0.80}]},
}
SERIES = {"batch": ("batch_size", ["b1", "b4", "b8", "b16"]), "precision": ("precision", ["b8", "b8-int8"])}
GPUS = {
    "cpu": None,
    "rtx4090": {"name": "NVIDIA GeForce RTX 4090", "total_memory_bytes": 25386352640, "torch": "2.13.0+cu128"},
    "b200": {"name": "NVIDIA B200", "total_memory_bytes": 191468240896, "torch": "2.13.0+cu130"},
    "h100": {"name": "NVIDIA H100 80GB HBM3", "total_memory_bytes": 85045870592, "torch": "2.13.0+cu128"},
}


def _variants_toml(variants: dict, series: dict) -> str:
    parts = []
    for name, spec in variants.items():
        parts.append(f'[[variants]]\nname = "{name}"\nbatch_size = {spec["batch_size"]}\n'
                     f'precision = "{spec.get("precision", "fp32")}"\n'
                     + (f'data_parallel = {spec["data_parallel"]}\n' if "data_parallel" in spec else ""))
    for name, (factor, members) in series.items():
        parts.append(f'[[series]]\nname = "{name}"\nfactor = "{factor}"\nvariants = {json.dumps(members)}\n')
    return "\n".join(parts)


def _inventory(hardware: str) -> dict:
    gpu = GPUS[hardware]
    return {"backend": "cpu" if gpu is None else "cuda", "torch": "2.13.0+cpu" if gpu is None else gpu["torch"],
            "gpu_count": 0 if gpu is None else 1,
            "gpus": [] if gpu is None else [{"index": 0, "name": gpu["name"],
                                             "total_memory_bytes": gpu["total_memory_bytes"]}],
            "driver_version": None if gpu is None else "580.65", "cpu": {"model": "Test CPU 8-core"}}


def build_campaign(folder: Path, *, hardware: str = "cpu", variants: dict | None = None, series: dict | None = None,
                   version: int = 1, corpus: list | None = None, calendar: str = CALENDAR, extra: str = "",
                   threshold: float = 0.5, tolerance: float = 0.05, reference: str = "b4",
                   day: str = "2026-03-23") -> Path:
    """Write a complete campaign folder by hand; times, metrics and timestamps are the ones given."""
    variants = DEFAULT_VARIANTS if variants is None else variants
    series = {k: v for k, v in (SERIES if series is None else series).items()
              if all(m in variants for m in v[1])}
    corpus = CORPUS if corpus is None else corpus
    folder.mkdir(parents=True)
    (folder / "inputs").mkdir()
    (folder / "predictions").mkdir()
    text = protocol_toml(model='kind = "callable"\ncallable = "fake_models:keyword_classifier"',
                         variants=_variants_toml(variants, series) + calendar, threshold=threshold,
                         tolerance=tolerance, reference=reference, version=version, extra=extra,
                         subgroups='[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n')
    (folder / "inputs" / "protocol.toml").write_text(text, encoding="utf-8")
    sha = hashlib.sha256(text.encode()).hexdigest()
    with open(folder / "inputs" / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label", "stratum"])
        w.writerows(corpus)
    fingerprint = hashlib.sha256("".join(f"{i}\t{t}\n" for i, t, _, _ in sorted(corpus)).encode()).hexdigest()
    n_rounds = max(len(v["passes"]) for v in variants.values())
    names = list(variants)
    slots = []
    for r in range(n_rounds):
        for p, name in enumerate(names[r % len(names):] + names[:r % len(names)], start=1):
            if r < len(variants[name]["passes"]):
                slots.append({"round": r + 1, "position": p, "variant": name, "seed": 0})
    protocol_meta = {"name": "test-protocol", "version": version, "sha256": sha,
                     "locked_at": f"{day}T08:00:00+00:00", "source": str(folder / "inputs" / "protocol.toml")}
    campaign = {
        "schema_version": 1, "protocol": protocol_meta,
        "corpus": {"fingerprint": fingerprint, "order_hash": "o" * 64, "size": len(corpus),
                   "file": "inputs/corpus.csv", "strata": {"long": 3, "short": 3}},
        "model": {"kind": "callable", "callable": "fake_models:keyword_classifier"},
        "schedule": {"design": "cyclic", "slots": slots},
        "variants": [{"name": n, "batch_size": v["batch_size"], "precision": v.get("precision", "fp32"),
                      "bucketing": False, "padding": "longest", "resume": False, "compile": False, "device": None,
                      **({"data_parallel": v["data_parallel"]} if "data_parallel" in v else {})}
                     for n, v in variants.items()],
        "series": [{"name": s, "factor": f, "variants": m} for s, (f, m) in series.items()],
    }
    (folder / "campaign.json").write_text(json.dumps(campaign, indent=2, sort_keys=True), encoding="utf-8")
    inventory = _inventory(hardware)
    manifest = {"schema_version": 1, "corpus": {"fingerprint": fingerprint, "order_hash": "o" * 64},
                "environment": {"device_inventory": inventory, "packages": {"torch": inventory["torch"]},
                                "determinism": {"torch_deterministic_algorithms": True}},
                "seeds": [0], "reproduction_target": {"target": "acceptable"}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    ref_metric = next((p.get("metric", 0.9) for p in variants.get(reference, {}).get("passes", [])
                       if p.get("status", "ok") == "ok"), None)
    journal = [{"event": "campaign_started", "at": f"{day}T09:00:00+00:00"}]
    rows = []
    minute = 0
    counters = {n: 0 for n in names}
    device = "cpu" if GPUS[hardware] is None else "cuda:0"
    for slot in slots:
        name = slot["variant"]
        spec = variants[name]["passes"][counters[name]]
        counters[name] += 1
        pid = f"r{slot['round']:02d}-p{slot['position']:02d}-{name}-a1"
        status = spec.get("status", "ok")
        minute += 1
        journal.append({"event": "pass_started", "at": f"{day}T10:{minute:02d}:00+00:00", "pass_id": pid,
                        "variant": name, "round": slot["round"], "position": slot["position"], "seed": 0,
                        "attempt": 1})
        row = {"pass_id": pid, "variant": name, "series": ";".join(s for s, (_, m) in series.items() if name in m),
               "round": slot["round"], "position": slot["position"], "attempt": 1, "seed": 0, "status": status,
               "batch_size": variants[name]["batch_size"], "precision": variants[name].get("precision", "fp32"),
               "device": device, "protocol_name": "test-protocol", "protocol_version": version,
               "protocol_sha256": sha, "corpus_fingerprint": fingerprint, "expected_ids": len(corpus),
               "metric_name": "macro_f1"}
        if status == "aborted":
            row.update(ids_match=False, corpus_accepted=False, notes="aborted: the process ended during this pass")
            rows.append(row)
            continue
        pred = folder / "predictions" / f"{pid}.parquet"
        done = corpus if status == "ok" else corpus[:spec.get("completed") or 0]
        probs = np.asarray([[0.8 if c == WRONG.get(i, lab) else 0.1 for c in CLASSES] for i, _, lab, _ in done],
                           dtype=np.float32).reshape(len(done), len(CLASSES))
        pred.write_bytes(encode(pa.array([i for i, *_ in done], pa.string()), list(CLASSES), probs))
        phases = {"load_s": 2.0, "warmup_s": 0.5, "compile_s": None, "pass_s": spec.get("s"), "writing_s": 0.05}
        journal.append({"event": "pass_finished", "at": f"{day}T10:{minute:02d}:30+00:00", "pass_id": pid,
                        "status": status, "completed": len(done), "error": spec.get("error"), "phases": phases,
                        "prediction_file": f"predictions/{pid}.parquet",
                        "prediction_sha256": hashlib.sha256(pred.read_bytes()).hexdigest()})
        journal.append({"event": "pass_evaluated", "at": f"{day}T10:{minute:02d}:40+00:00", "pass_id": pid,
                        "evaluation_s": 0.1})
        if status != "ok":
            row.update(load_s=2.0, warmup_s=0.5, completed=len(done), error=spec.get("error"),
                       prediction_file=f"predictions/{pid}.parquet",
                       ids_match=False, format_ok=True, corpus_accepted=False,
                       notes=f"failed: {spec.get('error')}; no retry with a smaller batch")
            rows.append(row)
            continue
        metric = spec.get("metric", 0.9)
        threshold_ok = metric >= threshold
        tolerance_ok = ref_metric is not None and ref_metric - metric <= tolerance + 1e-12
        subgroups = {"length:long": round(metric - 0.1, 4), "length:short": round(metric + 0.05, 4)}
        memory = ({"cpu_peak_rss_bytes": 400 * 2**20 + 2**20 * variants[name]["batch_size"]} if device == "cpu"
                  else {"cuda_max_allocated_bytes": 300 * 2**20 * variants[name]["batch_size"],
                        "cuda_max_reserved_bytes": 320 * 2**20 * variants[name]["batch_size"]})
        row.update(load_s=2.0, warmup_s=0.5, pass_s=spec["s"], evaluation_s=0.1, writing_s=0.05,
                   docs_per_s=len(corpus) / spec["s"], observed_ids=len(corpus), ids_match=True, duplicates=0,
                   missing=0, extra=0, format_ok=True, coverage=1.0, completed=len(corpus), retries=0, metric=metric,
                   metric_ref=ref_metric, metric_delta=None if ref_metric is None else metric - ref_metric,
                   threshold_ok=threshold_ok, tolerance_ok=tolerance_ok, subgroups_ok=tolerance_ok,
                   subgroup_metrics=subgroups, label_agreement=1.0 if tolerance_ok else 0.83,
                   max_abs_prob_diff=0.0, reproduction_ok=True,
                   corpus_accepted=threshold_ok and tolerance_ok, excluded=False, **memory,
                   memory_scope="process peak RSS (VmHWM) since reset" if device == "cpu" else "torch.cuda since reset",
                   prediction_file=f"predictions/{pid}.parquet", notes=f"predictions: predictions/{pid}.parquet"
                   + (f"; {CONCURRENT_NOTE}: other processes used 3.00 CPU-s" if spec.get("loaded") else ""))
        rows.append(row)
    (folder / "journal.jsonl").write_text("".join(json.dumps(j, sort_keys=True) + "\n" for j in journal),
                                          encoding="utf-8")
    (folder / "raw_table.csv").write_text(render_csv(rows, COLUMNS), encoding="utf-8")
    return folder


def normalised(text: str, *folders: Path) -> str:
    for i, f in enumerate(folders):
        text = text.replace(str(f), f"<campaign{i}>" if len(folders) > 1 else "<campaign>")
    return text


def check_golden(name: str, text: str) -> None:
    """Compare with tests/support/golden/decision/NAME; ITERALAB_UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    path = GOLDEN / name
    if os.environ.get("ITERALAB_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}: run with ITERALAB_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8")
