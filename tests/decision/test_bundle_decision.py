"""The tutorial's path with a catalog of one's own (38.3): the decision, its catalog and the bundle travel together.

``decide``/``report --catalog FILE`` prices from the user's catalog; the bundle must carry that catalog with the
decision it priced (its sha256 in decision.json), so the unpacked folder decides the same way, and ``verify``
recomputes the stored decision from what the folder holds. A cheap callable campaign stands in for the demo.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from campaign_factory import callable_campaign
from iteralab.campaign.folder import DECISION_CATALOG
from iteralab.cli import main
from iteralab.evidence.run import run_campaign
from iteralab.evidence.reads import load_evidence
from protocol_factory import VARIANTS
from stats_campaigns import CALENDAR

HEADER = ("catalog_version,catalog_date,gpu_id,gpu_name,cards_per_lot,package_days,price_per_lot,currency,"
          "device_match,cpu_cores\n")


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("priced")
    run_campaign(callable_campaign(root, passes=1, variants=VARIANTS + CALENDAR), root / "camp")
    return root / "camp"


@pytest.fixture
def work(ran, tmp_path, monkeypatch) -> Path:
    """The campaign folder and, beside it, a catalog with a CPU package for the CPU that ran it (as the tutorial's
    my-catalog.csv is written for the machine at hand); the working folder is that folder, as on the page."""
    shutil.copytree(ran, tmp_path / "camp")
    hardware = load_evidence(tmp_path / "camp").hardware
    (tmp_path / "my-catalog.csv").write_text(
        HEADER + f"my-1,2026-12-01,cpu-box,{hardware.cpu},1,7,35.00,USD,,{hardware.cpu_cores}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _without_where(value):
    """A decision record without where its files were read (folder and catalog paths)."""
    if isinstance(value, dict):
        return {k: _without_where(v) for k, v in value.items() if k not in ("folder", "path")}
    if isinstance(value, list):
        return [_without_where(v) for v in value]
    return value


def _decide(folder: str, capsys, *extra: str) -> dict:
    assert main(["decide", folder, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_unpacked_bundle_decides_as_the_catalog_given_on_the_command_line(work, capsys):
    given = _decide("camp", capsys, "--catalog", "my-catalog.csv")
    assert "35.00 USD committed" in given["decision"]
    assert main(["report", "camp", "--catalog", "my-catalog.csv"]) == 0
    capsys.readouterr()
    digest = hashlib.sha256((work / "my-catalog.csv").read_bytes()).hexdigest()
    stored = json.loads((work / "camp" / "decision.json").read_text(encoding="utf-8"))
    assert stored["catalog"]["sha256"] == digest and stored["decision"] == given["decision"]
    assert (work / "camp" / DECISION_CATALOG).read_bytes() == (work / "my-catalog.csv").read_bytes()

    assert main(["bundle", "pack", "camp"]) == 0
    assert main(["bundle", "unpack", "camp.tar.gz", "elsewhere"]) == 0
    capsys.readouterr()
    (work / "my-catalog.csv").unlink()  # the receiver has the bundle only
    again = _decide("elsewhere", capsys)
    assert again["decision"] == given["decision"] and again["chosen"] == given["chosen"]
    assert again["catalog"]["sha256"] == digest
    assert _without_where(again["configurations"]) == _without_where(given["configurations"])  # prices included
    assert main(["verify", "elsewhere"]) == 0
    assert capsys.readouterr().out.startswith("verified: ")


def _unpacked(work: Path, capsys) -> Path:
    assert main(["decide", "camp", "--catalog", "my-catalog.csv", "--out", "camp"]) == 0
    assert main(["bundle", "pack", "camp"]) == 0
    assert main(["bundle", "unpack", "camp.tar.gz", "elsewhere"]) == 0
    capsys.readouterr()
    return work / "elsewhere"


def test_verify_fails_when_the_stored_decision_differs_from_the_one_the_folder_decides(work, capsys):
    folder = _unpacked(work, capsys)
    path = folder / "decision.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    other = "b1" if record["chosen"] == "b4" else "b4"
    record["decision"] = record["decision"].replace(f"chosen: {record['chosen']}", f"chosen: {other}")
    record["chosen"] = other
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert main(["bundle", "seal", "elsewhere"]) == 0  # a consistent re-seal hides nothing from verify
    capsys.readouterr()
    assert main(["verify", "elsewhere"]) == 1
    out = capsys.readouterr().out
    assert "- decision.json: differs from the decision recomputed from the folder's files at chosen, decision" in out


def test_verify_fails_when_the_catalog_the_decision_priced_from_was_edited(work, capsys):
    folder = _unpacked(work, capsys)
    copy = folder / DECISION_CATALOG
    copy.write_text(copy.read_text(encoding="utf-8").replace(",35.00,", ",3.50,"), encoding="utf-8")
    assert main(["bundle", "seal", "elsewhere"]) == 0
    capsys.readouterr()
    assert main(["verify", "elsewhere"]) == 1
    out = capsys.readouterr().out
    assert "- decision.json: priced from a catalog with sha256 " in out and "which the folder does not hold" in out
    assert "differs from the decision recomputed from the folder's files at" in out


def test_deciding_again_with_the_folders_own_catalog_drops_the_copy_of_the_earlier_one(work, capsys):
    assert main(["decide", "camp", "--catalog", "my-catalog.csv", "--out", "camp"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == ["camp/decision.md", "camp/decision.json",
                                                        f"camp/{DECISION_CATALOG}"]
    assert main(["decide", "camp", "--catalog", "camp/inputs/catalog.csv", "--out", "camp"]) == 0
    capsys.readouterr()
    assert not (work / "camp" / DECISION_CATALOG).exists()
    assert "rental not priced" in _decide("camp", capsys)["decision"]  # the shipped catalog has no such CPU row
    assert main(["verify", "--unsealed", "camp"]) == 0
