"""The verified pass on Ray Data (X4): the same workload code, run by a Ray actor pool, the same prediction file.

The runner's process is the Ray driver. :class:`RayEngine` is campaign start-up (R2): it starts a local Ray
(``ray.init(num_cpus=…)``) or connects to ``run.ray_address`` once per ``run``, refuses an actor layout that
leaves no CPU for the read tasks, and shuts Ray down at the end; both times are journaled. One pass:

    read the campaign's corpus copy with Ray Data → streaming repartition into at least ``BLOCKS_PER_ACTOR``
    blocks per actor → ``map_batches`` with the variant's batch size on ``ActorPoolStrategy(size=actors)``:
    each actor seeds, loads the workload and warms up by the protocol's rule in its constructor, with the pass
    core of a local pass (``engines.passes``), timed there (the pass's start-up phases) → the driver hands the
    blocks, in the order they arrive, to the kind's pass sink → completeness from the ids → the prediction file,
    written atomically.

Ray does not promise row order, so nothing relies on it: a classification pass's blocks are taken in the order
they arrive (the order hash records that order), and its file is written in the corpus copy's order, after the
measured region (``kinds.corpusorder``). An embedding or generation job's pass asks Ray to keep the corpus order
(``preserve_order``), so its vector or text file is the one a single-device pass writes, and the driver streams
the vectors or texts to the file block by block as they arrive (as a local pass does; never a corpus of outputs
held). The engine does not bucket: a bucketed Ray variant is refused when the protocol is read
(``plan.tables.Variant``). A generation job's actors read the columns its prompt names besides and render each
batch's prompts (``kinds.generation.sink``). Ray's unit of failure is the block: any error ends the pass as a failed
row with the inputs received (R8); ``max_errored_blocks`` is forced to 0, and a run that ends without an error
but without every expected id exactly once is a failed row too, never a success.
Ray is imported only when a pass runs on it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from iteralab.campaign.engines.passes import (corpus_options, error_text as text, first_texts, load_timed, order_hash,
                                              seeded_device, warm_up)
from iteralab.campaign.engines.passlimit import LimitRecord, PassTimeout, limit_basis, pass_limit
from iteralab.campaign.engines.rayrecords import (ActorMeta, ActorRecord, ActorRuntime, ActorSpec, ActorStartup,
                                                  RayCluster, RayLayout)
from iteralab.campaign.folder import read_corpus_batches
from iteralab.campaign.kinds.output import file_name
from iteralab.campaign.kinds.registry import kind_named
from iteralab.campaign.kinds.sink import PassSink, SinkReport
from iteralab.campaign.manifest import determinism_settings, environment_manifest, owns_device
from iteralab.campaign.records import STARTUP_PHASES, WORKER_PHASES, PassResult, PassSpec, Startup, started
from iteralab.errors import RunError
from iteralab.models import device as dev
from iteralab.models.cards import card_identity, is_rocm, physical_ids
from iteralab.models.device import resolve_device
from iteralab.plan.engines import layout_problem, ray_gpu_problem, ray_wants_gpu

RAY_HINT = "pip install iteralab[ray]"
#: Blocks per actor after the repartition, so every actor gets data and the last block is short.
BLOCKS_PER_ACTOR = 4
MAX_ROWS_PER_BLOCK = 4096
#: Column carrying the actor's timings (first row of its first batch) and peak RSS (first row of each batch).
META = "_iteralab_meta"


def ray_installed() -> bool:
    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    return importlib.util.find_spec("ray") is not None


def require_ray(protocol: Any, source: str) -> None:
    """Before anything is written: a protocol with a Ray variant needs Ray installed, and a local Ray's CPUs
    must leave room for the reads (a given cluster is checked when connected)."""
    names = [v.name for v in protocol.variants if v.engine == "ray"]
    if not names:
        return
    if not ray_installed():
        raise RunError(f"{source}: variant {names[0]!r} runs on engine \"ray\" but Ray is not installed",
                       hint=f"install the extra: {RAY_HINT}")
    run = protocol.run
    if run.ray_address is None:
        problem = layout_problem(run.ray_actors, run.ray_cpus_per_actor, run.ray_num_cpus or os.cpu_count())
        if problem:
            raise RunError(f"{source}: {problem}", hint="change run.ray_actors or run.ray_cpus_per_actor in a new "
                                                        "protocol version")


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RunError(f"engine \"ray\": Ray is not installed ({exc})", hint=f"install the extra: {RAY_HINT}") from None
    return ray


def read_corpus(ray_data: Any, path: str, columns: list[str] | None = None) -> Any:
    """The campaign's corpus copy as a Ray Dataset of (id, text) strings, or of ``columns`` (a generation job's
    prompt columns besides); the one place that knows its format."""
    columns = columns or ["id", "text"]
    if path.endswith(".parquet"):
        return ray_data.read_parquet(path, columns=columns)

    return ray_data.read_csv(
        path, parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(columns, pa.string()),
                                             include_columns=columns))


def _error_text(exc: BaseException) -> str:
    """The error a user can act on: the exception raised in the workload, unwrapped from Ray's task errors
    (whose own text is a remote traceback)."""

    seen = 0
    while seen < 8:
        inner = getattr(exc, "cause", None) or (exc.__cause__ if type(exc).__name__ == "UserCodeException" else None)
        if not isinstance(inner, BaseException):
            break
        exc, seen = inner, seen + 1
    return text(exc)


class RayEngine:
    """Ray for one ``run`` of a campaign: started when a scheduled pass runs on it, stopped at the end."""

    def __init__(self, protocol: Any) -> None:
        self.run = protocol.run
        self.ray: Any = None
        self.started: RayCluster | None = None
        #: the Ray variants, each with its device name (a GPU variant needs a cluster with GPUs)
        self.variants = [(v.name, v.device or protocol.run.device) for v in protocol.variants if v.engine == "ray"]
        self.gpus = 0.0

    @classmethod
    def for_slots(cls, protocol: Any, variants: list[str]) -> RayEngine | None:
        """Started now (campaign start-up) when one of ``variants`` (the slots still to run) is a Ray variant."""
        if not any(protocol.variant(name).engine == "ray" for name in variants):
            return None
        engine = cls(protocol)
        engine.start()
        return engine

    def start(self) -> None:
        ray = self.ray = _import_ray()
        run = self.run
        if ray.is_initialized():
            ray.shutdown()  # a Ray left by an earlier campaign run in this process: this campaign starts its own
        t0 = time.perf_counter()
        where = run.ray_address
        if where is None:
            # The local cluster's workers see the driver's import path (the workload's callable, the code).
            # address="local": always a Ray of its own, never a cluster another job left running on this machine.
            paths = [p for p in (os.environ.get("PYTHONPATH"), os.getcwd()) if p]
            ray.init(address="local", num_cpus=run.ray_num_cpus or os.cpu_count(), runtime_env={"env_vars": {
                "PYTHONPATH": os.pathsep.join(paths)}}, include_dashboard=False, log_to_driver=False,
                     logging_level="warning")
        else:
            try:
                ray.init(address=where, include_dashboard=False, log_to_driver=False, logging_level="warning")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RunError(f"run.ray_address {where!r}: cannot connect to the Ray cluster ({exc})",
                               hint="start the cluster (ray start --head) or fix the address; a cluster with "
                                    "token authentication (Ray's default) also needs RAY_AUTH_MODE=token and its "
                                    "token (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)") from None
        init_s = time.perf_counter() - t0
        resources = ray.cluster_resources()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.started = RayCluster(init_s, ray.__version__, where or "local (started by the runner)", len(nodes),
                                  resources.get("CPU", 0.0), resources.get("GPU", 0.0), RayLayout.of(run))
        self.gpus = float(resources.get("GPU", 0.0) or 0.0)
        problem = layout_problem(run.ray_actors, run.ray_cpus_per_actor, resources.get("CPU", 0.0)) or \
            ray_gpu_problem(self.variants, resources, where or "local")
        if problem:
            self.stop()
            raise RunError(f"run.ray_address {where or 'local'}: {problem}",
                           hint="change run.ray_actors or run.ray_cpus_per_actor in a new protocol version")

    def stop(self) -> float:
        """Ray shut down; returns the seconds it took (the journal's ``engine_stopped``)."""
        t0 = time.perf_counter()
        if self.ray is not None and self.ray.is_initialized():
            self.ray.shutdown()
        return time.perf_counter() - t0

    def run_pass(self, spec: PassSpec) -> PassResult:
        """Run one pass described by the runner's ``spec``; return its result."""

        result = _RayPass(self, spec).execute()
        environment = environment_manifest(runtime=not owns_device(spec.model["kind"]))
        # What only the process running the model knows (threads, determinism options as applied): the actor's.
        runtime: ActorRuntime | None = result.pop("actor_runtime", None)
        if runtime is not None:
            environment["torch_threads"], environment["determinism"] = runtime.torch_threads, runtime.determinism
            cpu = (environment.get("device_inventory") or {}).get("cpu")
            if isinstance(cpu, dict):
                cpu["torch_threads"], cpu["torch_interop_threads"] = runtime.torch_threads, runtime.interop
        # As a worker's result reaches the runner (through JSON): plain values, e.g. torch's version as a string.
        result["environment"] = json.loads(json.dumps(environment))
        return PassResult.from_json(result)


class _RayPass:
    def __init__(self, engine: RayEngine, spec: PassSpec) -> None:
        self.engine, self.spec, self.run = engine, spec, engine.run
        self.kind = kind_named(spec.kind)
        #: where the blocks go (the kind's pass sink): streamed to the file as they arrive, or held
        self.sink = self.kind.sink(Path(spec.prediction_dir) / file_name(spec.pass_id), spec.classes)
        self.phases: dict[str, float | None] = dict.fromkeys(WORKER_PHASES)
        self.notes: list[str] = []
        #: the pass's start-up record: the driver's own readings and one record per actor (``ray_actors``)
        self.startup: dict[str, Any] = {}

    def _configure(self, ray_data: Any) -> None:
        ctx = ray_data.DataContext.get_current()
        ctx.max_errored_blocks = 0  # a dropped block would be a silent loss of inputs: every error fails the pass
        ctx.execution_no_progress_timeout_s = float(self.run.ray_no_progress_timeout_s)
        ctx.wait_for_min_actors_s = max(1, math.ceil(self.run.ray_no_progress_timeout_s))
        ctx.raise_original_map_exception = True
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        # a streamed file (an embedding job's vectors, a generation job's texts) in corpus order (the same file as a
        # single-device pass); held outputs (a classifier's) stay in the order received
        ctx.execution_options.preserve_order = self.sink.streams

    def _dataset(self, ray_data: Any, expected: int, warm_texts: list[str]) -> Any:
        run, spec = self.run, self.spec
        rows_per_block = max(1, min(MAX_ROWS_PER_BLOCK, math.ceil(expected / (run.ray_actors * BLOCKS_PER_ACTOR))))
        # A GPU variant's actors ask Ray for their cards: Ray reserves them and shows each actor the card it assigned
        gpu = ray_wants_gpu(spec.variant.get("device") or spec.device, self.engine.gpus)
        # the actors' constructor arguments: the pass spec, the threads, the file's path, whether it has a card
        actor_spec = ActorSpec(spec, run.ray_threads_per_actor, str(self.sink.target), bool(gpu))
        # The actor runs like a local pass worker: at the runner's priority (Ray starts its workers at nice 15 so
        # they yield to Ray's own services, and a nice-15 pass loses its cores to every runnable nice-0 thread,
        # the driver's included), and with the OpenMP/MKL runtimes started for the torch threads it will use
        # (Ray sets OMP_NUM_THREADS to the actor's CPUs). Ray merges these with the job's runtime environment.
        env = {"RAY_worker_niceness": "0"}
        if run.ray_threads_per_actor:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(run.ray_threads_per_actor)
        cards: dict[str, float] = {"num_gpus": run.ray_gpus_per_actor} if gpu else {}
        with warnings.catch_warnings():
            # Ray 2.60 has no named parameter for it yet: without max_restarts=0 a lost actor is replaced and its
            # tasks silently retried (R8: a lost actor fails the pass). Ray warns this form goes in Ray 2.64.
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            renderer = self.kind.prompts(spec.model)
            return read_corpus(ray_data, spec.corpus_path, renderer.columns if renderer else None).repartition(
                target_num_rows_per_block=rows_per_block).map_batches(
                RayPredictor, fn_constructor_kwargs={"spec": actor_spec, "warm_texts": warm_texts},
                batch_size=int(spec.variant["batch_size"]), batch_format="pyarrow", zero_copy_batch=True,
                compute=ray_data.ActorPoolStrategy(size=run.ray_actors), num_cpus=run.ray_cpus_per_actor,
                max_restarts=0, runtime_env={"env_vars": env}, **cards)

    def execute(self) -> dict[str, Any]:
        spec, run = self.spec, self.run
        ray = self.engine.ray
        expected_ids, warm_texts = self._before_measuring()
        result = {**started(spec.pass_id, startup=self.startup, engine="ray"), "phases": self.phases,
                  "notes": self.notes, "expected": len(expected_ids)}
        self._configure(ray.data)
        dataset = self._dataset(ray.data, len(expected_ids), warm_texts)
        limit = spec.pass_timeout_s
        relative = WarmupLimit(spec, len(warm_texts), len(expected_ids)) \
            if spec.pass_timeout_factor is not None else None
        id_chunks, meta_chunks, error, submitted, finished = _receive(dataset, limit, relative, self.sink)
        actors = _actor_records(meta_chunks)
        self._startup_phases(actors, submitted)
        if relative is not None and relative.record is not None:
            result["pass_limit"] = relative.record.to_json()
        ids = pa.chunked_array(id_chunks, pa.string()).combine_chunks() if id_chunks else pa.array([], pa.string())
        result["completed"] = len(ids)
        ready = [a.startup.ready_at for a in actors.values() if a.startup is not None and a.startup.ready_at is not None]
        if error is None and len(actors) > run.ray_actors:
            error = RuntimeError(f"{len(actors)} actors returned batches for a pool of {run.ray_actors}: an actor "
                                 "was lost and replaced, its tasks retried")
        result["status"], result["error"], result["error_kind"] = self._outcome(ids, expected_ids, error, finished,
                                                                                ready)
        first, result["memory"] = _actor_cells(actors)
        if first is not None:
            result["workload"], result["file_hashes"] = first.workload, first.file_hashes
            result["actor_runtime"] = first.runtime
        self._write(result, ids, expected_ids)
        return result

    def _before_measuring(self) -> tuple[Any, list[str]]:
        """The engine's note; outside the measured region: the expected ids and the warm-up texts, read by the
        driver."""

        spec, run, notes = self.spec, self.run, self.notes
        ray = self.engine.ray
        layout = (f"{run.ray_actors} actor{'s' if run.ray_actors != 1 else ''} × {run.ray_cpus_per_actor:g} CPU, "
                  f"torch threads {run.ray_threads_per_actor or 'by Ray (floor of the CPUs)'}")
        order = "corpus order (Ray's preserve_order)" if self.sink.streams else \
            "as received by the driver, the file in corpus order"
        notes.append(f"engine: ray {ray.__version__} ({self.engine.started and self.engine.started.address}), {layout}; row order "
                     f"{order}")
        expected_ids = _corpus_ids(spec.corpus_path)
        warm = spec.warmup
        warm_texts = first_texts(spec.corpus_path, corpus_options(spec), int(warm["inputs"]),
                                 self.kind.prompts(spec.model)) \
            if warm["inputs"] > 0 and warm["passes"] > 0 else []
        if not warm_texts:
            notes.append("warm-up: none (protocol declares 0 warm-up inputs or passes)")
        return expected_ids, warm_texts

    def _outcome(self, ids: Any, expected_ids: Any, error: BaseException | None, finished: float | None,
                 ready: list[float]) -> tuple[str, str | None, str | None]:
        """The pass's status, error and error kind; its time, and the notes on what was not measured."""

        phases, notes = self.phases, self.notes
        status, text, kind = "failed", None, None
        if error is None:
            problem = _completeness(ids, expected_ids)
            if problem:
                text, kind = problem, "incomplete"
                notes.append(f"failed: {problem}")
            else:
                # From the first actor ready (model loaded, warmed up) to the last block on the driver.
                phases["pass_s"] = finished - min(ready) if ready and finished is not None else None
                status = "ok"
        else:
            text = _error_text(error)
            kind = "timeout" if isinstance(error, PassTimeout) else \
                "stalled" if type(error).__name__ == "ExecutionTimeoutError" else "pass"
            notes.append(f"failed after {len(ids)} of {len(expected_ids)} inputs: {text}; a Ray block "
                         "failed, its inputs and the blocks not yet received are not counted; no retry")
        if phases["pass_s"] is None:
            notes.append("pass_s: empty, the measured pass did not complete")
        if not self.spec.variant["compile"]:
            notes.append("compile_s: empty, the variant does not compile")
        notes.append("concurrent load: not measured for a Ray pass (its work runs in Ray's processes, which the "
                     "machine-wide reading cannot tell from other load)")
        return status, text, kind

    def _write(self, result: dict[str, Any], ids: Any, expected_ids: Any) -> None:
        """Writing (outside the measured region): the prediction file in corpus order (the sink's: a streamed
        file closed, held outputs written), and the order hash of the order received."""

        t0 = time.perf_counter()
        report = SinkReport()
        self.sink.finish_received(report, ids, expected_ids)
        report.into(result)
        self.phases["writing_s"] = time.perf_counter() - t0
        result["order_hash"] = order_hash(ids) if len(ids) else None

    def _startup_phases(self, actors: dict[str, ActorRecord], submitted: float) -> None:
        """The actors' start-up phases (R2), as they timed them: load and warm-up of the slowest actor; the
        time from submitting the dataset to the first actor's constructor (scheduling, process start)."""
        records = [a.startup for a in actors.values() if a.startup is not None]
        self.startup["ray_actors"] = [r.entry(submitted) for r in records]
        if not records:
            return
        self.startup["ray_actor_start_s"] = min(r.created_at or submitted for r in records) - submitted
        for phase in STARTUP_PHASES:
            values = [getattr(r, phase) for r in records if getattr(r, phase) is not None]
            self.phases[phase] = max(values) if values else None



class WarmupLimit:
    """``run.pass_timeout`` ("Nx warmup") on Ray. The actors warm up in their constructors, so the driver learns the
    projection from the first start-up record that comes back (an actor's first batch): N × that actor's last
    warm-up repetition ÷ the warm-up inputs × the corpus's documents (a pool of several actors shares the corpus,
    so this single-actor projection is the generous side). It is then checked between blocks, from that actor's
    ready time (where the pass time starts). ``clock`` reads the wall clock, as the actors' timestamps do."""

    def __init__(self, spec: PassSpec, warm_inputs: int, documents: int, clock: Any = time.time) -> None:
        self.spec, self.warm_inputs, self.documents, self.clock = spec, warm_inputs, documents, clock
        self.seconds: float | None = None
        self.record: LimitRecord | None = None
        self.start = 0.0

    def check(self, meta: Any) -> None:
        if self.record is None:
            for cell in pc.drop_null(meta).to_pylist():
                startup = ActorMeta.from_cell(cell).startup
                if startup is not None:
                    self.seconds, self.record = pass_limit(self.spec, startup.last_warmup_s, self.warm_inputs,
                                                           self.documents)
                    self.start = float(startup.ready_at or 0.0)
                    break
        if self.seconds is not None and self.clock() - self.start > self.seconds:
            raise PassTimeout(self.seconds, limit_basis(self.record))


def _corpus_ids(path: str) -> Any:
    chunks = [b.column(0).cast(pa.string()) for b in read_corpus_batches(path, ["id"])]
    return pa.chunked_array(chunks, pa.string()).combine_chunks() if chunks else pa.array([], pa.string())


def _completeness(ids: Any, expected: Any) -> str | None:
    """Why the received ids are not exactly the expected set (each once), or None."""

    distinct = pc.count_distinct(ids).as_py()
    outside = len(ids) - pc.sum(pc.is_in(ids, value_set=expected)).as_py() if len(ids) else 0
    if len(ids) == len(expected) and distinct == len(ids) and not outside:
        return None
    return (f"Ray returned {len(ids)} of {len(expected)} inputs without an error ({len(ids) - distinct} repeated, "
            f"{outside} not in the corpus); the pass is not counted")


def _actor_records(meta_chunks: list[Any]) -> dict[str, ActorRecord]:
    """Per actor: its start-up record and its largest peak RSS, from the non-null cells of the meta column."""

    actors: dict[str, ActorRecord] = {}
    for chunk in meta_chunks:
        for cell in pc.drop_null(chunk).to_pylist():
            meta = ActorMeta.from_cell(cell)
            entry = actors.setdefault(meta.actor, ActorRecord())
            if meta.startup is not None:
                entry.startup = meta.startup
            if meta.rss:
                entry.rss = max(entry.rss or 0, meta.rss)
    return actors

def _receive(dataset: Any, limit: float | None, relative: WarmupLimit | None,
             sink: PassSink) -> tuple[list[Any], list[Any], BaseException | None, float, float | None]:
    """The measured region on the driver: every block as Ray returns it, handed to the pass's sink, until the last
    one or the first error (or the pass time limit). Returns the ids and actor records received, the error, and
    the wall-clock submission and end."""

    id_chunks: list[Any] = []
    meta_chunks: list[Any] = []
    error: BaseException | None = None
    submitted = time.time()  # wall clock: compared with the actors' own readings (one machine for a local Ray)
    try:
        for block in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            id_chunks.append(block.column("id"))
            sink.receive(block)
            meta_chunks.append(block.column(META))
            if relative is not None:
                relative.check(block.column(META))
            elif limit is not None and time.time() - submitted > limit:
                raise PassTimeout(limit)
        finished = time.time()
    except Exception as exc:  # Ray's unit of failure is the block: the pass fails with what was received
        error = exc
        finished = None
    return id_chunks, meta_chunks, error, submitted, finished


def _actor_cells(actors: dict[str, ActorRecord]) -> tuple[ActorStartup | None, dict[str, int | str | None]]:
    """What the actors recorded: the first one's start-up (its workload and runtime), the largest actor's peak
    memory (the result's ``memory``)."""
    first = next((a.startup for a in actors.values() if a.startup is not None), None)
    rss = [a.rss for a in actors.values() if a.rss]
    return first, {"cpu_peak_rss_bytes": max(rss) if rss else None,
                        "scope": "peak RSS of the largest Ray actor process (max over actors, never summed)",
                        "reason": None if rss else "not measured: no actor returned a batch"}


def _peak_rss() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _ray_gpu_ids() -> list[str]:
    """The GPUs Ray assigned to this actor (physical ids, as Ray's accelerator manager names them)."""
    import ray

    return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]


