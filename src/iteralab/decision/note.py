"""The decision note (D2): the Markdown a person reads, and the JSON a machine reads, written atomically."""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import CATALOG, DECISION, DECISION_CATALOG
from iteralab.campaign.manifest import rocm_compatibility, rocm_compatibility_line
from iteralab.common.files import dumps_json, sha256_file, write_bytes_atomic, write_text_atomic
from iteralab.decision.costing import CPU_ONLY, observed_label, observed_line, remote_work
from iteralab.decision.job import render_job
from iteralab.decision.planning import plan_lines
from iteralab.campaign.kinds.interval import REPLICATES
from iteralab.decision.rule import SCOPE, Config, Decision, package_summary
from iteralab.errors import IteraError
from iteralab.economics.pricing import EXPENSES_APART, EXPENSES_COUNTED, format_amount
from iteralab.evidence.bundle import out_elsewhere, refuse_if_sealed
from iteralab.evidence.datasets import JOB_TIME_RULE
from iteralab.evidence.speed import speed_rule_line
from iteralab.evidence.stats import INTERRUPTED_LINE, fmt_s
from iteralab.kit.calcul_forfaits import format_hours
from iteralab.plan.metric import QUERY_METRICS


# -------------------------------------------------------------------------------------------- the note


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _yes(value: bool | None, yes: str = "yes", no: str = "no") -> str:
    return "-" if value is None else yes if value else no


def _quality_cell(c: Config) -> str:
    q = c.quality
    if q.completed == 0:
        return "not evaluated"
    if q.meets_quality:
        return "ok"
    return "MARKED: outside tolerance" if q.tolerance_ok is False else "fails"


def cpu_only(d: Decision) -> bool:
    """True when every configuration that completed its passes is unpriced because no GPU was observed."""
    done = [c for c in d.configs if not c.failures]
    return bool(done) and all(c.pricing.reason == CPU_ONLY for c in done)


def shared_unpriced(d: Decision) -> str | None:
    """The one reason every configuration that completed its passes is unpriced for, when it is the campaign's own
    (no GPU observed, or the work ran on a remote service), so that it is said once; None otherwise."""
    if cpu_only(d):
        return CPU_ONLY
    service = d.evidence[0].protocol.model.remote_service
    done = [c for c in d.configs if not c.failures]
    if len(d.evidence) == 1 and service is not None and done and all(c.pricing.reason == remote_work(service)
                                                                      for c in done):
        return remote_work(service)
    return None


def exclusion_lines(d: Decision) -> list[tuple[str, str]]:
    """(who, why) for every configuration left out of the choice, and every excluded pass."""
    shared = shared_unpriced(d)
    common = shared is not None
    lines = [("every configuration", f"not priced, {shared}")] if common else []
    for c in d.configs:
        unpriced = not (c.pricing.priced or c.failures or common)
        why = list(c.exclusions) + ([f"not priced: {c.pricing.reason}"] if unpriced else [])
        if why:
            lines.append((c.key, "; ".join(why)))
    for c in d.configs:
        for pt in c.times.excluded:
            lines.append((f"pass {pt.pass_id} ({c.key})", f"excluded from the statistics: {pt.exclusion_reason}"))
        for pass_id in c.times.interrupted:
            lines.append((f"pass {pass_id} ({c.key})", INTERRUPTED_LINE))
    return lines


def covered_datasets(ev: Any) -> list[str]:
    """The covered-load lines of a several-dataset campaign (K6); None for one corpus."""
    records = ev.campaign.datasets
    listed = "; ".join(f"{r.name} ({r.size} documents, fingerprint `{r.fingerprint}`)" for r in records)
    return [f"- {ev.corpus_size} documents in {len(records)} datasets (combined fingerprint `{ev.fingerprint}`): "
            f"{listed}"]


