"""One measured pass (R2–R4, R7, R8, M2): load, warm-up, the synchronized measured pass, the prediction file.

``execute_pass`` is what a worker process runs (``python -m iteralab.campaign.engines.passes SPEC RESULT``, or a worker
forked by a template, :mod:`iteralab.campaign.engines.prefork`) and what the runner calls directly in ``inprocess``
isolation. It never retries a failing batch with a smaller one unless
the variant is a declared *resume* variant, whose retries are counted.

The measured region covers reading the corpus file, tokenization, host→device transfers, inference and
materializing the probabilities on the host; the device is synchronized before the start and before the stop.
Nothing else (logging, hashing, writing) happens inside it.
"""

from __future__ import annotations

import time

_IMPORT_WALL, _IMPORT_START = time.time(), time.perf_counter()  # the worker's start-up phases (R2) start here

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow  # noqa: F401  # imported at start-up, never inside the measured region (the pass reads with it)
import pyarrow.csv  # noqa: F401
import pyarrow.parquet  # noqa: F401  # and writes the prediction file with it
import pyarrow as pa

from iteralab.campaign import folder as _folder  # noqa: F401  # the pass reads the corpus with it: imported at
from iteralab.campaign.kinds.classification import output as _predictions  # noqa: F401  # start-up, never inside a timed phase
from iteralab.campaign.engines import documents
from iteralab.campaign.engines.passlimit import Limit, LimitRecord, PassTimeout, limit_basis, pass_limit
from iteralab.campaign.folder import read_corpus_batches
from iteralab.campaign.kinds.output import file_name
from iteralab.campaign.kinds.registry import kind_named
from iteralab.campaign.kinds.sink import PassSink, SinkReport
from iteralab.campaign.manifest import determinism_settings, environment_manifest, owns_device
from iteralab.campaign.progress import Beacon
from iteralab.campaign.records import PassSpec, Startup, failure, started
from iteralab.common.arrow import numpy_array, string_array
from iteralab.common.digest import string_digest
from iteralab.common.files import write_json_atomic
from iteralab.errors import RowError
from iteralab.kit.memoire import runtime_imports, runtime_overhead
from iteralab.lock.modules import carried_modules
from iteralab.models import device as dev, factory
from iteralab.models.factory import WorkloadSpec
from iteralab.plan.scan import CorpusReader, ReadOptions, read_options

READ_BLOCK = 1 << 22  # bytes of corpus file per record batch (a pass holds O(block + batch) texts)
WARMUP_BLOCK = 1 << 16  # bytes per piece read for the warm-up texts


def ended_without_result(returncode: int | None, stderr: str) -> str:
    """The error of a worker process that ended without writing its result: how it ended, and the last line it
    wrote to stderr (a crash row's only evidence, R8)."""
    how = f"signal {-returncode}" if returncode is not None and returncode < 0 else f"exit code {returncode}"
    tail = stderr.strip().splitlines()[-1:] or [""]
    return f"worker process ended ({how}) without a result: {tail[0][:300]}"


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()
    return text[:500]


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ in ("OutOfMemoryError", "MemoryError") or "out of memory" in str(exc).lower()


class _Progress:
    """Inputs completed so far; read after a failure to report how far the pass got (R8). Batches run in pass
    order and the first failure ends the pass, so the completed inputs are always the first ``completed`` of
    the pass order."""

    def __init__(self) -> None:
        self.completed = 0
        self.retries = 0


def _text_batches(corpus_path: str, options: ReadOptions, columns: list[str],
                  block_size: int = READ_BLOCK) -> Iterator[Any]:
    """Record batches of the corpus file (Arrow), streamed; a corpus in another format is read by the corpus
    reader and its ids and texts collected (as Arrow arrays: the reader may start again, a pass cannot)."""

    if corpus_path.endswith((".csv", ".parquet")):
        yield from read_corpus_batches(corpus_path, columns, block_size=block_size)
        return

    ids: list[Any] = []
    texts: list[Any] = []
    for batch in CorpusReader(corpus_path, options).batches():
        if batch is None:
            ids, texts = [], []
        else:
            ids.append(pa.array(batch.ids, pa.string()))
            texts.append(pa.array(batch.texts, pa.string()))
    yield pa.record_batch([pa.chunked_array(ids, pa.string()).combine_chunks(),
                           pa.chunked_array(texts, pa.string()).combine_chunks()], names=["id", "text"])


