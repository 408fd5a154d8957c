"""C4 in a campaign: on a faked ROCm runtime the manifest, the raw table's notes and the decision note carry the
verdict for what the runtime observed (HIP version, gcnArchName, OS release, torch version); a CPU campaign says
"not applicable" and adds no note."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import fake_models
from campaign_factory import callable_campaign
from fakecuda import Card, FakeCuda
from iteralab.campaign.folder import CampaignFolder
from iteralab.campaign.manifest import rocm_compatibility, rocm_compatibility_line
from iteralab.decision.note import render_decision
from iteralab.decision.rule import decide
from iteralab.evidence.run import run_campaign
from iteralab.models import device as dev

SNAP = "compatibility-matrix-historical-6.0@7.2.0.csv"


# ---------------------------------------------------------------------------------- faked ROCm runtime


def fake_rocm(monkeypatch, tmp_path, os_release: str, arch: str = "gfx942:sramecc+:xnack-") -> FakeCuda:
    """torch sees one MI300X through a ROCm 6.2 build; the passes themselves run on the declared CPU."""
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    card = Card(name="AMD Instinct MI300X", total_memory=205_822_885_888, major=9, minor=4,
                multi_processor_count=304, gcn_arch=arch)
    fake = FakeCuda(cards=(card,), hip="6.2.41133-dd7f95766", block=4_096).install(monkeypatch)
    monkeypatch.delattr(torch.version, "rocm", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.3.1+rocm6.2")
    release = tmp_path / "os-release"
    release.write_text(os_release, encoding="utf-8")
    monkeypatch.setattr(dev, "_OS_RELEASE", (release,))
    amd = types.SimpleNamespace(
        AmdSmiException=RuntimeError, AmdSmiMemoryType=types.SimpleNamespace(VRAM="VRAM"),
        amdsmi_init=lambda: None, amdsmi_shut_down=lambda: None, amdsmi_get_processor_handles=lambda: ["h0"],
        amdsmi_get_gpu_driver_info=lambda h: {"driver_name": "amdgpu", "driver_version": "6.8.5"},
        amdsmi_get_gpu_memory_total=lambda h, kind: 205_822_885_888)
    monkeypatch.setitem(sys.modules, "amdsmi", amd)
    return fake


UBUNTU_2204 = 'NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n'
UBUNTU_2004 = 'NAME="Ubuntu"\nVERSION_ID="20.04"\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n'


@pytest.fixture(autouse=True)
def _reset_calls():
    fake_models.CALLS.clear()


def test_inventory_on_faked_rocm_records_observed_values_and_verdict(monkeypatch, tmp_path):
    fake_rocm(monkeypatch, tmp_path, UBUNTU_2204)
    rocm = dev.device_inventory()["rocm"]
    assert rocm["observed"] == {"hip_version": "6.2.41133-dd7f95766", "torch_version_rocm": None,
                                "gcn_arch_names": ["gfx942:sramecc+:xnack-"], "os_release": "Ubuntu 22.04.4 LTS",
                                "framework": "pytorch=2.3.1"}
    assert (rocm["verdict"], rocm["rocm_column"], rocm["rocm_source"]) == ("listed", "6.2.0", "hip_version")
    assert rocm["snapshot"] == SNAP and rocm["snapshot_date"] == "2026-01-21"
    assert [(f["fact"], f["key"], f["verdict"]) for f in rocm["facts"]] == [
        ("os", "Ubuntu 22.04.4", "listed"), ("arch", "gfx942", "listed"), ("framework", "PyTorch 2.3.1", "listed")]
    assert rocm["amdsmi"] == {"gpus": [{"amdsmi_index": 0, "driver_version": "6.8.5",
                                        "vram_total_bytes": 205_822_885_888}], "reason": None}


def test_torch_version_rocm_wins_over_hip_where_present(monkeypatch, tmp_path):
    fake_rocm(monkeypatch, tmp_path, UBUNTU_2204)
    monkeypatch.setattr(torch.version, "rocm", "6.1.2", raising=False)
    rocm = dev.device_inventory()["rocm"]
    assert (rocm["rocm_column"], rocm["rocm_source"]) == ("6.1.2", "rocm_version")


def test_campaign_on_faked_rocm_carries_the_verdict_everywhere(monkeypatch, tmp_path):
    fake_rocm(monkeypatch, tmp_path, UBUNTU_2004)
    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path), out)
    folder = CampaignFolder.open(out)
    c4 = rocm_compatibility(folder.manifest)
    assert c4["verdict"] == "not listed"
    line = rocm_compatibility_line(folder.manifest)
    assert line == (f"C4 ROCm 6.2.0 matrix ({SNAP}, 2026-01-21): not listed: os Ubuntu 20.04.6 not listed; "
                    "arch gfx942 listed; framework PyTorch 2.3.1 listed")
    rows = folder.raw_rows()
    assert rows and all(r.status == "ok" and line in r.notes for r in rows)  # still measured, verdict beside it
    note = render_decision(decide([out]))
    assert f"hardware observed AMD Instinct MI300X; {line}" in note
    assert "(C4 ROCm matrix: not listed)" in note  # beside each configuration's price


def test_cpu_campaign_says_not_applicable_and_adds_no_note(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path), out)
    folder = CampaignFolder.open(out)
    assert rocm_compatibility(folder.manifest) == {"verdict": "not applicable", "reason": "no GPU visible to torch"}
    assert rocm_compatibility_line(folder.manifest) is None
    assert not any("C4" in r.notes for r in folder.raw_rows())
    assert "C4" not in render_decision(decide([out]))


def test_rocm_pass_memory_adds_amdsmi_vram_beside_the_two_torch_counters(monkeypatch, tmp_path):
    fake = fake_rocm(monkeypatch, tmp_path, UBUNTU_2204)
    sys.modules["amdsmi"].amdsmi_get_gpu_memory_usage = lambda h, kind: 3_221_225_472
    torch.cuda.set_device(0)
    dev.reset_peaks(torch.device("cuda", 0))
    fake.allocate(1_000, "cuda:0")
    peaks = dev.read_peaks(torch.device("cuda", 0))
    assert (peaks["cuda_max_allocated_bytes"], peaks["cuda_max_reserved_bytes"]) == (1_000, 4_096)
    assert peaks["amdsmi_vram_used_bytes"] == [3_221_225_472]
    assert peaks["amdsmi_scope"].startswith("amdsmi VRAM in use per AMD GPU (whole device, every process; not a peak)")
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    peaks = dev.read_peaks(torch.device("cuda", 0))
    assert peaks["amdsmi_vram_used_bytes"] is None and peaks["amdsmi_scope"] == "not measured: amdsmi not installed"