def dataset_section(d: Decision) -> list[str]:
    """Per-dataset verdicts of every configuration (K6); nothing for a one-corpus campaign."""

    if not any(c.datasets for c in d.configs):
        return []
    out = ["## Datasets (K6)", "",
           "Every configuration processes the same datasets under the same checks. A configuration is accepted "
           "only when every dataset is verified; each verified dataset counts once (by its fingerprint) in the "
           "cost per verified result = committed budget / verified datasets.", "",
           "| configuration | dataset | documents | counted passes | accepted | median pass (s) | verdict |",
           "|---|---|---|---|---|---|---|"]
    for c in d.configs:
        for v in c.datasets:
            out.append("| " + " | ".join(_cell(x) for x in (
                c.key, v.name, v.size, v.counted, v.accepted, fmt_s(v.median_pass_s),
                "verified" if v.verified else "NOT verified: " + ("; ".join(v.reasons) or "no counted pass"))) + " |")
    return out + ["", f"- {JOB_TIME_RULE}; the median pass in the configurations table is that of the job "
                      "times, not the sum of the per-dataset medians above", ""]


def _parallel_words(d: Decision, c: Config, v: Any) -> str:
    """'data-parallel over 2 cards, ' or 'data-parallel over 2 CPU processes, ' (X3: processes on a CPU are never
    called cards); '' for a single-device variant."""
    n = getattr(v, "data_parallel", 1)
    if n <= 1:
        return ""
    on_gpu = any((r.device or "").startswith("cuda") for e in d.evidence if e.folder == c.folder
                 for r in e.rows if r.variant == c.variant)
    return f"data-parallel over {n} {'cards' if on_gpu else 'CPU processes'}, "


def setting_words(protocol: Any, v: Any) -> str:
    """A variant's settings in words: batch size, precision, bucketing, padding, compile; for a callable, which owns
    its model, precision and tokenization, the batch size alone (the others apply to nothing it does)."""
    if protocol.model.kind == "callable":
        return f"batch size {v.batch_size} (the callable owns its model, precision and padding)"
    return (f"batch size {v.batch_size}, precision {v.precision}, bucketing {'on' if v.bucketing else 'off'}, "
            f"padding {v.padding}, compile {'on' if v.compile else 'off'}")


def render_decision(d: Decision) -> str:
    """The decision note (Markdown, D2): deterministic, so it can be compared with a golden file."""
    proto = d.evidence[0].campaign.protocol
    c4 = {e.folder: rocm_compatibility_line(e.manifest) for e in d.evidence}  # ROCm runs only (C4)
    out = [f"# Decision note: {proto.name}, protocol version {proto.version}", "",
           f"Question (locked protocol): {d.evidence[0].protocol.question}", "", "## Decision", ""]
    out += _decision_lines(d)
    out += _covered_load_lines(d, c4)
    out += _configuration_rows(d, c4)
    out.append("")
    out += dataset_section(d)
    if d.costs is not None:
        out += render_expenses(d)
    p = d.evidence[0].protocol
    if p.job is not None:
        out += render_job(list(d.jobs), p.job.documents)
        if not d.jobs:
            out += ["No qualifying configuration: nothing to plan.", ""]
        out += render_plans(d)
    out += ["## Excluded and why", ""]
    out += [f"- {who}: {why}" for who, why in exclusion_lines(d)] or ["- nothing was excluded"]
    out += certainty_lines(d)
    out += speed_lines(d)
    out += _calendar_lines(d)
    out += _closing_lines(d)
    return "\n".join(out) + "\n"


def certainty_lines(d: Decision) -> list[str]:
    """Q2 and T5 per variant: the quality difference with the reference and its interval (n, level, what it
    establishes against the tolerance), and each speed comparison the variant is in, with its interval."""
    p = d.evidence[0].protocol
    unit = "queries" if p.metric.name in QUERY_METRICS else "documents"
    gate = (f"the worse bound of the {p.metric.interval_level:.0%} interval" if p.metric.confidence is not None
            else f"the point estimate (the {p.metric.interval_level:.0%} interval reported beside it)")
    out = ["", "## How sure: quality and speed per variant (Q2, T5)", "",
           f"- quality: {p.metric.label} difference variant - reference {p.metric.reference_variant}, paired "
           f"bootstrap over the {unit} ({REPLICATES} replicates, seeded from the locked protocol); tolerance "
           f"{p.metric.tolerance_text}; the gate uses {gate}"]
    for st in d.stats:
        hw = observed_label(st.evidence)
        for q in st.quality:
            i = q.interval
            quality = (f"{i.text.replace(' units:', f' {unit}:')}" if i is not None else
                       "no interval (no counted pass compared with the reference, or a metric with no per-unit "
                       "form)")
            out.append(f"- **{q.variant}** ({hw}): {quality}")
            if i is not None:
                out += [f"  - {key}: {i.level:.0%} interval [{low:+.4f}, {high:+.4f}]"
                        for key, (low, high) in i.subgroups.items()]
            out += [f"  - speed vs {c.b if c.a == q.variant else c.a}"
                    f"{'' if not c.scope else f' ({c.scope})'}: {speed_words(c)}"
                    for c in st.comparisons if q.variant in (c.a, c.b)]
    return out


