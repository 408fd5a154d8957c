"""An embedding pass against the reference pass (Q2, Q3): each document's cosine with the reference's vector for
the same document, bounded by ``embedding.min_cosine`` (and the optional lower-quantile bound) overall and in each
gating subgroup, and the largest absolute difference of the vectors (``reproduction``).

Both files are read and checked once by the campaign's reader, their vectors kept in scratch stores
(``campaign.kinds.embedding.output.RowStore``); the reference's rows are read back a block at a time, in whatever order its file
holds them, and each block gathers the pass's rows of the same documents: memory is a few blocks, whatever the
corpus size, and no file is decoded twice for one comparison. ``judge`` joins the result with the
rest of the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.kinds.embedding import output as vector_files
from iteralab.campaign.kinds.expected import Expected, file_rows, match_ids
from iteralab.campaign.kinds.embedding.knn import cosine_rows
from iteralab.campaign.kinds.verdictpart import FileComparison
from iteralab.common.tolerance import TOL

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol


@dataclass(frozen=True)
class CosineComparison:
    """The cosines of a pass's vectors with the reference pass's (corpus order; NaN: not comparable) and the
    largest absolute difference of any value (None when some value could not be compared)."""

    cosines: np.ndarray
    max_abs_diff: float | None


@dataclass(frozen=True)
class VectorAgreement(FileComparison):
    """Two vector files compared (:func:`compare_vector_files`): beside the shared cells, how many ids each holds
    and the lowest cosine of a document's two vectors."""

    ids_a: int = 0
    ids_b: int = 0
    min_cosine: float | None = None

    def lowest_cosine(self) -> float | None:
        return self.min_cosine


@dataclass(frozen=True)
class CosineCells:
    """A pass's documents' cosines with the reference pass's vectors against the declared bounds: overall, per
    subgroup group (its minimum, median, quantile, gating and whether it holds), and whether all hold."""

    min_cosine: float | None
    median_cosine: float | None
    cosine_at_quantile: float | None
    subgroup_cosine: dict[str, dict[str, float | bool | None]]
    cosine_ok: bool


@dataclass(frozen=True)
class VectorReproduction:
    """The reproduction cells of an embedding pass (no labels: ``label_agreement`` None)."""

    label_agreement: None
    max_abs_prob_diff: float | None
    reproduction_ok: bool


def compare_vectors(path: Path, reference: Path, reader: Any, expected: Expected
                    ) -> CosineComparison | None:
    """The pass's file against the reference file; None without a readable set. Both are read through ``reader``
    (each read and checked once, its vectors then read back from its scratch store a block at a time)."""
    entry = reader.read(path, expected.ids)
    if entry is None or not entry[1].vectors.size:
        return None
    vectors = entry[1]
    rows = file_rows(match_ids(vectors.ids, expected), len(expected))
    covered = rows >= 0
    cosines = np.full(len(expected), np.nan)
    ref_entry = reader.read(reference, expected.ids)
    if ref_entry is None or ref_entry[1].dim != vectors.dim:
        return CosineComparison(cosines, None)
    ref = ref_entry[1]
    positions = _corpus_positions(ref.ids, expected)
    worst, unknown = 0.0, False
    for start in range(0, len(ref.ids), vector_files.READ_ROWS):
        where = positions[start:start + vector_files.READ_ROWS]
        block, at, mine = _aligned_block(vectors.vectors, ref.vectors, start, where, rows, covered)
        cos, diff = cosine_rows(mine, block)
        cosines[at] = cos
        unknown = unknown or bool(np.isnan(diff).any())
        worst = max(worst, float(np.nanmax(diff, initial=0.0)))
    return CosineComparison(cosines, None if unknown else worst)


