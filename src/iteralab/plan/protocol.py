"""The pre-registered protocol (P1–P4, R1, R5, Q3): a TOML file validated when read, locked before timing.

A protocol fixes, before any timed pass, the decision question, the scenario, the corpus and its reference
labels, the checks, the metric with its threshold and its tolerance against a reference variant, the planned
subgroups, the variants and series, the warm-up rule, the number of passes, the exclusion rule, the calendar,
the catalog and the other project expenses (K5, :mod:`iteralab.plan.expenses`); the metric and the subgroups
are :mod:`iteralab.plan.metric`'s. ``lock`` records its content
hash (:mod:`iteralab.plan.lockfile`), so the expenses are locked with the rest; a run refuses an unlocked or
changed protocol. Paths written in it resolve through :mod:`iteralab.plan.paths`.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from iteralab.errors import ProtocolError
from iteralab.kit.calcul_forfaits import WindowError, elapsed, load_zone, localize
from iteralab.kit.memoire import PRECISIONS  # the kit's list: one list for library and kit
from iteralab.plan.engines import gpu_share_problem, layout_problem
from iteralab.plan.expenses import BudgetRule, ExpenseFile, ExpenseLine, expense_problems, keyed_error
from iteralab.plan.metric import MetricSpec, Subgroup, subgroup_problems
from iteralab.plan.task import EmbeddingSpec, TaskSpec, task_problem
from iteralab.plan.values import Flag, Number, Strict as _Strict, Text, Whole

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA_VERSION = 1
LOCK_SUFFIX = ".lock.json"
#: The variant fields a series may vary (R1). Everything else is fixed by the protocol for all variants.
FACTORS = ("batch_size", "precision", "bucketing", "padding", "resume", "compile", "device", "data_parallel",
           "engine")

INTERACTIVE_REFUSAL = (
    "scenario 'interactive' is not supported: an interactive service needs request arrivals, concurrency "
    "and an acceptable latency defined first, and an offline ranking does not carry over to it"
)


class CorpusSpec(_Strict):
    #: The comparison corpus; absent when the protocol declares ``[[datasets]]`` (K6).
    path: Text | None = None
    tuning_path: Text | None = None
    id_column: Text = "id"
    text_column: Text = "text"
    label_column: Text = "label"
    stratum_column: Text | None = "stratum"
    #: At least two classes; none (``[]``) only for an embedding job's corpus without labels (``plan/task``).
    classes: tuple[Text, ...]
    #: Token-length strata by the model's own tokenizer: name -> [min, max] inclusive, or [min] open-ended.
    strata: dict[str, tuple[Whole, ...]] = Field(default_factory=dict)

    @field_validator("classes")
    @classmethod
    def _two_or_none(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) == 1:
            raise ValueError("List should have at least 2 items (or none: [] for an embedding job's corpus without "
                             "labels)")
        return value

    @field_validator("strata")
    @classmethod
    def _bounds(cls, value: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        for name, bounds in value.items():
            if len(bounds) not in (1, 2) or bounds[0] < 0 or (len(bounds) == 2 and bounds[1] < bounds[0]):
                raise ValueError(f"stratum {name!r} must be [min, max] with 0 <= min <= max, or [min]")
        return value


class Dataset(_Strict):
    """One dataset of the real job (K6): read with the ``[corpus]`` columns, classes and strata."""

    name: Text = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    path: Text


class ModelSpec(_Strict):
    kind: Literal["hf_classifier", "encoder_head", "callable", "encoder"]
    path: Text | None = None
    head: Text | None = None
    callable: Text | None = None
    max_length: Whole = Field(default=256, gt=0)
    truncation: Flag = True
    trust_remote_code: Flag = False

    @model_validator(mode="after")
    def _complete(self) -> ModelSpec:
        if self.kind in ("hf_classifier", "encoder_head", "encoder") and not self.path:
            raise ValueError(f"model.path is required for kind {self.kind!r}")
        if self.kind == "encoder_head" and not self.head:
            raise ValueError("model.head (a safetensors file) is required for kind 'encoder_head'")
        if self.kind == "callable" and not self.callable:
            raise ValueError("model.callable ('package.module:function') is required for kind 'callable'")
        return self


class Checks(_Strict):
    #: Fraction of the expected ids that must carry a prediction (1.0 = all documents).
    coverage: Number = Field(default=1.0, gt=0, le=1)
    #: Probabilities of each record must sum to 1 within this tolerance.
    probability_sum_tolerance: Number = Field(default=1e-3, gt=0, lt=1)


class Reproduction(_Strict):
    target: Literal["identical", "bounded", "acceptable"] = "acceptable"
    #: For 'bounded': the largest absolute probability difference allowed against the reference pass.
    bound: Number | None = Field(default=None, gt=0)
    seeds: tuple[Whole, ...] = (0,)
    deterministic: Flag = True

    @model_validator(mode="after")
    def _bound(self) -> Reproduction:
        if self.target == "bounded" and self.bound is None:
            raise ValueError("reproduction.bound is required when target = 'bounded'")
        return self


class Warmup(_Strict):
    #: Warm-up runs over the first ``inputs`` texts of the pass order, ``passes`` times, with the variant's
    #: batch size, before every measured pass (same rule for every variant). Compilation happens here.
    inputs: Whole = Field(default=16, ge=0)
    passes: Whole = Field(default=1, ge=0)
    recompilation: Text = "a recompilation during the measured pass is recorded in notes, never hidden"


class RunSpec(_Strict):
    passes: Whole = Field(default=5, ge=1)
    isolation: Literal["process", "inprocess"] = "process"
    device: Text = "auto"
    #: A limit fixed in advance for one measured pass (seconds): a pass that exceeds it is stopped and kept as
    #: a failed row with the inputs it completed (R8). Checked between batches.
    pass_timeout_s: Number | None = Field(default=None, gt=0)
    #: The same limit stated relative to each pass's own warm-up, e.g. ``"5x warmup"``: the factor × the warm-up's
    #: per-document time (its last repetition ÷ its inputs) × the documents of the pass, computed per pass after
    #: its warm-up and before its measured region. A protocol gives this or ``pass_timeout_s``, not both.
    pass_timeout: Text | None = None
    exclusion_rule: Text = (
        "a pass is excluded only for a documented external incident; the same rule applies to every variant"
    )
    #: Ray engine (X4): an existing cluster's address, or None for a local Ray started with ``ray_num_cpus`` CPUs
    #: (default: this machine's). The actor layout must leave a CPU for Ray Data's read tasks.
    ray_address: Text | None = None
    ray_num_cpus: Whole | None = Field(default=None, ge=1)
    ray_actors: Whole = Field(default=1, ge=1)
    ray_cpus_per_actor: Number = Field(default=1.0, gt=0)
    #: Torch threads in each actor; None keeps Ray's rule (floor of the actor's CPUs, at least 1).
    ray_threads_per_actor: Whole | None = Field(default=None, ge=1)
    #: A Ray execution that makes no progress for this long fails the pass (Ray's own default is 30 min).
    ray_no_progress_timeout_s: Number = Field(default=120.0, gt=0)
    ray_gpus_per_actor: Number = Field(default=1.0, gt=0)  # per actor of a GPU variant (plan.engines); Ray assigns

    @field_validator("pass_timeout")
    @classmethod
    def _relative_limit(cls, value: str | None) -> str | None:
        if value is not None and relative_factor(value) is None:
            raise ValueError(f"{value!r} is not a limit relative to the warm-up; write it as \"5x warmup\" (a "
                             "factor > 0, 'x', 'warmup'), or give seconds in run.pass_timeout_s")
        return value

    @property
    def pass_timeout_factor(self) -> float | None:
        """The factor of ``pass_timeout`` ("5x warmup" → 5.0); None when the limit is absolute or absent."""
        return relative_factor(self.pass_timeout) if self.pass_timeout is not None else None

    @model_validator(mode="after")
    def _one_limit(self) -> RunSpec:
        if self.pass_timeout_s is not None and self.pass_timeout is not None:
            raise ValueError(f"run.pass_timeout_s = {self.pass_timeout_s:g} and run.pass_timeout = "
                             f"{self.pass_timeout!r} both limit a pass: give one or the other")
        return self

    @model_validator(mode="after")
    def _ray_layout(self) -> RunSpec:
        problem = layout_problem(self.ray_actors, self.ray_cpus_per_actor, self.ray_num_cpus) or \
            gpu_share_problem(self.ray_gpus_per_actor)
        if problem:
            raise ValueError(problem)
        return self


_RELATIVE_LIMIT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*[x×]\s*warm-?up\s*", re.IGNORECASE)


def relative_factor(text: str) -> float | None:
    """``"5x warmup"`` → 5.0 (also ``"2.5 x warm-up"``, ``"5×warmup"``); None when the text is no such limit."""
    match = _RELATIVE_LIMIT.fullmatch(text)
    factor = float(match.group(1)) if match else 0.0
    return factor if factor > 0 else None


class Variant(_Strict):
    name: Text = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    batch_size: Whole = Field(gt=0)
    precision: Text = "fp32"
    bucketing: Flag = False
    padding: Literal["longest", "max_length"] = "longest"
    #: R8: a declared resume variant retries a failing batch in halves; its attempts count in the balance.
    resume: Flag = False
    compile: Flag = False
    device: Text | None = None
    #: Where the pass runs (X4): this machine's runner, or Ray Data actors laid out by ``run.ray_*``.
    engine: Literal["local", "ray"] = "local"
    #: X3: one worker process per device, each with a full model copy, the corpus sharded by token count. On
    #: GPUs: N cards of the machine; on device "cpu": N CPU worker processes sharing the cores (never "cards").
    data_parallel: Whole = Field(default=1, ge=1, le=256)

    @model_validator(mode="after")
    def _parallel_device(self) -> Variant:
        pinned = (self.device or "").strip().lower()
        if self.data_parallel > 1 and pinned.startswith("cuda:"):
            raise ValueError(f"device {self.device!r} names one card but data_parallel = {self.data_parallel} uses "
                             f"{self.data_parallel}: give device 'cuda', 'auto' or 'cpu' (the workers take the "
                             "first visible devices)")
        if self.data_parallel > 1 and self.engine == "ray":
            raise ValueError(f"engine 'ray' with data_parallel = {self.data_parallel}: the Ray engine lays out its "
                             "actors with run.ray_*; data_parallel is the local engine's factor")
        return self

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: str) -> str:
        if value not in PRECISIONS:
            raise ValueError(f"unknown precision {value!r}; known: {', '.join(PRECISIONS)}")
        return value


class Series(_Strict):
    name: Text
    factor: Text
    variants: tuple[Text, ...] = Field(min_length=2)

    @field_validator("factor")
    @classmethod
    def _factor(cls, value: str) -> str:
        if value not in FACTORS:
            raise ValueError(f"unknown factor {value!r}; a series varies one of: {', '.join(FACTORS)}")
        return value


class CalendarTask(_Strict):
    name: Text
    start: Text
    end: Text


class Calendar(_Strict):
    """The rental's calendar (W1, W2): read when parsed with the same rules ``decide`` applies (the zone exists, each
    task's times exist in it and its end is after its start, the deadline is not before the planned tasks end), so
    that ``lock`` refuses what ``decide`` would refuse after the whole campaign."""

    timezone: Text = "UTC"
    deadline: Text | None = None
    tasks: tuple[CalendarTask, ...] = ()

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            load_zone(value)
        except WindowError as exc:
            raise PydanticCustomError("calendar", "{problem}", {"problem": exc.message, "hint": exc.hint}) from None
        return value

    @model_validator(mode="after")
    def _dates(self) -> Calendar:
        zone = load_zone(self.timezone)
        ends: list[tuple[datetime, str]] = []
        for i, task in enumerate(self.tasks):
            at = f"calendar.tasks[{i}] ({task.name})"
            start = _local(task.start, zone, f"{at}.start", "start")
            end = _local(task.end, zone, f"{at}.end", "end")
            try:
                elapsed(start, end)
            except WindowError as exc:
                raise _calendar_error(f"{at}.end", exc.message, exc.hint) from None
            ends.append((end.astimezone(timezone.utc), task.name))
        if self.deadline is not None:
            deadline = _local(self.deadline, zone, "calendar.deadline", "deadline")
            last, name = max(ends, key=lambda e: e[0]) if ends else (None, "")
            if last is not None and deadline.astimezone(timezone.utc) < last:
                local_end = last.astimezone(zone).replace(tzinfo=None).isoformat(timespec="minutes")
                raise _calendar_error(
                    "calendar.deadline", f"deadline {self.deadline} is before the planned tasks end (task {name!r} "
                    f"ends {local_end}): every configuration would miss it",
                    "move the deadline after the last task, or fix the task dates")
        return self


def _calendar_error(key: str, problem: str, hint: str | None) -> PydanticCustomError:
    return PydanticCustomError("calendar", "{problem}", {"at": key, "problem": problem, "hint": hint})


def _local(value: str, zone: Any, key: str, what: str) -> datetime:
    """A calendar time read as ``decide`` reads it (the kit's rules), or a refusal naming its key."""
    try:
        return localize(value, zone, what)[0]
    except WindowError as exc:
        raise _calendar_error(key, exc.message, exc.hint) from None


class CatalogSpec(_Strict):
    path: Text | None = None


class JobSpec(_Strict):
    """The production job the comparison stands for (W4): planned from observed throughput, never counted
    as accepted results (K6)."""

    documents: Whole = Field(gt=0)


class Protocol(_Strict):
    schema_version: Whole = SCHEMA_VERSION
    name: Text
    version: Whole = Field(default=1, ge=1)
    question: Text
    scenario: Text = "offline"
    #: P4: set true if thresholds were tuned after seeing the final corpus (the decision then says so).
    thresholds_tuned_on_final: Flag = False
    #: The kind of job (classification by default) and, for an embedding job, its vectors' rules (plan.task).
    task: TaskSpec = TaskSpec()
    embedding: EmbeddingSpec | None = None
    corpus: CorpusSpec
    #: Several datasets of one job (K6): each variant processes each one, one pass file per dataset.
    datasets: tuple[Dataset, ...] = ()
    model: ModelSpec
    checks: Checks = Checks()
    metric: MetricSpec
    subgroups: tuple[Subgroup, ...] = ()
    reproduction: Reproduction = Reproduction()
    warmup: Warmup = Warmup()
    job: JobSpec | None = None
    run: RunSpec = RunSpec()
    variants: tuple[Variant, ...] = Field(min_length=1)
    series: tuple[Series, ...] = ()
    calendar: Calendar = Calendar()
    catalog: CatalogSpec = CatalogSpec()
    #: K5: other project expenses, each justified, apart from the package fee unless budget.include_expenses.
    expenses: tuple[ExpenseLine, ...] = ()
    budget: BudgetRule = BudgetRule()

    @field_validator("question")
    @classmethod
    def _question_chosen(cls, value: str) -> str:
        if value.lstrip().upper().startswith("CHOOSE"):
            raise ValueError("the draft's question is still marked CHOOSE: write the decision question this campaign "
                             "answers (the draft's wording may be kept once the CHOOSE mark is removed)")
        return value

    @field_validator("scenario")
    @classmethod
    def _offline_only(cls, value: str) -> str:
        if value == "interactive":
            raise ValueError(INTERACTIVE_REFUSAL)
        if value != "offline":
            raise ValueError(f"unknown scenario {value!r}; only 'offline' is supported")
        return value

    @field_validator("schema_version")
    @classmethod
    def _schema(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"schema_version {value} is not supported (expected {SCHEMA_VERSION})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Protocol:
        names = [v.name for v in self.variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate variant name(s): {', '.join(dupes)}")
        if self.metric.reference_variant not in names:
            raise ValueError(
                f"metric.reference_variant {self.metric.reference_variant!r} is not a declared variant "
                f"({', '.join(names)})"
            )
        for series in self.series:
            unknown = [v for v in series.variants if v not in names]
            if unknown:
                raise ValueError(f"series {series.name!r} names unknown variant(s): {', '.join(unknown)}")
        check_datasets(self)
        if task_problem(self):
            raise ValueError(task_problem(self))
        if self.run.pass_timeout is not None and not (self.warmup.inputs and self.warmup.passes):
            raise ValueError(f"run.pass_timeout = {self.run.pass_timeout!r} is relative to the warm-up, but warmup "
                             f"has {self.warmup.inputs} inputs and {self.warmup.passes} passes: declare a warm-up, "
                             "or give run.pass_timeout_s in seconds")
        if any(s.by == "stratum" for s in self.subgroups) and not self.corpus.stratum_column:
            raise ValueError("a subgroup by 'stratum' needs corpus.stratum_column")
        problems = subgroup_problems(self.metric, self.subgroups) + expense_problems(self.expenses, names)
        if problems:
            raise keyed_error(*problems[0])
        return self

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)


def check_datasets(protocol: Protocol) -> None:
    """``corpus.path`` or ``[[datasets]]`` (not both); dataset names unique."""
    if protocol.datasets and protocol.corpus.path is not None:
        raise ValueError("give corpus.path or [[datasets]], not both: with datasets, each names its own file "
                         "and [corpus] gives the columns, classes and strata for all of them")
    if not protocol.datasets and protocol.corpus.path is None:
        raise ValueError("corpus.path is missing (or declare [[datasets]])")
    names = [d.name for d in protocol.datasets]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate dataset name(s): {', '.join(dupes)}")


def _location(data: Any, loc: tuple[Any, ...]) -> str:
    """Render a pydantic error location as a TOML key path, naming array tables by their ``name``."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = None
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                label = node[item].get("name")
            parts[-1] = f"{parts[-1]}[{item}]" + (f" ({label})" if label else "") if parts else f"[{item}]"
            node = node[item] if isinstance(node, list) and item < len(node) else None
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def parse_toml(text: str, source: str = "<protocol>") -> dict[str, Any]:
    """The TOML tables of a protocol text, not yet validated; a syntax error names the source file."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProtocolError(f"{source}: not valid TOML: {exc}", hint="fix the TOML syntax") from None
    except RecursionError:
        raise ProtocolError(f"{source}: not valid TOML: nested too deeply", hint="fix the TOML syntax") from None


def parse_protocol(text: str, source: str = "<protocol>") -> Protocol:
    """Parse and validate protocol text; errors name the source file and the key at fault."""
    data = parse_toml(text, source)
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        raise refusal(data, exc, source) from None


def refusal(data: Any, exc: ValidationError, source: str, model: type[BaseModel] | None = None) -> ProtocolError:
    """One line naming the file and every key at fault (up to 10), with a hint for the first kind of problem."""
    # Unknown keys first: a misspelt key usually explains the "missing" one that follows from it.
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    # A list whose refused items leave it "too short" is the same problem said twice: keep the item's line.
    inner = [tuple(e["loc"]) for e in errors]
    errors = [e for e in errors if e["type"] != "too_short" or not any(
        len(loc) > len(e["loc"]) and loc[:len(e["loc"])] == tuple(e["loc"]) for loc in inner)] or errors
    problems = [_problem(data, e, model or Protocol) for e in errors[:MAX_PROBLEMS]]
    kind = errors[0]["type"]
    hint = {"extra_forbidden": "remove it or check its spelling; unknown keys are refused so that nothing is "
                               "silently ignored",
            "missing": "see the protocol template (iteralab kit export) for every required key"}.get(
        kind, "fix the value" + ("; a locked protocol is amended by raising its version and locking again"
                                 if model in (None, Protocol) else ""))
    hint = (errors[0].get("ctx") or {}).get("hint") or hint  # a check that knows its own remedy says it
    more = f"; and {len(errors) - MAX_PROBLEMS} more" if len(errors) > MAX_PROBLEMS else ""
    return ProtocolError(f"{source}: " + "; ".join(problems) + more, hint=hint)  # one line, every problem


#: How many validation problems a protocol error shows at once.
MAX_PROBLEMS = 10


def _known_keys(loc: tuple[Any, ...], root: type[BaseModel]) -> list[str]:
    """The keys the protocol accepts at the table that holds ``loc``'s last key."""

    model: Any = root
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return []
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _problem(data: Any, error: Any, root: type[BaseModel]) -> str:
    loc = tuple(error["loc"])
    key = (error.get("ctx") or {}).get("at") or _location(data, loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _known_keys(loc, root), n=1)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if error["type"] == "missing":
        return f"missing key '{key}'"
    return f"key '{key}': " + str(error["msg"]).removeprefix("Value error, ")


def load_protocol(path: str | os.PathLike[str]) -> Protocol:
    return parse_protocol(read_protocol_text(path), source=str(Path(path)))


def load_expenses(path: str | os.PathLike[str]) -> ExpenseFile:
    """Read and validate an expenses file; errors name the file and the key, like a protocol's. A whole protocol
    file is read as a protocol (its variant names checked too) and its expense lines taken."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise ProtocolError(f"{path}: expenses file not found", hint="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{path}: cannot read the expenses file: {exc}", hint="save it as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProtocolError(f"{path}: not valid TOML: {exc}", hint="fix the TOML syntax") from None
    if "variants" in data:
        protocol = parse_protocol(text, str(path))
        if not protocol.expenses:
            raise ProtocolError(f"{path}: the protocol declares no [[expenses]] line", hint="add one, or leave out "
                                "--expenses")
        return ExpenseFile(expenses=protocol.expenses, budget=protocol.budget)
    try:
        return ExpenseFile.model_validate(data)
    except ValidationError as exc:
        raise refusal(data, exc, str(path), ExpenseFile) from None


def read_protocol_bytes(path: str | os.PathLike[str]) -> bytes:
    """A protocol file's bytes, read once; a missing or unreadable file is refused in one line."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ProtocolError(f"{path}: protocol file not found", hint="check the path") from None
    except OSError as exc:
        raise ProtocolError(f"{path}: cannot read protocol: {exc.strerror}") from None


def read_protocol_text(path: str | os.PathLike[str], raw: bytes | None = None) -> str:
    """A protocol file's text (from ``raw``, its bytes when already read); non-UTF-8 text is refused in one line."""
    try:
        return (read_protocol_bytes(path) if raw is None else raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{path}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8") from None


def series_violations(protocol: Protocol) -> list[str]:
    """R1: each series must vary exactly its declared factor; list every other differing field."""
    problems: list[str] = []
    for series in protocol.series:
        variants = [protocol.variant(n) for n in series.variants]
        base = variants[0].model_dump(exclude={"name"})
        if len({v.model_dump()[series.factor] for v in variants}) < len(variants):
            problems.append(f"series {series.name!r}: two variants share the same {series.factor}")
        for other in variants[1:]:
            diff = sorted(k for k, v in other.model_dump(exclude={"name"}).items() if base[k] != v)
            extra = [k for k in diff if k != series.factor]
            if extra:
                problems.append(
                    f"series {series.name!r} declares factor {series.factor!r} but {variants[0].name!r} and "
                    f"{other.name!r} also differ in {', '.join(extra)}"
                )
    return problems


def check_series(protocol: Protocol, source: str = "<protocol>") -> None:
    problems = series_violations(protocol)
    if problems:
        raise ProtocolError(
            f"{source}: {problems[0]}",
            hint="a series varies exactly one declared factor; put other changes in their own series",
        )
