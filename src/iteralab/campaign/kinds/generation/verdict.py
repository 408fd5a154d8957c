"""The verdict of a generation pass, from its stored text file (``campaign.kinds.generation.output``) and the corpus copy's
reference answers (``corpus.reference_column``, copied as the ``reference`` column).

On its own (``evaluate_texts``, beside the id, format and coverage cells): the metric over the covered documents
(one of ``generation.textmetrics``' or the user's routine, higher is better), and inside each group of each planned
stratum subgroup; the mean generated tokens, and the share of outputs that ended on ``length`` with its bound
(``generation.max_length_share``: a pass above it fails).

Against the reference variant's first complete pass (``text_comparison``, joined by ``verdict.judge``): the mean
generated tokens within ``generation.tokens_tolerance`` of the reference's (relative; a variant never buys speed
by answering shorter), and the share of documents whose text is identical to the reference pass's (reported;
gating only under ``reproduction.target = "identical"``). The metric's tolerance (absolute or relative) is
``judge``'s, as for every job.

A routine is called with keyword arguments on whole arrays in corpus order::

    def my_metric(*, ids: list[str], outputs: numpy.ndarray, references: numpy.ndarray | None) -> float

``outputs`` the generated texts (a str array), ``references`` the reference answers (a str array, "" where a
document has none) or None without ``corpus.reference_column``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.folder import GENERATION_COLUMNS, corpus_copy, read_corpus_batches
from iteralab.campaign.kinds.generation.output import read_texts
from iteralab.campaign.kinds.routine import Routine
from iteralab.campaign.kinds.generation.textmetrics import corpus_score, document_scores
from iteralab.campaign.kinds.interval import Sample, UnitValues, mean_samples
from iteralab.campaign.kinds.expected import file_rows
from iteralab.campaign.kinds.verdictpart import Cells, FileComparison, KindComparison, PassInputs, VerdictPart
from iteralab.errors import RoutineError
from iteralab.common.tolerance import TOL

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["GENERATION_VERDICT", "GenerationCells", "GenerationComparison", "GenerationVerdict", "TextAgreement",
           "TextComparison", "compare_text_files", "compare_text_sets",
           "evaluate_texts", "load_references", "text_comparison"]


def load_references(campaign_dir: Path, dataset: str | None = None) -> pa.Array | None:
    """The corpus copy's reference answers in corpus order (None when the copy has no ``reference`` column)."""
    parts = []
    for batch in read_corpus_batches(Path(campaign_dir) / corpus_copy(dataset), ["id", "reference"]):
        if "reference" not in batch.schema.names:
            return None
        parts.append(pc.fill_null(batch.column(batch.schema.get_field_index("reference")), ""))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def _aligned(texts: Any, rows: np.ndarray) -> pa.Array:
    """The texts of the expected documents in corpus order ("" where a document has none)."""
    has = rows >= 0
    if not len(texts.texts):
        return pa.array([""] * len(rows), pa.string())
    taken = texts.texts.take(pa.array(np.where(has, rows, 0)))
    return pc.if_else(pa.array(has), taken, "")


def _score(protocol: Protocol, routine: Routine | None, ids: pa.Array, outputs: pa.Array,
           references: pa.Array | None, rows: np.ndarray, errors: list[str]) -> float | None:
    if not rows.any():
        return None
    mask = pa.array(rows)
    mine = outputs.filter(mask)
    refs = references.filter(mask) if references is not None else None
    metric = protocol.metric
    if metric.routine is None:
        if refs is None:
            errors.append(f"metric {metric.label}: the corpus copy has no reference answers")
            return None
        return float(corpus_score(str(metric.name), mine, refs))
    try:
        return (routine or Routine(metric.routine, None))(
            ids.filter(mask).to_pylist(), np.asarray(mine.to_pylist(), dtype=str),
            np.asarray(refs.to_pylist(), dtype=str) if refs is not None else None)
    except RoutineError as exc:
        errors.append(exc.message)
        return None


def _document_values(protocol: Protocol, outputs: pa.Array, references: pa.Array | None,
                     covered: np.ndarray) -> UnitValues | None:
    """Each expected document's score (NaN: not covered) when the metric is the mean of document scores (a
    built-in but corpus chrF), as ``corpus_score`` computes them; None otherwise."""
    name = protocol.metric.name
    if name is None or name == "chrf" or references is None or not covered.any():
        return None
    mask = pa.array(covered)
    values = np.full(len(covered), np.nan)
    values[covered] = document_scores(name, outputs.filter(mask), references.filter(mask))
    return UnitValues(values)


def _mean_of(values: np.ndarray, rows: np.ndarray) -> float | None:
    """The mean of the documents' scores in ``rows`` (``corpus_score``'s value; None without a document)."""
    return float(values[rows].mean()) if rows.any() else None