def speed_words(c: Any) -> str:
    """A speed comparison (``evidence.speed.Comparison``) in a few words: its verdict, the speed-up by median with
    its interval, the rank test's p and the passes (the whole text is under Speed comparisons or What remains
    uncertain)."""
    if c.ratio is None or c.faster is None:
        return c.text
    low, high = c.interval or (None, None)
    interval = ("no interval at this level" if low is None else f"interval {low:.2f}x to {high:.2f}x"
                if high is not None else f"at least {low:.2f}x")
    need = f"; {c.needed} passes a variant could reach the level" if c.needed else ""
    return (f"{c.verdict}: {c.faster} {c.ratio:.2f}x faster by median ({interval}, level {c.level:g} {c.sided}-"
            f"sided), p = {c.p_value:.3g}, {c.n[0]} vs {c.n[1]} passes{need}")


def speed_lines(d: Decision) -> list[str]:
    """T5: the comparison rule declared before timing and the speed comparisons it establishes (the others are
    under 'What remains uncertain')."""
    established = [f"- {hw}, {c.scope}: {c.a} vs {c.b}: {c.text}" for hw, c in d.speed_comparisons()
                   if c.distinguished]
    others = sum(1 for _, c in d.speed_comparisons() if not c.distinguished)
    return ["", "## Speed comparisons (T5)", "", f"- rule: {speed_rule_line(d.evidence[0].protocol.stats)}",
            *(established or ["- no speed comparison is established at the declared level"]),
            *([f"- {others} not established: listed under 'What remains uncertain'"] if others else [])]


def _decision_lines(d: Decision) -> list[str]:
    """The chosen setting (or the one-line answer), each observed machine's configuration, the rental."""
    p = d.evidence[0].protocol
    chosen = d.chosen
    out = []
    if d.mix_chosen and d.plans is not None and d.plans.mix is not None:
        out.append(f"**Chosen rental: a mix of observed machines**: {d.plans.mix.describe()} (strictly cheaper "
                   "than the best single-machine plan; see Rental plans).")
    if chosen is not None:
        out.append(f"**{'Best single-machine plan' if d.mix_chosen else 'Chosen setting'}: {chosen.key}**: "
                   f"{package_summary(chosen)}.")
        v = p.variant(chosen.variant)
        out.append(f"Setting: {setting_words(p, v)}, {_parallel_words(d, chosen, v)}{d.lots_rented} "
                   f"lot{'s' if d.lots_rented != 1 else ''}.")
    else:
        out.append(f"**{d.one_line[0].upper()}{d.one_line[1:]}.**")
    out += ["", "Both halves of the answer:", "", "- **Configuration on each observed machine** (no price is needed "
            "to choose among configurations that fit the same package on the same hardware):"]
    for m in d.machines:
        out.append(f"  - {m.line}")
        if m.chosen is not None:
            v = p.variant(m.chosen.variant)
            out.append(f"    setting: {setting_words(p, v)}"
                       + (f", {_parallel_words(d, m.chosen, v).rstrip(', ')}" if v.data_parallel > 1 else ""))
    out.append(f"- **Rental**: {d.rental_line}")
    out += [f"- **{n}**" for n in d.notes if n.startswith("PARTIAL DECISION")]
    return out


