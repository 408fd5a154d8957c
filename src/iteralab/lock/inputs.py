"""Every input a protocol pre-registers, checked and fingerprinted at ``lock`` and re-checked by ``run`` (P2).

Reads the protocol, the corpus and its tuning split (or each of several datasets, checked disjoint: K6), the
model's files (weights, tokenizer, head, a callable's module file) and the catalog; writes the lock entry (through :func:`iteralab.plan.protocol.lock`). The same
checks run before anything is recorded, so a typo in a column name never costs a protocol version, and any
change after the lock is refused with one line saying which input changed and how.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from iteralab.common.files import folder_hashes, sha256_file
from iteralab.errors import CorpusError, ProtocolError
from iteralab.kit.calcul_forfaits import DEFAULT_CATALOG, KitError, load_catalog
from iteralab.lock import lockrecords
from iteralab.lock.datasets import first_overlap
from iteralab.lock.lockrecords import (RECORDS_ENCODING, LockRecords, OverlapKeys, Suspects, corpus_fields,
                                       corpus_fingerprints, keys_of, shared_keys)
from iteralab.lock.samplesize import size_warning
from iteralab.lock.usercode import callable_module, queries_change, queries_fingerprint, routine_fingerprint
from iteralab.models.stfolder import check_pooling, pooling_hashes
from iteralab.models.tokens import PromptLengthCheck, RowStrataCheck, model_labels
from iteralab.plan.corpus import Pairs, check_disjoint
from iteralab.plan.engines import ray_gpu_problem
from iteralab.plan.expenses import check_currency
from iteralab.plan.lockfile import (LockEntry, LockedProtocol, ProtocolFile, as_protocol_file, lock as _record_lock,
                                     open_locked)
from iteralab.plan.protocol import CorpusSource, Protocol
from iteralab.plan.task import embedding_spec, prompt_column_error, prompt_columns, reference_column
from iteralab.plan.scan import Batch, CorpusReader, CorpusScan, Sink, read_options, scan_corpus

INPUTS_SCHEMA = 1
AMEND_HINT = "restore the locked input, or amend: raise 'version' in the protocol and lock again"


def corpus_records(fingerprint: dict[str, Any]) -> dict[str, list[Any]]:
    """The per-id ``{id: [text digest, label]}`` of a corpus fingerprint (its records, :data:`RECORDS_ENCODING`)."""
    records = fingerprint.get("records")
    if not (isinstance(records, dict) and records.get("encoding") == RECORDS_ENCODING
            and isinstance(records.get("data"), str)):
        raise ProtocolError(f"a lock's corpus records are not in the form {RECORDS_ENCODING!r}",
                            hint="lock the protocol again (raise 'version' if it was locked with other content)")
    rows = json.loads(zlib.decompress(base64.b64decode(records["data"])).decode("utf-8", "surrogatepass"))
    return {row[0]: [row[1], row[2]] for row in rows}


def model_files(protocol_file: ProtocolFile) -> dict[str, str]:
    """sha256 of every file the declared model reads: weights, config and tokenizer, the head, the callable's
    module file. Missing files are refused naming the protocol key."""

    model, where = protocol_file.protocol.model, protocol_file.source
    hashes: dict[str, str] = {}
    folder = protocol_file.where(model.path)
    if folder is not None:
        if not folder.is_dir():
            raise ProtocolError(f"{where}: model.path: folder {folder} does not exist",
                                hint="give a local model folder (hub ids are never downloaded)")
        if model.kind != "callable" and not any(folder.glob("*.safetensors")):
            raise ProtocolError(f"{where}: model.path: {folder} has no safetensors weights",
                                hint="save the model with save_pretrained(..., safe_serialization=True)")
        hashes.update(folder_hashes(folder, prefix="tokenizer/" if model.kind == "callable" else ""))
        hashes.update(pooling_hashes(folder) if model.kind == "encoder" else {})  # what makes its vectors
    if model.head:
        head = protocol_file.where(model.head)
        if head is None or not head.is_file():
            raise ProtocolError(f"{where}: model.head: file {head} does not exist",
                                hint="train one with: iteralab head train")
        hashes[f"head/{head.name}"] = sha256_file(head)
    if model.callable:
        source = callable_module(where, model.callable, protocol_file.folder)
        if source is not None:
            hashes[f"callable/{source.name}"] = sha256_file(source)
    return dict(sorted(hashes.items()))


def _model_order(protocol_file: ProtocolFile) -> tuple[str, list[str]] | None:
    """(what, the classes in the model's output order) read from the model's small files: a classifier's
    config.json id2label (:func:`~iteralab.models.tokens.model_labels`, as ``prepare`` reads it), or a head's
    metadata; None when there is nothing to read cheaply (the preflight of ``run`` loads the model and checks it
    again)."""
    model = protocol_file.protocol.model
    if model.kind == "hf_classifier" and model.path:
        labels = model_labels(protocol_file.where(model.path))
        return ("the model's id2label", labels) if labels else None
    if model.kind == "encoder_head" and model.head:
        from safetensors import SafetensorError, safe_open

        head = protocol_file.where(model.head)
        try:  # the head's metadata only (models/head.py's load_head would import torch to read the same list)
            with safe_open(str(head), framework="numpy") as fh:
                labels = json.loads((fh.metadata() or {})["classes"])
        except (SafetensorError, OSError, KeyError, ValueError):
            return None
        return (f"the head {head}", [str(c) for c in labels]) if isinstance(labels, list) and labels else None
    return None


def check_model_classes(protocol_file: ProtocolFile) -> None:
    """Classes declared in another order than the model's outputs are refused at ``lock`` (the preflight of ``run``
    would refuse them too, after the lock had cost a protocol version)."""
    found = _model_order(protocol_file)
    if found is None:
        return
    what, labels = found
    declared = [str(c) for c in protocol_file.protocol.corpus.classes]
    if labels != declared:
        raise ProtocolError(f"{protocol_file.source}: corpus.classes: the protocol declares {declared} but {what} is "
                            f"{labels}", hint="declare the classes in the model's output order")


def catalog_fingerprint(protocol_file: ProtocolFile) -> dict[str, Any]:
    declared = protocol_file.protocol.catalog.path
    source = protocol_file.where(declared) if declared else Path(DEFAULT_CATALOG)
    try:
        catalog = load_catalog(source)
    except KitError as exc:
        raise ProtocolError(f"{protocol_file.source}: catalog.path: {exc}", hint=exc.hint) from None
    # K5: one budget, one currency
    check_currency(protocol_file.protocol.expenses, catalog.currency, protocol_file.source)
    return {"file": source.name, "version": catalog.version, "sha256": sha256_file(source)}


def fingerprint_inputs(protocol: str | os.PathLike[str] | ProtocolFile) -> dict[str, Any]:
    """Check every input the protocol names and return their fingerprints (raises on the first problem).

    Each corpus is read in record batches (:func:`scan_sources`):
    what is kept per document is its id, text digest and label (:class:`LockRecords`), never its text."""
    protocol_file = as_protocol_file(protocol)
    tuning_records = LockRecords()
    records = {source.name: LockRecords() for source in protocol_file.protocol.sources()}
    scanned = scan_sources(protocol_file, sinks_for=lambda name: [records[name]], tuning_sinks=[tuning_records])
    return _with_routine({"schema_version": INPUTS_SCHEMA,
                          **corpus_fields({name: records[name].fingerprint(scan) for name, scan in scanned.named}),
                          "tuning": tuning_records.fingerprint(scanned.tuning) if scanned.tuning is not None
                          else None, "model": model_files(protocol_file),
                          "catalog": catalog_fingerprint(protocol_file)}, protocol_file, load=True)


def _with_routine(inputs: dict[str, Any], protocol_file: ProtocolFile, *, load: bool = False) -> dict[str, Any]:
    """``inputs`` with the records (``lock.usercode``) of the metric routine and of recall_at_k's queries file
    (its relevant ids checked against the corpus's ids) when the protocol declares them: a protocol without
    either keeps the inputs record it always had."""
    routine = routine_fingerprint(protocol_file, load=load)
    inputs = inputs if routine is None else {**inputs, "routine": routine}
    corpus = inputs.get("corpus")
    queries = queries_fingerprint(protocol_file, corpus_records(corpus) if protocol_file.protocol.metric.queries
                                  and isinstance(corpus, dict) else None)
    return inputs if queries is None else {**inputs, "queries": queries}


def lock(protocol: str | os.PathLike[str] | ProtocolFile, *, now: datetime | None = None,
         allow_large: bool = False, cluster_resources: Callable[[Any], dict[str, float]] | None = None
         ) -> LockEntry:
    """Check every input, then record the protocol hash and the inputs' fingerprints (P2). Locking the same
    content again returns the existing entry, unless an input changed since: that is refused. The protocol file
    is read once (given as read, or read here). ``cluster_resources``: how the Ray cluster of a GPU variant on Ray
    is asked for its resources (default :func:`ray_cluster_resources`)."""
    protocol_file = as_protocol_file(protocol)
    inputs = fingerprint_inputs(protocol_file)
    check_model_classes(protocol_file)
    protocol = protocol_file.protocol
    check_pooling(embedding_spec(protocol), protocol.model.kind, protocol_file.where(protocol.model.path),
                  protocol_file.source)
    check_ray_gpus(protocol_file, cluster_resources or ray_cluster_resources)
    entry = _record_lock(protocol_file, now=now, allow_large=allow_large, inputs=inputs)
    _require_fingerprints(protocol_file.path, entry)
    compare_inputs(protocol_file.path, entry, inputs)
    return entry


def ray_cluster_resources(run: Any) -> dict[str, float]:
    """The resources of the Ray cluster a protocol names, as Ray reports them: a given ``run.ray_address`` is asked
    (connected, read, disconnected); the local Ray the runner would start has ``ray_num_cpus`` (or this machine's)
    CPUs and the GPUs this machine's torch sees (what Ray detects here). Without Ray installed, a given cluster
    cannot be asked: {} (``run`` then refuses the Ray variant in one line)."""
    if run.ray_address is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return {"CPU": float(run.ray_num_cpus or os.cpu_count() or 1), "GPU": float(gpus)}
    if importlib.util.find_spec("ray") is None:
        return {}
    import ray

    ray.init(address=run.ray_address, include_dashboard=False, log_to_driver=False, logging_level="warning")
    try:
        return {k: float(v) for k, v in ray.cluster_resources().items()}
    finally:
        ray.shutdown()


def check_ray_gpus(protocol_file: ProtocolFile, cluster_resources: Callable[[Any], dict[str, float]]) -> None:
    """A variant on a GPU with engine "ray" needs a Ray cluster with GPUs: refused at lock, naming what was found."""

    protocol = protocol_file.protocol
    variants = [(v.name, v.device or protocol.run.device) for v in protocol.variants if v.engine == "ray"]
    if not any(str(device).strip().lower().startswith("cuda") for _, device in variants):
        return
    resources = cluster_resources(protocol.run)
    if not resources:
        return
    where = protocol.run.ray_address or "local, started by the runner"
    problem = ray_gpu_problem(variants, resources, where)
    if problem:
        raise ProtocolError(f"{protocol_file.path}: {problem}",
                            hint="run on a Ray cluster with GPUs, or give the Ray variant device 'cpu' in a new "
                                 "protocol version")


def check_inputs(locked: str | os.PathLike[str] | LockedProtocol, *, rerun: bool = False,
                 scans: Any = None) -> dict[str, str] | None:
    """Refuse a run whose inputs differ from those fingerprinted at the lock (one line: which input, how).

    A ``rerun`` repeats the question on this machine's model and catalog (that is its purpose, D3): only the
    corpus and the tuning split must be the locked ones. The corpus is read in record batches
    (:func:`scan_sources`, or the caller's ``scans`` of them); a per-id comparison is made only when its digests
    differ from the lock's, to say what changed. Returns the sha256 of the model files as they are now (what
    the run will read), so the caller never hashes them again."""
    locked = open_locked(locked)
    path, entry, protocol = locked.path, locked.entry, locked.protocol
    _require_fingerprints(path, entry)
    fingerprints = entry.inputs
    scanned = scans if scans is not None else scan_sources(locked)  # each source in record batches (K6: disjoint)
    locked_sources = corpus_fingerprints(fingerprints)
    paths = {source.name: source.path for source in protocol.sources()}
    now = {"schema_version": INPUTS_SCHEMA,
           **corpus_fields({name: _scanned_fingerprint(locked_sources.get(name), scan,
                                                       lambda declared=paths[name]: _fingerprint_file(locked, declared))
                            for name, scan in scanned.named}),
           "tuning": None if scanned.tuning is None else _scanned_fingerprint(
               fingerprints.get("tuning"), scanned.tuning,
               lambda: _fingerprint_file(locked, protocol.corpus.tuning_path, tuning=True)),
           "model": model_files(locked), "catalog": catalog_fingerprint(locked)}
    model_now = now["model"]
    if rerun:  # the routine too is the locked one: the rerun takes the earlier folder's carried copy
        now = {**now, "model": fingerprints.get("model"), "catalog": fingerprints.get("catalog")}
        if fingerprints.get("routine") is not None:
            now["routine"] = fingerprints["routine"]
        queries = queries_fingerprint(locked, None)  # the earlier folder's copy, staged where the protocol says
        if queries is not None:
            now["queries"] = queries
    else:
        now = _with_routine(now, locked)
    compare_inputs(path, entry, now)
    return model_now


@dataclass
class InputScans:
    """One corpus source and the tuning split, read in record batches and checked (P4, C2)."""

    corpus: CorpusScan
    tuning: CorpusScan | None
    #: Digests of the tuning split's ids and texts (the overlap check): a later dataset reuses them.
    tuning_keys: OverlapKeys | None = None


def _columns(protocol: Protocol) -> tuple[dict[str, Any], list[str]]:
    """The protocol's corpus columns and classes, and the extra (stratum) column read when a stratum subgroup
    is planned. An id column the protocol names must be in every file (a misspelt header never turns into ids
    derived from the texts); only the default one may be absent."""
    spec = protocol.corpus
    columns = dict(id_column=spec.id_column, text_column=spec.text_column, label_column=spec.label_column,
                   classes=list(spec.classes), require_labels=bool(spec.classes),
                   require_id=names_id_column(protocol))
    needs_strata = any(sg.by == "stratum" for sg in protocol.subgroups)
    extra = [spec.stratum_column] if spec.stratum_column and needs_strata else []
    if reference := reference_column(protocol):  # a generation job's reference answers
        extra.append(reference)
    extra += [name for name in prompt_columns(protocol) if name not in extra]  # the cells a prompt names
    return columns, extra


def tallied(protocol: Protocol) -> list[str]:
    """The extra column whose values a scan counts: the strata's (a reference answer, a prompt's cells: one value
    per document, never tallied)."""
    by_stratum = any(sg.by == "stratum" for sg in protocol.subgroups)
    return [protocol.corpus.stratum_column] if protocol.corpus.stratum_column and by_stratum else []


def scan_source(protocol_file: ProtocolFile, corpus: CorpusSource, *, sinks: Sequence[Sink] = (),
                tuning_sinks: Sequence[Sink] = (), strata_later: list[Callable[[], None]] | None = None,
                tuning_keys: OverlapKeys | None = None) -> InputScans:
    """One corpus source (the ``[corpus]`` path or a dataset, K6) and the tuning split read with the protocol's
    columns and classes, checked disjoint (P4) and their strata checked against the model's tokenizer (C2),
    without holding the corpus: each validated batch goes to ``sinks`` (``tuning_sinks`` for the tuning split).
    ``strata_later``: the strata check's last step (which raises) is appended there, not run; ``tuning_keys``:
    the tuning split's digests from an earlier source's scan (the split is then checked disjoint from them, not
    read again: neither handed to ``tuning_sinks`` nor returned)."""

    protocol = protocol_file.protocol
    spec = protocol.corpus
    columns, extra = _columns(protocol)
    source = protocol_file.where(corpus.path)
    tuning_scan = None
    if spec.tuning_path and tuning_keys is None:
        # read first, keeping 64-bit digests of its ids and texts for the overlap check (P4)
        tuning_keys = OverlapKeys()
        try:
            tuning_scan = scan_corpus(protocol_file.where(spec.tuning_path), **columns,
                                      sinks=[tuning_keys, *tuning_sinks])
        except CorpusError:
            try:  # the final corpus's error first
                scan_corpus(source, **columns, extra_columns=extra, counted_columns=tallied(protocol))
            except CorpusError as exc:
                raise prompt_column_error(protocol, exc) from None
            raise
    overlap = _Overlap(tuning_keys)
    strata = RowStrataCheck(protocol, protocol_file.source, protocol_file.where(protocol.model.path))
    prompts = PromptLengthCheck(protocol, protocol_file.where(protocol.model.path), str(source))
    try:
        corpus_scan = scan_corpus(source, **columns, extra_columns=extra, counted_columns=tallied(protocol),
                                  sinks=[*sinks, overlap, strata, prompts])
    except CorpusError as exc:
        raise prompt_column_error(protocol, exc) from None
    if overlap.found:  # a shared digest: the exact check names the overlap (or clears a digest collision)
        _name_overlap(protocol_file, source, overlap)

    def finish() -> None:
        strata.finish(lambda: CorpusReader(source, read_options(**columns, extra_columns=extra), lines=True))

    if strata_later is None:
        finish()
    else:
        strata_later.append(finish)
    return InputScans(corpus_scan, tuning_scan, tuning_keys)


@dataclass(frozen=True)
class SourceScans:
    """Every corpus source's scan (name, scan) in declaration order (one, named None, for a one-corpus
    protocol), and the tuning split's."""

    named: list[tuple[str | None, CorpusScan]]
    tuning: CorpusScan | None


