import csv
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_factory import callable_campaign, rewrite_predictions
from iteralab.evidence.verify import audit_campaign
from iteralab.evidence.bundle import SEAL_NAME, SUMS_NAME, list_files, seal
from iteralab.cli import main
from iteralab.campaign.journal import read_journal
from iteralab.evidence.run import run_campaign

SUBGROUPS = '[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n'


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("audit")
    protocol = callable_campaign(root, passes=2, threshold=0.5, subgroups=SUBGROUPS)
    run_campaign(protocol, root / "campaign")
    seal(root / "campaign")
    return root / "campaign"


@pytest.fixture
def campaign(built, tmp_path) -> Path:
    target = tmp_path / "campaign"
    shutil.copytree(built, target)
    return target


def _differences(folder: Path) -> list[str]:
    report = audit_campaign(folder)
    assert not report.ok
    return report.differences


def _first_pass(folder: Path) -> tuple[str, str]:
    state = read_journal(folder / "journal.jsonl")
    pid = state.order[0]
    return pid, state.finished[pid]["prediction_file"]


def test_intact_campaign_verifies(campaign, capsys):
    report = audit_campaign(campaign)
    assert report.ok, report.differences
    assert (report.passes, report.accepted) == (4, 4)
    assert report.files_hashed == len(list_files(campaign))
    assert main(["verify", str(campaign)]) == 0
    assert capsys.readouterr().out.strip() == f"verified: 4 passes, 4 accepted, {report.files_hashed} files hashed"
    assert main(["verify", str(campaign), "--json", "--expect-seal", report.seal_digest]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["differences"] == [] and len(data["verdicts"]) == 4


def test_a_single_byte_change_in_any_file_is_detected(campaign):
    """One flipped byte at one seeded position of every file of the bundle, the two seal files included."""
    rng = random.Random(20260924)
    files = list_files(campaign) + [SUMS_NAME, SEAL_NAME]
    for rel in files:
        path = campaign / rel
        original = path.read_bytes()
        position = rng.randrange(len(original))
        changed = bytearray(original)
        changed[position] ^= 0xFF
        path.write_bytes(bytes(changed))
        differences = _differences(campaign)
        named = SUMS_NAME if rel in (SUMS_NAME, SEAL_NAME) else rel
        assert any(d.startswith(named) for d in differences), (rel, position, differences)
        path.write_bytes(original)
    assert audit_campaign(campaign).ok


def test_deleted_and_added_files_are_named(campaign):
    pid, pred = _first_pass(campaign)
    (campaign / pred).unlink()
    (campaign / "notes.txt").write_text("added later")
    differences = _differences(campaign)
    assert f"{pred}: missing (listed in SHA256SUMS)" in differences
    assert f"{pred}: missing (the journal records it for pass {pid})" in differences
    assert "notes.txt: added after sealing (not listed in SHA256SUMS)" in differences


def test_edited_threshold_names_the_protocol_even_after_resealing(campaign):
    path = campaign / "inputs" / "protocol.toml"
    path.write_text(path.read_text().replace("threshold = 0.5", "threshold = 0.4"))
    differences = _differences(campaign)
    assert "inputs/protocol.toml: edited (sha256 differs from SHA256SUMS)" in differences
    seal(campaign)  # a re-seal hides nothing: the lock still names the locked content
    differences = _differences(campaign)
    assert any(d.startswith("inputs/protocol.toml: protocol 'test-protocol' version 1 changed after it was locked")
               and "threshold" in d for d in differences), differences


def test_edited_prediction_is_named_even_after_resealing(campaign):
    pid, pred = _first_pass(campaign)
    path = campaign / pred

    def edit(ids, probs):
        probs[0] = [0.7, 0.2, 0.1] if probs[0].argmax() == 0 else probs[0][::-1].copy()

    rewrite_predictions(path, edit)
    seal(campaign)
    differences = _differences(campaign)
    assert f"{pred}: edited — sha256 differs from the journal's record for pass {pid}" in differences


def test_changed_raw_table_row_is_named(campaign):
    path = campaign / "raw_table.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header, cells = rows[0], rows[2]
    pid = cells[0]
    column = header.index("corpus_accepted")
    assert cells[column] == "true"
    cells[column] = "false"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    seal(campaign)
    differences = _differences(campaign)
    assert any(d.startswith(f"raw_table.csv row 2 (pass {pid}, predictions/{pid}.parquet): column 'corpus_accepted' "
                            "stored 'false', recomputed 'true'") for d in differences), differences


def test_prediction_and_journal_rewritten_together_still_fail(campaign):
    """A forger who edits a prediction, fixes its hash in the journal and re-seals: the table row and the
    recorded verdict no longer match what the prediction file says."""
    from iteralab.common.files import sha256_file

    pid, pred = _first_pass(campaign)
    path = campaign / pred

    def edit(ids, probs):
        probs[:] = [0.1, 0.1, 0.8]  # every record "rotten"

    rewrite_predictions(path, edit)
    journal = campaign / "journal.jsonl"
    old_sha = read_journal(journal).finished[pid]["prediction_sha256"]
    journal.write_text(journal.read_text().replace(old_sha, sha256_file(path)))
    seal(campaign)
    differences = _differences(campaign)
    assert any(d.startswith(f"raw_table.csv row 1 (pass {pid}, {pred}): column 'metric'") for d in differences)
    assert any(d.startswith(f"{pred}: pass {pid}'s verdict field 'metric' recomputed") for d in differences)


def test_cli_names_each_difference_on_its_own_line_and_exits_1(campaign, capsys):
    (campaign / "manifest.json").unlink()
    (campaign / SUMS_NAME).write_text((campaign / SUMS_NAME).read_text() + "\n")
    assert main(["verify", str(campaign)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert any(line.startswith("- SHA256SUMS: edited") for line in lines)
    assert all(line.startswith("- ") for line in lines)
    assert captured.err.splitlines()[0].startswith(f"Error: {campaign}: ")
    assert "difference(s); the evidence does not verify" in captured.err
    assert main(["verify", str(campaign), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["differences"]


def test_an_unsealed_folder_fails_unless_asked(campaign, capsys):
    (campaign / SUMS_NAME).unlink()
    (campaign / SEAL_NAME).unlink()
    assert main(["verify", str(campaign)]) == 1
    assert "- SHA256SUMS: missing" in capsys.readouterr().out
    assert main(["verify", str(campaign), "--unsealed"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verified: 4 passes, 4 accepted, 0 files hashed") and "note: not sealed" in out


def test_wrong_expected_seal_digest_is_a_difference(campaign):
    report = audit_campaign(campaign, expect_seal="0" * 64)
    assert any("differs from the expected" in d for d in report.differences)


def test_not_a_campaign_folder(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a campaign folder" in capsys.readouterr().err


def test_verify_never_imports_torch(campaign):
    """Run the CLI with every import of torch refused, then check that nothing loaded it or a model module.

    (Setting ``sys.modules['torch'] = None`` is not usable here: scipy, under scikit-learn, probes
    ``sys.modules`` for torch and would crash on the placeholder. A meta-path blocker refuses the import the
    same way a machine without torch would.)
    """
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ImportError('torch is blocked in this test')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from iteralab.cli import main\n"
            f"rc = main(['verify', {str(campaign)!r}])\n"
            "loaded = [m for m in ('torch', 'transformers', 'iteralab.models.base', 'iteralab.models.factory',"
            " 'iteralab.campaign.engines.passes') if m in sys.modules]\n"
            "print('loaded:', loaded)\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified: 4 passes, 4 accepted" in proc.stdout
    assert "loaded: []" in proc.stdout


def test_a_killed_and_resumed_campaign_verifies_with_notes(built, tmp_path):
    """R9: the pass cut short stays an aborted row, its leftover files are named as not counted, and the
    resumed campaign verifies."""
    campaign = tmp_path / "campaign"
    shutil.copytree(built, campaign)
    for name in (SUMS_NAME, SEAL_NAME):
        (campaign / name).unlink()
    journal = campaign / "journal.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    last = records[-1]["pass_id"]
    kept = [r for r in records if not (r.get("pass_id") == last and r["event"] in ("pass_finished", "pass_evaluated"))]
    journal.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept) + '{"event": "pass_fin')
    (campaign / "predictions" / f".tmp-{last}.parquet.x1").write_text('{"id": "d00"')
    run_campaign(built.parent / "protocol.toml", campaign)  # resume: the slot runs again as attempt 2
    seal(campaign)
    report = audit_campaign(campaign)
    assert report.ok, report.differences
    assert (report.passes, report.accepted) == (5, 4)
    assert f"predictions/{last}.parquet: written by aborted pass {last}, not counted" in report.notes
    assert any(n.startswith("predictions/.tmp-") and "interrupted write" in n for n in report.notes)
    assert any(n.startswith("journal.jsonl line") for n in report.notes)