def _covered_load_lines(d: Decision, c4: dict[str, str | None]) -> list[str]:
    """What the answer covers (documents, protocol, metric, catalog, hardware) and the rule's reasons."""
    ev = d.evidence[0]
    proto = ev.campaign.protocol
    p = ev.protocol
    chosen = d.chosen
    return ["", "## Covered load", "",
            *(covered_datasets(ev) if ev.campaign.datasets else
              [f"- {ev.corpus_size} documents, corpus fingerprint `{ev.fingerprint}`"]),
            f"- accepted deliveries: {chosen.accepted if chosen else 'see the table'} (each "
            f"{'dataset' if ev.campaign.datasets else 'corpus'} counted once by "
            "fingerprint, however many passes delivered it)",
            f"- protocol `{proto.name}` version {proto.version}, sha256 `{proto.sha256}`, locked at "
            f"{proto.locked_at}",
            f"- metric {p.metric.label} {p.metric.relation} {p.metric.threshold:g}, "
            f"within {p.metric.tolerance_text} of "
            f"{p.metric.reference_variant}; gating subgroups: "
            f"{', '.join(s.name for s in p.subgroups if s.gating) or 'none'}; reproduction target "
            f"{p.reproduction.target}",
            f"- catalog version {d.catalog.version} dated {d.catalog.date.isoformat()}, priced from "
            f"{d.catalog_source}",
            *(f"- campaign `{e.folder}`: {observed_line(e)}"
              + (f"; {c4[e.folder]}" if c4.get(e.folder) else "") for e in d.evidence),
            "", "## Reasons", "", *(f"- {r}" for r in d.reasons), ""]


