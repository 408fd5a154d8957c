"""Per-dataset verdicts (K6) and the job times of every campaign, from the raw table only.

Reads the rows of one variant (``RawRow.dataset`` names each pass's dataset) and the campaign's ``datasets``
record; writes nothing. A configuration is verified only when *every* dataset is: each dataset's counted passes
are all accepted (and there is at least one). Pass times of different datasets are never pooled into one
distribution: the time of a configuration in one round is its **job time**, the sum of the pass times of every
dataset in that round (the job processes each dataset once), and the statistics (median, min, max, spread,
the T5 comparisons) are over those per-round job times. Each dataset's own median is listed beside them; the
median of the sums is not the sum of the medians, and the note says which one is shown. A one-corpus campaign is
a campaign of one source: its job time in a round is that round's pass.

:class:`PassTime` (one pass, or one round's job, as the statistics count it) is defined here, beside the job
rounds that build it, and :mod:`iteralab.evidence.stats` imports it: the import runs one way.
"""

from __future__ import annotations

import statistics
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from iteralab.campaign.campaignrecord import CampaignRecord
from iteralab.campaign.folder import PHASES, RawRow
from iteralab.evidence.feasibility import feasibility
from iteralab.evidence.table import rejection_of

#: How the statistics combine the datasets' pass times (shown in the stats text and the decision note).
JOB_TIME_RULE = ("several datasets (K6): a pass time here is one round's job time, the sum of the pass times of "
                 "every dataset in that round; median, min, max and comparisons are over rounds, never over pooled "
                 "passes of different datasets")


@dataclass(frozen=True)
class PassTime:
    """One pass as the time statistics count it (or, in a several-dataset campaign, one round's job)."""

    pass_id: str
    status: str
    pass_s: float | None
    phases: dict[str, float | None]
    excluded: bool
    exclusion_reason: str | None
    error: str | None
    completed: int | None
    #: Other processes used the machine during the measured region (see the row's notes).
    concurrent: bool = False

    @property
    def counted(self) -> bool:
        return self.status == "ok" and not self.excluded and self.pass_s is not None

    def to_dict(self) -> dict[str, Any]:
        return {"pass_id": self.pass_id, "status": self.status, "pass_s": self.pass_s, "phases": self.phases,
                "excluded": self.excluded, "exclusion_reason": self.exclusion_reason, "error": self.error,
                "completed": self.completed}


@dataclass(frozen=True)
class DatasetVerdict:
    """One dataset under one configuration: its counted passes, how many were accepted, and why not."""

    name: str
    fingerprint: str
    size: int
    counted: int
    accepted: int
    reasons: tuple[str, ...]
    median_pass_s: float | None

    @property
    def verified(self) -> bool:
        return self.counted > 0 and self.accepted == self.counted and not self.reasons

    def describe(self) -> str:
        if self.verified:
            return f"verified ({self.accepted} of {self.counted} counted passes accepted)"
        why = "; ".join(self.reasons) or "no counted pass"
        return f"NOT verified ({self.accepted} of {self.counted} counted passes accepted): {why}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint": self.fingerprint, "size": self.size, "counted": self.counted,
                "accepted": self.accepted, "verified": self.verified, "reasons": list(self.reasons),
                "median_pass_s": self.median_pass_s}


def _row_reasons(row: RawRow) -> list[str]:
    if row.status != "ok":
        return [f"pass {row.pass_id} {row.status}" + (f": {row.error}" if row.error else "")]
    if row.metric is None and rejection_of(row.notes):  # no value: its one reason, no threshold said to fail
        return [f"pass {row.pass_id}: {rejection_of(row.notes)}"]
    checks = (("ids_match", "ids do not match"), ("format_ok", "format problems"),
              ("threshold_ok", f"{row.metric_name} {row.metric if row.metric is not None else '-'} below the "
                               "threshold"),
              ("tolerance_ok", "outside the tolerance of the reference"),
              ("subgroups_ok", "a gating subgroup fails"), ("reproduction_ok", "reproduction target not met"))
    found = [label for key, label in checks if getattr(row, key) is not True]
    return [f"pass {row.pass_id}: {', '.join(found)}"] if found else []


