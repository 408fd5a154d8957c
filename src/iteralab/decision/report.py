"""The HTML report (X1) and the one call that writes every derived artefact (``finalize``).

``report.html`` is one self-contained file: plots are PNG images embedded as base64 ``data:`` URIs (made
with matplotlib's Agg backend), the style sheet is inline, there is no script, no font and no external URL.
The page is rendered by jinja2 with autoescaping on, so corpus texts, error messages and table cells are
shown as text, never interpreted as HTML.

Plots: every pass time per configuration with its median marked; quality per configuration against the
threshold and the tolerance band; each gating subgroup per configuration against its reference; memory observed vs estimated; cost per verified corpus per priced
configuration; the calendar window against the 3-, 7- and 30-day packages.
"""

from __future__ import annotations

import base64
import io
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from iteralab.campaign.folder import CampaignFolder
from iteralab.campaign.kinds.interval import NOT_ESTABLISHED, OUTSIDE, WITHIN
from iteralab.campaign.kinds.registry import kind_of
from iteralab.campaign.verdict.judge import subgroup_check
from iteralab.common.files import dumps_json, write_text_atomic
from iteralab.decision.costing import CPU_ONLY
from iteralab.decision.examples import wrong_examples, wrong_predictions
from iteralab.decision.planning import plan_lines
from iteralab.decision.note import cpu_only, exclusion_lines, render_decision, write_decision
from iteralab.decision.rule import Config, Decision, decide
from iteralab.economics.pricing import EXPENSES_APART, EXPENSES_COUNTED
from iteralab.errors import IteraError
from iteralab.evidence.bundle import out_elsewhere, refuse_if_sealed
from iteralab.evidence.memory import memory_table
from iteralab.evidence.reads import Evidence
from iteralab.evidence.speed import LOADED_APART, Comparison, compare, pct, speed_rule_line
from iteralab.evidence.stats import fmt_s, reference_rows, render_stats
from iteralab.evidence.table import CONCURRENT_NOTE
from iteralab.kit.calcul_forfaits import STANDARD_PACKAGE_DAYS, format_amount, format_hours

TEMPLATE = "report.html.j2"
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22")


# ---------------------------------------------------------------------------------------------- memory


def memory_rows(evidence: Evidence) -> tuple[list[dict[str, Any]], str | None]:
    """Memory per variant: observed (and the estimate when ``iteralab.evidence.memory`` provides one).

    Returns the rows and a note; the note says when the estimate is not available.
    """

    return list(memory_table(evidence.folder)), None


# ----------------------------------------------------------------------------------------------- plots


def _figure(width: float = 11.2, height: float = 4.0):
    matplotlib.use("Agg")

    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    ax.grid(axis="y", alpha=0.3)
    return plt, fig, ax


