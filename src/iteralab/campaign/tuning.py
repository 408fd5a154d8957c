"""The step before choosing the threshold (P1, P4): the protocol's model, whatever its kind, measured on the
protocol's tuning split with the protocol's metric and planned subgroups, the threshold it suggests, and the
corpus size the tolerance needs.

Reads a protocol, a draft whose threshold is still ``"CHOOSE"`` included (only the tables it needs are
validated: corpus, model, metric name, subgroups, variants, run device), its tuning split and its model. Writes
nothing (the command writes the sample-size record): the protocol file, its lock and any campaign are left as
they are. The suggestion follows the rule of ``iteralab head train``
(:func:`iteralab.plan.prepare.suggest_threshold`); the metric and the subgroups are the campaign's own
(:mod:`iteralab.campaign.verdict.evaluate`). A generation job's model answers the tuning split's prompts (rendered
as a pass renders them, with the protocol's decoding limits) and is scored against the split's reference answers
with the protocol's text metric.

An embedding job judged by a ranking metric (``recall_at_k``, ``mrr``, ``ndcg_at_k``) is measured the same way:
the tuning split's documents and the tuning queries (``metric.tuning_queries``, whose relevant ids are documents of
the tuning split; ``iteralab prepare --queries`` writes both) embedded by the model, ranked by cosine and scored
by the campaign's own ranking code (:mod:`iteralab.campaign.kinds.ranking`); every ranking value is a note.

Each other variant with its own precision, padding or batch size is run the same way, and its disagreement with
the reference (:class:`iteralab.plan.samplesize.Disagreement`: per-document or per-query paired differences, or a
paired bootstrap for a classifier's averages over classes) gives the final corpus size the tolerance needs; the
measure carries it as a :class:`~iteralab.plan.samplesize.SizeRecord`, which ``iteralab threshold`` writes beside
the protocol for ``lock``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from iteralab.campaign.engines.passes import error_text
from iteralab.campaign.kinds.embedding.verdict import relevance_of
from iteralab.campaign.kinds.classification.verdict import metric_of_codes, subgroup_metrics
from iteralab.campaign.kinds.expected import Expected
from iteralab.campaign.kinds.classification.resample import paired_bootstrap
from iteralab.campaign.kinds.embedding.knn import query_ranks
from iteralab.campaign.kinds.generation.textmetrics import corpus_score, document_scores
from iteralab.campaign.kinds.ranking import Ranking
from iteralab.common.files import sha256_file
from iteralab.errors import CorpusError, IteraError, ProtocolError, WorkloadError
from iteralab.models import factory
from iteralab.models.factory import WorkloadSpec
from iteralab.models.generated import GenerationSettings
from iteralab.plan.corpus import check_disjoint_from_file, load_corpus
from iteralab.plan.metric import EMBEDDING_METRICS, QUERY_METRICS, MetricName, Subgroup
from iteralab.plan.paths import resolve
from iteralab.plan.prepare import suggest_threshold
from iteralab.plan.protocol import CorpusSpec, Dataset, ModelSpec, Variant, parse_toml, read_protocol_text, refusal
from iteralab.plan.queries import load_queries, unknown_relevant
from iteralab.plan.samplesize import Disagreement, SizeRecord, size_lines
from iteralab.plan.tables import corpus_sources
from iteralab.plan.task import GenerationSpec, TaskSpec, prompt_spec, rules_of
from iteralab.plan.values import Text, Whole

#: Batch size when the protocol names no reference variant to take it from.
DEFAULT_BATCH = 8
Progress = Callable[[int, int], None]


class _Loose(BaseModel):
    """A protocol table read for the tuning measurement: the keys it needs are checked, the rest left to lock."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _Metric(_Loose):
    name: MetricName
    reference_variant: Text | None = None
    tolerance: float | str | None = None  # a draft's "CHOOSE" is read as not chosen
    relative_tolerance: float | str | None = None
    confidence: float | None = Field(default=None, gt=0, lt=1)
    power: float = Field(default=0.8, gt=0, lt=1)
    k: Whole | None = None
    tuning_queries: Text | None = None
    queries_id_column: Text = "query_id"
    queries_text_column: Text = "text"


