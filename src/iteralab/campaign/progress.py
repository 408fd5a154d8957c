"""What a running pass has done so far, for the person waiting on it: documents done, the rate, the projected end
of the pass and of the campaign. Nothing here is evidence: it is read while the campaign runs, never recorded.

A pass's process (a worker, each data-parallel worker, or the runner itself in-process) keeps a *beacon*: a
small file in the campaign's scratch folder (``.tmp/<pass_id>.<pid>.progress``, removed when the run ends), mapped
into memory. After its warm-up the pass writes the warm-up's seconds per document there (outside the measured
region); inside the measured region each batch stores the documents done so far: one 8-byte store into mapped
memory, no system call, no clock reading, nothing that would show in the pass's time.

The runner's :class:`Watch` reads the beacons on its own thread while it waits for the pass. It emits
``estimate`` once, as soon as the first warm-up of the run is over (the campaign's projected duration), and
``progress`` at a steady interval (``every_s``; :data:`PROGRESS_EVERY_S` by default). Its clocks are
injectable and :meth:`Watch.tick` is one reading, so a test drives it with a fake clock and no thread.
A Ray pass keeps no beacon: its progress line says the time elapsed only.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

#: Seconds between two progress events while a pass runs.
PROGRESS_EVERY_S = 30.0
#: Seconds between two readings of the beacons (the estimate is emitted within this of the first warm-up).
POLL_S = 0.5
#: The beacon: documents done (int64), warm-up seconds per document (float64; NaN before the warm-up ends or
#: when the protocol declares none), warmed (int64: 1 once the warm-up is over).
LAYOUT = struct.Struct("<qdq")
SUFFIX = ".progress"



@dataclass(frozen=True)
class Estimate:
    """The ``estimate`` event, once, right after the run's first warm-up: the campaign's projected duration
    (``campaign_s``; None: not projectable), its end as a wall-clock time, and the warm-up's pace it came from."""

    pass_id: str
    variant: str
    passes: int
    documents_per_s: float | None
    campaign_s: float | None
    ends_at: float | None


@dataclass(frozen=True)
class PassProgress:
    """The ``progress`` event of a running pass: documents done (None while it loads and warms up), its rate, the
    projected ends of the pass and of the campaign (seconds left, wall-clock times; None: not projectable yet)."""

    pass_id: str
    variant: str
    done: int | None
    documents: int | None
    documents_per_s: float | None
    elapsed_s: float
    pass_left_s: float | None
    campaign_left_s: float | None
    passes_left: int
    pass_ends_at: float | None
    campaign_ends_at: float | None


#: What the watch calls: ``("estimate", Estimate)`` once, ``("progress", PassProgress)`` at its interval.
Emit = Callable[[str, Estimate | PassProgress], None]


class Beacon:
    """A pass's side: what it has done, in a file mapped into memory (see the module's text)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "wb") as fh:
            fh.write(LAYOUT.pack(0, math.nan, 0))
        with open(path, "r+b") as fh:
            self.memory = mmap.mmap(fh.fileno(), LAYOUT.size)

    @classmethod
    def for_pass(cls, scratch_dir: str | None, pass_id: str) -> Beacon | None:
        """The beacon of this process's part of the pass, in the campaign's scratch folder; None without one (a
        pass run by a test) or where it cannot be written: progress is never worth failing a pass for."""
        if not scratch_dir:
            return None
        try:
            Path(scratch_dir).mkdir(parents=True, exist_ok=True)
            return cls(Path(scratch_dir) / f"{pass_id}.{os.getpid()}{SUFFIX}")
        except (OSError, ValueError):
            return None

    @classmethod
    def warmed_up(cls, scratch_dir: str | None, pass_id: str, warm_s: float | None, warm_inputs: int) -> Beacon | None:
        """The beacon of a pass whose warm-up just ended (``warm_s``: its last repetition over ``warm_inputs``)."""
        beacon = cls.for_pass(scratch_dir, pass_id)
        if beacon is not None:
            beacon.warmed(warm_s / warm_inputs if warm_s and warm_inputs else None)
        return beacon

    def warmed(self, per_document_s: float | None) -> None:
        """The warm-up is over: its seconds per document (None: no warm-up)."""
        LAYOUT.pack_into(self.memory, 0, 0, math.nan if per_document_s is None else per_document_s, 1)

    def done(self, documents: int) -> None:
        """Documents done so far in the measured region (one store into mapped memory)."""
        struct.pack_into("<q", self.memory, 0, documents)

    def close(self) -> None:
        self.memory.close()


@dataclass(frozen=True)
class Reading:
    """What the beacons of one pass say: its processes' documents done, and their warm-up figures."""

    done: int
    per_document_s: float | None
    warmed: bool
    parts: int


