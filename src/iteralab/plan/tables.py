"""The protocol's tables (P1, R1, R5, W1, W2, X3, X4): corpus, model, checks, reproduction, warm-up, run, variants,
series, calendar, catalog and job, each a strict model whose every key carries its description.

:mod:`iteralab.plan.protocol` assembles them (with the metric, task and expense tables) into the protocol file;
the protocol reference page of the documentation is generated from these descriptions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from iteralab.kit.calcul_forfaits import WindowError, elapsed, load_zone, localize
from iteralab.kit.memoire import PRECISIONS  # the kit's list: one list for library and kit
from iteralab.plan.engines import gpu_share_problem, layout_problem
from iteralab.plan.values import Flag, Number, Strict as _Strict, Text, Whole


#: The variant fields a series may vary (R1). Everything else is fixed by the protocol for all variants.
FACTORS = ("batch_size", "precision", "bucketing", "padding", "resume", "compile", "device", "data_parallel",
           "engine")


class CorpusSpec(_Strict):
    path: Text | None = Field(default=None, description=(
        "The comparison corpus: CSV, JSONL or Parquet with id, text and label columns; absent when the protocol "
        "declares [[datasets]] (K6)."))
    tuning_path: Text | None = Field(default=None, description=(
        "Optional tuning split (thresholds and heads are fixed on it only); must be disjoint from the corpus by id and"
        " by whitespace-normalised text."))
    id_column: Text = Field(default="id", description=(
        "Id column; without it ids are derived from the texts (lock says so)."))
    text_column: Text = Field(default="text", description="Text column.")
    label_column: Text = Field(default="label", description="Reference label column.")
    reference_column: Text | None = Field(default=None, description=(
        "A generation job: the column holding each document's reference answer (its built-in metric's "
        "reference)."))
    stratum_column: Text | None = Field(default="stratum", description=(
        "Column holding each row's length stratum (checked against its token count)."))
    classes: tuple[Text, ...] = Field(default=(), description=(
        "A classification job's class names, in the order of the model's outputs (lock checks it against "
        "config.json or the head), at least two; an embedding job's corpus with labels may declare them too. "
        "Absent (or []) for a generation job and for an embedding job's corpus without labels."))
    strata: dict[str, tuple[Whole, ...]] = Field(default_factory=dict, description=(
        "Token-length strata by the model's own tokenizer: name -> [min, max] inclusive, or [min] open-ended."))

    @field_validator("classes")
    @classmethod
    def _two_or_none(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) == 1:
            raise ValueError("List should have at least 2 items (or none: a generation job, or an embedding job's "
                             "corpus without labels)")
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

    name: Text = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description=(
        "Name of the dataset (letters, digits, '_', '.', '-'), shown in the raw table's dataset column."))
    path: Text = Field(description="The dataset's file, read with the [corpus] columns.")


@dataclass(frozen=True)
class CorpusSource:
    """One corpus file the passes read: a declared dataset (K6), or the one ``[corpus] path`` — a one-corpus
    protocol is a campaign of one dataset, whose name is None (no ``dataset`` cell, no ``-d`` in pass ids)."""

    name: str | None
    path: str


def corpus_sources(corpus: CorpusSpec, datasets: Sequence[Dataset]) -> tuple[CorpusSource, ...]:
    """The corpus files every variant processes, in declaration order: each ``[[datasets]]`` entry, or the one
    ``[corpus] path`` as a single unnamed source (none while a draft names neither)."""
    if datasets:
        return tuple(CorpusSource(d.name, d.path) for d in datasets)
    return (CorpusSource(None, str(corpus.path)),) if corpus.path is not None else ()


class ModelSpec(_Strict):
    kind: Literal["hf_classifier", "encoder_head", "callable", "encoder", "hf_causal_lm", "hf_seq2seq",
                  "hf_cross_encoder"] = Field(
        description=("hf_classifier: a sequence-classification folder; encoder_head: an encoder + a linear head in "
                     "safetensors; encoder: an embedding job's encoder; hf_causal_lm, hf_seq2seq: a generation "
                     "job's causal LM or encoder-decoder folder; hf_cross_encoder: a scoring job's "
                     "sequence-classification folder read as a cross-encoder; callable: your Python function."))
    path: Text | None = Field(default=None, description=(
        "The model folder, or package:NAME/sub for a folder inside an installed package (required but for a callable, "
        "where it may name a tokenizer folder used to count tokens)."))
    head: Text | None = Field(default=None, description=(
        "encoder_head: the linear head (safetensors), trained on the tuning split only (iteralab head train)."))
    callable: Text | None = Field(default=None, description=(
        "callable: package.module:function, called once per batch with the texts."))
    max_length: Whole = Field(default=256, gt=0, description="Maximum tokens per text the model is given.")
    truncation: Flag = Field(default=True, description=(
        "Truncate texts longer than max_length (otherwise the tokenizer refuses them)."))
    trust_remote_code: Flag = Field(default=False, description=(
        "Allow the model folder's own code to run (transformers' trust_remote_code)."))
    runs_on: Literal["local", "remote"] = Field(default="local", description=(
        "Where a callable's work runs: local (this machine: timed and priced as the hardware observed here) or "
        "remote (an API or a server on another machine: the times include the service and the network, and no "
        "rental package is priced from them)."))
    service: Text | None = Field(default=None, description=(
        "runs_on = \"remote\": the remote service's name (e.g. \"vLLM on the team's A100 server\"), named in the "
        "decision as where the work ran."))

    @model_validator(mode="after")
    def _complete(self) -> ModelSpec:
        if self.kind in ("hf_classifier", "encoder_head", "encoder", "hf_causal_lm", "hf_seq2seq",
                         "hf_cross_encoder") and not self.path:
            raise ValueError(f"model.path is required for kind {self.kind!r}")
        if self.kind == "encoder_head" and not self.head:
            raise ValueError("model.head (a safetensors file) is required for kind 'encoder_head'")
        if self.kind == "callable" and not self.callable:
            raise ValueError("model.callable ('package.module:function') is required for kind 'callable'")
        if (self.callable or "").lstrip().upper().startswith("CHOOSE"):
            raise ValueError("model.callable is still marked CHOOSE: name your function as 'package.module:function' "
                             "(its module importable: its folder on PYTHONPATH)")
        return self

    @model_validator(mode="after")
    def _where_it_runs(self) -> ModelSpec:
        if self.runs_on == "remote" and self.kind != "callable":
            raise ValueError(f"model.runs_on = 'remote' is for a callable that sends its work elsewhere; kind "
                             f"{self.kind!r} runs here (remove runs_on)")
        if self.runs_on == "remote" and not (self.service or "").strip():
            raise ValueError("model.runs_on = 'remote' needs model.service: the remote service's name (e.g. \"vLLM on "
                             "the team's A100 server\"), named in the decision as where the work ran")
        if self.service is not None and self.runs_on != "remote":
            raise ValueError("model.service names a remote service: declare model.runs_on = 'remote' beside it, or "
                             "remove it")
        return self

    @property
    def remote_service(self) -> str | None:
        """The remote service a callable sends its work to (``runs_on = "remote"``); None when the work runs here."""
        return self.service if self.runs_on == "remote" else None


class Checks(_Strict):
    coverage: Number = Field(default=1.0, gt=0, le=1, description=(
        "Fraction of the expected ids that must carry a prediction (1.0 = all documents)."))
    probability_sum_tolerance: Number = Field(default=1e-3, gt=0, lt=1, description=(
        "Probabilities of each record must sum to 1 within this tolerance."))


class Reproduction(_Strict):
    target: Literal["identical", "bounded", "acceptable"] = Field(default="acceptable", description=(
        "identical: same labels and probabilities as the reference pass; bounded: probabilities within bound; "
        "acceptable: the quality checks only."))
    bound: Number | None = Field(default=None, gt=0, description=(
        "For 'bounded': the largest absolute probability difference allowed against the reference pass."))
    seeds: tuple[Whole, ...] = Field(default=(0,), description="Seeds set before every pass.")
    deterministic: Flag = Field(default=True, description=(
        "Ask torch for deterministic algorithms (what was observed is recorded)."))

    @model_validator(mode="after")
    def _bound(self) -> Reproduction:
        if self.target == "bounded" and self.bound is None:
            raise ValueError("reproduction.bound is required when target = 'bounded'")
        return self


class Warmup(_Strict):
    inputs: Whole = Field(default=16, ge=0, description=(
        "Warm-up texts: the first ones of the pass order, run with the variant's batch size before every measured "
        "pass. Compilation happens here."))
    passes: Whole = Field(default=1, ge=0, description="Warm-up repetitions over those texts (0: none).")
    recompilation: Text = Field(
        default="a recompilation during the measured pass is recorded in notes, never hidden",
        description="The rule for a recompilation during the measured pass, recorded in the protocol as written.")


class RunSpec(_Strict):
    passes: Whole = Field(default=5, ge=1, description=(
        "Measured passes per variant (rounds); no difference is claimed from fewer than 3 counted passes."))
    isolation: Literal["process", "inprocess"] = Field(default="process", description=(
        "process: every pass in a process of its own (forked from a template); inprocess: in the runner (tests, quick "
        "tries)."))
    device: Text = Field(default="auto", description="Default device of the variants: auto, cpu, cuda or cuda:N.")
    pass_timeout_s: Number | None = Field(default=None, gt=0, description=(
        "A limit fixed in advance for one measured pass (seconds): a pass that exceeds it is stopped and kept as a "
        "failed row with the inputs it completed (R8)."))
    pass_timeout: Text | None = Field(default=None, description=(
        "The same limit relative to each pass's own warm-up, e.g. \"5x warmup\": the factor x the warm-up's time per "
        "document x the documents of the pass. Give this or pass_timeout_s, not both."))
    exclusion_rule: Text = Field(
        default=("a pass is excluded only for a documented external incident (concurrent load detected by iteralab "
                 "is one, handled by stats.loaded_passes); the same rule applies to every variant"),
        description="The rule for excluding a pass (iteralab exclude), the same for every variant.")
    ray_address: Text | None = Field(default=None, description=(
        "Ray engine (X4): an existing cluster's address (or \"auto\"); absent: a local Ray of ray_num_cpus CPUs."))
    ray_num_cpus: Whole | None = Field(default=None, ge=1, description=(
        "CPUs of the local Ray (default: this machine's)."))
    ray_actors: Whole = Field(default=1, ge=1, description="Actors of the Ray pool, each holding a model copy.")
    ray_cpus_per_actor: Number = Field(default=1.0, gt=0, description=(
        "CPUs each actor asks for; the layout must leave a CPU for Ray Data's read tasks."))
    ray_threads_per_actor: Whole | None = Field(default=None, ge=1, description=(
        "Torch threads in each actor; absent keeps Ray's rule (floor of the actor's CPUs, at least 1)."))
    ray_no_progress_timeout_s: Number = Field(default=120.0, gt=0, description=(
        "A Ray execution that makes no progress for this long fails the pass."))
    # per actor of a GPU variant (plan.engines); Ray assigns
    ray_gpus_per_actor: Number = Field(default=1.0, gt=0, description=(
        "GPUs (or a share of one) each actor of a GPU variant asks Ray for."))

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


class StatsSpec(_Strict):
    level: Number = Field(default=0.05, gt=0, lt=0.5, description=(
        "T5: the error rate declared before timing: two variants are called distinguished only when the exact rank "
        "test of their counted passes gives p at most this (also the speed-up interval's 1 - level)."))
    sided: Literal["two", "one"] = Field(default="two", description=(
        "two: the level bounds the chance of calling either of two identical variants faster; one: the level is "
        "per direction (either of two identical variants is called faster up to twice as often)."))
    loaded_passes: Literal["apart", "counted"] = Field(default="apart", description=(
        "A pass measured under concurrent load is an external incident (T4). apart: it stays in the raw table, "
        "marked, and is not counted (statistics, comparisons and decision use the quiet passes); counted: it is "
        "counted, and every comparison says how many counted passes were loaded."))


_RELATIVE_LIMIT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*[x×]\s*warm-?up\s*", re.IGNORECASE)


def relative_factor(text: str) -> float | None:
    """``"5x warmup"`` → 5.0 (also ``"2.5 x warm-up"``, ``"5×warmup"``); None when the text is no such limit."""
    match = _RELATIVE_LIMIT.fullmatch(text)
    factor = float(match.group(1)) if match else 0.0
    return factor if factor > 0 else None


class Variant(_Strict):
    name: Text = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description=(
        "Name of the variant (letters, digits, '_', '.', '-')."))
    batch_size: Whole = Field(gt=0, description="Texts per batch.")
    precision: Text = Field(default="fp32", description="fp32, bf16, fp16 or int8-dynamic.")
    bucketing: Flag = Field(default=False, description=(
        "Batches of texts of similar token count (the corpus order is restored in the prediction file); engine "
        "'local' only."))
    padding: Literal["longest", "max_length"] = Field(default="longest", description=(
        "Pad each batch to its longest text, or every batch to model.max_length."))
    resume: Flag = Field(default=False, description=(
        "R8: a failing batch is retried in halves; the attempts count in the balance."))
    compile: Flag = Field(default=False, description="torch.compile the model (during the warm-up).")
    device: Text | None = Field(default=None, description="auto, cpu, cuda or cuda:N; absent: run.device.")
    engine: Literal["local", "ray"] = Field(default="local", description=(
        "Where the pass runs (X4): this machine's runner, or Ray Data actors laid out by run.ray_*."))
    data_parallel: Whole = Field(default=1, ge=1, le=256, description=(
        "X3: one worker process per device, each with a full model copy, the corpus sharded by token count; on device "
        "\"cpu\": N CPU processes sharing the cores."))

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
        if self.bucketing and self.engine == "ray":
            raise ValueError("engine 'ray' with bucketing = true: the Ray engine does not order its batches by length "
                             "(Ray Data hands the actors its blocks as it reads them), so the variant would run "
                             "unbucketed; declare bucketing = false for the Ray variant, or engine 'local'")
        return self

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: str) -> str:
        if value not in PRECISIONS:
            raise ValueError(f"unknown precision {value!r}; known: {', '.join(PRECISIONS)}")
        return value


class Series(_Strict):
    name: Text = Field(description="Name of the series.")
    factor: Text = Field(description=(
        "The one variant key the series varies: batch_size, precision, bucketing, padding, resume, compile, device, "
        "data_parallel or engine."))
    variants: tuple[Text, ...] = Field(min_length=2, description=(
        "The variants of the series, identical but for the factor."))

    @field_validator("factor")
    @classmethod
    def _factor(cls, value: str) -> str:
        if value not in FACTORS:
            raise ValueError(f"unknown factor {value!r}; a series varies one of: {', '.join(FACTORS)}")
        return value


class CalendarTask(_Strict):
    name: Text = Field(description="What the task is (setup, comparisons, export …).")
    start: Text = Field(description="Local start time in the calendar's zone, YYYY-MM-DDTHH:MM.")
    end: Text = Field(description="Local end time in the calendar's zone, after the start.")


class Calendar(_Strict):
    """The rental's calendar (W1, W2): read when parsed with the same rules ``decide`` applies (the zone exists, each
    task's times exist in it and its end is after its start, the deadline is not before the planned tasks end), so
    that ``lock`` refuses what ``decide`` would refuse after the whole campaign."""

    timezone: Text = Field(default="UTC", description="IANA time zone of the calendar's times (e.g. Europe/Paris).")
    deadline: Text | None = Field(default=None, description=(
        "Local time by which the job must be done; absent: no deadline is checked."))
    tasks: tuple[CalendarTask, ...] = Field(default=(), description=(
        "Dated tasks on the rental; overlapping tasks are merged, never counted twice. Without tasks decide plans no "
        "window and prices no rental."))

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
    path: Text | None = Field(default=None, description=(
        "Package catalog CSV (the kit's tarifs-forfaits.csv columns); absent: the shipped snapshot."))


class JobSpec(_Strict):
    """The production job the comparison stands for (W4): planned from observed throughput, never counted
    as accepted results (K6)."""

    documents: Whole = Field(gt=0, description=(
        "Documents of the production job, planned from observed throughput (never counted as results)."))