class _Embedding(_Loose):
    pooling: Text = "mean"
    normalize: bool = True


class _Run(_Loose):
    device: Text = "auto"


class TuningView(_Loose):
    """What the tuning measurement reads of a protocol. A threshold or tolerance still ``"CHOOSE"``, the
    question, the calendar and the rest are not read here: ``lock`` checks them."""

    task: TaskSpec = TaskSpec()
    generation: GenerationSpec | None = None
    embedding: _Embedding = _Embedding()
    corpus: CorpusSpec
    datasets: tuple[Dataset, ...] = ()
    model: ModelSpec
    metric: _Metric
    subgroups: tuple[Subgroup, ...] = ()
    variants: tuple[Variant, ...] = ()
    run: _Run = _Run()

    @model_validator(mode="after")
    def _strata(self) -> TuningView:
        if any(s.by == "stratum" for s in self.subgroups) and not self.corpus.stratum_column:
            raise ValueError("a subgroup by 'stratum' needs corpus.stratum_column")
        if rules_of(self).prompts and (prompt_spec(self) is None or not self.corpus.reference_column):
            raise ValueError("a generation job's tuning measurement needs the [generation] table (the prompt and "
                             "max_new_tokens) and corpus.reference_column (the reference answers it is scored on)")
        if self.metric.name in EMBEDDING_METRICS and self.metric.name not in QUERY_METRICS:
            raise ValueError(f"metric {self.metric.name!r}: the tuning measurement suggests the threshold of a "
                             "classifier or of a ranking metric (recall_at_k, mrr, ndcg_at_k); measure "
                             f"{self.metric.name} with a campaign on the tuning split")
        return self

    @property
    def ranking(self) -> bool:
        """Whether the metric ranks queries among the documents (an embedding job's recall_at_k, mrr, ndcg_at_k)."""
        return self.metric.name in QUERY_METRICS

    def reference(self) -> Variant | None:
        return next((v for v in self.variants if v.name == self.metric.reference_variant), None)

    def candidates(self) -> list[Variant]:
        """The variants measured against the reference for the sample-size figure: one per distinct precision,
        padding and batch size other than the reference's (the settings that can change a model's output; the
        engine, device and parallelism are assumed not to)."""
        reference = self.reference()
        if reference is None:
            return []
        seen = {_settings_key(reference)}
        out = []
        for variant in self.variants:
            if _settings_key(variant) not in seen:
                seen.add(_settings_key(variant))
                out.append(variant)
        return out

    def tolerance_on(self, reference_value: float) -> float | None:
        """The declared tolerance in the metric's units (a relative one times the reference's tuning value);
        None while it is not chosen."""
        metric = self.metric
        if isinstance(metric.relative_tolerance, float):
            return metric.relative_tolerance * abs(reference_value)
        return metric.tolerance if isinstance(metric.tolerance, float) else None


def _settings_key(variant: Variant) -> tuple[str, str, int]:
    return (variant.precision, variant.padding, variant.batch_size)


@dataclass(frozen=True)
class TuningSettings:
    """How the tuning measurement ran the model: the reference variant's settings (fp32, batch
    :data:`DEFAULT_BATCH` where no reference is declared yet) and the device it ran on."""

    variant: str | None
    precision: str
    padding: str
    batch_size: int
    device: str

    def to_json(self) -> dict[str, str | int | None]:
        return asdict(self)


