"""A data-parallel pass (X3, R2–R4, R7–R9): one worker process per device, each with a full model copy, the
corpus sharded by token count (:mod:`iteralab.campaign.engines.shards`), the shards' predictions merged into one file.

Reads the pass spec the runner builds; writes the merged prediction file ``predictions/<pass_id>.parquet``
(same format as a single-device pass: class probabilities, or an embedding job's vectors or a generation job's
texts, which each worker streams to its shard's file and the coordinator streams into the pass's file in shard
order) and returns
one result record for the journal.

- Workers are fresh interpreters (``python -m iteralab.campaign.engines.parallel``), started with their environment
  already set (``CUDA_VISIBLE_DEVICES`` = one card each, or the thread count of a CPU process): nothing is
  forked after CUDA is initialised. Each runs :func:`iteralab.campaign.engines.passes.execute_pass` (the same load,
  warm-up, measured region and prediction writer as a single-device pass) on its row range.
- Timing: the coordinator plans the shards while the workers load; the measured pass runs from the moment the
  last worker reports ready (model loaded and warmed up) to the moment the last worker reports that its
  shard's predictions are on the host. Per-device pass times, the slowest/fastest shard ratio, the token
  imbalance and per-device memory peaks (allocated and reserved, never summed) go into the record.
- A worker that fails (error, out of memory, killed) fails the pass, with the inputs completed on every
  device; nothing is re-run on fewer devices. The merged file holds exactly the completed inputs of every
  shard, so ids_match is computed from it like for any pass. If the coordinator itself is killed, its workers
  die with it (parent-death signal, and a closed control pipe) and no prediction file is written: the runner's
  journal shows an aborted pass, and a resumed campaign attempts the slot again. A run stopped by a signal
  (Ctrl-C reaches the workers too) kills the workers at once; the runner records an interrupted pass.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.campaign.engines import passes
from iteralab.campaign.engines.passes import ended_without_result, error_text, order_hash
from iteralab.campaign.engines.shards import corpus_lengths, imbalance, plan_shards, shard_tokens, worker_layout
from iteralab.campaign.folder import read_corpus_batches
from iteralab.campaign.kinds.output import file_name
from iteralab.campaign.kinds.registry import kind_named  # every kind's sink imported at start-up, never in writing
from iteralab.campaign.kinds.sink import SinkReport
from iteralab.campaign.manifest import determinism_settings, environment_manifest, owns_device
from iteralab.campaign.records import STARTUP_PHASES, WORKER_PHASES, PassResult, PassSpec, Startup, failure, started
from iteralab.common.files import write_json_atomic
from iteralab.errors import IteraError
from iteralab.models import device as dev
from iteralab.models.cards import card_identity
from iteralab.models.device import device_inventory

#: How long the coordinator waits for a worker's next message before it declares the pass failed (seconds).
#: Generous: a worker loading a large model on a busy machine is slow, not dead (a dead one closes its pipe).
STALL_S = 3600.0


@dataclass(frozen=True)
class ShardMessage:
    """One line of the control pipe between the coordinator and a worker: the worker is ready (``ready``); it may
    run its shard, these rows of the corpus copy (``go``); its shard's predictions are on the host (``finished``:
    whether it succeeded, the inputs it completed)."""

    event: str
    rows: tuple[int, int] | None = None
    ok: bool | None = None
    completed: int | None = None

    def to_line(self) -> str:
        record: dict[str, str | bool | int | list[int] | None] = {"event": self.event}
        if self.rows is not None:
            record["rows"] = list(self.rows)
        if self.event == "finished":
            record.update(ok=self.ok, completed=self.completed)
        return json.dumps(record) + "\n"

    @classmethod
    def from_line(cls, line: str) -> ShardMessage:
        """The message of one line (ValueError: not one of these messages)."""
        data = json.loads(line)
        if not isinstance(data, dict) or not isinstance(data.get("event"), str):
            raise ValueError(f"not a control message: {line[:80]!r}")
        rows = data.get("rows")
        return cls(data["event"], (int(rows[0]), int(rows[1])) if rows is not None else None, data.get("ok"),
                   data.get("completed"))


class _Channel:
    """Line-delimited JSON over a pair of pipe file descriptors (never stdout: a model may print there)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.rx = os.fdopen(read_fd, "r", encoding="utf-8")
        self.tx = os.fdopen(write_fd, "w", encoding="utf-8", buffering=1)

    def send(self, message: ShardMessage) -> None:
        try:
            self.tx.write(message.to_line())
            self.tx.flush()
        except (BrokenPipeError, OSError):
            os._exit(3)  # the coordinator is gone: nothing of this pass is counted

    def receive(self) -> ShardMessage:
        line = self.rx.readline()
        if not line:
            os._exit(3)  # the coordinator closed the pass (another worker failed, or it was killed)
        return ShardMessage.from_line(line)