def scan_sources(protocol_file: ProtocolFile, *,
                 sinks_for: Callable[[str | None], Sequence[Sink]] | None = None,
                 tuning_sinks: Sequence[Sink] = ()) -> SourceScans:
    """Read every corpus source (:meth:`Protocol.sources`) and the tuning split in record batches (P4, C2), each
    source refused when it overlaps another or the tuning split (ids or whitespace-normalised texts, K6).
    ``sinks_for(name)``: the sinks of that source's validated batches."""
    sources = protocol_file.protocol.sources()
    named: list[tuple[str | None, CorpusScan]] = []
    keys: list[OverlapKeys] = []
    strata_later: list[Callable[[], None]] = []
    tuning: CorpusScan | None = None
    tuning_keys: OverlapKeys | None = None
    for n, source in enumerate(sources):
        mine = [OverlapKeys()] if len(sources) > 1 else []  # one source has no other to overlap
        # the tuning split: read with the first source, its digests then checked disjoint with every source
        scans = scan_source(protocol_file, source, sinks=[*mine, *(sinks_for(source.name) if sinks_for else ())],
                            tuning_sinks=tuning_sinks, strata_later=strata_later, tuning_keys=tuning_keys)
        if n == 0:
            tuning, tuning_keys = scans.tuning, scans.tuning_keys
        named.append((source.name, scans.corpus))
        keys += mine
    _check_keys_disjoint(protocol_file, keys)
    for finish in strata_later:
        finish()
    return SourceScans(named, tuning)


