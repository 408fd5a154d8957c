"""The campaign journal: an append-only, flushed JSON-lines file, the source of truth of what was attempted.

"pass_started" is written (and fsynced) before a pass begins and "pass_finished" after its prediction file
is in place, so a killed process leaves a started pass without an end: an *aborted* row, never a lost one.
A run stopped by SIGINT, SIGTERM or SIGHUP appends "run_interrupted" naming the pass it stopped: that pass is
*interrupted*, not aborted (the user's stop, not evidence about the configuration; its slot runs again).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from iteralab.campaign.records import PassResult
from iteralab.errors import RunError

#: The journal's file name in a campaign folder (the one definition).
JOURNAL_NAME = "journal.jsonl"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Journal:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, event: str, **payload: Any) -> None:
        """One record (``event``, the time ``at``, the payload's fields), appended and flushed to disk."""
        record = {"event": event, "at": utc_now(), **payload}
        line = json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
        try:
            with open(self.path, "a+b") as fh:
                if fh.tell() > 0:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        # the last record was cut short (kill, full disk): it stays unreadable on its own line
                        fh.write(b"\n")
                fh.write(line.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise RunError(
                f"{self.path}: cannot append to the journal: {exc.strerror}",
                hint="free disk space or fix permissions; finished passes already recorded are kept",
            ) from None


@dataclass
class JournalState:
    """What a journal says: the campaign header, each attempted pass, and lines that could not be read."""

    campaign: dict[str, Any] | None = None
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    evaluated: dict[str, dict[str, Any]] = field(default_factory=dict)
    exclusions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Passes a stop signal interrupted (started, never finished), with the "run_interrupted" record.
    interrupted: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    damaged_lines: list[int] = field(default_factory=list)

    def aborted(self) -> list[str]:
        """Passes that started and never finished, other than those a stop signal interrupted."""
        return [p for p in self.order if p not in self.finished and p not in self.interrupted]

    def pass_times(self) -> list[datetime]:
        """Timestamps of every pass event (started, finished, evaluated), to the second."""
        stamps = []
        for records in (self.started, self.finished, self.evaluated):
            for record in records.values():
                try:
                    stamps.append(datetime.fromisoformat(record["at"]).replace(microsecond=0))
                except (KeyError, TypeError, ValueError):
                    continue
        return stamps

    def result(self, pass_id: str) -> PassResult | None:
        """The typed result of a finished pass (its ``pass_finished`` record); None when it never finished."""
        record = self.finished.get(pass_id)
        return PassResult.from_json(record) if record is not None else None

    def done_slots(self) -> set[tuple[int, int]]:
        """(round, position) slots with a finished pass (success or recorded failure)."""
        return {(self.started[p]["round"], self.started[p]["position"]) for p in self.finished}


def read_journal(path: str | os.PathLike[str]) -> JournalState:
    state = JournalState()
    path = Path(path)
    if not path.exists():
        return state
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            # A line cut short by a kill: the event it held did not happen as far as the evidence goes.
            state.damaged_lines.append(number)
            continue
        event = record.get("event")
        if event == "campaign_started" and state.campaign is None:
            state.campaign = record
        elif event == "pass_started":
            state.started[record["pass_id"]] = record
            state.order.append(record["pass_id"])
        elif event == "pass_finished" and record.get("pass_id") in state.started:
            state.finished[record["pass_id"]] = record
        elif event == "pass_evaluated" and record.get("pass_id") in state.started:
            state.evaluated[record["pass_id"]] = record
        elif event == "pass_excluded" and record.get("pass_id") in state.started:
            state.exclusions[record["pass_id"]] = record
        elif event == "run_interrupted" and record.get("pass_id") in state.started \
                and record["pass_id"] not in state.finished:
            state.interrupted[record["pass_id"]] = record
    return state