def read_beacons(scratch: Path, pass_id: str) -> Reading | None:
    """The beacons of ``pass_id`` (one per process of the pass), summed: None before any exists. The warm-up's
    seconds per document of a pass split over several processes is one process's, shared among them."""
    parts = []
    for path in scratch.glob(f"{pass_id}.*{SUFFIX}"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) == LAYOUT.size:
            parts.append(LAYOUT.unpack(data))
    if not parts:
        return None
    warm = [w for _, w, ready in parts if ready and not math.isnan(w)]
    per_document = sum(warm) / len(warm) / len(parts) if warm else None
    return Reading(done=sum(p[0] for p in parts), per_document_s=per_document,
                   warmed=all(p[2] for p in parts), parts=len(parts))


def remove_beacons(scratch: Path, pass_id: str) -> None:
    """The beacons of a pass that ended: never evidence, never left behind."""
    for path in scratch.glob(f"{pass_id}.*{SUFFIX}"):
        path.unlink(missing_ok=True)


@dataclass
class _Speed:
    """One variant's pace: the seconds a pass spends outside its documents (start-up, load, warm-up, writing,
    evaluation) and the seconds per document."""

    setup_s: float
    per_document_s: float
    measured: bool = False


@dataclass
class Projection:
    """The campaign's remaining time from each variant's pace, as the run learns it: first from a warm-up, then
    from the passes that ended. A variant not seen yet is assumed to go at the mean pace of those seen."""

    speeds: dict[str, _Speed] = field(default_factory=dict)

    def learn(self, variant: str, setup_s: float, per_document_s: float, measured: bool) -> None:
        known = self.speeds.get(variant)
        if known is None or measured or not known.measured:
            self.speeds[variant] = _Speed(max(setup_s, 0.0), max(per_document_s, 0.0), measured)

    def slot_s(self, variant: str, documents: int | None) -> float | None:
        speed = self.speeds.get(variant)
        if speed is None:
            if not self.speeds:
                return None
            speed = _Speed(sum(s.setup_s for s in self.speeds.values()) / len(self.speeds),
                           sum(s.per_document_s for s in self.speeds.values()) / len(self.speeds))
        return speed.setup_s + speed.per_document_s * (documents or 0)

    def remaining_s(self, slots: list[tuple[str, int | None]]) -> float | None:
        times = [self.slot_s(v, d) for v, d in slots]
        return None if any(t is None for t in times) else float(sum(times))


@dataclass
class _Pass:
    pass_id: str
    variant: str
    documents: int | None
    started: float
    warmed_at: float | None = None
    per_document_s: float | None = None
    done: int = 0


