"""The campaign runner (R1–R9): a locked protocol in, a folder of evidence out.

Layout of a campaign folder::

    inputs/protocol.toml, inputs/protocol.toml.lock.json   the locked protocol, as run
    inputs/corpus.csv                                       the comparison corpus (id, text, label, stratum)
                                                            (+ a generation job's reference, and prompt.<name>
                                                            for each column its prompt names)
    inputs/datasets/<name>.csv                              or one copy per dataset (K6, lock.datasets)
    campaign.json                                           fingerprints, schedule, variants (written once)
    manifest.json                                           environment + model + corpus (C3)
    journal.jsonl                                           append-only record of every attempt
    predictions/<pass_id>.parquet                           one file per pass, written atomically
    raw_table.csv                                           regenerated from the journal and the files

Running again on the same folder resumes: finished passes (successes and recorded failures) are kept, and the
slot of a pass that never finished is attempted again under a new attempt number. A pass the user or a scheduler
stopped (SIGINT, SIGTERM, SIGHUP: ``run_interrupted`` in the journal) is an interrupted row that counts for
nothing; a pass whose process was killed otherwise (SIGKILL, power loss) stays an aborted row.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from iteralab.campaign.campaignrecord import (CampaignRecord, ModelRecord, ProtocolStamp, read_campaign,
                                              write_campaign)
from iteralab.campaign.corpuscopy import write_corpus_copies
from iteralab.campaign.engines.registry import (Engine, RayCluster, check_engines, engine_name, engines, start_ray,
                                                worker_templates)
from iteralab.campaign.folder import (
    CAMPAIGN, CATALOG, INPUTS, LOCK, MANIFEST, PREDICTIONS, PROTOCOL, TABLE, corpus_copy)
from iteralab.campaign.journal import JOURNAL_NAME, Journal, read_journal
from iteralab.campaign.kinds.registry import kind_of
from iteralab.campaign.manifest import (
    ObservedFacts, campaign_manifest, check_resume_environment, diff_manifests, env_summary, load_observed,
    write_manifest)
from iteralab.campaign.preflight import preflight
from iteralab.campaign import progress as _progress
from iteralab.campaign.progress import Estimate, PassProgress, Watch, remove_beacons
from iteralab.campaign.records import PassResult, PassSpec
from iteralab.campaign.stopping import RunInterrupted, StopSignals
from iteralab.campaign.verdict import evaluate
from iteralab.campaign.verdict.evaluate import CampaignReads
from iteralab.common.arrow import release_unused
from iteralab.common.files import sha256_file, write_bytes_atomic, write_json_atomic
from iteralab.errors import ProtocolError, RunError
from iteralab.kit.calcul_forfaits import DEFAULT_CATALOG, KitError, load_catalog
from iteralab.lock.carry import carry_model_files
from iteralab.lock.inputs import check_inputs
from iteralab.lock.modules import carried_now
from iteralab.lock.usercode import carry_queries, carry_routine, queries_columns
from iteralab.plan.lockfile import LockedProtocol, open_locked
from iteralab.plan.protocol import Protocol, check_series
from iteralab.plan.schedule import Slot, schedule_slots

#: The run's events: ``(kind, what)``, the watch's ``estimate`` and ``progress`` typed (``campaign.progress``), the
#: runner's own (``start``, ``pass``, ``done``, ``failure``, ``note``, ``end``) flat records of counts, names, seconds
ProgressFn = Callable[[str, Estimate | PassProgress | dict[str, str | float | None]], None]


#: The pass workers' scratch folder inside the campaign (spec and result files; removed when a run ends).
SCRATCH = ".tmp"
#: What a campaign folder holds before campaign.json exists (a run interrupted while copying its inputs).
_OWN_ENTRIES = {INPUTS, PREDICTIONS, JOURNAL_NAME, MANIFEST, TABLE, ".write-probe"}


def _ensure_folder(out: Path) -> None:
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in _OWN_ENTRIES and not p.name.startswith(".tmp"))
        if foreign:
            shown = ", ".join(foreign[:4]) + (" …" if len(foreign) > 4 else "")
            raise RunError(f"{out}: not empty and not a campaign folder (holds {shown})",
                           hint="choose a new or empty --out folder: a campaign folder holds only its own evidence")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / PREDICTIONS).mkdir(exist_ok=True)
        (out / INPUTS).mkdir(exist_ok=True)
        probe = out / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise RunError(f"{out}: output folder is not writable ({exc.strerror})",
                       hint="choose a folder you can write to") from None


def _copy_catalog(locked: LockedProtocol, target: Path) -> dict[str, str | None]:
    """The catalog the protocol names, validated and copied into the folder (so the seal covers it and a folder
    moved to another machine decides the same way; a catalog given later with ``--catalog`` travels beside the
    decision it priced, ``decision-catalog.csv``: :mod:`iteralab.decision.note`)."""

    declared = locked.protocol.catalog.path
    source = locked.where(declared) if declared else DEFAULT_CATALOG
    try:
        catalog = load_catalog(source)
    except KitError as exc:
        raise ProtocolError(f"catalog.path: {exc}", hint=exc.hint) from None
    write_bytes_atomic(target, Path(source).read_bytes())
    return {"file": CATALOG, "source": str(declared) if declared else f"shipped {source.name}",
            "version": catalog.version, "sha256": sha256_file(target)}


def prepare(locked: str | os.PathLike[str] | LockedProtocol, out: str | os.PathLike[str], *,
            rerun: bool = False, earlier: Path | None = None) -> CampaignRecord:
    """Check the lock, the series and every input against its lock fingerprint (a ``rerun`` may use another
    model and catalog), copy the inputs, and write campaign.json + manifest.json (once). ``locked``: the
    locked protocol as read once (:func:`~iteralab.plan.lockfile.open_locked`), or its file, read here.
    ``earlier``: the campaign a rerun repeats, whose carried metric routine the new folder takes."""
    locked = open_locked(locked)
    protocol, lock_entry = locked.protocol, locked.entry
    check_series(protocol, locked.source)
    out = Path(out)
    existing = out / CAMPAIGN
    if existing.exists():
        check_inputs(locked, rerun=rerun)
        campaign = read_campaign(existing, out / PROTOCOL)
        stamp = campaign.protocol
        if stamp.sha256 != lock_entry.sha256:
            raise RunError(
                f"{out}: holds a campaign of protocol {stamp.name!r} version "
                f"{stamp.version} (sha256 {stamp.sha256[:12]}…); "
                f"this protocol is version {protocol.version} (sha256 {lock_entry.sha256[:12]}…)",
                hint="results of different protocol versions are never pooled: use a new --out folder",
            )
        return campaign
    created = not out.exists()
    _ensure_folder(out)
    try:  # the inputs are checked while they are copied: a refused input leaves no folder it created
        datasets, corpus_record, tuning, model_hashes = write_corpus_copies(locked, out, rerun=rerun)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    write_bytes_atomic(out / PROTOCOL, locked.raw)  # the bytes that were hashed and checked against the lock
    write_json_atomic(out / LOCK, {"schema_version": 1, "locks": [lock_entry.to_json()]})
    catalog = _copy_catalog(locked, out / CATALOG)
    # small model files copied, weights by hash (D3), from the hashes the input check just computed
    carried = carry_model_files(locked, out, model_hashes)
    routine = carry_routine((lock_entry.inputs or {}).get("routine"), out, earlier)
    queries = carry_queries((lock_entry.inputs or {}).get("queries"), locked.where(protocol.metric.queries),
                            out, queries_columns(protocol.metric))
    design, slots = schedule_slots(protocol)
    model = protocol.model
    campaign = CampaignRecord(
        kind=kind_of(protocol).name,
        protocol=ProtocolStamp(protocol.name, protocol.version, lock_entry.sha256, lock_entry.locked_at,
                               str(locked.resolved)),
        corpus=corpus_record,
        model=ModelRecord(model.kind, _as_text(locked.where(model.path)), _as_text(locked.where(model.head)),
                          model.callable, model.max_length, model.truncation, model.trust_remote_code,
                          carried["files"], kind_of(protocol).model_record(protocol, locked.where(model.path))),
        tuning=tuning, catalog=catalog, schedule={"design": design, "slots": [s.record() for s in slots]},
        variants=tuple(v.model_dump() for v in protocol.variants),
        series=tuple(s.model_dump() for s in protocol.series),
        datasets=datasets, routine=routine, queries=queries)
    write_campaign(existing, campaign)
    return read_campaign(existing, out / PROTOCOL)  # as a resumed run reads it (JSON-native values)


def _as_text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def pass_spec(campaign: CampaignRecord, protocol: Protocol, out: Path, slot: Slot, pass_id: str) -> PassSpec:
    out = out.resolve()  # absolute: a Ray cluster's workers do not run in the runner's working directory
    return PassSpec(
        pass_id=pass_id,
        kind=kind_of(protocol).name,
        variant=protocol.variant(slot.variant).model_dump(),
        model=campaign.model.to_json(),
        classes=tuple(protocol.corpus.classes),
        corpus_path=str(out / corpus_copy(slot.dataset)),
        prediction_dir=str(out / PREDICTIONS),
        warmup=protocol.warmup.model_dump(),
        pass_timeout_s=protocol.run.pass_timeout_s,
        pass_timeout=protocol.run.pass_timeout,
        pass_timeout_factor=protocol.run.pass_timeout_factor,
        documents=slot_documents(campaign, slot.dataset),
        device=protocol.run.device,
        seed=slot.seed,
        deterministic=protocol.reproduction.deterministic,
        scratch_dir=str(out / SCRATCH),
        queries_path=str(out / campaign.queries["file"]) if campaign.queries else None,
        queries_columns=(campaign.queries or {}).get("columns"),
        carried_modules=carried_now() or None,
    )


def slot_documents(campaign: CampaignRecord, dataset: str | None) -> int | None:
    """How many documents a pass of this slot processes (its corpus source's size: the corpus, or its dataset)."""
    source = campaign.source(dataset)
    return None if source is None else source.size


def _manifest_fields(result: PassResult) -> ObservedFacts:
    """The manifest facts a pass observed that must match the campaign's (C3/C5)."""
    env = dict(result.environment or {})
    env.pop("git", None)  # the working tree may legitimately change between passes of one campaign
    return ObservedFacts(env, result.file_hashes)


def run_passes(protocol: str | os.PathLike[str] | LockedProtocol, out: str | os.PathLike[str], *,
               progress: ProgressFn | None = None, isolation: str | None = None, shared: Any = None,
               keep_unrunnable: bool = False, rerun: bool = False,
               progress_every_s: float | None = None) -> dict[str, Any]:
    """Run (or resume) every scheduled pass, journaled and evaluated one by one. Returns a short summary.
    ``protocol``: the locked protocol as read once (:func:`~iteralab.plan.lockfile.open_locked`), or its file,
    read here. ``shared`` (``evaluate.CampaignReads``) lets the caller reuse what the evaluations read (the raw
    table). ``progress`` also receives ``estimate`` once the run's first warm-up is over, and ``progress`` every
    ``progress_every_s`` seconds while a pass runs (:mod:`campaign.progress`).

    SIGINT, SIGTERM or SIGHUP stop the run (:mod:`campaign.stopping`): the interrupt is journaled and
    :class:`~iteralab.campaign.stopping.RunInterrupted` raised; the campaign is incomplete, and resumable.

    The raw table is derived later, from what this wrote (:func:`iteralab.evidence.run.run_campaign`)."""

    at = _Where()
    with StopSignals() as stop:
        try:
            return _run_passes(protocol, out, stop, at, progress=progress, isolation=isolation, shared=shared,
                               keep_unrunnable=keep_unrunnable, rerun=rerun, progress_every_s=progress_every_s)
        except KeyboardInterrupt as exc:  # RunInterrupted, or Python's own SIGINT outside the main thread
            signum = getattr(exc, "signum", signal.SIGINT)
            if at.journal is not None:
                # after the pass's worker ended: the interrupted attempt is the user's stop, never a failure
                at.journal.append("run_interrupted", signal=signal.Signals(signum).name, pass_id=at.pass_id,
                                  passes_done=at.done, passes_total=at.total)
            raise RunInterrupted(signum, at.done, at.total) from None


@dataclass
class _Where:
    """How far a run got, for the record of its interrupt: the journal once opened, the running pass."""

    journal: Journal | None = None
    pass_id: str | None = None
    done: int | None = None
    total: int | None = None


@dataclass
class _Run:
    """One run of a campaign, as its steps share it: what is fixed once the journal is read, and the
    reference manifest (written by the first successful pass)."""

    protocol: Protocol
    campaign: CampaignRecord
    out: Path
    journal: Journal
    reads: Any
    flight: Any
    engine: Any
    stop: Any
    at: _Where
    emit: ProgressFn
    reference_manifest: ObservedFacts | None
    #: (round, position) -> attempts journaled so far
    attempts: dict[tuple[int, int], int]
    #: variant -> the pass that exceeded the pass time limit first
    timed_out: dict[str, str]
    #: engine name -> the engine that runs a pass spec (:mod:`campaign.engines.registry`)
    engines: dict[str, Engine] | None = None
    #: the first pass of this run that failed (said on the console once)
    first_failure: str | None = None
    #: what a running pass has done, for the progress display (None: no one is listening)
    watch: Watch | None = None


def _run_passes(protocol: str | os.PathLike[str] | LockedProtocol, out: str | os.PathLike[str], stop: Any,
                at: _Where, *, progress: ProgressFn | None, isolation: str | None, shared: Any,
                keep_unrunnable: bool, rerun: bool, progress_every_s: float | None = None) -> dict[str, Any]:
    locked = open_locked(protocol)
    flight = _preflight(locked, keep_unrunnable)  # before anything is written or journaled
    created, fresh = not Path(out).exists(), not (Path(out) / CAMPAIGN).exists()
    campaign = prepare(locked, out, rerun=rerun)
    release_unused()  # the corpus scan's buffers: the runner stays resident for the whole campaign
    out = Path(out)
    shutil.rmtree(out / SCRATCH, ignore_errors=True)  # what a killed run's worker left behind
    run, slots, todo = _open_run(locked.protocol, campaign, out, flight, stop, at, shared,
                                 progress or (lambda kind, info: None))
    run.watch = _watch(run, todo, progress, progress_every_s)
    mode = isolation or run.protocol.run.isolation
    templates = _templates(mode, out)  # process isolation: each pass forked from a worker template (prefork)

    def with_git(spec: PassSpec) -> PassSpec:
        # the code version (git) is read by the pass whose environment becomes the campaign's manifest;
        # later passes are compared without it (_manifest_fields), so they do not run git again
        return spec.with_changes(record_git=run.reference_manifest is None)

    run.engines = engines(mode, templates, run.engine, prepare=with_git)
    try:
        _check_first_batch(run, todo, run.engines["local"], locked.source, created if fresh else None, templates)
        run.emit("start", {"total": len(slots), "todo": len(todo), "done": len(slots) - len(todo)})
        for slot in todo:
            _run_slot(run, slot)
    finally:
        if templates is not None:
            templates.close()
    if run.engine is not None:
        run.journal.append("engine_stopped", engine="ray", shutdown_s=run.engine.stop())
    shutil.rmtree(out / SCRATCH, ignore_errors=True)
    return {"out": str(out), "passes_total": len(slots), "passes_run_now": len(todo),
            "unrunnable": dict(flight.unrunnable)}


def _preflight(locked: LockedProtocol, keep_unrunnable: bool) -> Any:
    """What must hold before anything is written or journaled: the workload loads, each variant runs on this
    machine (or ``keep_unrunnable``), and Ray is there for a Ray variant."""

    flight = preflight(locked)
    if flight.unrunnable and not keep_unrunnable:
        raise RunError(f"{locked.source}: {flight.summary()}",
                       hint="remove them in a new protocol version, run on a machine that can, or run anyway with "
                            "--keep-unrunnable (they are recorded as failed rows)")
    check_engines(locked.protocol, locked.source)
    return flight


def _check_first_batch(run: _Run, todo: list[Slot], run_pass: Engine, source: Any, created: bool | None,
                       templates: Any) -> None:
    """A callable model called on one warm-up batch (the first slot's batch size, at most the warm-up's inputs) in
    a pass's process, before the first pass: its failure there is deterministic and would fail every scheduled
    pass (on a rental, each after loading the model again), so ``run`` refuses in one line naming the cause. A
    model the harness runs itself was checked when the preflight loaded it; a protocol that declares no warm-up
    gets no extra call. The check is journaled (``first_batch_checked``). ``created``: this run made the
    campaign folder (True: the folder, False: its entries, removed on a refusal, once the worker templates ended;
    None: an earlier campaign, kept)."""
    warm = run.protocol.warmup
    if run.protocol.model.kind != "callable" or not (warm.inputs > 0 and warm.passes > 0):
        return  # a protocol without a warm-up has no warm-up batch: the callable is called by the passes only
    slot = next((s for s in todo if s.variant not in run.flight.unrunnable and s.variant not in run.timed_out), None)
    if slot is None:
        return
    inputs = min(int(run.protocol.variant(slot.variant).batch_size), warm.inputs)
    spec = pass_spec(run.campaign, run.protocol, run.out, slot, f"first-batch-{slot.variant}")
    spec = spec.with_changes(variant={**spec.variant, "data_parallel": 1, "engine": "local", "compile": False},
                             warmup={"inputs": inputs, "passes": 1}, check_only=True, record_git=False)
    result = run_pass(spec)
    run.stop.check()
    error = result.error
    # journaled: its worker's start-up (a worker template's own, when it served the check first) is rental time
    run.journal.append("first_batch_checked", variant=slot.variant, documents=inputs, error=error,
                       startup=result.startup, warmup_s=result.phase("warmup_s"))
    if not error:
        return
    if run.engine is not None:
        run.engine.stop()
    if templates is not None:
        templates.close()
    _discard_folder(run.out, created)
    raise RunError(f"{source}: model.callable: the call on the first warm-up batch ({inputs} "
                   f"document{'s' if inputs != 1 else ''}, variant {slot.variant}) failed before any pass: {error}",
                   hint="fix the callable or the service it calls, then run again (a changed module is a new "
                        "protocol version: lock it again)")


def _discard_folder(out: Path, created: bool | None) -> None:
    """What a refused run wrote in a campaign folder it started (``created``: see :func:`_check_first_batch`)."""
    if created is None:
        return
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return
    for entry in out.iterdir():  # the folder held only its own entries (_ensure_folder): all this run's
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


def _say_first_failure(run: _Run, pass_id: str, result: PassResult, routine_error: str | None) -> None:
    """The first pass of this run that failed, or whose metric could not be computed (``routine_error``, from its
    verdict), said once, in one line."""
    why = result.error or routine_error
    if why and run.first_failure is None:
        run.first_failure = pass_id
        run.emit("failure", {"pass_id": pass_id, "error": " ".join(str(why).split())})


def _open_run(protocol: Protocol, campaign: CampaignRecord, out: Path, flight: Any, stop: Any, at: _Where,
              shared: Any, emit: ProgressFn) -> tuple[_Run, list[Slot], list[Slot]]:
    """Read the journal, check a resume's environment, start the engine and journal the campaign's start or
    resume (evaluating a pass a kill left unevaluated). Returns the run, every slot and the slots to run."""

    journal = Journal(out / JOURNAL_NAME)
    state = read_journal(journal.path)
    reads = shared or CampaignReads(out)
    slots = [Slot(**s) for s in campaign.slots]
    done = state.done_slots()
    todo = [s for s in slots if (s.round, s.position) not in done]
    at.journal, at.done, at.total = journal, len(slots) - len(todo), len(slots)
    reference_manifest = load_observed(out / MANIFEST)
    if reference_manifest is not None and todo:
        check_resume_environment(out, reference_manifest)  # before anything is appended to the journal
    engine = start_ray(protocol, [s.variant for s in todo if s.variant not in flight.unrunnable])
    if engine is not None:
        stop.install()  # ray.init replaced the SIGTERM handler with its own
    if state.campaign is None:
        journal.append("campaign_started", protocol_sha256=campaign.protocol.sha256,
                       corpus_fingerprint=campaign.corpus.fingerprint)
    else:
        journal.append("campaign_resumed", aborted=state.aborted(), interrupted=list(state.interrupted))
        # A kill between a pass's end and its evaluation: evaluate it now, from its stored file.
        for pid in state.order:
            if pid in state.finished and pid not in state.evaluated:
                t0 = time.perf_counter()
                verdict = evaluate.evaluate_pass(out, pid, reads, state.started[pid].get("dataset"))
                journal.append("pass_evaluated", pass_id=pid, evaluation_s=time.perf_counter() - t0,
                               intrinsic=verdict, after_resume=True)
    if engine is not None:  # campaign start-up (R2): Ray started, the cluster as Ray reports it
        journal.append("engine_started", **(engine.started.to_json() if engine.started is not None else {}))
    attempts: dict[tuple[int, int], int] = {}
    for pid in state.order:
        key = (state.started[pid]["round"], state.started[pid]["position"])
        attempts[key] = attempts.get(key, 0) + 1
    # A variant stopped by the pass time limit is not run again: its remaining slots become failed rows
    # that name the first timeout (rule fixed with the protocol's run.pass_timeout_s or run.pass_timeout,
    # never a silent skip).
    timed_out = {state.started[pid]["variant"]: pid for pid in state.order
                 if pid in state.finished and state.result(pid).error_kind == "timeout"}
    run = _Run(protocol=protocol, campaign=campaign, out=out, journal=journal, reads=reads, flight=flight,
               engine=engine, stop=stop, at=at, emit=emit, reference_manifest=reference_manifest,
               attempts=attempts, timed_out=timed_out)
    return run, slots, todo


def _templates(mode: str, out: Path) -> Any:
    """The worker templates of process isolation (None for in-process passes, or where forking is not
    available: each pass then starts a fresh interpreter)."""
    if mode != "process":
        return None
    # Importing scikit-learn (the evaluation's metrics) sets KMP_* variables in this process's environment:
    # imported before the first worker, so that every pass's worker starts with the same environment. Not at the
    # module's top: after the corpus scan, its modules take the heap the scan's batches gave back, where loaded
    # before the scan they raise the run's peak by the scan's batches (bench/bench_scale.py).
    import sklearn.metrics  # noqa: F401

    return worker_templates(out / SCRATCH)


def _run_slot(run: _Run, slot: Slot) -> None:
    """One slot: its pass started, run (or recorded as not run), finished and evaluated in the journal."""

    key = (slot.round, slot.position)
    run.attempts[key] = run.attempts.get(key, 0) + 1
    seed_part = f"-s{slot.seed}" if len(run.protocol.reproduction.seeds) > 1 else ""
    data_part = f"-d{slot.dataset}" if slot.dataset is not None else ""
    pass_id = f"r{slot.round:02d}-p{slot.position:02d}-{slot.variant}{seed_part}{data_part}-a{run.attempts[key]}"
    run.emit("pass", {"pass_id": pass_id, "variant": slot.variant, "round": slot.round})
    run.at.pass_id = pass_id  # before its start is journaled: an interrupt from here on names this pass
    run.journal.append("pass_started", pass_id=pass_id, variant=slot.variant, round=slot.round,
                       position=slot.position, seed=slot.seed, attempt=run.attempts[key],
                       **({"dataset": slot.dataset} if slot.dataset is not None else {}))
    result = _watched_result(run, slot, pass_id)
    # A worker ended by the signal that stops the run (Ctrl-C reaches the whole process group) is the
    # interrupt, not a crash of the pass, even where a library reported its end as an error.
    run.stop.check()
    if result.error_kind == "timeout":
        run.timed_out.setdefault(slot.variant, pass_id)
    observed = _manifest_fields(result)
    if run.reference_manifest is None and result.ok:
        run.reference_manifest = _write_manifest(run.out, run.campaign, run.protocol, result, observed,
                                                 run.engine.started if run.engine is not None else None)
    # A pass that observed no environment (not run, or its worker died before reporting) has nothing to
    # compare: an empty record would read as "differs in every field".
    diff = _diff(run.reference_manifest, observed) if run.reference_manifest is not None and \
        observed.environment else []
    finished = result.to_json(journal=True)
    run.journal.append("pass_finished", manifest_diff=diff,
                       environment_summary=env_summary(result.environment), **finished)
    run.at.pass_id, run.at.done = None, (run.at.done or 0) + 1
    t0 = time.perf_counter()
    verdict = evaluate.evaluate_pass(run.out, pass_id, run.reads, slot.dataset,
                                     finished={**finished, "variant": slot.variant})
    run.journal.append("pass_evaluated", pass_id=pass_id, evaluation_s=time.perf_counter() - t0, intrinsic=verdict)
    run.emit("done", {"pass_id": pass_id, "status": result.status, "pass_s": result.phase("pass_s")})
    _say_first_failure(run, pass_id, result, verdict.get("routine_error"))


def _watch(run: _Run, todo: list[Slot], progress: ProgressFn | None, every_s: float | None) -> Watch | None:
    """The progress watch of this run's passes (None when no one listens); ``every_s`` None: the module's
    interval, read now (:data:`campaign.progress.PROGRESS_EVERY_S`)."""
    if progress is None:
        return None
    return Watch(run.out / SCRATCH, progress, [(s.variant, slot_documents(run.campaign, s.dataset)) for s in todo],
                 every_s=_progress.PROGRESS_EVERY_S if every_s is None else every_s)


def _watched_result(run: _Run, slot: Slot, pass_id: str) -> PassResult:
    """The slot's pass (:func:`_slot_result`), its progress read on the watch's thread while it runs. Its
    beacons go when it ends, interrupted or not (an interrupted run leaves no scratch file of its own)."""
    try:
        if run.watch is None:
            return _slot_result(run, slot, pass_id)
        run.watch.pass_started(pass_id, slot.variant, slot_documents(run.campaign, slot.dataset))
        with run.watch.running():
            result = _slot_result(run, slot, pass_id)
        run.watch.pass_ended(result.phase("pass_s"), result.completed)
        return result
    finally:
        remove_beacons(run.out / SCRATCH, pass_id)


def _slot_result(run: _Run, slot: Slot, pass_id: str) -> PassResult:
    """The pass of a slot, on the engine its variant names, or the record of a slot not run (unrunnable on this
    machine, or its variant stopped by the pass time limit)."""
    protocol = run.protocol
    if slot.variant in run.flight.unrunnable:
        return _not_run(pass_id, f"not runnable on this machine: {run.flight.unrunnable[slot.variant]}", "unrunnable")
    if slot.variant in run.timed_out:
        limit = (f"the pass time limit of {protocol.run.pass_timeout_s:g} s"
                 if protocol.run.pass_timeout_s is not None else
                 f"its pass time limit ({protocol.run.pass_timeout})")
        return _not_run(pass_id, f"not run: {slot.variant} exceeded {limit} in {run.timed_out[slot.variant]}")
    assert run.engines is not None
    engine = run.engines[engine_name(protocol.variant(slot.variant))]
    return engine(pass_spec(run.campaign, protocol, run.out, slot, pass_id))


def _not_run(pass_id: str, why: str, kind: str = "not_run") -> PassResult:
    """The record of a slot that the protocol's own rule (or this machine, ``unrunnable``) says not to run: every
    measurement empty (as :func:`~iteralab.campaign.records.failure` writes a failed pass)."""
    return PassResult(pass_id, "failed", error=why, error_kind=kind, notes=(why,))


def _write_manifest(out: Path, campaign: CampaignRecord, protocol: Protocol, result: PassResult,
                    observed: ObservedFacts, ray: RayCluster | None = None) -> ObservedFacts:
    manifest = campaign_manifest(
        environment=dict(result.environment or {}),
        workload_description=dict(result.workload or {}),
        file_hashes=dict(result.file_hashes or {}),
        corpus_fingerprint=campaign.corpus.fingerprint,
        order_hash=campaign.corpus.order_hash,
        seeds=list(protocol.reproduction.seeds),
        reproduction_target=protocol.reproduction.model_dump(),
        extra={"protocol": campaign.protocol.to_json(), "variants": list(campaign.variants),
               "model_spec": campaign.model.to_json(), "first_pass": result.pass_id,
               **({"ray": ray.to_json()} if ray is not None else {})},
    )
    write_manifest(out / MANIFEST, manifest.with_observed(observed.to_json()))
    return observed


def _diff(reference: ObservedFacts, observed: ObservedFacts) -> list[str]:
    return diff_manifests(reference.to_json(), observed.to_json())
