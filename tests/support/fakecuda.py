"""A fake ``torch.cuda`` that behaves like a real device where the product's GPU paths depend on it.

Kinder fakes (every call succeeds, one card, one global peak) let code pass that a real card breaks. This one holds:

- **sticky errors.** :meth:`FakeCuda.fail` raises ``torch.AcceleratorError`` as a device-side assert or an illegal
  address does, and from then on *every* device call of the process raises the same error, as the CUDA runtime
  does after such an error. The calls that raise (and the product's call sites they cover):

  ===============================================  =====================================================
  ``synchronize``                                  ``models.device.synchronize``/``timed``, ``reset_peaks``,
                                                   ``read_peaks``, the measured pass's clean-up
  ``reset_peak_memory_stats``                      ``models.device.reset_peaks``
  ``max_memory_allocated``/``max_memory_reserved``  ``models.device.read_peaks`` (the peak readers)
  ``memory_stats``/``memory_allocated``/            the memory script of the kit, any reader of the allocator
  ``memory_reserved``/``mem_get_info``
  ``Event.record``/``Event.elapsed_time``          ``models.device.GpuEvents``
  ``get_device_properties``/``get_device_name``/   ``models.device.device_inventory`` (the environment
  ``get_device_capability``/``current_device``/    manifest), ``resolve_device``, the precision policy
  ``set_device``/``current_stream``
  ===============================================  =====================================================

  ``is_available`` and ``device_count`` keep answering (the runtime caches them), as on a real card.
- **visibility.** ``device_count()`` and the index → card mapping follow ``CUDA_VISIBLE_DEVICES`` on a CUDA build, and
  ``ROCR_VISIBLE_DEVICES`` then ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP also reads) on a
  ROCm build (``hip`` set), read from the environment at each call: indices or card UUIDs, a list cut at its
  first unknown entry, an empty variable hiding every card.
- **per-process peaks.** Allocations (:meth:`FakeCuda.allocate`) and their peaks are kept per process id and per
  card: a forked or fresh worker starts at zero, and a reset is that process's alone.
- **events.** ``Event.elapsed_time`` raises unless both events were recorded and completed, and an event recorded
  on the stream completes only at the next ``synchronize`` (or its own ``synchronize``).

``FakeCuda(...).install(monkeypatch)`` patches ``torch.cuda`` (and ``torch.version.hip``) in this process.
A worker process (a fresh interpreter, a forked pass, a data-parallel worker) gets the same fake through
:func:`site_dir`: a folder holding a ``sitecustomize`` that calls :func:`install_from_env`, put on the worker's
``PYTHONPATH``, with the fake's settings in the ``FAKECUDA`` environment variable (:meth:`FakeCuda.env`). There the
model factory is replaced too (:class:`FakeGpuWorkload`), since no real model can be moved to a fake card.
"""

from __future__ import annotations

import json
import os
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DEVICE_ASSERT = "CUDA error: device-side assert triggered"
ENV = "FAKECUDA"


@dataclass(frozen=True)
class Card:
    """One physical card of the fake machine."""

    name: str = "NVIDIA H200"
    total_memory: int = 150_000_000_000
    major: int = 9
    minor: int = 0
    multi_processor_count: int = 132
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    gcn_arch: str | None = None


def cards(n: int, name: str = "NVIDIA H200", **extra: Any) -> tuple[Card, ...]:
    """``n`` cards of one kind, with distinct UUIDs."""
    return tuple(Card(name=name, uuid=f"GPU-{k:08d}-0000-0000-0000-{k:012d}", **extra) for k in range(n))


def _parse(value: str, pool: list[int], by_uuid: dict[str, int]) -> list[int]:
    """A visibility list over ``pool`` (entries are positions in ``pool``, or UUIDs), cut at its first unknown
    entry, as the runtimes do."""
    chosen: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() and int(entry) < len(pool):
            chosen.append(pool[int(entry)])
        elif entry in by_uuid and by_uuid[entry] in pool:
            chosen.append(by_uuid[entry])
        else:
            break
    return chosen


