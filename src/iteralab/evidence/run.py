"""A campaign run as a user means it: every scheduled pass (the campaign stage), then the raw table derived
from what the passes stored. Reads the locked protocol; writes the campaign folder and its raw_table.csv."""

from __future__ import annotations

import os
from typing import Any

from iteralab.campaign.runner import ProgressFn, run_passes
from iteralab.campaign.stopping import StopSignals
from iteralab.campaign.verdict.evaluate import CampaignReads
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
    return {**summary, "raw_table": str(table)}
