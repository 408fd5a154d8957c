"""A campaign run as a user means it: every scheduled pass (the campaign stage), then the raw table derived
from what the passes stored. Reads the locked protocol; writes the campaign folder and its raw_table.csv."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from iteralab.campaign.folder import read_raw_rows
from iteralab.campaign.runner import ProgressFn, run_passes
from iteralab.campaign.stopping import StopSignals
from iteralab.campaign.verdict.evaluate import CampaignReads
from iteralab.errors import LINE_LIMIT
from iteralab.evidence.table import write_raw_table
from iteralab.plan.lockfile import LockedProtocol


def run_campaign(protocol: str | os.PathLike[str] | LockedProtocol, out: str | os.PathLike[str], *,
                 progress: ProgressFn | None = None, isolation: str | None = None,
                 keep_unrunnable: bool = False, rerun: bool = False) -> dict[str, Any]:
    """Run (or resume) every scheduled pass, then regenerate the raw table. Returns a short summary.
    ``protocol``: the locked protocol as read once (:func:`~iteralab.plan.lockfile.open_locked`), or its file,
    read once by the runner.
    A stop signal (SIGINT, SIGTERM, SIGHUP) raises :class:`~iteralab.campaign.stopping.RunInterrupted`."""

    reads = CampaignReads(out)  # the corpus and each prediction file read once, for the evaluations and the table
    with StopSignals():  # the table too: a stop while it is written is an interrupt (the next run rewrites it)
        summary = run_passes(protocol, out, progress=progress, isolation=isolation, shared=reads,
                             keep_unrunnable=keep_unrunnable, rerun=rerun)
        table = write_raw_table(summary["out"], reads)
    if progress is not None:
        progress("end", {"table": str(table)})
    return {**summary, "raw_table": str(table), **asdict(acceptance(table))}


@dataclass(frozen=True)
class Acceptance:
    """How many passes of the raw table were accepted, and the first one that was not (journal order; an
    interrupted pass is neither), with why, in one line (None when every pass was accepted)."""

    accepted: int
    first_failure: str | None


def acceptance(table: str | os.PathLike[str]) -> Acceptance:
    """The raw table's :class:`Acceptance` (the run's summary holds its fields)."""
    rows = read_raw_rows(table)
    refused = next((row for row in rows if not row.accepted and not row.interrupted), None)
    return Acceptance(sum(row.accepted for row in rows),
                      None if refused is None else f"{refused.pass_id}: {failure_reason(refused)}")


def failure_reason(row: Any) -> str:
    """Why a raw-table row was not accepted, in one line: the pass's error when it failed, else its verdict's
    reasons (the notes' ``not accepted:`` part), else its first note."""
    if row.error:
        return one_line_text(row.error)
    notes = [part.strip() for part in (row.notes or "").split(" | ") if part.strip()]
    chosen = next((part for part in notes if part.startswith("not accepted: ")), notes[0] if notes else row.status)
    return one_line_text(chosen)


def one_line_text(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 1] + "…"
