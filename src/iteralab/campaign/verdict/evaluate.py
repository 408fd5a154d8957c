"""Verification of output sets (P3, Q1–Q3), from the stored files only, on Arrow/NumPy arrays.

A pass yields a *verified corpus* when its prediction file holds exactly the expected ids (no duplicate,
none missing, none extra), every record has the declared format, coverage is complete, and the metric
(scikit-learn's) meets the threshold and stays within the tolerance of the reference variant — overall and
in each gating subgroup — and the declared reproduction target holds (those comparisons: ``campaign.verdict.judge``,
through ``campaign.verdict.compare``).
Nothing here reads the runner's memory: the expected ids and labels come from ``inputs/corpus.csv``, the rules
from the locked ``inputs/protocol.toml``.

Every check runs on arrays: ids are compared with Arrow hash joins (``index_in``), labels are class indices,
and a metric is scikit-learn's, called on the distinct (true, predicted) pairs weighted by their counts — the
same value as on the full label lists, at the cost of at most k² rows. A campaign's files are read once
(:class:`PredictionReader`: one read per file gives its sha256 and its arrays).
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.folder import PROTOCOL, CampaignFolder, corpus_copy, read_corpus_batches
from iteralab.campaign.kinds.output import IdMatch, coverage_of, prediction_path
from iteralab.campaign.kinds.classification.output import PredictionSet, code_dtype, read_predictions
from iteralab.campaign.kinds.embedding.output import read_vectors
from iteralab.campaign.verdict.compare import compare_outputs, compare_rows_with_file
from iteralab.campaign.verdict.generation import evaluate_texts, load_references
from iteralab.campaign.kinds.generation.output import read_texts
from iteralab.campaign.verdict.embedding import (CampaignQueries, StoredRows, load_campaign_queries, query_vectors_path,
                                                 vector_metric)
from iteralab.campaign.verdict.routine import Routine, load_routine, routine_values
from iteralab.common.arrow import release_unused
from iteralab.common.files import sha256_file
from iteralab.plan.metric import TOL
from iteralab.plan.protocol import Protocol, load_protocol

#: Rows per step where a per-record computation would otherwise make a whole-corpus temporary array.
BLOCK = 1 << 16
#: Bytes of the corpus copy parsed at a time when its ids and labels are read (each piece's parsing
#: temporaries are a few times its size; the default 4 MiB pieces held ~40 MB more at the peak).
READ_BLOCK = 1 << 20


@dataclass(frozen=True)
class Expected:
    """The corpus as the checks need it: ids (Arrow strings, corpus order), the class index of each reference
    label (-1: not a class), and each record's stratum (index into ``stratum_names``; -1: none)."""

    ids: pa.Array
    labels: np.ndarray
    classes: tuple[str, ...]
    strata: np.ndarray
    stratum_names: tuple[str, ...] = field(default=())

    @classmethod
    def of(cls, ids: Sequence[str], labels: Mapping[str, str], strata: Mapping[str, str],
           classes: Sequence[str]) -> Expected:
        """Built from Python values (tests and small callers)."""
        names = tuple(sorted({s for s in strata.values() if s}))
        return cls(pa.array(list(ids), pa.string()),
                   np.asarray([list(classes).index(labels[i]) if labels.get(i) in classes else -1 for i in ids],
                              dtype=code_dtype(len(classes))), tuple(classes),
                   np.asarray([names.index(strata[i]) if strata.get(i) else -1 for i in ids],
                              dtype=code_dtype(len(names))), names)

    def __len__(self) -> int:
        return len(self.ids)

    def label_of(self, rows: np.ndarray) -> list[str]:
        return [self.classes[c] if c >= 0 else "" for c in self.labels[rows]]


