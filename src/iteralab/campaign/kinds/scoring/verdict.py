"""The scoring kind's verdict part. A scoring pass's own metric, from its scores in corpus order, and its
comparison with the reference pass's scores (``agreement.py``).

The metric is one of:

- ``ndcg_at_k``, ``mrr``: each group's pairs (``scoring.group_column``, a query) ranked by their scores, higher
  first, against the graded relevance of ``scoring.relevance_column`` (a number; empty or 0: not relevant), with
  ``kinds.ranking``'s definitions (the embedding job's: one implementation), each group one query over its own
  pairs. A tie ranks the pair that comes first in the corpus first; a pair without a score (not covered) is never
  retrieved; a group without a relevant pair counts 0. Every ranking value goes into the verdict's ``ranking``
  cell and a note of the raw table;
- the user's routine (``metric.routine``), called with keyword arguments on whole arrays in corpus order::

      def my_metric(*, ids: list[str], groups: numpy.ndarray, scores: numpy.ndarray,
                    references: numpy.ndarray | None) -> float

  ``groups`` each pair's group (a str array), ``scores`` its score (float32), ``references`` its relevance
  (float64, 0 where empty) or None when the protocol names no relevance column; called once for the pairs the pass
  covered and once per group of each gating stratum subgroup.

Under a ranking metric a stratum group is no set of queries: gating subgroups judge a pass by Kendall's tau of
their pairs' scores within each group (``agreement.py``), as the whole corpus is judged.

The pairs' groups and relevance are read from the campaign's corpus copy (``prompt.<column>`` columns, written in
``scoring``'s order: pair, group, relevance), once per corpus.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.folder import SCORE_COLUMNS, corpus_copy, read_corpus_batches
from iteralab.campaign.kinds.expected import file_rows
from iteralab.campaign.kinds.interval import Sample, UnitValues, mean_samples
from iteralab.campaign.kinds.ranking import RANKING_METRICS, Ranking, Relevance, rank_block, ranking_note
from iteralab.campaign.kinds.routine import Routine
from iteralab.campaign.kinds.scoring.agreement import ScoreAgreement, bounds_reasons, score_agreement
from iteralab.campaign.kinds.scoring.output import ScoreSet, read_scores
from iteralab.campaign.kinds.verdictpart import Cells, FileComparison, KindComparison, PassInputs, VerdictPart
from iteralab.errors import RoutineError
from iteralab.plan.prompting import PROMPT_COLUMN, copy_column

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["SCORING_VERDICT", "PairTable", "ScoringCells", "ScoringVerdict", "aligned_scores", "group_ranking",
           "load_pairs", "pair_table"]

#: Pairs ranked per block of groups (the block's score matrix is groups × its largest group).
BLOCK_PAIRS = 1 << 16


def load_pairs(campaign_dir: Path, dataset: str | None = None) -> pa.Array | None:
    """The corpus copy's group and relevance cells in corpus order, as a struct array whose fields are the copy's
    columns (``prompt.<group>``, and ``prompt.<relevance>`` when declared); None when the copy has no such columns.
    The copy's first ``prompt.`` column is the pair's second text, which the verdict never reads."""
    path = Path(campaign_dir) / corpus_copy(dataset)
    names = _prompt_columns(path)[1:]
    if not names:
        return None
    parts: dict[str, list[pa.Array]] = {name: [] for name in names}
    for batch in read_corpus_batches(path, names):
        for name in names:
            parts[name].append(pc.fill_null(batch.column(batch.schema.get_field_index(name)), ""))
    return pa.StructArray.from_arrays([pa.concat_arrays(parts[n]) if parts[n] else pa.array([], pa.string())
                                      for n in names], names=names)


def _prompt_columns(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as fh:
        header = next(csv.reader(fh), [])
    prefix = PROMPT_COLUMN.format("")
    return [name for name in header if name.startswith(prefix)]


@dataclass(frozen=True)
class PairTable:
    """The pairs as the verdict reads them: each pair's group code (into ``group_names``) and its relevance (None:
    no relevance column), in corpus order; ``error``: why they cannot be read."""

    groups: np.ndarray
    group_names: np.ndarray
    relevance: np.ndarray | None
    error: str | None = None


def pair_table(pairs: pa.Array | None, protocol: Protocol, n: int) -> PairTable:
    """The groups and relevance of the copy's cells (:func:`load_pairs`) under the protocol's ``[scoring]``."""
    spec = protocol.scoring
    empty = PairTable(np.zeros(n, np.int64), np.asarray([""]), None)
    if spec is None or pairs is None:
        return PairTable(empty.groups, empty.group_names, None, "scoring: the corpus copy holds no group column")
    group_name = copy_column(spec.group_column)
    if group_name not in [f.name for f in pairs.type] or len(pairs) != n:
        return PairTable(empty.groups, empty.group_names, None,
                         f"scoring: the corpus copy holds no column {group_name!r} for its {n} pairs")
    encoded = pc.dictionary_encode(pairs.field(group_name))
    groups = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = np.asarray(encoded.dictionary.to_pylist(), dtype=str)
    if not spec.relevance_column:
        return PairTable(groups, names, None)
    relevance_name = copy_column(spec.relevance_column)
    if relevance_name not in [f.name for f in pairs.type]:
        return PairTable(groups, names, None, f"scoring: the corpus copy holds no column {relevance_name!r}")
    cells = pairs.field(relevance_name)
    cells = pc.if_else(pc.equal(pc.utf8_trim_whitespace(cells), ""), "0", cells)
    try:
        relevance = pc.cast(cells, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        bad = next(i for i, c in enumerate(cells.to_pylist()) if not _number(c))
        return PairTable(groups, names, None, f"scoring.relevance_column {spec.relevance_column!r}: pair {bad + 1} "
                                              f"holds {cells[bad].as_py()!r}, not a number")
    if not np.isfinite(relevance).all():
        return PairTable(groups, names, None, f"scoring.relevance_column {spec.relevance_column!r}: not every "
                                              "relevance is a finite number")
    return PairTable(groups, names, relevance)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def aligned_scores(found: ScoreSet, rows: np.ndarray) -> np.ndarray:
    """Each expected pair's score in corpus order (``rows``: the file row of each; -1: none, NaN)."""
    out = np.full(len(rows), np.nan, dtype=np.float32)
    has = rows >= 0
    if has.any() and len(found.scores):
        out[has] = found.scores[rows[has]]
    return out


