"""Device resolution, synchronized timing with a fake clock, peak-memory counters and the inventory."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from fakecuda import FakeCuda, cards
from iteralab.models import device as dev
from iteralab.errors import WorkloadError

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)
LINUX_PROC = Path("/proc/self/status").exists()


def _fake_gpu(monkeypatch, count: int = 2, **card) -> FakeCuda:
    """``count`` cards through the faithful fake (tests/support/fakecuda.py), every card visible."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return FakeCuda(cards=cards(count, **card), block=4_096).install(monkeypatch)


# ------------------------------------------------------------------------------------------ resolve_device


def test_resolve_cpu_and_auto_without_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dev.resolve_device("cpu") == CPU
    assert dev.resolve_device("auto") == CPU
    assert dev.resolve_device(CPU) == CPU


def test_resolve_refuses_unavailable_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(WorkloadError, match="sees no GPU") as info:
        dev.resolve_device("cuda")
    assert info.value.hint


def test_resolve_gpu_index(monkeypatch):
    _fake_gpu(monkeypatch, count=2)
    assert dev.resolve_device("auto") == CUDA0
    assert dev.resolve_device("cuda") == CUDA0
    assert dev.resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(WorkloadError, match="sees 2 GPU"):
        dev.resolve_device("cuda:3")


@pytest.mark.parametrize("name", ["gpu", "mps", "cuda:x"])
def test_resolve_refuses_other_names(name):
    with pytest.raises(WorkloadError, match="device"):
        dev.resolve_device(name)


# ------------------------------------------------------------------------------------------ synchronize / timing


def test_synchronize_cpu_is_a_no_op_and_cuda_calls_torch(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: calls.append(d))
    dev.synchronize(CPU)
    assert calls == []
    dev.synchronize(CUDA0)
    assert calls == [CUDA0]


class FakeClock:
    def __init__(self, events: list[str], ticks: list[float]) -> None:
        self.events = events
        self.ticks = list(ticks)

    def now(self) -> float:
        self.events.append("now")
        return self.ticks.pop(0)


