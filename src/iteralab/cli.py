"""Command-line shell: parses, calls the library, prints. No logic lives here that the library lacks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from iteralab import __version__
from iteralab.commands import evidence as evidence_commands, export as export_commands, tools as tool_commands
from iteralab.commands.common import campaign_display, resumable
from iteralab.demo import DEFAULT_DOCS as DEMO_DOCS, DEFAULT_PASSES as DEMO_PASSES
from iteralab.errors import IteraError

app = typer.Typer(
    help="IteraGPU Lab: which configuration processes all documents, meets the minimum quality, "
    "finishes before the deadline, with the lowest committed rental budget?",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"iteralab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """IteraGPU Lab command-line tool."""


@app.command("lock")
def lock_cmd(
    protocol: Path = typer.Argument(..., help="Protocol TOML file to lock."),
    allow_large: bool = typer.Option(False, "--allow-large", help="Accept a schedule of more than 10,000 passes."),
) -> None:
    """Check every input, then lock: the protocol's hash, the inputs' fingerprints and a UTC timestamp (P2)."""
    from iteralab.api.actions import lock_protocol
    from iteralab.lock.inputs import fingerprinted

    locked = lock_protocol(protocol, allow_large=allow_large)  # read once: checked, fingerprinted, locked, warned
    entry = locked.entry
    typer.echo(f"locked {protocol} version {entry.version}: sha256 {entry.sha256} at {entry.locked_at}")
    typer.echo(f"schedule: {entry.schedule}")
    typer.echo("inputs fingerprinted: " + ", ".join(fingerprinted(entry.inputs)))
    typer.echo(f"lock file: {locked.lock_file}")
    for line in locked.warnings:
        typer.echo(f"Warning: {line}", err=True)


@app.command("prepare")
def prepare_cmd(
    source: Path = typer.Argument(..., help="Your corpus: CSV, JSONL or Parquet with text and label columns (the "
                                            "label column is optional with --task embedding)."),
    model: str = typer.Option(..., "--model", help="Model folder (or package:NAME/sub) whose tokenizer counts tokens."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for final.csv, tuning.csv, prepare.json, protocol.toml."),
    id_column: str = typer.Option(None, "--id-column",
                                  help="Id column; a named column must exist (default 'id', whose absence derives ids "
                                       "from the texts)."),
    text_column: str = typer.Option("text", "--text-column", help="Text column."),
    label_column: str = typer.Option("label", "--label-column", help="Reference label column."),
    strata: str = typer.Option("short=0-30,medium=31-50,long=51-", "--strata",
                               help="Token-length strata, inclusive bounds, the last open-ended."),
    sample: str = typer.Option("short=600,medium=300,long=100", "--sample",
                               help="Final texts per stratum (not read with --queries)."),
    tuning: int = typer.Option(None, "--tuning", min=0,
                               help="Size of the disjoint tuning split (default: what remains, capped at the sample size)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw (same source + seed: identical files)."),
    max_length: int = typer.Option(None, "--max-length", min=2, help="Max length the model will use (recorded)."),
    task: str = typer.Option("classification", "--task",
                             help="Kind of job the draft protocol is for: classification, embedding (a corpus "
                                  "with or without labels), or generation (a reference answer per text)."),
    reference_column: str = typer.Option(None, "--reference-column",
                                         help="--task generation: the reference answers' column (default 'answer')."),
    prompt: str = typer.Option(None, "--prompt",
                               help="--task generation: the prompt template, e.g. 'Summarise: {text}' (default: "
                                    "drafted from the corpus columns)."),
    queries: Path = typer.Option(None, "--queries",
                                 help="Embedding: a queries file (query_id, text, relevant_ids): the corpus is cut "
                                      "with it, keeping every relevant document of the sampled queries."),
    query_sample: int = typer.Option(None, "--query-sample", min=1,
                                     help="With --queries: final queries (default: all but the tuning ones)."),
    tuning_queries: int = typer.Option(None, "--tuning-queries", min=0,
                                       help="With --queries: tuning queries, disjoint by document (default: a fifth)."),
    distractors: int = typer.Option(1000, "--distractors", min=0,
                                    help="With --queries: documents relevant to no query drawn into the final corpus."),
) -> None:
    """Build the stratified final corpus and a disjoint tuning split with the model's tokenizer (C2, P4)."""
    from iteralab.models.tokens import prepare_for_model
    from iteralab.plan.prepare import parse_sample, parse_strata
    from iteralab.plan.prepare_generation import generation_options
    from iteralab.plan.prepare_queries import queries_options

    bounds = parse_strata(strata)
    record = prepare_for_model(source, out, model=model, id_column=id_column or "id",
                               require_id=id_column is not None, text_column=text_column,
                               label_column=label_column, strata=bounds,
                               sample=None if queries else parse_sample(sample, bounds),
                               tuning=tuning, seed=seed, max_length=max_length, task=task,
                               **generation_options(task, reference_column, prompt),
                               **queries_options(task, queries, query_sample, tuning_queries, distractors))
    _print_prepared(record, out)