class WorkerSync:
    """What :func:`~iteralab.campaign.engines.passes.execute_pass` calls in a worker: ``ready`` blocks until every
    worker is ready and returns this worker's rows; ``finished`` says the shard's predictions are on the host."""

    def __init__(self, channel: _Channel) -> None:
        self.channel = channel
        self.pass_run: Any = None

    def ready(self) -> tuple[int, int]:
        self.channel.send(ShardMessage("ready"))
        rows = self.channel.receive().rows
        if rows is None:
            raise RuntimeError("the coordinator's go names no rows")
        return rows

    def finished(self, pass_run: Any, error: BaseException | None) -> None:
        self.pass_run = pass_run
        self.channel.send(ShardMessage("finished", ok=error is None, completed=pass_run.progress.completed))


def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when the coordinator dies (a killed runner leaves no orphan)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - no libc by that name: the closed pipe still ends the worker
            pass


def worker_main(argv: list[str]) -> int:
    """``python -m iteralab.campaign.engines.parallel SPEC RESULT READ_FD WRITE_FD``: one worker of a data-parallel
    pass."""
    _die_with_parent()
    started = time.perf_counter()

    spec_path, result_path, read_fd, write_fd = argv
    spec = PassSpec.from_json(json.loads(Path(spec_path).read_text(encoding="utf-8")), spec_path)
    sync = WorkerSync(_Channel(int(read_fd), int(write_fd)))
    startup: Startup = {"imports_s": time.perf_counter() - started}
    environment = None
    if spec.collect_environment:
        t0 = time.perf_counter()

        environment = environment_manifest(runtime=not owns_device(spec.model["kind"]))
        startup["environment_s"] = time.perf_counter() - t0
        passes.record_runtime_memory(spec, startup)  # recorded once, by the worker that collects the environment
    card = _own_card(spec)  # read before the pass: a device-side error would leave the card unreadable
    try:
        result = passes.execute_pass(spec, startup=startup, sync=sync)
    except Exception as exc:  # unexpected: still leave a failure record behind
        result = failure(spec.pass_id, passes.error_text(exc), "internal", completed=None, retries=None)
    if card is not None:
        result["card"] = card
    if sync.pass_run is not None:  # the shard's whole pass order (the file holds the completed part only)

        pq.write_table(pa.table({"id": sync.pass_run.ordered_ids()}),
                       Path(spec.prediction_dir) / f"{spec.pass_id}.order.parquet")
    if environment is not None and "torch" in sys.modules and isinstance(environment.get("determinism"), dict):
        environment["determinism"] = determinism_settings()
    result["environment"] = environment

    write_json_atomic(result_path, result)
    return 0


def _own_card(spec: PassSpec) -> dict[str, Any] | None:
    """A GPU worker's one visible card (name, UUID, visibility variables), or None on CPU; an unreadable card is
    said, and the pass then fails on its own."""
    if not str(spec.variant.get("device") or "").startswith("cuda"):
        return None

    try:
        return card_identity(0)
    except Exception as exc:  # noqa: BLE001 - the pass itself reports the device's error
        return {"index": 0, "uuid": None, "uuid_reason": f"not read: {error_text(exc)}"}


# ----------------------------------------------------------------------------------------- coordinator