def _check_keys_disjoint(protocol_file: ProtocolFile, keys: list[OverlapKeys]) -> None:
    """:func:`check_datasets_disjoint` from the datasets' digests: when no id digest and no text digest is
    shared, they are disjoint; otherwise the documents whose digests are shared are read again (only those
    are kept) and checked exactly, to name the first overlap (or to find that the digests merely collided)."""
    shared_ids = shared_keys([k.ids() for k in keys])
    shared_texts = shared_keys([k.texts() for k in keys])
    if not len(shared_ids) and not len(shared_texts):
        return
    columns, extra = _columns(protocol_file.protocol)
    suspects: list[tuple[str, list[tuple[str, str]]]] = []
    for dataset in protocol_file.protocol.datasets:
        found = Suspects(shared_ids, shared_texts)
        scan_corpus(protocol_file.where(dataset.path), **columns, extra_columns=extra,
                    counted_columns=tallied(protocol_file.protocol), sinks=[found])
        suspects.append((dataset.name, found.rows))
    first_overlap(suspects)


def names_id_column(protocol: Protocol) -> bool:
    """Whether the protocol names its id column (``corpus.id_column`` written in the file)."""
    return "id_column" in protocol.corpus.model_fields_set


#: What ``lock`` says when the protocol's calendar has no tasks (the lock still succeeds).
NO_TASKS_WARNING = ("calendar: no tasks, so decide will plan no window: it will price no rental{deadline}; add dated "
                    "[[calendar.tasks]] (raise 'version' and lock again) to price one")


