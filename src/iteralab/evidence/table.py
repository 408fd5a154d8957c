"""The raw table (T1, T2): one row per attempted pass, aborts included, regenerated from stored files.

Every row comes from the journal (what was attempted, its times, memory, errors) and from the pass's
prediction file (ids, format, metric, verdict) re-read and re-verified. A measurement that could not be taken
is an empty cell and its reason is written in ``notes`` — never 0.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iteralab.campaign.campaignrecord import CampaignRecord
from iteralab.campaign.folder import COLUMNS, INTERRUPTED, PHASES, PROTOCOL, TABLE, CampaignFolder, format_cell as _cell
from iteralab.campaign.journal import JOURNAL_NAME, Journal, read_journal
from iteralab.campaign.manifest import rocm_compatibility_line
from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.registry import kind_of, kind_of_campaign
from iteralab.campaign.verdict.judge import FinishedPass, judge_campaign
from iteralab.campaign.verdict.record import Verdict
from iteralab.common.files import write_text_atomic
from iteralab.errors import IteraError
from iteralab.evidence.bundle import refuse_if_sealed
from iteralab.plan.protocol import load_protocol

#: The note that marks a pass measured while other processes used the machine (read back by stats).
CONCURRENT_NOTE = "measured under concurrent load"
#: The note that lists, per subgroup that lacks some classes, the classes its metric averaged over (read back by
#: stats with :func:`subgroup_classes_of`); a subgroup that has every class is not listed.
SUBGROUP_CLASSES_NOTE = "subgroup classes averaged"
TABLE_NAME = TABLE  # re-exported: the layout lives in the campaign-folder layer
#: The note that gives a pass's reasons for not being accepted (read back by stats with :func:`rejection_of`).
NOT_ACCEPTED = "not accepted: "


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


def build_rows(campaign_dir: str | Path, reader: Any = None, context: Any = None) -> list[dict[str, Any]]:
    """The raw table's rows; ``reader``/``context`` (``campaign.verdict.evaluate``) let a caller that already read the
    folder's prediction files and corpus share them (each file is read once)."""

    folder = CampaignFolder.open(campaign_dir)
    campaign_dir, campaign = folder.path, folder.campaign
    state = read_journal(campaign_dir / JOURNAL_NAME)
    variants = {v["name"]: v for v in campaign.variants}
    sources = dict(campaign.sources())
    series_of: dict[str, list[str]] = {}
    for s in campaign.series:
        for name in s["variants"]:
            series_of.setdefault(name, []).append(s["name"])
    finished = finished_passes(state)
    verdicts = judge_campaign(campaign_dir, finished, reader, context) if finished else {}
    protocol = load_protocol(folder.protocol_path)
    kind, n_classes = kind_of(protocol), len(protocol.corpus.classes)
    c4_line = rocm_compatibility_line(folder.manifest)  # None unless the campaign ran on a ROCm runtime
    rows = []
    for pid in state.order:
        row = _row_head(campaign, variants, sources, series_of, pid, state.started[pid])
        row.update(dict.fromkeys(c for c in kind.table_columns if c not in COLUMNS))  # the kind's own: empty until
        # its verdict fills them
        if state.finished.get(pid) is None:
            rows.append(_unfinished_row(row, state.interrupted.get(pid)))
            continue
        fin = state.result(pid)
        notes: list[str] = []
        _pass_cells(row, fin, state.evaluated.get(pid), notes)
        _verdict_cells(row, verdicts.get(pid) or Verdict(), kind, n_classes, notes)
        notes.extend(n for n in fin.notes if n)
        if c4_line:
            notes.append(c4_line)
        if row["prediction_file"]:
            notes.append(f"predictions: {row['prediction_file']}")
        excl = state.exclusions.get(pid)
        row["excluded"] = bool(excl)
        row["exclusion_reason"] = excl.get("reason") if excl else None
        row["notes"] = " | ".join(notes)
        rows.append(row)
    return rows


