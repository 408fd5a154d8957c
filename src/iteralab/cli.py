"""Command-line shell: parses, calls the library, prints. No logic lives here that the library lacks."""

from __future__ import annotations

import sys

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