def lock_warnings(protocol_file: ProtocolFile, entry: LockEntry) -> list[str]:
    """One line for each thing a successful lock records that the decision will not be able to use as the user
    may expect: a calendar without tasks (no window, no rental priced, no deadline checked), ids derived
    from the texts because a corpus file has no id column and the protocol names none, and a final corpus smaller
    than the size its tolerance needs (:mod:`iteralab.lock.samplesize`)."""
    path, protocol = protocol_file.path, protocol_file.protocol
    lines = []
    if not protocol.calendar.tasks:
        deadline = (f" and cannot check the deadline {protocol.calendar.deadline}" if protocol.calendar.deadline
                    else "")
        lines.append(f"{path}: " + NO_TASKS_WARNING.format(deadline=deadline))
    inputs = entry.inputs or {}
    spec = protocol.corpus
    fingerprints = corpus_fingerprints(inputs)
    files = [(s.path, fingerprints.get(s.name)) for s in protocol.sources()]
    files.append((spec.tuning_path, inputs.get("tuning")))
    for declared, record in files:
        if declared and isinstance(record, dict) and record.get("id_origin") == "content":
            lines.append(f"{path}: corpus.id_column: {declared} has no {spec.id_column!r} column and the protocol "
                         "names none, so its ids are derived from the texts (content hash, recorded in the lock)")
    size = size_warning(protocol_file, inputs)
    return lines if size is None else [*lines, size]