@dataclass(frozen=True)
class TuningMeasure:
    """The model on the tuning split: the metric overall and per planned subgroup, and the suggested threshold."""

    protocol: str
    tuning: str
    tuning_size: int
    metric_name: str
    metric: float
    subgroups: dict[str, float | None]
    suggested_threshold: float
    how: str
    settings: TuningSettings
    notes: list[str] = field(default_factory=list)
    sizes: SizeRecord | None = None
    size_text: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "protocol": self.protocol, "tuning": self.tuning,
                "tuning_size": self.tuning_size, "metric_name": self.metric_name, "metric": round(self.metric, 4),
                "subgroups": {k: None if v is None else round(v, 4) for k, v in self.subgroups.items()},
                "suggested_threshold": self.suggested_threshold, "how": self.how, "settings": self.settings.to_json(),
                "notes": list(self.notes),
                "sample_size": None if self.sizes is None else {**json.loads(self.sizes.to_json()),
                                                                "lines": list(self.size_text)}}

    def lines(self) -> list[str]:
        out = [f"{self.metric_name} on {Path(self.tuning).name} ({self.tuning_size} texts): {self.metric:.4f}"]
        groups: dict[str, list[str]] = {}
        for key, value in self.subgroups.items():
            name, _, group = key.partition(":")
            groups.setdefault(name, []).append(f"{group} {'-' if value is None else f'{value:.4f}'}")
        out += [f"  {name}: {', '.join(values)}" for name, values in groups.items()]
        out.append(f"suggested threshold {self.suggested_threshold:.2f}: {self.how}")
        run = self.settings
        named = f"variant {run.variant}" if run.variant else "no reference variant"
        out.append(f"measured with {named}: batch {run.batch_size}, {run.precision}, padding "
                   f"{run.padding}, device {run.device}")
        out += self.size_text
        out += [f"note: {note}" for note in self.notes]
        return out


def read_view(protocol_path: str | os.PathLike[str]) -> TuningView:
    """The tables the tuning measurement needs, validated; a draft's unchosen values are not read."""
    source = str(Path(protocol_path))
    data = parse_toml(read_protocol_text(protocol_path), source)
    try:
        return TuningView.model_validate(data)
    except ValidationError as exc:
        raise refusal(data, exc, source, model=TuningView) from None


def measure_tuning(protocol_path: str | os.PathLike[str], *, progress: Progress | None = None) -> TuningMeasure:
    """``iteralab threshold``: run the protocol's model on its tuning split (with the reference variant's
    precision, padding and batch size) and score it with the protocol's metric and subgroups."""

    path = Path(protocol_path)
    view = read_view(path)
    spec = view.corpus
    if not spec.tuning_path:
        raise ProtocolError(f"{path}: corpus.tuning_path is not declared: there is no tuning split to measure the "
                            "model on", hint="declare the tuning split (iteralab prepare writes tuning.csv); the "
                                             "threshold is never chosen on the final corpus (P4)")
    tuning_file = resolve(path, spec.tuning_path)
    if rules_of(view).prompts:  # documents become prompts, scored against reference answers
        return _measure_generation(path, view, tuning_file, progress)
    split = _tuning_split(path, view, tuning_file)
    if view.ranking:
        return _measure_ranking(path, view, tuning_file, split, progress)
    workload, settings = _load(path, view)
    texts = list(split.texts)
    probs = _infer(workload, texts, settings.batch_size, progress)
    by_stratum = any(s.by == "stratum" for s in view.subgroups)
    strata = dict(zip(split.ids, split.columns[spec.stratum_column])) if by_stratum else {}
    expected = Expected.of(split.ids, dict(zip(split.ids, split.labels)), strata, spec.classes)
    predicted = probs.argmax(axis=1).astype(expected.labels.dtype)
    k = len(spec.classes)
    measured = metric_of_codes(view.metric.name, expected.labels, predicted, k)
    subgroups = subgroup_metrics(view, expected, np.ones(len(expected), dtype=bool), predicted)
    suggested, how = suggest_threshold(measured, view.metric.name, f"{tuning_file.name} ({len(split)} texts)")
    candidates, notes = [], _notes(view, workload, tuning_file)
    del workload  # one model held at a time: each candidate's is loaded after the reference's is let go
    for variant in view.candidates():
        other, other_settings = _load(path, view, variant)
        theirs = _infer(other, texts, other_settings.batch_size, progress).argmax(axis=1).astype(predicted.dtype)
        del other
        discordant = float(np.mean(theirs != predicted))
        if view.metric.name == "accuracy":  # a mean of per-document correctness: the paired differences
            candidates.append(Disagreement.of_values(variant.name, predicted == expected.labels,
                                                     theirs == expected.labels, "documents", discordant))
        else:  # macro-F1 and the other averages over classes: a paired bootstrap of the tuning split
            draws = paired_bootstrap(view.metric.name, expected.labels, predicted, theirs, k)
            difference = metric_of_codes(view.metric.name, expected.labels, theirs, k) - measured
            candidates.append(Disagreement.of_bootstrap(variant.name, difference, draws, len(split), "documents",
                                                        discordant))
    return _with_sizes(view, tuning_file, measured, candidates, TuningMeasure(
        protocol=str(path), tuning=str(tuning_file), tuning_size=len(split), metric_name=view.metric.name,
        metric=measured, subgroups=subgroups, suggested_threshold=suggested, how=how, settings=settings,
        notes=notes))