def finished_passes(state: Any) -> list[FinishedPass]:
    """The finished passes in journal order, as the verdict stage reads them."""
    finished = []
    for pid in state.order:
        if pid in state.finished:
            f = state.result(pid)
            finished.append(FinishedPass(pid, state.started[pid]["variant"], f.status, f.output.file, f.output.sha256,
                                         f.extra.get("queries_sha256"), state.started[pid].get("dataset"),
                                         state.started[pid].get("seed")))
    return finished


def _row_head(campaign: CampaignRecord, variants: dict[str, Any], sources: dict[str | None, Any],
              series_of: dict[str, list[str]], pid: str, start: dict[str, Any]) -> dict[str, Any]:
    """The cells every row has, finished or not: the pass, its variant, the protocol and the pass's corpus."""
    variant = variants.get(start["variant"], {})
    corpus = sources.get(start.get("dataset")) or campaign.corpus  # the pass's own corpus (K6: its dataset)
    row: dict[str, Any] = {
        "pass_id": pid, "variant": start["variant"], "dataset": start.get("dataset"),
        "series": ";".join(series_of.get(start["variant"], [])),
        "round": start["round"], "position": start["position"], "attempt": start.get("attempt"),
        "seed": start.get("seed"), "batch_size": variant.get("batch_size"),
        "precision": variant.get("precision"), "bucketing": variant.get("bucketing"),
        "padding": variant.get("padding"), "resume": variant.get("resume"), "compile": variant.get("compile"),
        "data_parallel": variant.get("data_parallel", 1),
        "engine": variant.get("engine", "local"),
        "protocol_name": campaign.protocol.name, "protocol_version": campaign.protocol.version,
        "protocol_sha256": campaign.protocol.sha256,
        "corpus_fingerprint": corpus.fingerprint,
        "expected_ids": corpus.size,
    }
    return row


def _unfinished_row(row: dict[str, Any], stopped: dict[str, Any] | None) -> dict[str, Any]:
    """A pass with no ``pass_finished`` record: interrupted by a stop signal (not counted), or aborted."""
    if stopped is not None:
        row["status"] = INTERRUPTED
        row["notes"] = (f"interrupted: the run was stopped ({stopped.get('signal')}) during this pass; not a "
                        "failure and not counted (feasibility, statistics, decision); its slot runs again when "
                        "the campaign resumes; all measurements empty")
        return row
    row["status"] = "aborted"
    row["ids_match"] = False
    row["corpus_accepted"] = False
    row["notes"] = ("aborted: the process ended during this pass (no pass_finished in the journal); "
                    "no prediction file is counted; all measurements empty")
    return row


def _pass_cells(row: dict[str, Any], fin: Any, evaluated: dict[str, Any] | None, notes: list[str]) -> None:
    """What the pass recorded: status, phases, throughput, counts, memory, shards, load, manifest, its file."""
    row["status"] = fin.status
    row["order_hash"] = fin.extra.get("order_hash")
    workload = fin.workload or {}
    row["quantization"] = _quantization(workload.get("quantization"))
    row["device"] = workload.get("device")
    phases = dict(fin.phases)
    phases["evaluation_s"] = evaluated.get("evaluation_s") if evaluated else None
    for phase in PHASES:
        row[phase] = phases.get(phase)
    if row["pass_s"]:
        row["docs_per_s"] = (fin.completed or 0) / row["pass_s"]
    for phase in PHASES:
        if row[phase] is None and not any(n.startswith(f"{phase}:") for n in fin.notes):
            notes.append(f"{phase}: empty, not measured for this pass")
    row["completed"] = fin.completed
    row["retries"] = fin.retries
    row["error"] = fin.error
    memory = fin.memory or {}
    for key in ("cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes"):
        row[key] = memory.get(key)
    row["memory_scope"] = memory.get("scope")
    _shard_cells(row, fin.extra.get("parallel"))
    load = fin.extra.get("concurrent_load") or {}
    if load.get("flagged"):
        notes.append(f"{CONCURRENT_NOTE}: other processes used {load['other_cpu_s']:.2f} CPU-s "
                     f"({load['other_cpu_per_s']:.2f} per second of the pass, {load['logical_cores']} logical "
                     f"cores, load average {load['load_avg_1m']}); this time may be inflated (T5)")
    if memory.get("reason"):
        notes.append(f"memory: {memory['reason']}")
    if not memory:
        notes.append("memory: empty, not measured (the pass failed before the measured region)")
    diff = fin.extra.get("manifest_diff") or []
    row["manifest_diff"] = ";".join(diff)
    if diff:
        notes.append(f"manifest differs from the campaign's in: {', '.join(diff[:8])}")
    row["prediction_file"] = fin.output.file
    row["prediction_sha256"] = fin.output.sha256