def fingerprinted(inputs: dict[str, Any]) -> list[str]:
    """What a lock entry's ``inputs`` fingerprinted, in words and in the order they are checked: the corpus (or
    each dataset), the tuning split, the model files, the metric routine, the queries file and the catalog."""
    sets = inputs.get("datasets") or {}
    names = [f"datasets {', '.join(sets)}" if sets else "corpus"]
    names += ["tuning split"] if inputs.get("tuning") else []
    names.append("model files")
    routine, queries = inputs.get("routine"), inputs.get("queries")
    names += [f"metric routine ({routine.get('file')})"] if isinstance(routine, dict) else []
    names += [f"queries file ({queries.get('file')})"] if isinstance(queries, dict) else []
    return [*names, "catalog"]


def _fingerprint_file(protocol_file: ProtocolFile, declared: str | None, *, tuning: bool = False) -> dict[str, Any]:
    """The lock's record of one corpus file (a dataset, the final corpus or, ``tuning``, the tuning split),
    read in record batches."""
    columns, extra = _columns(protocol_file.protocol)
    records = LockRecords()
    scan = scan_corpus(protocol_file.where(declared), **columns, extra_columns=[] if tuning else extra,
                       counted_columns=tallied(protocol_file.protocol), sinks=[records])
    return records.fingerprint(scan)


