"""An embedding job judged by its own metric: the user's routine on the pass's vectors, and retrieval recall@k over
a queries file that every pass embeds with its own variant — locked, carried, run, verified. Fake embedders only
(``tests/support/fake_embedders.py``), small corpora written here; no figure is hard-coded: each expected value is
recomputed from the stored files by an independent NumPy implementation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from embedding_jobs import BATCH_VARIANTS, corpus_rows, embedding_protocol

import embedding_routines
from fake_embedders import word_embedder
from iteralab.campaign.kinds.embedding.knn import recall_at_k
from iteralab.campaign.kinds.embedding.output import VectorWriter, read_vectors
from iteralab.campaign.kinds.expected import Expected
from iteralab.campaign.kinds.routine import Routine
from iteralab.campaign.verdict.evaluate import evaluate_set as evaluate_vectors
from iteralab.errors import CorpusError, ProtocolError
from iteralab.lock.modules import load_function
from iteralab.plan.protocol import parse_protocol
from recall_jobs import EMBEDDER, QUERIES, lock_and_run, recall_protocol, write_queries, write_unlabelled_corpus

ROUTINES = Path(embedding_routines.__file__)


# ------------------------------------------------------------------------------------------------ recall@k


def test_recall_at_k_of_a_hand_computed_case():
    docs = np.array([[1, 0], [0.8, 0.6], [0, 1], [-1, 0]], dtype=np.float32)
    queries = np.array([[1, 0.1], [0, 1]], dtype=np.float32)
    # q0: nearest d0 (0.995), d1 (0.856); relevant d0, d2 -> 1 of min(2, 2) = 0.5
    # q1: nearest d2 (1.0), d1 (0.6); relevant d1 -> 1 of min(2, 1) = 1.0
    relevant = [np.array([0, 2]), np.array([1])]
    assert recall_at_k(docs, queries, relevant, 2) == pytest.approx((0.5 + 1.0) / 2, abs=1e-12)
    # k = 1: q0 finds d0 (1 of 1), q1 finds d2, not d1 (0 of 1)
    assert recall_at_k(docs, queries, relevant, 1) == pytest.approx(0.5, abs=1e-12)


def test_recall_breaks_a_tie_at_the_cut_off_by_corpus_order_and_never_retrieves_a_missing_vector():
    docs = np.array([[1, 0], [0, 1], [-1, 0], [1, 0]], dtype=np.float32)  # d0 and d3 tie for the query (1, 0)
    query = np.array([[1, 0]], dtype=np.float32)
    assert recall_at_k(docs, query, [np.array([0])], 1) == 1.0
    assert recall_at_k(docs, query, [np.array([3])], 1) == 0.0
    docs[0] = np.nan  # d0 has no vector: d3 is the nearest
    assert recall_at_k(docs, query, [np.array([3])], 1) == 1.0
    assert recall_at_k(docs, query, [np.array([0])], 3) == 0.0


# ------------------------------------------------------------------------------------------------ routine


def _vector_set(tmp_path: Path, ids: list[str], vectors: np.ndarray):
    writer = VectorWriter(tmp_path / "pass.parquet")
    writer.write(pa.array(ids), vectors)
    writer.close()
    return read_vectors(tmp_path / "pass.parquet", normalize=True)


def test_a_routine_on_vectors_agrees_with_knn_accuracy_overall_and_is_called_per_stratum_group(tmp_path):
    rows = corpus_rows()
    ids, texts, labels = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    strata = {i: ("long" if len(t) > 12 else "short") for i, t in zip(ids, texts)}
    expected = Expected.of(ids, dict(zip(ids, labels)), strata, ["fresh", "rotten"])
    vectors = _vector_set(tmp_path, ids, word_embedder(texts))
    subgroups = ('[[subgroups]]\nname = "length"\nby = "stratum"\ntolerance = 0.5\n'
                 '[[subgroups]]\nname = "class"\nby = "label"\ntolerance = 0.5\n')
    knn = parse_protocol(embedding_protocol(EMBEDDER, variants=BATCH_VARIANTS, reference="b2", subgroups=subgroups)
                         .replace('stratum_column = ""', 'stratum_column = "stratum"'))
    mine = parse_protocol(embedding_protocol(EMBEDDER, variants=BATCH_VARIANTS, reference="b2", subgroups=subgroups,
                                             metric='routine = "embedding_routines:knn_accuracy"\nk = 3',
                                             threshold=0.5)
                          .replace('stratum_column = ""', 'stratum_column = "stratum"'))
    routine = Routine("embedding_routines:knn_accuracy",
                      load_function(ROUTINES, "embedding_routines:knn_accuracy"))
    built_in = evaluate_vectors(vectors, knn, expected).to_json()
    by_routine = evaluate_vectors(vectors, mine, expected, routine).to_json()
    assert by_routine["routine_error"] is None and by_routine["metric_name"] == "embedding_routines:knn_accuracy"
    assert by_routine["metric"] == pytest.approx(built_in["metric"], abs=1e-9)
    assert by_routine["threshold_ok"] == built_in["threshold_ok"]
    # each stratum group: the routine is handed that group's documents only (their vectors, ids and labels)
    for group in ("long", "short"):
        member = [n for n, i in enumerate(ids) if strata[i] == group]
        alone = embedding_routines.knn_accuracy_of(vectors.vectors[member], np.asarray(labels)[member]).mean()
        assert by_routine["subgroups"][f"length:{group}"] == pytest.approx(alone, abs=1e-9)
    # a class group keeps its class's kNN recall (the built-in's), whatever the routine
    for group in ("class:fresh", "class:rotten"):
        assert by_routine["subgroups"][group] == built_in["subgroups"][group] is not None


def test_a_lower_is_better_routine_turns_the_threshold_into_a_maximum(tmp_path):
    rows = corpus_rows()
    ids, texts = [r[0] for r in rows], [r[1] for r in rows]
    expected = Expected.of(ids, {i: lab for i, _, lab in rows}, {}, ["fresh", "rotten"])
    vectors = _vector_set(tmp_path, ids, word_embedder(texts))
    routine = Routine("embedding_routines:spread", load_function(ROUTINES, "embedding_routines:spread"))
    value = embedding_routines.spread(ids=ids, outputs=vectors.vectors, references=None)
    for threshold, ok in ((value + 0.5, True), (value - 0.5, False)):
        protocol = parse_protocol(embedding_protocol(
            EMBEDDER, variants=BATCH_VARIANTS, reference="b2", threshold=threshold,
            metric='routine = "embedding_routines:spread"\nhigher_is_better = false'))
        verdict = evaluate_vectors(vectors, protocol, expected, routine).to_json()
        assert verdict["metric"] == pytest.approx(value, abs=1e-9) and verdict["threshold_ok"] is ok


# ------------------------------------------------------------------------------------------------ campaigns


def _independent_recall(folder: Path, pass_file: str, k: int) -> float:
    """recall@k from the stored files, by a full sort (no shared code with the verdict)."""
    docs = read_vectors(folder / pass_file, normalize=True)
    qfile = folder / pass_file.replace(".parquet", ".queries.parquet")
    queries = read_vectors(qfile, normalize=True)
    doc_ids = docs.ids.to_pylist()
    relevant = {q: r.split(";") for q, _, r in QUERIES}
    scores = []
    for qid, vector in zip(queries.ids.to_pylist(), queries.vectors[:].astype(np.float64)):
        sims = docs.vectors[:].astype(np.float64) @ vector
        top = {doc_ids[j] for j in np.argsort(-sims, kind="stable")[:k]}
        scores.append(len(top & set(relevant[qid])) / min(k, len(relevant[qid])))
    return float(np.mean(scores))


def test_recall_at_k_on_a_corpus_without_labels_locks_runs_and_verifies(tmp_path):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.evidence.verify import audit_campaign

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv")
    out = lock_and_run(tmp_path, recall_protocol())
    campaign = json.loads((out / "campaign.json").read_text(encoding="utf-8"))
    assert campaign["queries"]["file"] == "inputs/queries.csv" and campaign["queries"]["queries"] == len(QUERIES)
    assert (out / "inputs" / "queries.csv").read_bytes() == (tmp_path / "queries.csv").read_bytes()
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    for name, row in rows.items():
        assert row.status == "ok" and row.ids_match and row.format_ok, (name, row.notes)
        stored = read_vectors(out / row.prediction_file.replace(".parquet", ".queries.parquet"), normalize=True)
        assert stored.ids.to_pylist() == [q for q, _, _ in QUERIES] and stored.problem_count == 0
        assert row.metric == pytest.approx(_independent_recall(out, row.prediction_file, 3), abs=1e-9)
        assert "embedded after the measured pass, outside pass_s" in row.notes
    assert rows["b2"].corpus_accepted, rows["b2"].notes
    assert rows["b4"].corpus_accepted is False and "cosine with the reference" in rows["b4"].notes
    report = audit_campaign(out, require_seal=False)
    assert not report.differences, report.differences


def test_verify_finds_an_edited_query_vector_file(tmp_path):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.evidence.verify import audit_campaign

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv")
    out = lock_and_run(tmp_path, recall_protocol())
    row = next(r for r in read_raw_rows(out / "raw_table.csv") if r.variant == "b2")
    qfile = out / row.prediction_file.replace(".parquet", ".queries.parquet")
    stored = read_vectors(qfile, normalize=True)
    writer = VectorWriter(qfile)
    writer.write(stored.ids, stored.vectors[::-1].copy())  # the queries' vectors swapped around
    writer.close()
    report = audit_campaign(out, require_seal=False)
    assert any(d.startswith(f"{row.prediction_file.replace('.parquet', '.queries.parquet')}: edited")
               for d in report.differences), report.differences


def test_a_routine_that_raises_fails_only_that_pass_in_one_line(tmp_path):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.evidence.verify import audit_campaign
    from embedding_jobs import write_corpus

    write_corpus(tmp_path)
    out = lock_and_run(tmp_path, embedding_protocol(
        EMBEDDER, variants=BATCH_VARIANTS, reference="b2", min_cosine=0.5, threshold=0.5,
        metric='routine = "embedding_routines:raises_on_batch4"\nk = 3',
        subgroups='[[subgroups]]\nname = "class"\nby = "label"\ntolerance = 0.5\n'))
    assert (out / "inputs" / "routine" / "embedding_routines.py").is_file()
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    assert rows["b2"].corpus_accepted and rows["b2"].metric == 1.0, rows["b2"].notes
    failed = rows["b4"]
    assert failed.status == "ok" and failed.corpus_accepted is False and failed.metric is None
    line = "metric routine embedding_routines:raises_on_batch4 raised ValueError: vectors moved (min cosine"
    assert line in failed.notes and "second line never shown" not in failed.notes
    report = audit_campaign(out, require_seal=False)
    assert not report.differences, report.differences


# ------------------------------------------------------------------------------------------------ lock refusals


@pytest.mark.parametrize("rows, header, words", [
    (QUERIES[:1] + [("q1", "again", "d01")], None, ["line 3, field query_id: duplicate query id 'q1'"]),
    (QUERIES[:2] + [("q9", "nothing", " ; ")], None, ["line 4, field relevant_ids: no relevant id"]),
    (QUERIES[:1] + [("q9", "unknown", "d01;x99")], None,
     ["line 3, field relevant_ids: query 'q9' names id 'x99'", "not an id of the corpus"]),
    (QUERIES[:1] + [("q9", " ", "d01")], None, ["line 3, field text: empty text"]),
    (QUERIES, ("query_id", "query", "relevant_ids"), ["no column 'text'"]),
    ([], None, ["no query (a header only)"]),
])
def test_lock_refuses_a_bad_queries_file_in_one_line(tmp_path, rows, header, words):
    from iteralab.lock.inputs import lock

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv", rows, header or ("query_id", "text", "relevant_ids"))
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(recall_protocol(), encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        lock(protocol)
    message = str(err.value)
    assert "\n" not in message and "queries.csv" in message and message.startswith("metric.queries: ")
    assert all(w in message for w in words), message
    assert not (tmp_path / "protocol.toml.lock.json").exists()


def test_lock_refuses_a_missing_queries_file_and_run_refuses_an_edited_one(tmp_path):
    from iteralab.lock.inputs import check_inputs, lock

    write_unlabelled_corpus(tmp_path)
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(recall_protocol(), encoding="utf-8")
    with pytest.raises(ProtocolError, match=r"metric.queries: file .*queries.csv does not exist"):
        lock(protocol)
    write_queries(tmp_path / "queries.csv")
    lock(protocol)
    write_queries(tmp_path / "queries.csv", QUERIES[:-1])
    with pytest.raises(ProtocolError) as err:
        check_inputs(protocol)
    assert "queries file: queries.csv changed" in str(err.value) and f"{len(QUERIES)} → {len(QUERIES) - 1}" in \
        str(err.value)


def test_a_recall_campaign_decides_reports_seals_and_reruns_from_its_carried_queries(tmp_path):
    from iteralab.decision.report import finalize
    from iteralab.decision.rule import decide
    from iteralab.evidence.bundle import seal
    from iteralab.evidence.rerun import rerun
    from iteralab.evidence.verify import audit_campaign

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv")
    out = lock_and_run(tmp_path, recall_protocol())
    machine = decide([out]).machines[0]
    assert machine.chosen is not None and machine.chosen.variant == "b2"
    finalize([out])
    assert "recall_at_k" in (out / "decision.md").read_text(encoding="utf-8")
    seal(out)
    assert not audit_campaign(out).differences
    (tmp_path / "queries.csv").unlink()  # the rerun reads the earlier folder's copy, not the user's file
    again = tmp_path / "again"
    comparison = rerun(out, again)
    assert (again / "inputs" / "queries.csv").read_bytes() == (out / "inputs" / "queries.csv").read_bytes()
    assert json.loads((again / "campaign.json").read_text(encoding="utf-8"))["queries"] == \
        json.loads((out / "campaign.json").read_text(encoding="utf-8"))["queries"]
    comparison = comparison["comparison"]
    assert comparison["same_verdicts"], comparison["variants"]
    assert comparison["variants"]["b2"]["new_accepted"] == comparison["variants"]["b2"]["old_accepted"] == 1
    assert comparison["variants"]["b2"]["outputs"] == "identical"


def test_a_routine_returning_no_finite_number_fails_that_verdict_in_one_line(tmp_path):
    rows = corpus_rows()
    ids, texts = [r[0] for r in rows], [r[1] for r in rows]
    expected = Expected.of(ids, {i: lab for i, _, lab in rows}, {}, ["fresh", "rotten"])
    vectors = _vector_set(tmp_path, ids, word_embedder(texts))
    protocol = parse_protocol(embedding_protocol(EMBEDDER, variants=BATCH_VARIANTS, reference="b2",
                                                 metric='routine = "r:nan"'))
    verdict = evaluate_vectors(vectors, protocol, expected, Routine("r:nan", lambda **_: float("nan"))).to_json()
    assert verdict["metric"] is None and verdict["threshold_ok"] is False
    assert verdict["routine_error"] == "metric routine r:nan returned nan, not a finite number"


def test_the_lock_command_says_a_bad_queries_file_in_one_line_without_a_traceback(tmp_path, capsys):
    from iteralab.cli import main

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv", QUERIES[:1] + [("q9", "unknown", "d01;x99")])
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(recall_protocol(), encoding="utf-8")
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"Error: metric.queries: {tmp_path / 'queries.csv'} line 3, field relevant_ids: query 'q9' "
                      "names id 'x99', not an id of the corpus corpus.csv")
    assert err[1].startswith("Hint: ") and not any("Traceback" in e for e in err)


def test_verify_and_rerun_call_the_carried_routine_on_vectors(tmp_path):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.evidence.rerun import rerun
    from iteralab.evidence.verify import audit_campaign
    from embedding_jobs import write_corpus

    write_corpus(tmp_path)
    out = lock_and_run(tmp_path, embedding_protocol(
        EMBEDDER, variants=BATCH_VARIANTS, reference="b2", min_cosine=0.5, threshold=20.0,  # spread is at most 20
        metric='routine = "embedding_routines:spread"\nhigher_is_better = false'))
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    exact = [t for _, t, _ in corpus_rows()]
    value = embedding_routines.spread(ids=None, outputs=word_embedder(exact), references=None)
    assert rows["b2"].metric == pytest.approx(value, abs=1e-6) and rows["b2"].corpus_accepted
    assert not audit_campaign(out, require_seal=False).differences
    comparison = rerun(out, tmp_path / "again")["comparison"]
    assert comparison["same_verdicts"] and comparison["variants"]["b2"]["outputs"] == "identical"
