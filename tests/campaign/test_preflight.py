"""Preflight: mistakes knowable before the first timed pass are refused before it (one line, nothing run,
nothing journaled); variants this machine cannot run are reported, and recorded as failed rows only when
the user runs anyway."""

import torch

import pytest

import fake_models
from campaign_factory import callable_campaign, write_corpus_csv
from conftest import TINY_CLASSES
from iteralab.campaign.folder import CampaignFolder
from iteralab.cli import main
from protocol_factory import VARIANTS, write_protocol
from iteralab.plan.lockfile import lock

GPU_VARIANT = VARIANTS + '\n[[variants]]\nname = "g4"\nbatch_size = 4\ndevice = "cuda"\n'


@pytest.fixture(autouse=True)
def _reset_calls():
    fake_models.CALLS.clear()


def test_classes_in_another_order_than_the_head_are_refused_before_any_pass(tmp_path, tiny_encoder_dir,
                                                                             tiny_head_path, capsys):
    write_corpus_csv(tmp_path)
    reordered = list(reversed(TINY_CLASSES))
    protocol = write_protocol(tmp_path, model=f'kind = "encoder_head"\npath = "{tiny_encoder_dir}"\n'
                                             f'head = "{tiny_head_path}"')
    text = protocol.read_text(encoding="utf-8").replace('classes = ["plot", "fresh", "rotten"]',
                                                        f"classes = {reordered!r}".replace("'", '"'))
    protocol.write_text(text, encoding="utf-8")
    lock(protocol)
    out = tmp_path / "out"
    assert main(["run", str(protocol), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"Error: classes: the protocol declares {reordered} but the head {tiny_head_path} holds " \
           f"{list(TINY_CLASSES)}" in err
    assert not out.exists()  # nothing run, nothing written, nothing journaled


@pytest.mark.parametrize("kind", ["hf_classifier", "encoder_head"])
def test_lock_refuses_classes_in_another_order_than_the_model_before_recording_a_version(
        tmp_path, kind, tiny_classifier_dir, tiny_encoder_dir, tiny_head_path, capsys):
    """What the preflight of ``run`` refuses, ``lock`` refuses first: a lock would cost a protocol version."""
    write_corpus_csv(tmp_path)
    reordered = ["fresh", "plot", "rotten"]
    model = (f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"' if kind == "hf_classifier" else
             f'kind = "encoder_head"\npath = "{tiny_encoder_dir}"\nhead = "{tiny_head_path}"')
    protocol = write_protocol(tmp_path, model=model)
    text = protocol.read_text(encoding="utf-8").replace('classes = ["plot", "fresh", "rotten"]',
                                                        'classes = ["fresh", "plot", "rotten"]')
    protocol.write_text(text, encoding="utf-8")
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err
    what = "the model's id2label" if kind == "hf_classifier" else f"the head {tiny_head_path}"
    assert f"Error: {protocol}: corpus.classes: the protocol declares {reordered} but {what} is " \
           f"{list(TINY_CLASSES)}" in err
    assert "declare the classes in the model's output order" in err
    assert not (tmp_path / "protocol.toml.lock.json").exists()  # nothing recorded: no version spent


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal cannot be observed")
def test_a_gpu_variant_on_a_cpu_machine_is_reported_then_kept_only_when_asked(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, variants=GPU_VARIANT)
    out = tmp_path / "out"
    assert main(["run", str(protocol), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "g4: not runnable on this machine: device: 'cuda' requested but this PyTorch build sees no GPU" in err
    assert "--keep-unrunnable" in err and not out.exists()

    assert main(["run", str(protocol), "--out", str(out), "--keep-unrunnable"]) == 1
    err = capsys.readouterr().err
    assert "not runnable on this machine, recorded as failed rows: g4 (device: 'cuda' requested" in err
    rows = {r.variant: r for r in CampaignFolder.open(out).raw_rows()}
    assert rows["g4"].status == "failed" and rows["g4"].completed == 0
    assert rows["g4"].error.startswith("not runnable on this machine: device: 'cuda' requested")
    assert rows["b1"].ok and rows["b4"].ok  # the runnable variants ran


def test_fp16_on_cpu_is_not_runnable_here(tmp_path, tiny_classifier_dir, capsys):
    write_corpus_csv(tmp_path)
    variants = VARIANTS + '\n[[variants]]\nname = "h4"\nbatch_size = 4\nprecision = "fp16"\ndevice = "cpu"\n'
    protocol = write_protocol(tmp_path, model=f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"',
                              variants=variants)
    lock(protocol)
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 2
    assert ("h4: not runnable on this machine: precision fp16 is refused on CPU (half-precision matmul is "
            "emulated there)") in capsys.readouterr().err


def test_preflight_of_a_callable_campaign_does_not_import_torch(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import iteralab

    protocol = callable_campaign(tmp_path, passes=1)
    code = ("import sys; from iteralab.plan.lockfile import open_locked; "
            "from iteralab.campaign.preflight import preflight; "
            "preflight(open_locked(sys.argv[1])); print('torch' in sys.modules)")
    # the package under test (not another copy the interpreter may have installed), and the fake models
    source = Path(iteralab.__file__).resolve().parents[1]
    env = {"PYTHONPATH": os.pathsep.join([str(source), str((Path(__file__).resolve().parents[1] / "support"))]), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, str(protocol)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
