"""What the command groups share: the progress display of a running campaign and the campaign-folder check."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import typer


def event_line(kind: str, info: dict) -> str:
    """The console line of a pass that ended (``done``), of the run's first failure (``failure``) and of the
    campaign's projection (``estimate``), the same on a terminal and in a log."""
    if kind == "failure":
        return f"  first failure, {info['pass_id']}: {info['error']}"
    if kind == "estimate":
        from iteralab.campaign.progress import estimate_line

        return f"  {estimate_line(info)}"
    seconds = info.get("pass_s")
    took = f"{seconds:.2f} s" if seconds is not None else "no time (see notes)"
    return f"  {info['pass_id']}: {info['status']}, measured pass {took}"


class CampaignProgress:
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
            self.progress.console.print(event_line(kind, info))
        elif kind in ("failure", "estimate"):
            self.progress.console.print(event_line(kind, info), markup=False, highlight=False,
                                        soft_wrap=True)  # one line, never folded
        elif kind == "end":
            self.progress.stop()
        elif kind == "note":
            self.message(info["text"])
        elif kind == "progress" and self.task is not None:
            from iteralab.campaign.progress import progress_line

            self.progress.update(self.task, description=progress_line(info))


class PlainProgress:
    """The same events as plain lines, for a log (output to a file, a scheduler, CI: no terminal to draw a bar
    on): each pass's start and end, the projection after the first warm-up, and a progress line at the run's
    steady interval (documents done, rate, projected end of the pass and of the campaign)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def _print(self, text: str) -> None:
        typer.echo(text, err=self.stream is None, file=self.stream)

    def message(self, text: str) -> None:
        self._print(f"• {text}")

    def __call__(self, kind: str, info: dict) -> None:
        from iteralab.campaign.progress import progress_line

        if kind == "start":
            self._print(f"passes: {info['done']} of {info['total']} done, {info['todo']} to run")
        elif kind == "pass":
            self._print(f"round {info['round']}: {info['variant']} ({info['pass_id']}) started")
        elif kind in ("done", "failure", "estimate"):
            self._print(event_line(kind, info))
        elif kind == "progress":
            self._print(f"  {progress_line(info)}")
        elif kind == "note":
            self.message(info["text"])


def campaign_display() -> CampaignProgress | PlainProgress:
    """rich's live progress where a person watches a terminal; plain lines where the output goes to a file."""
    import sys

    if sys.stdout.isatty() and sys.stderr.isatty():
        return CampaignProgress()
    return PlainProgress()


def require_campaign(folder: Path) -> None:
    from iteralab.campaign.folder import CampaignFolder

    CampaignFolder.open(folder)


@contextmanager
def resumable(resume: str, display: Any = None) -> Iterator[None]:
    """Around a command that runs a campaign: a stop signal (Ctrl-C, SIGTERM, SIGHUP), recorded in the journal by
    the runner, ends the display, prints one line (how far the campaign got, ``resume``: the command that resumes
    it) and exits 128 + the signal number."""
    from iteralab.campaign.stopping import RunInterrupted

    try:
        yield
    except RunInterrupted as stop:
        if display is not None:
            display("end", {})
        try:
            typer.echo(stop.line(resume), err=True)
        except OSError:  # SIGHUP: the terminal may be gone
            pass
        raise typer.Exit(stop.exit_code) from None