class _Overlap:
    """P4 while the final corpus streams by: does a batch share an id digest or a normalised-text digest with
    the tuning split? Only a flag is kept; :func:`_name_overlap` then says which, if any."""

    def __init__(self, tuning: OverlapKeys | None) -> None:
        self.active = tuning is not None
        if tuning is not None:
            self.ids, self.texts = tuning.ids(), tuning.texts()
        self.found = False

    def __call__(self, batch: Batch | None) -> None:
        if batch is None:
            self.found = False
        elif self.active and not self.found:
            self.found = bool(np.isin(keys_of(batch.ids, lockrecords.id_key), self.ids).any()
                              or np.isin(keys_of(batch.texts, lockrecords.text_key), self.texts).any())


def _name_overlap(protocol_file: ProtocolFile, final_source: Path, overlap: _Overlap) -> None:
    """P4 once a streamed read found a digest that the tuning split and the final corpus share: the final corpus's
    digests, then the documents of both whose id or text digest is shared (only those are kept), checked exactly
    (:func:`check_disjoint` names the overlap, or finds that the digests merely collided)."""
    columns, extra = _columns(protocol_file.protocol)
    final_keys = OverlapKeys()
    scan_corpus(final_source, **columns, extra_columns=extra, counted_columns=[], sinks=[final_keys])
    ids = shared_keys([overlap.ids, final_keys.ids()])
    texts = shared_keys([overlap.texts, final_keys.texts()])
    tuning_source = protocol_file.where(protocol_file.protocol.corpus.tuning_path)
    tuning_rows, final_rows = Suspects(ids, texts), Suspects(ids, texts)
    scan_corpus(tuning_source, **columns, sinks=[tuning_rows])
    scan_corpus(final_source, **columns, extra_columns=extra, counted_columns=[], sinks=[final_rows])
    check_disjoint(Pairs(os.fspath(tuning_source), tuning_rows.rows), Pairs(os.fspath(final_source), final_rows.rows))


