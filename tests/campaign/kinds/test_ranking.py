"""Ranking metrics (``campaign.kinds.ranking``): recall@k by both definitions, MRR@k and nDCG@k on hand-computed
cases, nDCG against scikit-learn's ``ndcg_score`` where no scores tie, graded relevance from the queries file, and
an embedding campaign judged by ``ndcg_at_k`` / a routine handed the queries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iteralab.campaign.kinds.ranking import RANKING_METRICS, Ranking, Relevance, top_k
from iteralab.campaign.kinds.ranking import rank_block as rank_relevance
from iteralab.errors import CorpusError
from iteralab.plan.metric import EMBEDDING_METRICS, QUERY_METRICS
from iteralab.plan.queries import load_queries
from recall_jobs import QUERIES, lock_and_run, recall_protocol, write_queries, write_unlabelled_corpus

L2, L3 = 1.0, math.log2(3)  # the discounts' logarithms at ranks 1..3: log2(2), log2(3), log2(4) = 2


def rank_block(scores: np.ndarray, gains: np.ndarray, k: int):
    """The ranking of a block whose relevance is given as a dense gain matrix (0: not relevant)."""
    rows = [np.flatnonzero(g) for g in gains]
    return rank_relevance(scores, Relevance.of(rows, [g[r] for g, r in zip(gains, rows)]), k)


def test_the_protocol_and_the_ranking_module_name_the_same_metrics():
    assert RANKING_METRICS == QUERY_METRICS and set(QUERY_METRICS) <= set(EMBEDDING_METRICS)


def test_top_k_orders_by_score_and_breaks_ties_by_column():
    scores = np.array([[0.9, 0.5, 0.9, 0.1, 0.3], [0.5, 0.5, 0.5, 0.5, 0.7]])
    assert top_k(scores, 3).tolist() == [[0, 2, 1], [4, 0, 1]]
    assert top_k(scores, 9).tolist() == [[0, 2, 1, 4, 3], [4, 0, 1, 2, 3]]
    assert top_k(np.array([[np.nan, 0.1, -np.inf]]), 2).tolist() == [[1, 0]]


def test_top_k_equals_a_stable_full_sort_on_scores_full_of_ties():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, size=(50, 30)).astype(np.float32)  # ties everywhere, across the cut-off
    scores[rng.random(scores.shape) < 0.1] = -np.inf
    for k in (1, 2, 7, 30):
        assert top_k(scores, k).tolist() == np.argsort(-scores, axis=1, kind="stable")[:, :k].tolist()


def test_every_metric_of_a_hand_computed_graded_case():
    # ranked d0 (0.9), d2 (0.9, after d0 on the tie), d1, d4, d3; grades d1 = 2, d2 = 1, d4 = 3
    scores = np.array([[0.9, 0.5, 0.9, 0.1, 0.3],
                       [0.2, 0.8, -np.inf, 0.4, 0.1]])  # query 2: its only relevant document has no vector
    gains = np.array([[0, 2, 1, 0, 3], [0, 0, 5, 0, 0]], dtype=np.float64)
    got = rank_block(scores, gains, 3)
    # top 3 of q1: d0, d2, d1 -> hits 2 of 3 relevant
    assert got.recall.tolist() == pytest.approx([2 / 3, 0.0])
    assert got.recall_of_relevant.tolist() == pytest.approx([2 / 3, 0.0])
    assert got.reciprocal_rank.tolist() == pytest.approx([1 / 2, 0.0])
    dcg = 0 / L2 + 1 / L3 + 2 / 2
    ideal = 3 / L2 + 2 / L3 + 1 / 2
    assert got.ndcg.tolist() == pytest.approx([dcg / ideal, 0.0], abs=1e-12)
    at2 = rank_block(scores, gains, 2)  # top 2: d0, d2 -> 1 hit; min(k, relevant) = 2, relevant = 3
    assert at2.recall[0] == pytest.approx(1 / 2) and at2.recall_of_relevant[0] == pytest.approx(1 / 3)
    assert at2.ndcg[0] == pytest.approx((1 / L3) / (3 / L2 + 2 / L3), abs=1e-12)
    both = Ranking.of(3, [got])
    assert (both.queries, both.mrr) == (2, pytest.approx(0.25))
    note = both.note()
    assert "recall@3 = hits / min(k, relevant) 0.3333, hits / relevant 0.3333" in note and "nDCG@3 0.1712" in note


def test_ndcg_agrees_with_scikit_learn_where_no_scores_tie():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(7)
    scores = rng.normal(size=(6, 40))
    gains = np.where(rng.random((6, 40)) < 0.2, rng.integers(1, 4, size=(6, 40)), 0).astype(np.float64)
    gains[:, 0] = 1.0  # every query has a relevant document
    for k in (1, 5, 40):
        ours = rank_block(scores, gains, k).ndcg
        theirs = [ndcg_score(gains[i:i + 1], scores[i:i + 1], k=k) for i in range(len(scores))]
        assert ours.tolist() == pytest.approx(theirs, abs=1e-12)


def test_a_queries_file_with_grades_and_its_refusals(tmp_path):
    path = write_queries(tmp_path / "q.csv", [("q1", "a", "d1;d2;d1", "3;1;2"), ("q2", "b", "d3", "0.5")],
                         header=("query_id", "text", "relevant_ids", "grades"))
    queries = load_queries(path)
    assert queries.relevant == (("d1", "d2"), ("d3",)) and queries.grades == ((3.0, 1.0), (0.5,))
    assert load_queries(write_queries(tmp_path / "plain.csv")).grades is None
    for cell, words in (("3;1", "field grades: 2 grades for 3 relevant ids"), ("3;0;1", "'0' is not a number > 0"),
                        ("3;x;1", "'x' is not a number > 0")):
        bad = write_queries(tmp_path / "bad.csv", [("q1", "a", "d1;d2;d1", cell)],
                            header=("query_id", "text", "relevant_ids", "grades"))
        with pytest.raises(CorpusError, match=words):
            load_queries(bad)


def _independent_ndcg(folder, pass_file: str, k: int, grades: dict[str, dict[str, float]]) -> float:
    """nDCG@k from the stored files by a full stable sort and the textbook formula (no shared code)."""
    from iteralab.campaign.kinds.embedding.output import read_vectors

    docs = read_vectors(folder / pass_file, normalize=True)
    queries = read_vectors(folder / pass_file.replace(".parquet", ".queries.parquet"), normalize=True)
    doc_ids = docs.ids.to_pylist()
    values = []
    for qid, vector in zip(queries.ids.to_pylist(), queries.vectors[:].astype(np.float64)):
        order = np.argsort(-(docs.vectors[:].astype(np.float64) @ vector), kind="stable")[:k]
        dcg = sum(grades[qid].get(doc_ids[j], 0.0) / math.log2(r + 2) for r, j in enumerate(order))
        best = sorted(grades[qid].values(), reverse=True)[:k]
        values.append(dcg / sum(g / math.log2(r + 2) for r, g in enumerate(best)))
    return float(np.mean(values))


def test_an_embedding_campaign_judged_by_ndcg_over_graded_queries_names_every_ranking_value(tmp_path):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.evidence.verify import audit_campaign

    write_unlabelled_corpus(tmp_path)
    graded = [(q, t, r, ";".join(str(i + 1) for i in range(len(r.split(";"))))) for q, t, r in QUERIES]
    write_queries(tmp_path / "queries.csv", graded, header=("query_id", "text", "relevant_ids", "grades"))
    grades = {q: {d: float(i + 1) for i, d in enumerate(r.split(";"))} for q, _, r in QUERIES}
    out = lock_and_run(tmp_path, recall_protocol().replace('name = "recall_at_k"', 'name = "ndcg_at_k"'))
    for row in read_raw_rows(out / "raw_table.csv"):
        assert row.status == "ok" and row.metric_name == "ndcg_at_k", row.notes
        assert row.metric == pytest.approx(_independent_ndcg(out, row.prediction_file, 3, grades), abs=1e-6)
        assert f"nDCG@3 {row.metric:.4f}" in row.notes and "recall@3 = hits / min(k, relevant)" in row.notes
        assert ", hits / relevant " in row.notes and "MRR@3 " in row.notes
    report = audit_campaign(out, require_seal=False)
    assert not report.differences, report.differences


def test_a_routine_of_an_embedding_job_is_handed_the_queries_and_agrees_with_the_built_in_mrr(tmp_path):
    from iteralab.campaign.folder import read_raw_rows

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv")
    text = recall_protocol().replace('name = "recall_at_k"', 'routine = "embedding_routines:mrr_at_3"')
    out = lock_and_run(tmp_path, text)
    rows = read_raw_rows(out / "raw_table.csv")
    assert rows
    for row in rows:
        assert row.status == "ok" and row.metric is not None, row.notes
        assert f"MRR@3 {row.metric:.4f}" in row.notes, row.notes  # the built-in's value beside the routine's
