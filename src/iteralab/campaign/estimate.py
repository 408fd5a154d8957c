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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from iteralab.campaign.engines import passes
from iteralab.campaign.engines.registry import engine_name
from iteralab.campaign.folder import CAMPAIGN, CampaignFolder
from iteralab.campaign.journal import JOURNAL_NAME, read_journal
from iteralab.campaign.progress import duration
from iteralab.campaign.records import WORKER_PHASES, PassSpec
from iteralab.campaign.runner import slot_documents, pass_spec, prepare
from iteralab.errors import RunError
from iteralab.models import device as dev
from iteralab.plan.lockfile import LockedProtocol, open_locked
from iteralab.plan.schedule import Slot


@dataclass(frozen=True)
class VariantEstimate:
    """One variant's load and warm-up: their seconds, the warm-up's seconds per document (None: not estimated,
    ``notes`` say why), and how many of the passes still to run are that variant's (counted in the projection)."""

    setup_s: float | None
    per_document_s: float | None
    notes: tuple[str, ...] = ()
    passes: int = 0

    def to_json(self) -> dict[str, float | int | list[str] | None]:
        return {"setup_s": self.setup_s, "per_document_s": self.per_document_s, "notes": list(self.notes),
                **({"passes": self.passes} if self.passes else {})}


@dataclass(frozen=True)
class CampaignEstimate:
    """The projected duration of the passes a campaign still has to run (None: some variant not estimated)."""

    passes: int
    passes_done: int
    campaign_s: float | None
    variants: dict[str, VariantEstimate]

    def to_json(self) -> dict[str, Any]:
        """What ``iteralab run --estimate --json`` prints."""
        return {"passes": self.passes, "passes_done": self.passes_done, "campaign_s": self.campaign_s,
                "variants": {name: v.to_json() for name, v in self.variants.items()}}


def warm_up_only(spec: PassSpec, clock: Any = None) -> VariantEstimate:
    """A pass's load and warm-up (the same functions a pass runs), nothing measured and nothing written: the
    load's and the warm-up's seconds and the warm-up's seconds per document."""
    clock = clock or dev.PERF_CLOCK
    phases: dict[str, float | None] = dict.fromkeys(WORKER_PHASES)
    notes: list[str] = []
    device = passes.seeded_device(spec, {})
    workload = passes.load_timed(spec, device, clock, phases, notes)
    texts, last_warm_s = passes.warm_up(spec, workload, device, clock, phases, notes)
    setup = sum(phases.get(k) or 0.0 for k in ("load_s", "compile_s", "warmup_s"))
    return VariantEstimate(setup, last_warm_s / len(texts) if last_warm_s and texts else None,
                           tuple(n for n in notes if not n.startswith("compile_s:")))


def estimate_campaign(protocol: str | os.PathLike[str] | LockedProtocol, out: str | os.PathLike[str], *,
                      clock: Any = None) -> CampaignEstimate:
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
        variants: dict[str, VariantEstimate] = {}
        for slot in todo:
            if slot.variant in variants:
                continue
            variant = protocol_.variant(slot.variant)
            if engine_name(variant) == "ray":
                variants[slot.variant] = VariantEstimate(
                    None, None, ("not estimated: a Ray variant's warm-up runs on the cluster",))
                continue
            spec = pass_spec(campaign, protocol_, folder, slot, f"estimate-{slot.variant}")
            spec = spec.with_changes(scratch_dir=None)
            figures = warm_up_only(spec, clock)
            if variant.data_parallel > 1:  # one worker warmed up; the pass shares its documents among them
                figures = replace(figures, per_document_s=(figures.per_document_s or 0.0) / variant.data_parallel,
                                  notes=(*figures.notes,
                                         f"one worker's warm-up, its pace shared among {variant.data_parallel}"))
            variants[slot.variant] = figures
    finally:
        if not existing:
            shutil.rmtree(folder, ignore_errors=True)
    total: float | None = 0.0
    for slot in todo:
        v = variants[slot.variant]
        if v.per_document_s is None or v.setup_s is None or total is None:
            total = None
            continue
        variants[slot.variant] = replace(v, passes=v.passes + 1)
        total += v.setup_s + v.per_document_s * (slot_documents(campaign, slot.dataset) or 0)
    return CampaignEstimate(len(todo), len(slots) - len(todo), total, variants)


def estimate_lines(estimate: CampaignEstimate) -> list[str]:
    """What ``iteralab run --estimate`` prints."""
    lines = [f"estimate: one load and warm-up per variant; nothing was recorded ({estimate.passes} passes to run"
             + (f", {estimate.passes_done} done" if estimate.passes_done else "") + ")"]
    for name, v in estimate.variants.items():
        if v.per_document_s is None or v.setup_s is None:
            lines.append(f"  {name}: " + "; ".join(v.notes))
            continue
        rate = 1.0 / v.per_document_s if v.per_document_s else float("inf")
        lines.append(f"  {name}: load and warm-up {v.setup_s:.2f} s, {rate:,.1f} documents/s"
                     + "".join(f"; {n}" for n in v.notes))
    lines.append(f"projected: {estimate.passes} passes in about {duration(estimate.campaign_s)}, plus each "
                 "pass's process start-up, prediction file and evaluation (a few seconds a pass)")
    return lines
