"""The generation metrics agree with their references on a fixed set: exact match and token F1 with the SQuAD
v1.1 evaluation script's definitions, written out below as published; ROUGE-L with rouge-score itself and chrF
with sacrebleu itself. Nothing is fetched at test time."""

from __future__ import annotations

import re
import string
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from rouge_score import rouge_scorer
from sacrebleu.metrics import CHRF

from iteralab.campaign.kinds.generation import textmetrics
from iteralab.campaign.kinds.generation.textmetrics import (GENERATION_METRICS, corpus_score, document_scores,
                                                   normalize_answer, require_metric_packages)
from iteralab.errors import ProtocolError


# ------------------------------------------------ SQuAD v1.1 evaluate-v1.1.py, as published (one ground truth)


def squad_normalize_answer(s):
    """Lower text and remove punctuation, articles and extra whitespace."""
    def remove_articles(text):
        return re.sub(r'\b(a|an|the)\b', ' ', text)

    def white_space_fix(text):
        return ' '.join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def squad_f1_score(prediction, ground_truth):
    prediction_tokens = squad_normalize_answer(prediction).split()
    ground_truth_tokens = squad_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def squad_exact_match_score(prediction, ground_truth):
    return (squad_normalize_answer(prediction) == squad_normalize_answer(ground_truth))


# ------------------------------------------------ the fixed set

PAIRS = [
    ("The Eiffel Tower", "eiffel tower"),
    ("Paris, France.", "Paris"),
    ("in 1889", "1889"),
    ("An apple a day keeps the doctor away", "an apple a day keeps doctors away"),
    ("", "something"),
    ("the the the", "a an the"),
    ("Running quickly, the runners ran.", "The runner runs quick"),
    ("Naïve café – déjà vu!", "naive cafe deja vu"),
    ("42", "forty-two"),
    ("The cat sat on the mat. The dog barked.", "A cat was sitting on the mat while the dog barked loudly."),
    ("Summary: prices rose 3% in May; wages did not.", "Prices rose by 3 percent in May, wages stayed flat."),
]
PREDICTIONS = [p for p, _ in PAIRS]
REFERENCES = [r for _, r in PAIRS]


def test_normalize_answer_is_squads():
    for text in PREDICTIONS + REFERENCES + ["  A  b\tthe\nC ", "an, the; a.", "theater anthem"]:
        assert normalize_answer(text) == squad_normalize_answer(text)


@pytest.mark.parametrize("as_arrow", [False, True])
def test_exact_match_and_token_f1_are_squads(as_arrow):
    preds = pa.array(PREDICTIONS) if as_arrow else PREDICTIONS
    refs = pa.array(REFERENCES) if as_arrow else REFERENCES
    em = document_scores("exact_match", preds, refs)
    f1 = document_scores("token_f1", preds, refs)
    assert em.tolist() == [float(squad_exact_match_score(p, r)) for p, r in PAIRS]
    assert f1 == pytest.approx([squad_f1_score(p, r) for p, r in PAIRS], abs=1e-12)
    assert 0 < em.sum() < len(PAIRS) and f1.min() == 0 and len(set(f1.round(6))) > 3  # hits, misses, partials
    assert corpus_score("exact_match", preds, refs) == pytest.approx(
        np.mean([squad_exact_match_score(p, r) for p, r in PAIRS]))
    assert corpus_score("token_f1", preds, refs) == pytest.approx(np.mean([squad_f1_score(p, r) for p, r in PAIRS]))


def test_rouge_l_is_rouge_scores_own_without_stemmer():
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    expected = [scorer.score(r, p)["rougeL"].fmeasure for p, r in PAIRS]
    got = document_scores("rouge_l", pa.array(PREDICTIONS), pa.array(REFERENCES))
    assert got == pytest.approx(expected, abs=1e-12)
    assert corpus_score("rouge_l", PREDICTIONS, REFERENCES) == pytest.approx(np.mean(expected), abs=1e-12)
    stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    i = PREDICTIONS.index("Running quickly, the runners ran.")  # a pair a stemmer would score differently
    assert got[i] != pytest.approx(stemmed.score(REFERENCES[i], PREDICTIONS[i])["rougeL"].fmeasure)


def test_chrf_is_sacrebleus_own_over_100():
    chrf = CHRF()
    assert corpus_score("chrf", pa.array(PREDICTIONS), pa.array(REFERENCES)) == pytest.approx(
        chrf.corpus_score(PREDICTIONS, [REFERENCES]).score / 100, abs=1e-12)
    got = document_scores("chrf", PREDICTIONS, REFERENCES)
    assert got == pytest.approx([chrf.sentence_score(p, [r]).score / 100 for p, r in PAIRS], abs=1e-12)
    # the corpus chrF sums statistics over documents: it is not the mean of the sentence scores
    assert corpus_score("chrf", PREDICTIONS, REFERENCES) != pytest.approx(float(got.mean()), abs=1e-9)


@pytest.mark.parametrize("metric", GENERATION_METRICS)
def test_every_document_score_is_within_zero_and_one(metric):
    scores = document_scores(metric, PREDICTIONS, REFERENCES)
    assert scores.dtype == np.float64 and scores.shape == (len(PAIRS),)
    assert ((scores >= 0) & (scores <= 1)).all()
    # a text scored against itself: 1, except token F1 where nothing is left after normalisation (SQuAD v1.1: 0)
    nothing_left = [metric == "token_f1" and not normalize_answer(r) for r in REFERENCES]
    assert document_scores(metric, REFERENCES, REFERENCES).tolist() == pytest.approx(
        [0.0 if gone else 1.0 for gone in nothing_left])
    assert 0 <= corpus_score(metric, PREDICTIONS, REFERENCES) <= 1


def test_arrow_arrays_are_scored_in_blocks(monkeypatch):
    monkeypatch.setattr(textmetrics, "BLOCK", 3)
    many_p, many_r = PREDICTIONS * 3, REFERENCES * 3
    for metric in GENERATION_METRICS:
        got = document_scores(metric, pa.chunked_array([many_p[:7], many_p[7:]]), pa.array(many_r))
        assert got == pytest.approx(np.tile(document_scores(metric, PREDICTIONS, REFERENCES), 3), abs=1e-12)


def test_mismatched_lengths_and_nulls_are_refused():
    with pytest.raises(ValueError, match="predictions for"):
        document_scores("token_f1", PREDICTIONS[:3], REFERENCES)
    with pytest.raises(ValueError, match="null"):
        document_scores("token_f1", pa.array(["a", None]), pa.array(["a", "b"]))


def test_an_unknown_metric_is_one_line():
    with pytest.raises(ProtocolError) as caught:
        document_scores("bleu", PREDICTIONS, REFERENCES)
    assert "\n" not in str(caught.value) and "exact_match" in caught.value.hint


@pytest.mark.parametrize("metric, module, package", [("rouge_l", "rouge_score", "rouge-score"),
                                                     ("chrf", "sacrebleu", "sacrebleu")])
def test_a_missing_package_is_a_one_line_error(monkeypatch, metric, module, package):
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # ``import module`` now raises ImportError
    with pytest.raises(ProtocolError) as caught:
        require_metric_packages(metric)
    assert "\n" not in str(caught.value) and package in str(caught.value) and metric in str(caught.value)
    assert caught.value.hint == "pip install 'iteralab[generation]'"
    with pytest.raises(ProtocolError):
        document_scores(metric, PREDICTIONS, REFERENCES)
    require_metric_packages("exact_match")  # needs nothing beyond iteralab
    require_metric_packages("token_f1")
