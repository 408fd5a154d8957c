"""The classification kind's verdict part: its metric (scikit-learn's, on class codes), the planned subgroups'
values, its metric routine's, and its reproduction rule against the reference pass (label agreement, largest
probability difference: ``compare``).

Every metric runs on arrays: labels are class indices, and a metric is scikit-learn's, called on the distinct
(true, predicted) pairs weighted by their counts — the same value as on the full label lists, at the cost of at
most k² rows. Reads a pass's prediction file (``output``); writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from iteralab.campaign.kinds.classification.compare import Agreement, compare_outputs, compare_rows_with_file
from iteralab.campaign.kinds.classification.output import PredictionSet, code_dtype
from iteralab.campaign.kinds.classification.resample import LabelUnits, label_samples
from iteralab.campaign.kinds.interval import Sample
from iteralab.campaign.kinds.routine import Routine, routine_values
from iteralab.campaign.kinds.verdictpart import Cells, KindComparison, PassInputs, VerdictPart
from iteralab.common.tolerance import TOL

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["CLASSIFICATION_VERDICT", "LABEL_SET_METRICS", "ClassificationComparison", "ClassificationVerdict",
           "counted_codes", "metric_of_codes", "metric_value", "subgroup_metrics"]

#: Rows per step where a per-record computation would otherwise make a whole-corpus temporary array.
BLOCK = 1 << 16


def metric_value(name: str, y_true: Any, y_pred: Any, classes: Sequence[Any],
                 sample_weight: Any = None) -> float | None:
    """scikit-learn's metric; the F1 averages run over ``classes`` (a prediction outside them, the no-class code of
    a missing or invalid label, counts against its true class's recall but is never a class itself)."""

    if len(y_true) == 0 or (name in LABEL_SET_METRICS and not len(classes)):
        return None
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score

    w = sample_weight
    if name == "accuracy":
        return float(accuracy_score(y_true, y_pred, sample_weight=w))
    if name == "macro_f1":
        return float(f1_score(y_true, y_pred, labels=list(classes), average="macro", zero_division=0, sample_weight=w))
    if name == "weighted_f1":
        return float(f1_score(y_true, y_pred, labels=list(classes), average="weighted", zero_division=0,
                              sample_weight=w))
    if name == "balanced_accuracy":
        return float(balanced_accuracy_score(y_true, y_pred, sample_weight=w))
    raise ValueError(name)


#: Metrics averaged over a set of classes (accuracy has none; a class subgroup's recall is one class's).
LABEL_SET_METRICS = ("macro_f1", "weighted_f1", "balanced_accuracy")


def _pair_counts(y_true: np.ndarray, y_pred: np.ndarray, k: int) -> np.ndarray:
    """How often each (true, predicted) pair occurs, at index ``true * (k + 1) + predicted + 1`` (-1: no class)."""
    counts = np.zeros((k + 1) * (k + 1), dtype=np.int64)
    for start in range(0, len(y_true), BLOCK):  # in blocks: the int64 keys of a whole corpus are never held
        block = slice(start, start + BLOCK)
        key = y_true[block].astype(np.int64) * (k + 1) + (y_pred[block].astype(np.int64) + 1)
        counts += np.bincount(key, minlength=(k + 1) * (k + 1))
    return counts


