"""The protocol's quality rule (P1, P3, Q2): ``[metric]`` and ``[[subgroups]]``, validated when read.

The metric is a built-in (scikit-learn's ``accuracy``, ``macro_f1``, ``weighted_f1``, ``balanced_accuracy``,
values in [0, 1], higher is better) or the user's own evaluation routine, ``routine = "package.module:function"``,
in its own units with a declared direction (``higher_is_better``). :class:`MetricSpec` holds the one rule every
verdict and every text about it uses: whether a value meets the threshold, and whether it stays within the
tolerance of the reference (for a lower-is-better routine the threshold is a maximum and the tolerance bounds
how far the value may rise above the reference). A class subgroup is judged by the recall of its class, a
built-in in [0, 1] whatever the metric.

An embedding job's ranking metrics (``recall_at_k``, ``mrr``, ``ndcg_at_k``) read a queries file
(``metric.queries``): its format and reader are :mod:`iteralab.plan.queries`, the metrics'
definitions :mod:`iteralab.campaign.kinds.ranking`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from iteralab.common.tolerance import TOL
from iteralab.plan.values import Flag, Number, Strict, Text, Whole

__all__ = ["EMBEDDING_METRICS", "GENERATION_METRICS", "METRICS", "QUERY_METRICS", "ROUTINE_FORM", "TOL", "MetricName", "MetricSpec",
           "Subgroup", "known_metric", "subgroup_problems"]

#: A classifier's built-in metrics.
METRICS = ("accuracy", "macro_f1", "weighted_f1", "balanced_accuracy")
#: An embedding job's built-in metrics (its threshold), computed from the pass's vectors (``plan/task.py``).
EMBEDDING_METRICS = ("knn_accuracy", "recall_at_k", "mrr", "ndcg_at_k")
#: The embedding metrics that rank the queries of ``metric.queries`` among the documents (as
#: ``campaign.kinds.ranking.RANKING_METRICS``: a test says so).
QUERY_METRICS = ("recall_at_k", "mrr", "ndcg_at_k")
#: A generation job's built-in metrics, on a 0..1 scale against ``corpus.reference_column`` (computed by
#: ``campaign.kinds.generation.textmetrics``, whose list must equal this one: a test says so).
GENERATION_METRICS = ("exact_match", "token_f1", "rouge_l", "chrf")
#: ``package.module:function``: the form of a routine reference (as a callable model's).
ROUTINE_FORM = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def known_metric(value: str) -> str:
    known = METRICS + EMBEDDING_METRICS + GENERATION_METRICS
    if value not in known:
        raise ValueError(f"unknown metric {value!r}; known: {', '.join(known)}")
    return value


#: A built-in metric's name, checked wherever a protocol's [metric] is read.
MetricName = Annotated[Text, AfterValidator(known_metric)]


def _unit_interval(value: float) -> float:
    if value < 0:
        raise ValueError("Input should be greater than or equal to 0")
    if value > 1:
        raise ValueError("Input should be less than or equal to 1")
    return value


class MetricSpec(Strict):
    name: MetricName | None = Field(default=None, description=(
        "A built-in metric: accuracy, macro_f1, weighted_f1, balanced_accuracy; knn_accuracy, recall_at_k, mrr or "
        "ndcg_at_k for an embedding job; exact_match, token_f1, rouge_l or chrf for a generation job; mrr or "
        "ndcg_at_k for a scoring job. "
        "Absent when routine names your own."))
    routine: Text | None = Field(default=None, description=(
        "Your evaluation routine, package.module:function (fingerprinted by lock, carried in the folder)."))
    higher_is_better: Flag = Field(default=True, description=(
        "A routine's direction; a built-in is always higher-is-better."))
    threshold: Number = Field(description=(
        "The minimum quality (a maximum when lower is better), in the metric's units: [0, 1] for a built-in."))
    tolerance: Number | None = Field(default=None, ge=0, description=(
        "How far a variant may fall below (or rise above) the reference variant's value (required, but for a "
        "generation job that gives relative_tolerance instead)."))
    relative_tolerance: Number | None = Field(default=None, ge=0, lt=1, description=(
        "A generation job's tolerance as a share of the reference variant's value: 0.01 means at least 99 % of "
        "the reference's score (give this or tolerance, not both)."))
    confidence: Number | None = Field(default=None, gt=0, lt=1, description=(
        "The level of the quality interval the gate uses: a variant is accepted only when the interval's bound lies "
        "within the tolerance. Absent: the gate uses the point estimate, and the 95 % interval is reported beside it."))
    power: Number = Field(default=0.8, gt=0, lt=1, description=(
        "The probability that a variant truly within tolerance is established as such at the corpus size iteralab "
        "threshold prints (with confidence, or 0.95 when it is absent); lock warns when the final corpus is smaller."))
    reference_variant: Text = Field(description="The variant every other is compared with (quality and reproduction).")
    k: Whole | None = Field(default=None, ge=1, description=(
        "Embedding and scoring metrics: the neighbours of knn_accuracy, the cut-off of recall_at_k, mrr and "
        "ndcg_at_k (a scoring job: of each group's ranking)."))
    queries: Text | None = Field(default=None, description=(
        "recall_at_k, mrr, ndcg_at_k (or a routine that ranks): the queries file (columns query_id, text, "
        "relevant_ids separated by ';', optionally grades)."))
    tuning_queries: Text | None = Field(default=None, description=(
        "The tuning split's queries (relevant ids of corpus.tuning_path), in the format of queries: iteralab "
        "threshold measures the ranking metric on them; a campaign never reads them."))
    queries_id_column: Text = Field(default="query_id", description=(
        "The queries file's id column (metric.queries)."))
    queries_text_column: Text = Field(default="text", description=(
        "The queries file's text column (metric.queries), embedded by every pass."))

    @field_validator("routine")
    @classmethod
    def _routine_form(cls, value: str | None) -> str | None:
        if value is not None and not ROUTINE_FORM.match(value):
            raise ValueError(f"{value!r} is not of the form 'package.module:function'")
        return value

    @field_validator("threshold", "tolerance")
    @classmethod
    def _builtin_units(cls, value: float | None, info: ValidationInfo) -> float | None:
        return value if value is None or info.data.get("routine") else _unit_interval(value)

    @model_validator(mode="after")
    def _one_metric(self) -> MetricSpec:
        if self.name is None and self.routine is None:
            raise ValueError(f"give metric.name (a built-in: {', '.join(METRICS)}) or metric.routine "
                             "('package.module:function', your own evaluation routine)")
        if self.name is not None and self.routine is not None:
            raise ValueError(f"metric.name = {self.name!r} and metric.routine = {self.routine!r} both name the "
                             "metric: give one")
        if self.name is not None and not self.higher_is_better:
            raise ValueError(f"metric.higher_is_better = false: the built-in {self.name!r} is higher-is-better; "
                             "declare a direction only for a routine")
        return self

    @model_validator(mode="after")
    def _resampled(self) -> MetricSpec:
        if self.confidence is not None and (self.routine is not None or self.name == "chrf"):
            what = "corpus chrF" if self.routine is None else f"the routine {self.routine}"
            raise ValueError(f"metric.confidence = {self.confidence:g}: {what} is no mean of per-document values, so "
                             "no interval is resampled for it; remove confidence (the gate uses the point estimate)")
        return self

    @model_validator(mode="after")
    def _queries_columns(self) -> MetricSpec:
        named = [k for k in ("queries_id_column", "queries_text_column") if k in self.model_fields_set]
        if named and not self.queries:
            raise ValueError(f"metric.{named[0]} names a column of metric.queries, which is not given: give the "
                             "queries file or remove the key")
        if len({self.queries_id_column, self.queries_text_column, "relevant_ids"}) < 3:
            raise ValueError(f"metric.queries_id_column = {self.queries_id_column!r} and metric.queries_text_column = "
                             f"{self.queries_text_column!r}: the id, text and relevant_ids columns are three columns")
        return self

    @property
    def label(self) -> str:
        """What the verdicts, the raw table and the notes call the metric: the built-in's name or the routine."""
        return self.name or str(self.routine)

    @property
    def relation(self) -> str:
        """How a value must stand against the threshold, in words of a note: ``>=`` or ``<=``."""
        return ">=" if self.higher_is_better else "<="

    def meets(self, value: float, threshold: float, higher_is_better: bool | None = None) -> bool:
        """Whether ``value`` meets ``threshold`` (a minimum, or a maximum for a lower-is-better routine)."""
        up = self.higher_is_better if higher_is_better is None else higher_is_better
        return value + TOL >= threshold if up else value - TOL <= threshold

    def allowed_drop(self, reference: float) -> float:
        """The tolerance against a reference value, absolute (``tolerance``) or relative to it
        (``relative_tolerance``: a share of the reference's magnitude)."""
        if self.relative_tolerance is not None:
            return self.relative_tolerance * abs(reference)
        return float(self.tolerance or 0.0)

    @property
    def tolerance_text(self) -> str:
        """The tolerance in the words of a note: ``0.05``, or ``1% of the reference's value`` when relative."""
        if self.relative_tolerance is not None:
            return f"{self.relative_tolerance:.4g} × the reference's value"
        return f"{float(self.tolerance or 0.0):g}"

    def within(self, value: float, reference: float, tolerance: float, higher_is_better: bool | None = None) -> bool:
        """Whether ``value`` is no worse than ``reference`` by more than ``tolerance`` (in the metric's direction)."""
        up = self.higher_is_better if higher_is_better is None else higher_is_better
        return (reference - value if up else value - reference) <= tolerance + TOL

    @property
    def interval_level(self) -> float:
        """The level of the quality interval: ``confidence``, or 0.95 reported beside the point estimate."""
        return float(self.confidence) if self.confidence is not None else 0.95


