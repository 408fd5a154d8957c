"""How long a campaign will take, before it runs (``iteralab run --estimate``): each variant's load and warm-up,
as a pass does them, and nothing else. Reads the locked protocol and its inputs; records nothing.

Nothing is written into the campaign folder: a new campaign's inputs are copied into a temporary folder (the
pass reads its corpus copy there), removed before this returns; an existing campaign folder is only read (its
corpus copy, and its journal for the passes still to run). No pass is journaled, no prediction file written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from iteralab.campaign.engines import passes
from iteralab.campaign.engines.registry import engine_name
from iteralab.campaign.folder import CAMPAIGN, CampaignFolder
from iteralab.campaign.journal import JOURNAL_NAME, read_journal
from iteralab.campaign.progress import duration
from iteralab.campaign.records import PassSpec, started
from iteralab.campaign.runner import slot_documents, pass_spec, prepare
from iteralab.errors import RunError
from iteralab.models import device as dev
from iteralab.plan.lockfile import LockedProtocol, open_locked
from iteralab.plan.schedule import Slot


def warm_up_only(spec: PassSpec, clock: Any = None) -> dict[str, Any]:
    """A pass's load and warm-up (the same functions a pass runs), nothing measured and nothing written: the
    load's and the warm-up's seconds and the warm-up's seconds per document."""
    clock = clock or dev.PERF_CLOCK
    result = started(spec.pass_id, startup={})
    device = passes.seeded_device(spec, {})
    workload = passes.load_timed(spec, device, clock, result)
    texts, last_warm_s = passes.warm_up(spec, workload, device, clock, result)
    phases = result["phases"]
    setup = sum(phases.get(k) or 0.0 for k in ("load_s", "compile_s", "warmup_s"))
    return {"setup_s": setup, "per_document_s": last_warm_s / len(texts) if last_warm_s and texts else None,
            "notes": [n for n in result["notes"] if not n.startswith("compile_s:")]}


def estimate_campaign(protocol: str | os.PathLike[str] | LockedProtocol, out: str | os.PathLike[str], *,
                      clock: Any = None) -> dict[str, Any]:
    """The projected duration of the passes ``out`` still has to run (all of them for a new campaign), from one
    load and warm-up of each of their variants. Leaves nothing behind (see the module's text)."""
    locked = open_locked(protocol)
    protocol_ = locked.protocol
    if protocol_.warmup.inputs <= 0 or protocol_.warmup.passes <= 0:
        raise RunError(f"{locked.source}: the protocol declares no warm-up, so nothing projects a pass's time",
                       hint="run without --estimate: each pass's line shows its measured time")
    out = Path(out)
    existing = (out / CAMPAIGN).is_file()
    folder = out if existing else Path(tempfile.mkdtemp(prefix="iteralab-estimate-"))
    try:
        campaign = (CampaignFolder(out).campaign if existing
                    else prepare(locked, folder))
        slots = [Slot(**s) for s in campaign.slots]
        done = read_journal(out / JOURNAL_NAME).done_slots() if existing else set()
        todo = [s for s in slots if (s.round, s.position) not in done]
        variants: dict[str, dict[str, Any]] = {}
        for slot in todo:
            if slot.variant in variants:
                continue
            variant = protocol_.variant(slot.variant)
            if engine_name(variant) == "ray":
                variants[slot.variant] = {"setup_s": None, "per_document_s": None,
                                          "notes": ["not estimated: a Ray variant's warm-up runs on the cluster"]}
                continue
            spec = pass_spec(campaign, protocol_, folder, slot, f"estimate-{slot.variant}")
            spec = spec.with_changes(scratch_dir=None)
            figures = warm_up_only(spec, clock)
            if variant.data_parallel > 1:  # one worker warmed up; the pass shares its documents among them
                figures["per_document_s"] = (figures["per_document_s"] or 0.0) / variant.data_parallel
                figures["notes"].append(f"one worker's warm-up, its pace shared among {variant.data_parallel}")
            variants[slot.variant] = figures
    finally:
        if not existing:
            shutil.rmtree(folder, ignore_errors=True)
    total: float | None = 0.0
    for slot in todo:
        v = variants[slot.variant]
        if v["per_document_s"] is None or total is None:
            total = None
            continue
        v["passes"] = v.get("passes", 0) + 1
        total += v["setup_s"] + v["per_document_s"] * (slot_documents(campaign, slot.dataset) or 0)
    return {"passes": len(todo), "passes_done": len(slots) - len(todo), "campaign_s": total, "variants": variants}


def estimate_lines(estimate: dict[str, Any]) -> list[str]:
    """What ``iteralab run --estimate`` prints."""
    lines = [f"estimate: one load and warm-up per variant; nothing was recorded ({estimate['passes']} passes to run"
             + (f", {estimate['passes_done']} done" if estimate["passes_done"] else "") + ")"]
    for name, v in estimate["variants"].items():
        if v["per_document_s"] is None:
            lines.append(f"  {name}: " + "; ".join(v["notes"]))
            continue
        rate = 1.0 / v["per_document_s"] if v["per_document_s"] else float("inf")
        lines.append(f"  {name}: load and warm-up {v['setup_s']:.2f} s, {rate:,.1f} documents/s"
                     + "".join(f"; {n}" for n in v["notes"]))
    lines.append(f"projected: {estimate['passes']} passes in about {duration(estimate['campaign_s'])}, plus each "
                 "pass's process start-up, prediction file and evaluation (a few seconds a pass)")
    return lines