def _png(plt: Any, fig: Any) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def short_hardware(label: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'RTX 4090', for axis labels (the tables keep the full name)."""
    words = [w for w in label.replace("CPU only (", "CPU (").split() if w not in ("NVIDIA", "GeForce", "AMD")]
    text = " ".join(words)
    return text if len(text) <= 18 else text[:17] + "..."


def _short(c: Config, merged: bool) -> str:
    return f"{c.variant}\n{short_hardware(c.hardware)}" if merged else c.variant


def _colors(configs: list[Config], merged: bool) -> list[str]:
    """One colour per hardware when folders are merged, one per variant otherwise."""
    keys = [c.hardware if merged else c.variant for c in configs]
    order = list(dict.fromkeys(keys))
    return [COLORS[order.index(k) % len(COLORS)] for k in keys]


def speedups(configs: list[Config]) -> dict[int, tuple[Config, Comparison]]:
    """Per configuration (by index), the fastest by median on its machine and their T5 comparison (none for the
    fastest itself)."""
    out: dict[int, tuple[Config, Comparison]] = {}
    for hw in dict.fromkeys(c.hardware for c in configs):
        timed = [c for c in configs if c.hardware == hw and c.times.median is not None]
        if not timed:
            continue
        best = min(timed, key=lambda c: c.times.median)  # type: ignore[arg-type,return-value]
        for i, c in enumerate(configs):
            if c in timed and c is not best:
                out[i] = (best, compare(best.times, c.times, "chart", names=(best.variant, c.variant)))
    return out


def _draw_interval(ax: Any, i: int, pair: tuple[Config, Comparison] | None) -> None:
    """The speed-up against the machine's fastest configuration by median, with its interval at the declared
    level drawn as the pass times it allows (the fastest's median times each bound)."""
    if pair is None:
        return
    best, c = pair
    low, high = c.interval or (None, None)
    if c.faster != best.variant or c.ratio is None:
        return
    base = best.times.median or 0.0
    label = f"speed-up interval at {pct(1 - (c.level or 0))} vs the fastest (its median x bounds)"
    if low is not None and high is not None:
        ax.vlines(i + 0.3, base * low, base * high, colors="#555555", linewidth=3, alpha=0.6, zorder=2,
                  label=label)
    elif low is not None:  # one-sided: a lower bound only
        ax.scatter([i + 0.3], [base * low], color="#555555", marker="^", s=40, alpha=0.6, zorder=2, label=label)
    bounds = f"{low:.2f}-{high:.2f}" if low is not None and high is not None else \
        f">= {low:.2f}" if low is not None else "no interval"
    ax.annotate(f"x{c.ratio:.2f} ({bounds}){'' if c.distinguished else ' n.d.'}", (i, 1),
                xycoords=("data", "axes fraction"), xytext=(0, -12), textcoords="offset points", ha="center",
                fontsize=7, color="#333333")


#: How the quality chart abbreviates what an interval establishes (``kinds.interval``).
STANDING_MARKS = {WITHIN: "within, est.", OUTSIDE: "outside, est.", NOT_ESTABLISHED: "not est."}


def _draw_quality_interval(ax: Any, i: int, c: Config) -> None:
    """The interval of the configuration's quality difference with the reference (its worst counted pass), drawn
    in the metric's units as the reference's value plus each bound, beside its passes, with what it establishes."""
    q = c.quality.interval
    ref = c.quality.metric_ref
    if q is None or ref is None or q.delta is None:
        return
    ax.errorbar([i + 0.15], [ref + q.delta], yerr=[[q.delta - q.low], [q.high - q.delta]], fmt="s", ms=4,
                color="#555555", capsize=4, zorder=4,
                label=f"{q.level:.0%} interval of the difference (reference + bounds)")
    ax.annotate(STANDING_MARKS.get(q.standing, q.standing), (i + 0.15, ref + q.low), xytext=(0, -11),
                textcoords="offset points", ha="center", fontsize=7, color="#333333")


def plot_times(configs: list[Config], merged: bool) -> str:
    plt, fig, ax = _figure()
    fastest = speedups(configs)
    for i, (c, color) in enumerate(zip(configs, _colors(configs, merged))):
        shown = [p for p in c.times.passes if p.counted]
        excluded = [p.pass_s for p in c.times.passes if p.excluded and p.pass_s is not None and not p.concurrent]
        apart = [p.pass_s for p in c.times.passes if p.excluded and p.pass_s is not None and p.concurrent]
        offsets = [(k - (len(shown) - 1) / 2) * 0.06 for k in range(len(shown))]
        quiet = [(i + o, p.pass_s) for o, p in zip(offsets, shown) if not p.concurrent]
        loaded = [(i + o, p.pass_s) for o, p in zip(offsets, shown) if p.concurrent]
        if quiet:
            ax.scatter(*zip(*quiet), color=color, s=28, zorder=3, label="pass (every one)" if i == 0 else None)
        if loaded:  # T5: counted, but another process used the machine during the measured region
            ax.scatter(*zip(*loaded), facecolors="none", edgecolors=color, marker="^", s=40, zorder=3,
                       label=CONCURRENT_NOTE)
        if excluded:
            ax.scatter([i + 0.2] * len(excluded), excluded, facecolors="none", edgecolors="grey", s=34, zorder=3,
                       label="excluded pass")
        if apart:  # T4: set apart by stats.loaded_passes, the same for every variant
            ax.scatter([i + 0.2] * len(apart), apart, facecolors="none", edgecolors="grey", marker="^", s=40,
                       zorder=3, label=f"{CONCURRENT_NOTE}, set apart")
        _draw_interval(ax, i, fastest.get(i))
        if c.times.median is not None:
            ax.hlines(c.times.median, i - 0.3, i + 0.3, colors="black", linewidth=2, zorder=4,
                      label="median" if i == 0 else None)
        failed = c.times.count("failed") + c.times.count("aborted")
        if failed:
            ax.annotate(f"{failed} failed", (i, 0), xycoords=("data", "axes fraction"), xytext=(0, 4),
                        textcoords="offset points", ha="center", color="#c00000", fontsize=8)
    ax.set_xticks(range(len(configs)), [_short(c, merged) for c in configs], fontsize=8)
    ax.set_ylabel("measured pass time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Pass times: every pass, median marked; speed-up against the fastest on each machine, with its "
                 "interval (n.d.: not distinguished at the declared level)", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one entry per kind of mark, however many variants carry it
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    return _png(plt, fig)


def plot_quality(configs: list[Config], decision: Decision, merged: bool) -> str:
    metric = decision.evidence[0].protocol.metric
    plt, fig, ax = _figure()
    refs = [c.quality.metric_ref for c in configs if c.quality.metric_ref is not None]
    if refs:
        ref = refs[0]
        sign = -1 if metric.higher_is_better else 1  # a lower-is-better routine may rise by the tolerance
        drop = metric.allowed_drop(ref)
        ax.axhspan(ref + sign * drop, ref, color="#2ca02c", alpha=0.12,
                   label=f"tolerance band (reference {'-' if sign < 0 else '+'} {drop:g})")
        ax.axhline(ref, color="#2ca02c", linewidth=1, linestyle=":", label=f"reference {metric.reference_variant}")
    ax.axhline(metric.threshold, color="#c00000", linewidth=1.2, linestyle="--",
               label=f"threshold {metric.threshold:g}")
    for i, c in enumerate(configs):
        values = list(c.quality.metrics)
        marked = c.quality.tolerance_ok is False or c.quality.threshold_ok is False
        subgroup = c.quality.subgroups_ok is False  # inside the band overall, rejected by a gating subgroup
        ax.scatter([i] * len(values), values, color="#c00000" if marked or subgroup else "#1f77b4", s=30, zorder=3,
                   marker="x" if marked or subgroup else "o")
        if marked or subgroup:
            ax.annotate("MARKED" if marked else "subgroup fails", (i, max(values) if values else metric.threshold),
                        xytext=(0, 6), textcoords="offset points", ha="center", color="#c00000", fontsize=8)
        _draw_quality_interval(ax, i, c)
    ax.set_xticks(range(len(configs)), [_short(c, merged) for c in configs], fontsize=8)
    ax.set_ylabel(metric.label)
    ax.set_title(f"Quality per configuration: {metric.label} against threshold and tolerance; error bar: the "
                 f"{metric.interval_level:.0%} interval of the difference with the reference (worst pass)",
                 fontsize=10)
    unique = dict(zip(*reversed(ax.get_legend_handles_labels())))  # one entry per kind of mark
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    return _png(plt, fig)


def plot_cosine(configs: list[Config], decision: Decision, merged: bool) -> str | None:
    """An embedding job: each counted pass's minimum cosine with the reference vectors, per configuration, against
    the declared ``min_cosine`` (None for a classification job, whose report keeps its plots)."""
    spec = decision.evidence[0].protocol.embedding  # an [embedding] table: an embedding job's only
    if spec is None:
        return None
    plt, fig, ax = _figure()
    ax.axhline(spec.min_cosine, color="#c00000", linewidth=1.2, linestyle="--", label=f"min_cosine {spec.min_cosine:g}")
    for i, c in enumerate(configs):
        values = list(c.quality.values_of("min_cosines"))
        failed = any(v < spec.min_cosine for v in values)
        ax.scatter([i] * len(values), values, color="#c00000" if failed else "#1f77b4", s=30, zorder=3,
                   marker="x" if failed else "o")
        if failed:
            ax.annotate("below min_cosine", (i, max(values)), xytext=(0, 6), textcoords="offset points",
                        ha="center", color="#c00000", fontsize=8)
    ax.set_xticks(range(len(configs)), [_short(c, merged) for c in configs], fontsize=8)
    ax.set_ylabel("minimum cosine with the reference vectors")
    ax.set_title("Vectors per configuration: each pass's lowest document cosine against min_cosine", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    return _png(plt, fig)


def plot_output_lengths(configs: list[Config], decision: Decision, merged: bool) -> str | None:
    """A generation job: each counted pass's mean generated tokens per configuration, with the share of outputs
    ended on ``length`` (None for another job, or when no pass measured its tokens)."""
    protocol = decision.evidence[0].protocol
    if protocol.generation is None or not any(c.quality.values_of("mean_tokens") for c in configs):
        return None  # a [generation] table: a generation job's only
    plt, fig, ax = _figure()
    refs = [v for c in configs if c.variant == protocol.metric.reference_variant
            for v in c.quality.values_of("mean_tokens")]
    if refs and protocol.generation is not None:
        ref, tol = float(np.median(refs)), protocol.generation.tokens_tolerance
        ax.axhspan(ref * (1 - tol), ref * (1 + tol), color="#2ca02c", alpha=0.12,
                   label=f"reference {protocol.metric.reference_variant} (median of its passes) ± {tol:.0%}")
    for i, c in enumerate(configs):
        values = list(c.quality.values_of("mean_tokens"))
        ax.scatter([i] * len(values), values, color="#1f77b4", s=30, zorder=3)
        shares = c.quality.values_of("length_shares")
        if shares:
            ax.annotate(f"length {max(shares):.0%}", (i, max(values)), xytext=(0, 6),
                        textcoords="offset points", ha="center", fontsize=8)
    ax.set_xticks(range(len(configs)), [_short(c, merged) for c in configs], fontsize=8)
    ax.set_ylabel("mean generated tokens per document")
    ax.set_ylim(bottom=0, top=max(protocol.generation.max_new_tokens if protocol.generation else 0,
                                  *(v for c in configs for v in c.quality.values_of("mean_tokens"))) * 1.1)
    ax.set_title("Output length per configuration (share ended on max_new_tokens above each)", fontsize=10)
    if refs:
        ax.legend(fontsize=8, loc="best")
    return _png(plt, fig)


def subgroup_points(decision: Decision) -> dict[str, list[dict[str, Any]]]:
    """Per gating group (``<subgroup>:<group>``), one entry per configuration: its counted passes' values, the
    value of its own campaign's reference pass, the group's metric, the lowest value within the tolerance
    (``bound``) and the subgroup threshold as the verdict's :func:`subgroup_check` states them, and whether the
    group fails there (the checks of ``stats``)."""

    protocol = decision.evidence[0].protocol
    gating = {s.name: s for s in protocol.subgroups if s.gating}
    references = {ev.folder: reference_rows(ev).get(None) for ev in decision.evidence}
    keys = sorted({k for c in decision.configs for k in c.quality.subgroups if k.split(":", 1)[0] in gating})
    out: dict[str, list[dict[str, Any]]] = {}
    for key in keys:
        for c in decision.configs:
            ref_row = references.get(c.folder)
            reference = (ref_row.subgroup_metrics or {}).get(key) if ref_row is not None else None
            check = subgroup_check(protocol, key, None, reference, reference is not None)
            assert check is not None  # keys are gating groups
            out.setdefault(key, []).append({
                "config": c.key, "values": [v for v in c.quality.subgroups.get(key, ()) if v is not None],
                "reference": reference, "bound": check.bound, "threshold": check.threshold, "metric": check.metric,
                "failed": any(f.key == key for f in c.quality.subgroup_failures)})
    return out


def plot_subgroups(decision: Decision, merged: bool) -> str | None:
    """Every gating group in its own panel: each configuration's values, its reference and tolerance bound, the
    subgroup threshold; a failing group is a red cross marked FAILS."""
    points = subgroup_points(decision)
    if not points:
        return None

    configs = list(decision.configs)
    cols = min(len(points), 3)
    rows = math.ceil(len(points) / cols)
    plt, fig, _ = _figure(11.2, 3.0 * rows)
    fig.clf()
    for n, (key, entries) in enumerate(points.items()):
        ax = fig.add_subplot(rows, cols, n + 1)
        ax.grid(axis="y", alpha=0.3)
        for i, e in enumerate(entries):
            if e["bound"] is not None:
                ax.fill_between([i - 0.3, i + 0.3], e["bound"], e["reference"], color="#2ca02c", alpha=0.15,
                                label="reference - tolerance" if i == 0 else None)
                ax.hlines(e["reference"], i - 0.3, i + 0.3, colors="#2ca02c", linestyles=":", linewidth=1)
            ax.scatter([i] * len(e["values"]), e["values"], color="#c00000" if e["failed"] else "#1f77b4", s=30,
                       zorder=3, marker="x" if e["failed"] else "o")
            if e["failed"]:
                ax.annotate("FAILS", (i, max(e["values"], default=e["bound"] or 0.0)), xytext=(0, 6),
                            textcoords="offset points", ha="center", color="#c00000", fontsize=8)
        threshold = entries[0]["threshold"]
        if threshold is not None:
            ax.axhline(threshold, color="#c00000", linewidth=1.2, linestyle="--", label=f"threshold {threshold:g}")
        ax.set_xticks(range(len(configs)), [_short(c, merged) for c in configs], fontsize=7, rotation=20,
                      ha="right")
        ax.set_title(f"{key} ({entries[0]['metric']})", fontsize=9)
        if n == 0:
            ax.legend(fontsize=7, loc="best")
    fig.suptitle("Gating subgroups per configuration: each against its reference and tolerance", fontsize=10)
    return _png(plt, fig)


def plot_memory(rows: list[tuple[str, dict[str, Any]]]) -> str | None:
    if not rows:
        return None
    plt, fig, ax = _figure()
    xs = range(len(rows))
    observed = [(r.get("observed_bytes") or 0) / 2**20 for _, r in rows]
    ax.bar([x - 0.2 for x in xs], observed, width=0.4, color="#1f77b4", label="observed (peak, see scope)")
    estimates = [r.get("estimate_bytes") for _, r in rows]
    if any(e is not None for e in estimates):
        ax.bar([x + 0.2 for x in xs], [(e or 0) / 2**20 for e in estimates], width=0.4, color="#ff7f0e",
               label="estimate")
    ax.set_xticks(list(xs), [label for label, _ in rows], fontsize=8)
    ax.set_ylabel("MiB")
    available = any(e is not None for e in estimates)
    ax.set_title("Memory: observed vs estimated" + ("" if available else " (estimate not available)"), fontsize=10,
                 loc="left")
    # the legend sits outside the axes, right of the title: whatever the bars' heights, it never covers one
    ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False, borderaxespad=0.2)
    return _png(plt, fig)


def plot_cost(configs: list[Config], merged: bool, chosen: Config | None = None) -> str | None:
    priced = [c for c in configs if c.pricing.cost is not None]
    if not priced:
        return None
    plt, fig, ax = _figure()
    for i, (c, color) in enumerate(zip(priced, _colors(priced, merged))):
        cost = c.pricing.cost
        assert cost is not None
        if cost.per_result is None:
            ax.text(i, 0, "undefined:\n0 accepted", ha="center", va="bottom", fontsize=8, color="#c00000")
            continue
        ax.bar(i, float(cost.per_result), color=color, edgecolor="black" if c is chosen else color,
               linewidth=2 if c is chosen else 0)
        label = f"{format_amount(cost.per_result)} {cost.currency}" + (" (chosen)" if c is chosen else "")
        ax.annotate(label, (i, float(cost.per_result)), xytext=(0, 3), textcoords="offset points", ha="center",
                    fontsize=8, fontweight="bold" if c is chosen else "normal")
    ax.set_xticks(range(len(priced)), [_short(c, merged) for c in priced], fontsize=8)
    ax.set_ylabel(f"per verified corpus ({priced[0].pricing.cost.currency})")  # type: ignore[union-attr]
    counted = any(c.project is not None and c.project.counted for c in priced)  # K5: the protocol's declared switch
    ax.set_title("Cost per verified corpus (" + ("project total with the other expenses" if counted else
                                                 "committed package fee") + " / accepted corpora)", fontsize=10)
    return _png(plt, fig)


def plot_window(decision: Decision) -> str | None:
    windows = [("planned", decision.planned.window)]
    merged = len(decision.evidence) > 1
    projected = [c for c in decision.configs if c.window.window is not None and c.window.label == "projected"]
    if projected:
        longest = max(projected, key=lambda c: c.window.window.span_hours)  # type: ignore[union-attr]
        shown = [("chosen", decision.chosen)] if decision.chosen in projected else []
        shown += [("longest", longest)] if longest is not decision.chosen else []
        windows += [(f"projected, {why}: {_short(c, merged).replace(chr(10), ' on ')}", c.window.window)
                    for why, c in shown]
    windows += [(f"observed, passes only{' (' + short_hardware(e.hardware.label) + ')' if merged else ''}", o.window)
                for e, o in zip(decision.evidence, decision.observed) if o is not None]
    windows = [(label, w) for label, w in windows if w is not None]
    if not windows:
        return None
    plt, fig, ax = _figure(11.2, 1.2 + 0.42 * (len(windows) + len(STANDARD_PACKAGE_DAYS)))
    labels, values, colors = [], [], []
    quoted = {c.pricing.quote.gpu_id for c in decision.configs if c.pricing.quote is not None}
    prices: dict[int, list[str]] = {}
    for e in sorted(decision.catalog.entries, key=lambda e: (e.gpu_id, e.package_days)):
        if quoted and e.gpu_id not in quoted:
            continue
        total = e.price_per_lot * decision.lots_rented
        prices.setdefault(e.package_days, []).append(f"{e.gpu_id} {format_amount(total)} {decision.catalog.currency}")
    if not quoted:
        for days in prices:
            prices[days][-1] += " (catalog, not priced here)"
    for days in STANDARD_PACKAGE_DAYS:
        labels.append(f"{days}-day package")
        values.append(days * 24)
        colors.append("#bbbbbb")
    for label, w in windows:
        labels.append(f"{label} window")
        values.append(float(w.span_hours))  # type: ignore[union-attr]
        colors.append("#1f77b4" if label.startswith("planned") else "#ff7f0e" if label.startswith("projected")
                      else "#2ca02c")
    ax.barh(range(len(values)), values, color=colors)
    left = min(values) / 2
    for i, (label, value) in enumerate(zip(labels, values)):
        days = int(label.split("-")[0]) if label.endswith("package") else None
        if days:  # a package's prices, written inside its light bar from the left: the axis ends at the data
            ax.annotate("; ".join(prices.get(days, ["not in catalog"])), (left, i), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
        else:
            ax.annotate(f"{format_hours(Decimal(str(value)))} h", (value, i), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("hours (log scale)")
    ax.invert_yaxis()
    ax.set_title("Calendar window against the 3-, 7- and 30-day packages", fontsize=10)
    ax.set_xlim(left=left, right=max(values) * 1.8)  # room for the last bar's label, no empty decade after it
    return _png(plt, fig)


# ---------------------------------------------------------------------------------------------- render


def _config_row(c: Config) -> dict[str, Any]:
    b = c.pricing.budget
    return {
        "key": c.key, "feasible": c.feasible, "failures": c.failures, "quality": c.quality,
        "marked": c.quality.mark, "median": fmt_s(c.times.median), "times": ", ".join(fmt_s(p.pass_s) + (" (under concurrent load)" if p.concurrent else "")
                                                 + ("" if p.counted else ", set apart") for p in c.times.passes
                                                 if p.counted or p.exclusion_reason == LOADED_APART),
        "window": c.window.describe(), "deadline": c.window.deadline_text(), "meets_deadline": c.window.meets_deadline,
        "package": "not priced: CPU only" if c.pricing.reason == CPU_ONLY else c.pricing.describe(),
        "committed": f"{format_amount(b.total)} {b.currency}" if b else "-",
        "accepted": c.accepted, "cost": c.pricing.cost.describe() if c.pricing.cost else "-",
        "exclusions": c.exclusions, "chosen": False,
    }


def expense_rows(decision: Decision) -> list[dict[str, Any]]:
    """K5, one row per configuration: package fee, each other expense (or 'not applicable' with its reason), project
    total, cost per verified corpus."""
    costs = decision.costs
    if costs is None:
        return []
    rows = []
    for c in decision.configs:
        p = c.project
        if p is None:
            rows.append({"key": c.key, "priced": False, "cells": [], "fee": "not priced", "total": "-", "cost": "-",
                         "chosen": False})
            continue
        cur = p.budget.currency
        cells = [f"{format_amount(e.amount)} {cur}" if e in p.expenses else f"not applicable ({e.scope})"
                 for e in costs.expenses]
        rows.append({"key": c.key, "priced": True, "cells": cells, "fee": f"{format_amount(p.budget.total)} {cur}",
                     "total": f"{format_amount(p.project_total)} {cur}",
                     "cost": c.pricing.cost.describe() if c.pricing.cost else "-", "chosen": c is decision.chosen})
    return rows


def render_report(decision: Decision, decision_md: str | None = None) -> str:
    """The report page as one self-contained HTML string."""

    configs = list(decision.configs)
    merged = len(decision.evidence) > 1
    rows = [_config_row(c) for c in configs]
    for row, c in zip(rows, configs):
        row["chosen"] = c is decision.chosen
    memory = []
    memory_notes = []
    for hw_ev in decision.evidence:
        mrows, note = memory_rows(hw_ev)
        for r in mrows:
            label = f"{r['variant']}\n{short_hardware(hw_ev.hardware.label)}" if merged else r["variant"]
            memory.append((label, r))
        if note and note not in memory_notes:
            memory_notes.append(note)
    campaigns = []
    for ev, st in zip(decision.evidence, decision.stats):
        failures = [r for r in ev.rows if not r.ok]
        campaigns.append({"folder": str(ev.folder), "hardware": ev.hardware.label, "rows": ev.table,
                          "failures": failures, "examples": wrong_examples(ev),
                          "stats": render_stats(st)})
    cpu = cpu_only(decision)
    exclusions = exclusion_lines(decision)
    env = Environment(loader=FileSystemLoader(str(Path(__file__).with_name("templates"))), autoescape=True,
                      undefined=StrictUndefined, keep_trailing_newline=True)
    proto = decision.evidence[0].campaign.protocol
    return env.get_template(TEMPLATE).render(
        d=decision, proto=proto, question=decision.evidence[0].protocol.question, rows=rows,
        campaigns=campaigns, columns=kind_of(decision.evidence[0].protocol).table_columns,
        decision_md=decision_md or render_decision(decision),
        plot_times=plot_times(configs, merged), plot_quality=plot_quality(configs, decision, merged),
        plot_subgroups=plot_subgroups(decision, merged), plot_cosine=plot_cosine(configs, decision, merged),
        plot_lengths=plot_output_lengths(configs, decision, merged),
        plot_memory=plot_memory(memory), memory=memory, memory_notes=memory_notes,
        plot_cost=plot_cost(configs, merged, decision.chosen), cpu_only=cpu, exclusions=exclusions,
        plot_window=plot_window(decision), fmt_s=fmt_s, concurrent_note=CONCURRENT_NOTE,
        speed_rule=speed_rule_line(decision.evidence[0].protocol.stats),
        plan_lines=plan_lines(decision.chosen, decision.machines, decision.plans)
        if decision.evidence[0].protocol.job is not None else [],
        datasets=[(c.key, v) for c in configs for v in c.datasets], expense_rows=expense_rows(decision),
        expense_rule=(EXPENSES_COUNTED if decision.costs.counted else EXPENSES_APART) if decision.costs else None,
        corpus_size=decision.evidence[0].corpus_size, fingerprint=decision.evidence[0].fingerprint,
        mib=lambda b: "-" if b in (None, "") else f"{int(b) / 2**20:.1f} MiB",
    )


def render_all_stats(decision: Decision) -> tuple[str, dict[str, Any]]:
    text = "\n".join(render_stats(st) for st in decision.stats)
    data = {"schema_version": 1, "campaigns": [st.to_dict() for st in decision.stats]}
    return text, data


def finalize(campaign_dirs: list[Path], out: Path | None = None, *, rental_id: str | None = None,
             project: bool = False, catalog: str | Path | None = None, lots: int | None = None,
             partial: bool = False) -> dict[str, Any]:
    """Write stats.txt, stats.json, decision.md, decision.json and report.html into ``out`` (default: the
    campaign folder, when there is only one). Returns the paths written and the one-line decision.
    """
    folders = [CampaignFolder.open(d).path for d in campaign_dirs]
    if out is None:
        if len(folders) != 1:
            raise IteraError("several campaign folders need --out", hint="e.g. --out decision-out")
        out = folders[0]
    out = Path(out)
    refuse_if_sealed(out, "writing stats, decision and report.html into it", out_elsewhere("report"))
    out.mkdir(parents=True, exist_ok=True)
    decision = decide(list(campaign_dirs), rental_id=rental_id, project=project, catalog=catalog, lots=lots,
                      partial=partial)
    text, data = render_all_stats(decision)
    paths: dict[str, Any] = {"stats_txt": out / "stats.txt", "stats_json": out / "stats.json"}
    write_text_atomic(paths["stats_txt"], text)
    write_text_atomic(paths["stats_json"], dumps_json(data))
    paths.update(write_decision(decision, out))
    paths["report_html"] = out / "report.html"
    write_text_atomic(paths["report_html"], render_report(decision, paths["decision_md"].read_text("utf-8")))
    return {**{k: str(v) for k, v in paths.items()}, "decision": decision.one_line,
            "chosen": decision.chosen.key if decision.chosen else None}


__all__ = ["finalize", "memory_rows", "render_all_stats", "render_report", "short_hardware", "subgroup_points",
           "wrong_predictions"]
