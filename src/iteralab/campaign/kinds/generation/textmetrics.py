"""The metrics of a generation pass: each generated text scored against its document's reference answer.

Every metric is on a 0..1 scale, one score per document and one for the corpus:

- ``exact_match`` and ``token_f1``: the definitions of the SQuAD v1.1 evaluation script, with its answer
  normalisation (:func:`normalize_answer`: lower case, punctuation and the articles a/an/the removed, runs of
  white space made one space) and one reference per document. As in v1.1, token F1 is 0 when either side has no
  token left after normalisation (two empty answers included).
- ``rouge_l``: ROUGE-L F-measure computed by ``rouge-score`` itself (``RougeScorer(["rougeL"])``), with
  ``use_stemmer=False``: the texts are compared as written, without the Porter stemmer's English suffix rules,
  which would merge words of other languages by accident and make the score depend on a stemmer's version. Note
  that rouge-score's tokenizer keeps the letters a–z and digits only: for text in another script use ``chrf``.
- ``chrf``: chrF (character 6-grams, β = 2) computed by ``sacrebleu`` itself, divided by 100; per document the
  sentence chrF, for the corpus sacrebleu's corpus chrF (statistics summed over documents, not a mean).

The corpus score of the first three is the mean of the document scores. ``rouge-score`` and ``sacrebleu`` are
the ``generation`` extra (``pip install 'iteralab[generation]'``), imported only when their metric is used;
:func:`require_metric_packages` says in one line which one is missing.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from iteralab.errors import ProtocolError

GENERATION_METRICS = ("exact_match", "token_f1", "rouge_l", "chrf")
#: The package each metric needs beyond iteralab itself (import name, distribution name).
METRIC_PACKAGES = {"rouge_l": ("rouge_score", "rouge-score"), "chrf": ("sacrebleu", "sacrebleu")}
INSTALL_HINT = "pip install 'iteralab[generation]'"
#: Documents converted to Python strings at a time (an Arrow column is never turned into one list at once,
#: except for corpus chrF, which sacrebleu computes from two lists).
BLOCK = 1 << 12

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD v1.1's normalisation: lower case, punctuation removed, articles removed, white space fixed."""
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def _check_metric(metric: str) -> None:
    if metric not in GENERATION_METRICS:
        raise ProtocolError(f"metric {metric!r} is not a generation metric",
                            hint=f"use one of {', '.join(GENERATION_METRICS)}")


def require_metric_packages(metric: str) -> None:
    """Refuse, in one line, a metric whose package is not installed (nothing for exact_match and token_f1)."""
    _check_metric(metric)
    if metric not in METRIC_PACKAGES:
        return
    module, distribution = METRIC_PACKAGES[metric]
    try:
        if module == "rouge_score":
            from rouge_score import rouge_scorer  # noqa: F401
        else:
            import sacrebleu  # noqa: F401
    except ImportError:
        raise ProtocolError(f"metric {metric!r} needs the package {distribution}, which is not installed",
                            hint=INSTALL_HINT) from None


def _blocks(values: Any) -> Iterator[list[str]]:
    """Python strings, :data:`BLOCK` at a time, of an Arrow string array (or chunked array) or a sequence."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if values.null_count:
            raise ValueError("a text to score is null (a text file with format problems is not scored)")
        for start in range(0, len(values), BLOCK):
            yield values.slice(start, BLOCK).to_pylist()
    else:
        for start in range(0, len(values), BLOCK):
            block = list(values[start:start + BLOCK])
            if any(v is None for v in block):
                raise ValueError("a text to score is null (a text file with format problems is not scored)")
            yield block


def _pairs(predictions: Any, references: Any) -> Iterator[tuple[list[str], list[str]]]:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    yield from zip(_blocks(predictions), _blocks(references))


def _scorer(metric: str) -> Any:
    """The function ``(predictions, references) -> scores`` of one block, for ``metric``."""
    if metric == "exact_match":
        return lambda ps, rs: [exact_match(p, r) for p, r in zip(ps, rs)]
    if metric == "token_f1":
        return lambda ps, rs: [token_f1(p, r) for p, r in zip(ps, rs)]
    require_metric_packages(metric)
    if metric == "rouge_l":
        from rouge_score import rouge_scorer

        rouge = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
        return lambda ps, rs: [rouge.score(r, p)["rougeL"].fmeasure for p, r in zip(ps, rs)]
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    return lambda ps, rs: [chrf.sentence_score(p, [r]).score / 100.0 for p, r in zip(ps, rs)]


def document_scores(metric: str, predictions: pa.Array | Sequence[str],
                    references: pa.Array | Sequence[str]) -> np.ndarray:
    """One score per document (float64, 0..1), in the order given."""
    _check_metric(metric)
    score = _scorer(metric)
    out = np.empty(len(predictions), dtype=np.float64)
    start = 0
    for ps, rs in _pairs(predictions, references):
        out[start:start + len(ps)] = score(ps, rs)
        start += len(ps)
    return out


def corpus_score(metric: str, predictions: pa.Array | Sequence[str], references: pa.Array | Sequence[str]) -> float:
    """The corpus's score (0..1): the mean of the document scores, or sacrebleu's corpus chrF / 100 (NaN for no
    document)."""
    _check_metric(metric)
    if metric != "chrf":
        scores = document_scores(metric, predictions, references)
        return float(scores.mean()) if len(scores) else float("nan")
    require_metric_packages(metric)
    from sacrebleu.metrics import CHRF

    hypotheses: list[str] = []
    expected: list[str] = []
    for ps, rs in _pairs(predictions, references):
        hypotheses += ps
        expected += rs
    if not hypotheses:
        return float("nan")
    return float(CHRF().corpus_score(hypotheses, [expected]).score / 100.0)
