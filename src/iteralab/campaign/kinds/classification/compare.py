"""How far two prediction sets agree (Q3): the share of equal labels and the largest absolute probability
difference over the ids both hold, computed in blocks so that the float64 differences of a whole corpus are
never held. Reads prediction sets (or one prediction file streamed); writes nothing.

The run (``campaign.verdict.evaluate.CampaignReads``, through ``ClassificationVerdict.running_comparison``) and
the verdict of a campaign (``judge``, through ``ClassificationVerdict.compare``) both compare through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from iteralab.campaign.kinds.classification.output import PredictionSet, label_prob_batches
from iteralab.campaign.kinds.verdictpart import FileComparison

__all__ = ["BLOCK", "BLOCK_BYTES", "Agreement", "block_rows", "compare_outputs", "compare_rows_with_file"]

#: Rows compared at a time (a prediction file's row group), at most :data:`BLOCK_BYTES` of float64 differences
#: (rows × classes × 8 bytes): what a comparison holds beyond its two sets.
BLOCK = 1 << 15
BLOCK_BYTES = 1 << 22


@dataclass(frozen=True)
class Agreement(FileComparison):
    """Two prediction sets compared (:func:`compare_outputs`): beside the shared cells, how many distinct ids each
    holds."""

    ids_a: int = 0
    ids_b: int = 0


def block_rows(k: int) -> int:
    """Rows per block for ``k`` classes."""
    return max(1, min(BLOCK, BLOCK_BYTES // (8 * max(k, 1))))


def compare_outputs(a: PredictionSet, b: PredictionSet, b_distinct: bool = False) -> Agreement:
    """Label agreement and largest absolute probability difference over the ids both output sets hold (a
    repeated id: its last record). ``b_distinct``: the caller knows ``b`` repeats no id (a pass whose ids
    matched the corpus), which spares counting distinct ids when both hold the same ids in the same order."""
    if len(a.ids) == len(b.ids) and a.ids.equals(b.ids) and (
            b_distinct or pc.count_distinct(a.ids).as_py() == len(a.ids)):
        return _compare_rows(a, b)  # the same distinct ids in the same order: row by row, no lookup
    ua, _, la = a.by_id()
    ub, _, lb = b.by_id()
    where = pc.fill_null(pc.index_in(ua, value_set=ub), -1).to_numpy(zero_copy_only=False)
    common = where >= 0
    n_common = int(common.sum())
    same_ids = n_common == len(ua) == len(ub)
    agreement, worst = _agreement(a, b, la[common], lb[where[common]]) if n_common else (None, None)
    return Agreement(n_common, same_ids, bool(same_ids and n_common and agreement == 1.0 and worst == 0.0),
                     agreement, worst, len(ua), len(ub))


def _agreement(a: PredictionSet, b: PredictionSet, ra: np.ndarray | None = None, rb: np.ndarray | None = None
               ) -> tuple[float, float | None]:
    """(share of equal labels, largest absolute probability difference — None if a difference is NaN or the
    class counts differ) of rows ``ra`` of ``a`` against rows ``rb`` of ``b`` (row by row when None), in blocks:
    the float64 differences of a whole corpus are never held."""
    n = len(a.labels) if ra is None else len(ra)
    rows = block_rows(a.probs.shape[1] if a.probs.ndim == 2 else 1)

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        for start in range(0, n, rows):
            ia = slice(start, start + rows) if ra is None else ra[start:start + rows]
            ib = slice(start, start + rows) if rb is None else rb[start:start + rows]
            yield a.labels[ia], b.labels[ib], a.probs[ia], b.probs[ib]

    return _agreement_of(blocks(), n)


def _agreement_of(blocks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], n: int
                  ) -> tuple[float, float | None]:
    """:func:`_agreement` of aligned blocks of at most :func:`block_rows` rows (labels of a, labels of b,
    probabilities of a, of b)."""
    same, worst, nan, comparable = 0, 0.0, False, True
    for la, lb, pa_, pb in blocks:
        same += int(np.count_nonzero(la == lb))
        comparable = comparable and pa_.shape[1:] == pb.shape[1:]
        if comparable:
            diff = np.subtract(pa_, pb, dtype=np.float64)  # in float64, without a float64 copy of either block
            np.abs(diff, out=diff)
            nan = nan or bool(np.isnan(diff).any())
            worst = max(worst, float(diff.max(initial=0.0)))
    return same / n, None if nan or not comparable else worst


def compare_rows_with_file(a: PredictionSet, path: Path, classes: tuple[str, ...]) -> Agreement | None:
    """:func:`compare_outputs` of ``a`` with the prediction file at ``path`` when both hold the same distinct ids
    in the same order (the corpus order), the file read :func:`block_rows` records at a time: never held whole. None
    when the file's row count is not ``a``'s."""
    n, read = len(a.ids), 0

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        nonlocal read
        for codes, matrix in label_prob_batches(path, classes, rows=block_rows(len(classes))):
            start, read = read, read + len(codes)
            if read > n:
                return
            yield a.labels[start:read], codes, a.probs[start:read], matrix

    if not n:
        return None
    agreement = _agreement_of(blocks(), n)
    return _row_result(n, agreement) if read == n else None


def _compare_rows(a: PredictionSet, b: PredictionSet) -> Agreement:
    n = len(a.ids)
    return _row_result(n, _agreement(a, b) if n else (None, None))


def _row_result(n: int, agreement: tuple[float | None, float | None]) -> Agreement:
    """:func:`compare_outputs`'s result for two sets of the same ``n`` distinct ids in the same order."""
    label_agreement, worst = agreement
    return Agreement(n, True, bool(n and label_agreement == 1.0 and worst == 0.0), label_agreement, worst, n, n)