def evaluate_texts(v: Cells, texts: Any, protocol: Protocol, expected: Any, match: Any, rows: np.ndarray,
                   references: pa.Array | None, routine: Routine | None = None) -> Cells:
    """A generation pass's verdict ``v`` with its metric, length and token cells (``texts``: its ``TextSet``;
    ``match`` and ``rows``: its ids matched to the corpus, ``kinds.expected.match_ids``)."""
    spec = protocol.generation
    assert spec is not None
    covered = match.covered
    outputs = _aligned(texts, rows)
    errors: list[str] = []
    units = _document_values(protocol, outputs, references, covered)
    if units is not None:  # a mean of document scores: each group's value is the mean of its documents'
        metric, groups = _mean_of(units.values, covered), {
            f"{sg.name}:{name}": _mean_of(units.values, covered & (expected.strata == i))
            for sg in protocol.subgroups if sg.by == "stratum" for i, name in enumerate(expected.stratum_names)}
    else:
        metric = _score(protocol, routine, expected.ids, outputs, references, covered, errors)
        groups = {}
        for sg in protocol.subgroups:
            if sg.by == "stratum":
                for i, name in enumerate(expected.stratum_names):
                    groups[f"{sg.name}:{name}"] = _score(protocol, routine, expected.ids, outputs, references,
                                                         covered & (expected.strata == i), errors)
    v = v.with_cells(metric_name=protocol.metric.label, metric=metric, subgroups=groups,
                     routine_error=errors[0] if errors and protocol.metric.routine is not None else None)
    v = v.with_units(units)
    if errors and protocol.metric.routine is None:
        v = v.with_cells(reference_error=errors[0])
    share = texts.length_share if len(texts.ids) and texts.tokens_measured else None
    bound = spec.max_length_share
    return v.with_cells(
        threshold_ok=metric is not None and protocol.metric.meets(metric, protocol.metric.threshold),
        generated_rows=len(texts.ids), mean_tokens=texts.mean_tokens if len(texts.ids) else None,
        length_share=share, length_ok=bound is None or (share is not None and share <= bound + TOL),
        output_lengths=_length_histogram(texts))


def _length_histogram(texts: Any) -> dict[str, int]:
    """How many outputs had each generated token count (the report's output-length chart)."""
    if not len(texts.ids) or not texts.tokens_measured:
        return {}
    values, counts = np.unique(texts.tokens, return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts)}


@dataclass(frozen=True)
class TextComparison:
    """A pass's texts against the reference pass's, over the documents both have: the share identical."""

    identical_share: float | None
    compared: int
    #: both files hold the same ids (each once)
    same_ids: bool = False

    def agreement(self) -> TextAgreement:
        """The form of ``classification.compare.compare_outputs`` that rerun reads (texts: no probabilities)."""
        return TextAgreement(self.compared, self.same_ids, self.same_ids and self.identical_share == 1.0,
                             self.identical_share, None, self.identical_share)


@dataclass(frozen=True)
class TextAgreement(FileComparison):
    """Two text files compared: beside the shared cells (``label_agreement``: the share of identical texts), that
    share under its own name."""

    identical_share: float | None = None


def compare_text_files(a: Path, b: Path, protocol: Protocol) -> TextComparison:
    """The share of ids whose texts are identical in two text files (the ids both hold)."""
    spec = protocol.generation
    assert spec is not None
    return compare_text_sets(read_texts(a, max_new_tokens=spec.max_new_tokens, allow_empty=spec.allow_empty),
                             read_texts(b, max_new_tokens=spec.max_new_tokens, allow_empty=spec.allow_empty))


def compare_text_sets(left: Any, right: Any) -> TextComparison:
    """:func:`compare_text_files` of two text files already read (``campaign.kinds.generation.output.TextSet``)."""
    where = pc.fill_null(pc.index_in(left.ids, value_set=right.ids), -1).to_numpy(zero_copy_only=False)
    both = where >= 0
    if not both.any():
        return TextComparison(None, 0)
    mine = left.texts.filter(pa.array(both))
    theirs = right.texts.take(pa.array(where[both]))
    same = pc.sum(pc.cast(pc.equal(mine, theirs), pa.int64())).as_py() or 0
    unique = len(pc.unique(left.ids)) == len(left.ids) and len(pc.unique(right.ids)) == len(right.ids)
    same_ids = unique and len(left.ids) == len(right.ids) == int(both.sum())
    return TextComparison(same / int(both.sum()), int(both.sum()), same_ids)


@dataclass(frozen=True)
class GenerationComparison:
    """A generation pass's cells against the reference pass: the reference's mean tokens and whether its own are
    within the tolerance, the share of identical texts, and the reproduction cells (no labels, no probabilities)."""

    mean_tokens_ref: float | None
    tokens_ok: bool | None
    identical_share: float | None
    reproduction_ok: bool
    label_agreement: None = None
    max_abs_prob_diff: None = None


