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
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from iteralab.errors import ProtocolError
from iteralab.plan.expenses import BudgetRule, ExpenseFile, ExpenseLine, expense_problems, keyed_error
from iteralab.plan.metric import MetricSpec, Subgroup, subgroup_problems
from iteralab.plan.tables import (Calendar, CatalogSpec, Checks, CorpusSource, CorpusSpec, Dataset, JobSpec, ModelSpec,
                                  Reproduction, RunSpec, Series, StatsSpec, Variant, Warmup,
                                  corpus_sources)
from iteralab.plan.task import EmbeddingSpec, GenerationSpec, ScoringSpec, TaskSpec, task_problem
from iteralab.plan.values import Flag, Strict as _Strict, Text, Whole

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA_VERSION = 1
LOCK_SUFFIX = ".lock.json"

INTERACTIVE_REFUSAL = (
    "scenario 'interactive' is not supported: an interactive service needs request arrivals, concurrency "
    "and an acceptable latency defined first, and an offline ranking does not carry over to it"
)


class Protocol(_Strict):
    schema_version: Whole = Field(default=SCHEMA_VERSION, description=(
        "Version of the protocol file format; only 1 is read."))
    name: Text = Field(description="Name of the protocol, recorded in every raw-table row and note.")
    version: Whole = Field(default=1, ge=1, description=(
        "Protocol version: an amended protocol (new inputs, new choices) is a new version, locked again."))
    question: Text = Field(description=(
        "The decision question this campaign answers, in words (a draft's CHOOSE mark is refused)."))
    scenario: Text = Field(default="offline", description=(
        "Only \"offline\" (a batch job over a corpus); \"interactive\" is refused: it needs request arrivals, "
        "concurrency and an acceptable latency defined first."))
    thresholds_tuned_on_final: Flag = Field(default=False, description=(
        "P4: true if thresholds were tuned after seeing the final corpus (the decision then says so)."))
    task: TaskSpec = Field(default=TaskSpec(), description=(
        "The kind of job: classification (default), embedding, generation or scoring."))
    embedding: EmbeddingSpec | None = Field(default=None, description=(
        "For an embedding job: how vectors are made and how far a variant's may move from the reference's."))
    generation: GenerationSpec | None = Field(default=None, description=(
        "For a generation job: the prompt, greedy decoding's limits and the bounds on the outputs' lengths."))
    scoring: ScoringSpec | None = Field(default=None, description=(
        "For a scoring job: the pair, group and relevance columns, the cross-encoder's activation and how far a "
        "variant's scores and orderings may move from the reference's."))
    corpus: CorpusSpec = Field(description=(
        "The comparison corpus (or, with [[datasets]], the columns, classes and strata of every dataset)."))
    datasets: tuple[Dataset, ...] = Field(default=(), description=(
        "K6: several datasets of one job; each variant processes each one, one pass file per dataset."))
    model: ModelSpec = Field(description=(
        "The model under test: a classifier folder, an encoder with a trained head, an encoder, or a callable."))
    checks: Checks = Field(default=Checks(), description=(
        "The intrinsic checks of every prediction file (coverage, probability sums)."))
    metric: MetricSpec = Field(description=(
        "The quality metric, its threshold and its tolerance against the reference variant."))
    subgroups: tuple[Subgroup, ...] = Field(default=(), description=(
        "Planned subgroups (length strata, classes), gating or not, judged in every pass."))
    reproduction: Reproduction = Field(default=Reproduction(), description=(
        "The reproduction target a variant must hold against the reference pass."))
    warmup: Warmup = Field(default=Warmup(), description=(
        "The warm-up before every measured pass (same rule for every variant)."))
    job: JobSpec | None = Field(default=None, description=(
        "W4: the production job the comparison stands for, planned from observed throughput."))
    run: RunSpec = Field(default=RunSpec(), description=(
        "How the passes run: how many, in which isolation, on which device, with which limits."))
    stats: StatsSpec = Field(default=StatsSpec(), description=(
        "T4, T5: how pass times are compared, fixed before timing: the error rate, one- or two-sided, and what "
        "counts of a pass measured under concurrent load."))
    variants: tuple[Variant, ...] = Field(min_length=1, description=(
        "The configurations compared; each one's passes are rotated with the others'."))
    series: tuple[Series, ...] = Field(default=(), description=(
        "R1: groups of variants that differ in exactly one factor; comparisons are made inside a series."))
    calendar: Calendar = Field(default=Calendar(), description=(
        "W1, W2: the rental's calendar (zone, tasks, deadline) that sets the window a package must cover."))
    catalog: CatalogSpec = Field(default=CatalogSpec(), description=(
        "The package catalog the decision prices from (default: the shipped snapshot)."))
    expenses: tuple[ExpenseLine, ...] = Field(default=(), description=(
        "K5: other project expenses, each justified, listed apart from the package fee unless "
        "budget.include_expenses."))
    budget: BudgetRule = Field(default=BudgetRule(), description=(
        "Whether the expenses enter the ranking and the cost per verified corpus."))

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

    def sources(self) -> tuple[CorpusSource, ...]:
        """The corpus files every variant processes (:func:`iteralab.plan.tables.corpus_sources`)."""
        return corpus_sources(self.corpus, self.datasets)

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