def load_expected(campaign_dir: str | Path, classes: Sequence[str] | None = None,
                  dataset: str | None = None) -> Expected:
    """The expected ids of the corpus copy, or of one dataset's copy (K6), read batch by batch: what is kept
    per record is its id, a class code and a stratum code (the label and stratum strings are never held
    whole)."""
    campaign_dir = Path(campaign_dir)
    if classes is None:
        classes = campaign_protocol(campaign_dir).corpus.classes
    copy = corpus_copy(dataset)
    value_set = pa.array(list(classes), pa.string())
    ids: list[pa.Array] = []
    labels: list[np.ndarray] = []
    strata: list[tuple[np.ndarray, list[str | None]]] = []
    for batch in read_corpus_batches(campaign_dir / copy, ["id", "label", "stratum"], block_size=READ_BLOCK):
        ids.append(batch.column(batch.schema.get_field_index("id")))
        codes = pc.fill_null(pc.index_in(batch.column(batch.schema.get_field_index("label")), value_set=value_set), -1)
        labels.append(codes.to_numpy(zero_copy_only=False).astype(code_dtype(len(classes))))
        if "stratum" in batch.schema.names:
            encoded = pc.dictionary_encode(batch.column(batch.schema.get_field_index("stratum")))
            strata.append((pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False),
                           encoded.dictionary.to_pylist()))
    names = tuple(sorted({n for _, seen in strata for n in seen if n}))
    dtype = code_dtype(len(names))
    position = {name: i for i, name in enumerate(names)}
    parts = []
    for indices, seen in strata:  # each batch's own codes mapped onto the sorted names (-1: none or empty)
        lookup = np.asarray([position[n] if n else -1 for n in seen] + [-1], dtype=dtype)  # [-1]: a null
        parts.append(lookup[indices])
    all_ids = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
    del ids
    release_unused()
    n = len(all_ids)
    codes = np.concatenate(labels) if labels else np.zeros(0, code_dtype(len(classes)))
    return Expected(all_ids, codes, tuple(classes), np.concatenate(parts) if parts else np.full(n, -1, dtype), names)


def corpus_texts(campaign_dir: str | Path, wanted: set[str], dataset: str | None = None) -> dict[str, str]:
    """The texts of the ``wanted`` ids only (streamed: the corpus is never held whole)."""
    out: dict[str, str] = {}
    keep = pa.array(sorted(wanted), pa.string())
    copy = corpus_copy(dataset)
    for batch in read_corpus_batches(Path(campaign_dir) / copy, ["id", "text"]):
        mask = pc.is_in(batch.column(0), value_set=keep)
        if pc.any(mask).as_py():
            chosen = batch.filter(mask)
            out.update(zip(chosen.column(0).to_pylist(), chosen.column(1).to_pylist()))
    return out


def campaign_protocol(campaign_dir: str | Path) -> Protocol:
    return load_protocol(Path(campaign_dir) / PROTOCOL)


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


