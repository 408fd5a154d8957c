"""Which physical cards a process sees, and which one it runs on (X3, C3). Reads the environment's visibility
variables and the runtime (torch, NVML on NVIDIA, amdsmi on AMD, each imported only when installed); writes nothing.

Visibility. A CUDA build reads ``CUDA_VISIBLE_DEVICES``. A ROCm build reads ``ROCR_VISIBLE_DEVICES`` first (the
runtime's own list of physical cards), then ``HIP_VISIBLE_DEVICES`` — or ``CUDA_VISIBLE_DEVICES``, which HIP reads
too — as positions in what ROCR left visible. A data-parallel worker is given one physical card in the variable the
runtime reads first (``CUDA_VISIBLE_DEVICES`` on CUDA, ``ROCR_VISIBLE_DEVICES`` on ROCm, the HIP and CUDA lists then
removed so that they do not index into a one-card list), so the record names the physical card that ran.
"""

from __future__ import annotations

import os
from typing import Any

from iteralab.models.lazy import torch

#: Every variable that decides which cards a CUDA or ROCm process sees.
VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def is_rocm() -> bool:
    """Whether this torch is a ROCm (HIP) build."""
    return bool(torch.version.hip)


def physical_ids(count: int, rocm: bool) -> list[str]:
    """The physical ids (indices or UUIDs, as the variables give them) of the ``count`` cards this process sees, in
    the runtime's index order."""
    if not rocm:
        declared = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = _entries(declared) if declared is not None else [str(i) for i in range(count)]
        return ids[:count]
    rocr = os.environ.get("ROCR_VISIBLE_DEVICES")
    pool = _entries(rocr) if rocr is not None else None
    hip = os.environ.get("HIP_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if hip is None:
        ids = pool if pool is not None else [str(i) for i in range(count)]
    elif pool is None:
        ids = _entries(hip)
    else:  # HIP's entries are positions in ROCR's list
        ids = [pool[int(e)] if e.isdigit() and int(e) < len(pool) else e for e in _entries(hip)]
    return ids[:count]


def one_card_env(physical: str, rocm: bool) -> dict[str, str | None]:
    """The environment that shows a worker exactly the card ``physical`` (None: the variable is removed)."""
    if rocm:
        return {"ROCR_VISIBLE_DEVICES": physical, "HIP_VISIBLE_DEVICES": None, "CUDA_VISIBLE_DEVICES": None}
    return {"CUDA_VISIBLE_DEVICES": physical}


def card_identity(index: int = 0) -> dict[str, Any]:
    """The card behind this process's GPU ``index``: its name, its UUID as NVML (NVIDIA) or amdsmi (AMD) gives it,
    else as the runtime reports it, the source and the visibility variables the process was started with."""
    props = torch.cuda.get_device_properties(index)
    raw = getattr(props, "uuid", None)
    runtime_uuid = None if raw is None else str(raw) if str(raw).startswith("GPU-") else f"GPU-{raw}"
    record: dict[str, Any] = {"index": index, "name": props.name,
                              "visible_devices": {k: os.environ[k] for k in VISIBILITY if k in os.environ}}
    uuid, source, reason = _amdsmi_uuid(props) if is_rocm() else _nvml_uuid(runtime_uuid)
    if uuid is None and runtime_uuid is not None and not is_rocm():
        uuid, source = runtime_uuid, "torch.cuda.get_device_properties().uuid"
    record.update(uuid=uuid, uuid_source=source, uuid_reason=reason)
    return record


def _nvml_uuid(runtime_uuid: str | None) -> tuple[str | None, str | None, str | None]:
    try:
        import pynvml  # nvidia-ml-py (extra "gpu")
    except ImportError:
        return None, None, "pynvml (nvidia-ml-py) not installed: pip install 'iteralab[gpu]'"
    if runtime_uuid is None:
        return None, None, "this torch reports no card UUID to look up in NVML"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, None, f"NVML could not start: {exc}"
    try:
        found = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(runtime_uuid))
        return (found.decode() if isinstance(found, bytes) else str(found)), "nvml", None
    except pynvml.NVMLError as exc:
        return None, None, f"NVML does not know the card {runtime_uuid}: {exc}"
    finally:
        pynvml.nvmlShutdown()


def _amdsmi_uuid(props: Any) -> tuple[str | None, str | None, str | None]:
    """amdsmi enumerates every card: the one whose PCI bus (and domain) torch reports for this process's card."""
    bus, domain = getattr(props, "pci_bus_id", None), getattr(props, "pci_domain_id", 0)
    if bus is None:
        return None, None, "this torch reports no PCI bus id to find the card in amdsmi"
    try:
        import amdsmi  # ships with ROCm
    except ImportError:
        return None, None, "amdsmi not installed (it ships with ROCm)"
    try:
        amdsmi.amdsmi_init()
    except amdsmi.AmdSmiException as exc:
        return None, None, f"amdsmi could not start: {exc}"
    try:
        for handle in amdsmi.amdsmi_get_processor_handles():
            bdf = str(amdsmi.amdsmi_get_gpu_device_bdf(handle))  # "0000:c1:00.0"
            parts = bdf.split(":")
            if len(parts) == 3 and int(parts[1], 16) == int(bus) and int(parts[0], 16) == int(domain or 0):
                return str(amdsmi.amdsmi_get_gpu_device_uuid(handle)), "amdsmi", None
        return None, None, f"amdsmi lists no card on PCI bus {int(bus):02x}"
    except amdsmi.AmdSmiException as exc:
        return None, None, f"amdsmi could not read the card: {exc}"
    finally:
        amdsmi.amdsmi_shut_down()
