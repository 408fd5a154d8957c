"""The report's examples of wrong outputs (X1): a few documents of one counted pass whose output is wrong, or a
true sentence saying why there is none to show.

- classification: the reference variant's first counted pass (else the first counted pass); documents whose
  predicted label is not the corpus label, in corpus order.
- generation: the same pass; documents whose text scores below 1 against its reference answer on the protocol's
  metric (lowest first). A metric routine scores the corpus as a whole, not each document: under one, a wrong
  output is one that is not an exact match of its reference (SQuAD normalisation), and the caption says so.
- embedding: a vector has no label to be wrong; the counted pass farthest from the reference pass (lowest
  minimum cosine) and its documents farthest from the reference pass's vectors, lowest cosine first.

The prediction files are read through Arrow (``campaign.kinds.generation.output``, the verdict's reader for vectors); only the
examples shown become Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.folder import RawRow
from iteralab.campaign.kinds.generation.output import read_texts
from iteralab.campaign.kinds.scoring.output import read_scores
from iteralab.campaign.kinds.scoring.verdict import aligned_scores
from iteralab.campaign.kinds.registry import kind_of
from iteralab.campaign.kinds.embedding.cosine import compare_vectors
from iteralab.campaign.kinds.expected import corpus_texts, file_rows, load_expected
from iteralab.campaign.verdict.evaluate import PredictionReader
from iteralab.plan.metric import TOL
from iteralab.campaign.kinds.generation.verdict import load_references
from iteralab.campaign.kinds.generation.textmetrics import GENERATION_METRICS, document_scores
from iteralab.evidence.reads import Evidence
from iteralab.evidence.stats import reference_rows

EXAMPLES = 5
#: Characters of a corpus text or an output shown in one cell.
SHOWN_CHARS = 300
NO_COUNTED_PASS = ("No counted pass (every pass failed, was interrupted or was excluded): there is no output to "
                   "show.")


@dataclass(frozen=True)
class Examples:
    """What the report shows for one campaign: the pass the examples come from, the table's columns (each row
    holds one cell per column), and the sentence that says what the rows are, or why there is none."""

    pass_id: str | None
    columns: tuple[str, ...]
    rows: tuple[dict[str, str], ...]
    caption: str


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def counted_rows(ev: Evidence) -> list[RawRow]:
    """The passes whose outputs count: completed, not excluded, with a prediction file."""
    return [r for r in ev.rows if r.ok and r.pass_id not in ev.exclusions and r.prediction_file]


def _example_pass(ev: Evidence, counted: list[RawRow]) -> tuple[RawRow, str]:
    ref = ev.protocol.metric.reference_variant
    row = next((r for r in counted if r.variant == ref), None)
    if row is not None:
        return row, f"the reference variant {ref}'s first counted pass"
    return counted[0], f"the first counted pass; the reference variant {ref} has none"


def wrong_examples(ev: Evidence, limit: int = EXAMPLES) -> Examples:
    """A few wrong outputs of a counted pass of the campaign, for its kind of job."""
    counted = counted_rows(ev)
    if not counted:
        return Examples(None, (), (), NO_COUNTED_PASS)
    return SHOWN[kind_of(ev.protocol).examples](ev, counted, limit)


def _wrong_labels(ev: Evidence, counted: list[RawRow], limit: int) -> Examples:
    row, which = _example_pass(ev, counted)
    columns = ("id", "stratum", "label", "predicted", "text")
    entry = PredictionReader(ev.protocol).read(ev.folder / str(row.prediction_file))
    if entry is None:
        return Examples(row.pass_id, columns, (), f"Pass {row.pass_id} ({which}): its prediction file is missing.")
    preds = entry[1]
    expected = load_expected(ev.folder, ev.protocol.corpus.classes, row.dataset)
    uniq, _, last = preds.by_id()
    where = pc.fill_null(pc.index_in(uniq, value_set=expected.ids), -1).to_numpy(zero_copy_only=False)
    wrong_mask = (where >= 0) & (expected.labels[np.maximum(where, 0)] != preds.labels[last])
    compared, wrong = int((where >= 0).sum()), int(wrong_mask.sum())
    if not wrong:
        return Examples(row.pass_id, columns, (), f"No wrong prediction in pass {row.pass_id} ({which}): all "
                                                  f"{compared} predicted labels match the corpus labels.")
    shown = np.flatnonzero(wrong_mask)[:limit]
    classes, strata = expected.classes, expected.stratum_names
    picked = [(uniq[int(i)].as_py(), int(where[i]), int(preds.labels[last[i]])) for i in shown]
    texts = corpus_texts(ev.folder, {pid for pid, _, _ in picked}, row.dataset)
    rows = []
    for pid, position, label in picked:
        stratum = int(expected.strata[position])
        rows.append({"id": pid, "label": classes[int(expected.labels[position])],
                     "predicted": classes[label] if label >= 0 else "",
                     "stratum": strata[stratum] if stratum >= 0 else "", "text": _cut(texts.get(pid, ""))})
    return Examples(row.pass_id, columns, tuple(rows),
                    f"Pass {row.pass_id} ({which}): {wrong} of {compared} predicted labels differ from the corpus "
                    f"labels; the first {len(rows)} in corpus order.")


def _wrong_texts(ev: Evidence, counted: list[RawRow], limit: int) -> Examples:
    row, which = _example_pass(ev, counted)
    protocol = ev.protocol
    spec = protocol.generation
    assert spec is not None
    metric = protocol.metric
    built_in = metric.routine is None and metric.name in GENERATION_METRICS
    score_name = str(metric.name) if built_in else "exact_match"
    columns = ("id", score_name, "output", "reference", "text")
    references = load_references(ev.folder, row.dataset)
    if references is None:
        return Examples(row.pass_id, (), (), f"Pass {row.pass_id} ({which}): the corpus declares no reference "
                                             "answers (corpus.reference_column), so no output can be called wrong.")
    texts = read_texts(ev.folder / str(row.prediction_file), max_new_tokens=spec.max_new_tokens,
                       allow_empty=spec.allow_empty)
    expected = load_expected(ev.folder, protocol.corpus.classes, row.dataset)
    where = pc.fill_null(pc.index_in(texts.ids, value_set=expected.ids), -1).to_numpy(zero_copy_only=False)
    keep = (where >= 0) & ~texts.texts.is_null().to_numpy(zero_copy_only=False)
    outputs = texts.texts.filter(pa.array(keep))
    positions = where[keep]
    scores = document_scores(score_name, outputs, references.take(pa.array(positions)))
    wrong = np.flatnonzero(scores < 1.0 - TOL)
    how = (f"score below 1 on {score_name} against their reference answer" if built_in else
           f"are not an exact match of their reference answer (SQuAD normalisation; the routine {metric.label} "
           "scores the corpus as a whole, not each document)")
    if not len(wrong):
        return Examples(row.pass_id, columns, (), f"No wrong output in pass {row.pass_id} ({which}): all "
                                                  f"{len(positions)} outputs score 1 on {score_name} against their "
                                                  "reference answer.")
    shown = wrong[np.lexsort((positions[wrong], scores[wrong]))][:limit]  # lowest score first, then corpus order
    taken = pa.array(shown)
    ids = texts.ids.filter(pa.array(keep)).take(taken).to_pylist()
    said = outputs.take(taken).to_pylist()
    answers = references.take(pa.array(positions[shown])).to_pylist()
    prompts = corpus_texts(ev.folder, set(ids), row.dataset)
    rows = tuple({"id": pid, score_name: f"{scores[i]:.3f}", "output": _cut(out), "reference": _cut(ref),
                  "text": _cut(prompts.get(pid, ""))} for pid, i, out, ref in zip(ids, shown, said, answers))
    order = "the lowest first" if built_in else "the first in corpus order"
    return Examples(row.pass_id, columns, rows,
                    f"Pass {row.pass_id} ({which}): {len(wrong)} of {len(positions)} outputs {how}; {order}.")


def _farthest_vectors(ev: Evidence, counted: list[RawRow], limit: int) -> Examples:
    protocol = ev.protocol
    spec = protocol.embedding
    assert spec is not None
    references = reference_rows(ev)
    others, alone = _against_references(counted, references, "vectors")
    if alone is not None:
        return alone
    row = min(others, key=lambda r: (r.min_cosine is not None, r.min_cosine if r.min_cosine is not None else 0.0))
    ref = references[row.dataset]
    expected = load_expected(ev.folder, protocol.corpus.classes, row.dataset)
    same = compare_vectors(ev.folder / str(row.prediction_file), ev.folder / str(ref.prediction_file),
                           PredictionReader(protocol), expected)
    labelled = bool(expected.classes)
    columns = ("id", "cosine", "stratum", *(("label",) if labelled else ()), "text")
    if same is None:
        return Examples(row.pass_id, columns, (), f"Pass {row.pass_id}: its vector file cannot be read.")
    cosines = same.cosines
    key = np.where(np.isnan(cosines), -np.inf, cosines)  # a document without a comparable vector: the farthest
    shown = np.argsort(key, kind="stable")[:limit]
    ids = expected.ids.take(pa.array(shown)).to_pylist()
    texts = corpus_texts(ev.folder, set(ids), row.dataset)
    rows = []
    for pid, i in zip(ids, shown):
        stratum, label = int(expected.strata[i]), int(expected.labels[i])
        cell: dict[str, Any] = {"id": pid, "cosine": "no comparable vector" if np.isnan(cosines[i])
                                else f"{cosines[i]:.4f}", "stratum": expected.stratum_names[stratum]
                                if stratum >= 0 else "", "text": _cut(texts.get(pid, ""))}
        if labelled:
            cell["label"] = expected.classes[label] if label >= 0 else ""
        rows.append(cell)
    below = int((key < spec.min_cosine - TOL).sum())
    return Examples(row.pass_id, columns, tuple(rows),
                    f"Pass {row.pass_id} (variant {row.variant}, the counted pass farthest from the reference): the "
                    f"{len(rows)} documents farthest from the reference pass {ref.pass_id}'s vectors, lowest cosine "
                    f"first; {below} of {len(cosines)} documents are below embedding.min_cosine "
                    f"{spec.min_cosine:g}.")


def _against_references(counted: list[RawRow], references: dict[str | None, RawRow],
                        outputs: str) -> tuple[list[RawRow], Examples | None]:
    """The counted passes other than their dataset's reference pass, and the examples to show when there is none
    (``outputs``: what a pass's file holds, "vectors" or "scores")."""
    others = [r for r in counted if references.get(r.dataset) is not None
              and r.pass_id != references[r.dataset].pass_id]
    if others:
        return others, None
    ref = references.get(counted[0].dataset)
    what = f"the reference pass {ref.pass_id}" if ref is not None else "no reference pass"
    return others, Examples(
        ref.pass_id if ref else None, (), (),
        f"Only {what} was counted: its {outputs} are the reference, and no other pass's {outputs} are compared with "
        "them.")


def _farthest_scores(ev: Evidence, counted: list[RawRow], limit: int) -> Examples:
    """The counted pass whose scores moved most from the reference pass's: its pairs of the largest score
    difference, the largest first."""
    references = reference_rows(ev)
    others, alone = _against_references(counted, references, "scores")
    if alone is not None:
        return alone
    row = max(others, key=lambda r: r.max_abs_score_diff if r.max_abs_score_diff is not None else np.inf)
    ref = references[row.dataset]
    expected = load_expected(ev.folder, (), row.dataset)
    aligned = []  # each pass's scores in corpus order, NaN where it has none
    for r in (row, ref):
        found = read_scores(ev.folder / str(r.prediction_file))
        aligned.append(aligned_scores(found, file_rows(found.coverage(expected.ids), len(expected))))
    diff = np.abs(aligned[0].astype(np.float64) - aligned[1].astype(np.float64))
    key = np.where(np.isnan(diff), np.inf, diff)  # a pair without a comparable score: the farthest
    shown = np.argsort(-key, kind="stable")[:limit]
    ids = expected.ids.take(pa.array(shown)).to_pylist()
    texts = corpus_texts(ev.folder, set(ids), row.dataset)
    columns = ("id", "score", "reference score", "difference", "text")
    rows = tuple({"id": pid, "score": f"{aligned[0][i]:.4f}", "reference score": f"{aligned[1][i]:.4f}",
                  "difference": "no comparable score" if np.isnan(diff[i]) else f"{diff[i]:.4g}",
                  "text": _cut(texts.get(pid, ""))} for pid, i in zip(ids, shown))
    return Examples(row.pass_id, columns, rows,
                    f"Pass {row.pass_id} (variant {row.variant}, the counted pass farthest from the reference): the "
                    f"{len(rows)} pairs whose score moved most from the reference pass {ref.pass_id}'s, the largest "
                    "difference first.")


#: The readers of wrong outputs in one counted pass, by :attr:`~iteralab.campaign.kinds.base.JobKind.examples`.
SHOWN = {"labels": _wrong_labels, "texts": _wrong_texts, "vectors": _farthest_vectors, "scores": _farthest_scores}


def wrong_predictions(ev: Evidence, limit: int = EXAMPLES) -> tuple[str | None, list[dict[str, str]]]:
    """The pass and the rows of :func:`wrong_examples` (the form the report's first version returned)."""
    examples = wrong_examples(ev, limit)
    return examples.pass_id, list(examples.rows)


__all__ = ["EXAMPLES", "Examples", "counted_rows", "wrong_examples", "wrong_predictions"]
