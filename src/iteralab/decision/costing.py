"""What a configuration commits (K1–K4): the observed device matched *exactly* to a catalog row (a GPU, or a
CPU server package with the same CPU model and logical core count), the cheapest listed package that covers
its window, the cost per verified result. The arithmetic is the kit's, never re-implemented."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import CATALOG, DECISION_CATALOG, PROTOCOL, CampaignFolder
from iteralab.decision.windows import WindowInfo
from iteralab.economics.lots import cheapest_covering
from iteralab.economics.pricing import (DEFAULT_CATALOG, Catalog, CatalogEntry, CostPerResult, PackageBudget,
                                        cost_per_result, format_amount, load_catalog)
from iteralab.economics.window import WindowQuote
from iteralab.evidence.reads import Evidence
from iteralab.evidence.stats import VariantTimes
from iteralab.kit.calcul_forfaits import find_entry, format_hours
from iteralab.plan.paths import resolve

CPU_ONLY = ("ran on CPU only: no rental GPU was observed and the catalog lists no CPU server package for this "
            "CPU model and core count, so no package is priced from these runs")


def remote_work(service: str) -> str:
    """Why a campaign whose callable sends its work to another machine (``model.runs_on = "remote"``) is never
    priced: the hardware the manifest observed is the caller's, not the one that did the work."""
    return (f"the model's work ran on the remote service {service!r} (model.runs_on = 'remote'), which was not "
            "observed as rental hardware: the times are that service's as seen from the caller, network included, "
            "so no package is priced from them (run the model on the rental itself to price it)")


def observed_label(ev: Evidence) -> str:
    """The hardware a campaign's times measure: the observed machine's label, or, for a callable that sends its
    work elsewhere, the remote service named by the protocol, called from the observed machine."""
    service = ev.protocol.model.remote_service
    label = ev.hardware.label
    return label if service is None else f"remote service {service!r} (called from {label})"


def observed_line(ev: Evidence) -> str:
    """What was observed of a campaign's hardware, in words (the decision note's covered load)."""
    service = ev.protocol.model.remote_service
    if service is None:
        return f"hardware observed {ev.hardware.label}"
    return (f"hardware observed {ev.hardware.label}, which ran the caller only: the model's work ran on the remote "
            f"service {service!r} (model.runs_on = 'remote'), not observed; the times are that service's as seen "
            "from this machine, network included")


# ------------------------------------------------------------------------------------------- pricing


@dataclass(frozen=True)
class Pricing:
    gpu: CatalogEntry | None = None
    quote: WindowQuote | None = None
    budget: PackageBudget | None = None
    cost: CostPerResult | None = None
    reason: str | None = None
    #: X3/K1: how a data-parallel variant's cards map onto lots (named in the decision note)
    note: str | None = None

    @property
    def priced(self) -> bool:
        return self.budget is not None

    def describe(self) -> str:
        if self.budget is None:
            return f"not priced: {self.reason}"
        b = self.budget
        return (f"{b.gpu_id} {b.package_days}-day package, {b.lots} lot{'s' if b.lots != 1 else ''} "
                f"({b.cards} card{'s' if b.cards != 1 else ''}): {format_amount(b.total)} {b.currency} committed")

    def to_dict(self) -> dict[str, Any]:
        out = {"gpu_id": self.gpu.gpu_id if self.gpu else None, "reason": self.reason,
               "quote": self.quote.to_dict() if self.quote else None,
               "budget": self.budget.to_dict() if self.budget else None,
               "cost_per_result": self.cost.to_dict() if self.cost else None}
        if self.note:
            out["note"] = self.note
        return out


def match_gpu(name: str, catalog: Catalog) -> CatalogEntry | None:
    """The catalog GPU row that prices an observed GPU name: its ``device_match`` names/patterns, else its
    ``gpu_name`` after whitespace and case normalisation. Never by shared words ('RTX 4090 D' is not 'RTX 4090')."""
    return find_entry(catalog, name)


def cpu_entry(catalog: Catalog, cpu: str, cores: int | None) -> CatalogEntry | None:
    """The CPU server package that prices a CPU run: a row with ``cpu_cores`` that names the observed CPU model
    and gives its core count. A row without ``cpu_cores`` never does, even when named exactly as the CPU: it
    could be a server of any size."""
    return next((e for e in catalog.entries if e.is_cpu and e.matches(cpu, cores)), None)


def coreless_row(catalog: Catalog, cpu: str) -> str | None:
    """The sentence that says why a catalog row named as the observed CPU does not price it (None: no such row)."""
    row = next((e for e in catalog.entries if not e.is_cpu and e.matches(cpu)), None)
    if row is None:
        return None
    return (f"catalog row {row.gpu_id}: names the observed CPU but gives no cpu_cores; a CPU run is priced only by "
            "a row with the same model and core count")


def _observed_gpu(ev: Evidence, times: VariantTimes) -> tuple[str | None, str | None]:
    """(observed GPU name, None) or (None, reason it cannot be priced)."""
    hw = ev.hardware
    if not hw.gpus:
        return None, CPU_ONLY
    devices = {r.device or "" for r in ev.rows if r.variant == times.variant and r.ok}
    if devices and all(d == "cpu" for d in devices):
        return None, (f"ran on CPU although {hw.label} was visible: these times say nothing about the GPU, "
                      "so no package is priced from them")
    indexes = {int(x.split(":")[1]) for d in devices for x in d.split(",")  # a data-parallel row names each card
               if re.fullmatch(r"cuda:\d+", x)}
    names = {hw.gpus[i] for i in indexes if i < len(hw.gpus)} or set(hw.gpus)
    if len(names) > 1:
        return None, f"several GPU models were visible ({', '.join(sorted(names))}) and the variant's device is unknown"
    return names.pop(), None