class _Worker:
    def __init__(self, k: int, label: str, proc: subprocess.Popen, channel_fds: tuple[int, int], folder: Path,
                 pass_id: str) -> None:
        self.k, self.label, self.proc, self.folder, self.pass_id = k, label, proc, folder, pass_id
        self.rx = os.fdopen(channel_fds[0], "r", encoding="utf-8")
        self.tx = os.fdopen(channel_fds[1], "w", encoding="utf-8", buffering=1)
        self.ready = False
        self.finished: ShardMessage | None = None
        self.finished_at: float | None = None
        self.gone = False
        self.stopped = False
        self.reader: threading.Thread | None = None

    def send(self, message: ShardMessage) -> bool:
        try:
            self.tx.write(message.to_line())
            self.tx.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def stop(self) -> None:
        """Close the control pipe: a waiting worker reads end-of-file and exits."""
        try:
            self.tx.close()
        except OSError:
            pass

    def result(self) -> PassResult:
        """The worker's result (its ``result.json``, the card it ran on and its pass limit in ``extra``), or the
        failure of a worker stopped or dead before it wrote one."""
        path = self.folder / f"w{self.k}.result.json"
        if path.is_file():
            return PassResult.from_json(json.loads(path.read_text(encoding="utf-8")))
        if self.stopped:
            return PassResult.from_json(failure(f"w{self.k}", "stopped before the measured pass: another worker "
                                                "failed first", "stopped", retries=None))

        log = self.folder / f"w{self.k}.log"
        stderr = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        return PassResult.from_json(failure(f"w{self.k}", ended_without_result(self.proc.returncode, stderr), "crash",
                                            completed=None, retries=None))


def _read_loop(worker: _Worker, events: queue.Queue, clock: Any) -> None:
    for line in worker.rx:
        try:
            message = ShardMessage.from_line(line)
        except ValueError:
            continue
        events.put((worker.k, message, clock.now()))
    events.put((worker.k, None, clock.now()))


def _start_workers(spec: PassSpec, layout: Any, folder: Path) -> list[_Worker]:
    workers = []
    for k in range(layout.n):
        wspec = spec.with_changes(pass_id=f"w{k}", prediction_dir=str(folder), collect_environment=k == 0,
                                  variant={**spec.variant, "device": layout.device})
        spec_path = folder / f"w{k}.spec.json"
        spec_path.write_text(json.dumps(wspec.to_json()), encoding="utf-8")
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        env = {**os.environ, **{key: v for key, v in layout.envs[k].items() if v is not None}}
        for key in [key for key, v in layout.envs[k].items() if v is None]:
            env.pop(key, None)
        with open(folder / f"w{k}.log", "w", encoding="utf-8") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "iteralab.campaign.engines.parallel", str(spec_path),
                 str(folder / f"w{k}.result.json"), str(to_worker_r), str(from_worker_w)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(to_worker_r, from_worker_w))
        os.close(to_worker_r)
        os.close(from_worker_w)
        workers.append(_Worker(k, layout.labels[k], proc, (from_worker_r, to_worker_w), folder, spec.pass_id))
    return workers


def _cpu_snapshot(pids: list[int]) -> dict[str, float] | None:
    """Machine busy CPU seconds and the CPU seconds of this pass's own processes (coordinator + workers)."""
    try:
        pass
    except ImportError:
        return None
    total = psutil.cpu_times()
    own = 0.0
    for pid in [os.getpid(), *pids]:
        try:
            t = psutil.Process(pid).cpu_times()
            own += t.user + t.system
        except psutil.Error:
            continue
    busy = total.user + total.system + getattr(total, "nice", 0.0) + getattr(total, "irq", 0.0) + \
        getattr(total, "softirq", 0.0)
    return {"busy_s": busy, "steal_s": getattr(total, "steal", 0.0), "own_s": own}


def run_data_parallel(spec: PassSpec | dict[str, Any], clock: Any = None) -> dict[str, Any]:
    """Run one data-parallel pass (``spec.variant["data_parallel"]`` workers); return its result record (the JSON
    form of a :class:`~iteralab.campaign.records.PassResult`)."""

    clock = clock or dev.PERF_CLOCK
    spec = PassSpec.coerce(spec)
    n = int(spec.variant["data_parallel"])
    result = started(spec.pass_id)
    notes: list[str] = result["notes"]
    try:
        layout = worker_layout(spec.variant.get("device") or spec.device, n)
    except IteraError as exc:
        result.update(error=exc.message, error_kind="unrunnable")
        notes.append(f"not run: {exc.message}")
        return result
    parallel: dict[str, Any] = {"workers": n, "kind": layout.kind, "label": layout.describe(),
                                "threads_per_worker": layout.threads}
    result["parallel"] = parallel
    # The workers' specs, results and shard files live in the campaign's scratch folder (as a single-device
    # worker's do): a killed run leaves nothing outside the campaign, and the next run clears it.
    scratch = Path(spec.scratch_dir) if spec.scratch_dir else None
    if scratch is not None:
        scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dp-" if scratch else "iteralab-dp-", dir=scratch) as tmp:
        folder = Path(tmp)
        t_spawn = clock.now()
        workers = _start_workers(spec, layout, folder)
        events: queue.Queue = queue.Queue()
        for w in workers:
            w.reader = threading.Thread(target=_read_loop, args=(w, events, clock), daemon=True)
            w.reader.start()
        try:
            _coordinate(spec, result, workers, events, clock, t_spawn, layout)
            return result
        except (KeyboardInterrupt, SystemExit):
            # the run is being stopped (campaign.stopping): no worker finishes its shard after the runner
            for w in workers:
                if w.proc.poll() is None:
                    w.proc.kill()
            raise
        finally:
            for w in workers:
                w.stop()
                if w.proc.poll() is None:
                    try:
                        w.proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        w.proc.kill()
                        w.proc.wait()
                if w.reader is not None:
                    w.reader.join(timeout=5)
                try:
                    w.rx.close()
                except OSError:
                    pass


