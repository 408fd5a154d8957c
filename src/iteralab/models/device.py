"""The device a pass runs on: resolution, synchronized timing (R4), peak-memory counters (M2), inventory (C3).

Everything here reads the runtime (torch, ``/proc``, NVML), never the configuration. CUDA and ROCm share
PyTorch's ``cuda`` device type (``torch.version.hip`` tells them apart); every GPU path is guarded by
``device.type == "cuda"`` so the same code runs honestly on a CPU-only machine.

A value that cannot be measured is ``None`` next to a reason string, never 0.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from iteralab.errors import WorkloadError
from iteralab.models.lazy import torch  # imported on first use: a callable workload never loads it

T = TypeVar("T")

_PROC_STATUS = Path("/proc/self/status")
_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")
_PROC_CPUINFO = Path("/proc/cpuinfo")


# --------------------------------------------------------------------------------------------- device


def resolve_device(name: str | torch.device) -> torch.device:
    """``"auto"`` → ``cuda`` if the runtime sees a GPU, else ``cpu``; ``"cpu"``, ``"cuda"``, ``"cuda:N"``.

    ``"cuda"`` resolves to an explicit index (the current device) so that every record names one card.
    A device the runtime cannot see is refused; nothing falls back silently.
    """
    text = str(name).strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise WorkloadError(f"device: {name!r} is not a device name",
                            hint="use 'auto', 'cpu', 'cuda' or 'cuda:N'") from exc
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise WorkloadError(f"device: {name!r} is not supported (type {device.type!r})",
                            hint="use 'auto', 'cpu', 'cuda' or 'cuda:N' (ROCm GPUs are 'cuda' in PyTorch)")
    if not torch.cuda.is_available():
        raise WorkloadError(f"device: {name!r} requested but this PyTorch build sees no GPU "
                            f"(torch {torch.__version__}, CUDA {torch.version.cuda}, HIP {torch.version.hip})",
                            hint="run on a GPU machine with a CUDA/ROCm build of torch, or use device 'cpu'")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if device.index is None else device.index
    if not 0 <= index < count:
        raise WorkloadError(f"device: {name!r} does not exist, the runtime sees {count} GPU(s)",
                            hint=f"use cuda:0 … cuda:{count - 1}")
    return torch.device("cuda", index)


def synchronize(device: torch.device) -> None:
    """Wait for all pending work on ``device`` (CUDA and ROCm); a no-op on CPU, whose work is synchronous."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------------------------- timing


class Clock(Protocol):
    """A monotonic clock in seconds. Injectable so that tests can use a fake one."""

    def now(self) -> float: ...


class PerfClock:
    """The default clock: ``time.perf_counter`` (monotonic, highest available resolution)."""

    def now(self) -> float:
        return time.perf_counter()


PERF_CLOCK = PerfClock()


@dataclass
class Timing:
    """One timed region. ``seconds`` is ``None`` until the region ended normally."""

    start: float | None = None
    stop: float | None = None
    completed: bool = False

    @property
    def seconds(self) -> float | None:
        if not self.completed or self.start is None or self.stop is None:
            return None
        return self.stop - self.start


@contextmanager
def timed(device: torch.device, clock: Clock = PERF_CLOCK) -> Iterator[Timing]:
    """Time the body with device synchronization at both boundaries (R4).

    Order: synchronize → read start → body → synchronize → read stop. Nothing else happens inside
    (no logging, no hashing). If the body raises, ``stop`` is read without synchronizing (the device may be
    unusable after the error), ``completed`` stays False, ``seconds`` is None, and the error propagates.
    """
    timing = Timing()
    synchronize(device)
    timing.start = clock.now()
    try:
        yield timing
    except BaseException:
        timing.stop = clock.now()
        raise
    synchronize(device)
    timing.stop = clock.now()
    timing.completed = True


def time_call(device: torch.device, fn: Callable[[], T], clock: Clock = PERF_CLOCK) -> tuple[T, float]:
    """Run ``fn()`` inside :func:`timed`; return its result and the synchronized elapsed seconds."""
    with timed(device, clock) as timing:
        result = fn()
    assert timing.seconds is not None
    return result, timing.seconds


# --------------------------------------------------------------------------------------------- memory

# What the last reset_peaks() achieved, per device key ("cpu", "cuda:0"): (pid, scope text).
_reset_scopes: dict[str, tuple[int, str]] = {}

CPU_SCOPE_RESET = "process peak RSS (VmHWM) since reset"
CPU_SCOPE_NO_RESET = "process peak RSS (VmHWM) since process start (no reset requested)"


def _device_key(device: torch.device) -> str:
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        return f"cuda:{index}"
    return device.type


def _proc_status_kib(*fields: str) -> dict[str, int] | None:
    """Selected ``kB`` fields of ``/proc/self/status`` (Linux), or None where the file does not exist."""
    try:
        text = _PROC_STATUS.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in fields:
            values[key] = int(rest.split()[0])
    return values