def lots_for_cards(cards: int, entry: CatalogEntry) -> int:
    """Lots a variant running on ``cards`` cards needs: a lot is priced once whatever number of its cards is
    used (K1), so ceil(cards / cards per lot), at least one."""
    return max(1, math.ceil(cards / entry.cards_per_lot))


def _cards_note(variant: str, workers: int, entry: CatalogEntry, lots: int) -> tuple[int, str | None]:
    """(lots to price, the sentence the note shows) for a data-parallel variant (X3); single-device: unchanged."""
    if workers <= 1:
        return lots, None
    if entry.is_cpu:
        return lots, (f"{variant} runs {workers} CPU worker processes on one {entry.gpu_name} server: priced as that "
                      "server's package, never as cards")
    need = lots_for_cards(workers, entry)
    per = f"a {entry.gpu_id} lot holds {entry.cards_per_lot} card{'s' if entry.cards_per_lot != 1 else ''}"
    if need > lots:
        return need, (f"{variant} runs data-parallel over {workers} cards and {per}: it needs {need} lots "
                      f"(ceil({workers} / {entry.cards_per_lot})), so it is priced as {need} lots, not {lots}")
    return lots, (f"{variant} runs data-parallel over {workers} cards and {per}: {lots} lot"
                  f"{'s' if lots != 1 else ''} priced once each, the card count is never multiplied in again (K1)")


def price_config(ev: Evidence, times: VariantTimes, window: WindowInfo, accepted: int, catalog: Catalog,
                 lots: int) -> Pricing:
    """Cheapest listed package of the observed GPU that covers the window, via the kit's functions; never for a
    callable whose work runs on a remote service (the observed hardware did not do it)."""
    service = ev.protocol.model.remote_service
    if service is not None:
        return Pricing(reason=remote_work(service))
    name, reason = _observed_gpu(ev, times)
    hw = ev.hardware
    if name is None and not hw.gpus and hw.cpu:
        entry = cpu_entry(catalog, hw.cpu, hw.cpu_cores)  # a CPU server package competes honestly
        if entry is None:
            return Pricing(reason=CPU_ONLY, note=coreless_row(catalog, hw.cpu))
    elif name is None:
        return Pricing(reason=reason)
    else:
        entry = match_gpu(name, catalog)
    if entry is None:
        known = ", ".join(f"{g} ({catalog.entries_for(g)[0].gpu_name})" for g in catalog.gpu_ids())
        return Pricing(reason=f"GPU '{name}' observed in the manifest is not in catalog {catalog.path} "
                              f"(version {catalog.version}); rows match exactly (gpu_name or device_match), "
                              f"never by shared words; available: {known}")
    workers = getattr(_variant(ev, times.variant), "data_parallel", 1)
    lots, note = _cards_note(times.variant, workers, entry, lots)
    if window.window is None:
        return Pricing(gpu=entry, reason=f"no window to cover: {window.reason}", note=note)
    quote, budget = cheapest_covering(catalog, entry.gpu_id, window.window, lots)
    if budget is None:
        return Pricing(gpu=entry, quote=quote, note=note,
                       reason=f"no listed package of {entry.gpu_id} covers the {window.label} window of "
                              f"{format_hours(window.window.span_hours)} h: change the schedule, or price extra "
                              "periods explicitly (never an automatic extension)")
    return Pricing(entry, quote, budget, cost_per_result(budget.total, accepted, budget.currency), note=note)


def _variant(ev: Evidence, name: str) -> Any:
    try:
        return ev.protocol.variant(name)
    except KeyError:
        return None


def pricing_catalog(ev: Evidence, path: str | Path | None) -> tuple[Catalog, str, Path]:
    """The catalog to price from, a line saying where it came from (named in the decision note) and the file
    read (its sha256 goes into decision.json). Without ``--catalog``, the copy of the catalog the stored decision
    priced from (:data:`DECISION_CATALOG`) comes first, so a folder moved elsewhere decides the same way."""
    if path is not None:
        return load_catalog(path), (f"`{path}`, given with --catalog when deciding (it overrides the copy "
                                    "sealed in the campaign folder)"), Path(path)
    folder = CampaignFolder(ev.folder)
    given = folder.decision_catalog_path
    if given is not None:
        return load_catalog(given), (f"`{DECISION_CATALOG}` of the campaign folder (the catalog given with --catalog "
                                     "when its decision was written; it overrides the protocol's)"), given
    copy = folder.catalog_path
    if copy is not None:
        origin = (ev.campaign.catalog or {}).get("source") or "the protocol's catalog"
        return load_catalog(copy), f"`{CATALOG}` of the campaign folder (sealed copy of {origin})", copy
    declared = ev.protocol.catalog.path
    if declared is None:
        return (load_catalog(None), "the shipped snapshot (this campaign folder holds no catalog copy)",
                DEFAULT_CATALOG)
    source = resolve(ev.campaign.protocol.source or ev.folder / PROTOCOL, declared)
    return load_catalog(source), f"`{source}` (this campaign folder holds no catalog copy)", source
