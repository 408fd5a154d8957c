"""The campaign window a configuration needs (W1–W4): planned from the protocol's calendar, or projected from
measured times on request, always labelled; and the observed span of the passes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from iteralab.campaign.folder import CampaignFolder
from iteralab.economics.window import CalendarWindow, Task, build_window, local_task
from iteralab.evidence.reads import Evidence
from iteralab.evidence.stats import VariantTimes, fmt_s
from iteralab.kit.calcul_forfaits import load_zone, localize


# ------------------------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class WindowInfo:
    """A labelled window (planned / projected / observed) and the deadline check, or why there is none."""

    window: CalendarWindow | None
    reason: str | None
    deadline: datetime | None
    note: str | None = None

    @property
    def label(self) -> str:
        return self.window.label if self.window else "none"

    @property
    def meets_deadline(self) -> bool | None:
        if self.window is None or self.deadline is None:
            return None
        return self.window.end <= self.deadline

    def describe(self) -> str:
        if self.window is None:
            return f"no window: {self.reason}"
        d = self.window.to_dict()
        text = (f"{self.window.label}: {d['start']} to {d['end']}, span {d['span_hours']} h "
                f"(busy {d['busy_hours']} h)")
        return text + (f"; {self.note}" if self.note else "")

    def deadline_text(self) -> str:
        if self.deadline is None:
            return "no deadline declared in the protocol"
        shown = self.deadline.isoformat()
        if self.window is None:
            return f"deadline {shown}: not checked, no window"
        verdict = "met" if self.meets_deadline else "MISSED"
        return f"{self.window.label} window ends {self.window.to_dict()['end']}, deadline {shown}: {verdict}"

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window.to_dict() if self.window else None, "reason": self.reason,
                "note": self.note, "deadline": self.deadline.isoformat() if self.deadline else None,
                "meets_deadline": self.meets_deadline}


def _deadline(ev: Evidence) -> datetime | None:
    cal = ev.protocol.calendar
    if not cal.deadline:
        return None
    return localize(cal.deadline, load_zone(cal.timezone), "calendar deadline")[0]


def planned_window(ev: Evidence) -> WindowInfo:
    """The window from the protocol's calendar tasks (W1), labelled planned (W4)."""
    cal = ev.protocol.calendar
    if not cal.tasks:
        return WindowInfo(None, "the protocol's calendar has no tasks, so no window is planned", _deadline(ev))
    tasks = [local_task(t.name, t.start, t.end, cal.timezone, where="protocol calendar: ") for t in cal.tasks]
    return WindowInfo(build_window(tasks, "planned", cal.timezone), None, _deadline(ev))


def projected_window(ev: Evidence, planned: WindowInfo, times: VariantTimes) -> WindowInfo:
    """Planned window + the measured total of all phases x scheduled passes, appended after its end."""
    if planned.window is None:
        return planned
    total = times.total_median
    passes = ev.scheduled(times.variant) or len(times.passes)
    if total is None:
        return WindowInfo(planned.window, None, planned.deadline,
                          f"no projection for {times.variant}: no counted pass to measure (planned window kept)")
    seconds = math.ceil(total * passes)  # whole seconds, rounded up: a projection never shortens the work
    extra = Task(f"measured work of {times.variant} ({passes} x {fmt_s(total)} s, all phases)",
                 planned.window.end, planned.window.end + timedelta(seconds=max(seconds, 1)))
    window = build_window([*planned.window.tasks, extra], "projected", planned.window.timezone)
    return WindowInfo(window, None, planned.deadline,
                      f"planned tasks + {seconds} s of measured work ({passes} passes x median total of all "
                      f"phases) after the planned end")


def observed_span(ev: Evidence) -> WindowInfo | None:
    """When this campaign's passes actually ran (journal timestamps): observed, but not a full rental window."""

    stamps = CampaignFolder(ev.folder).journal().pass_times()
    if len(stamps) < 2 or max(stamps) <= min(stamps):
        return None
    window = build_window([Task("campaign passes (journal)", min(stamps), max(stamps))], "observed",
                          ev.protocol.calendar.timezone)
    return WindowInfo(window, None, None,
                      "journal timestamps of the passes only: setup, waiting and export are not in it")