def _reset_cpu_peak() -> str:
    """Reset VmHWM by writing ``5`` to ``/proc/self/clear_refs``; return the honest scope of later reads."""
    before = _proc_status_kib("VmHWM", "VmRSS")
    if before is None or "VmHWM" not in before:
        return "process peak RSS: not available on this platform (no VmHWM in /proc/self/status)"
    try:
        with open(_PROC_CLEAR_REFS, "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError as exc:
        return f"process peak RSS (VmHWM) since process start (reset not permitted: {exc.strerror or exc})"
    after = _proc_status_kib("VmHWM", "VmRSS") or {}
    # A kernel that accepted the write but ignored it keeps an old peak that is above the current RSS.
    if before["VmHWM"] > before.get("VmRSS", 0) and after.get("VmHWM") == before["VmHWM"]:
        return "process peak RSS (VmHWM) since process start (reset not honoured by this kernel)"
    return CPU_SCOPE_RESET


def reset_peaks(device: torch.device) -> str:
    """Start a new peak-memory window on ``device``; return the scope that :func:`read_peaks` will report.

    CUDA/ROCm: ``torch.cuda.reset_peak_memory_stats``. CPU: reset the process high-water mark (VmHWM) when
    the kernel allows it; when it does not, the scope says so instead of pretending.
    """
    key = _device_key(device)
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        scope = f"torch.cuda max_memory_allocated/max_memory_reserved since reset, device {key}"
    else:
        scope = _reset_cpu_peak()
    _reset_scopes[key] = (os.getpid(), scope)
    return scope


def _scope_for(key: str, default: str) -> str:
    pid, scope = _reset_scopes.get(key, (None, default))
    return scope if pid == os.getpid() else default


def read_peaks(device: torch.device) -> dict[str, Any]:
    """Peak memory of ``device`` since the last :func:`reset_peaks`, with the counter's scope and a reason.

    CUDA: ``{"cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "scope", "reason"}`` — two separate
    counters whose peaks may occur at different moments; they are never summed.
    CPU: ``{"cpu_peak_rss_bytes", "scope", "reason"}`` — the whole process's peak resident set.
    ``reason`` is None when every value was measured; a value that could not be measured is None.
    """
    key = _device_key(device)
    if device.type == "cuda":
        synchronize(device)
        return {
            "cuda_max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "cuda_max_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "scope": _scope_for(key, f"torch.cuda max_memory_allocated/max_memory_reserved since process "
                                     f"start (no reset requested), device {key}"),
            "reason": None,
        }
    status = _proc_status_kib("VmHWM")
    if not status or "VmHWM" not in status:
        return {"cpu_peak_rss_bytes": None, "scope": "process peak RSS",
                "reason": "not measured: /proc/self/status has no VmHWM on this platform"}
    return {"cpu_peak_rss_bytes": status["VmHWM"] * 1024, "scope": _scope_for(key, CPU_SCOPE_NO_RESET),
            "reason": None}


# --------------------------------------------------------------------------------------------- inventory


def _cpu_model() -> tuple[str | None, str | None]:
    try:
        text = _PROC_CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for field in ("model name", "Hardware", "Processor", "cpu model", "uarch"):
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == field and value.strip():
                return value.strip(), None
    fallback = platform.processor()
    if fallback:
        return fallback, None
    return None, "CPU model not found in /proc/cpuinfo nor platform.processor()"


def _nvidia_driver() -> tuple[str | None, str | None]:
    try:
        import pynvml  # from the nvidia-ml-py package (extra "gpu")
    except ImportError:
        return None, "pynvml (nvidia-ml-py) not installed: pip install 'iteralab[gpu]'"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML could not start: {exc}"
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError as exc:
        return None, f"NVML could not read the driver version: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return (version.decode() if isinstance(version, bytes) else str(version)), None


def _gpu(index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    info: dict[str, Any] = {
        "index": index,
        "name": props.name,
        "total_memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "multi_processor_count": int(getattr(props, "multi_processor_count", 0)) or None,
    }
    if torch.version.hip:
        info["gcn_arch_name"] = getattr(props, "gcnArchName", None) or None
    return info


def device_inventory() -> dict[str, Any]:
    """What the runtime actually offers (C3): backend, versions, GPUs, driver, host CPU. JSON-ready."""
    gpu_available = torch.cuda.is_available()
    if gpu_available:
        backend = "rocm" if torch.version.hip else "cuda"
    else:
        backend = "cpu"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    gpus = [_gpu(i) for i in range(torch.cuda.device_count())] if gpu_available else []
    if not gpu_available:
        driver, driver_reason = None, "no GPU visible to torch"
    elif torch.version.hip:
        driver, driver_reason = None, "ROCm: the driver version is not read (NVML is NVIDIA-only)"
    else:
        driver, driver_reason = _nvidia_driver()
    cpu_model, cpu_reason = _cpu_model()
    return {
        "backend": backend,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
        "cudnn": cudnn,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "driver_version": driver,
        "driver_version_reason": driver_reason,
        "cpu": {
            "model": cpu_model,
            "model_reason": cpu_reason,
            "logical_cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
        },
    }


# ------------------------------------------------------------------------------------ host-only workloads


@dataclass(frozen=True)
class HostDevice:
    """The harness's device when the workload owns its own (a Python callable): the host CPU, named without
    importing torch. It has what timing and memory reads look at (``type``, ``index``)."""

    type: str = "cpu"
    index: None = None

    def __str__(self) -> str:
        return "cpu"


HOST = HostDevice()


def host_inventory() -> dict[str, Any]:
    """:func:`device_inventory` for a process that did not import torch: the host CPU; the runtime's fields
    are None with the reason."""
    cpu_model, cpu_reason = _cpu_model()
    reason = "torch not imported: the workload (a Python callable) owns its model and device"
    return {"backend": "cpu", "torch": None, "torch_cuda": None, "torch_hip": None, "cudnn": None, "gpu_count": 0,
            "gpus": [], "driver_version": None, "driver_version_reason": reason, "runtime_reason": reason,
            "cpu": {"model": cpu_model, "model_reason": cpu_reason, "logical_cores": os.cpu_count(),
                    "torch_threads": None, "torch_interop_threads": None}}