def _row_range(batches: Iterator[Any], start: int, stop: int) -> Iterator[Any]:
    """The record batches of rows ``[start, stop)`` of the file (a data-parallel shard,
    ``campaign.engines.parallel``)."""
    seen = 0
    for record_batch in batches:
        lo, hi = max(start - seen, 0), min(stop - seen, len(record_batch))
        if hi > lo:
            yield record_batch.slice(lo, hi - lo)
        seen += len(record_batch)
        if seen >= stop:
            return


def _run_one(workload: Any, texts: list[Any], resume: bool, outputs: list[np.ndarray], progress: _Progress,
             tokenize: Any = None) -> None:
    """One batch: ``texts`` tokenized (or token rows padded: ``tokenize`` is then ``workload.pad_rows``), inferred."""
    tokenize = tokenize or workload.tokenize
    try:
        probs = workload.infer(tokenize(texts))
    except Exception:
        if not resume or len(texts) == 1:
            raise
        # Declared resume variant only: the failing part is retried in halves, and every retry is counted.
        progress.retries += 1
        half = len(texts) // 2
        _run_one(workload, texts[:half], resume, outputs, progress, tokenize)
        _run_one(workload, texts[half:], resume, outputs, progress, tokenize)
        return
    outputs.append(probs)
    progress.completed += len(texts)


