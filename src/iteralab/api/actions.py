"""The pipeline's steps from Python, each the function the matching command calls: lock a protocol
(``iteralab lock``), run it (``iteralab run``), decide with a catalog (``iteralab decide``) and render the
report (``iteralab report``). Each returns a typed value; a user mistake raises an
:class:`~iteralab.errors.IteraError` (its ``message`` and ``hint`` are what the command prints).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from iteralab.api.campaign import Campaign, open_campaign
from iteralab.campaign.runner import ProgressFn
from iteralab.decision.report import finalize
from iteralab.decision.rule import Decision, decide as decide_rule
from iteralab.evidence.run import run_campaign
from iteralab.lock.inputs import lock, lock_warnings
from iteralab.plan.lockfile import LockEntry, lock_path, read_protocol_file

__all__ = ["Locked", "ReportFiles", "RunSummary", "decide", "lock_protocol", "render_report", "run_protocol"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Locked:
    """A protocol locked (P2): its lock entry, the lock file and what the lock warns about."""

    entry: LockEntry
    lock_file: Path
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class RunSummary:
    """A campaign run (or resumed): the folder, its raw table and how many passes were accepted."""

    campaign: Campaign
    raw_table: Path
    accepted: int
    #: the first pass not accepted, with why, in one line (None: every pass was accepted)
    first_failure: str | None
    #: variants this machine could not run, with why (``keep_unrunnable``: recorded as failed rows)
    unrunnable: dict[str, str]


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`render_report` wrote, and the decision in one line."""

    stats_txt: Path
    stats_json: Path
    decision_md: Path
    decision_json: Path
    report_html: Path
    decision: str
    #: the chosen configuration's key (None: nothing meets every condition)
    chosen: str | None


def lock_protocol(protocol: PathLike, *, allow_large: bool = False) -> Locked:
    """Check every input of ``protocol`` (a TOML file), then lock it: its hash, the inputs' fingerprints and a UTC
    timestamp, written beside it as ``<protocol>.lock.json``. Locking the same content again returns the same
    entry; a changed input is refused."""
    source = read_protocol_file(protocol)
    entry = lock(source, allow_large=allow_large)
    return Locked(entry, lock_path(protocol), tuple(lock_warnings(source, entry)))


def run_protocol(protocol: PathLike, out: PathLike, *, progress: ProgressFn | None = None,
                 keep_unrunnable: bool = False) -> RunSummary:
    """Run (or resume) every scheduled pass of a locked protocol into the campaign folder ``out``, then write its
    raw table. ``progress``: called with the runner's events (``"start"``, ``"pass"``, ``"done"`` …)."""
    summary = run_campaign(protocol, out, progress=progress, keep_unrunnable=keep_unrunnable)
    return RunSummary(open_campaign(summary["out"]), Path(summary["raw_table"]), int(summary["accepted"]),
                      summary.get("first_failure"), dict(summary.get("unrunnable") or {}))


def decide(campaigns: PathLike | list[PathLike], *, catalog: PathLike | None = None, rental_id: str | None = None,
           project: bool = False, lots: int | None = None, partial: bool = False) -> Decision:
    """Apply the rule (D1) to one campaign folder or several machines' folders: every document, the minimum
    quality, before the deadline, the lowest committed budget. ``catalog``: the package prices (default: the one
    the folder's stored decision priced from, else the protocol's, else the shipped one). Nothing is written."""
    folders = [campaigns] if isinstance(campaigns, (str, os.PathLike)) else list(campaigns)
    for folder in folders:
        open_campaign(folder)
    return decide_rule(folders, rental_id=rental_id, project=project, catalog=catalog, lots=lots, partial=partial)


def render_report(campaigns: PathLike | list[PathLike], out: PathLike | None = None, *,
                  catalog: PathLike | None = None, rental_id: str | None = None, project: bool = False,
                  lots: int | None = None, partial: bool = False) -> ReportFiles:
    """Decide, then write report.html (self-contained), decision.md/.json and stats.txt/.json into ``out``
    (default: the campaign folder, when there is one). A sealed folder is refused: write elsewhere."""
    folders = [campaigns] if isinstance(campaigns, (str, os.PathLike)) else list(campaigns)
    written = finalize([Path(f) for f in folders], None if out is None else Path(out), rental_id=rental_id,
                       project=project, catalog=catalog, lots=lots, partial=partial)
    return ReportFiles(**{key: Path(written[key]) for key in ("stats_txt", "stats_json", "decision_md",
                                                               "decision_json", "report_html")},
                       decision=written["decision"], chosen=written["chosen"])