def text_comparison(v: Cells, ref_v: Cells | None, same: TextComparison | None,
                    protocol: Protocol) -> KindComparison:
    """The generation cells of a pass judged against the reference pass (``v``: its verdict; ``ref_v``: the
    reference pass's, or None) and the reasons it fails: the length share above its bound, mean tokens outside the
    tolerance, and under ``reproduction.target = "identical"`` any text differing from the reference pass's."""
    spec = protocol.generation
    assert spec is not None
    reasons = []
    if v.cell("length_ok") is False:
        reasons.append(f"length share {v.cell('length_share')} above generation.max_length_share "
                       f"{spec.max_length_share:g}")
    mine, theirs = v.cell("mean_tokens"), ref_v.cell("mean_tokens") if ref_v is not None else None
    tokens_ok = None  # not measured: shown as such, never guessed
    if mine is not None and theirs is not None:
        tokens_ok = abs(mine - theirs) <= spec.tokens_tolerance * theirs + TOL
        if not tokens_ok:
            reasons.append(f"mean generated tokens {mine:.2f} outside ±{spec.tokens_tolerance:g} of the "
                           f"reference's {theirs:.2f}")
    share = same.identical_share if same is not None else None
    ok = share is not None and share >= 1.0 - TOL if protocol.reproduction.target == "identical" else True
    return KindComparison(GenerationComparison(theirs, tokens_ok, share, ok), tuple(reasons))


@dataclass(frozen=True)
class GenerationCells:
    """A generation pass's own verdict cells: its texts' lengths, and against the reference pass its mean tokens
    and the share of identical texts."""

    #: why its metric has no value when the corpus copy has no reference answers
    reference_error: str | None = None
    generated_rows: int | None = None
    mean_tokens: float | None = None
    length_share: float | None = None
    length_ok: bool | None = None
    #: how many outputs had each generated token count
    output_lengths: Mapping[str, int] | None = None
    mean_tokens_ref: float | None = None
    tokens_ok: bool | None = None
    identical_share: float | None = None


def against_reference(reference: Any, path: Path | None) -> TextComparison | None:
    """A generation pass's texts against the reference pass's; None without either file. The reference's texts
    are read once and held (ids and texts as Arrow arrays); the pass's come from the reader, which has them when
    it read the file for its verdict."""
    if reference.key is None or path is None:
        return None
    reader, ids = reference.reader, reference.ids
    if "texts" not in reference.held:
        entry = reader.read(reference.paths[reference.pass_id], ids)
        if entry is None:
            return None
        reference.held["texts"] = entry[1]
    entry = reader.read(path, ids)
    return compare_text_sets(entry[1], reference.held["texts"]) if entry is not None else None


class GenerationVerdict(VerdictPart):
    """The generation kind's answers to the verdict (:class:`~iteralab.campaign.kinds.verdictpart.VerdictPart`):
    the metric and lengths of its texts (``evaluate_texts``), its texts and lengths against the reference pass's
    (``text_comparison``)."""

    cells = GenerationCells

    def metric_cells(self, v: Cells, found: Any, protocol: Protocol, expected: Any, match: Any,
                     inputs: PassInputs) -> Cells:
        return evaluate_texts(v, found, protocol, expected, match, file_rows(match, len(expected)),
                              inputs.references, inputs.routine)

    def references(self, folder: Path, dataset: str | None) -> pa.Array | None:
        return load_references(folder, dataset)

    def compare(self, v: Cells, reference: Any, path: Path | None, protocol: Protocol,
                expected: Any) -> KindComparison:
        """Lengths against their bounds, the texts against the reference pass's."""
        return text_comparison(v, reference.verdict, against_reference(reference, path), protocol)

    def row_cells(self, row: dict[str, Any], v: Cells, notes: list[str]) -> None:
        """The length and identity cells; tokens per second from the measured pass and its file's generated tokens
        (empty, and said so, when the tokens were not measured)."""
        row.update({key: v.cell(key) for key in GENERATION_COLUMNS})
        mean, rows = v.cell("mean_tokens"), v.cell("generated_rows")
        if mean is not None and rows and row.get("pass_s"):
            row["tokens_per_s"] = mean * rows / row["pass_s"]
        elif mean is None and v.cell("generated_rows"):
            notes.append("tokens_per_s, mean_tokens, length_share: not measured (the generator returned no token "
                         "counts and names no tokenizer)")
        if v.cell("mean_tokens_ref") is not None and v.cell("tokens_ok") is False:
            notes.append(f"mean generated tokens {mean:.2f} against the reference's {v.cell('mean_tokens_ref'):.2f}")

    def quality_samples(self, v: Cells, reference: Cells, protocol: Protocol, expected: Any) -> dict[str, Sample]:
        groups = {f"{sg.name}:{name}": expected.strata == i for sg in protocol.subgroups
                  if sg.gating and sg.by == "stratum" for i, name in enumerate(expected.stratum_names)}
        return mean_samples(v.units, reference.units,
                            expected.strata if len(expected.stratum_names) > 1 else None, groups)

    def compare_files(self, a: Path, b: Path, protocol: Protocol, reader: Any) -> TextAgreement:
        return compare_text_files(a, b, protocol).agreement()


GENERATION_VERDICT = GenerationVerdict()
