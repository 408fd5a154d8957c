"""Export commands: a sealed campaign folder into an experiment tracker (MLflow)."""

from __future__ import annotations

from pathlib import Path

import typer

export_app = typer.Typer(help="Export a sealed campaign folder into an experiment tracker.", no_args_is_help=True)


@export_app.command("mlflow")
def export_mlflow_cmd(
    campaign: Path = typer.Argument(..., help="Sealed campaign folder (report written, then 'bundle seal')."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", metavar="URI",
                                     help="MLflow tracking store (default: a SQLite store beside the folder, "
                                          "FOLDER.mlflow/mlflow.db; no server)."),
    experiment: str = typer.Option(None, "--experiment", metavar="NAME",
                                   help="Experiment name (default: the protocol's name)."),
) -> None:
    """One MLflow run per campaign (protocol and decision as tags, the note, report, raw table and manifest as
    artifacts) and one child run per variant (factors as params, figures as metrics, each counted pass a step);
    read from the sealed folder only. Exporting the same sealed folder again adds nothing."""
    from iteralab.api.export import export_mlflow

    done = export_mlflow(campaign, tracking_uri=tracking_uri, experiment=experiment)
    what = "exported" if done.created else "already exported, nothing added"
    typer.echo(f"{what}: run {done.parent_run_id} with {len(done.child_run_ids)} variant runs, experiment "
               f"{done.experiment_id} in {done.tracking_uri}")


def register(app: typer.Typer) -> None:
    """Add this group's commands to the CLI."""
    app.add_typer(export_app, name="export")