def _infer(workload: Any, texts: list[str], batch: int, progress: Progress | None) -> np.ndarray:
    """The model's output rows (a classifier's probabilities, an encoder's vectors) for ``texts``, in batches."""
    rows = []
    for start in range(0, len(texts), batch):
        rows.append(np.asarray(workload.infer(workload.tokenize(texts[start:start + batch])), dtype=np.float32))
        if progress is not None:
            progress(min(start + batch, len(texts)), len(texts))
    return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)


def _generate(workload: Any, prompts: list[str], batch: int, progress: Progress | None) -> list[str]:
    outputs: list[str] = []
    for start in range(0, len(prompts), batch):
        outputs += workload.generate(prompts[start:start + batch]).texts
        if progress is not None:
            progress(len(outputs), len(prompts))
    return outputs


def _with_sizes(view: TuningView, tuning_file: Path, measured: float, candidates: list[Disagreement],
                measure: TuningMeasure) -> TuningMeasure:
    """``measure`` with the sample-size record of its candidates and the lines that say it."""
    record = SizeRecord(metric=view.metric.name, tuning=tuning_file.name, tuning_sha256=sha256_file(tuning_file),
                        reference_value=float(measured), candidates=tuple(candidates))
    lines = size_lines(record, view.tolerance_on(measured), view.metric.confidence, view.metric.power)
    return replace(measure, sizes=record, size_text=lines)