@app.command("run")
def run_cmd(
    protocol: Path = typer.Argument(..., help="Locked protocol TOML file."),
    out: Path = typer.Option(..., "--out", "-o", help="Campaign folder (created; an existing one is resumed)."),
    keep_unrunnable: bool = typer.Option(False, "--keep-unrunnable",
                                         help="Record variants this machine cannot run as failed rows, then exit 1."),
    allow_no_accepted: bool = typer.Option(
        False, "--allow-no-accepted",
        help="Exit 0 even when no pass was accepted (by default such a campaign ends with exit 1)."),
    estimate: bool = typer.Option(False, "--estimate",
                                  help="Load and warm up each variant only, print the campaign's projected duration "
                                       "and exit: nothing is recorded, no folder is created."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run (or resume) a campaign of a locked protocol and write its raw table (preflight first). Exits 1 when no
    pass was accepted, naming the first failure."""
    from iteralab.evidence.run import run_campaign

    if estimate:
        _print_estimate(protocol, out, as_json)
        return
    display = None if as_json else campaign_display()
    with resumable(f"iteralab run {protocol} --out {out}", display):  # Ctrl-C, SIGTERM, SIGHUP: journaled
        summary = run_campaign(protocol, out, progress=display, keep_unrunnable=keep_unrunnable)
    _print_summary(summary, as_json)
    _no_accepted_exit(summary, allow_no_accepted, as_json)
    if summary.get("unrunnable"):
        names = ", ".join(f"{n} ({why})" for n, why in summary["unrunnable"].items())
        typer.echo(f"not runnable on this machine, recorded as failed rows: {names}", err=True)
        raise typer.Exit(1)


def _no_accepted_exit(summary: dict, allow: bool, as_json: bool) -> None:
    """The first failure in one line; exit 1 when no pass was accepted (unless ``allow``)."""
    failure = summary.get("first_failure")
    if not failure:
        return
    if summary.get("accepted"):
        if not as_json:
            typer.echo(f"first failure: {failure}", err=True)
        return
    line = f"no pass accepted in {summary['out']}; first failure: {failure}"
    if allow:
        typer.echo(line, err=True)
        return
    typer.echo(f"Error: {line}", err=True)
    typer.echo("Hint: fix the cause (raw_table.csv's notes say more); --allow-no-accepted keeps exit 0", err=True)
    raise typer.Exit(1)


def _print_prepared(record: dict, out: Path) -> None:
    """What ``prepare`` wrote (``record``: its prepare.json) and what to do next, as the drafted kind of job says."""
    from iteralab.plan.prepare_generation import generation_lines
    from iteralab.plan.task import rules_named

    drafted = rules_named(record.get("task") or "classification")  # recorded for a kind other than the default
    if drafted.prompts:
        for line in generation_lines(record, out):
            typer.echo(line)
        return
    for name, mix in record["counts"]["final"].items():
        typer.echo(f"final {name}: {sum(mix.values())} texts ({', '.join(f'{c} {n}' for c, n in mix.items())})")
    typer.echo(f"tuning: {record['tuning_size']} texts, disjoint from final by id and text")
    repeated = [e for e in record["left_out"] if "query_id" not in e]
    if repeated:
        typer.echo(f"left out: {len(repeated)} repeated texts (see prepare.json)")
    cut = record.get("queries")
    if cut:
        typer.echo(f"queries: {cut['final']} final queries with every relevant document and "
                   f"{cut['final_distractors']} distractors ({cut['distractors']} asked); {cut['tuning']} tuning "
                   f"queries with {cut['tuning_distractors']}; {len(record['left_out']) - len(repeated)} left out "
                   "(a relevant id not in the source, see prepare.json)")
    names = ["final.csv", "tuning.csv", *(["queries.csv", "tuning_queries.csv"] if cut else []), "prepare.json",
             "protocol.toml"]
    typer.echo(f"written: {', '.join(str(out / name) for name in names)}")
    if cut:
        typer.echo(f"next: iteralab threshold {out / 'protocol.toml'} (the ranking metric on the tuning queries, a "
                   f"suggested threshold), make each CHOOSE in it, then iteralab lock {out / 'protocol.toml'}")
        return
    if drafted.vectors:
        typer.echo(f"next: make each CHOOSE in {out / 'protocol.toml'} (with no labels, write the queries file it "
                   f"names), then iteralab lock {out / 'protocol.toml'}")
        return
    typer.echo(f"next: iteralab threshold {out / 'protocol.toml'} (the model on the tuning split, a suggested "
               f"threshold), make each CHOOSE in it, then iteralab lock {out / 'protocol.toml'}")


@app.command("table")
def table_cmd(campaign: Path = typer.Argument(..., help="Campaign folder.")) -> None:
    """Regenerate raw_table.csv from the journal and the prediction files."""
    from iteralab.evidence.table import regenerate_table

    typer.echo(str(regenerate_table(campaign)))


@app.command("demo")
def demo_cmd(
    out: Path = typer.Option(Path("demo-out"), "--out", "-o", help="Output folder."),
    docs: int = typer.Option(DEMO_DOCS, "--docs", help=f"Documents in the comparison corpus ({DEMO_DOCS} = full protocol)."),
    passes: int = typer.Option(DEMO_PASSES, "--passes", help=f"Measured passes per variant ({DEMO_PASSES} = full protocol)."),
    task: str = typer.Option("classification", "--task", metavar="KIND",
                             help="classification (MiniLM + linear head, the default) or embedding (MiniLM's vectors)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run the worked example on real data: MiniLM + linear head over 1,000 Rotten Tomatoes texts (--task embedding:
    MiniLM's vectors of the same texts)."""
    from iteralab.demo.run import TASKS as DEMO_TASKS, run_demo

    display = None if as_json else campaign_display()
    if display and (docs != DEMO_DOCS or passes != DEMO_PASSES):
        display.message(f"quick try: {docs} documents, {passes} passes — NOT the full protocol ({DEMO_DOCS} "
                        f"documents, {DEMO_PASSES} passes)")
    resume = " ".join(["iteralab demo --out", str(out)] + ([f"--task {task}"] if task != DEMO_TASKS[0] else [])
                      + ([f"--docs {docs}"] if docs != DEMO_DOCS else [])
                      + ([f"--passes {passes}"] if passes != DEMO_PASSES else []))
    with resumable(resume, display):
        summary = run_demo(out, task=task, docs=docs, passes=passes, emit=display.message if display else None,
                           progress=display)
    _print_summary(summary, as_json)


@app.command("price")
def price_cmd(
    gpu: str = typer.Option(..., "--gpu", help="GPU id from the catalog, e.g. rtx-4090 or b200."),
    days: str = typer.Option(..., "--days", metavar="DAYS", help="Package length in days, as listed in the catalog."),
    lots: str = typer.Option("1", "--lots", metavar="LOTS", help="Number of lots rented (a lot may hold several cards)."),
    accepted_results: str = typer.Option(
        None, "--accepted-results", metavar="N",
        help="Unique verified corpora delivered; adds the cost per verified result (0: undefined).",
    ),
    catalog: Path = typer.Option(None, "--catalog", help="Catalog CSV (default: the shipped tarifs-forfaits.csv)."),
    expenses: Path = typer.Option(
        None, "--expenses", metavar="FILE.toml",
        help="TOML file of expenses tables (or a whole protocol): adds each line and the project total.",
    ),
    variant: str = typer.Option(None, "--variant", help="With --expenses: also count the lines that name this variant."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Committed package budget (price per lot x lots, paid in full), other expenses, cost per verified result."""
    import json

    from iteralab.economics import pricing

    quote = pricing.price(
        gpu,
        pricing.parse_whole(days, "--days", 1),
        pricing.parse_whole(lots, "--lots", 1),
        None if accepted_results is None else pricing.parse_whole(accepted_results, "--accepted-results", 0),
        catalog,
    )
    if expenses is None and variant is not None:
        raise pricing.PricingError("--variant picks the expense lines of one variant: it needs --expenses FILE",
                                   hint="add --expenses FILE.toml, or leave out --variant")
    row = None if expenses is None else pricing.project_quote(quote, expenses, variant)
    if as_json:
        typer.echo(json.dumps({**quote.to_dict(), **({"project": row.to_dict()} if row else {})}, indent=2,
                              sort_keys=True))
    else:
        typer.echo("\n".join(pricing.render_price(quote) if row is None else pricing.render_project(quote, row)))


@app.command("window")
def window_cmd(
    gpu: str = typer.Option(..., "--gpu", help="GPU id from the catalog, e.g. rtx-4090 or b200."),
    hours: str = typer.Option(None, "--hours", metavar="H", help="Window length in real elapsed hours."),
    start: str = typer.Option(None, "--start", help="Window start, local ISO date-time (with --end and --tz)."),
    end: str = typer.Option(None, "--end", help="Window end, local ISO date-time."),
    tz: str = typer.Option(None, "--tz", help="IANA time zone of --start/--end, e.g. Europe/Paris."),
    tasks: Path = typer.Option(
        None, "--tasks", metavar="FILE.toml",
        help="TOML task file: timezone, optional label, one task table per task (name, start, end); merged by union.",
    ),
    lots: str = typer.Option("1", "--lots", metavar="LOTS", help="Number of lots rented."),
    label: str = typer.Option("planned", "--label", help="planned, projected or observed (a task file's own label wins)."),
    catalog: Path = typer.Option(None, "--catalog", help="Catalog CSV (default: the shipped tarifs-forfaits.csv)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Calendar window against the 3-, 7- and 30-day packages of a GPU: which cover it, at what price."""
    import json

    from iteralab.economics import pricing, window

    quote, calendar = window.quote_from_options(
        pricing.load_catalog(catalog), gpu, pricing.parse_whole(lots, "--lots", 1), label,
        hours=hours, start=start, end=end, tz=tz, tasks=tasks,
    )
    if as_json:
        data = quote.to_dict()
        data["calendar"] = None if calendar is None else calendar.to_dict()
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    typer.echo("\n".join(window.render(quote, calendar)))


@app.command("stats")
def stats_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
) -> None:
    """Per-variant pass times (every pass, median, min, max), failures, exclusions, T5 verdicts and quality."""
    import json

    from iteralab.api.campaign import open_campaign
    from iteralab.evidence.stats import render_stats

    stats = open_campaign(campaign).stats()
    typer.echo(json.dumps(stats.to_dict(), indent=2, sort_keys=True) if as_json else render_stats(stats).rstrip())


@app.command("exclude")
def exclude_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder."),
    pass_id: str = typer.Argument(..., help="Pass id as shown in raw_table.csv (e.g. r02-p01-b8-a1)."),
    reason: str = typer.Option(..., "--reason", help="Why (a documented external incident); mandatory."),
) -> None:
    """Exclude one pass from the statistics, with its reason, recorded in the journal (one rule for all)."""
    from iteralab.evidence.table import exclude_pass

    event = exclude_pass(campaign, pass_id, reason)
    typer.echo(f"excluded {pass_id}: {event.reason} (rule: {event.rule})")


# The options ``decide`` and ``report`` share, declared once.
Campaigns = Annotated[list[Path], typer.Argument(help="Campaign folder(s); several machines' folders are merged.")]
RentalId = Annotated[Optional[str], typer.Option("--rental-id", help="Your rental record id, copied into the note.")]
Project = Annotated[bool, typer.Option("--project", help="Project the window: planned tasks + measured work.")]
CatalogFile = Annotated[Optional[Path], typer.Option(
    "--catalog", help="Catalog CSV (default: the one the folder's stored decision priced from, "
                      "decision-catalog.csv; else the protocol's, else the shipped one). Written with the "
                      "decision, it is copied beside it.")]
Lots = Annotated[Optional[str], typer.Option("--lots", metavar="LOTS", help=(
    "Number of lots rented (default: the rule plans 1 to the protocol's [budget] max_lots for the production job "
    "and keeps the cheapest that finishes before the deadline)."))]
Partial = Annotated[bool, typer.Option("--partial", help="Decide on an incomplete campaign (the note records it).")]


def _decision_options(rental_id: str | None, project: bool, catalog: Path | None, lots: str | None,
                      partial: bool = False) -> dict:
    from iteralab.economics.pricing import parse_whole

    return {"rental_id": rental_id, "project": project, "catalog": catalog,
            "lots": None if lots is None else parse_whole(lots, "--lots", 1), "partial": partial}


@app.command("decide")
def decide_cmd(
    campaigns: Campaigns,
    out: Path = typer.Option(None, "--out", "-o", help="Folder for decision.md and decision.json (else print)."),
    rental_id: RentalId = None,
    project: Project = False,
    catalog: CatalogFile = None,
    lots: Lots = None,
    partial: Partial = False,
    as_json: bool = typer.Option(False, "--json", help="Print the decision as JSON."),
) -> None:
    """Apply the rule: all documents, minimum quality, before the deadline, lowest committed budget."""
    from iteralab.api.actions import decide
    from iteralab.decision.note import decision_json, render_decision, write_decision

    decision = decide(campaigns, **_decision_options(rental_id, project, catalog, lots, partial))
    if out is not None:
        paths = write_decision(decision, out)
        if not as_json:
            typer.echo("\n".join(str(p) for p in paths.values()))
    if as_json:
        typer.echo(decision_json(decision).rstrip())
    elif out is None:
        typer.echo(render_decision(decision).rstrip())
    else:
        typer.echo(decision.one_line)


@app.command("report")
def report_cmd(
    campaigns: Campaigns,
    out: Path = typer.Option(None, "--out", "-o", help="Output folder (default: the campaign folder, if only one)."),
    rental_id: RentalId = None,
    project: Project = False,
    catalog: CatalogFile = None,
    lots: Lots = None,
    partial: Partial = False,
) -> None:
    """Write report.html (self-contained), decision.md/.json and stats.txt/.json."""
    from iteralab.api.actions import render_report

    written = render_report(campaigns, out, **_decision_options(rental_id, project, catalog, lots, partial))
    for path in (written.stats_txt, written.stats_json, written.decision_md, written.decision_json,
                 written.report_html):
        typer.echo(str(path))
    typer.echo(written.decision)


evidence_commands.register(app)
tool_commands.register(app)
export_commands.register(app)


def _print_summary(summary: dict, as_json: bool) -> None:
    import json

    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.economics.pricing import count_accepted_results

    rows = read_raw_rows(summary["raw_table"])
    accepted = sum(r.accepted for r in rows)
    corpora = count_accepted_results((r.corpus_fingerprint or "", r.accepted) for r in rows)
    typer.echo(f"raw table: {summary['raw_table']} ({len(rows)} attempted passes, {accepted} accepted; "
               f"{corpora} verified {'corpus' if corpora == 1 else 'corpora'}: each corpus counts once, K6)")
    for key, label in (("stats_txt", "statistics"), ("decision_md", "decision note"), ("report_html", "report")):
        if summary.get(key):
            typer.echo(f"{label}: {summary[key]}")
    if summary.get("decision"):
        typer.echo(f"decision: {summary['decision']}")
    if summary.get("full_protocol") is False:
        from iteralab.demo.run import QUICK_TRY

        typer.echo(f"note: a quick try, {QUICK_TRY}")


def _print_estimate(protocol: Path, out: Path, as_json: bool) -> None:
    import json

    from iteralab.campaign.estimate import estimate_campaign, estimate_lines

    result = estimate_campaign(protocol, out)
    typer.echo(json.dumps(result.to_json(), indent=2, sort_keys=True) if as_json
               else "\n".join(estimate_lines(result)))


def _user_errors() -> tuple[type[BaseException], ...]:
    """The library's error base and the two kit files' bases (each kit file is handed out on its own, so each
    keeps its own standard-library base; the library never re-declares them)."""
    from iteralab.kit.calcul_forfaits import KitError
    from iteralab.kit.memoire import MemoryKitError

    return (IteraError, KitError, MemoryKitError)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM as an exception: subprocess.run then kills a running pass worker instead of orphaning it."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes become one ``Error:`` line (plus a hint) and a non-zero exit."""
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    try:
        app(args=argv, prog_name="iteralab")
    except _user_errors() as exc:  # type: ignore[misc]
        typer.echo(f"Error: {exc}", err=True)
        hint = getattr(exc, "hint", None)
        if hint:
            typer.echo(f"Hint: {hint}", err=True)
        return int(getattr(exc, "exit_code", 2))
    except OSError as exc:
        # The machine refused a read or write (disk full, permissions): one line, and what was recorded stays.
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"Error: {where}{exc.strerror or exc}", err=True)
        typer.echo("Hint: free disk space or fix permissions, then run the same command again: finished passes "
                   "are kept and the campaign resumes", err=True)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