def _coordinate(spec: PassSpec, result: dict[str, Any], workers: list[_Worker], events: queue.Queue,
                clock: Any, t_spawn: float, layout: Any) -> None:
    """The pass once the workers are started: the shard plan, the measured shards, the merged file, into
    ``result``."""
    phases, notes = result["phases"], result["notes"]
    bounds, plan_error = _plan_shards(spec, result, workers)
    if plan_error is not None or not _all_ready(workers, events):
        _failed_before_measuring(result, workers, layout, plan_error)
        return
    result["startup"]["workers_ready_s"] = clock.now() - t_spawn
    all_ok, pass_s, t_last = _measured_shards(result, workers, events, clock, bounds)
    # Writing (outside the measured region): workers write their shard files, the coordinator merges them.
    for w in workers:
        w.stop()
    for w in workers:
        w.proc.wait()
    _collect(result, workers, bounds, layout)
    if all_ok and result["status"] == "ok":
        phases["pass_s"] = pass_s
    else:
        result["status"] = "failed"
        if not any(n.startswith("pass_s:") for n in notes):
            notes.append("pass_s: empty, the measured pass did not complete on every device")
    _merge(spec, result, workers)
    phases["writing_s"] = clock.now() - t_last
    return result


def _plan_shards(spec: PassSpec, result: dict[str, Any], workers: list[_Worker]) -> tuple[Any, Exception | None]:
    """Start-up (R2), while the workers load: each document's cost and the shard plan (row bounds), recorded in
    the result's ``parallel`` part; the error when the tokenizer or the corpus copy is unusable."""

    notes, parallel, startup = result["notes"], result["parallel"], result["startup"]
    n = len(workers)
    t0 = time.perf_counter()
    plan_error = None
    try:
        lengths, unit = corpus_lengths(spec) if n > 1 else (None, None)
        if lengths is None:
            rows = sum(len(b) for b in read_corpus_batches(spec.corpus_path, ["id"]))
            bounds, tokens = np.array([0, rows]), None
        else:
            bounds = plan_shards(lengths, n)
            tokens = shard_tokens(lengths, bounds)
    except Exception as exc:  # the tokenizer or the corpus copy is unusable: the pass fails, nothing is run
        plan_error, bounds, tokens, unit = exc, None, None, None
    startup["shard_plan_s"] = time.perf_counter() - t0
    if bounds is not None:
        parallel["length_unit"] = unit
        parallel["shards"] = [{"device": w.label, "rows": [int(bounds[k]), int(bounds[k + 1])],
                               "cost": int(tokens[k]) if tokens is not None else None} for k, w in enumerate(workers)]
        parallel["token_imbalance"] = imbalance(list(tokens)) if tokens is not None else (1.0 if n == 1 else None)
        if tokens is not None and parallel["token_imbalance"] is None:
            notes.append("token imbalance: empty, a shard holds no document (fewer documents than workers)")
    return bounds, plan_error


def _all_ready(workers: list[_Worker], events: queue.Queue) -> bool:
    """Wait until every worker is ready; False as soon as one ends first (no run on fewer devices)."""
    while not all(w.ready for w in workers):
        k, message, at = _next(events)
        if message is None:
            workers[k].gone = True
            return False
        if message.event == "ready":
            workers[k].ready = True
    return True