class Subgroup(Strict):
    name: Text = Field(description="Name of the subgroup.")
    by: Literal["stratum", "label"] = Field(description=(
        "stratum: one group per length stratum; label: one group per class (judged by its recall)."))
    gating: Flag = Field(default=True, description=(
        "A gating subgroup can reject a variant; otherwise it is reported only."))
    threshold: Number | None = Field(default=None, description=(
        "Optional minimum inside each group (a maximum for a lower-is-better routine's stratum groups)."))
    tolerance: Number | None = Field(default=None, ge=0, description=(
        "How far each group may move from the reference's (a class group: a recall difference)."))


def subgroup_problems(metric: MetricSpec, subgroups: tuple[Subgroup, ...]) -> list[tuple[str, str]]:
    """(key, problem) of each subgroup bound outside its units: [0, 1] for a class group (a recall) and for a stratum
    group under a built-in; a class group under a routine declares its own tolerance (the metric's is in the
    routine's units, not a recall's)."""
    problems = []
    for i, sg in enumerate(subgroups):
        at = f"subgroups[{i}] ({sg.name})"
        if sg.by == "label" or metric.routine is None:
            for key in ("threshold", "tolerance"):
                value = getattr(sg, key)
                try:
                    _unit_interval(value if value is not None else 0.0)
                except ValueError as exc:
                    problems.append((f"{at}.{key}", str(exc)))
        if sg.by == "label" and sg.gating and metric.routine is not None and sg.tolerance is None:
            problems.append((f"{at}.tolerance", "a class subgroup is judged by its class's recall, and "
                             f"metric.tolerance is in the units of {metric.routine}: declare this subgroup's own "
                             "tolerance (a recall difference, 0 to 1)"))
    return problems