def _configuration_rows(d: Decision, c4: dict[str, str | None]) -> list[str]:
    """The table of every configuration: feasibility, quality, time, window, package, budget, cost."""
    c4_verdict = {e.folder: (rocm_compatibility(e.manifest) or {}).get("verdict") for e in d.evidence}
    out = ["## Configurations", "",
           "| configuration | feasible | quality | median pass (s) | counted passes | window | deadline | package "
           "| committed | accepted | cost per verified corpus |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in d.configs:
        b = c.pricing.budget
        cost = c.pricing.cost.describe() if c.pricing.cost else "-"
        win = f"{c.window.label} {format_hours(c.window.window.span_hours)} h" if c.window.window else "none"
        out.append("| " + " | ".join(_cell(x) for x in (
            c.key, _yes(c.feasible), _quality_cell(c), fmt_s(c.times.median), len(c.times.times), win,
            _yes(c.window.meets_deadline, "met", "MISSED"),
            (f"{b.gpu_id} {b.package_days} days x {b.lots}" if b else "not priced")
            + (f" (C4 ROCm matrix: {c4_verdict[c.folder]})" if c4.get(c.folder) else ""),
            f"{format_amount(b.total)} {b.currency}" if b else "-", c.accepted,
            cost + (" of the project total" if c.project and c.project.counted and c.pricing.cost else ""))) + " |")
    return out


def _calendar_lines(d: Decision) -> list[str]:
    """The planned window and deadline, each observed window, and the packages each shown quote compared."""
    out = ["", "## Calendar window", "", f"- {d.planned.describe()}", f"- {d.planned.deadline_text()}"]
    if d.project:
        out += [f"- {c.key}: {c.window.describe()}; {c.window.deadline_text()}" for c in d.configs
                if c.window.window is not d.planned.window]
    for e, o in zip(d.evidence, d.observed):
        if o is not None:
            out.append(f"- {e.hardware.label}: {o.describe()}")
    shown_quotes: dict[str, Config] = {}
    for c in ([d.chosen] if d.chosen else d.configs):
        if c.pricing.quote is not None:
            shown_quotes.setdefault(f"{c.pricing.quote.gpu_id} {c.window.label}", c)
    for c in shown_quotes.values():
        quote = c.pricing.quote
        assert quote is not None
        listed = [f"{o.package_days} days ({o.package_hours} h) {'covers' if o.covers else 'does not cover'}, "
                  f"{'not in catalog' if o.total is None else format_amount(o.total) + ' ' + o.currency}"
                  for o in quote.options]
        out.append(f"- {quote.gpu_id} packages against the {c.window.label} window "
                   f"({format_hours(quote.hours)} h): " + "; ".join(listed))
    return out


def _closing_lines(d: Decision) -> list[str]:
    """What remains uncertain, the manifest differences of merged campaigns, the scope, the rental, the notes."""
    out = ["", "## What remains uncertain", "", *(f"- {u}" for u in d.uncertain or ["nothing flagged"])]
    out += ["", "## Manifest differences between merged campaigns (C5)", ""]
    if not d.manifest_diffs:
        out.append("- one campaign folder: nothing merged")
    for a, b, keys in d.manifest_diffs:
        shown = ", ".join(f"`{k}`" for k in keys[:40]) + (f" and {len(keys) - 40} more" if len(keys) > 40 else "")
        out.append(f"- `{a}` vs `{b}`: {shown or 'no difference'}")
    if d.manifest_diffs:
        out.append("- the comparison concerns exactly the configurations tested, on the stacks listed above")
    out += ["", "## Scope", "", f"- {SCOPE}.",
            "- the comparison concerns exactly the configurations tested; a capacity estimate never replaces "
            "observed accepted results", "", "## Rental record", "",
            f"- rental id: {d.rental_id}" if d.rental_id else "- rental id: none given"]
    if d.notes:
        out += ["", "## Notes", "", *(f"- {n}" for n in d.notes)]
    return out


def render_plans(d: Decision) -> list[str]:
    """The rental plans of the production job (Markdown): the lots, the mix of observed machines, the rate each
    unobserved catalog row must reach (a bar, never a price)."""
    lines = plan_lines(d.chosen, d.machines, d.plans)
    if not lines:
        return []
    return ["## Rental plans: lots, machines, rates to reach (planned)", "",
            *(f"- {_cell(line)}" for line in lines), ""]


def render_expenses(d: Decision) -> list[str]:
    """K5: per configuration, the committed package fee, each other expense with its justification (or 'not
    applicable' with its reason), then the project total; and whether the expenses enter the cost and the rule."""
    costs = d.costs
    assert costs is not None
    out = ["## Project budget: package fee and other expenses (K5)", "",
           f"- {EXPENSES_COUNTED if costs.counted else EXPENSES_APART}",
           "- other expenses declared in the locked protocol: " + "; ".join(
               f"{e.name}, {format_amount(e.amount)} {e.currency}, for {e.scope}" for e in costs.expenses)]
    out += [f"- {line}" for line in d.expense_ranking]
    for c in d.configs:
        if c.project is None:
            out.append(f"- {c.key}: package not priced (see 'Excluded and why'): no project total")
            continue
        out.append(f"- **{c.key}**")
        out += [f"  - {_cell(line)}" for line in c.project.lines()]
        if c.pricing.cost is not None:
            what = "of the project total" if c.project.counted else "of the package fee alone"
            out.append(f"  - cost per verified corpus {what}: {c.pricing.cost.describe()}")
    return out + [""]


def write_decision(d: Decision, out: str | Path) -> dict[str, Path]:
    """Write decision.md and decision.json (atomically) into ``out``, with a copy of the catalog the decision priced
    from (:data:`DECISION_CATALOG`) when it is not the folder's own ``inputs/catalog.csv``: the seal then covers it,
    and the folder, moved or unpacked elsewhere, decides the same way."""
    folder = Path(out)
    refuse_if_sealed(folder, "writing decision.md and decision.json into it", out_elsewhere("decide"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"decision_md": folder / "decision.md", "decision_json": folder / DECISION}
    copy = _carry_catalog(d, folder)
    if copy is not None:
        paths["decision_catalog"] = copy
    write_text_atomic(paths["decision_md"], render_decision(d))
    write_text_atomic(paths["decision_json"], decision_json(d))
    return paths


def _carry_catalog(d: Decision, folder: Path) -> Path | None:
    """Copy the pricing catalog beside decision.json unless it is the folder's own copy (a stale copy of an earlier
    ``--catalog`` is then removed, or it would price the next decision). Returns the copy written, if any."""
    target = folder / DECISION_CATALOG
    own = folder / CATALOG
    if d.catalog_file is None:
        return None
    if own.is_file() and sha256_file(own) == d.catalog_sha256:
        target.unlink(missing_ok=True)
        return None
    data = Path(d.catalog_file).read_bytes()
    if hashlib.sha256(data).hexdigest() != d.catalog_sha256:
        raise IteraError(f"{d.catalog_file}: changed while the decision was written (sha256 differs from the file "
                         "it priced from)", hint="decide again once the catalog is no longer being written")
    write_bytes_atomic(target, data)
    return target


def decision_json(d: Decision) -> str:
    """The decision as deterministic JSON text (sorted keys, amounts as strings)."""
    return dumps_json(_jsonable(d.to_dict()))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (Decimal, Path, datetime)):
        return str(obj)
    return obj
