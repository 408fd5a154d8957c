"""Tool commands beside the campaign: measure the model on the tuning split, train a head, export the kit, the
memory table, the ROCm matrix look-up."""

from __future__ import annotations

from pathlib import Path

import typer

from iteralab.commands.common import require_campaign


head_app = typer.Typer(help="A linear head for an encoder, trained on the tuning split only (P4).",
                       no_args_is_help=True)


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


def threshold_cmd(
    protocol: Path = typer.Argument(..., help="Protocol TOML file: a draft whose threshold is still CHOOSE, or any."),
    as_json: bool = typer.Option(False, "--json", help="Print the measure as JSON."),
) -> None:
    """Measure the protocol's model on its tuning split (its metric, overall and per subgroup) and suggest a
    threshold, as head train does (P4); measure each other variant's disagreement with the reference there and
    print the final corpus size the tolerance needs (written beside the protocol, PROTOCOL.samplesize.json, for
    lock). Any model kind; the protocol, its lock and campaigns are not touched."""
    import json

    from iteralab.campaign.tuning import measure_tuning

    from iteralab.plan.samplesize import record_path

    if as_json:
        measure = measure_tuning(protocol)
        if measure.sizes is not None and measure.sizes.candidates:
            measure.sizes.write(record_path(protocol))
        typer.echo(json.dumps(measure.to_dict(), indent=2, sort_keys=True))
        return
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    tasks: list = []

    def show(done: int, total: int) -> None:  # started at the first batch: a refusal before it prints one line
        if not tasks:
            bar.start()
            tasks.append(bar.add_task("tuning split", total=total))
        bar.update(tasks[0], completed=done)

    try:
        measure = measure_tuning(protocol, progress=show)
    finally:
        if tasks:
            bar.stop()
    typer.echo("\n".join(measure.lines()))
    if measure.sizes is not None and measure.sizes.candidates:  # lock reads it: it must not run the model
        measure.sizes.write(record_path(protocol))
        typer.echo(f"written: {record_path(protocol)} (the disagreement lock compares the final corpus size with)")


kit_app = typer.Typer(help="The downloadable kit folder (K7).", no_args_is_help=True)


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


def memory_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
    runtime_overhead: int = typer.Option(
        None, "--runtime-overhead-bytes", metavar="BYTES", min=0,
        help="CPU runtime overhead to add to the estimate (default: the one the pass workers recorded).",
    ),
) -> None:
    """Peak memory per variant: estimate (weights, activations, margin) beside the observation, the difference,
    the counter's scope, and whether every pass completed the corpus (M1-M3)."""
    import json

    from iteralab.evidence.memory import memory_report, render_memory_table

    require_campaign(campaign)
    report = memory_report(campaign, runtime_overhead=runtime_overhead)
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        typer.echo("\n".join(render_memory_table(report["variants"])))


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


def register(app: typer.Typer) -> None:
    """Add this group's commands to the CLI, in the order ``--help`` lists them."""
    app.command("threshold")(threshold_cmd)
    app.add_typer(head_app, name="head")
    app.add_typer(kit_app, name="kit")
    app.command("memory")(memory_cmd)
    app.command("rocm-check")(rocm_check_cmd)