def _measure_generation(path: Path, view: TuningView, tuning_file: Path, progress: Progress | None) -> TuningMeasure:
    """A generation job's model on the tuning split: every prompt rendered from the split's text and columns as a
    pass renders it, generated greedily with the protocol's limits, scored against the split's reference answers
    with the protocol's metric (overall and per planned stratum group)."""

    spec, generation = view.corpus, view.generation
    assert generation is not None and spec.reference_column
    reference = spec.reference_column
    split = _tuning_split(path, view, tuning_file, extra=[reference, *generation.columns])
    missing = [i for i, answer in zip(split.ids, split.columns[reference]) if answer is None]
    if missing:
        raise CorpusError(f"{tuning_file}: id {missing[0]!r} has no reference answer in column {reference!r} "
                          f"({len(missing)} such rows)", hint="give every tuning document its reference answer")
    workload, settings = _load(path, view)
    prompts = generation.render_all(split.texts, {name: split.columns[name] for name in generation.columns})
    outputs = _generate(workload, prompts, settings.batch_size, progress)
    references = [str(answer) for answer in split.columns[reference]]
    measured = corpus_score(view.metric.name, outputs, references)
    subgroups: dict[str, float | None] = {}
    for sg in (s for s in view.subgroups if s.by == "stratum"):
        strata = split.columns[spec.stratum_column]
        for group in sorted({g for g in strata if g is not None}):
            rows = [i for i, g in enumerate(strata) if g == group]
            subgroups[f"{sg.name}:{group}"] = corpus_score(view.metric.name, [outputs[i] for i in rows],
                                                           [references[i] for i in rows])
    suggested, how = suggest_threshold(measured, view.metric.name, f"{tuning_file.name} ({len(split)} texts)")
    ours, candidates, notes = document_scores(view.metric.name, outputs, references), [], _notes(view, workload,
                                                                                                  tuning_file)
    del workload  # one model held at a time
    for variant in view.candidates():  # chrF's corpus score is not a mean: its sentence scores stand for it
        other, other_settings = _load(path, view, variant)
        answers = _generate(other, prompts, other_settings.batch_size, progress)
        del other
        theirs = document_scores(view.metric.name, answers, references)
        candidates.append(Disagreement.of_values(variant.name, ours, theirs, "documents"))
    return _with_sizes(view, tuning_file, measured, candidates, TuningMeasure(
        protocol=str(path), tuning=str(tuning_file), tuning_size=len(split), metric_name=view.metric.name,
        metric=measured, subgroups=subgroups, suggested_threshold=suggested, how=how, settings=settings,
        notes=notes))


def _measure_ranking(path: Path, view: TuningView, tuning_file: Path, split: Any,
                     progress: Progress | None) -> TuningMeasure:
    """A ranking metric on the tuning split: its documents and the tuning queries embedded, ranked and scored."""
    metric = view.metric
    if metric.k is None or not metric.tuning_queries:
        missing = "metric.k (the cut-off)" if metric.k is None else "metric.tuning_queries (the tuning queries)"
        raise ProtocolError(f"{path}: metric {metric.name!r} on the tuning split needs {missing}",
                            hint="iteralab prepare --task embedding --queries FILE writes tuning.csv and "
                                 "tuning_queries.csv, and drafts both keys")
    queries_file = resolve(path, metric.tuning_queries)
    queries = load_queries(queries_file, metric.queries_id_column, metric.queries_text_column)
    unknown_relevant(queries, set(split.ids), str(tuning_file))
    workload, settings = _load(path, view)
    texts = [*split.texts, *queries.texts]  # the documents, then the queries: one progress, the same batches
    relevance = relevance_of(queries, pa.array(list(split.ids), pa.string()))

    def per_query(model: Any, batch: int) -> tuple[Ranking, np.ndarray]:
        vectors = _infer(model, texts, batch, progress)
        blocks = query_ranks(vectors[:len(split)], vectors[len(split):], relevance, metric.k or 1)
        found = Ranking.of(metric.k or 1, blocks)
        assert found is not None  # load_queries refuses a file without a query
        return found, np.concatenate([b.values(metric.name) for b in blocks])

    ranking, ours = per_query(workload, settings.batch_size)
    measured = ranking.value(metric.name)
    where = f"{tuning_file.name} ({len(split)} texts, {len(queries)} queries of {queries_file.name})"
    suggested, how = suggest_threshold(measured, metric.name, where)
    candidates, notes = [], [ranking.note(), *_notes(view, workload, tuning_file)]
    del workload  # one model held at a time
    for variant in view.candidates():
        other, other_settings = _load(path, view, variant)
        theirs = per_query(other, other_settings.batch_size)[1]
        del other
        candidates.append(Disagreement.of_values(variant.name, ours, theirs, "queries"))
    return _with_sizes(view, tuning_file, measured, candidates, TuningMeasure(
        protocol=str(path), tuning=str(tuning_file), tuning_size=len(split), metric_name=metric.name,
        metric=measured, subgroups={}, suggested_threshold=suggested, how=how, settings=settings,
        notes=notes))


