import json
import shutil
from pathlib import Path

import pytest

from campaign_factory import callable_campaign, rewrite_predictions
from fake_models_rerun import SHIFT_VARIABLE
from iteralab.evidence.verify import audit_campaign
from iteralab.cli import main
from iteralab.errors import RunError
from iteralab.lock.inputs import lock
from iteralab.evidence.rerun import rerun, staging_folder
from iteralab.evidence.run import run_campaign
from protocol_factory import protocol_toml

MODEL = 'kind = "callable"\ncallable = "fake_models_rerun:shifted_classifier"'
BOUNDED = 'target = "bounded"\nbound = 0.01'


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rerun")
    protocol = callable_campaign(root, fn="fake_models_rerun:shifted_classifier", passes=1, threshold=0.5,
                                 reproduction=BOUNDED)
    run_campaign(protocol, root / "campaign")
    return root / "campaign"


def _rerun(earlier: Path, tmp_path: Path, monkeypatch, shift: float | None) -> tuple[Path, dict]:
    if shift is None:
        monkeypatch.delenv(SHIFT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(SHIFT_VARIABLE, str(shift))
    out = tmp_path / "again"
    result = rerun(earlier, out)
    return out, result["comparison"]


def test_rerun_repeats_the_same_question_and_finds_identical_outputs(earlier, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(SHIFT_VARIABLE, raising=False)
    out = tmp_path / "again"
    assert main(["rerun", str(earlier), "--out", str(out), "--json"]) == 0
    comparison = json.loads(capsys.readouterr().out)
    for rel in ("inputs/protocol.toml", "inputs/protocol.toml.lock.json", "inputs/corpus.csv"):
        assert (out / rel).read_bytes() == (earlier / rel).read_bytes()
    old, new = (json.loads((d / "campaign.json").read_text()) for d in (earlier, out))
    for key in ("schedule", "variants", "series"):
        assert old[key] == new[key]
    assert old["corpus"]["fingerprint"] == new["corpus"]["fingerprint"]
    assert not staging_folder(out).exists()
    assert comparison["same_verdicts"] is True
    for name in ("b1", "b4"):
        v = comparison["variants"][name]
        assert (v["old_verdict"], v["new_verdict"], v["outputs"]) == ("accepted", "accepted", "identical")
        assert v["reproduction_target_met"] and v["min_label_agreement"] == 1.0
        assert v["max_abs_prob_diff"] == 0.0 and v["median_ratio"] > 0
    keys = {c["key"]: c for c in comparison["manifest_changes"]}
    assert keys["extra.protocol.source"]["bookkeeping"] is True
    assert json.loads((out / "comparison.json").read_text()) == comparison
    md = (out / "comparison.md").read_text()
    assert "| b1 | accepted (1/1) → accepted (1/1) | yes | identical | yes |" in md
    assert audit_campaign(out, require_seal=False).ok


@pytest.mark.parametrize("shift, outputs, target_met", [
    (0.004, "within bound", True),       # every probability moves by at most 0.0036 <= 0.01
    (0.05, "acceptable only", False),    # same labels, probabilities 0.045 apart: outside the bound
])
def test_changed_model_outputs_are_classified_against_the_declared_bound(earlier, tmp_path, monkeypatch, shift,
                                                                         outputs, target_met):
    out, comparison = _rerun(earlier, tmp_path, monkeypatch, shift)
    assert comparison["same_verdicts"] is True
    for v in comparison["variants"].values():
        assert v["outputs"] == outputs and v["reproduction_target_met"] is target_met
        assert v["min_label_agreement"] == 1.0
        assert v["max_abs_prob_diff"] == pytest.approx(0.9 * shift, abs=1e-6)
    assert f"| {outputs} | {'yes' if target_met else 'NO'} |" in (out / "comparison.md").read_text()


def test_changed_model_that_fails_the_checks_changes_the_verdict(earlier, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(SHIFT_VARIABLE, "0.9")  # every prediction becomes 'fresh': macro-F1 far below 0.5
    out = tmp_path / "again"
    assert main(["rerun", str(earlier), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "b1: accepted -> not accepted (VERDICT CHANGED); outputs not acceptable" in printed
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["same_verdicts"] is False
    v = comparison["variants"]["b4"]
    assert (v["old_verdict"], v["new_verdict"], v["outputs"]) == ("accepted", "not accepted", "not acceptable")
    assert v["min_label_agreement"] < 1.0
    assert "SOME DIFFER" in (out / "comparison.md").read_text()


def test_rerun_refuses_a_source_that_does_not_verify(earlier, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(earlier, source)
    pred = next((source / "predictions").glob("*.parquet"))

    def edit(ids, probs):
        probs[0, probs[0].argmax()] -= 0.1

    rewrite_predictions(pred, edit)
    with pytest.raises(RunError, match="does not verify") as err:
        rerun(source, tmp_path / "again")
    assert "iteralab verify" in err.value.hint
    assert not (tmp_path / "again").exists()


def test_rerun_refuses_an_unrelated_or_nested_output_folder(earlier, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x.txt").write_text("x")
    with pytest.raises(RunError, match="is not an earlier rerun of this campaign"):
        rerun(earlier, tmp_path / "busy")
    with pytest.raises(RunError, match="outside the earlier campaign"):
        rerun(earlier, earlier / "nested")


def test_rerun_rebuilds_a_relative_corpus_in_its_declared_format_after_the_original_is_gone(tmp_path, monkeypatch):
    """corpus.path = '../data/corpus.jsonl' with its own column names: the rerun uses the bundle's copy."""
    monkeypatch.delenv(SHIFT_VARIABLE, raising=False)
    from campaign_factory import TEXTS

    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"doc": f"d{i:02d}", "body": t, "gold": label}) + "\n" for i, (t, label) in enumerate(TEXTS)))
    folder = tmp_path / "protocols"
    folder.mkdir()
    text = protocol_toml(corpus="../data/corpus.jsonl", model=MODEL, passes=1).replace(
        '[corpus]\n', '[corpus]\nid_column = "doc"\ntext_column = "body"\nlabel_column = "gold"\n')
    (folder / "protocol.toml").write_text(text)
    lock(folder / "protocol.toml")
    run_campaign(folder / "protocol.toml", tmp_path / "first")
    shutil.rmtree(data)
    out = tmp_path / "second"
    comparison = rerun(tmp_path / "first", out)["comparison"]
    assert (out / "inputs" / "corpus.csv").read_bytes() == (tmp_path / "first" / "inputs" / "corpus.csv").read_bytes()
    assert all(v["outputs"] == "identical" for v in comparison["variants"].values())



def test_a_model_path_relative_to_the_protocol_is_linked_then_required(tmp_path, tiny_classifier_dir, monkeypatch):
    """model.path relative to the original protocol file: the rerun links the recorded folder; once that
    folder is gone, it stops before any pass and says which reference to fix."""
    monkeypatch.delenv(SHIFT_VARIABLE, raising=False)
    shutil.copytree(tiny_classifier_dir, tmp_path / "tok")
    protocol = callable_campaign(tmp_path, passes=1, model=f'{MODEL}\npath = "tok"')
    run_campaign(protocol, tmp_path / "first")
    comparison = rerun(tmp_path / "first", tmp_path / "second")["comparison"]
    assert all(v["outputs"] == "identical" for v in comparison["variants"].values())
    changes = {c["key"]: c["bookkeeping"] for c in comparison["manifest_changes"]}
    assert changes["extra.protocol.source"] and changes["extra.model_spec.path"]  # the staged copy, the link
    assert not [k for k in changes if "file_hashes" in k]  # the same tokenizer files, byte for byte
    shutil.rmtree(tmp_path / "tok")
    with pytest.raises(RunError, match="model.path: 'tok' is relative to the original protocol file"):
        rerun(tmp_path / "first", tmp_path / "third")
    assert not (tmp_path / "third").exists()


def test_a_rerun_started_outside_the_source_tree_reports_no_stack_change(tmp_path, monkeypatch):
    """The code version in a manifest is the iteralab package's source tree, whatever folder a run starts in:
    an earlier campaign run from inside the tree and its rerun from a folder outside any git tree agree."""
    import iteralab

    monkeypatch.delenv(SHIFT_VARIABLE, raising=False)
    protocol = callable_campaign(tmp_path, fn="fake_models_rerun:shifted_classifier", passes=1, threshold=0.5,
                                 reproduction=BOUNDED)
    monkeypatch.chdir(Path(iteralab.__file__).resolve().parent)
    run_campaign(protocol, tmp_path / "first")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    comparison = rerun(tmp_path / "first", tmp_path / "second")["comparison"]
    assert not [c["key"] for c in comparison["manifest_changes"] if c["key"].startswith("environment.git")]
    assert comparison["stack_changed"] is False
    from iteralab.campaign.manifest import code_version

    recorded = [json.loads((tmp_path / d / "manifest.json").read_text())["environment"]["git"]
                for d in ("first", "second")]
    assert recorded[0] == recorded[1] == code_version().to_json()