class MeasuredPass:
    """The work inside the measured region (R3): read the corpus file in record batches, order it (bucketing:
    by token length), tokenize, transfer, infer and materialize probabilities on the host.

    A fixed-order pass holds one record batch of texts at a time; ids are kept as Arrow arrays and
    probabilities as one float32 row per input (O(classes) bytes per document). A bucketed pass must sort the
    whole corpus by length first, so it keeps the text column as one Arrow array (bytes, not Python strings).
    Its state stays readable after a failure, so the caller can report how many inputs were completed."""

    def __init__(self, beacon: Any = None, sink: PassSink | None = None, prompts: Any = None) -> None:
        self.id_chunks: list[Any] = []
        self.order: np.ndarray | None = None  # None: file order
        self.outputs: list[np.ndarray] = []
        self.progress = _Progress()
        self.n_classes = 0
        self.limit: Limit | None = None
        #: where the outputs go (the kind's pass sink, ``campaign.kinds.sink``): a streaming sink is handed the
        #: completed rows after every batch, inside the measured region; the file is finished after it
        self.sink = sink
        #: what turns each record batch read into (id, the model's text) as it is read (``kind.prompts``), or None
        self.prompts = prompts
        self._ordered: tuple[Any, Any] | None = None  # (what it was built from, the ids in pass order)
        self.beacon = beacon  # documents done, shown while the pass runs (``campaign.progress.Beacon``), or None

    def run(self, workload: Any, corpus_path: str, options: ReadOptions, batch_size: int,
            bucketing: bool, resume: bool, n_classes: int, limit: Limit | None = None,
            rows: tuple[int, int] | None = None) -> None:
        self.n_classes = n_classes
        self.limit = limit
        self.progress = _Progress()
        self._batches = batches = _text_batches(corpus_path, options, self.columns)
        if rows is not None:  # a data-parallel shard: rows [start, stop) of the file, in file order
            self._batches = batches = _row_range(batches, *rows)
        if self.prompts is not None:  # (id, prompt) record batches, each rendered as it is read
            batches = map(self.prompts, batches)
        if bucketing:
            self._run_bucketed(workload, batches, batch_size, resume)
            return
        carry: list[str] = []
        for record_batch in batches:
            self.id_chunks.append(record_batch.column(0))
            texts = carry + record_batch.column(1).to_pylist()
            full = len(texts) - len(texts) % batch_size
            for start in range(0, full, batch_size):
                _run_one(workload, texts[start:start + batch_size], resume, self.outputs, self.progress)
                self._check_limit()
            carry = texts[full:]
        if carry:
            _run_one(workload, carry, resume, self.outputs, self.progress)
            self._check_limit()

    def _check_limit(self) -> None:
        if self.beacon is not None:  # documents done, for the person waiting (one store into mapped memory)
            self.beacon.done(self.progress.completed)
        if self.sink is not None and self.sink.streams:
            self.sink.flush(self)
        if self.limit is not None:
            self.limit.check()

    def _run_bucketed(self, workload: Any, batches: Iterator[Any], batch_size: int, resume: bool) -> None:
        """Sorted by token count, then run in batches. A workload that hands out its token rows
        (``models.hf.HFText.token_rows``) tokenizes each text once, here, and pads each batch from the rows;
        any other workload counts tokens here and tokenizes each batch again."""
        chunks: list[Any] = []
        lengths: list[Any] = []
        # the workload's own class, not what a wrapper forwards (a generation job's prompts are not token rows)
        rows = workload.token_rows if hasattr(type(workload), "token_rows") else None
        for record_batch in batches:
            self.id_chunks.append(record_batch.column(0))
            texts = record_batch.column(1).to_pylist()
            counted = rows(texts) if rows is not None and texts else None
            if counted is not None:
                chunks.append(counted[0])
                lengths.append(counted[1])
            elif texts:  # None holds for the whole workload: the first texts decide
                rows = None
                chunks.append(record_batch.column(1))
                lengths.append(np.asarray(workload.token_lengths(texts), dtype=np.int64))
        sizes = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        self.order = np.argsort(sizes, kind="stable")
        if rows is None:
            column = pa.chunked_array(chunks, pa.string()).take(numpy_array(self.order))
            batched = (column.slice(i, batch_size).to_pylist() for i in range(0, len(column), batch_size))
        else:  # each text's ids: flat[ends[i] - sizes[i]:ends[i]]
            flat, ends = np.concatenate(chunks), np.cumsum(sizes)
            batched = ([flat[e - n:e] for e, n in zip(ends[part].tolist(), sizes[part].tolist())]
                       for part in (self.order[i:i + batch_size] for i in range(0, len(self.order), batch_size)))
        for chunk in batched:
            _run_one(workload, chunk, resume, self.outputs, self.progress, None if rows is None else workload.pad_rows)
            self._check_limit()

    def read_remaining_ids(self) -> None:
        """After a failure (outside the measured region): read the ids the pass did not reach, so the row still
        records the whole pass order."""
        for record_batch in getattr(self, "_batches", ()):
            self.id_chunks.append(record_batch.column(0))

    @property
    def columns(self) -> list[str]:
        """The corpus copy's columns the pass reads."""
        return ["id", "text"] if self.prompts is None else self.prompts.columns

    @property
    def expected(self) -> int:
        return sum(len(c) for c in self.id_chunks)

    def ordered_ids(self) -> Any:
        """Every id read so far, in pass order (an Arrow string array); built once for the ids read (the writer,
        the order hash and a failure's document all ask for it after the pass)."""
        key = (len(self.id_chunks), self.order is None)
        if self._ordered is None or self._ordered[0] != key:
            ids = pa.concat_arrays([c.cast(pa.string()) for c in self.id_chunks]) if self.id_chunks else \
                string_array([])
            self._ordered = (key, ids if self.order is None else ids.take(numpy_array(self.order)))
        return self._ordered[1]

    @property
    def probs(self) -> np.ndarray:
        """The completed inputs' probabilities, in pass order (rows × classes, float32)."""
        if not self.outputs:
            return np.zeros((0, self.n_classes), dtype=np.float32)
        k = self.n_classes
        if all(type(o) is np.ndarray and o.ndim == 2 and o.shape[1] == k and o.dtype.kind == "f"
               for o in self.outputs):  # float rows: one copy, no conversion per batch
            return np.concatenate(self.outputs, dtype=np.float32, casting="same_kind")
        return np.concatenate([np.asarray(o, dtype=np.float32).reshape(-1, k) for o in self.outputs])