class Watch:
    """The runner's side: reads the running pass's beacons and emits ``estimate`` (once) and ``progress`` (every
    ``every_s``). ``slots``: the (variant, documents) of every pass this run still has to run, in order.
    ``clock``: seconds for intervals and rates (monotonic); ``wall``: seconds since the epoch, for the projected
    ends."""

    def __init__(self, scratch: Path, emit: Emit, slots: list[tuple[str, int | None]], *,
                 every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, poll_s: float = POLL_S) -> None:
        self.scratch, self.emit, self.slots = scratch, emit, list(slots)
        self.every_s, self.clock, self.wall, self.poll_s = every_s, clock, wall, poll_s
        self.projection = Projection()
        self.current: _Pass | None = None
        self.estimated = False
        self.last_emit = 0.0
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ the runner's calls

    def pass_started(self, pass_id: str, variant: str, documents: int | None) -> None:
        with self.lock:
            now = self.clock()
            self.current = _Pass(pass_id, variant, documents, now)
            self.last_emit = now

    def pass_ended(self, pass_s: float | None, completed: int | None) -> None:
        """The pass ended (its wall time from the runner's clock): its pace replaces the warm-up's guess."""
        with self.lock:
            now, p = self.clock(), self.current
            self.current = None
            if self.slots:
                self.slots.pop(0)
            if p is None:
                return
            if pass_s is not None and completed:
                self.projection.learn(p.variant, now - p.started - pass_s, pass_s / completed, measured=True)

    def tick(self) -> None:
        """One reading of the beacons; emits what is due."""
        with self.lock:
            p = self.current
            if p is None:
                return
            now = self.clock()
            reading = read_beacons(self.scratch, p.pass_id)
            if reading is not None:
                self._read(p, reading, now)
            if now - self.last_emit >= self.every_s:
                self.last_emit = now
                self.emit("progress", self._progress(p, now))

    def running(self) -> _Thread:
        """``with watch.running(): ...`` reads the beacons on a thread of its own while the pass runs."""
        return _Thread(self)

    # ------------------------------------------------------------------ readings

    def _read(self, p: _Pass, reading: Reading, now: float) -> None:
        p.done = reading.done
        if reading.warmed and p.warmed_at is None:
            p.warmed_at, p.per_document_s = now, reading.per_document_s
            if p.per_document_s is not None:
                self.projection.learn(p.variant, now - p.started, p.per_document_s, measured=False)
            if not self.estimated and p.per_document_s is not None:
                self.estimated = True
                self.emit("estimate", self._estimate(p, now))

    def _estimate(self, p: _Pass, now: float) -> Estimate:
        left = self.projection.remaining_s(self.slots)
        return Estimate(p.pass_id, p.variant, len(self.slots), 1.0 / p.per_document_s if p.per_document_s else None,
                        left, None if left is None else self.wall() + left - (now - p.started))

    def _progress(self, p: _Pass, now: float) -> PassProgress:
        rate = None
        if p.warmed_at is not None and p.done and now > p.warmed_at:
            rate = p.done / (now - p.warmed_at)
        elif p.per_document_s:
            rate = 1.0 / p.per_document_s
        pass_left = None
        if rate and p.documents is not None and p.warmed_at is not None:
            pass_left = max(p.documents - p.done, 0) / rate
        later = self.projection.remaining_s(self.slots[1:])
        campaign_left = None if pass_left is None or later is None else pass_left + later
        wall = self.wall()
        return PassProgress(p.pass_id, p.variant, done=p.done if p.warmed_at is not None else None,
                            documents=p.documents, documents_per_s=rate, elapsed_s=now - p.started,
                            pass_left_s=pass_left, campaign_left_s=campaign_left, passes_left=len(self.slots),
                            pass_ends_at=None if pass_left is None else wall + pass_left,
                            campaign_ends_at=None if campaign_left is None else wall + campaign_left)


class _Thread:
    """The watch's thread, for the time of one pass: a daemon that ticks every ``poll_s`` until the pass ends."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="iteralab-progress", daemon=True)

    def _loop(self) -> None:
        while not self.stopped.wait(self.watch.poll_s):
            self.watch.tick()

    def __enter__(self) -> _Thread:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


def duration(seconds: float | None) -> str:
    """A projected time in words: ``2 h 05 min``, ``4 min 10 s``, ``12 s``."""
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def clock_time(epoch: float | None) -> str:
    """A projected end as the local time of day (``14:05``), or ``?``."""
    if epoch is None:
        return "?"
    return time.strftime("%H:%M", time.localtime(epoch))


def progress_line(info: PassProgress) -> str:
    """The plain line a ``progress`` event prints where no terminal shows a bar."""
    head = f"{info.pass_id}: "
    if info.done is None:
        return head + f"loading and warming up, {duration(info.elapsed_s)} so far"
    total = f" of {info.documents:,}" if info.documents is not None else ""
    rate = info.documents_per_s
    line = head + f"{info.done:,}{total} documents" + (f", {rate:,.1f} documents/s" if rate else "")
    if info.pass_left_s is not None:
        line += f"; pass ends in {duration(info.pass_left_s)} ({clock_time(info.pass_ends_at)})"
    if info.campaign_left_s is not None:
        left = info.passes_left
        line += (f"; campaign ({left} {'pass' if left == 1 else 'passes'} left) in "
                 f"{duration(info.campaign_left_s)} ({clock_time(info.campaign_ends_at)})")
    return line


def estimate_line(info: Estimate) -> str:
    """The line ``run`` prints once, right after the first warm-up: the campaign's projected duration."""
    rate = info.documents_per_s
    pace = f"{info.variant}'s warm-up: {rate:,.1f} documents/s" if rate else f"{info.variant}'s warm-up"
    return (f"projected: {info.passes} {'pass' if info.passes == 1 else 'passes'} in about {duration(info.campaign_s)} (ends about "
            f"{clock_time(info.ends_at)}), from {pace}; variants not measured yet are assumed as fast, and the "
            "projection is corrected as passes end")

