"""``scripts/device_check.py``: its CPU self-test runs every check's code path (the GPU parts on the fake CUDA of
tests/support/fakecuda.py: 2 cards for data-parallel, a Ray actor given a GPU) and prints one line per check; a
failing check makes the exit code non-zero; on a GPU machine, a check that does not apply says why; without a GPU the
plain command refuses in one line with exit 2."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fakecuda
from iteralab.campaign.engines.raypass import ray_installed

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device_check.py"


def _script():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _checks(out: str) -> dict[str, tuple[str, str]]:
    """check name -> (status, text) from the script's check lines."""
    lines = re.findall(r"^  \[(ok|FAIL|n/a)\] +([a-z0-9-]+): (.*)$", out, flags=re.MULTILINE)
    return {name: (status, text) for status, name, text in lines}


def test_refuses_in_one_line_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _script().main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"device_check: refused: no GPU visible to torch {torch.__version__} (CUDA "
                            f"{torch.version.cuda}, HIP {torch.version.hip}); run it on a GPU machine, or use "
                            "--cpu-self-test\n")


def test_an_unknown_check_is_refused_in_one_line(capsys):
    module = _script()
    assert module.main(["--cpu-self-test", "--only", "bf16,fp8"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"device_check: refused: --only 'bf16,fp8': unknown check 'fp8'; known: "
                            f"{', '.join(module.CHECKS)}\n")


def test_a_kept_folder_that_is_not_empty_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "campaign-main").mkdir()
    assert _script().main(["--cpu-self-test", "--keep", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"device_check: refused: --keep {tmp_path}: the folder is not empty; give a new folder\n"


@pytest.mark.slow  # the whole self test: over a minute on 2 cores
@pytest.mark.ray  # the self test runs a Ray pass when Ray is installed
def test_cpu_self_test_prints_one_line_per_check_and_exits_0(tmp_path):
    """The command CI and a user run, as a process of its own: every check holds, each on one line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                       if p)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu-self-test", "--keep", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=900)
    checks = _checks(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert list(checks) == list(_script().CHECKS)
    ray_status = "ok" if ray_installed() else "n/a"
    assert {name: status for name, (status, _) in checks.items()} == {
        **dict.fromkeys(_script().CHECKS, "ok"), "ray": ray_status}
    assert re.fullmatch(r"generation fp32 \d+ tok/s, identical to fp32 100%; generation bf16 \d+ tok/s, identical to "
                        r"fp32 \d+%; vLLM callable not run \(vllm not importable here\)", checks["generation"][1]), \
        checks["generation"][1]
    assert re.fullmatch(r"7 local passes, each in a worker process of its own \(\d forked from a template\)",
                        checks["process"][1]), checks["process"][1]
    assert checks["fp16"][1].startswith("refused on CPU by the precision policy")
    assert checks["eager"][1].startswith("1 pass recorded attn_implementation 'eager'; agrees with SDPA")
    assert checks["compile"][1].startswith("1 pass: backend 'inductor', mode None, ")
    uuids = [c.uuid for c in fakecuda.cards(2)]
    assert checks["data-parallel"][1] == f"1 pass over cards ['0', '1'] ({uuids})"
    if ray_installed():
        assert checks["ray"][1] == f"1 pass, one actor on the GPU Ray assigned (['0'], {uuids[0]}), cluster GPUs 1.0"
    else:
        assert checks["ray"][1] == "ray is not installed (pip install iteralab[ray]): no Ray pass"
    applicable = len(checks) - (0 if ray_installed() else 1)
    assert proc.stdout.rstrip().splitlines()[-1] == (f"device_check (CPU self-test): all {applicable} applicable "
                                                     "checks passed" + ("" if ray_installed() else
                                                                        "; not applicable: ray"))
    assert re.search(r"^wall time: \d+ s, models and campaigns included$", proc.stdout, flags=re.MULTILINE)
    for name in ("main", "eager", "fake", "generation"):
        assert (tmp_path / f"campaign-{name}" / "raw_table.csv").is_file()


def test_a_failing_check_makes_the_exit_code_non_zero(monkeypatch, capsys, tmp_path):
    """A bound declared tighter than bf16 rounding can meet fails the bf16 check, names the pass, and exits 1."""
    module = _script()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setattr(module, "BOUND", 1e-12)  # declared tighter than bf16 rounding can meet
    assert module.main(["--cpu-self-test", "--only", "bf16", "--keep", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    status, text = _checks(out)["bf16"]
    assert status == "FAIL"
    assert re.fullmatch(r"main r01-p02-bf16-a1: max \|dp\| [0-9.e+-]+ to fp32, declared bound 1e-12", text), text
    assert out.rstrip().splitlines()[-1] == "device_check (CPU self-test): 1 of 1 applicable checks FAILED: bf16"
    assert not (tmp_path / "campaign-fake").exists()  # --only ran the passes bf16 reads, nothing else


def test_workers_on_one_card_fail_the_data_parallel_check(monkeypatch, capsys, tmp_path):
    """The GPU part of the check can fail too: two fake cards that are one card (the same UUID), as when both
    workers land on the same physical card, fail data-parallel and the exit code is 1."""
    module = _script()
    monkeypatch.setattr(fakecuda, "cards", lambda n: (fakecuda.Card(),) * n)
    assert module.main(["--cpu-self-test", "--only", "data-parallel", "--keep", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    status, text = _checks(out)["data-parallel"]
    assert status == "FAIL"
    same = fakecuda.Card().uuid
    assert text == (f"fake r01-p02-dp2-a1: workers' cards [('{same}', '0'), ('{same}', '1')], want 2 distinct cards "
                    "with UUIDs")
    assert not (tmp_path / "campaign-main").exists()


def test_on_a_gpu_machine_the_plan_follows_the_cards_and_ray(capsys):
    """What a GPU run would run and report, decided before any pass: data-parallel needs 2 cards, the Ray pass
    needs ray; a check that does not apply says why, and does not fail the run."""
    module = _script()
    one_card = module.Machine(self_test=False, gpus=1, ray=False)
    assert one_card.campaigns(module.CHECKS) == {"main": ["fp32", "bf16", "fp16", "compiled"], "eager": ["fp32"]}
    two_cards = module.Machine(self_test=False, gpus=2, ray=True)
    assert two_cards.campaigns(module.CHECKS)["main"] == ["fp32", "bf16", "fp16", "compiled", "dp2", "ray"]
    assert module._report(("data-parallel", "ray"), {}, one_card) == 0
    out = capsys.readouterr().out
    assert _checks(out) == {
        "data-parallel": ("n/a", "one card visible, data-parallel needs 2"),
        "ray": ("n/a", "ray is not installed (pip install iteralab[ray]): no Ray pass")}
    assert out.rstrip().splitlines()[-1] == ("device_check (GPU): no check applies here; not applicable: "
                                             "data-parallel, ray")
    # generation runs a job of its own: without it, its check fails rather than passing on nothing
    assert module._report(("generation",), {}, one_card) == 1
    assert _checks(capsys.readouterr().out)["generation"][0] == "FAIL"


def test_a_precision_the_card_cannot_run_does_not_apply_and_says_why(monkeypatch, capsys):
    """On a card below compute capability 8.0 the product refuses bf16: the check's bf16 line says so, its
    passes are not planned, and fp16 still runs."""
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    fakecuda.FakeCuda(cards=fakecuda.cards(1, name="Tesla T4", major=7, minor=5)).install(monkeypatch)
    module = _script()
    refused = module._refused_here()
    assert list(refused) == ["bf16"] and "compute capability 7.5" in refused["bf16"]
    machine = module.Machine(self_test=False, gpus=1, ray=True, refused=refused)
    assert machine.campaigns(("bf16", "fp16")) == {"main": ["fp32", "fp16"]}
    assert module._report(("bf16",), {}, machine) == 0
    assert _checks(capsys.readouterr().out) == {
        "bf16": ("n/a", f"the product refuses bf16 on this card: {refused['bf16']}")}


def test_the_gpu_run_plans_and_checks_fp16_and_data_parallel_on_fake_cards(monkeypatch, capsys, tmp_path):
    """The plain command (not the self-test) on a machine of 2 fake cards: its GPU protocols lock and run through
    the runner, fp16 is measured rather than refused, and the GPU invariants hold on the fake's timers and peaks.
    The workers run the fake's workload (tests/support/fakecuda.py), which knows no attention or compile: those checks
    are left to the self-test's real model."""
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    fake = fakecuda.FakeCuda(cards=fakecuda.cards(2), ms_per_batch=0.001).install(monkeypatch)
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", fakecuda.worker_path(tmp_path / "site"))
    module = _script()
    monkeypatch.setattr(module, "_sizes", lambda gpu: dict(module.SELF_TEST_SIZES))
    assert module.main(["--only", "fp16,data-parallel,manifest", "--keep", str(tmp_path / "check")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("device_check (GPU): ")
    assert "campaigns main ['fp32', 'fp16', 'dp2']" in out.splitlines()[0]
    checks = _checks(out)
    assert checks["fp16"] == ("ok", "1 pass ok, ids match, timers and memory consistent, within 0.05 of fp32")
    assert checks["manifest"] == ("ok", "backend and GPU count as the runtime says (main cuda x2), no pass differs")
    assert checks["data-parallel"][0] == "ok"
    assert out.rstrip().splitlines()[-1] == "device_check (GPU): all 3 applicable checks passed"