def _verdict_cells(row: dict[str, Any], v: Verdict, kind: JobKind, n_classes: int, notes: list[str]) -> None:
    """The verdict stage's cells for the pass (the kind's own: ``kind.verdict.row_cells``), and its reasons and
    problems as notes."""
    for key in ("observed_ids", "ids_match", "duplicates", "missing", "extra", "format_ok", "coverage",
                "metric_name", "metric", "metric_ref", "metric_delta", "delta_low", "delta_high", "delta_units",
                "threshold_ok", "tolerance_ok", "subgroups_ok", "subgroup_deltas", "label_agreement",
                "max_abs_prob_diff", "reproduction_ok", "corpus_accepted"):
        row[key] = v.cell(key)
    kind.verdict.row_cells(row, v, notes)
    row["subgroup_metrics"] = v.subgroups if v.has("subgroups") else None
    if v.reasons:
        notes.append(NOT_ACCEPTED + ", ".join(v.reasons))
    for problem in (v.format_problems or ())[:2] + (v.problems or ())[:2]:
        notes.append(problem)
    fewer = {key: names for key, names in (v.subgroup_classes or {}).items() if len(names) < n_classes}
    if fewer:
        notes.append(f"{SUBGROUP_CLASSES_NOTE} (a class absent from the subgroup is left out of its "
                     f"{v.metric_name}): {json.dumps(fewer, sort_keys=True, ensure_ascii=False)}")


def rejection_of(notes: str | None) -> str | None:
    """Why a pass was not accepted, read back from a row's notes (:data:`NOT_ACCEPTED`); None when it was."""
    text = notes or ""
    at = text.find(NOT_ACCEPTED)
    if at < 0 or (at and not text[:at].endswith(" | ")):
        return None
    end = text.find(" | ", at)
    return text[at + len(NOT_ACCEPTED):end if end >= 0 else len(text)]


def subgroup_classes_of(notes: str | None) -> dict[str, list[str]]:
    """The classes each listed subgroup's metric averaged over, read back from a row's notes
    (:data:`SUBGROUP_CLASSES_NOTE`); empty when every subgroup had every class."""
    text = notes or ""
    at = text.find(SUBGROUP_CLASSES_NOTE)
    start = text.find("{", at) if at >= 0 else -1
    if start < 0:
        return {}
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
        return {str(k): [str(c) for c in v] for k, v in value.items()}
    except (ValueError, AttributeError, TypeError):
        raise IteraError(f"{TABLE_NAME}: the note '{SUBGROUP_CLASSES_NOTE}' is damaged ({text[at:at + 80]!r})",
                         hint="regenerate the table from the journal: iteralab table FOLDER") from None


