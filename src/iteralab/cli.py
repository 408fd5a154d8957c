"""Command-line shell: parses, calls the library, prints. No logic lives here that the library lacks."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from iteralab import __version__
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
def lock_cmd(protocol: Path = typer.Argument(..., help="Protocol TOML file to lock.")) -> None:
    """Lock a protocol: record its content hash and a UTC timestamp before any timed pass (P2)."""
    from iteralab.protocol import check_series, load_protocol, lock, lock_path

    check_series(load_protocol(protocol), str(protocol))
    entry = lock(protocol)
    typer.echo(f"locked {protocol} version {entry['version']}: sha256 {entry['sha256']} at {entry['locked_at']}")
    typer.echo(f"lock file: {lock_path(protocol)}")


@app.command("run")
def run_cmd(
    protocol: Path = typer.Argument(..., help="Locked protocol TOML file."),
    out: Path = typer.Option(..., "--out", "-o", help="Campaign folder (created; an existing one is resumed)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run (or resume) a campaign of a locked protocol and write its raw table."""
    from iteralab.runner import run_campaign

    summary = run_campaign(protocol, out, progress=None if as_json else _CampaignProgress())
    _print_summary(summary, as_json)


@app.command("table")
def table_cmd(campaign: Path = typer.Argument(..., help="Campaign folder.")) -> None:
    """Regenerate raw_table.csv from the journal and the prediction files."""
    from iteralab.table import write_raw_table

    _require_campaign(campaign)
    typer.echo(str(write_raw_table(campaign)))


@app.command("demo")
def demo_cmd(
    out: Path = typer.Option(Path("demo-out"), "--out", "-o", help="Output folder."),
    docs: int = typer.Option(1000, "--docs", help="Documents in the comparison corpus (1000 = full protocol)."),
    passes: int = typer.Option(5, "--passes", help="Measured passes per variant (5 = full protocol)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run the worked example on real data: MiniLM + linear head over 1,000 Rotten Tomatoes texts."""
    from iteralab.demo import run_demo

    display = None if as_json else _CampaignProgress()
    if display and (docs != 1000 or passes != 5):
        display.message(f"quick try: {docs} documents, {passes} passes — NOT the full protocol (1000 documents, 5 passes)")
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

    from iteralab import pricing

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

    from iteralab import pricing, window

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


def _require_campaign(folder: Path) -> None:
    if not (folder / "campaign.json").is_file():
        raise IteraError(f"{folder}: not a campaign folder (no campaign.json)",
                         hint="pass the folder given to 'iteralab run --out'")


def _print_summary(summary: dict, as_json: bool) -> None:
    import json

    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    from iteralab.table import read_raw_table

    rows = read_raw_table(summary["raw_table"])
    accepted = sum(r["corpus_accepted"] == "true" for r in rows)
    typer.echo(f"raw table: {summary['raw_table']} ({len(rows)} attempted passes, {accepted} verified corpora)")


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [IteraError]
    try:
        from iteralab.kit.calcul_forfaits import KitError

        errors.append(KitError)
    except ImportError:  # pragma: no cover - the kit module is part of the package
        pass
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes become one ``Error:`` line (plus a hint) and a non-zero exit."""
    try:
        app(args=argv, prog_name="iteralab")
    except _user_errors() as exc:  # type: ignore[misc]
        typer.echo(f"Error: {exc}", err=True)
        hint = getattr(exc, "hint", None)
        if hint:
            typer.echo(f"Hint: {hint}", err=True)
        return int(getattr(exc, "exit_code", 2))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