def dataset_verdicts(campaign: CampaignRecord, rows: list[RawRow], excluded: Container[str]
                     ) -> tuple[DatasetVerdict, ...]:
    """The verdict of every declared dataset over one variant's rows (empty for a one-corpus campaign)."""
    out = []
    for record in campaign.datasets:
        mine = [r for r in rows if r.dataset == record.name and not r.excluded and r.pass_id not in excluded]
        counted = mine  # as M1 counts them: every pass not excluded, a failed or aborted one included
        reasons = [reason for r in counted for reason in _row_reasons(r)]
        times = [r.pass_s for r in counted if r.ok and r.pass_s is not None]
        out.append(DatasetVerdict(str(record.name), record.fingerprint, record.size, len(counted),
                                  sum(1 for r in counted if r.accepted), tuple(reasons[:3]) + (
                                      (f"and {len(reasons) - 3} more",) if len(reasons) > 3 else ()),
                                  statistics.median(times) if times else None))
    return tuple(out)


def feasibility_by_source(campaign: CampaignRecord, rows: list[RawRow], excluded: Container[str]
                          ) -> tuple[str, ...]:
    """M1 per corpus source: every counted pass processed its whole corpus, or (K6) its whole dataset, whose name
    then begins each failure (the failures, in the note's words)."""
    failures: list[str] = []
    for name, record in campaign.sources():
        mine = [r for r in rows if r.dataset == name]
        for failure in feasibility(mine, record.size, excluded).failures():
            failures.append(failure if name is None else f"dataset {name!r}: {failure}")
    return tuple(failures)


def _sum(values: list[Any], partial: bool = False) -> float | None:
    """The sum of measured values; None when one is missing (``partial``: of those measured, None if none)."""
    known = [v for v in values if v is not None]
    if not known or (len(known) < len(values) and not partial):
        return None
    return sum(known)


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def job_rounds(campaign: CampaignRecord, rows: list[RawRow], exclusions: dict[str, str],
               concurrent_note: str) -> tuple[PassTime, ...]:
    """One ``PassTime`` per (round, seed) of a variant, in the order rounds first ran: the job time, the sum over
    its corpus sources (K6: its datasets; one corpus: the round's pass itself), counted only when every source's
    pass of that round was counted. Earlier attempts of a slot (a failed or aborted pass run again after a resume)
    stay as their own, never counted, entries just before it, so failures are still counted."""
    names = [name for name, _ in campaign.sources()]
    rounds: dict[tuple[int | None, int | None], dict[str | None, list[RawRow]]] = {}
    for r in rows:
        rounds.setdefault((r.round, r.seed), {}).setdefault(r.dataset or None, []).append(r)
    out: list[PassTime] = []

    def single(r: RawRow) -> PassTime:
        return PassTime(r.pass_id, r.status, r.pass_s, {ph: r.phase(ph) for ph in PHASES}, r.pass_id in exclusions,
                        exclusions.get(r.pass_id), r.error or None, r.completed, concurrent_note in (r.notes or ""))

    for per in rounds.values():
        last = [per[n][-1] if per.get(n) else None for n in names]
        for n in names:
            out.extend(single(r) for r in (per.get(n) or [])[:-1])
        if len(names) == 1:  # one source: the round's job is its pass
            out.extend(single(r) for r in last if r is not None)
            continue
        present = [r for r in last if r is not None]
        missing = [str(n) for n, r in zip(names, last) if r is None]
        bad = [r for r in present if r.status != "ok"]
        status = bad[0].status if bad else "not attempted" if missing else "ok"
        excluded = [r for r in present if r.pass_id in exclusions]
        phases = {ph: _sum([r.phase(ph) for r in present], partial=True) for ph in PHASES}
        total = None if missing else _sum([r.pass_s for r in present])
        error = "; ".join(f"{r.dataset}: {r.error}" for r in bad if r.error) or (
            f"not attempted: {', '.join(missing)}" if missing else None)
        reason = "; ".join(exclusions.get(r.pass_id) or "" for r in excluded) or None
        out.append(PassTime(" + ".join(r.pass_id for r in present), status, total, phases, bool(excluded), reason,
                            error, _whole(_sum([r.completed for r in present])),
                            any(concurrent_note in (r.notes or "") for r in present)))
    return tuple(out)


__all__ = ["DatasetVerdict", "JOB_TIME_RULE", "PassTime", "dataset_verdicts", "feasibility_by_source",
           "job_rounds"]