def _failed_before_measuring(result: dict[str, Any], workers: list[_Worker], layout: Any,
                             plan_error: Exception | None) -> None:
    """Nothing is measured: the workers still loading are stopped, and the pass fails with the first error."""
    notes = result["notes"]
    for w in workers:
        w.stop()
        if not w.gone and w.proc.poll() is None:
            w.stopped = True
            w.proc.kill()
    for w in workers:
        w.proc.wait()
    _collect(result, workers, None, layout)
    if plan_error is not None:
        result.update(error=f"shard plan: {error_text(plan_error)}", error_kind="load")
    notes.append(f"failed before the measured pass: {result['error']}; no worker ran its shard, no fallback "
                 "to fewer devices")
    notes.append("pass_s: empty, the measured pass did not start")


def _measured_shards(result: dict[str, Any], workers: list[_Worker], events: queue.Queue, clock: Any,
                     bounds: Any) -> tuple[bool, float, float]:
    """The measured pass: from the go sent to every ready worker until the last shard's predictions are on the
    host. Returns whether every shard finished ok, the pass time and the last shard's end."""

    before = _cpu_snapshot([w.proc.pid for w in workers])
    t_go = clock.now()  # every worker is ready: the measured pass starts
    for k, w in enumerate(workers):
        w.send(ShardMessage("go", rows=(int(bounds[k]), int(bounds[k + 1]))))
    pending = set(range(len(workers)))
    while pending:
        k, message, at = _next(events)
        if message is None:
            if k in pending:  # died during its shard (a worker that finished closes its pipe later)
                workers[k].gone = True
                workers[k].finished_at = at
                pending.discard(k)
        elif message.event == "finished":
            workers[k].finished, workers[k].finished_at = message, at
            pending.discard(k)
    t_last = max(w.finished_at for w in workers)  # the last shard's predictions are on the host
    after = _cpu_snapshot([w.proc.pid for w in workers])
    all_ok = all(w.finished is not None and w.finished.ok for w in workers)
    pass_s = t_last - t_go
    result["concurrent_load"] = dev.concurrent_load(before, after, pass_s)
    return all_ok, pass_s, t_last


def _next(events: queue.Queue) -> tuple[int, ShardMessage | None, float]:
    try:
        return events.get(timeout=STALL_S)
    except queue.Empty:
        raise RuntimeError(f"no worker message for {STALL_S:g} s") from None


def _collect(result: dict[str, Any], workers: list[_Worker], bounds: Any, layout: Any) -> None:
    """Fold the workers' records into the pass record: per-device facts kept apart, never summed."""
    phases, notes, parallel = result["phases"], result["notes"], result["parallel"]
    records = [w.result() for w in workers]
    devices = []
    for w, r in zip(workers, records):
        shard_rows = int(bounds[w.k + 1] - bounds[w.k]) if bounds is not None else None
        devices.append({"device": w.label, **({"physical_id": layout.physical[w.k], "card": r.extra.get("card")}
                                              if layout.kind == "gpu" else {}),
                        "status": r.status, "completed": r.completed,
                        "expected": r.expected if r.expected is not None else shard_rows,
                        "phases": dict(r.phases), "memory": r.memory, "error": r.error,
                        "error_kind": r.error_kind, "startup": r.startup,
                        **({"pass_limit": r.extra["pass_limit"]} if r.extra.get("pass_limit") else {})})
    parallel["devices"] = devices
    for name in STARTUP_PHASES:  # start-up phases run side by side: the slowest one counts
        values = [r.phase(name) for r in records]
        phases[name] = max(values) if values and all(v is not None for v in values) else None
    shard_times = [r.phase("pass_s") for r in records]
    parallel["device_pass_s"] = {w.label: t for w, t in zip(workers, shard_times)}

    parallel["time_imbalance"] = imbalance(shard_times)
    completed = [d["completed"] for d in devices]
    result["completed"] = sum(completed) if all(c is not None for c in completed) else None
    result["retries"] = sum(int(r.retries or 0) for r in records)
    result["memory"] = _memory(records, workers)
    first = records[0]
    if first.workload:
        result["workload"] = {**first.workload, "device": ",".join(w.label for w in workers)
                              if layout.kind == "gpu" else first.workload.get("device")}
    result["file_hashes"] = first.file_hashes
    for key in ("runtime_rss_bytes", "runtime_imports_s"):  # recorded once, by the first worker
        if (first.startup or {}).get(key) is not None:
            result["startup"][key] = first.startup[key]
    result["environment"] = _runner_view(dict(first.environment) if first.environment is not None else None, layout)
    failures = sorted(((w, r) for w, r in zip(workers, records) if r.status != "ok"),
                      key=lambda wr: wr[1].error_kind == "stopped")  # the cause first
    # run.pass_timeout: each worker projected its own limit over its shard (per device above); the row names the
    # one of the worker that failed first, else the first worker's
    limited = [r.extra.get("pass_limit") for _, r in failures] + [r.extra.get("pass_limit") for r in records]
    if any(limited):
        result["pass_limit"] = next(record for record in limited if record)
    if failures:
        w, r = failures[0]
        result["error"] = f"{w.label}: {r.error}"
        result["error_kind"] = r.error_kind or "pass"
    else:
        result["status"] = "ok"
    for w, r in zip(workers, records):
        for note in r.notes:
            shared = note.startswith(WORKER_PHASES) or note.startswith("warm-up")
            line = note if shared else f"{w.label}: {note}"
            if line not in notes:
                notes.append(line)
    counts = ", ".join(f"{d['device']} {'unknown' if d['completed'] is None else d['completed']}"
                       f"/{d['expected'] if d['expected'] is not None else '?'}" for d in devices)
    notes.append(f"data-parallel over {layout.describe()}, corpus sharded by {parallel.get('length_unit') or 'rows'} "
                 f"into contiguous row ranges; completed per device: {counts}")
    if failures:
        notes.append(f"failed: {len(failures)} of {len(workers)} workers failed ({result['error']}); the pass is "
                     "not re-run on fewer devices")
        if result["completed"] is None:
            notes.append("completed: unknown, a worker died before reporting its count")