def order_hash(ids: Any) -> str:
    """The digest of the ids in the order the pass wrote them (C1; :mod:`iteralab.common.digest`), from the
    Arrow array: a pass over the corpus in file order has the corpus's ``order_hash``."""

    return string_digest(ids)


def first_texts(corpus_path: str, options: ReadOptions, n: int, prompts: Any = None) -> list[str]:
    """The first ``n`` texts (warm-up), read in small pieces: parsing a pass's whole first block for a few
    hundred texts would cost a tenth of a second per pass. ``prompts``: a generation job's renderer (its
    rendered prompts, as the pass reads them)."""
    texts: list[str] = []
    columns = ["id", "text"] if prompts is None else prompts.columns
    for record_batch in _text_batches(corpus_path, options, columns, block_size=WARMUP_BLOCK):
        record_batch = record_batch.slice(0, n - len(texts))
        texts.extend((record_batch if prompts is None else prompts(record_batch)).column(1).to_pylist())
        if len(texts) >= n:
            break
    return texts


def execute_pass(spec: PassSpec | dict[str, Any], clock: Any = None, startup: Startup | None = None,
                 sync: Any = None) -> dict[str, Any]:
    """Run one pass described by ``spec`` (built by the runner, or its JSON form); return its result record
    (the JSON form of a :class:`~iteralab.campaign.records.PassResult`).

    ``sync`` is set in a data-parallel worker (:mod:`iteralab.campaign.engines.parallel`): after warm-up
    ``sync.ready()`` waits until every worker is ready and returns this worker's shard (a row range);
    ``sync.finished(pass_run, error)`` reports, right after the measured region, that the shard's predictions are on
    the host.

    Every phase is timed by :func:`iteralab.models.device.timed` (synchronize, read, body, synchronize, read)
    with one clock, injectable as ``clock`` (an object with ``now()``, default ``time.perf_counter``)."""

    clock = clock or dev.PERF_CLOCK
    spec = PassSpec.coerce(spec)
    startup = startup if startup is not None else {}
    result = started(spec.pass_id, startup=startup)
    device = None
    try:
        device = seeded_device(spec, startup)
        workload = load_timed(spec, device, clock, result["phases"], result["notes"])
        result["workload"], result["file_hashes"] = workload.describe(), workload.file_hashes()
    except Exception as exc:  # a load failure is a failed pass row, with its error
        return _failed(result, exc, "load", "failed while loading", device)
    try:
        warm_texts, last_warm_s = warm_up(spec, workload, device, clock, result["phases"], result["notes"])
    except Exception as exc:
        return _failed(result, exc, "warmup", "failed during warm-up", device)
    if spec.check_only:  # the runner's first-batch check: the warm-up was the whole of it
        return {**result, "status": "ok"}

    beacon = Beacon.warmed_up(spec.scratch_dir, spec.pass_id, last_warm_s, len(warm_texts))  # for the display
    rows = sync.ready() if sync is not None else None  # data-parallel: wait for every worker, get the shard
    limit_s, basis, limit_record = _fix_limit(spec, result["notes"], last_warm_s, len(warm_texts), rows)
    if limit_record is not None:
        result["pass_limit"] = limit_record.to_json()
    pass_run, measured_error = _measure(spec, workload, device, clock, result, limit_s, basis, rows, sync, beacon)
    if spec.variant["compile"] and hasattr(workload, "compile_record"):  # after warm-up and pass: what ran compiled
        result["workload"]["compile"] = workload.compile_record()
    _record_outcome(result, pass_run, measured_error)
    _write_predictions(spec, pass_run, clock, result)
    if measured_error is None:
        report = SinkReport()
        pass_run.sink.after_pass(spec, workload, clock, report)  # e.g. recall_at_k's queries: after the file
        report.into(result)
        result["status"] = "ok"
    return result


def _failed(result: dict[str, Any], exc: BaseException, kind: str, when: str, device: Any) -> dict[str, Any]:
    """A pass that failed before its measured region: the error, its kind (an out-of-memory error is ``oom``), and
    whether it left the device unusable (``device_error``: the next pass needs a fresh process)."""

    result["error"] = error_text(exc)
    result["error_kind"] = "oom" if _is_oom(exc) else kind
    result["notes"].append(f"{when}: {result['error']}")
    broken = dev.device_error(device) if device is not None else None
    if broken is not None:
        result["device_error"] = broken
    return result


