"""A self-contained campaign folder (D3): the head, config and tokenizer files travel with the evidence, the
weights by hash (included on request); a rerun elsewhere names each missing file with its hash. Also: the pass
worker's scratch files stay inside the campaign, and error messages list classes in the protocol's order."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from campaign_factory import write_corpus_csv
from iteralab.campaign import runner
from iteralab.campaign.engines import local
from iteralab.lock.inputs import lock
from iteralab.campaign.records import PassSpec
from iteralab.cli import main
from iteralab.errors import BundleError, CorpusError, RunError, WorkloadError
from iteralab.evidence.bundle import pack, seal, unpack
from iteralab.evidence.rerun import rerun
from iteralab.evidence.run import run_campaign
from iteralab.evidence.verify import audit_campaign
from protocol_factory import write_protocol

ONE_VARIANT = '\n[[variants]]\nname = "b4"\nbatch_size = 4\n'


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def first(tmp_path, tiny_encoder_dir, tiny_head_path) -> Path:
    """A campaign whose encoder folder and head sit beside the protocol (relative paths, as users keep them)."""
    shutil.copytree(tiny_encoder_dir, tmp_path / "encoder")
    shutil.copyfile(tiny_head_path, tmp_path / "head.safetensors")
    write_corpus_csv(tmp_path)
    protocol = write_protocol(tmp_path, model='kind = "encoder_head"\npath = "encoder"\nhead = "head.safetensors"',
                              variants=ONE_VARIANT, reference="b4", passes=1)
    lock(protocol)
    run_campaign(protocol, tmp_path / "first")
    return tmp_path / "first"


def _take_model_away(root: Path) -> Path:
    """As on another machine: neither the encoder folder nor the head is where the campaign read them."""
    away = root.parent / f"{root.name}-away"
    away.mkdir()
    shutil.move(root / "encoder", away / "encoder")
    shutil.move(root / "head.safetensors", away / "head.safetensors")
    return away


def test_the_folder_carries_head_config_and_tokenizer_and_records_the_weights_by_hash(first):
    files = json.loads((first / "campaign.json").read_text())["model"]["files"]
    carried = first / "inputs" / "model"
    encoder = first.parent / "encoder"
    assert files["model.safetensors"] == {"sha256": _sha(encoder / "model.safetensors"),
                                          "bytes": (encoder / "model.safetensors").stat().st_size, "carried": False}
    assert not (carried / "model.safetensors").exists()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "head/head.safetensors"):
        assert files[name]["carried"] is True
        assert _sha(carried / name) == files[name]["sha256"]
    assert files["head/head.safetensors"]["sha256"] == _sha(first.parent / "head.safetensors")
    # the lock's model fingerprint and the carried record name the same files with the same hashes
    lock_entry = json.loads((first / "inputs" / "protocol.toml.lock.json").read_text())["locks"][0]
    assert {n: r["sha256"] for n, r in files.items()} == lock_entry["inputs"]["model"]


def test_a_rerun_without_the_weights_names_the_missing_file_and_its_hash(first, tmp_path):
    weights = tmp_path / "encoder" / "model.safetensors"
    digest, size = _sha(weights), weights.stat().st_size
    _take_model_away(tmp_path)
    with pytest.raises(RunError) as err:
        rerun(first, tmp_path / "second")
    message = str(err.value)
    assert message.startswith("model.path: 'encoder' is relative to the original protocol file")
    assert f"lacks model.safetensors (sha256 {digest}, {size:,} bytes)" in message
    assert "--include-weights" in err.value.hint
    assert not (tmp_path / "second").exists()
    with pytest.raises(BundleError, match="cannot include model.safetensors"):
        pack(first, tmp_path / "b.tar.gz", include_weights=True)  # packing needs the weights it adds


def test_a_bundle_packed_with_its_weights_reruns_where_no_model_folder_exists(first, tmp_path, capsys):
    archive = tmp_path / "bundle.tar.gz"
    assert main(["bundle", "pack", str(first), "--include-weights", "--out", str(archive)]) == 0
    assert "sealed" in capsys.readouterr().out
    assert _sha(first / "inputs" / "model" / "model.safetensors") == _sha(tmp_path / "encoder" / "model.safetensors")
    unpack(archive, tmp_path / "elsewhere")
    restored = tmp_path / "elsewhere"
    assert audit_campaign(restored).ok
    _take_model_away(tmp_path)
    result = rerun(restored, tmp_path / "second")
    assert all(v["outputs"] == "identical" for v in result["comparison"]["variants"].values())


# --------------------------------------------------------------------------------- the worker's scratch


def test_the_worker_spec_lives_in_the_campaign_scratch_folder(tmp_path, monkeypatch):
    seen = {}

    def fake_run(argv, **kwargs):
        seen["spec"] = Path(argv[3])
        seen["exists"] = seen["spec"].is_file()
        return subprocess.CompletedProcess(argv, 9, "", "killed\n")

    monkeypatch.setattr(local.subprocess, "run", fake_run)
    scratch = tmp_path / "campaign" / runner.SCRATCH
    (tmp_path / "campaign").mkdir()
    spec = PassSpec("p1", variant={}, model={}, classes=(), corpus_path="", prediction_dir="", warmup={},
                    scratch_dir=str(scratch))
    result = local.run_in_worker(spec)
    assert seen["exists"] and scratch in seen["spec"].parents
    assert result["status"] == "failed" and result["error_kind"] == "crash"
    assert not any(scratch.iterdir())  # removed once the worker ended


def test_scratch_left_by_a_killed_run_blocks_the_seal_until_the_run_resumes(tmp_path):
    from campaign_factory import callable_campaign

    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "campaign"
    run_campaign(protocol, out)
    leftover = out / runner.SCRATCH / "pass-x"
    leftover.mkdir(parents=True)
    (leftover / "spec.json").write_text("{}")
    with pytest.raises(BundleError, match="scratch files are left by an interrupted run"):
        seal(out)
    run_campaign(protocol, out)  # the resume clears what the killed worker left
    assert not (out / runner.SCRATCH).exists()
    assert seal(out).files > 0


# ------------------------------------------------------------------------------ classes in protocol order


def test_a_label_outside_the_classes_lists_them_in_the_protocol_order(tmp_path):
    from iteralab.plan.corpus import load_corpus

    path = tmp_path / "c.csv"
    path.write_text("id,text,label\nr1,a,zeta\nr2,b,beta\n")
    with pytest.raises(CorpusError) as err:
        load_corpus(path, classes=["zeta", "alpha"])
    assert str(err.value).endswith("line 3, field label: label 'beta' is not one of the classes (zeta, alpha)")


def test_unknown_labels_from_a_callable_are_listed_as_returned(monkeypatch):
    from iteralab.models.callable import CallableWorkload

    workload = CallableWorkload.__new__(CallableWorkload)
    workload.ref, workload.classes = "m:f", ("plot", "fresh", "rotten")
    with pytest.raises(WorkloadError) as err:
        workload.check_output(["zz", "fresh", "aa", "zz"], 4)
    assert "returned unknown labels ['zz', 'aa']" in str(err.value)
    assert err.value.hint == "labels must be among ['plot', 'fresh', 'rotten']"
    assert np.allclose(workload.check_output(["plot", "rotten"], 2).sum(axis=1), 1.0)


def test_verify_finds_an_edited_or_missing_carried_file(first):
    assert audit_campaign(first, require_seal=False).ok
    config = first / "inputs" / "model" / "config.json"
    config.write_text(config.read_text() + " ")
    (first / "inputs" / "model" / "head" / "head.safetensors").unlink()
    report = audit_campaign(first, require_seal=False)
    assert "inputs/model/config.json: sha256 differs from campaign.json (the model file was edited)" in report.differences
    assert "inputs/model/head/head.safetensors: missing (campaign.json records it as carried)" in report.differences


# ------------------------------------------------------- absolute and package: references, the model moved away


def _away(path: Path) -> None:
    """As on another machine: the folder is no longer where the campaign read it."""
    shutil.move(path, path.parent.parent / f"{path.parent.name}-away-{path.name}")


def _packed_and_unpacked(first: Path, root: Path, include_weights: bool = True) -> Path:
    archive = root / f"bundle-{include_weights}.tar.gz"
    pack(first, archive, include_weights=include_weights)
    return unpack(archive, root / f"elsewhere-{include_weights}").dest


def test_an_absolute_model_path_moved_away_reruns_from_the_weights_the_bundle_carries(tmp_path, tiny_classifier_dir,
                                                                                       capsys):
    """What ``prepare --model`` writes: model.path absolute. Packed with its weights, the bundle reruns once the
    folder is gone, and says it used the carried copy; packed without, the message names the missing weights."""
    own = tmp_path / "own" / "model"
    shutil.copytree(tiny_classifier_dir, own)
    write_corpus_csv(tmp_path)
    protocol = write_protocol(tmp_path, model=f'kind = "hf_classifier"\npath = "{own}"', variants=ONE_VARIANT,
                              reference="b4", passes=1)
    lock(protocol)
    run_campaign(protocol, tmp_path / "first")
    without = _packed_and_unpacked(tmp_path / "first", tmp_path, include_weights=False)
    restored = _packed_and_unpacked(tmp_path / "first", tmp_path)
    files = json.loads((restored / "campaign.json").read_text())["model"]["files"]
    weights = files["model.safetensors"]
    _away(tmp_path / "own")
    capsys.readouterr()
    assert main(["rerun", str(restored), "--out", str(tmp_path / "second"), "--json"]) == 0
    captured = capsys.readouterr()
    line = (f"model.path: '{own}' is not on this machine: using the copy the bundle carries (inputs/model, "
            f"{len(files)} file(s) with their recorded sha256)")
    assert line in captured.err.splitlines()
    comparison = json.loads(captured.out)
    assert comparison["rerun"]["model_inputs"] == [{"key": "model.path", "reference": str(own),
                                                    "folder": "inputs/model", "files": len(files),
                                                    "why": "is not on this machine"}]
    assert all(v["outputs"] == "identical" for v in comparison["variants"].values())
    assert comparison["stack_changed"] is False  # where the model folder was read is bookkeeping, not the stack
    assert f"- {line}" in (tmp_path / "second" / "comparison.md").read_text()
    assert audit_campaign(tmp_path / "second", require_seal=False).ok
    with pytest.raises(RunError) as err:
        rerun(without, tmp_path / "third")
    assert str(err.value).startswith(f"model.path: '{own}' is not found on this machine")
    assert str(err.value).endswith(f"the bundle carries {len(files) - 1} of its {len(files)} files and lacks "
                                   f"model.safetensors (sha256 {weights['sha256']}, {weights['bytes']:,} bytes)")


def test_package_references_of_an_encoder_and_its_head_rerun_from_the_carried_copy(tmp_path, tiny_encoder_dir,
                                                                                    tiny_head_path, monkeypatch):
    """model.path and model.head as ``package:NAME/...``: once the package is gone, both come from the bundle."""
    import importlib

    site = tmp_path / "site"
    package = site / "own_rerun_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copytree(tiny_encoder_dir, package / "encoder")
    shutil.copyfile(tiny_head_path, package / "head.safetensors")
    monkeypatch.syspath_prepend(str(site))
    write_corpus_csv(tmp_path)
    model = ('kind = "encoder_head"\npath = "package:own_rerun_models/encoder"\n'
             'head = "package:own_rerun_models/head.safetensors"')
    protocol = write_protocol(tmp_path, model=model, variants=ONE_VARIANT, reference="b4", passes=1)
    lock(protocol)
    run_campaign(protocol, tmp_path / "first")
    restored = _packed_and_unpacked(tmp_path / "first", tmp_path)
    _away(site)
    importlib.invalidate_caches()
    notes = []
    result = rerun(restored, tmp_path / "second",
                   progress=lambda kind, info: notes.append(info["text"]) if kind == "note" else None)
    recorded = result["comparison"]["rerun"]["model_inputs"]
    assert [(r["key"], r["reference"], r["why"]) for r in recorded] == [
        ("model.path", "package:own_rerun_models/encoder", "is not on this machine"),
        ("model.head", "package:own_rerun_models/head.safetensors", "is not on this machine")]
    assert recorded[1]["files"] == 1 and len(notes) == 2
    assert notes[1] == ("model.head: 'package:own_rerun_models/head.safetensors' is not on this machine: using the "
                        "copy the bundle carries (inputs/model, 1 file(s) with their recorded sha256)")
    assert all(v["outputs"] == "identical" for v in result["comparison"]["variants"].values())
    new_files = json.loads((tmp_path / "second" / "campaign.json").read_text())["model"]["files"]
    assert new_files == json.loads((restored / "campaign.json").read_text())["model"]["files"]


def test_a_stand_in_holds_for_its_own_protocol_file_and_only_within_its_block(tmp_path):
    from iteralab.plan.paths import resolve, stand_ins

    here, other = tmp_path / "a" / "protocol.toml", tmp_path / "b" / "protocol.toml"
    with stand_ins(here, {"/nowhere/model": tmp_path / "copy"}):
        assert resolve(here, "/nowhere/model") == tmp_path / "copy"
        assert resolve(other, "/nowhere/model") == Path("/nowhere/model")
        assert resolve(here, "model") == here.parent / "model"
    assert resolve(here, "/nowhere/model") == Path("/nowhere/model")