def test_timed_synchronizes_before_start_and_before_stop(monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(dev, "synchronize", lambda d: events.append(f"sync:{d}"))
    clock = FakeClock(events, [10.0, 12.5])
    with dev.timed(CUDA0, clock) as timing:
        events.append("work")
        assert timing.seconds is None
    assert events == ["sync:cuda:0", "now", "work", "sync:cuda:0", "now"]
    assert (timing.start, timing.stop, timing.seconds, timing.completed) == (10.0, 12.5, 2.5, True)


def test_timed_failure_has_no_duration_and_does_not_sync_a_broken_device(monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(dev, "synchronize", lambda d: events.append("sync"))
    clock = FakeClock(events, [1.0, 4.0])
    with pytest.raises(RuntimeError, match="boom"):
        with dev.timed(CUDA0, clock) as timing:
            raise RuntimeError("boom")
    assert events == ["sync", "now", "now"]
    assert timing.completed is False and timing.seconds is None and timing.stop == 4.0


def test_time_call_returns_result_and_seconds():
    clock = FakeClock([], [0.25, 1.0])
    result, seconds = dev.time_call(CPU, lambda: "done", clock)
    assert result == "done" and seconds == 0.75


def test_perf_clock_is_monotonic():
    clock = dev.PerfClock()
    a, b = clock.now(), clock.now()
    assert b >= a


# ------------------------------------------------------------------------------------------ CPU memory


@pytest.mark.skipif(not LINUX_PROC, reason="VmHWM is read from /proc/self/status (Linux)")
def test_cpu_peak_is_a_positive_int_and_reset_is_reported():
    scope = dev.reset_peaks(CPU)
    first = dev.read_peaks(CPU)
    assert set(first) == {"cpu_peak_rss_bytes", "scope", "reason"}
    assert isinstance(first["cpu_peak_rss_bytes"], int) and first["cpu_peak_rss_bytes"] > 0
    assert first["reason"] is None and first["scope"] == scope
    block = np.ones(64 * 1024 * 1024 // 8)  # 64 MiB, touched
    grown = dev.read_peaks(CPU)["cpu_peak_rss_bytes"]
    assert grown >= first["cpu_peak_rss_bytes"] + 48 * 1024 * 1024
    del block
    scope = dev.reset_peaks(CPU)
    after = dev.read_peaks(CPU)["cpu_peak_rss_bytes"]
    if scope == dev.CPU_SCOPE_RESET:
        assert after < grown  # the 64 MiB peak is gone from the new window
    else:
        assert "since process start" in scope and after >= grown


def test_cpu_reset_not_permitted_is_said(monkeypatch, tmp_path):
    if not LINUX_PROC:
        pytest.skip("needs /proc/self/status")
    monkeypatch.setattr(dev, "_PROC_CLEAR_REFS", tmp_path / "no-such-dir" / "clear_refs")
    scope = dev.reset_peaks(CPU)
    assert scope.startswith("process peak RSS (VmHWM) since process start (reset not permitted")
    peaks = dev.read_peaks(CPU)
    assert peaks["scope"] == scope and peaks["cpu_peak_rss_bytes"] > 0


def test_cpu_reset_ignored_by_kernel_is_said(monkeypatch, tmp_path):
    readings = iter([{"VmHWM": 1000, "VmRSS": 400}, {"VmHWM": 1000, "VmRSS": 400}])
    monkeypatch.setattr(dev, "_proc_status_kib", lambda *fields: next(readings))
    monkeypatch.setattr(dev, "_PROC_CLEAR_REFS", tmp_path / "clear_refs")  # writable, but changes nothing
    assert "reset not honoured" in dev.reset_peaks(CPU)


def test_cpu_peak_without_proc_is_none_with_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(dev, "_PROC_STATUS", tmp_path / "missing-status")
    peaks = dev.read_peaks(CPU)
    assert peaks["cpu_peak_rss_bytes"] is None and "not measured" in peaks["reason"]
    assert "not available" in dev.reset_peaks(CPU)


def test_cpu_scope_before_any_reset_says_so(monkeypatch):
    if not LINUX_PROC:
        pytest.skip("needs /proc/self/status")
    monkeypatch.setattr(dev, "_reset_scopes", {})
    assert dev.read_peaks(CPU)["scope"] == dev.CPU_SCOPE_NO_RESET


# ------------------------------------------------------------------------------------------ CUDA memory (mocked)


def test_cuda_counters_are_read_separately_never_summed(monkeypatch):
    monkeypatch.setattr(dev, "_reset_scopes", {})
    fake = _fake_gpu(monkeypatch, count=1)
    calls = fake.calls
    fake.allocate(9_000, CUDA0)  # before the reset: not in the new window
    before = dev.read_peaks(CUDA0)
    assert "since process start" in before["scope"] and before["cuda_max_allocated_bytes"] == 9_000
    calls.clear()
    dev.reset_peaks(CUDA0)
    assert calls[:2] == ["synchronize cuda:0", "reset_peak_memory_stats cuda:0"]
    fake.allocate(1_000, CUDA0)
    peaks = dev.read_peaks(CUDA0)
    assert peaks == {
        "cuda_max_allocated_bytes": 1_000,
        "cuda_max_reserved_bytes": 12_288,  # the blocks the earlier 9,000 bytes reserved stay cached
        "scope": "torch.cuda max_memory_allocated/max_memory_reserved since reset, device cuda:0",
        "reason": None,
    }
    assert 13_288 not in peaks.values()
    assert calls[-3] == "synchronize cuda:0"  # pending kernels finish before the counters are read


# ------------------------------------------------------------------------------------------ inventory


def test_inventory_on_this_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    inv = dev.device_inventory()
    assert inv["backend"] == "cpu" and inv["gpus"] == [] and inv["gpu_count"] == 0
    assert inv["driver_version"] is None and inv["driver_version_reason"] == "no GPU visible to torch"
    assert inv["torch"] == torch.__version__ and inv["torch_cuda"] == torch.version.cuda
    assert inv["cpu"]["logical_cores"] >= 1 and inv["cpu"]["torch_threads"] == torch.get_num_threads()
    assert inv["cpu"]["model"] or inv["cpu"]["model_reason"]


def test_inventory_nvidia_with_nvml(monkeypatch):
    _fake_gpu(monkeypatch, count=1)
    fake = types.SimpleNamespace(NVMLError=RuntimeError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                                 nvmlSystemGetDriverVersion=lambda: b"570.86.15",
                                 nvmlSystemGetCudaDriverVersion_v2=lambda: 12080)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inv = dev.device_inventory()
    assert inv["backend"] == "cuda" and inv["gpu_count"] == 1
    assert inv["gpus"][0] == {"index": 0, "name": "NVIDIA H200", "total_memory_bytes": 150_000_000_000,
                              "compute_capability": "9.0", "multi_processor_count": 132}
    assert inv["driver_version"] == "570.86.15" and inv["driver_version_reason"] is None
    assert inv["cuda_driver_api_version"] == "12.8" and inv["cuda_driver_api_version_reason"] is None
    assert inv["torch_cuda"] == torch.version.cuda  # the runtime torch was built with, beside the driver's
    assert inv["rocm"] == {"verdict": "not applicable", "reason": "not a ROCm runtime (torch.version.hip is None)"}


def test_inventory_nvml_error_on_one_field_keeps_the_other(monkeypatch):
    _fake_gpu(monkeypatch, count=1)

    class NVMLError(Exception):
        pass

    def no_cuda():
        raise NVMLError("Not Supported")

    fake = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                                 nvmlSystemGetDriverVersion=lambda: "575.51.03",
                                 nvmlSystemGetCudaDriverVersion_v2=no_cuda)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inv = dev.device_inventory()
    assert inv["driver_version"] == "575.51.03"
    assert inv["cuda_driver_api_version"] is None
    assert inv["cuda_driver_api_version_reason"] == "NVML could not read the CUDA driver version: Not Supported"


def test_inventory_nvidia_without_nvml_says_why(monkeypatch):
    _fake_gpu(monkeypatch, count=1)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    inv = dev.device_inventory()
    assert inv["driver_version"] is None and "nvidia-ml-py" in inv["driver_version_reason"]
    assert inv["cuda_driver_api_version"] is None and "nvidia-ml-py" in inv["cuda_driver_api_version_reason"]


def test_inventory_rocm_records_gcn_arch(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeCuda(cards=cards(1, name="AMD Instinct MI300X", gcn_arch="gfx942:sramecc+:xnack-"),
             hip="6.2.41133").install(monkeypatch)
    inv = dev.device_inventory()
    assert inv["backend"] == "rocm" and inv["torch_hip"] == "6.2.41133"
    assert inv["gpus"][0]["gcn_arch_name"] == "gfx942:sramecc+:xnack-"
    assert inv["driver_version"] is None and "ROCm" in inv["driver_version_reason"]