def _scanned_fingerprint(locked: dict[str, Any] | None, scan: CorpusScan,
                         fingerprint: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The lock's own record when the scan proves the corpus unchanged (same size, id origin, fingerprint —
    hence ids and texts — and labels), else ``fingerprint()``, the per-id record of the corpus now (read again in
    record batches), to say what changed."""
    if (isinstance(locked, dict) and locked.get("size") == scan.size and locked.get("id_origin") == scan.id_origin
            and locked.get("fingerprint") == scan.fingerprint and isinstance(locked.get("records"), dict)
            and locked.get("labels_sha256") == scan.labels_sha256):
        return locked
    return fingerprint()


def _require_fingerprints(path: Path, entry: LockEntry) -> None:
    if not isinstance(entry.inputs, Mapping):
        raise ProtocolError(f"{path}: the lock of version {entry.version} (at {entry.locked_at}) "
                            "records no input fingerprints", hint="raise 'version' in the protocol and lock again")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _examples(values: list[str], n: int = 3) -> str:
    return ", ".join(repr(v) for v in sorted(values)[:n])


def _corpus_change(name: str, locked: dict[str, Any] | None, now: dict[str, Any] | None) -> str | None:
    if locked is None and now is None:
        return None
    if locked is None:
        return f"{name}: declared, none at the lock"
    if now is None:
        return f"{name}: removed"
    if locked == now:
        return None
    before, after = corpus_records(locked), corpus_records(now)
    missing = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    if missing or new:
        parts = [f"{_plural(len(missing), 'id')} missing"] if missing else []
        parts += [f"{_plural(len(new), 'new id')}"] if new else []
        example = f"e.g. {_examples(missing or new)}"
        return f"{name}: {', '.join(parts)} ({example})"
    texts = sorted(i for i in before if before[i][0] != after[i][0])
    if texts:
        return f"{name}: {_plural(len(texts), 'text')} changed (e.g. {_examples(texts)})"
    labels = sorted(i for i in before if before[i][1] != after[i][1])
    if labels:
        first = labels[0]
        return (f"{name}: {_plural(len(labels), 'reference label')} changed (e.g. {first!r}: "
                f"{before[first][1]!r} → {after[first][1]!r})")
    return None


def describe_change(locked: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The first difference between two input fingerprints, in words (None when they agree)."""
    before_sets, after_sets = corpus_fingerprints(locked), corpus_fingerprints(now)
    change = None
    for name in [*before_sets, *(n for n in after_sets if n not in before_sets)]:  # each source (K6: dataset)
        change = change or _corpus_change("corpus" if name is None else f"dataset {name!r}", before_sets.get(name),
                                          after_sets.get(name))
    change = change or _corpus_change("tuning split", locked.get("tuning"), now.get("tuning"))
    if change:
        return change
    before, after = locked.get("model") or {}, now.get("model") or {}
    if before != after:
        parts = []
        for label, names in (("changed", [n for n in before if n in after and before[n] != after[n]]),
                             ("missing", [n for n in before if n not in after]),
                             ("new", [n for n in after if n not in before])):
            if names:
                parts.append(f"{', '.join(sorted(names)[:3])}{' …' if len(names) > 3 else ''} {label}")
        return f"model files: {'; '.join(parts)}"
    routine_before, routine_after = locked.get("routine") or {}, now.get("routine") or {}
    if routine_before != routine_after:
        return (f"metric routine: {routine_before.get('ref')} in {routine_before.get('file')} (sha256 "
                f"{str(routine_before.get('sha256'))[:12]}…) is now {routine_after.get('ref')} in "
                f"{routine_after.get('file')} (sha256 {str(routine_after.get('sha256'))[:12]}…)")
    change = queries_change(locked.get("queries"), now.get("queries"))
    if change:
        return change
    cat_before, cat_after = locked.get("catalog") or {}, now.get("catalog") or {}
    if cat_before.get("sha256") != cat_after.get("sha256"):
        return (f"catalog: {cat_after.get('file')} changed (sha256 {str(cat_before.get('sha256'))[:12]}… → "
                f"{str(cat_after.get('sha256'))[:12]}…)")
    return None


def compare_inputs(path: Path, entry: LockEntry, inputs: dict[str, Any]) -> None:
    change = describe_change(entry.inputs or {}, inputs)
    if change is not None:
        raise ProtocolError(f"{path}: {change} since the lock at {entry.locked_at}", hint=AMEND_HINT)


__all__ = ["InputScans", "SourceScans", "check_inputs", "check_model_classes", "describe_change",
           "fingerprint_inputs", "fingerprinted", "lock", "lock_warnings", "model_files", "names_id_column",
           "scan_source", "scan_sources"]
