"""The raw table (T1, T2): one row per attempted pass, aborts included, regenerated from stored files.

Every row comes from the journal (what was attempted, its times, memory, errors) and from the pass's
prediction file (ids, format, metric, verdict) re-read and re-verified. A measurement that could not be taken
is an empty cell and its reason is written in ``notes`` — never 0.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from iteralab.common.files import write_text_atomic
from iteralab.campaign.journal import JOURNAL_NAME, read_journal

TABLE_NAME = "raw_table.csv"
PHASES = ("load_s", "compile_s", "warmup_s", "pass_s", "evaluation_s", "writing_s")
COLUMNS = (
    "pass_id", "variant", "series", "round", "position", "attempt", "seed", "status",
    "batch_size", "precision", "quantization", "bucketing", "padding", "resume", "compile", "device",
    "protocol_name", "protocol_version", "protocol_sha256", "corpus_fingerprint", "order_hash",
    *PHASES, "docs_per_s",
    "expected_ids", "observed_ids", "ids_match", "duplicates", "missing", "extra", "format_ok", "coverage",
    "completed", "retries",
    "metric_name", "metric", "metric_ref", "metric_delta", "threshold_ok", "tolerance_ok", "subgroups_ok",
    "subgroup_metrics", "label_agreement", "max_abs_prob_diff", "reproduction_ok", "corpus_accepted",
    "excluded", "exclusion_reason",
    "cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "memory_scope",
    "manifest_diff", "prediction_file", "prediction_sha256", "error", "notes",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value).replace("\r", " ")


def _quantization(value: Any) -> str | None:
    """A short cell for the quantization the pass actually ran (the full record stays in the journal)."""
    if not value:
        return None
    if isinstance(value, dict):
        parts = [str(value.get(k)) for k in ("dtype", "method") if value.get(k)]
        if value.get("quantized_layers") is not None:
            parts.append(f"{value['quantized_layers']} layers")
        return " ".join(parts) or "yes"
    return str(value)


def build_rows(campaign_dir: str | Path) -> list[dict[str, Any]]:
    from iteralab.campaign.evaluate import judge_campaign

    campaign_dir = Path(campaign_dir)
    campaign = json.loads((campaign_dir / "campaign.json").read_text(encoding="utf-8"))
    state = read_journal(campaign_dir / JOURNAL_NAME)
    variants = {v["name"]: v for v in campaign["variants"]}
    series_of: dict[str, list[str]] = {}
    for s in campaign["series"]:
        for name in s["variants"]:
            series_of.setdefault(name, []).append(s["name"])
    finished = []
    for pid in state.order:
        if pid in state.finished:
            f = state.finished[pid]
            finished.append({"pass_id": pid, "variant": state.started[pid]["variant"], "status": f.get("status"),
                             "prediction_file": f.get("prediction_file"),
                             "prediction_sha256": f.get("prediction_sha256")})
    verdicts = judge_campaign(campaign_dir, finished) if finished else {}
    rows = []
    for pid in state.order:
        start = state.started[pid]
        variant = variants.get(start["variant"], {})
        fin = state.finished.get(pid)
        notes: list[str] = []
        row: dict[str, Any] = {
            "pass_id": pid, "variant": start["variant"], "series": ";".join(series_of.get(start["variant"], [])),
            "round": start["round"], "position": start["position"], "attempt": start.get("attempt"),
            "seed": start.get("seed"), "batch_size": variant.get("batch_size"),
            "precision": variant.get("precision"), "bucketing": variant.get("bucketing"),
            "padding": variant.get("padding"), "resume": variant.get("resume"), "compile": variant.get("compile"),
            "protocol_name": campaign["protocol"]["name"], "protocol_version": campaign["protocol"]["version"],
            "protocol_sha256": campaign["protocol"]["sha256"],
            "corpus_fingerprint": campaign["corpus"]["fingerprint"],
            "expected_ids": campaign["corpus"]["size"],
        }
        if fin is None:
            row["status"] = "aborted"
            row["ids_match"] = False
            row["corpus_accepted"] = False
            notes.append("aborted: the process ended during this pass (no pass_finished in the journal); "
                         "no prediction file is counted; all measurements empty")
            row["notes"] = " | ".join(notes)
            rows.append(row)
            continue
        row["status"] = fin.get("status")
        row["order_hash"] = fin.get("order_hash")
        workload = fin.get("workload") or {}
        row["quantization"] = _quantization(workload.get("quantization"))
        row["device"] = workload.get("device")
        phases = dict(fin.get("phases") or {})
        evaluated = state.evaluated.get(pid)
        phases["evaluation_s"] = evaluated.get("evaluation_s") if evaluated else None
        for phase in PHASES:
            row[phase] = phases.get(phase)
        if row["pass_s"]:
            row["docs_per_s"] = (fin.get("completed") or 0) / row["pass_s"]
        for phase in PHASES:
            if row[phase] is None and not any(n.startswith(f"{phase}:") for n in fin.get("notes") or []):
                notes.append(f"{phase}: empty, not measured for this pass")
        row["completed"] = fin.get("completed")
        row["retries"] = fin.get("retries")
        row["error"] = fin.get("error")
        memory = fin.get("memory") or {}
        for key in ("cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes"):
            row[key] = memory.get(key)
        row["memory_scope"] = memory.get("scope")
        if memory.get("reason"):
            notes.append(f"memory: {memory['reason']}")
        if not memory:
            notes.append("memory: empty, not measured (the pass failed before the measured region)")
        diff = fin.get("manifest_diff") or []
        row["manifest_diff"] = ";".join(diff)
        if diff:
            notes.append(f"manifest differs from the campaign's in: {', '.join(diff[:8])}")
        row["prediction_file"] = fin.get("prediction_file")
        row["prediction_sha256"] = fin.get("prediction_sha256")
        v = verdicts.get(pid, {})
        for key in ("observed_ids", "ids_match", "duplicates", "missing", "extra", "format_ok", "coverage",
                    "metric_name", "metric", "metric_ref", "metric_delta", "threshold_ok", "tolerance_ok",
                    "subgroups_ok", "label_agreement", "max_abs_prob_diff", "reproduction_ok", "corpus_accepted"):
            row[key] = v.get(key)
        row["subgroup_metrics"] = v.get("subgroups")
        if v.get("reasons"):
            notes.append("not accepted: " + ", ".join(v["reasons"]))
        for problem in (v.get("format_problems") or [])[:2] + (v.get("problems") or [])[:2]:
            notes.append(problem)
        notes.extend(n for n in fin.get("notes") or [] if n)
        if row["prediction_file"]:
            notes.append(f"predictions: {row['prediction_file']}")
        excl = state.exclusions.get(pid)
        row["excluded"] = bool(excl)
        row["exclusion_reason"] = excl.get("reason") if excl else None
        row["notes"] = " | ".join(notes)
        rows.append(row)
    return rows


def render_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in COLUMNS])
    return buffer.getvalue()


def write_raw_table(campaign_dir: str | Path) -> Path:
    campaign_dir = Path(campaign_dir)
    target = campaign_dir / TABLE_NAME
    write_text_atomic(target, render_csv(build_rows(campaign_dir)))
    return target


def read_raw_table(path: str | Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))
