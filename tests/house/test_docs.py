"""The documentation cannot drift from the code: the protocol and command-line references are generated
(``scripts/gen_docs.py``) and the committed pages must equal what the code generates now; every protocol key
carries a description; the site builds with warnings as errors where MkDocs is installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_docs = _load_generator()


def test_every_protocol_key_has_a_description():
    assert gen_docs.missing_descriptions() == []


def test_a_key_without_a_description_is_found():
    class Inner(BaseModel):
        described: int = Field(default=1, description="has one")
        bare: int = 2

    class Outer(BaseModel):
        inner: Inner = Field(default=Inner(), description="a table")
        lines: tuple[Inner, ...] = ()

    assert gen_docs.missing_descriptions(Outer) == ["(top level).lines", "inner.bare", "lines.bare"]


@pytest.mark.parametrize("page", ["protocol.md", "cli.md", "python.md"])
def test_the_committed_reference_is_what_the_code_generates(page):
    path = ROOT / "docs" / "reference" / page
    make = {"protocol.md": gen_docs.protocol_page, "cli.md": gen_docs.cli_page, "python.md": gen_docs.api_page}[page]
    assert path.read_text(encoding="utf-8") == make(), f"docs/reference/{page} is stale: run python scripts/gen_docs.py"


def test_the_protocol_reference_lists_every_table_and_key():
    text = (ROOT / "docs" / "reference" / "protocol.md").read_text(encoding="utf-8")
    for path, array, model in gen_docs.tables():
        if path:
            assert f"## {'[[' if array else '['}{path}{']]' if array else ']'}" in text
        for key in model.model_fields:
            assert f"| `{key}` |" in text


def test_the_cli_reference_names_every_command_and_option():
    import typer

    from iteralab.cli import app

    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for path, command in gen_docs.walk_commands(typer.main.get_command(app)):
        assert f"## `{' '.join(('iteralab', *path))}`" in text
        if getattr(command, "commands", None) and path:
            continue
        for param in command.params:
            if param.name != "help":
                assert (param.opts[0] if param.param_type_name == "option" else param.name.upper()) in text


def test_the_python_reference_documents_every_public_name():
    import iteralab

    text = (ROOT / "docs" / "reference" / "python.md").read_text(encoding="utf-8")
    for name in iteralab.__all__:
        if name != "__version__":
            assert f"### `iteralab.{name}`" in text
            assert (getattr(iteralab, name).__doc__ or "").strip(), f"iteralab.{name} has no docstring"


def test_the_check_mode_reports_a_stale_page(tmp_path, monkeypatch):
    page = tmp_path / "cli.md"
    page.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(gen_docs, "PAGES", {page: gen_docs.cli_page})
    monkeypatch.setattr(gen_docs, "ROOT", tmp_path)
    assert gen_docs.main(["--check"]) == 1
    assert gen_docs.main([]) == 0 and gen_docs.main(["--check"]) == 0


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs not installed (pip install '.[docs]'); "
                    "CI builds the site in a step of its own (.ci/run)")
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()