def subgroup_metrics(protocol: Protocol, expected: Expected, covered: np.ndarray, y_pred: np.ndarray,
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


def _first_sorted(values: pa.Array, n: int = 3) -> list[str]:
    if len(values) == 0:
        return []
    return values.take(pc.array_sort_indices(values)[:n]).to_pylist()


def missing_verdict(name: str, protocol: Protocol, expected: Expected) -> dict[str, Any]:
    return {"expected_ids": len(expected), "observed_ids": None, "ids_match": False, "format_ok": False,
            "coverage": 0.0, "coverage_ok": False, "metric_name": protocol.metric.label, "metric": None,
            "threshold_ok": False, "subgroups": {}, "problems": [f"prediction file {name} is missing"]}


def match_ids(ids: pa.Array, expected: Expected) -> IdMatch:
    """One hash lookup of every record's id among the expected ids (none when the file is in corpus order)."""
    return coverage_of(ids, expected.ids)


def id_cells(match: IdMatch, records: int, rows: int, expected: Expected, problems: tuple[str, ...],
             n_problems: int) -> dict[str, Any]:
    """The verdict's id, format and coverage cells of a file (``records`` read, ``rows`` with an id)."""
    covered, n_expected = match.covered, len(expected)
    duplicates, missing, extra = len(match.repeated), int(n_expected - covered.sum()), len(match.extra_unique)
    return {
        "expected_ids": n_expected, "observed_ids": records, "unique_ids": int(covered.sum()) + extra,
        "duplicates": duplicates, "missing": missing, "extra": extra,
        "ids_match": not duplicates and not missing and not extra and rows == n_expected,
        "format_ok": not n_problems, "format_problems": list(problems),
        "n_format_problems": n_problems,
        "coverage": int(covered.sum()) / n_expected if n_expected else 0.0,
    }


def evaluate_set(preds: PredictionSet, protocol: Protocol, expected: Expected,
                 routine: Routine | None = None) -> dict[str, Any]:
    """Checks of one output set on its own: ids, format, coverage, metric vs threshold, subgroups. With a metric
    routine (``routine``: the campaign's, :func:`~iteralab.campaign.verdict.routine.load_routine`) the metric and
    the gating stratum groups are its values, and ``routine_error`` its first failure (one line) or None."""
    match = match_ids(preds.ids, expected)
    covered = match.covered
    if match.last is None:
        y_pred = preds.labels
    else:
        y_pred = np.full(len(expected), -1, dtype=code_dtype(len(expected.classes)))
        y_pred[covered] = preds.labels[match.last[covered]]
    verdict = id_cells(match, preds.records, len(preds.ids), expected, preds.problems, preds.problem_count)
    verdict["coverage_ok"] = verdict["coverage"] + TOL >= protocol.checks.coverage
    verdict["metric_name"] = protocol.metric.label
    counted: dict[str, list[str]] = {}
    subgroups = subgroup_metrics(protocol, expected, covered, y_pred, counted)
    if protocol.metric.routine is not None:
        values = routine_values(routine or Routine(protocol.metric.routine, None), protocol, expected.ids,
                                expected.labels, expected.strata, expected.stratum_names, covered, y_pred,
                                preds.probs if match.last is None else preds.probs[match.last[covered]])
        verdict["metric"] = values.metric
        subgroups.update(values.groups)
    else:
        every = bool(covered.all())
        verdict["metric"] = metric_of_codes(protocol.metric.label, expected.labels if every
                                            else expected.labels[covered], y_pred if every else y_pred[covered],
                                            len(expected.classes))
    verdict["threshold_ok"] = verdict["metric"] is not None and protocol.metric.meets(verdict["metric"],
                                                                                       protocol.metric.threshold)
    verdict["subgroups"] = subgroups
    verdict["subgroup_classes"] = counted
    if protocol.metric.routine is not None:
        verdict["routine_error"] = values.error
    verdict["examples"] = id_examples(match, expected)
    return verdict


def id_examples(match: IdMatch, expected: Expected) -> dict[str, list[str]]:
    """The first few repeated, missing and unexpected ids (sorted), for the verdict's text."""
    return {"duplicates": _first_sorted(match.repeated) if len(match.repeated) else [],
            "missing": _first_sorted(expected.ids.filter(pa.array(~match.covered))) if not match.covered.all() else [],
            "extra": _first_sorted(match.extra_unique) if len(match.extra_unique) else []}


def file_rows(match: IdMatch, n: int) -> np.ndarray:
    """The row of a file that holds each corpus document (the last one when repeated; -1: none)."""
    return np.arange(n, dtype=np.int64) if match.last is None else match.last


def evaluate_vectors(vectors: Any, protocol: Protocol, expected: Expected, routine: Routine | None = None,
                     queries: CampaignQueries | None = None, path: Path | None = None) -> dict[str, Any]:
    """The checks of an embedding pass's vector file (``campaign.kinds.embedding.output.VectorSet``) on its own: ids, format,
    coverage, and its metric overall and per planned subgroup (``verdict.embedding.vector_metric``: kNN label
    accuracy, recall@k of the campaign's ``queries`` from the query vectors the pass wrote beside ``path``, or the
    campaign's ``routine``)."""

    match = match_ids(vectors.ids, expected)
    verdict = id_cells(match, vectors.records, len(vectors.ids), expected, vectors.problems, vectors.problem_count)
    verdict["coverage_ok"] = verdict["coverage"] + TOL >= protocol.checks.coverage
    verdict["vector_dim"] = vectors.dim
    rows = file_rows(match, len(expected))
    finite = vectors.finite[np.maximum(rows, 0)] & (rows >= 0) if vectors.vectors.size \
        else np.zeros(len(expected), dtype=bool)
    verdict.update(vector_metric(protocol, expected, match.covered, StoredRows(vectors.vectors, rows, finite),
                                 routine, queries, path))
    verdict["subgroup_classes"] = {}
    verdict["examples"] = id_examples(match, expected)
    return verdict


def evaluate_generation(texts: Any, protocol: Protocol, expected: Expected, references: pa.Array | None,
                        routine: Routine | None = None) -> dict[str, Any]:
    """The checks of a generation pass's text file (``campaign.kinds.generation.output.TextSet``) on its own: ids, format,
    coverage, its metric overall and per planned subgroup, its lengths (``verdict.generation.evaluate_texts``)."""
    match = match_ids(texts.ids, expected)
    verdict = id_cells(match, texts.records, len(texts.ids), expected, texts.problems, texts.problem_count)
    verdict["coverage_ok"] = verdict["coverage"] + TOL >= protocol.checks.coverage
    verdict.update(evaluate_texts(texts, protocol, expected, match, file_rows(match, len(expected)), references,
                                  routine))
    verdict["subgroup_classes"] = {}
    verdict["examples"] = id_examples(match, expected)
    return verdict


def evaluate_file(pred_path: Path, protocol: Protocol, expected: Expected,
                  reader: PredictionReader | None = None, routine: Routine | None = None) -> dict[str, Any]:
    """:func:`evaluate_set` of a stored prediction file (a missing file fails every check)."""
    reader = reader or PredictionReader(protocol)
    entry = reader.read(pred_path, expected.ids)
    if entry is None:
        return missing_verdict(pred_path.name, protocol, expected)
    return evaluate_set(entry[1], protocol, expected, routine)


class PredictionReader:
    """Reads the prediction files of one folder once: one read gives a file's sha256 and its arrays, and its
    verdict is computed once per file version (size, modification time). The arrays of the ``keep`` most
    recently read files stay in memory; hashes and verdicts (small) stay for every file."""

    def __init__(self, protocol: Protocol, keep: int = 4) -> None:
        self.classes = tuple(protocol.corpus.classes)
        self.sum_tol = protocol.checks.probability_sum_tolerance
        #: an embedding job's files hold vectors (``campaign.kinds.embedding.output``), checked by its ``[embedding]`` rules
        self.embedding = protocol.embedding if protocol.task.kind == "embedding" else None
        #: a generation job's files hold texts (``campaign.kinds.generation.output``), checked by its ``[generation]`` rules
        self.generation = protocol.generation if protocol.task.kind == "generation" else None
        # a vector set holds its ids and per-row flags in memory, its vectors in a scratch file (campaign.kinds.embedding.output)
        self.keep = keep
        self._hashes: dict[Path, tuple[tuple[int, int], str]] = {}
        self._sets: OrderedDict[Path, tuple[tuple[int, int], PredictionSet]] = OrderedDict()
        self._verdicts: dict[tuple[Path, str], dict[str, Any]] = {}
        #: (file, its sha256, reference file, its sha256) -> ``compare_outputs`` of the two (kept small)
        self.comparisons: dict[tuple[Path, str, Path, str], dict[str, Any]] = {}

    def drop(self, path: Path) -> None:
        """Let go of a file's arrays (its sha256 and verdict stay known)."""
        if self._sets.pop(path.resolve(), None) is not None:
            release_unused()

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return (stat.st_size, stat.st_mtime_ns) if path.is_file() else None

    def read(self, path: Path, like: pa.Array | None = None) -> tuple[str, PredictionSet] | None:
        """(sha256, arrays) of the file, or None when it is missing; ``like``: the expected ids, shared by the
        set when the file holds exactly those in that order (:func:`read_predictions`)."""
        stamp = self._stamp(path)
        if stamp is None:
            return None
        key = path.resolve()
        cached, known = self._sets.get(key), self._hashes.get(key)
        if cached is not None and known is not None and cached[0] == stamp == known[0]:
            self._sets.move_to_end(key)
            return known[1], cached[1]
        self._sets.pop(key, None)
        while len(self._sets) >= max(self.keep, 1):  # room made before the read: the sets dropped are not held
            self._sets.popitem(last=False)            # while the new one is built
        if self.embedding is not None:  # hashed and read in pieces: a vector file is never held as bytes

            digest = sha256_file(path)
            preds: Any = read_vectors(path, normalize=self.embedding.normalize, dim=self.embedding.dim)
        elif self.generation is not None:  # a text file, read in record batches
            digest = sha256_file(path)
            preds = read_texts(path, max_new_tokens=self.generation.max_new_tokens,
                               allow_empty=self.generation.allow_empty)
        else:
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            preds = read_predictions(path, self.classes, self.sum_tol, data, like)
            del data
        release_unused()
        self._hashes[key] = (stamp, digest)
        if self.keep:
            self._sets[key] = (stamp, preds)
        return digest, preds

    def sha256(self, path: Path, like: pa.Array | None = None) -> str | None:
        stamp = self._stamp(path)
        if stamp is None:
            return None
        known = self._hashes.get(path.resolve())
        if known is not None and known[0] == stamp:
            return known[1]
        entry = self.read(path, like)
        return entry[0] if entry else None

    def verdict(self, path: Path, protocol: Protocol, expected: Expected, routine: Routine | None = None,
                queries: CampaignQueries | None = None, references: pa.Array | None = None) -> dict[str, Any] | None:
        """:func:`evaluate_set` of the file (computed once per file version; each caller gets its own copy);
        ``routine``: the campaign's metric routine; ``queries``: its queries (metric.queries: the verdict also reads
        the pass's query vector file, whose version is part of the key)."""
        digest = self.sha256(path, expected.ids)
        if digest is None:
            return None
        key = (path.resolve(), digest, self._stamp(query_vectors_path(path)) if queries is not None else None)
        if key not in self._verdicts:
            entry = self.read(path, expected.ids)
            if entry is None:
                return None
            if self.generation is not None:
                self._verdicts[key] = evaluate_generation(entry[1], protocol, expected, references, routine)
            elif self.embedding is not None:
                self._verdicts[key] = evaluate_vectors(entry[1], protocol, expected, routine, queries, path)
            else:
                self._verdicts[key] = evaluate_set(entry[1], protocol, expected, routine)
        return copy.deepcopy(self._verdicts[key])


class CampaignReads:
    """What every evaluation of one run and its raw table share: the protocol, the expected ids and the
    prediction files, each read once (lazily: nothing is read before the first evaluation)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._context: EvaluationContext | None = None
        self._reader: PredictionReader | None = None
        #: Per dataset (None: the corpus): the file, sha256, stamp and corpus order (its ids those of the corpus,
        #: in that order) of the first complete pass of the reference variant evaluated in this run.
        self._references: dict[str | None, tuple[Path, str, Any, bool]] = {}

    @property
    def context(self) -> EvaluationContext:
        if self._context is None:
            self._context = EvaluationContext.of(self.folder)
        return self._context

    @property
    def reader(self) -> PredictionReader:
        if self._reader is None:
            # One prediction set kept (≈ 30 bytes per document).
            self._reader = PredictionReader(self.context.protocol, keep=1)
        return self._reader

    def compare_with_reference(self, path: Path, finished: Mapping[str, Any], verdict: Mapping[str, Any],
                               dataset: str | None) -> None:
        """After a pass's evaluation: remember it as its dataset's reference when it is the first complete pass
        of the reference variant (``finished``: its ``variant``, ``status`` and recorded ``prediction_sha256``),
        and compare it with the reference once there is one (memoised in ``reader.comparisons``, which the raw
        table uses instead of reading both files again)."""
        context = self.context.of_dataset(dataset)
        if self.reader.embedding is not None or self.reader.generation is not None:  # judge compares them
            self.reader.drop(path)
            return
        entry = self.reader.read(path, context.expected.ids)
        if entry is None:
            return
        digest, preds = entry
        in_order = preds.ids is context.expected.ids  # read_predictions shares the corpus ids when they are its
        reference = self._references.get(dataset)
        if reference is None:
            if finished.get("variant") != context.protocol.metric.reference_variant or not (
                    finished.get("status") == "ok" and verdict.get("ids_match") and verdict.get("format_ok")
                    and finished.get("prediction_sha256") == digest):
                return
            reference = self._references[dataset] = (path.resolve(), digest, self.reader._stamp(path), in_order)
            same = compare_outputs(preds, preds, b_distinct=True) if len(preds.ids) else None
        elif reference[3] and in_order and self.reader._stamp(reference[0]) == reference[2]:
            # both in the corpus order: the reference file is streamed against this set, never held whole
            same = compare_rows_with_file(preds, reference[0], tuple(context.protocol.corpus.classes))
        else:
            return  # the raw table compares them (it reads the reference whole)
        if same is not None:
            self.reader.comparisons[(path.resolve(), digest, reference[0], reference[1])] = same
        del preds, entry
        self.reader.drop(path)  # its verdict and comparison are kept: between passes no prediction set is held


@dataclass
class EvaluationContext:
    """What every per-pass evaluation of one campaign shares (read once per run, not once per pass).

    Each corpus source has its own: a one-corpus campaign is one source (this context); a several-dataset campaign
    (K6) has no single corpus, so ``expected`` is None and ``datasets`` holds each dataset's context (its expected
    ids and, for a generation job, its references): a pass is always checked against its own (:meth:`of_dataset`)."""

    protocol: Protocol
    expected: Expected | None
    datasets: dict[str, EvaluationContext] = field(default_factory=dict)
    #: the protocol's metric routine, imported from the folder's carried copy (None: a built-in metric)
    routine: Routine | None = None
    #: metric.queries: the queries of the folder's copy (None: the protocol names none)
    queries: CampaignQueries | None = None
    #: a generation job: the reference answers of the source's copy, in its order (None: none)
    references: pa.Array | None = None

    @classmethod
    def of(cls, campaign_dir: str | Path) -> EvaluationContext:
        protocol = campaign_protocol(campaign_dir)
        campaign = CampaignFolder(Path(campaign_dir)).campaign
        routine = load_routine(Path(campaign_dir), protocol, campaign.routine)
        queries = load_campaign_queries(Path(campaign_dir), campaign.queries) \
            if protocol.metric.queries else None
        generation = protocol.task.kind == "generation"
        sources = {name: cls(protocol, load_expected(campaign_dir, protocol.corpus.classes, name), routine=routine,
                             queries=queries,
                             references=load_references(Path(campaign_dir), name) if generation else None)
                   for name in [d.name for d in campaign.datasets] or [None]}
        if list(sources) == [None]:
            return sources[None]
        return cls(protocol, None, {str(n): c for n, c in sources.items()}, routine, queries)

    def of_dataset(self, dataset: str | None) -> EvaluationContext:
        """The context of one source's passes (itself for a one-corpus campaign)."""
        if dataset is None and self.expected is not None:
            return self
        if dataset not in self.datasets:
            raise KeyError(f"dataset {dataset!r} is not a dataset of this campaign ({', '.join(self.datasets)})")
        return self.datasets[dataset]


def evaluate_pass(campaign_dir: str | Path, pass_id: str, reads: CampaignReads | None = None,
                  dataset: str | None = None, finished: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The checks of one pass's file on its own; with ``finished`` (the pass's record and variant), also its
    comparison with the reference pass (:meth:`CampaignReads.compare_with_reference`)."""
    campaign_dir = Path(campaign_dir)
    reads = reads or CampaignReads(campaign_dir)
    path = prediction_path(campaign_dir, pass_id)
    context = reads.context.of_dataset(dataset)
    verdict = reads.reader.verdict(path, context.protocol, context.expected, context.routine, context.queries,
                                   context.references)
    if verdict is None:
        return missing_verdict(path.name, context.protocol, context.expected)
    if finished is not None:
        reads.compare_with_reference(path, finished, verdict, dataset)
    return verdict