def corpus_options(spec: PassSpec) -> ReadOptions:
    """How a pass reads its corpus copy (the columns the runner wrote, the campaign's classes)."""
    return read_options(id_column="id", text_column="text", label_column="label", classes=spec.classes)


def seeded_device(spec: PassSpec, startup: Startup, threads: int | None = None,
                  assigned: Callable[[], Any] | None = None) -> Any:
    """Seeds the generators and resolves the device; the time it takes is the start-up's ``runtime_s``.
    ``threads``: torch's thread count, set first (a Ray actor's); ``assigned``: the device, asked of the cluster
    that assigned it (a Ray actor's card) instead of resolved from the variant's name."""

    seed = int(spec.seed)
    t0 = time.perf_counter()
    np.random.seed(seed % (2**32))
    if spec.model["kind"] == "callable":
        # The callable owns its model, device and seeds: the harness runs on the host and never imports torch.
        device: Any = dev.HOST
    else:
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        torch.manual_seed(seed)
        if spec.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        device = assigned() if assigned is not None else dev.resolve_device(spec.variant.get("device") or spec.device)
    startup["runtime_s"] = time.perf_counter() - t0
    return device


def workload_spec(spec: PassSpec, device: Any) -> WorkloadSpec:
    """The one description of the pass's model load: the campaign's model record, the variant's settings, the
    device, and the task's options as the job's kind gives them."""
    return WorkloadSpec.of(spec.model, spec.variant, spec.classes, device,
                           kind_named(spec.kind).workload_options(spec.model))


def load_timed(spec: PassSpec, device: Any, clock: Any, phases: dict[str, float | None], notes: list[str]) -> Any:
    """The timed load phase (``phases["load_s"]``; a precision note): the workload, as the job's kind has a pass
    drive it (the caller records its description and file hashes)."""

    # a rerun's carried callable module is imported inside the load phase, as the module found here would be
    with dev.timed(device, clock) as loading, carried_modules(spec.carried_modules or {}):
        workload = kind_named(spec.kind).pass_workload(factory.load_workload(workload_spec(spec, device)), spec.model)
    phases["load_s"] = loading.seconds
    if spec.model["kind"] != "callable":  # a callable owns its device and precision: nothing the harness can say
        notes.extend(filter(None, [dev.precision_note(spec.variant["precision"], device)]))
    return workload


def warm_up(spec: PassSpec, workload: Any, device: Any, clock: Any, phases: dict[str, float | None], notes: list[str],
            warm_texts: list[str] | None = None) -> tuple[list[str], float | None]:
    """Warm-up (R5): the first `inputs` texts of the corpus (``warm_texts``: already read, by a Ray driver), `passes`
    times, with the variant's batch size; the first repetition of a compiled variant is its ``compile_s``. Returns
    the texts and the last repetition's time: what the pass time limit projects from (run.pass_timeout)."""

    variant = spec.variant
    batch_size = int(variant["batch_size"])
    warm = spec.warmup
    last_warm_s = None
    declared = warm["inputs"] > 0 and warm["passes"] > 0
    if warm_texts is None:
        warm_texts = first_texts(spec.corpus_path, corpus_options(spec), int(warm["inputs"]),
                                 kind_named(spec.kind).prompts(spec.model)) if declared else []
        where: str | None = spec.corpus_path  # an error names its document, read from the corpus copy
    else:
        declared, where = declared and bool(warm_texts), None
    if declared:
        for i in range(warm["passes"]):
            with dev.timed(device, clock) as warming:
                for start in range(0, len(warm_texts), batch_size):
                    try:
                        workload.infer(workload.tokenize(warm_texts[start:start + batch_size]))
                    except RowError as exc:  # the warm-up has failed: its time no longer matters
                        if where is None:
                            raise
                        raise documents.in_warmup(exc, where, start) from None
            elapsed = last_warm_s = warming.seconds
            if i == 0 and variant["compile"]:
                phases["compile_s"] = elapsed  # first warm-up call compiles: recorded as compilation
            else:
                phases["warmup_s"] = (phases["warmup_s"] or 0.0) + elapsed
    else:
        notes.append("warm-up: none (protocol declares 0 warm-up inputs or passes)")
    if not variant["compile"]:
        notes.append("compile_s: empty, the variant does not compile")
    return warm_texts, last_warm_s


