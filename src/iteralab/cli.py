"""Command-line shell: parses, calls the library, prints. No logic lives here that the library lacks."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from iteralab import __version__
from iteralab.demo.run import DEFAULT_DOCS as DEMO_DOCS, DEFAULT_PASSES as DEMO_PASSES
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


class _CampaignProgress:
    """Renders the runner's progress events with rich: what is running and what remains."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=False)
        self.task = None

    def message(self, text: str) -> None:
        self.console.print(f"[bold]•[/bold] {text}")

    def __call__(self, kind: str, info: dict) -> None:
        if kind == "start":
            self.progress.start()
            self.task = self.progress.add_task("passes", total=info["total"], completed=info["done"])
        elif kind == "pass" and self.task is not None:
            self.progress.update(self.task, description=f"round {info['round']}: {info['variant']}")
        elif kind == "done" and self.task is not None:
            self.progress.advance(self.task)
            seconds = info.get("pass_s")
            took = f"{seconds:.2f} s" if seconds is not None else "no time (see notes)"
            self.progress.console.print(f"  {info['pass_id']}: {info['status']}, measured pass {took}")
        elif kind == "end":
            self.progress.stop()


@app.command("lock")
def lock_cmd(
    protocol: Path = typer.Argument(..., help="Protocol TOML file to lock."),
    allow_large: bool = typer.Option(False, "--allow-large", help="Accept a schedule of more than 10,000 passes."),
) -> None:
    """Check every input, then lock: the protocol's hash, the inputs' fingerprints and a UTC timestamp (P2)."""
    from iteralab.campaign.inputs import lock
    from iteralab.plan.protocol import lock_path

    entry = lock(protocol, allow_large=allow_large)
    typer.echo(f"locked {protocol} version {entry['version']}: sha256 {entry['sha256']} at {entry['locked_at']}")
    typer.echo(f"schedule: {entry['schedule']}")
    typer.echo("inputs fingerprinted: corpus, " + ("tuning split, " if entry["inputs"].get("tuning") else "")
               + "model files, catalog")
    typer.echo(f"lock file: {lock_path(protocol)}")


