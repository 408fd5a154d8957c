"""``iteralab rocm-check`` (C4): one line per fact with its verdict, the snapshot named; exit 0 only when every
fact is listed, 1 for not listed / no snapshot entry, 2 with one error line for a question that cannot be asked."""

from __future__ import annotations

import json

import pytest

from iteralab.cli import main

SNAP = "compatibility-matrix-historical-6.0@7.2.0.csv"


def test_cli_all_listed_exits_0_one_line_per_fact(capsys):
    code = main(["rocm-check", "--os", "Ubuntu 22.04", "--arch", "gfx942", "--rocm", "6.2.0",
                 "--framework", "pytorch=2.3"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line.split(" — ")[0] for line in out] == ["os: Ubuntu 22.04", "arch: gfx942",
                                                      "framework: pytorch=2.3 (PyTorch 2.3)"]
    assert all(f" — listed ({SNAP}, 2026-01-21; ROCm 6.2.0 column: " in line for line in out)
    assert out[2].endswith('ROCm 6.2.0 column: "2.3, 2.2, 2.1, 2.0, 1.13")')


def test_cli_not_listed_exits_1_and_strips_arch_suffixes(capsys):
    code = main(["rocm-check", "--os", "Ubuntu 20.04", "--arch", "gfx942:sramecc+:xnack-", "--rocm", "6.2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0].startswith("os: Ubuntu 20.04 — not listed (")
    assert out[1].startswith("arch: gfx942:sramecc+:xnack- (gfx942) — listed (")


def test_cli_release_in_no_snapshot_exits_1(capsys):
    code = main(["rocm-check", "--arch", "gfx942", "--rocm", "5.7.1"])
    assert code == 1
    assert capsys.readouterr().out.strip() == ("arch: gfx942 — no snapshot entry (no shipped snapshot has a ROCm "
                                               "5.7.1 column)")


def test_cli_json(capsys):
    code = main(["rocm-check", "--os", "Ubuntu 22.04", "--rocm", "6.2.0", "--framework", "torch=2.9.1", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["exit_code"] == 1 and data["verdict"] == "not listed"
    assert data["snapshot"] == SNAP and data["rocm_column"] == "6.2.0"
    assert [(f["fact"], f["verdict"]) for f in data["facts"]] == [("os", "listed"), ("framework", "not listed")]


@pytest.mark.parametrize("args, error", [
    (["--rocm", "six"], "Error: ROCm version 'six' is not like 6.2.0"),
    (["--rocm", "6.2", "--framework", "caffe=1.0"], "Error: framework 'caffe' is not in any ROCm snapshot"),
    (["--rocm", "6.2", "--arch", "h100"], "Error: GPU architecture 'h100' is not an AMD LLVM target"),
    (["--rocm", "6.2"], "Error: nothing to check"),
])
def test_cli_bad_input_exits_2_with_one_error_line(capsys, args, error):
    code = main(["rocm-check", *args])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[0] == error and err[1].startswith("Hint: ")