def _fix_limit(spec: PassSpec, notes: list[str], last_warm_s: float | None, warm_inputs: int,
               rows: tuple[int, int] | None) -> tuple[float | None, str | None, LimitRecord | None]:
    """Fixed before the measured region: the absolute limit, or this pass's own projection from its warm-up over
    the documents it will process (a data-parallel worker: its shard); how it was projected, and its record."""
    limit_s, limit_record = pass_limit(spec, last_warm_s, warm_inputs,
                                       rows[1] - rows[0] if rows is not None else spec.documents)
    if limit_record is not None and limit_record.limit_s is None:
        notes.append(f"pass time limit: {limit_record.reason}")
    return limit_s, limit_basis(limit_record), limit_record


def _measure(spec: PassSpec, workload: Any, device: Any, clock: Any, result: dict[str, Any], limit_s: float | None,
             basis: str | None, rows: tuple[int, int] | None, sync: Any,
             beacon: Any = None) -> tuple[MeasuredPass, BaseException | None]:
    """The measured region, then what is read right after it: peaks, concurrent load, the GPU scope."""

    variant, phases = spec.variant, result["phases"]
    measured_error: BaseException | None = None
    options = corpus_options(spec)
    batch_size = int(variant["batch_size"])
    kind = kind_named(spec.kind)  # what the pass reads (its prompts) and writes (its sink)
    pass_run = MeasuredPass(beacon, kind.sink(Path(spec.prediction_dir) / file_name(spec.pass_id), spec.classes),
                            kind.prompts(spec.model))
    gpu_scope = dev.GpuEvents(device)  # CUDA events, created outside the timed region; a labelled GPU scope
    machine_before = dev.load_snapshot()  # what else uses the machine: read outside the timed region
    dev.reset_peaks(device)
    try:
        with dev.timed(device, clock) as measured:
            limit = Limit(clock, limit_s, basis)
            gpu_scope.record_start()
            pass_run.run(workload, spec.corpus_path, options, batch_size, bool(variant["bucketing"]),
                         bool(variant["resume"]), len(spec.classes), limit, rows)
            gpu_scope.record_stop()
        phases["pass_s"] = measured.seconds
    except Exception as exc:
        measured_error = exc
    broken = dev.device_error(device) if measured_error is not None else None
    if sync is not None:  # data-parallel: this shard's predictions are on the host
        sync.finished(pass_run, measured_error)
    if broken is None:
        result["memory"] = dev.read_peaks(device)
    else:  # a sticky device error: every further call would raise it; the row keeps the first error
        result["memory"] = dev.peaks_not_read(device, f"the device is unusable after the error ({broken})")
        result["device_error"] = broken
        result["notes"].append(f"device unusable after the error ({broken}): peaks and GPU scope not read; the "
                               "next pass runs in a fresh process")
    result["concurrent_load"] = dev.concurrent_load(machine_before, dev.load_snapshot(), phases["pass_s"])
    if device.type == "cuda":  # kept apart from `phases`: a GPU-side scope is never a pass time (R3)
        result["gpu_scope"] = gpu_scope.result(completed=measured_error is None)
    return pass_run, measured_error


def _record_outcome(result: dict[str, Any], pass_run: MeasuredPass, measured_error: BaseException | None) -> None:
    """Completed inputs, retries, and a failed measured pass's error and notes."""
    progress = pass_run.progress
    notes = result["notes"]
    if measured_error is not None:
        pass_run.read_remaining_ids()
        measured_error = documents.in_pass(measured_error, pass_run)
    result["completed"] = progress.completed
    result["retries"] = progress.retries
    if progress.retries:
        notes.append(f"resume variant: {progress.retries} failing batch(es) retried in halves")
    if measured_error is not None:
        result["error"] = error_text(measured_error)
        result["error_kind"] = ("oom" if _is_oom(measured_error) else
                                "timeout" if isinstance(measured_error, PassTimeout) else "pass")
        notes.append(f"failed after {progress.completed} of {pass_run.expected} inputs: {result['error']}; "
                     "no retry with a smaller batch")
        notes.append("pass_s: empty, the measured pass did not complete")


