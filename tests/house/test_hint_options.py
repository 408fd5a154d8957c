"""Every ``--option`` a hint names exists on the command the hint is about (the CLI introspected, not a list).

A hint is the ``hint=`` argument of an error in ``src/iteralab`` (its string parts read from the source). An option
belongs to the command the hint names before it (``iteralab bundle unpack ARCHIVE --out NEW``); a hint that names
no command is about the commands whose errors its module raises (:data:`MODULE_COMMANDS`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest
import typer

from iteralab.cli import app, main

SRC = Path(__file__).resolve().parents[2] / "src" / "iteralab"
#: Standalone kit scripts with their own argparse interface (not the ``iteralab`` CLI).
OWN_INTERFACE = {"kit/calcul_forfaits.py", "kit/memoire.py"}
#: The commands whose errors a module's hints are shown with, when the hint names no command itself.
MODULE_COMMANDS = {
    "campaign/estimate.py": ["run"], "campaign/manifest.py": ["run"], "campaign/runner.py": ["run"],
    "cli.py": ["price"],
    "decision/report.py": ["report"], "decision/rule.py": ["decide", "report"], "demo/run.py": ["demo"],
    "economics/kitexport.py": ["kit export"], "economics/window.py": ["window"],
    "evidence/bundle.py": ["bundle pack"], "evidence/rerun.py": ["rerun"],
    "evidence/table.py": ["exclude"], "plan/lockfile.py": ["lock"], "plan/prepare.py": ["prepare"],
    "plan/prepare_generation.py": ["prepare"], "plan/prepare_queries.py": ["prepare"],
    "plan/protocol.py": ["price"],
}
#: Another program's option named in a hint (``ray start --head``): not the CLI's.
FOREIGN = re.compile(r"ray start $")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def cli_options() -> dict[str, set[str]]:
    """Every command path ('table', 'bundle unpack') and its options, from the click command typer builds."""
    out: dict[str, set[str]] = {}

    def walk(cmd: click.Command, path: str) -> None:
        out[path] = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} | {"--help"}
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return out


def hints() -> list[tuple[str, int, str]]:
    """(module, line, text) of every ``hint=`` argument in the package (f-string placeholders left out)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "hint":
                parts = [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                found.append((path.relative_to(SRC).as_posix(), node.value.lineno, "".join(parts)))
    return found


def named_command(before: str, commands: set[str]) -> str | None:
    """The last command the text names ('iteralab bundle unpack …'), the longest path that matches."""
    mentions = list(re.finditer(r"iteralab ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", before))
    if not mentions:
        return None
    words = mentions[-1].group(1)
    return words if words in commands else words.split()[0]


def test_every_option_a_hint_names_exists_on_its_command():
    options = cli_options()
    problems, checked = [], 0
    for module, line, text in hints():
        if module in OWN_INTERFACE:
            continue
        for match in OPTION.finditer(text):
            before = text[:match.start()]
            if FOREIGN.search(before):
                continue
            named = named_command(before, set(options))
            commands = [named] if named else MODULE_COMMANDS.get(module)
            if commands is None:
                problems.append(f"{module}:{line}: {match.group()} in a hint that names no command; name it "
                                f"('iteralab CMD … {match.group()}') or map the module in MODULE_COMMANDS")
                continue
            checked += 1
            for command in commands:
                if match.group() not in options.get(command, set()):
                    problems.append(f"{module}:{line}: hint names {match.group()}, which 'iteralab {command}' "
                                    f"does not have: {text!r}")
    assert checked >= 20  # the scan found the hints (a broken scan never passes by finding none)
    assert not problems, "\n".join(problems)


def test_the_scan_catches_the_option_table_never_had():
    """The hint ``table`` printed on a sealed folder before (``--out DIR``) is caught by the same rule."""
    options = cli_options()
    assert "--out" not in options["table"] and "--out" in options["report"] and "--out" in options["bundle pack"]
    assert named_command("work on a copy (iteralab bundle unpack ARCHIVE ", set(options)) == "bundle unpack"
    assert named_command("or iteralab verify FOLDER ", set(options)) == "verify"
    assert named_command("write elsewhere: iteralab report FOLDER ", set(options)) == "report"


@pytest.mark.parametrize("args", [["table"], ["exclude", "r01-p01-b4-a1", "--reason", "backup"], ["report"],
                                  ["decide", "--out"]])
def test_a_sealed_folder_s_hint_names_only_options_of_the_refused_command(tmp_path, capsys, args):
    from campaign_factory import callable_campaign
    from iteralab.evidence.bundle import seal
    from iteralab.evidence.run import run_campaign

    protocol = callable_campaign(tmp_path, passes=1)
    folder = tmp_path / "camp"
    run_campaign(protocol, folder)
    command, rest = args[0], args[1:]
    if command == "table":  # ``table`` refuses only where the regenerated table would differ
        (folder / "raw_table.csv").write_text("edited\n", encoding="utf-8")
    seal(folder)
    argv = [command, str(folder), *rest] + ([str(folder)] if rest == ["--out"] else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the folder is sealed" in err
    hint = next(line for line in err.splitlines() if line.startswith("Hint: "))
    options = cli_options()
    for option in OPTION.findall(hint):
        named = named_command(hint[:hint.index(option)], set(options)) or command
        assert option in options[named], (command, hint)
    assert ("--out" in hint) is (command in ("report", "decide"))