def group_ranking(scores: np.ndarray, groups: np.ndarray, relevance: np.ndarray, k: int) -> Ranking | None:
    """The ranking metrics (``kinds.ranking``) of every group as one query over its own pairs: a score matrix per
    block of groups, each row a group's pairs in corpus order (padding and missing scores never retrieved), the
    relevant pairs those of relevance > 0 with their relevance as gain."""
    order = np.argsort(groups, kind="stable")
    codes = groups[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.zeros(0, np.int64)
    stops = np.r_[starts[1:], len(codes)].astype(np.int64)
    blocks = []
    first = 0
    while first < len(starts):  # groups whose pairs hold at most BLOCK_PAIRS together (a larger group alone)
        last = max(first + 1, int(np.searchsorted(stops, starts[first] + BLOCK_PAIRS, side="right")))
        a, b = starts[first:last], stops[first:last]
        sizes = b - a
        members = order[a[0]:b[-1]]  # the block's pairs, group after group, corpus order within each
        query = np.repeat(np.arange(last - first), sizes)
        column = np.arange(len(members)) - np.repeat(a - a[0], sizes)
        matrix = np.full((last - first, int(sizes.max())), -np.inf, dtype=np.float64)
        matrix[query, column] = scores[members]
        gain = relevance[members]
        relevant = gain > 0
        cuts = np.cumsum(np.bincount(query[relevant], minlength=last - first))[:-1]
        blocks.append(rank_block(matrix, Relevance.of(np.split(column[relevant], cuts),
                                                      np.split(gain[relevant], cuts)), k))
        first = last
    return Ranking.of(k, blocks)


@dataclass(frozen=True)
class ScoringCells:
    """A scoring pass's own verdict cells: why its groups or relevance could not be read, every ranking value of
    its groups, and against the reference pass its scores' differences and orderings (``agreement.py``)."""

    reference_error: str | None = None
    #: every ranking value of its groups (``kinds.ranking.Ranking.cells``; ``queries`` counts the groups)
    ranking: Mapping[str, Any] | None = None
    compared_pairs: int | None = None
    max_abs_score_diff: float | None = None
    score_diff_at_quantile: float | None = None
    min_kendall_tau: float | None = None
    median_kendall_tau: float | None = None
    tau_groups: int | None = None
    tau_groups_unordered: int | None = None
    scores_ok: bool | None = None
    #: per gating stratum group: Kendall's tau's minimum and median over groups, and whether it holds
    subgroup_tau: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ScoringComparison:
    """A scoring pass's cells against the reference pass: its scores' agreement, the tolerance (failed by a bound
    that fails) and the reproduction cells."""

    compared_pairs: int | None
    max_abs_score_diff: float | None
    score_diff_at_quantile: float | None
    min_kendall_tau: float | None
    median_kendall_tau: float | None
    tau_groups: int | None
    tau_groups_unordered: int | None
    scores_ok: bool
    subgroup_tau: Mapping[str, Any]
    tolerance_ok: bool | None
    label_agreement: None
    max_abs_prob_diff: float | None
    reproduction_ok: bool


def scoring_routine(routine: Routine, group_names: np.ndarray, groups: np.ndarray, scores: np.ndarray,
                    relevance: np.ndarray | None) -> Routine:
    """The campaign's routine as the shared caller (``kinds.routine.Routine``) calls it, handed a scoring job's
    arrays: ``outputs`` are the rows called on (a mask), turned into ``groups``, ``scores``, ``references``."""
    if routine.fn is None:
        return routine
    fn = routine.fn

    def call(*, ids: list[str], outputs: np.ndarray, references: Any) -> Any:
        return fn(ids=ids, groups=group_names[groups[outputs]], scores=scores[outputs],
                  references=None if relevance is None else relevance[outputs])

    return Routine(routine.ref, call)


def _routine_cells(v: Cells, protocol: Protocol, expected: Any, covered: np.ndarray, pairs: PairTable,
                   scores: np.ndarray, routine: Routine | None) -> Cells:
    adapted = scoring_routine(routine or Routine(str(protocol.metric.routine), None), pairs.group_names,
                              pairs.groups, scores, pairs.relevance)
    errors: list[str] = []

    def value(rows: np.ndarray) -> float | None:
        rows = rows & covered
        if not rows.any():
            return None
        try:
            return adapted(expected.ids.filter(pa.array(rows)).to_pylist(), rows, None)
        except RoutineError as exc:
            errors.append(exc.message)
            return None

    metric = value(np.ones(len(expected), dtype=bool))
    groups: dict[str, float | None] = {}
    for sg in protocol.subgroups:
        if sg.by == "stratum" and sg.gating:
            for i, name in enumerate(expected.stratum_names):
                groups[f"{sg.name}:{name}"] = value(expected.strata == i)
    return v.with_cells(metric=metric, subgroups=groups, routine_error=errors[0] if errors else None)


def gating_strata(protocol: Protocol, expected: Any) -> dict[str, np.ndarray]:
    """The pairs of each group of each gating stratum subgroup, by ``<subgroup>:<group>``."""
    return {f"{sg.name}:{name}": expected.strata == i for sg in protocol.subgroups if sg.by == "stratum" and sg.gating
            for i, name in enumerate(expected.stratum_names)}


@dataclass
class _Held:
    """What the comparisons of one campaign read once: the corpus's pairs and the reference pass's scores."""

    pairs: PairTable | None = None
    reference: np.ndarray | None = None


class ScoringVerdict(VerdictPart):
    """The scoring kind's answers to the verdict (:class:`~iteralab.campaign.kinds.verdictpart.VerdictPart`): its
    metric (module docstring), and against the reference pass its scores' differences and Kendall's tau within
    each group (``agreement.py``)."""

    cells = ScoringCells

    def metric_cells(self, v: Cells, found: Any, protocol: Protocol, expected: Any, match: Any,
                     inputs: PassInputs) -> Cells:
        metric = protocol.metric
        v = v.with_cells(metric_name=metric.label)
        scores = aligned_scores(found, file_rows(match, len(expected)))
        covered = match.covered & np.isfinite(scores)
        pairs = _keep(expected, pair_table(inputs.references, protocol, len(expected)))
        if pairs.error is not None:
            v = v.with_cells(metric=None, subgroups={}, reference_error=pairs.error)
        elif metric.name in RANKING_METRICS:
            assert pairs.relevance is not None and metric.k is not None
            ranking = group_ranking(np.where(covered, scores, np.nan), pairs.groups, pairs.relevance, int(metric.k))
            v = v.with_cells(metric=ranking.value(metric.name) if ranking else None, subgroups={},
                             ranking=ranking.cells() if ranking else None)
            if ranking is not None:  # the groups are the units of the quality interval (kinds.interval)
                v = v.with_units(UnitValues(ranking.values_of(metric.name).astype(np.float64)))
        else:
            v = _routine_cells(v, protocol, expected, covered, pairs, scores, inputs.routine)
        value = v.cell("metric")
        return v.with_cells(threshold_ok=value is not None and metric.meets(value, metric.threshold))

    def references(self, folder: Path, dataset: str | None) -> pa.Array | None:
        return load_pairs(folder, dataset)

    def quality_samples(self, v: Cells, reference: Cells, protocol: Protocol, expected: Any) -> dict[str, Sample]:
        # a ranking metric is the mean of its groups' values: the groups are resampled (a routine has no units)
        return mean_samples(v.units, reference.units) if protocol.metric.name in RANKING_METRICS else {}

    def subgroups_by_metric(self, protocol: Protocol) -> bool:
        # under a ranking metric a stratum group has no metric of its own: its pairs' orderings judge it
        return protocol.metric.name not in RANKING_METRICS

    def compare(self, v: Cells, reference: Any, path: Path | None, protocol: Protocol,
                expected: Any) -> KindComparison:
        """The tolerance on scores: their differences and each group's Kendall's tau against the reference's."""
        spec = protocol.scoring
        assert spec is not None
        agreement = self._against_reference(reference, path, protocol, expected)
        if agreement is None:
            # no file of its own, or no reference pass: the file checks and the reference's absence say why
            cells = ScoringComparison(None, None, None, None, None, None, None, False, {}, False, None, None, False)
            return KindComparison(cells)
        reasons, subgroup_cells = bounds_reasons(agreement, spec)
        reasons += [f"gating subgroup {sg.name!r} has no groups to evaluate (empty column?)"
                    for sg in protocol.subgroups if sg.gating and sg.by == "stratum"
                    and not any(key.split(":", 1)[0] == sg.name for key in agreement.by_group)]
        reproduction_ok = _reproduction(protocol, agreement)
        o = agreement.overall
        cells = ScoringComparison(agreement.common, agreement.max_abs_diff, agreement.diff_at_quantile, o.min_tau,
                                  o.median_tau, o.groups, o.groups_unordered, not reasons, subgroup_cells,
                                  False if reasons else v.cell("tolerance_ok"), None, agreement.max_abs_diff,
                                  reproduction_ok)
        return KindComparison(cells, tuple(reasons), tuple(r for r in reasons if r.startswith("subgroup ")))

    def _against_reference(self, reference: Any, path: Path | None, protocol: Protocol,
                           expected: Any) -> ScoreAgreement | None:
        if reference.key is None or path is None:
            return None
        held = reference.held.setdefault("scoring", _Held())
        if held.pairs is None:
            held.pairs = pairs_of(expected, Path(reference.paths[reference.pass_id]).parent.parent, protocol)
        if held.pairs.error is not None:
            return None
        if held.reference is None:
            entry = reference.reader.read(reference.paths[reference.pass_id], reference.ids)
            if entry is None:
                return None
            ref_set = entry[1]
            held.reference = aligned_scores(ref_set, _rows(ref_set, reference.ids))
        entry = reference.reader.read(path, reference.ids)
        if entry is None:
            return None
        mine = aligned_scores(entry[1], _rows(entry[1], reference.ids))
        assert protocol.scoring is not None
        return score_agreement(mine, held.reference, held.pairs.groups, protocol.scoring.diff_quantile,
                               gating_strata(protocol, expected))

    def row_cells(self, row: dict[str, Any], v: Cells, notes: list[str]) -> None:
        """The score columns; each gating stratum group's taus and the groups' ranking metrics as notes."""
        row.update({key: v.cell(key) for key in SCORE_COLUMNS})
        if v.cell("subgroup_tau"):
            notes.append("subgroup Kendall's tau: " + json.dumps(v.cell("subgroup_tau"), sort_keys=True))
        if v.cell("tau_groups_unordered"):
            notes.append(f"Kendall's tau: {v.cell('tau_groups_unordered')} group(s) of fewer than two compared "
                         "pairs left out")
        if v.cell("ranking"):
            notes.append(ranking_note(v.cell("ranking")).replace(" queries:", " groups:"))

    def compare_files(self, a: Path, b: Path, protocol: Protocol, reader: Any) -> ScoreFileComparison:
        return compare_score_files(a, b)


def pairs_of(expected: Any, campaign_dir: Path, protocol: Protocol) -> PairTable:
    """The pairs of the corpus whose expected ids are ``expected``: those its pass verdicts read
    (:meth:`ScoringVerdict.metric_cells` keeps the last few), else read again from the campaign folder's copy
    that holds exactly those ids (the one corpus, or a dataset's)."""
    kept = _PAIRS.get(id(expected))
    if kept is not None and kept[0] is expected:
        return kept[1]
    for dataset in [None, *(d.name for d in protocol.datasets)]:
        copy = Path(campaign_dir) / corpus_copy(dataset)
        if not copy.is_file():
            continue
        ids = [b.column(0) for b in read_corpus_batches(copy, ["id"])]
        if (pa.concat_arrays(ids) if ids else pa.array([], pa.string())).equals(expected.ids):
            return _keep(expected, pair_table(load_pairs(Path(campaign_dir), dataset), protocol, len(expected)))
    return PairTable(np.zeros(len(expected), np.int64), np.asarray([""]), None,
                     "scoring: no corpus copy holds the expected pairs")


#: The pair tables of the last few corpora verdicts were given, by the identity of their expected ids' holder.
_PAIRS: dict[int, tuple[Any, PairTable]] = {}


def _keep(expected: Any, table: PairTable) -> PairTable:
    if len(_PAIRS) >= 4:
        _PAIRS.pop(next(iter(_PAIRS)))
    _PAIRS[id(expected)] = (expected, table)
    return table


def _rows(found: ScoreSet, ids: pa.Array) -> np.ndarray:
    return file_rows(found.coverage(ids), len(ids))


def _reproduction(protocol: Protocol, agreement: ScoreAgreement) -> bool:
    """The declared reproduction target on scores: ``identical`` (every score equal), ``bounded`` (the largest
    absolute difference ≤ ``reproduction.bound``), ``acceptable`` (the checks above)."""
    target, worst = protocol.reproduction.target, agreement.max_abs_diff
    if target == "identical":
        return worst == 0.0
    if target == "bounded":
        return worst is not None and worst <= (protocol.reproduction.bound or 0) + 1e-12
    return True


@dataclass(frozen=True)
class ScoreFileComparison(FileComparison):
    """Two score files compared (``rerun``): beside the shared cells (``max_abs_prob_diff``: the largest score
    difference), that difference under its own name."""

    max_abs_score_diff: float | None = None


def compare_score_files(a: Path, b: Path) -> ScoreFileComparison:
    """The scores of two score files over the ids both hold: whether identical, the largest difference."""
    first, second = read_scores(a), read_scores(b)
    common, ia, ib = np.intersect1d(np.asarray(first.ids.to_pylist(), dtype=object).astype(str),
                                    np.asarray(second.ids.to_pylist(), dtype=object).astype(str),
                                    return_indices=True)
    same_ids = len(common) == len(first.ids) == len(second.ids)
    diff = np.abs(first.scores[ia].astype(np.float64) - second.scores[ib].astype(np.float64))
    worst = float(diff.max()) if len(diff) else None
    identical = same_ids and (worst == 0.0 or not len(diff)) and first.format_ok and second.format_ok
    return ScoreFileComparison(len(common), same_ids, identical, None, worst, worst)


SCORING_VERDICT = ScoringVerdict()
