"""The embedding kind's verdict part. The job's own metric of an embedding pass, from its vectors in corpus
order: the values ``EmbeddingVerdict.metric_cells`` (asked by ``campaign.verdict.evaluate``) puts into the pass's
intrinsic verdict beside the id, format and coverage cells. The comparison with the reference pass's vectors (the
cosine tolerance) is ``embedding.cosine``'s, asked by ``campaign.verdict.judge`` (``EmbeddingVerdict.compare``).

The metric is one of:

- ``knn_accuracy``: leave-one-out kNN label accuracy over the documents that have a finite vector and a label
  (``embedding.knn``); a stratum group: the same inside the group; a class group: that class's kNN recall;
- ``recall_at_k``, ``mrr``, ``ndcg_at_k``: the campaign's queries (its folder's copy of ``metric.queries``),
  embedded by the pass itself into ``predictions/<pass_id>.queries.parquet``, ranked among the pass's document
  vectors by cosine (``embedding.knn``) and scored by ``kinds.ranking`` (the definitions). Whichever is the metric,
  every ranking value goes into the verdict's ``ranking`` cell (and a note of the raw table, each recall named by
  its definition). The value is the whole query set's only: a query is no document of a subgroup, so gating
  subgroups judge a pass under a ranking metric by their documents' cosines with the reference vectors alone;
- the user's routine (``metric.routine``), called with keyword arguments on whole arrays in corpus order::

      def my_metric(*, ids: list[str], outputs: numpy.ndarray, references: numpy.ndarray | None) -> float
      def my_metric(*, ids, outputs, references, queries: EmbeddedQueries) -> float  # with metric.queries

  ``outputs`` the documents' vectors, float32 ``[n, d]`` (those the pass covered); ``references`` their labels
  (a str array, "" where a document has none) or None for a corpus without labels (``corpus.classes = []``);
  ``queries`` (only when the protocol names ``metric.queries``): the query ids, the pass's query vectors and each
  query's relevant ids (``kinds.routine.EmbeddedQueries``), the same for every call.
  Called once for the whole corpus and once per group of each gating stratum subgroup; a class subgroup keeps its
  class's kNN recall (``metric.k`` neighbours), as under knn_accuracy. What it raises, or a value that is no finite
  number, is the verdict's ``routine_error`` (one line): that pass fails, never the campaign.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.folder import COSINE_COLUMNS
from iteralab.campaign.kinds.output import pass_of
from iteralab.campaign.kinds.embedding.cosine import (CosineComparison, VectorAgreement, compare_vector_files,
                                                      compare_vectors, cosine_cells, vector_reproduction)
from iteralab.campaign.kinds.embedding.output import queries_file_name, read_vectors
from iteralab.campaign.kinds.embedding.knn import knn_correct, rank_queries
from iteralab.campaign.kinds.expected import file_rows
from iteralab.campaign.kinds.interval import Sample, UnitValues, mean_samples
from iteralab.campaign.kinds.ranking import RANKING_METRICS, Ranking, Relevance, ranking_note
from iteralab.campaign.kinds.routine import EmbeddedQueries, Routine, RoutineValues
from iteralab.common.files import sha256_file
from iteralab.campaign.kinds.verdictpart import Cells, KindComparison, PassInputs, VerdictPart
from iteralab.errors import CorpusError, RoutineError
from iteralab.plan.queries import Queries, load_queries

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["EMBEDDING_VERDICT", "CampaignQueries", "EmbeddingCells", "EmbeddingVerdict", "PassQueries", "load_campaign_queries",
           "pass_queries", "query_vectors_path", "relevance_of", "vector_metric", "vector_routine_values"]


@dataclass(frozen=True)
class CampaignQueries:
    """A campaign's queries, read from its folder's copy; ``error``: why they cannot be (every recall then fails
    with that line)."""

    queries: Queries | None
    error: str | None = None


def load_campaign_queries(folder: Path, record: Mapping[str, Any] | None) -> CampaignQueries:
    """The queries of the folder's copy (``record``: campaign.json's ``queries``), checked against its sha256."""
    if not record:
        return CampaignQueries(None, "campaign.json records no queries file (metric.queries)")
    path = folder / str(record.get("file"))
    if not path.is_file() or sha256_file(path) != record.get("sha256"):
        return CampaignQueries(None, f"queries file {record.get('file')} is missing or differs from its recorded "
                                     "sha256")
    try:
        return CampaignQueries(load_queries(path, **(record.get("columns") or {})))
    except CorpusError as exc:
        return CampaignQueries(None, exc.message)


def relevance_of(queries: Queries, ids: pa.Array) -> Relevance:
    """Each query's relevant ids as rows of the corpus ``ids``, with their grades (1 each without a grades column;
    an id that is not one of them is left out)."""
    flat = [d for docs in queries.relevant for d in docs]
    where = pc.fill_null(pc.index_in(pa.array(flat, pa.string()), value_set=ids), -1).to_numpy(zero_copy_only=False)
    rows, gains, at = [], [], 0
    for q, docs in enumerate(queries.relevant):
        found = where[at:at + len(docs)]
        rows.append(found[found >= 0].astype(np.int64))
        grades = np.asarray(queries.grades[q] if queries.grades is not None else [1.0] * len(docs), np.float64)
        gains.append(grades[found >= 0])
        at += len(docs)
    return Relevance.of(rows, gains)


@dataclass(frozen=True)
class PassQueries:
    """A pass's queries: their vectors and ranking metrics, or the one line that says why there are none; the
    sha256 of its query vector file."""

    vectors: np.ndarray | None
    ranking: Ranking | None
    error: str | None
    sha256: str | None


def query_vectors_path(path: Path) -> Path:
    """Where the pass whose vector file is ``path`` wrote its query vectors."""
    return path.with_name(queries_file_name(pass_of(path.name)))


def pass_queries(path: Path, campaign: CampaignQueries | None, documents: np.ndarray | None, ids: pa.Array,
                 k: int | None, normalize: bool, dim: int | None) -> PassQueries:
    """The query vectors at ``path`` of a pass whose documents' vectors are ``documents`` in corpus order
    (``ids``), and their ranking metrics at the cut-off ``k`` (None: not computed)."""
    if campaign is None or campaign.queries is None:
        return PassQueries(None, None, f"queries: {campaign.error if campaign else 'no queries'}", None)
    if not path.is_file():
        return PassQueries(None, None, f"queries: query vector file {path.name} is missing", None)
    digest = sha256_file(path)
    found = read_vectors(path, normalize=normalize, dim=dim)
    queries = campaign.queries
    if found.problem_count:
        return PassQueries(None, None, f"queries: {path.name}: {found.problems[0]}", digest)
    if found.ids.to_pylist() != list(queries.ids):
        return PassQueries(None, None, f"queries: {path.name} does not hold the {len(queries)} query ids of the "
                                       "queries file in its order", digest)
    if documents is None or documents.shape[1] != found.vectors.shape[1]:
        return PassQueries(None, None, f"queries: {path.name}: query vectors of {found.dim} values, document "
                                       f"vectors of {None if documents is None else documents.shape[1]}", digest)
    vectors = np.ascontiguousarray(found.vectors[:], dtype=np.float32)
    ranking = rank_queries(documents, vectors, relevance_of(queries, ids), k) if k else None
    return PassQueries(vectors, ranking, None, digest)


def embedded_queries(queries: Queries, vectors: np.ndarray) -> EmbeddedQueries:
    """What a routine is handed of the queries (``kinds.routine.EmbeddedQueries``)."""
    return EmbeddedQueries(list(queries.ids), vectors, [list(r) for r in queries.relevant],
                           None if queries.grades is None else [list(g) for g in queries.grades])


def vector_routine_values(routine: Routine, protocol: Protocol, expected: Any, covered: np.ndarray,
                          aligned: np.ndarray | None, queries: EmbeddedQueries | None = None) -> RoutineValues:
    """The routine on the covered documents' vectors, then on those of each group of each gating stratum
    subgroup (``expected``: the corpus's ``kinds.expected.Expected``; arrays per expected document, corpus order;
    ``aligned``: the vectors in that order; ``queries``: handed to every call when the protocol names them)."""
    names = np.asarray([*expected.classes, ""])  # code -1 reads the last name: no label
    labelled = bool(expected.classes)
    errors: list[str] = []

    def value(rows: np.ndarray) -> float | None:
        rows = rows & covered
        if aligned is None or not rows.any():
            return None
        try:
            return routine(expected.ids.filter(pa.array(rows)).to_pylist(),
                           np.ascontiguousarray(aligned[rows], dtype=np.float32),
                           names[expected.labels[rows]] if labelled else None, queries)
        except RoutineError as exc:
            errors.append(exc.message)
            return None

    metric = value(np.ones(len(expected), dtype=bool))
    groups: dict[str, float | None] = {}
    for sg in protocol.subgroups:
        if sg.by == "stratum" and sg.gating:
            for i, name in enumerate(expected.stratum_names):
                groups[f"{sg.name}:{name}"] = value(expected.strata == i)
    return RoutineValues(metric, groups, errors[0] if errors else None)


def _knn_groups(protocol: Protocol, expected: Any, correct: np.ndarray, usable: np.ndarray,
                by: tuple[str, ...]) -> dict[str, float | None]:
    """kNN accuracy inside each group of the planned subgroups ``by`` (a class group: the class's kNN recall)."""
    out: dict[str, float | None] = {}
    for sg in protocol.subgroups:
        if sg.by not in by:
            continue
        names = expected.stratum_names if sg.by == "stratum" else expected.classes
        codes = expected.strata if sg.by == "stratum" else expected.labels
        for i, name in enumerate(names):
            member = codes == i
            if member.any():
                rows = member & usable
                out[f"{sg.name}:{name}"] = float(correct[rows].mean()) if rows.any() else None
    return out


@dataclass(frozen=True)
class StoredRows:
    """An embedding pass's vectors as its verdict holds them: the file's rows (``store``: an array or a
    ``campaign.kinds.embedding.output.RowStore`` kept on disk, file order), the file row of each expected document (``rows``,
    corpus order; -1: none) and whether that document has a finite vector (``finite``)."""

    store: Any
    rows: np.ndarray
    finite: np.ndarray

    def aligned(self) -> np.ndarray:
        """The vectors in corpus order, a row of NaN where a document has none (built only for the metrics that
        need every vector at once: recall@k and the user's routine)."""
        dim = self.store.shape[1] if len(self.store) else 0
        out = np.full((len(self.rows), dim), np.nan, dtype=np.float32)
        has = self.rows >= 0
        if has.any():
            out[has] = self.store[self.rows[has]]
        return out


def vector_metric(v: Cells, protocol: Protocol, expected: Any, covered: np.ndarray, vectors: StoredRows,
                  routine: Routine | None = None, queries: CampaignQueries | None = None,
                  path: Path | None = None) -> Cells:
    """An embedding pass's verdict ``v`` with its metric cells (module docstring): ``metric_name``, ``metric``,
    ``threshold_ok``, ``subgroups``, ``routine_error`` (a routine), and with ``metric.queries`` ``queries_error``,
    ``queries_sha256`` and ``ranking`` (from the query vectors the pass whose vector file is ``path`` wrote).
    ``covered``: the expected documents the pass has a vector for; kNN reads the vectors block by block from their
    store."""
    metric = protocol.metric
    v = v.with_cells(metric_name=metric.label)
    usable = covered & (expected.labels >= 0) & vectors.finite
    correct = np.zeros(len(expected), dtype=bool)
    wants_knn = metric.name == "knn_accuracy" or (metric.routine is not None and metric.k is not None)
    if wants_knn and usable.any():
        correct[usable] = knn_correct(vectors.store, expected.labels[usable].astype(np.int64), int(metric.k or 1),
                                      rows=vectors.rows[usable])
    if metric.name == "knn_accuracy":
        v = v.with_cells(metric=float(correct[usable].mean()) if usable.any() else None,
                         subgroups=_knn_groups(protocol, expected, correct, usable, ("stratum", "label")))
        v = v.with_units(UnitValues(np.where(usable, correct, np.nan)))
    found = None
    if metric.queries is not None:  # the queries' vectors and ranking: a ranking metric's value, a routine's input
        assert protocol.embedding is not None
        found = pass_queries(query_vectors_path(path), queries, vectors.aligned(), expected.ids, metric.k,
                             protocol.embedding.normalize, protocol.embedding.dim) if path is not None \
            else PassQueries(None, None, "queries: no query vector file", None)
        v = v.with_cells(queries_error=found.error, queries_sha256=found.sha256)
        if found.ranking is not None:
            v = v.with_cells(ranking=found.ranking.cells())
    if metric.name in RANKING_METRICS:
        assert found is not None
        v = v.with_cells(metric=found.ranking.value(metric.name) if found.ranking else None, subgroups={})
        if found.ranking is not None:
            v = v.with_units(UnitValues(found.ranking.values_of(metric.name).astype(np.float64)))
    elif metric.name != "knn_accuracy":
        aligned = vectors.aligned() if len(vectors.store) else None
        handed = None
        if found is not None and found.vectors is not None and queries is not None and queries.queries is not None:
            handed = embedded_queries(queries.queries, found.vectors)
        if found is not None and handed is None:  # no queries to hand: queries_error fails the verdict
            values = RoutineValues(None, {}, None)
        else:
            values = vector_routine_values(routine or Routine(str(metric.routine), None), protocol, expected,
                                           covered, aligned, handed)
        groups = _knn_groups(protocol, expected, correct, usable, ("label",)) if metric.k is not None else {}
        v = v.with_cells(metric=values.metric, subgroups={**groups, **values.groups}, routine_error=values.error)
    value = v.cell("metric")
    return v.with_cells(threshold_ok=value is not None and metric.meets(value, metric.threshold))


@dataclass(frozen=True)
class EmbeddingCells:
    """An embedding pass's own verdict cells: its vectors' width, its queries (``metric.queries``), and against
    the reference pass its documents' cosines (``embedding.cosine``)."""

    vector_dim: int | None = None
    queries_error: str | None = None
    queries_sha256: str | None = None
    #: every ranking value of its queries (``kinds.ranking.Ranking.cells``)
    ranking: Mapping[str, Any] | None = None
    min_cosine: float | None = None
    median_cosine: float | None = None
    cosine_at_quantile: float | None = None
    cosine_ok: bool | None = None
    #: per subgroup group: its cosines' minimum, median, quantile, gating and whether it holds
    subgroup_cosine: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EmbeddingComparison:
    """An embedding pass's cells against the reference pass: its documents' cosines (``CosineCells``' fields),
    the tolerance (failed by a cosine that fails) and the reproduction cells."""

    min_cosine: float | None
    median_cosine: float | None
    cosine_at_quantile: float | None
    subgroup_cosine: Mapping[str, Mapping[str, float | bool | None]]
    cosine_ok: bool
    tolerance_ok: bool | None
    label_agreement: None
    max_abs_prob_diff: float | None
    reproduction_ok: bool


def against_reference(reference: Any, path: Path | None, expected: Any) -> CosineComparison | None:
    """An embedding pass's vectors (its file at ``path``) against the reference pass's; None without either file."""
    if reference.key is None or path is None:
        return None
    same = compare_vectors(path, reference.paths[reference.pass_id], reference.reader, expected)
    reference.reader.drop(path)
    return same


class EmbeddingVerdict(VerdictPart):
    """The embedding kind's answers to the verdict (:class:`~iteralab.campaign.kinds.verdictpart.VerdictPart`):
    its metric (module docstring), and against the reference pass each document's cosine with the reference's
    vector (``embedding.cosine``)."""

    cells = EmbeddingCells

    def metric_cells(self, v: Cells, found: Any, protocol: Protocol, expected: Any, match: Any,
                     inputs: PassInputs) -> Cells:
        rows = file_rows(match, len(expected))
        finite = found.finite[np.maximum(rows, 0)] & (rows >= 0) if found.vectors.size \
            else np.zeros(len(expected), dtype=bool)
        return vector_metric(v.with_cells(vector_dim=found.dim), protocol, expected, match.covered,
                             StoredRows(found.vectors, rows, finite), inputs.routine, inputs.queries, inputs.path)

    def side_file(self, path: Path) -> Path | None:
        return query_vectors_path(path)

    def queries(self, folder: Path, protocol: Protocol, record: Any) -> CampaignQueries | None:
        return load_campaign_queries(folder, record) if protocol.metric.queries else None

    def subgroups_by_metric(self, protocol: Protocol) -> bool:
        # under a ranking metric a subgroup has no metric of its own: its documents' cosines judge it
        return protocol.metric.name not in RANKING_METRICS

    def compare(self, v: Cells, reference: Any, path: Path | None, protocol: Protocol,
                expected: Any) -> KindComparison:
        """The tolerance on vectors: each document's cosine with the reference's vector."""
        same = against_reference(reference, path, expected)
        cosine, reasons = cosine_cells(same, protocol, expected)
        if not self.subgroups_by_metric(protocol) and same is not None:
            reasons += [f"gating subgroup {sg.name!r} has no groups to evaluate (empty column?)"
                        for sg in protocol.subgroups if sg.gating
                        and not any(key.split(":", 1)[0] == sg.name for key in cosine.subgroup_cosine)]
        again = vector_reproduction(protocol, same)
        tolerance_ok = False if reasons else v.cell("tolerance_ok")
        cells = EmbeddingComparison(cosine.min_cosine, cosine.median_cosine, cosine.cosine_at_quantile,
                                    cosine.subgroup_cosine, cosine.cosine_ok, tolerance_ok,
                                    again.label_agreement, again.max_abs_prob_diff, again.reproduction_ok)
        return KindComparison(cells, tuple(reasons), tuple(r for r in reasons if r.startswith("subgroup ")))

    def row_cells(self, row: dict[str, Any], v: Cells, notes: list[str]) -> None:
        """The cosine columns; each subgroup's cosines and the queries' ranking metrics as notes."""
        row.update({key: v.cell(key) for key in COSINE_COLUMNS})
        if v.cell("subgroup_cosine"):
            notes.append("subgroup cosine: " + json.dumps(v.cell("subgroup_cosine"), sort_keys=True))
        if v.cell("ranking"):  # the queries' ranking metrics, each recall named by its definition
            notes.append(ranking_note(v.cell("ranking")))

    def quality_samples(self, v: Cells, reference: Cells, protocol: Protocol, expected: Any) -> dict[str, Sample]:
        if protocol.metric.name in RANKING_METRICS:  # per query: the queries are the units
            return mean_samples(v.units, reference.units)
        groups = {}
        for sg in protocol.subgroups:
            if sg.gating:
                names = expected.stratum_names if sg.by == "stratum" else expected.classes
                codes = expected.strata if sg.by == "stratum" else expected.labels
                groups.update({f"{sg.name}:{name}": codes == i for i, name in enumerate(names)})
        return mean_samples(v.units, reference.units,
                            expected.strata if len(expected.stratum_names) > 1 else None, groups)

    def compare_files(self, a: Path, b: Path, protocol: Protocol, reader: Any) -> VectorAgreement:
        return compare_vector_files(a, b, reader)


EMBEDDING_VERDICT = EmbeddingVerdict()