def _runner_view(environment: dict[str, Any] | None, layout: Any) -> dict[str, Any] | None:
    """The first worker's environment with the device inventory as the runner sees it: a GPU worker sees its one
    card only, and the campaign's manifest (and a resume's check) compare what the machine offers, the same for a
    data-parallel pass as for a single-device one. Each worker's own card is in ``parallel.devices``."""
    if not environment or layout.kind != "gpu" or "device_inventory" not in environment:
        return environment

    # as a worker's record reaches the runner (through JSON): plain values, e.g. torch's version as a string
    inventory = json.loads(json.dumps(device_inventory()))
    worker = environment["device_inventory"] or {}
    for key in ("cpu",):  # the worker's own threads stay as the worker ran them
        if key in worker:
            inventory[key] = worker[key]
    return {**environment, "device_inventory": inventory}


def _memory(records: list[PassResult], workers: list[_Worker]) -> dict[str, int | str | None] | None:
    """The largest per-device peak of each counter (allocated and reserved separately, never summed)."""
    memories = [r.memory or {} for r in records]
    if not any(memories):
        return None
    out: dict[str, int | str | None] = {}
    for key in ("cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes"):
        values = [m.get(key) for m in memories if m.get(key) is not None]
        if values:
            out[key] = max(values)
    scope = next((m.get("scope") for m in memories if m.get("scope")), "")
    out["scope"] = (f"largest per-device peak over {len(workers)} workers, each counter on its own (per device in "
                    f"the journal's parallel.devices, never summed); each: {scope}")
    reasons = sorted({m.get("reason") for m in memories if m.get("reason")})
    missing = [w.label for w, m in zip(workers, memories) if not m]
    out["reason"] = "; ".join(reasons + ([f"not measured on {', '.join(missing)}"] if missing else [])) or None
    return out


def _merge(spec: PassSpec, result: dict[str, Any], workers: list[_Worker]) -> None:
    """The shards' prediction files, in shard order, into the pass's file (atomically, by the kind's sink); the
    pass order is the shards' orders, one after the other."""

    sink = kind_named(spec.kind).sink(Path(spec.prediction_dir) / file_name(spec.pass_id), spec.classes)
    report = SinkReport()
    sink.merge([w.folder / file_name(f"w{w.k}") for w in workers], report)
    report.into(result)
    order = []
    for w in workers:
        order_path = w.folder / f"w{w.k}.order.parquet"
        order.append(pq.read_table(order_path).column("id").combine_chunks() if order_path.is_file() else None)
    if all(o is not None for o in order):
        full = pa.concat_arrays(order) if order else pa.array([], pa.string())
        result["expected"] = len(full)
        result["order_hash"] = order_hash(full) if len(full) else None
    else:
        result["order_hash"] = None
        result["notes"].append("order_hash: empty, a worker died before recording its shard's pass order")


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess in tests
    sys.exit(worker_main(sys.argv[1:]))
