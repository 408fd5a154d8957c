"""Every command and command group of the ``iteralab`` CLI, found by walking the typer app: it has help text,
``--help`` and ``-h`` exit 0, and README.md names it as ``iteralab <command path>``.

Commands README.md does not name that way today are listed in ``MISSING_FROM_README`` and marked as strict
expected failures: each one shows in the test summary, and the mark must go once README.md names it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from iteralab.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"
MISSING_FROM_README: dict[tuple[str, ...], str] = {}
KNOWN_TREE = [
    (),
    ("lock",), ("prepare",), ("run",), ("table",), ("demo",), ("price",), ("window",), ("stats",), ("exclude",),
    ("decide",), ("report",), ("verify",), ("rerun",), ("threshold",), ("memory",), ("rocm-check",),
    ("bundle",), ("bundle", "seal"), ("bundle", "pack"), ("bundle", "unpack"),
    ("head",), ("head", "train"), ("kit",), ("kit", "export"), ("export",), ("export", "mlflow"),
]


def _walk(command, path: tuple[str, ...] = ()):
    """(path, command) for a command and, recursively, every sub-command of a group, in declaration order."""
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _walk(sub, (*path, name))


TREE = list(_walk(typer.main.get_command(app)))
COMMANDS = {path: command for path, command in TREE}


def _id(path: tuple[str, ...]) -> str:
    return " ".join(path) or "(root)"


def _readme_params():
    for path in COMMANDS:
        if not path:
            continue
        marks = ()
        if path in MISSING_FROM_README:
            marks = (pytest.mark.xfail(strict=True, reason=MISSING_FROM_README[path]),)
        yield pytest.param(path, id=_id(path), marks=marks)


def test_the_walk_finds_the_known_command_tree():
    assert [path for path, _ in TREE] == KNOWN_TREE


@pytest.mark.parametrize("path", list(COMMANDS), ids=_id)
def test_every_command_has_help_text(path):
    command = COMMANDS[path]
    assert (command.help or "").strip(), f"iteralab {_id(path)} has no help text"


@pytest.mark.parametrize("option", ["--help", "-h"])
@pytest.mark.parametrize("path", list(COMMANDS), ids=_id)
def test_help_option_exits_zero(path, option):
    result = CliRunner().invoke(app, [*path, option])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    first_words = " ".join(COMMANDS[path].help.split()[:2])
    assert first_words in " ".join(result.output.split())


@pytest.mark.parametrize("path", list(_readme_params()))
def test_readme_names_the_command(path):
    text = README.read_text(encoding="utf-8")
    pattern = r"(?<![\w-])iteralab " + r"\s+".join(map(re.escape, path)) + r"(?![\w-])"
    assert re.search(pattern, text), f"README.md never writes 'iteralab {' '.join(path)}'"


def test_the_cli_starts_without_loading_the_heavy_libraries():
    """``iteralab --help`` (and every command's parsing) imports the shell only: the stages, torch, scikit-learn,
    pyarrow and matplotlib load inside the command that needs them."""
    code = ("import sys, iteralab.cli; heavy = ('torch', 'sklearn', 'pyarrow', 'matplotlib', 'numpy', "
            "'iteralab.campaign', 'iteralab.evidence', 'iteralab.decision'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert out.stdout.strip() == "[]"


def test_python_dash_m_iteralab_is_the_same_command_line():
    """``python -m iteralab`` runs the shell's entry point: the same help, and a user mistake is one line and exit 2."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    helped = subprocess.run([sys.executable, "-m", "iteralab", "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "Usage: iteralab" in helped.stdout, helped.stdout + helped.stderr
    wrong = subprocess.run([sys.executable, "-m", "iteralab", "lock", "no-such-protocol.toml"], capture_output=True,
                           text=True, env=env)
    assert wrong.returncode == 2 and wrong.stderr.startswith("Error: ") and "Traceback" not in wrong.stderr, \
        wrong.stderr