def _tuning_split(path: Path, view: TuningView, tuning_file: Path, extra: list[str] | None = None) -> Any:
    """The tuning split with its stratum column when a stratum subgroup is planned (and the ``extra`` columns a
    generation job reads: its reference answers, the columns its prompt names), checked disjoint (P4) from each
    final corpus the protocol names that exists yet."""

    spec = view.corpus
    columns = {"id_column": spec.id_column, "text_column": spec.text_column, "label_column": spec.label_column}
    by_stratum = any(s.by == "stratum" for s in view.subgroups)
    wanted = [spec.stratum_column] if by_stratum and spec.stratum_column else []
    wanted += [name for name in extra or () if name not in wanted]
    split = load_corpus(tuning_file, classes=spec.classes, **columns, extra_columns=wanted,
                        require_labels=bool(spec.classes))
    if len(split) == 0:
        raise CorpusError(f"{tuning_file}: the tuning split holds no text", hint="prepare a larger tuning split")
    for source in corpus_sources(spec, view.datasets):
        final_file = resolve(path, source.path)
        if final_file is not None and final_file.is_file():
            check_disjoint_from_file(split, final_file, **columns)
    return split


def _load(path: Path, view: TuningView, variant: Variant | None = None) -> tuple[Any, TuningSettings]:
    """The declared model with the settings of ``variant`` (default: the reference variant's); any failure to load
    is one line naming it."""

    model, reference = view.model, variant or view.reference()
    settings = TuningSettings(reference.name if reference else None, reference.precision if reference else "fp32",
                              reference.padding if reference else "longest",
                              reference.batch_size if reference else DEFAULT_BATCH,
                              reference.device if reference and reference.device else view.run.device)
    where = model.callable if model.kind == "callable" else model.path
    record = {"kind": model.kind, "path": resolve(path, model.path), "head": resolve(path, model.head),
              "callable": model.callable, "max_length": model.max_length, "truncation": model.truncation,
              "trust_remote_code": model.trust_remote_code}
    generation = view.generation if rules_of(view).prompts else None
    options: dict[str, str | bool | GenerationSettings | None] = {
        "task": view.task.kind, "pooling": view.embedding.pooling, "normalize": view.embedding.normalize}
    if generation is not None:
        options["generation"] = GenerationSettings(
            max_new_tokens=generation.max_new_tokens, stop=generation.stop, chat_template=generation.chat_template,
            allow_truncation=generation.allow_truncation, prompt_max_length=model.max_length)
    try:
        workload = factory.load_workload(WorkloadSpec.of(
            record, settings.to_json(), view.corpus.classes, "cpu" if model.kind == "callable" else settings.device,
            options))
    except IteraError as exc:
        raise WorkloadError(f"{path}: model ({model.kind}, {where}) not loadable: {exc.message}",
                            hint=exc.hint or "check the [model] table") from None
    except Exception as exc:  # a library's own error (a bad config, a missing file): still one line, no traceback

        raise WorkloadError(f"{path}: model ({model.kind}, {where}) not loadable: {error_text(exc)}",
                            hint="check the [model] table: path, head, callable") from None
    return workload, replace(settings, device=str(getattr(workload, "device", settings.device)))


def _notes(view: TuningView, workload: Any, tuning_file: Path) -> list[str]:
    notes = []
    if view.reference() is None:
        notes.append(f"no reference variant declared yet: measured at fp32, batch {DEFAULT_BATCH}")
    head = getattr(workload, "head", None)
    if head is not None and head.metadata.get("trained_on") == tuning_file.name:
        cv = head.metadata.get("tuning_cv_macro_f1")
        notes.append(f"the head was trained on {tuning_file.name}: this score is in-sample, so optimistic"
                     + (f"; iteralab head train's cross-validated macro-F1 was {cv}" if cv else ""))
    return notes