def _shard_cells(row: dict[str, Any], parallel: dict[str, Any] | None) -> None:
    """The data-parallel cells (X3) from the journal's ``parallel`` record; empty for a single-device pass."""
    if not parallel:
        return
    row["shard_pass_s"] = parallel.get("device_pass_s")
    row["shard_time_imbalance"] = parallel.get("time_imbalance")
    row["shard_token_imbalance"] = parallel.get("token_imbalance")
    memory = {}
    for device in parallel.get("devices") or []:
        peaks = device.get("memory") or {}
        memory[device["device"]] = {k: peaks.get(k) for k in ("cpu_peak_rss_bytes", "cuda_max_allocated_bytes",
                                                              "cuda_max_reserved_bytes") if k in peaks}
    row["shard_memory"] = memory or None


def render_csv(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The raw table's text, in the campaign kind's ``columns`` (``kind.table_columns``; every row has a
    ``dataset`` cell, empty for a one-corpus campaign)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def write_raw_table(campaign_dir: str | Path, reads: Any = None) -> Path:
    """Regenerate raw_table.csv; ``reads`` (``evaluate.CampaignReads``) shares what a run already read."""
    campaign_dir = Path(campaign_dir)
    target = campaign_dir / TABLE_NAME
    rows = build_rows(campaign_dir, reads.reader, reads.context) if reads is not None else build_rows(campaign_dir)
    write_text_atomic(target, render_csv(rows, _kind(campaign_dir).table_columns))
    return target


def regenerate_table(campaign_dir: str | Path) -> Path:
    """``iteralab table``: rebuild the raw table; in a sealed folder only when it comes out byte-identical
    (then nothing is written), otherwise the command refuses rather than break the seal."""
    folder = CampaignFolder.open(campaign_dir).path
    target = folder / TABLE_NAME
    text = render_csv(build_rows(folder), _kind(folder).table_columns)
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        return target
    refuse_if_sealed(folder, f"regenerating {TABLE_NAME} (it would differ from the sealed one)")
    write_text_atomic(target, text)
    return target


def _kind(campaign_dir: str | Path) -> JobKind:
    """The kind recorded in the campaign's ``campaign.json`` (the protocol file is not read again for it)."""
    return kind_of_campaign(CampaignFolder(Path(campaign_dir)).campaign)


def read_raw_table(path: str | Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@dataclass(frozen=True)
class Exclusion:
    """A pass excluded from the statistics (T4), as its ``pass_excluded`` event records it: the pass, its variant,
    the reason given and the protocol's exclusion rule."""

    pass_id: str
    variant: str
    reason: str
    rule: str


def exclude_pass(campaign_dir: str | Path, pass_id: str, reason: str) -> Exclusion:
    """Record that a pass is excluded (T4): a ``pass_excluded`` event appended to the journal, then the raw
    table regenerated from it.

    The reason is mandatory (a documented external incident, say). The protocol's exclusion rule is copied
    into the event: one rule for every variant. The pass stays in the raw table, marked excluded.
    """
    folder = CampaignFolder.open(campaign_dir).path
    refuse_if_sealed(folder, f"excluding {pass_id} (a journal event and a new raw table)")
    if not isinstance(reason, str) or not reason.strip():
        raise IteraError(f"{folder}: excluding {pass_id} needs a reason",
                         hint="say what happened, e.g. --reason 'host backup ran during the pass'")
    state = read_journal(folder / JOURNAL_NAME)
    if pass_id not in state.started:
        known = ", ".join(state.order[:6]) + (" ..." if len(state.order) > 6 else "")
        raise IteraError(f"{folder}: no pass {pass_id!r} in the journal", hint=f"known passes: {known or 'none'}")
    if pass_id in state.exclusions:
        raise IteraError(f"{folder}: pass {pass_id} is already excluded ({state.exclusions[pass_id].get('reason')})",
                         hint="an exclusion is recorded once")
    protocol = load_protocol(folder / PROTOCOL)
    event = Exclusion(pass_id, state.started[pass_id]["variant"], reason.strip(), protocol.run.exclusion_rule)
    Journal(folder / JOURNAL_NAME).append("pass_excluded", **asdict(event))
    write_raw_table(folder)
    return event


# ---------------------------------------------------------------------------------------------- times