def _aligned_block(store: Any, ref_store: Any, start: int, where: np.ndarray, rows: np.ndarray, covered: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's rows ``start:start + len(where)`` that are corpus documents, their corpus positions, and the
    pass's vectors of the same documents (NaN where the pass has none). Both sets in corpus order (the usual
    case): two reads, no gather and no copy."""
    if len(where) and where[0] >= 0 and where[-1] - where[0] + 1 == len(where) and \
            bool((np.diff(where) == 1).all()):
        first = int(where[0])
        mine_rows = rows[first:first + len(where)]
        if bool(covered[first:first + len(where)].all()) and mine_rows[-1] - mine_rows[0] + 1 == len(mine_rows) \
                and bool((np.diff(mine_rows) == 1).all()):
            at = np.arange(first, first + len(where))
            return ref_store[start:start + len(where)], at, store[int(mine_rows[0]):int(mine_rows[0]) + len(where)]
    known = where >= 0
    block = ref_store[start:start + len(where)][known]
    at = where[known]
    mine = np.full((len(at), block.shape[1]), np.nan, dtype=np.float32)
    held = covered[at]
    mine[held] = store[rows[at[held]]]
    return block, at, mine


def _corpus_positions(ids: pa.Array, expected: Expected) -> np.ndarray:
    """The corpus position of each row of a vector set (-1: not a corpus id): one hash lookup of the whole id
    column (none when the set is in corpus order), never one per block."""
    if len(ids) == len(expected) and ids.equals(expected.ids):
        return np.arange(len(ids), dtype=np.int64)
    return pc.fill_null(pc.index_in(ids, value_set=expected.ids), -1).to_numpy(zero_copy_only=False)


def compare_vector_files(a: Path, b: Path, reader: Any) -> VectorAgreement:
    """Two vector files of the same corpus (a rerun's pass and the earlier one) compared as ``compare_outputs``
    compares class probabilities: ids in common, whether they are the same, the largest absolute difference, and
    the lowest cosine (``label_agreement`` has no meaning for vectors: None)."""
    ids_a, ids_b = reader.read(a)[1].ids, reader.read(b)[1].ids  # type: ignore[index]
    common = int(pc.sum(pc.is_in(ids_a, value_set=ids_b)).as_py() or 0)
    expected = Expected(ids_b, np.zeros(len(ids_b), np.int8), (), np.full(len(ids_b), -1, np.int8))
    same = compare_vectors(a, b, reader, expected)
    cosines = same.cosines[~np.isnan(same.cosines)] if same is not None else np.zeros(0)
    worst = same.max_abs_diff if same is not None else None
    same_ids = common == len(ids_a) == len(ids_b)
    return VectorAgreement(common, same_ids, bool(same_ids and common and worst == 0.0), None, worst,
                           len(ids_a), len(ids_b), float(cosines.min()) if len(cosines) else None)


def _bounds(values: np.ndarray, protocol: Protocol) -> tuple[float | None, float | None, float | None, list[str]]:
    """(minimum, median, lower quantile, what fails) of some documents' cosines against the declared bounds."""
    spec = protocol.embedding
    assert spec is not None
    if not len(values):
        return None, None, None, ["no document to compare"]
    if np.isnan(values).any():
        return None, None, None, [f"{int(np.isnan(values).sum())} document(s) without a comparable vector"]
    low, median = float(values.min()), float(np.median(values))
    quantile = float(np.quantile(values, spec.cosine_quantile)) if spec.cosine_quantile is not None else None
    failed = []
    if low + TOL < spec.min_cosine:
        failed.append(f"min cosine {low:.4f} < {spec.min_cosine:g}")
    if quantile is not None and spec.min_cosine_at_quantile is not None and \
            quantile + TOL < spec.min_cosine_at_quantile:
        failed.append(f"cosine at quantile {spec.cosine_quantile:g} {quantile:.4f} < {spec.min_cosine_at_quantile:g}")
    return low, median, quantile, failed


def cosine_cells(same: CosineComparison | None, protocol: Protocol, expected: Expected,
                 covered: np.ndarray | None = None) -> tuple[CosineCells, list[str]]:
    """The verdict's cosine cells and the reasons it fails: overall, then each gating subgroup's group."""
    if same is None:
        return CosineCells(None, None, None, {}, False), ["no vectors to compare with the reference pass"]
    rows = covered if covered is not None else np.ones(len(expected), dtype=bool)
    low, median, quantile, failed = _bounds(same.cosines[rows], protocol)
    reasons = [f"cosine with the reference: {', '.join(failed)}"] if failed else []
    groups: dict[str, dict[str, float | bool | None]] = {}
    for sg in protocol.subgroups:
        names = expected.stratum_names if sg.by == "stratum" else expected.classes
        codes = expected.strata if sg.by == "stratum" else expected.labels
        for i, name in enumerate(names):
            member = (codes == i) & rows
            if not member.any():
                continue
            g_low, g_median, g_quantile, g_failed = _bounds(same.cosines[member], protocol)
            groups[f"{sg.name}:{name}"] = {"min": g_low, "median": g_median, "quantile": g_quantile,
                                           "gating": sg.gating, "ok": not g_failed}
            if sg.gating and g_failed:
                reasons.append(f"subgroup {sg.name}:{name} cosine ({', '.join(g_failed)})")
    return CosineCells(low, median, quantile, groups, not reasons), reasons


def vector_reproduction(protocol: Protocol, same: CosineComparison | None) -> VectorReproduction:
    """The declared reproduction target on vectors: ``identical`` (every value equal), ``bounded`` (largest
    absolute difference ≤ the bound), ``acceptable`` (the checks above)."""
    target = protocol.reproduction.target
    worst = None if same is None else same.max_abs_diff
    if target == "identical":
        ok = worst == 0.0
    elif target == "bounded":
        ok = worst is not None and worst <= (protocol.reproduction.bound or 0) + TOL
    else:
        ok = True
    return VectorReproduction(None, worst, ok)
