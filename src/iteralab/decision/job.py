"""The production job, planned (W4): from a configuration's *observed* throughput on the comparison corpus,
the processing time of the protocol's ``[job] documents``, its start-up phases, and which listed packages of
the observed hardware would cover it. Every figure here is labelled "planned from observed throughput" and
is never counted as an accepted result (K6): only verified corpora are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from iteralab.economics.pricing import Catalog, CatalogEntry, format_amount

LABEL = "planned from observed throughput"


@dataclass(frozen=True)
class JobPlan:
    """One configuration's production job, planned."""

    key: str
    documents: int
    docs_per_s_median: float
    docs_per_s_slowest: float
    startup_s: float
    hours_median: float
    hours_slowest: float
    packages: tuple[str, ...]
    reason: str | None
    #: T5: the slowest counted pass, which the packages are checked against, ran while another process loaded
    #: the machine; its figure is kept (it was counted) and said to be so wherever it is shown
    slowest_concurrent: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"configuration": self.key, "documents": self.documents, "label": LABEL,
                "docs_per_s_median": self.docs_per_s_median, "docs_per_s_slowest": self.docs_per_s_slowest,
                "startup_s": self.startup_s, "hours_median": self.hours_median,
                "hours_slowest": self.hours_slowest, "slowest_pass_under_concurrent_load": self.slowest_concurrent,
                "covering_packages": list(self.packages), "packages_reason": self.reason}


def _covering(entry: CatalogEntry | None, catalog: Catalog, hours: float) -> tuple[tuple[str, ...], str | None]:
    if entry is None:
        return (), "no catalog row prices this hardware"
    options = []
    for e in catalog.entries_for(entry.gpu_id):
        if e.package_hours >= hours:
            options.append(f"{e.gpu_id} {e.package_days}-day package, 1 lot: "
                           f"{format_amount(e.price_per_lot)} {e.currency}")
    if not options:
        longest = max(e.package_days for e in catalog.entries_for(entry.gpu_id))
        return (), (f"no listed package covers {math.ceil(hours)} h (longest: {longest} days): price extra "
                    "periods explicitly, never an automatic extension")
    return tuple(options), None


def plan_job(key: str, documents: int, corpus_size: int, pass_times: tuple[float, ...], startup_s: float,
             entry: CatalogEntry | None, catalog: Catalog, *, slowest_concurrent: bool = False) -> JobPlan | None:
    """The plan for ``documents`` from the counted pass times over ``corpus_size`` documents (None: no pass);
    ``slowest_concurrent``: the slowest of them was measured under concurrent load (the plan then says so).

    One lot only: extra cards of a lot are never assumed to speed a measured single-device configuration up.
    Packages are checked against the slowest counted pass's throughput, the cautious figure."""
    if not pass_times or corpus_size <= 0:
        return None
    ordered = sorted(pass_times)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else (ordered[len(ordered) // 2 - 1] +
                                                                   ordered[len(ordered) // 2]) / 2
    fast, slow = corpus_size / median, corpus_size / ordered[-1]
    hours_median = (documents / fast + startup_s) / 3600
    hours_slowest = (documents / slow + startup_s) / 3600
    packages, reason = _covering(entry, catalog, hours_slowest)
    return JobPlan(key, documents, fast, slow, startup_s, hours_median, hours_slowest, packages, reason,
                   slowest_concurrent)


def render_job(plans: list[JobPlan], documents: int) -> list[str]:
    """The decision note's section (Markdown)."""
    lines = ["## Production job (planned)", "",
             f"{documents} documents ([job] of the protocol), {LABEL} on the comparison corpus; planned, not "
             "observed, and never counted as accepted results (K6).", "",
             "| configuration | docs/s (median; slowest pass) | start-up (s) | planned time (median; slowest) | "
             "packages that cover the slowest plan |", "|---|---|---|---|---|"]
    for p in plans:
        covering = "; ".join(p.packages) if p.packages else f"none: {p.reason}"
        loaded = " (slowest pass measured under concurrent load)" if p.slowest_concurrent else ""
        lines.append(f"| {p.key} | {p.docs_per_s_median:.1f}; {p.docs_per_s_slowest:.1f}{loaded} | {p.startup_s:.1f} | "
                     f"{p.hours_median:.2f} h; {p.hours_slowest:.2f} h | {covering} |")
    return lines + [""]