class FakeEvent:
    def __init__(self, fake: FakeCuda, enable_timing: bool = False) -> None:
        self.fake, self.enable_timing = fake, enable_timing
        self.recorded = self.completed = False
        self.at: float | None = None
        self.stream: Any = None
        fake.events.append(self)
        self.label = fake.event_label(len(fake.events))
        fake.log(f"new {self.label}")

    def record(self, stream: Any = None) -> None:
        self.fake.check()
        self.recorded, self.completed, self.stream = True, False, stream
        self.at = self.fake.gpu_ms
        self.fake.pending.append(self)
        self.fake.log(f"record {self.label}")

    def synchronize(self) -> None:
        self.fake.check()
        if self.recorded:
            self.completed = True

    def query(self) -> bool:
        self.fake.check()
        return self.completed

    def elapsed_time(self, other: FakeEvent) -> float:
        self.fake.check()
        if not (self.enable_timing and other.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.recorded and other.recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self.completed and other.completed):
            raise RuntimeError("CUDA error: device not ready")
        self.fake.log(f"elapsed_time {self.label}->{other.label}")
        return float(other.at - self.at)


@dataclass
class FakeCuda:
    """The fake runtime: its cards, the backend (``hip``: a ROCm build's HIP version, None for CUDA), a call log."""

    cards: tuple[Card, ...] = field(default_factory=lambda: cards(1))
    hip: str | None = None
    #: the first device call raises this sticky error (a card that is broken before the process starts)
    broken: str | None = None
    #: GPU milliseconds the stream advances per batch a fake workload runs (what CUDA events measure)
    ms_per_batch: float = 10.0
    #: the allocator's block: reserved memory grows by whole blocks
    block: int = 2 << 20
    #: the name an event has in the call log, from its creation number (1, 2, …)
    event_label: Any = lambda n: f"event{n}"

    def __post_init__(self) -> None:
        self.calls: list[str] = []
        self.peaks: dict[tuple[int, int], list[int]] = {}  # (pid, physical card) -> [alloc, reserved, peak a, peak r]
        self.pending: list[FakeEvent] = []
        self.events: list[FakeEvent] = []
        self.gpu_ms = 0.0
        self.current = 0
        self.listener: Any = None

    # ------------------------------------------------------------------------------------------ state

    def log(self, call: str) -> None:
        self.calls.append(call)
        if self.listener is not None:
            self.listener(call)

    def check(self) -> None:
        if self.broken is not None:
            import torch

            raise torch.AcceleratorError(self.broken)

    def fail(self, message: str = DEVICE_ASSERT) -> None:
        """A device-side failure: raises now, and every later device call of this process raises too."""
        self.broken = message
        self.log(f"FAIL {message}")
        self.check()

    def visible(self) -> list[int]:
        """The physical cards this process sees, in index order, by the backend's visibility variables."""
        pool = list(range(len(self.cards)))
        by_uuid = {c.uuid: k for k, c in enumerate(self.cards)}
        if self.hip is not None:
            rocr = os.environ.get("ROCR_VISIBLE_DEVICES")
            if rocr is not None:
                pool = _parse(rocr, pool, by_uuid)
            hip = os.environ.get("HIP_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
            return _parse(hip, pool, by_uuid) if hip is not None else pool
        declared = os.environ.get("CUDA_VISIBLE_DEVICES")
        return _parse(declared, pool, by_uuid) if declared is not None else pool

    def card(self, device: Any = None) -> int:
        """The physical card of a device argument (None, an index, ``"cuda:N"`` or a torch.device)."""
        self.check()
        if isinstance(device, str):
            index = int(device.split(":")[1]) if ":" in device else None
        else:
            index = getattr(device, "index", device)
        index = self.current if index is None else int(index)
        visible = self.visible()
        if not 0 <= index < len(visible):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return visible[index]

    def _counters(self, device: Any) -> list[int]:
        return self.peaks.setdefault((os.getpid(), self.card(device)), [0, 0, 0, 0])

    def allocate(self, nbytes: int, device: Any = None) -> None:
        """Tensors of ``nbytes`` allocated on a card, then freed: the allocator reserves whole blocks and keeps them
        cached (a later allocation reuses them), so the reserved peak is at least the allocated one."""
        self.check()
        counters = self._counters(device)
        needed = counters[0] + nbytes
        if needed > counters[1]:
            counters[1] = -(-needed // self.block) * self.block
        counters[2] = max(counters[2], needed)
        counters[3] = max(counters[3], counters[1])

    def run_batch(self) -> None:
        """Work on the stream: GPU time passes."""
        self.check()
        self.gpu_ms += self.ms_per_batch

    # ------------------------------------------------------------------------------------------ torch.cuda

    def synchronize(self, device: Any = None) -> None:
        self.check()
        self.log(f"synchronize {device}")
        for event in self.pending:
            event.completed = True
        self.pending.clear()

    def device_count(self) -> int:
        return len(self.visible())

    def current_device(self) -> int:
        self.check()
        return self.current

    def set_device(self, device: Any) -> None:
        self.card(device)
        self.current = int(str(device).split(":")[-1]) if not isinstance(device, int) else device

    def properties(self, device: Any = None) -> Any:
        physical = self.cards[self.card(device)]
        return types.SimpleNamespace(name=physical.name, total_memory=physical.total_memory, major=physical.major,
                                     minor=physical.minor, multi_processor_count=physical.multi_processor_count,
                                     uuid=physical.uuid.removeprefix("GPU-"), pci_bus_id=self.card(device) + 1,
                                     pci_domain_id=0,
                                     **({"gcnArchName": physical.gcn_arch} if self.hip is not None else {}))

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        counters = self._counters(device)
        counters[2], counters[3] = counters[0], counters[1]
        self.log(f"reset_peak_memory_stats {device}")

    def max_memory_allocated(self, device: Any = None) -> int:
        value = self._counters(device)[2]
        self.log("max_memory_allocated")
        return value

    def max_memory_reserved(self, device: Any = None) -> int:
        value = self._counters(device)[3]
        self.log("max_memory_reserved")
        return value

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        alloc, reserved, peak_a, peak_r = self._counters(device)
        return {"allocated_bytes.all.current": alloc, "allocated_bytes.all.peak": peak_a,
                "reserved_bytes.all.current": reserved, "reserved_bytes.all.peak": peak_r}

    def install(self, monkeypatch: Any = None) -> FakeCuda:
        """Patch ``torch.cuda`` with this fake (through ``monkeypatch`` in a test; directly in a worker)."""
        import torch

        patch = monkeypatch.setattr if monkeypatch is not None else setattr
        cuda = torch.cuda
        capability = lambda d=None: (self.properties(d).major, self.properties(d).minor)  # noqa: E731
        for name, value in {
            "is_available": lambda: bool(self.cards), "is_initialized": lambda: True,
            "device_count": self.device_count, "current_device": self.current_device, "set_device": self.set_device,
            "synchronize": self.synchronize, "get_device_properties": self.properties,
            "get_device_name": lambda d=None: self.properties(d).name, "get_device_capability": capability,
            "reset_peak_memory_stats": self.reset_peak_memory_stats,
            "max_memory_allocated": self.max_memory_allocated, "max_memory_reserved": self.max_memory_reserved,
            "memory_stats": self.memory_stats,
            "memory_allocated": lambda d=None: self._counters(d)[0],
            "memory_reserved": lambda d=None: self._counters(d)[1],
            "mem_get_info": lambda d=None: (self.cards[self.card(d)].total_memory - self._counters(d)[1],
                                            self.cards[self.card(d)].total_memory),
            "Event": lambda enable_timing=False, **kw: FakeEvent(self, enable_timing),
            "current_stream": lambda d=None: self.card(d) is not None and f"stream:{d}",
        }.items():
            patch(cuda, name, value)
        patch(torch.version, "hip", self.hip)
        if self.hip is not None:  # amdsmi (it ships with ROCm) lists every physical card, whatever the visibility
            import sys

            (monkeypatch.setitem if monkeypatch is not None else dict.__setitem__)(sys.modules, "amdsmi",
                                                                                  self.amdsmi())
        return self

    def amdsmi(self) -> Any:
        """A fake ``amdsmi`` module over the physical cards (PCI bus k + 1, as :meth:`properties` reports)."""
        handles = [f"card{k}" for k in range(len(self.cards))]

        def card(handle: str) -> Card:
            return self.cards[handles.index(handle)]

        return types.SimpleNamespace(
            AmdSmiException=RuntimeError, AmdSmiMemoryType=types.SimpleNamespace(VRAM="VRAM"),
            amdsmi_init=lambda: None, amdsmi_shut_down=lambda: None, amdsmi_get_processor_handles=lambda: handles,
            amdsmi_get_gpu_device_bdf=lambda h: f"0000:{handles.index(h) + 1:02x}:00.0",
            amdsmi_get_gpu_device_uuid=lambda h: card(h).uuid,
            amdsmi_get_gpu_driver_info=lambda h: {"driver_name": "amdgpu", "driver_version": "6.8.5"},
            amdsmi_get_gpu_memory_total=lambda h, kind: card(h).total_memory,
            amdsmi_get_gpu_memory_usage=lambda h, kind: 0)

    # ------------------------------------------------------------------------------------------ workers

    def env(self, **workload: Any) -> dict[str, str]:
        """The environment variables that give a worker process this fake (a fresh one: new counters), and a
        :class:`FakeGpuWorkload` with ``workload``'s settings (``fail_at``: the batch that fails the card)."""
        return {ENV: json.dumps({"cards": [asdict(c) for c in self.cards], "hip": self.hip, "broken": self.broken,
                                 "ms_per_batch": self.ms_per_batch, "block": self.block,
                                 "workload": workload})}


class FakeGpuWorkload:
    """A workload that runs on the fake card: each batch takes GPU time and memory, and batch ``fail_at`` (counted
    over the process's batches, warm-up included) fails the card with a device-side assert."""

    kind = "hf_classifier"

    def __init__(self, fake: FakeCuda, device: str, classes: list[str], fail_at: int | None = None,
                 batch_bytes: int = 3 << 20) -> None:
        self.fake, self.device, self.classes = fake, device, list(classes)
        self.fail_at, self.batch_bytes, self.batches = fail_at, batch_bytes, 0
        if str(device).startswith("cuda"):
            fake.card(device)  # the model is moved to the card: a broken card fails the load

    def tokenize(self, texts: list[str]) -> dict[str, Any]:
        return {"n": len(texts)}

    def infer(self, encoded: dict[str, Any]) -> np.ndarray:
        self.batches += 1
        if self.batches == self.fail_at and str(self.device).startswith("cuda"):
            self.fake.fail()
        if str(self.device).startswith("cuda"):
            self.fake.run_batch()
            self.fake.allocate(self.batch_bytes * encoded["n"], self.device)
        probs = np.zeros((encoded["n"], len(self.classes)), dtype=np.float32)
        probs[:, 1] = 1.0
        return probs

    def token_lengths(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "device": str(self.device), "attn_implementation": None, "precision": "fp32",
                "compile": {"enabled": False}}

    def file_hashes(self) -> dict[str, str]:
        return {}


def patch_factory(fake: FakeCuda, monkeypatch: Any = None, **workload: Any) -> None:
    """``models.factory.load_workload`` returns a :class:`FakeGpuWorkload` on the fake card."""
    from iteralab.models import factory

    def load(spec: Any) -> FakeGpuWorkload:
        return FakeGpuWorkload(fake, spec.device, list(spec.classes), **workload)

    (monkeypatch.setattr if monkeypatch is not None else setattr)(factory, "load_workload", load)


def install_from_env() -> FakeCuda | None:
    """In a worker process: the fake described by ``FAKECUDA`` (:meth:`FakeCuda.env`), installed with its workload."""
    settings = os.environ.get(ENV)
    if not settings:
        return None
    data = json.loads(settings)
    fake = FakeCuda(cards=tuple(Card(**c) for c in data["cards"]), hip=data["hip"], broken=data["broken"],
                    ms_per_batch=data["ms_per_batch"], block=data["block"]).install()
    patch_factory(fake, **data["workload"])
    return fake


def site_dir(folder: Path) -> Path:
    """A folder whose ``sitecustomize`` installs the fake in every Python process started with it on
    ``PYTHONPATH`` (together with this tests folder) and ``FAKECUDA`` set."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text("import fakecuda\nfakecuda.install_from_env()\n", encoding="utf-8")
    return folder


def worker_path(folder: Path) -> str:
    """``PYTHONPATH`` for worker processes that must run on the fake: its site folder, the tests, the sources."""
    import iteralab

    tests = Path(__file__).resolve().parent
    src = Path(iteralab.__file__).resolve().parents[1]
    return os.pathsep.join(p for p in (str(site_dir(folder)), str(tests), str(src), os.environ.get("PYTHONPATH"))
                           if p)
