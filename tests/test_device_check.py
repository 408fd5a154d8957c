"""``scripts/device_check.py``: its CPU self-test runs the same campaign and checks on the CPU path, and without a
GPU the plain command refuses in one line with exit 2."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_check.py"


def _script():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_refuses_in_one_line_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _script().main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"device_check: refused: no GPU visible to torch {torch.__version__} (CUDA "
                            f"{torch.version.cuda}, HIP {torch.version.hip}); run it on a GPU machine, or use "
                            "--cpu-self-test\n")


def test_cpu_self_test_runs_the_campaign_and_every_check(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    assert _script().main(["--cpu-self-test", "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "device_check (CPU self-test): all 22 checks passed"
    assert "FAIL" not in out
    for line in ("campaign-sdpa r01-p02-bf16-a1: bf16 within the declared bound 0.05 of fp32",
                 "sdpa: manifest attention implementation 'sdpa' as asked",
                 "eager: manifest attention implementation 'eager' as asked",
                 "manifest rocm (C4): \"not applicable\""):
        assert line in out
    assert (tmp_path / "campaign-sdpa" / "raw_table.csv").is_file()
    assert (tmp_path / "campaign-eager" / "manifest.json").is_file()


def test_a_broken_invariant_fails_the_check(monkeypatch, capsys, tmp_path):
    """A bound declared tighter than bf16 rounding can meet fails the bf16 check and names it. Whether the fp32
    eager-vs-SDPA comparison also exceeds 1e-12 depends on the CPU's and the library's kernels (it did on an EPYC
    without avx512_bf16, not on one with it), so it may fail or pass; no other check may fail."""
    module = _script()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setattr(module, "BOUND", 1e-12)  # declared tighter than bf16 rounding can meet
    assert module.main(["--cpu-self-test", "--keep", str(tmp_path)]) == 1
    out = capsys.readouterr().out.rstrip().splitlines()
    summary = re.fullmatch(r"device_check \(CPU self-test\): (\d+) of 22 checks FAILED: (.*)", out[-1])
    assert summary, out[-1]
    failed = summary.group(2).split("; ")
    assert int(summary.group(1)) == len(failed)
    assert re.fullmatch(r"campaign-sdpa r01-p02-bf16-a1: bf16 within the declared bound 1e-12 of fp32 "
                        r"\(max \|dp\| [0-9.e+-]+\)", failed[0]), failed[0]
    bound_checks = re.compile(r"(campaign-(sdpa|eager) r\d\d-p\d\d-bf16-a1: bf16 within the declared bound 1e-12 "
                              r"of fp32 .*|eager and SDPA agree within 1e-12 on the same ids)")
    assert all(bound_checks.fullmatch(check) for check in failed), failed