def _write_predictions(spec: PassSpec, pass_run: MeasuredPass, clock: Any, result: dict[str, Any]) -> None:
    """Writing (outside the measured region): the sink finishes the file of the completed rows, in corpus order,
    atomically; the order hash is the pass order's."""

    t0 = clock.now()
    ids = pass_run.ordered_ids()
    result["expected"] = len(ids)
    # The pass order is hashed on a second thread while the file is finished (both run outside the GIL, and
    # nothing is measured any more): the wall time of the two is that of the longer.
    with ThreadPoolExecutor(max_workers=1) as pool:
        hashed = pool.submit(order_hash, ids) if len(ids) else None
        report = SinkReport()
        pass_run.sink.finish(pass_run, report)
        report.into(result)
        result["phases"]["writing_s"] = clock.now() - t0
        result["order_hash"] = hashed.result() if hashed is not None else None


def record_runtime_memory(spec: PassSpec, startup: Startup) -> None:
    """The runtime's own resident memory (interpreter + libraries, no model yet), read once by a pass worker
    before it loads the model, into its start-up record: the memory estimate of every later command uses this
    journaled value, never a new measurement. A callable owns its model: nothing to record."""
    if spec.model["kind"] == "callable":
        return
    if "runtime_rss_bytes" in startup:  # a forked worker: its template read it, after the same imports, before
        return  # any fork (a forked worker would read less), and handed it over in the start-up record

    t0 = time.perf_counter()
    startup["runtime_rss_bytes"] = runtime_overhead(runtime_imports()).bytes
    startup["runtime_imports_s"] = time.perf_counter() - t0


def worker_main(argv: list[str], startup: Startup | None = None) -> int:
    """``python -m iteralab.campaign.engines.passes SPEC.json RESULT.json``: run one pass in a fresh process.

    ``startup`` is given by a worker forked from a template (:mod:`iteralab.campaign.engines.prefork`): its process
    start is the fork, its imports were made by the template, and the runtime's memory read there."""
    spec_path, result_path = argv
    started = time.perf_counter()
    spec = PassSpec.from_json(json.loads(Path(spec_path).read_text(encoding="utf-8")), spec_path)
    spawned = spec.spawned_at
    # Start-up phases, reported in the journal (R2): they occupy rental time, outside every pass phase.
    if startup is None:
        startup = {"process_start_s": _IMPORT_WALL - spawned if isinstance(spawned, (int, float)) else None,
                   "imports_s": started - _IMPORT_START}
    t0 = time.perf_counter()
    environment: dict[str, Any] | None = None
    unread = None
    try:
        environment = environment_manifest(runtime=not owns_device(spec.model["kind"]), git=spec.record_git)
    except Exception as exc:  # the pass still runs; its row says the environment was not read, and why
        unread = error_text(exc)
    startup["environment_s"] = time.perf_counter() - t0
    record_runtime_memory(spec, startup)
    try:
        result = execute_pass(spec, startup=startup)
    except Exception as exc:  # unexpected: still leave a failure record behind
        result = failure(spec.pass_id, error_text(exc), "internal", completed=None, retries=None,
                         notes=[traceback.format_exc(limit=3).replace("\n", " | ")])
    if unread is not None:
        result["notes"].append(f"environment: not read ({unread})")
    if environment is not None and isinstance(environment.get("determinism"), dict) and "torch" in sys.modules:
        # read after the pass applied the protocol's determinism options, not before (as configured, not default)

        environment["determinism"] = determinism_settings()
    result["environment"] = environment
    result.setdefault("startup", startup)
    write_json_atomic(result_path, result)
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess in tests
    sys.exit(worker_main(sys.argv[1:]))
