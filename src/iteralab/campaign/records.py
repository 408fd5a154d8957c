"""The records a pass exchanges, typed, and their JSON form: written and read here, nowhere else.

- :class:`PassSpec`: what the runner asks of an engine (a worker's ``spec.json``, a data-parallel worker's spec);
- :class:`PassResult`: what the engine reports (a worker's ``result.json``, the journal's ``pass_finished``);
  a failed pass's record is built by one constructor, :func:`failure`;
- :class:`PassOutput`: the output of a pass, one field whose ``kind`` says what its prediction file holds;
- the phases of a pass: :data:`WORKER_PHASES` (timed by the engine, in the result's ``phases``),
  :data:`RUNNER_PHASES` (timed by the runner after the pass, in the journal's ``pass_evaluated``) and
  :data:`PHASES`, every phase in the raw table's order.

The JSON form is that of the journals already written (sorted keys; a result's ``error_kind`` only on a failure,
its output as ``prediction_file``/``prediction_sha256``): existing campaign folders read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from iteralab.errors import RunError

#: Timed by the engine, reported in the result's ``phases`` (a worker's start-up phases first).
WORKER_PHASES = ("load_s", "compile_s", "warmup_s", "pass_s", "writing_s")
#: The start-up phases of a pass: several devices or actors run them side by side (the slowest one counts).
STARTUP_PHASES = ("load_s", "compile_s", "warmup_s")
#: Timed by the runner once the pass has ended (its verification), journaled in ``pass_evaluated``.
RUNNER_PHASES = ("evaluation_s",)
#: Every phase of a pass, in the order of the raw table's columns.
PHASES = ("load_s", "compile_s", "warmup_s", "pass_s", "evaluation_s", "writing_s")
assert sorted(PHASES) == sorted(WORKER_PHASES + RUNNER_PHASES), "a phase is timed by the worker or the runner"

#: The output kinds a pass can have: class labels and probabilities (one row per document: id, label, one
#: probability per class), one embedding vector per document (id, vector), or one generated text per document
#: (id, text, generated tokens, finish reason), or one score per pair of texts (id, score). A kind is recorded in the journal only when it is not class
#: probabilities (the journals written before hold that kind only).
CLASS_PROBABILITIES = "class_probabilities"
EMBEDDING_VECTORS = "embedding_vectors"
GENERATED_TEXTS = "generated_texts"
PAIR_SCORES = "pair_scores"
OUTPUT_KINDS = (CLASS_PROBABILITIES, EMBEDDING_VECTORS, GENERATED_TEXTS, PAIR_SCORES)


#: A worker's start-up record (R2, the result's ``startup``), flat: each start-up phase in seconds, the runtime's
#: resident bytes, how the worker started (``forked``; a refused template's reason). Plain values only: it crosses a
#: process boundary as JSON.
Startup = dict[str, float | int | bool | str | None]


def _error(what: str, problem: str) -> RunError:
    return RunError(f"{what}: {problem}", hint="the record was not written by this version of iteralab")


# --------------------------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class PassSpec:
    """One pass as the runner asks an engine to run it (JSON-able: it crosses a process boundary)."""

    pass_id: str
    #: the variant's settings (``Variant.model_dump()``) and the campaign's model record (``campaign.json``)
    variant: Mapping[str, Any]
    model: Mapping[str, Any]
    classes: tuple[str, ...]
    corpus_path: str
    prediction_dir: str
    #: the protocol's warm-up rule: ``{"inputs": n, "passes": m}``
    warmup: Mapping[str, Any]
    #: the job's kind (``kind_of(protocol).name``, :mod:`iteralab.campaign.kinds`): what the pass writes; the
    #: engines find the kind object by this name and never ask which kind it is
    kind: str = "classification"
    pass_timeout_s: float | None = None
    pass_timeout: str | None = None
    pass_timeout_factor: float | None = None
    #: documents the pass processes (the corpus copy's size); None when unknown
    documents: int | None = None
    device: str = "auto"
    seed: int = 0
    deterministic: bool = False
    scratch_dir: str | None = None
    #: whether the worker reads the code version (git) into its environment record
    record_git: bool = True
    #: a data-parallel worker: whether it collects the environment record (the first worker only)
    collect_environment: bool = False
    #: wall-clock time at which the runner started the worker (its process start is measured from it)
    spawned_at: float | None = None
    #: recall_at_k: the campaign's copy of the queries file, embedded after the measured pass (``kinds.embedding.sink``)
    queries_path: str | None = None
    #: the keywords naming its id and text columns (``lock.usercode.queries_columns``); None: the default names
    queries_columns: Mapping[str, str] | None = None
    #: the runner's check before the first pass (a callable on one warm-up batch): load and warm up, nothing more
    check_only: bool = False
    #: a rerun's callable module taken from the bundle's carried copy: module name -> that file
    #: (``lock.usercode.carried_modules``); None: every module is imported from this machine's path
    carried_modules: Mapping[str, str] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "pass spec") -> PassSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise _error(what, f"unknown field(s) {', '.join(unknown)}")
        missing = sorted(f.name for f in fields(cls) if f.name not in data and f.default is MISSING)
        if missing:
            raise _error(what, f"missing field(s) {', '.join(missing)}")
        return cls(**{**data, "classes": tuple(data["classes"])})

    @classmethod
    def coerce(cls, spec: PassSpec | Mapping[str, Any]) -> PassSpec:
        """The spec itself, or the one its JSON form describes."""
        return spec if isinstance(spec, PassSpec) else cls.from_json(spec)

    def to_json(self) -> dict[str, Any]:
        return {f.name: (list(self.classes) if f.name == "classes" else getattr(self, f.name)) for f in fields(self)}

    def with_changes(self, **changes: Any) -> PassSpec:
        return replace(self, **changes)



# --------------------------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class PassOutput:
    """The output of a pass: what its prediction file holds (``kind``), the file (relative to the campaign
    folder) and its SHA-256. None for both when no file was written."""

    kind: str = CLASS_PROBABILITIES
    file: str | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_KINDS:
            raise _error("pass output", f"kind {self.kind!r} is not one of {', '.join(OUTPUT_KINDS)}")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PassOutput:
        return cls(kind=data.get("output_kind") or CLASS_PROBABILITIES, file=data.get("prediction_file"),
                   sha256=data.get("prediction_sha256"))

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"prediction_file": self.file, "prediction_sha256": self.sha256}
        if self.kind != CLASS_PROBABILITIES:  # the journals written so far hold class probabilities only
            record["output_kind"] = self.kind
        return record


#: A result's keys that are fields of :class:`PassResult`; every other key an engine reports (``parallel``,
#: ``gpu_scope``, ``concurrent_load``, ``pass_limit``, ``order_hash`` …) is kept, as written, in ``extra``.
_OWN = ("pass_id", "status", "phases", "completed", "expected", "retries", "error", "error_kind", "notes",
        "prediction_file", "prediction_sha256", "output_kind", "memory", "workload", "file_hashes", "startup",
        "environment")
#: Written only when set (a success has no ``error_kind``; the runner keeps the environment and the file hashes
#: out of the journal).
_WHEN_SET = ("error_kind", "file_hashes", "startup", "environment")


@dataclass(frozen=True)
class PassResult:
    """What an engine reports of one pass: its phases, peaks, completed count, output and error."""

    pass_id: str | None
    status: str
    #: the engine's phases (:data:`WORKER_PHASES`); None: not measured
    phases: Mapping[str, float | None] = field(default_factory=lambda: dict.fromkeys(WORKER_PHASES))
    #: inputs completed; None when unknown (a worker that died before reporting)
    completed: int | None = 0
    expected: int | None = None
    #: failing batches retried in halves (the resume variant); None when unknown
    retries: int | None = 0
    error: str | None = None
    #: why a pass failed: load, warmup, pass, oom, timeout, crash, internal, not_run, unrunnable, …
    error_kind: str | None = None
    notes: tuple[str, ...] = ()
    output: PassOutput = PassOutput()
    #: memory peaks (``cpu_peak_rss_bytes``, ``cuda_max_*_bytes``, ``scope``, ``reason``)
    memory: Mapping[str, Any] | None = None
    workload: Mapping[str, Any] | None = None
    file_hashes: Mapping[str, Any] | None = None
    #: start-up phases of the worker (R2): process start, imports, environment, runtime …
    startup: Mapping[str, Any] | None = None
    environment: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def phase(self, name: str) -> float | None:
        return self.phases.get(name)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PassResult:
        """A result as a worker or the journal wrote it (a journal record's own keys land in ``extra``)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("status"), str):
            raise _error("pass result", "no status")
        return cls(pass_id=data.get("pass_id"), status=data["status"], phases=dict(data.get("phases") or {}),
                   completed=data.get("completed"), expected=data.get("expected"), retries=data.get("retries"),
                   error=data.get("error"), error_kind=data.get("error_kind"), notes=tuple(data.get("notes") or ()),
                   output=PassOutput.from_json(data), memory=data.get("memory"), workload=data.get("workload"),
                   file_hashes=data.get("file_hashes"), startup=data.get("startup"),
                   environment=data.get("environment"), extra={k: v for k, v in data.items() if k not in _OWN})

    def to_json(self, *, journal: bool = False) -> dict[str, Any]:
        """The JSON form; ``journal``: as ``pass_finished`` records it (without environment and file hashes,
        which the manifest and its comparison hold)."""
        record: dict[str, Any] = {
            "pass_id": self.pass_id, "status": self.status, "phases": dict(self.phases), "completed": self.completed,
            "expected": self.expected, "retries": self.retries, "error": self.error, "notes": list(self.notes),
            **self.output.to_json(), "memory": self.memory, "workload": self.workload, **self.extra}
        for key in _WHEN_SET:
            value = getattr(self, key)
            if value is not None and not (journal and key in ("environment", "file_hashes")):
                record[key] = value
        return record

    def with_changes(self, **changes: Any) -> PassResult:
        return replace(self, **changes)


def started(pass_id: str, **extra: Any) -> dict[str, Any]:
    """The JSON form of a pass that has not finished yet (status failed, nothing measured), which an engine
    fills as the pass runs; ``extra``: the engine's own keys."""
    return {**PassResult(pass_id, "failed").to_json(), "file_hashes": None, "startup": {}, **extra}


def failure(pass_id: str | None, error: str, kind: str, *, completed: int | None = 0, retries: int | None = 0,
            notes: list[str] | tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    """The JSON form of a failed pass (the one constructor of a failure record): every phase empty, the error
    and its kind. ``completed``/``retries`` None: unknown (a worker that died before reporting)."""
    return PassResult(pass_id, "failed", completed=completed, retries=retries, error=error, error_kind=kind,
                      notes=tuple(notes), extra=extra).to_json()