def counted_codes(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> list[int] | None:
    """The classes a subgroup's metric averages over, as class indices: those present in its references or
    predictions for the F1 averages (scikit-learn's default label set), those present in its references for
    balanced accuracy (scikit-learn leaves out a class nobody has); the no-class code (-1) is never one. None for
    a metric without a set of classes (accuracy)."""
    if name not in LABEL_SET_METRICS:
        return None
    seen = np.unique(y_true) if name == "balanced_accuracy" else np.union1d(np.unique(y_true), np.unique(y_pred))
    return [int(c) for c in seen if c >= 0]


def metric_of_codes(name: str, y_true: np.ndarray, y_pred: np.ndarray, k: int,
                    classes: Sequence[int] | None = None) -> float | None:
    """``metric_value`` of class-index arrays (-1: a label that is no class), computed by scikit-learn on the
    distinct (true, predicted) pairs weighted by how often each occurs: exact, and O(k²) for sklearn. The F1
    averages run over ``classes`` (class indices; default: all ``k``, as for the whole corpus)."""
    if len(y_true) == 0:
        return None
    counts = _pair_counts(y_true, y_pred, k)
    pairs = np.flatnonzero(counts)
    return metric_value(name, pairs // (k + 1), pairs % (k + 1) - 1, range(k) if classes is None else classes,
                        sample_weight=counts[pairs])


def subgroup_metrics(protocol: Protocol, expected: Any, covered: np.ndarray, y_pred: np.ndarray,
                     counted: dict[str, list[str]] | None = None) -> dict[str, float | None]:
    """Metric per planned subgroup, keyed ``<subgroup>:<group>``; ``covered`` marks the expected rows that
    have a prediction and ``y_pred`` holds it (class index, per expected row).

    Length strata use the main metric inside the stratum, averaged over the classes the stratum has
    (:func:`counted_codes`: a class absent from its references and predictions is not a zero in its average);
    ``counted``, when given, receives those classes' names per stratum group. Class groups use the recall of
    that class (the accuracy inside it), since a macro metric over a single true class is meaningless.
    """
    out: dict[str, float | None] = {}
    k = len(expected.classes)
    for sg in protocol.subgroups:
        if sg.by == "stratum":
            groups = [(name, expected.strata == i) for i, name in enumerate(expected.stratum_names)]
        else:
            present = set(np.unique(expected.labels).tolist())  # classes in the protocol's order (P1)
            groups = [(name, expected.labels == i) for i, name in enumerate(expected.classes) if i in present]
        if sg.by == "stratum" and protocol.metric.name is None:
            continue  # a metric routine's stratum groups: its own values (routine_values)
        metric = protocol.metric.name if sg.by == "stratum" else "accuracy"
        for name, member in groups:
            rows = member & covered
            truth, pred = expected.labels[rows], y_pred[rows]
            codes = counted_codes(metric, truth, pred) if sg.by == "stratum" else None
            out[f"{sg.name}:{name}"] = metric_of_codes(metric, truth, pred, k, codes)
            if counted is not None and codes is not None and len(truth):
                counted[f"{sg.name}:{name}"] = [expected.classes[c] for c in codes]
    return out



def metric_cells(v: Cells, preds: PredictionSet, protocol: Protocol, expected: Any, match: Any,
                 routine: Routine | None = None) -> Cells:
    """A classification pass's verdict ``v`` with its metric cells: its metric against the threshold, the
    subgroups (with a metric routine, ``routine``, the metric and the gating stratum groups are its values, and
    ``routine_error`` its first failure, one line, or None)."""
    covered = match.covered
    if match.last is None:
        y_pred = preds.labels
    else:
        y_pred = np.full(len(expected), -1, dtype=code_dtype(len(expected.classes)))
        y_pred[covered] = preds.labels[match.last[covered]]
    counted: dict[str, list[str]] = {}
    subgroups = subgroup_metrics(protocol, expected, covered, y_pred, counted)
    if protocol.metric.routine is not None:
        values = routine_values(routine or Routine(protocol.metric.routine, None), protocol, expected.ids,
                                expected.labels, expected.strata, expected.stratum_names, covered, y_pred,
                                preds.probs if match.last is None else preds.probs[match.last[covered]])
        metric = values.metric
        subgroups.update(values.groups)
    else:
        every = bool(covered.all())
        metric = metric_of_codes(protocol.metric.label, expected.labels if every else expected.labels[covered],
                                 y_pred if every else y_pred[covered], len(expected.classes))
    v = v.with_cells(metric_name=protocol.metric.label, metric=metric,
                     threshold_ok=metric is not None and protocol.metric.meets(metric, protocol.metric.threshold),
                     subgroups=subgroups, subgroup_classes=counted).with_units(
        LabelUnits(y_pred, None if covered.all() else covered))
    return v.with_cells(routine_error=values.error) if protocol.metric.routine is not None else v


@dataclass(frozen=True)
class ClassificationComparison:
    """A classification pass's cells against the reference pass: the share of equal labels, the largest absolute
    probability difference, and whether the declared reproduction target holds."""

    label_agreement: float | None
    max_abs_prob_diff: float | None
    reproduction_ok: bool


def reproduction(protocol: Protocol, same: Agreement | None) -> ClassificationComparison:
    """``same``: :func:`compare_outputs` of the pass's outputs with the reference pass's (a complete pass: its
    ids matched the corpus, none is repeated); None when either has none."""
    target = protocol.reproduction.target
    agreement = None if same is None else same.label_agreement
    worst = None if same is None else same.max_abs_prob_diff
    if target == "identical":
        ok = agreement == 1.0 and worst == 0.0
    elif target == "bounded":
        ok = worst is not None and worst <= (protocol.reproduction.bound or 0) + TOL
    else:
        ok = True
    return ClassificationComparison(agreement, worst, ok)


def against_reference(reference: Any, path: Path | None) -> Agreement | None:
    """:func:`compare_outputs` of the pass's outputs (its file at ``path``) with the reference pass's (the run's
    comparison when it made one, ``reader.comparisons``); None without a reference pass or a prediction file."""
    if reference.key is None or path is None:
        return None
    reader, ids = reference.reader, reference.ids
    same = reader.comparisons.get((path.resolve(), reader.sha256(path, ids) or "", *reference.key))
    if same is None:
        entry = reader.read(path, ids)
        if "predictions" not in reference.held:
            reference.held["predictions"] = reader.read(reference.paths[reference.pass_id], ids)[1]
        held = reference.held["predictions"]
        same = compare_outputs(entry[1], held, b_distinct=True) if entry is not None and len(held.ids) else None
    return same


class ClassificationVerdict(VerdictPart):
    """The classification kind's answers to the verdict (:class:`~iteralab.campaign.kinds.verdictpart.VerdictPart`)."""

    compares_while_running = True

    def metric_cells(self, v: Cells, found: Any, protocol: Protocol, expected: Any, match: Any,
                     inputs: PassInputs) -> Cells:
        return metric_cells(v, found, protocol, expected, match, inputs.routine)

    def running_comparison(self, found: Any, reference: Path | None, protocol: Protocol) -> Agreement | None:
        if reference is None:
            return compare_outputs(found, found, b_distinct=True) if len(found.ids) else None
        # both in the corpus order: the reference file is streamed against this set, never held whole
        return compare_rows_with_file(found, reference, tuple(protocol.corpus.classes))

    def compare(self, v: Cells, reference: Any, path: Path | None, protocol: Protocol,
                expected: Any) -> KindComparison:
        return KindComparison(reproduction(protocol, against_reference(reference, path)))

    def quality_samples(self, v: Cells, reference: Cells, protocol: Protocol, expected: Any) -> dict[str, Sample]:
        return label_samples(v.units, reference.units, protocol, expected)

    def compare_files(self, a: Path, b: Path, protocol: Protocol, reader: Any) -> Agreement:
        return compare_outputs(reader.read(a)[1], reader.read(b)[1])


CLASSIFICATION_VERDICT = ClassificationVerdict()