@app.command("prepare")
def prepare_cmd(
    source: Path = typer.Argument(..., help="Your corpus: CSV, JSONL or Parquet with text and label columns."),
    model: str = typer.Option(..., "--model", help="Model folder (or package:NAME/sub) whose tokenizer counts tokens."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for final.csv, tuning.csv, prepare.json, protocol.toml."),
    id_column: str = typer.Option("id", "--id-column", help="Id column (absent: ids derived from the texts)."),
    text_column: str = typer.Option("text", "--text-column", help="Text column."),
    label_column: str = typer.Option("label", "--label-column", help="Reference label column."),
    strata: str = typer.Option("short=0-30,medium=31-50,long=51-", "--strata",
                               help="Token-length strata, inclusive bounds, the last open-ended."),
    sample: str = typer.Option("short=600,medium=300,long=100", "--sample", help="Final texts per stratum."),
    tuning: int = typer.Option(None, "--tuning", min=0,
                               help="Size of the disjoint tuning split (default: what remains, capped at the sample size)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw (same source + seed: identical files)."),
    max_length: int = typer.Option(None, "--max-length", min=2, help="Max length the model will use (recorded)."),
) -> None:
    """Build the stratified final corpus and a disjoint tuning split with the model's tokenizer (C2, P4)."""
    from iteralab.models.tokens import prepare_for_model
    from iteralab.plan.prepare import parse_sample, parse_strata

    bounds = parse_strata(strata)
    record = prepare_for_model(source, out, model=model, id_column=id_column, text_column=text_column,
                               label_column=label_column, strata=bounds, sample=parse_sample(sample, bounds),
                               tuning=tuning, seed=seed, max_length=max_length)
    for name, mix in record["counts"]["final"].items():
        typer.echo(f"final {name}: {sum(mix.values())} texts ({', '.join(f'{c} {n}' for c, n in mix.items())})")
    typer.echo(f"tuning: {record['tuning_size']} texts, disjoint from final by id and text")
    if record["left_out"]:
        typer.echo(f"left out: {len(record['left_out'])} repeated texts (see prepare.json)")
    typer.echo(f"written: {out / 'final.csv'}, {out / 'tuning.csv'}, {out / 'prepare.json'}, {out / 'protocol.toml'}")
    typer.echo(f"next: make each CHOOSE in {out / 'protocol.toml'}, then iteralab lock {out / 'protocol.toml'}")


@app.command("run")
def run_cmd(
    protocol: Path = typer.Argument(..., help="Locked protocol TOML file."),
    out: Path = typer.Option(..., "--out", "-o", help="Campaign folder (created; an existing one is resumed)."),
    keep_unrunnable: bool = typer.Option(False, "--keep-unrunnable",
                                         help="Record variants this machine cannot run as failed rows, then exit 1."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run (or resume) a campaign of a locked protocol and write its raw table (preflight first)."""
    from iteralab.evidence.run import run_campaign

    summary = run_campaign(protocol, out, progress=None if as_json else _CampaignProgress(),
                           keep_unrunnable=keep_unrunnable)
    _print_summary(summary, as_json)
    if summary.get("unrunnable"):
        names = ", ".join(f"{n} ({why})" for n, why in summary["unrunnable"].items())
        typer.echo(f"not runnable on this machine, recorded as failed rows: {names}", err=True)
        raise typer.Exit(1)


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
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run the worked example on real data: MiniLM + linear head over 1,000 Rotten Tomatoes texts."""
    from iteralab.demo.run import run_demo

    display = None if as_json else _CampaignProgress()
    if display and (docs != DEMO_DOCS or passes != DEMO_PASSES):
        display.message(f"quick try: {docs} documents, {passes} passes — NOT the full protocol ({DEMO_DOCS} "
                        f"documents, {DEMO_PASSES} passes)")
    summary = run_demo(out, docs=docs, passes=passes, emit=display.message if display else None, progress=display)
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
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Committed package budget (price per lot x lots, paid in full) and cost per verified result."""
    import json

    from iteralab.economics import pricing

    quote = pricing.price(
        gpu,
        pricing.parse_whole(days, "--days", 1),
        pricing.parse_whole(lots, "--lots", 1),
        None if accepted_results is None else pricing.parse_whole(accepted_results, "--accepted-results", 0),
        catalog,
    )
    if as_json:
        typer.echo(json.dumps(quote.to_dict(), indent=2, sort_keys=True))
    else:
        typer.echo("\n".join(pricing.render_price(quote)))


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

    from iteralab.evidence.stats import campaign_stats, render_stats

    _require_campaign(campaign)
    stats = campaign_stats(campaign)
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
    typer.echo(f"excluded {pass_id}: {event['reason']} (rule: {event['rule']})")


def _decision_options(rental_id: str | None, project: bool, catalog: Path | None, lots: str,
                      partial: bool = False) -> dict:
    from iteralab.economics.pricing import parse_whole

    return {"rental_id": rental_id, "project": project, "catalog": catalog, "lots": parse_whole(lots, "--lots", 1),
            "partial": partial}


@app.command("decide")
def decide_cmd(
    campaigns: list[Path] = typer.Argument(..., help="Campaign folder(s); several machines' folders are merged."),
    out: Path = typer.Option(None, "--out", "-o", help="Folder for decision.md and decision.json (else print)."),
    rental_id: str = typer.Option(None, "--rental-id", help="Your rental record id, copied into the note."),
    project: bool = typer.Option(False, "--project", help="Project the window: planned tasks + measured work."),
    catalog: Path = typer.Option(None, "--catalog", help="Catalog CSV (default: the protocol's, else the shipped one)."),
    lots: str = typer.Option("1", "--lots", metavar="LOTS", help="Number of lots rented (default 1)."),
    partial: bool = typer.Option(False, "--partial", help="Decide on an incomplete campaign (the note records it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the decision as JSON."),
) -> None:
    """Apply the rule: all documents, minimum quality, before the deadline, lowest committed budget."""
    from iteralab.decision.note import decision_json, render_decision, write_decision
    from iteralab.decision.rule import decide

    for folder in campaigns:
        _require_campaign(folder)
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
    campaigns: list[Path] = typer.Argument(..., help="Campaign folder(s); several machines' folders are merged."),
    out: Path = typer.Option(None, "--out", "-o", help="Output folder (default: the campaign folder, if only one)."),
    rental_id: str = typer.Option(None, "--rental-id", help="Your rental record id, copied into the note."),
    project: bool = typer.Option(False, "--project", help="Project the window: planned tasks + measured work."),
    catalog: Path = typer.Option(None, "--catalog", help="Catalog CSV (default: the protocol's, else the shipped one)."),
    lots: str = typer.Option("1", "--lots", metavar="LOTS", help="Number of lots rented (default 1)."),
    partial: bool = typer.Option(False, "--partial", help="Decide on an incomplete campaign (the note records it)."),
) -> None:
    """Write report.html (self-contained), decision.md/.json and stats.txt/.json."""
    from iteralab.decision.report import finalize

    result = finalize(campaigns, out, **_decision_options(rental_id, project, catalog, lots, partial))
    for key in ("stats_txt", "stats_json", "decision_md", "decision_json", "report_html"):
        typer.echo(result[key])
    typer.echo(result["decision"])


bundle_app = typer.Typer(help="Evidence bundle: seal a campaign folder into one archive, restore it safely (D3).",
                         no_args_is_help=True)
app.add_typer(bundle_app, name="bundle")


@bundle_app.command("seal")
def bundle_seal_cmd(campaign: Path = typer.Argument(..., help="Campaign folder to seal.")) -> None:
    """Write SHA256SUMS (every file's sha256) and SHA256SUMS.sha256 into the folder, without archiving it."""
    from iteralab.evidence.bundle import seal

    _require_campaign(campaign)
    sealed = seal(campaign)
    if sealed.changed_since_previous:
        typer.echo(f"resealed: {len(sealed.changed_since_previous)} file(s) differ from the previous seal: "
                   + ", ".join(sealed.changed_since_previous))
    typer.echo(f"sealed {sealed.files} files; seal digest (sha256 of SHA256SUMS): {sealed.digest}")


@bundle_app.command("pack")
def bundle_pack_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder to seal and pack."),
    out: Path = typer.Option(None, "--out", "-o", help="Archive to write (default: FOLDER.tar.gz beside it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Seal a campaign folder (SHA256SUMS of every file, written last) and pack it into one .tar.gz."""
    import json

    from iteralab.evidence.bundle import pack

    archive, sealed = pack(campaign, out)
    if as_json:
        typer.echo(json.dumps({"archive": str(archive), "files": sealed.files, "seal_digest": sealed.digest,
                               "changed_since_previous_seal": list(sealed.changed_since_previous)},
                              indent=2, sort_keys=True))
        return
    if sealed.changed_since_previous:
        typer.echo(f"resealed: {len(sealed.changed_since_previous)} file(s) differ from the previous seal: "
                   + ", ".join(sealed.changed_since_previous))
    typer.echo(f"sealed {sealed.files} files; seal digest (sha256 of SHA256SUMS): {sealed.digest}")
    typer.echo(f"archive: {archive}")


@bundle_app.command("unpack")
def bundle_unpack_cmd(
    archive: Path = typer.Argument(..., help="Archive made by 'iteralab bundle pack'."),
    dest: Path = typer.Argument(..., help="Folder to restore into (must not exist, or be empty)."),
) -> None:
    """Restore a bundle archive safely (no absolute paths, '..', links or devices) and check its seal."""
    from iteralab.evidence.bundle import unpack
    from iteralab.errors import VerificationError

    result = unpack(archive, dest)
    typer.echo(f"restored {result.files} files into {result.dest}")
    for problem in result.seal.problems:
        typer.echo(f"- {problem}")
    if not result.seal.ok:
        raise VerificationError(f"{result.dest}: the restored files do not match their hash list",
                                hint="the archive was altered after packing; do not use these files as evidence")
    typer.echo(f"seal ok: {result.seal.files} files match SHA256SUMS (digest {result.seal.digest}); "
               f"next: iteralab verify {result.dest}")


@app.command("verify")
def verify_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder or unpacked bundle."),
    expect_seal: str = typer.Option(None, "--expect-seal", metavar="SHA256",
                                    help="Seal digest written down when the bundle was packed."),
    unsealed: bool = typer.Option(False, "--unsealed", help="Accept a folder never sealed (no SHA256SUMS)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
) -> None:
    """Recompute every verdict from the stored files alone; exit 1 naming each difference (no model is run)."""
    import json

    from iteralab.evidence.verify import audit_campaign

    from iteralab.campaign.folder import CampaignFolder

    CampaignFolder.open(campaign, sealed_only_ok=True)
    report = audit_campaign(campaign, require_seal=not unsealed, expect_seal=expect_seal)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        for line in report.differences:
            typer.echo(f"- {line}")
        if report.ok:
            typer.echo(report.summary_line())
        for note in report.notes:
            typer.echo(f"note: {note}")
    report.raise_if_different()


@app.command("rerun")
def rerun_cmd(
    campaign: Path = typer.Argument(..., help="Earlier campaign folder (or unpacked bundle) to repeat."),
    out: Path = typer.Option(..., "--out", "-o", help="New campaign folder (an interrupted rerun is resumed)."),
    tuning: Path = typer.Option(None, "--tuning", help="Tuning data file, when the protocol declares one."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Repeat the same locked protocol on the same corpus, then compare with the earlier campaign."""
    import json

    from iteralab.evidence.rerun import rerun

    result = rerun(campaign, out, progress=None if as_json else _CampaignProgress(), tuning=tuning)
    comparison = result["comparison"]
    if as_json:
        typer.echo(json.dumps(comparison, indent=2, sort_keys=True))
        return
    from iteralab.evidence.rerun import summary_lines

    for line in summary_lines(comparison):
        typer.echo(line)
    typer.echo(f"comparison: {result['comparison_files'][0]}")


head_app = typer.Typer(help="A linear head for an encoder, trained on the tuning split only (P4).",
                       no_args_is_help=True)
app.add_typer(head_app, name="head")


@head_app.command("train")
def head_train_cmd(
    model: str = typer.Option(..., "--model", help="Encoder folder (or package:NAME/sub)."),
    tuning: Path = typer.Option(..., "--tuning", help="Tuning split (e.g. DIR/tuning.csv written by prepare)."),
    out: Path = typer.Option(..., "--out", "-o", help="Head file to write (.safetensors)."),
    final: Path = typer.Option(None, "--final", help="Final corpus it must not overlap (default: final.csv beside it)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the cross-validation folds and the fit."),
    max_length: int = typer.Option(256, "--max-length", min=2, help="Max length of the embeddings' tokenization."),
) -> None:
    """Embed the tuning split, fit a linear head, report its k-fold cross-validated macro-F1 and a threshold."""
    from iteralab.models.head import train_head
    from iteralab.models.tokens import resolve_model

    folder, _ = resolve_model(model)
    result = train_head(folder, tuning, out, final=final, seed=seed, max_length=max_length)
    typer.echo(f"head: {result['head']} (classes {', '.join(result['classes'])}; {result['tuning_size']} tuning texts)")
    typer.echo(f"suggested threshold {result['suggested_threshold']:.2f}: {result['how']}")


kit_app = typer.Typer(help="The downloadable kit folder (K7).", no_args_is_help=True)
app.add_typer(kit_app, name="kit")


@kit_app.command("export")
def kit_export_cmd(
    folder: Path = typer.Argument(..., help="Folder to write the kit into (created; must be empty)."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty folder, replacing the kit's files."),
) -> None:
    """Write the kit: README, instructions, licence, protocol and raw-table templates, calculator, memory exercise."""
    from iteralab.economics.kitexport import export_kit

    result = export_kit(folder, force=force)
    typer.echo(f"kit written to {result.folder}: {', '.join(result.written)}")
    if result.missing:
        typer.echo(f"Warning: this installation does not ship {', '.join(result.missing)}", err=True)


@app.command("memory")
def memory_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
    runtime_overhead: int = typer.Option(
        None, "--runtime-overhead-bytes", metavar="BYTES", min=0,
        help="CPU runtime overhead to add to the estimate (default: measured once on this machine).",
    ),
) -> None:
    """Peak memory per variant: estimate (weights, activations, margin) beside the observation, the difference,
    the counter's scope, and whether every pass completed the corpus (M1-M3)."""
    import json

    from iteralab.evidence.memory import memory_report, render_memory_table

    _require_campaign(campaign)
    report = memory_report(campaign, runtime_overhead=runtime_overhead)
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        typer.echo("\n".join(render_memory_table(report["variants"])))


@app.command("rocm-check")
def rocm_check_cmd(
    os_name: str = typer.Option(None, "--os", help="Operating system and version, e.g. 'Ubuntu 22.04'."),
    arch: str = typer.Option(None, "--arch", help="GPU LLVM target (gfx942; suffixes such as :sramecc+ are "
                                                  "stripped) or architecture (CDNA3)."),
    rocm: str = typer.Option(..., "--rocm", help="ROCm release, e.g. 6.2.0 (6.2 reads the 6.2.0 column)."),
    framework: str = typer.Option(None, "--framework", metavar="NAME=VERSION", help="e.g. pytorch=2.3."),
    snapshot: str = typer.Option(None, "--snapshot", help="Ask one shipped snapshot file (default: the newest "
                                                          "with a column for --rocm)."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON."),
) -> None:
    """Look a ROCm combination up in AMD's compatibility matrix as shipped (C4): per fact listed, not listed or
    no snapshot entry, naming the snapshot file and date. Exit 0 only when every fact is listed."""
    import json

    from iteralab.models.rocm import rocm_check

    check = rocm_check(os_name=os_name, arch=arch, rocm=rocm, framework=framework, snapshot=snapshot)
    if as_json:
        typer.echo(json.dumps(check.to_dict(), indent=2, sort_keys=True))
    else:
        typer.echo("\n".join(check.lines()))
    raise typer.Exit(check.exit_code)


def _require_campaign(folder: Path) -> None:
    from iteralab.campaign.folder import CampaignFolder

    CampaignFolder.open(folder)


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