def ray_assigned_device(assigned: list[str] | None = None) -> Any:
    """The torch device of the card Ray assigned to this actor (``assigned``: Ray's ids, default asked from Ray): its
    position among the cards this process sees. Ray normally shows an actor only its own cards (index 0); with Ray
    told not to set the visibility variables, the assigned physical id is found in the full list."""
    import torch

    assigned = _ray_gpu_ids() if assigned is None else assigned
    if not assigned:
        raise RuntimeError("Ray assigned this actor no GPU, but its variant runs on one (run.ray_gpus_per_actor)")
    visible = physical_ids(torch.cuda.device_count() if torch.cuda.is_available() else 0, is_rocm())
    if assigned[0] not in visible:
        raise RuntimeError(f"Ray assigned GPU {assigned[0]}, but this actor's torch sees {visible or 'no GPU'}")
    return resolve_device(f"cuda:{visible.index(assigned[0])}")


class RayPredictor:
    """The map_batches UDF: one per actor. Loads the workload and warms up in the constructor (timed here, the
    pass's start-up phases), then turns each (id, text) batch into (id, probs) with the same workload code as
    a local pass (tokenize + infer)."""

    def __init__(self, spec: ActorSpec, warm_texts: list[str]) -> None:
        created = time.time()
        pass_spec = spec.pass_spec
        startup: Startup = {}
        device = seeded_device(pass_spec, startup, threads=spec.threads,
                               assigned=ray_assigned_device if spec.gpu else None)
        phases: dict[str, float | None] = dict.fromkeys(WORKER_PHASES)  # the pass core's phases, this actor's own
        self.workload = load_timed(pass_spec, device, dev.PERF_CLOCK, phases, [])
        description, hashes = self.workload.describe(), self.workload.file_hashes()
        _, last_warmup_s = warm_up(pass_spec, self.workload, device, dev.PERF_CLOCK, phases, [], warm_texts)
        kind = kind_named(pass_spec.kind)
        self.prompts = kind.prompts(pass_spec.model)  # e.g. a generation job: each batch's prompts rendered
        self.sink = kind.sink(Path(spec.target), pass_spec.classes)  # what a batch's outputs become (columns)
        self.key = f"{os.getpid()}-{id(self)}"
        ready = time.time()
        runtime = threads = None
        if "torch" in sys.modules and pass_spec.model["kind"] != "callable":
            torch = sys.modules["torch"]
            threads = torch.get_num_threads()
            runtime = ActorRuntime(threads, torch.get_num_interop_threads(), determinism_settings())
        # the card Ray assigned, as Ray names it and as the card identifies itself
        card = {"ray_gpu_ids": _ray_gpu_ids(), **card_identity(device.index or 0)} if spec.gpu else None
        self.startup: ActorStartup | None = ActorStartup(
            created_at=created, ready_at=ready, runtime_s=startup["runtime_s"], load_s=phases["load_s"],
            compile_s=phases["compile_s"], warmup_s=phases["warmup_s"], last_warmup_s=last_warmup_s,
            threads=threads, nice=os.nice(0), omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
            workload=description, file_hashes=hashes, runtime=runtime, card=card)

    def __call__(self, batch: Any) -> Any:
        if self.prompts is not None:
            batch = self.prompts(batch)
        texts = batch.column("text").to_pylist()
        out = self.workload.infer(self.workload.tokenize(texts))
        meta = ActorMeta(self.key, _peak_rss(), self.startup if texts else None)
        if texts:
            self.startup = None
        cells = pa.array([meta.to_cell()] + [None] * (len(texts) - 1), pa.string()) if texts else \
            pa.array([], pa.string())
        return pa.table({"id": batch.column("id").cast(pa.string()), **self.sink.ray_columns(out), META: cells})
