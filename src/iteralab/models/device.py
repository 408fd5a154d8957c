"""The device a pass runs on: resolution, synchronized timing (R4), peak-memory counters (M2), inventory (C3).

Everything here reads the runtime (torch, ``/proc``, ``/etc/os-release``, NVML on NVIDIA, amdsmi on AMD, each
imported only when installed), never the configuration. On ROCm the C4 verdict for what the runtime observed is
part of the inventory. CUDA and ROCm share
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

import psutil

from iteralab.errors import WorkloadError
from iteralab.kit.memoire import reset_cpu_peak
from iteralab.models.lazy import torch  # imported on first use: a callable workload never loads it
from iteralab.models.rocm import RocmCheckError, observed_rocm_verdict, os_name_from_release

T = TypeVar("T")

_PROC_STATUS = Path("/proc/self/status")
_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")
_PROC_CPUINFO = Path("/proc/cpuinfo")
_OS_RELEASE = (Path("/etc/os-release"), Path("/usr/lib/os-release"))


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


def device_error(device: torch.device) -> str | None:
    """After an error in a pass: None when ``device`` still completes its work, else the error it raises. A
    device-side failure (an assert in a kernel, an illegal address) is sticky: every later CUDA call of the process
    raises it, so nothing more is read from the device and the next pass needs a fresh process."""
    if device.type != "cuda":
        return None
    try:
        torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - any error here means the device is unusable in this process
        return f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()[:300]
    return None


def peaks_not_read(device: torch.device, why: str) -> dict[str, Any]:
    """The peak record of a device that could not be read (:func:`read_peaks`' keys, every value None)."""
    keys = ("cuda_max_allocated_bytes", "cuda_max_reserved_bytes") if device.type == "cuda" else ("cpu_peak_rss_bytes",)
    return {**dict.fromkeys(keys), "scope": None, "reason": f"not measured: {why}"}


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


GPU_SCOPE_LABEL = ("GPU stream time between CUDA events recorded just inside the measured pass's synchronized "
                   "boundaries: device-side time only, never a pass time (R3)")


class GpuEvents:
    """An optional GPU-side scope (R4): a pair of CUDA events recorded inside a host-timed region.

    The events are created before the timed region (``GpuEvents(device)``); ``record_start``/``record_stop``
    are called inside it; :meth:`result` reads ``elapsed_time`` after the region's closing synchronization.
    The value is labelled as a GPU scope and kept apart from pass times: nothing compares it with them.
    On CPU nothing is recorded and the result says why.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._events: tuple[Any, Any] | None = None
        self._started = self._stopped = False
        if device.type == "cuda":
            self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def record_start(self) -> None:
        if self._events is not None:
            self._events[0].record(torch.cuda.current_stream(self.device))
            self._started = True

    def record_stop(self) -> None:
        if self._events is not None and self._started:
            self._events[1].record(torch.cuda.current_stream(self.device))
            self._stopped = True

    def result(self, completed: bool = True) -> dict[str, Any]:
        """``{"label", "seconds", "reason"}``; call after the closing synchronization of the timed region.
        ``completed`` False (the pass failed, maybe at its closing synchronization): the events are not read."""
        if self._events is None:
            return {"label": GPU_SCOPE_LABEL, "seconds": None, "reason": f"not measured: no CUDA events on "
                                                                         f"{self.device.type}"}
        if not self._stopped or not completed:
            return {"label": GPU_SCOPE_LABEL, "seconds": None,
                    "reason": "not measured: the measured pass did not complete"}
        start, stop = self._events
        return {"label": GPU_SCOPE_LABEL, "seconds": float(start.elapsed_time(stop)) / 1000.0, "reason": None}


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
    """Reset VmHWM; return the honest scope of later reads (the kit's counter: one implementation)."""

    return reset_cpu_peak(lambda *fields: _proc_status_kib(*fields), _PROC_CLEAR_REFS)


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
        peaks: dict[str, Any] = {
            "cuda_max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "cuda_max_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "scope": _scope_for(key, f"torch.cuda max_memory_allocated/max_memory_reserved since process "
                                     f"start (no reset requested), device {key}"),
            "reason": None,
        }
        if torch.version.hip:  # a third, device-wide view on ROCm, never merged with the two counters above
            used, why = amdsmi_vram_used()
            peaks["amdsmi_vram_used_bytes"] = used
            peaks["amdsmi_scope"] = ("amdsmi VRAM in use per AMD GPU (whole device, every process; not a peak), "
                                     "read after the pass" if used is not None else f"not measured: {why}")
        return peaks
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


#: CPU instruction-set flags that change inference speed by precision (bf16 runs natively only with
#: avx512_bf16 / amx_bf16; int8 with vnni/amx_int8): named beside every CPU figure.
RELEVANT_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "fma")


def cpu_flags() -> list[str] | None:
    """The relevant flags /proc/cpuinfo lists for this CPU (None where there is no /proc/cpuinfo)."""
    try:
        text = _PROC_CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            present = set(value.split())
            return [f for f in RELEVANT_CPU_FLAGS if f in present]
    return None


#: The flags with which a CPU computes bf16 itself; without them PyTorch converts bf16 through fp32.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def precision_note(precision: str, device: Any) -> str | None:
    """What a pass's row must say about its precision on this device: bf16 on a CPU that lacks native bf16
    (``NATIVE_BF16_FLAGS`` absent from /proc/cpuinfo) is emulated, so its time says nothing of a CPU with it."""
    if precision != "bf16" or getattr(device, "type", str(device)) != "cpu":
        return None
    flags = cpu_flags()
    if flags is None or any(f in flags for f in NATIVE_BF16_FLAGS):
        return None
    model, _ = _cpu_model()
    return (f"bf16 is emulated on this CPU ({model or 'model unknown'}: no avx512_bf16 nor amx_bf16 in "
            "/proc/cpuinfo): its time is no guide to a CPU with native bf16")


def _nvml_facts() -> dict[str, Any]:
    """Driver and CUDA driver-API versions through NVML (``nvidia-ml-py``, extra "gpu"), each None + reason when
    they cannot be read. NVML's CUDA version is the newest CUDA the installed driver supports; the CUDA runtime
    PyTorch was built with is ``torch.version.cuda`` (recorded beside it)."""
    facts: dict[str, Any] = {"driver_version": None, "driver_version_reason": None,
                             "cuda_driver_api_version": None, "cuda_driver_api_version_reason": None}
    try:
        import pynvml  # from the nvidia-ml-py package (extra "gpu"); imported only when installed
    except ImportError:
        reason = "pynvml (nvidia-ml-py) not installed: pip install 'iteralab[gpu]'"
        return {**facts, "driver_version_reason": reason, "cuda_driver_api_version_reason": reason}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        reason = f"NVML could not start: {exc}"
        return {**facts, "driver_version_reason": reason, "cuda_driver_api_version_reason": reason}
    try:
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            facts["driver_version"] = version.decode() if isinstance(version, bytes) else str(version)
        except pynvml.NVMLError as exc:
            facts["driver_version_reason"] = f"NVML could not read the driver version: {exc}"
        try:
            read = getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", None) or pynvml.nvmlSystemGetCudaDriverVersion
            number = int(read())  # e.g. 12040 -> "12.4"
            facts["cuda_driver_api_version"] = f"{number // 1000}.{(number % 1000) // 10}"
        except pynvml.NVMLError as exc:
            facts["cuda_driver_api_version_reason"] = f"NVML could not read the CUDA driver version: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return facts


def _amdsmi_facts() -> dict[str, Any]:
    """Per AMD GPU (amdsmi's enumeration order): driver version and VRAM total, through ``amdsmi`` when it is
    installed (it ships with ROCm); ``{"gpus": [], "reason": …}`` otherwise. Only facts that stay fixed during a
    campaign are read here (the manifest is compared pass by pass); VRAM in use is read per pass (read_peaks)."""
    try:
        import amdsmi  # ships with ROCm; imported only when present
    except ImportError:
        return {"gpus": [], "reason": "amdsmi not installed (it ships with ROCm: /opt/rocm/share/amd_smi)"}
    try:
        amdsmi.amdsmi_init()
    except amdsmi.AmdSmiException as exc:
        return {"gpus": [], "reason": f"amdsmi could not start: {exc}"}
    gpus: list[dict[str, Any]] = []
    reason = None
    try:
        for i, handle in enumerate(amdsmi.amdsmi_get_processor_handles()):
            driver = amdsmi.amdsmi_get_gpu_driver_info(handle)
            total = amdsmi.amdsmi_get_gpu_memory_total(handle, amdsmi.AmdSmiMemoryType.VRAM)
            gpus.append({"amdsmi_index": i, "driver_version": driver.get("driver_version"),
                         "vram_total_bytes": int(total)})
    except amdsmi.AmdSmiException as exc:
        reason = f"amdsmi could not read a GPU: {exc}"
    finally:
        amdsmi.amdsmi_shut_down()
    return {"gpus": gpus, "reason": reason}


def amdsmi_vram_used() -> tuple[list[int] | None, str | None]:
    """VRAM in use per AMD GPU (whole device, every process), bytes, in amdsmi's order; None + reason without it."""
    try:
        import amdsmi
    except ImportError:
        return None, "amdsmi not installed"
    try:
        amdsmi.amdsmi_init()
    except amdsmi.AmdSmiException as exc:
        return None, f"amdsmi could not start: {exc}"
    try:
        return [int(amdsmi.amdsmi_get_gpu_memory_usage(h, amdsmi.AmdSmiMemoryType.VRAM))
                for h in amdsmi.amdsmi_get_processor_handles()], None
    except amdsmi.AmdSmiException as exc:
        return None, f"amdsmi could not read VRAM usage: {exc}"
    finally:
        amdsmi.amdsmi_shut_down()


def os_release_text() -> str | None:
    """``/etc/os-release`` (or ``/usr/lib/os-release``) as text; None where neither exists."""
    for path in _OS_RELEASE:
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return None


def rocm_facts(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """What a ROCm runtime observed and the C4 verdict for it (``not applicable`` on CUDA or CPU builds).

    Inputs: ``torch.version.hip``; ``torch.version.rocm`` where this torch has it (else the ROCm release is
    derived from HIP, see :func:`iteralab.models.rocm.rocm_from_hip`); the GPUs' ``gcnArchName`` (the first in
    sorted order is looked up, and several targets are said); the OS
    release; the torch version as ``pytorch=X.Y.Z``. A card's name is never used.
    """

    hip = torch.version.hip
    if not hip:
        return {"verdict": "not applicable", "reason": "not a ROCm runtime (torch.version.hip is None)"}
    rocm = getattr(torch.version, "rocm", None)
    archs = sorted({g.get("gcn_arch_name") for g in gpus if g.get("gcn_arch_name")})
    release = os_release_text()
    framework = f"pytorch={torch.__version__.split('+')[0]}"
    observed = {"hip_version": hip, "torch_version_rocm": rocm, "gcn_arch_names": archs,
                "os_release": None if release is None else _pretty_os(release), "framework": framework}
    try:
        verdict = observed_rocm_verdict(hip, rocm, archs[0] if archs else None, release, framework)
    except RocmCheckError as exc:
        verdict = {"verdict": "no snapshot entry", "reason": f"the observed values could not be looked up: {exc}"}
    if len(archs) > 1:
        verdict["reason"] = f"several GPU targets observed ({', '.join(archs)}); only {archs[0]} was looked up"
    return {**verdict, "observed": observed, "amdsmi": _amdsmi_facts()}


def _pretty_os(release: str) -> str:
    return os_name_from_release(release)


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
        reason = "no GPU visible to torch"
        nvml = {"driver_version": None, "driver_version_reason": reason, "cuda_driver_api_version": None,
                "cuda_driver_api_version_reason": reason}
    elif torch.version.hip:
        reason = "ROCm: NVML is NVIDIA-only (amdsmi facts are under rocm)"
        nvml = {"driver_version": None, "driver_version_reason": reason, "cuda_driver_api_version": None,
                "cuda_driver_api_version_reason": reason}
    else:
        nvml = _nvml_facts()
    cpu_model, cpu_reason = _cpu_model()
    return {
        "backend": backend,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
        "cudnn": cudnn,
        "gpu_count": len(gpus),
        "gpus": gpus,
        **nvml,
        "tf32": {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                 "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                 "float32_matmul_precision": torch.get_float32_matmul_precision()},
        "rocm": rocm_facts(gpus) if gpu_available else {"verdict": "not applicable",
                                                        "reason": "no GPU visible to torch"},
        "cpu": {
            "model": cpu_model,
            "model_reason": cpu_reason,
            "logical_cores": os.cpu_count(),
            "relevant_flags": cpu_flags(),
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
        },
    }


# ------------------------------------------------------------------------------------------ other load

#: Other processes' CPU use during a measured pass above this share of the machine's logical cores flags
#: the pass as measured under concurrent load (T5 names concurrent activity as a cause of spread).
CONCURRENT_SHARE = 0.25


def load_snapshot() -> dict[str, float] | None:
    """Machine-wide busy CPU seconds, steal, and this process's own CPU seconds (psutil), or None."""
    try:
        pass
    except ImportError:
        return None
    total = psutil.cpu_times()
    own = psutil.Process().cpu_times()
    busy = total.user + total.system + getattr(total, "nice", 0.0) + getattr(total, "irq", 0.0) + \
        getattr(total, "softirq", 0.0)
    return {"busy_s": busy, "steal_s": getattr(total, "steal", 0.0),
            "own_s": own.user + own.system + getattr(own, "children_user", 0.0) + getattr(own, "children_system", 0.0)}


def concurrent_load(before: dict[str, float] | None, after: dict[str, float] | None,
                    seconds: float | None) -> dict[str, Any] | None:
    """What else used the machine between two snapshots: other processes' CPU seconds (machine busy time
    minus this process's), per second of the region, steal where the kernel reports it, the 1-minute load
    average, and whether it is enough to flag the region (None when not measurable)."""
    if before is None or after is None or not seconds:
        return None
    other = max(0.0, (after["busy_s"] - before["busy_s"]) - (after["own_s"] - before["own_s"]))
    cores = os.cpu_count() or 1
    per_s = other / seconds
    return {"other_cpu_s": round(other, 3), "other_cpu_per_s": round(per_s, 3),
            "steal_s": round(after["steal_s"] - before["steal_s"], 3),
            "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
            "logical_cores": cores, "flagged": per_s > CONCURRENT_SHARE * cores}


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
                    "relevant_flags": cpu_flags(), "torch_threads": None, "torch_interop_threads": None}}
