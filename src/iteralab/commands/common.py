"""What the command groups share: the progress display of a running campaign and the campaign-folder check."""

from __future__ import annotations

from pathlib import Path



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
            seconds = info.get("pass_s")
            took = f"{seconds:.2f} s" if seconds is not None else "no time (see notes)"
            self.progress.console.print(f"  {info['pass_id']}: {info['status']}, measured pass {took}")
        elif kind == "failure":
            self.progress.console.print(f"  first failure, {info['pass_id']}: {info['error']}", markup=False,
                                        highlight=False, soft_wrap=True)  # one line, never folded
        elif kind == "end":
            self.progress.stop()
        elif kind == "note":
            self.message(info["text"])


def require_campaign(folder: Path) -> None:
    from iteralab.campaign.folder import CampaignFolder

    CampaignFolder.open(folder)
