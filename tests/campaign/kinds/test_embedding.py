"""Embedding jobs (``[task] kind = "embedding"``): the protocol's keys, the vector file, and campaigns that lock, run,
verify, tabulate and decide on vectors — a variant whose vectors leave the cosine bound is rejected, never chosen."""

from __future__ import annotations

import numpy as np
import pytest

from embedding_jobs import BATCH_VARIANTS, corpus_rows, embedding_campaign, embedding_protocol
from iteralab.errors import ProtocolError
from iteralab.plan.protocol import parse_protocol


# ------------------------------------------------------------------------------------------------ protocol


def test_a_protocol_without_task_reads_as_classification():
    from protocol_factory import protocol_toml

    protocol = parse_protocol(protocol_toml())
    assert protocol.task.kind == "classification" and protocol.embedding is None


def test_an_embedding_protocol_reads_its_keys():
    protocol = parse_protocol(embedding_protocol('kind = "callable"\ncallable = "fake_embedders:word_embedder"',
                                                 variants=BATCH_VARIANTS, reference="b2",
                                                 extra_embedding="cosine_quantile = 0.01\nmin_cosine_at_quantile = 0.995"))
    assert protocol.task.kind == "embedding"
    assert (protocol.embedding.pooling, protocol.embedding.normalize, protocol.embedding.min_cosine) == ("mean", True, 0.99)
    assert (protocol.embedding.cosine_quantile, protocol.embedding.min_cosine_at_quantile) == (0.01, 0.995)
    assert (protocol.metric.name, protocol.metric.k) == ("knn_accuracy", 3)


BY_LABEL = '[[subgroups]]\nname = "c"\nby = "label"\n'


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("k = 3\n", ""), "metric 'knn_accuracy' needs metric.k"),
    (lambda t: t.replace('name = "knn_accuracy"', 'name = "recall_at_k"'), "metric 'recall_at_k' needs metric.queries"),
    (lambda t: t.replace('name = "knn_accuracy"', 'name = "knn_accuracy"\nqueries = "q.csv"'),
     "metric.queries is read by recall_at_k, mrr, ndcg_at_k and a metric.routine, not by knn_accuracy"),
    (lambda t: t.replace('classes = ["fresh", "rotten"]', "classes = []"),
     "metric 'knn_accuracy' needs the corpus's labels"),
    (lambda t: t.replace('classes = ["fresh", "rotten"]', 'classes = ["fresh"]'), "at least 2 items (or none"),
    (lambda t: t.replace('classes = ["fresh", "rotten"]', "classes = []").replace(
        'name = "knn_accuracy"', 'name = "recall_at_k"\nqueries = "q.csv"') + BY_LABEL,
     "subgroup(s) c by label need the corpus's labels"),
    (lambda t: t.replace('name = "knn_accuracy"\nk = 3', 'routine = "m:f"') + BY_LABEL + "tolerance = 0.1\n",
     "is judged by its class's kNN recall: declare metric.k"),
    (lambda t: t.replace('name = "knn_accuracy"', 'name = "macro_f1"'), "an embedding job's metric is one of knn_accuracy"),
    (lambda t: t.replace("min_cosine = 0.99\n", "min_cosine = 0.99\ncosine_quantile = 0.01\n"),
     "cosine_quantile and embedding.min_cosine_at_quantile go together"),
    (lambda t: t.replace('pooling = "mean"', 'pooling = "max"'), "key 'embedding.pooling'"),
    (lambda t: t.replace('kind = "embedding"', 'kind = "translation"'), "key 'task.kind'"),
])
def test_embedding_protocol_mistakes_are_one_line(edit, expected):
    text = edit(embedding_protocol('kind = "callable"\ncallable = "fake_embedders:word_embedder"',
                                   variants=BATCH_VARIANTS, reference="b2"))
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_classification_protocol_refuses_embedding_keys():
    from protocol_factory import protocol_toml

    with pytest.raises(ProtocolError, match=r"\[embedding\] is for task.kind = 'embedding'"):
        parse_protocol(protocol_toml(extra="[embedding]\nmin_cosine = 0.9\n"), "p.toml")
    with pytest.raises(ProtocolError, match="model.kind 'encoder' gives vectors"):
        parse_protocol(protocol_toml(model='kind = "encoder"\npath = "m"'), "p.toml")


# ------------------------------------------------------------------------------------------------ the file


def test_vector_file_round_trip_and_format_checks(tmp_path):
    import pyarrow as pa

    from iteralab.campaign.kinds.embedding.output import VectorWriter, read_vectors

    good = np.eye(3, 4, dtype=np.float32)
    writer = VectorWriter(tmp_path / "p.parquet")
    writer.write(pa.array(["a", "b"]), good[:2])
    writer.write(pa.array(["c"]), good[2:])
    digest = writer.close()
    assert len(digest) == 64 and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    read = read_vectors(tmp_path / "p.parquet", normalize=True)
    assert read.ids.to_pylist() == ["a", "b", "c"] and read.dim == 4 and read.problem_count == 0
    assert np.array_equal(read.vectors, good)
    assert read_vectors(tmp_path / "p.parquet", normalize=True, dim=8).problems == (
        "vectors have 4 values, the protocol declares 8",)

    bad = good.copy()
    bad[1] *= 2.0
    bad[2, 0] = np.nan
    writer = VectorWriter(tmp_path / "q.parquet")
    writer.write(pa.array(["a", "b", "c"]), bad)
    writer.close()
    read = read_vectors(tmp_path / "q.parquet", normalize=True)
    assert read.problem_count == 2
    assert read.problems == ("row 2: vector norm differs from 1 by more than 0.001 (normalize = true)",
                             "row 3: vector must hold finite numbers")
    assert read_vectors(tmp_path / "q.parquet", normalize=False).problem_count == 1


def test_knn_is_leave_one_out_and_blockwise(monkeypatch):
    from iteralab.campaign.kinds.embedding import knn

    angles = np.radians([0, 10, 20, 90, 80, 33])  # the last row, of class 1, lies among class 0
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32) * 3.0  # not normalised
    labels = np.array([0, 0, 0, 1, 1, 1])
    whole = knn.knn_correct(vectors, labels, 1)
    # the last row's nearest other row is row 2 (class 0): wrong; every other row's neighbour shares its class
    assert whole.tolist() == [True, True, True, True, True, False]
    monkeypatch.setattr(knn, "BLOCK_BYTES", 4 * 6)  # one row per block: the same answer
    assert knn.knn_correct(vectors, labels, 1).tolist() == whole.tolist()


# ------------------------------------------------------------------------------------------------ campaigns


def test_a_variant_outside_min_cosine_is_rejected_and_never_chosen(tmp_path):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.decision.rule import decide
    from iteralab.evidence.bundle import seal
    from iteralab.evidence.verify import audit_campaign

    out = embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:batch4_perturbed"',
                             BATCH_VARIANTS, "b2", subgroups='[[subgroups]]\nname = "class"\nby = "label"\n',
                             reproduction='[reproduction]\ntarget = "bounded"\nbound = 0.001\n')
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    header = (out / "raw_table.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[header.index("max_abs_prob_diff") + 1:header.index("max_abs_prob_diff") + 4] == [
        "min_cosine", "median_cosine", "cosine_at_quantile"]
    ref, fast = rows["b2"], rows["b4"]
    assert ref.ids_match and ref.format_ok and ref.corpus_accepted
    assert ref.min_cosine == pytest.approx(1.0, abs=1e-6) and ref.metric == pytest.approx(1.0)
    assert fast.ids_match and fast.format_ok and fast.status == "ok"
    assert fast.min_cosine is not None and 0.8 < fast.min_cosine < 0.99 and fast.median_cosine < 0.99
    assert fast.tolerance_ok is False and fast.corpus_accepted is False and fast.reproduction_ok is False
    # kNN accuracy's difference has its interval over the documents, and each class group its own (Q2)
    assert fast.delta_units == fast.expected_ids and fast.delta_low <= fast.metric_delta <= fast.delta_high
    assert set(fast.subgroup_deltas) == set(fast.subgroup_metrics) and ref.delta_low == ref.delta_high == 0.0
    assert "cosine with the reference: min cosine" in fast.notes
    assert "subgroup class:fresh cosine (min cosine" in fast.notes
    decision = decide([out])
    machine = decision.machines[0]
    assert machine.chosen is not None and machine.chosen.variant == "b2"
    assert all(c.variant != "b4" for c in machine.inseparable)
    rejected = next(c for c in decision.configs if c.variant == "b4")
    assert any("outside the tolerance" in e and f"min cosine with the reference vectors {fast.min_cosine:.4f}" in e
               for e in rejected.exclusions), rejected.exclusions
    from iteralab.decision.report import plot_cosine, wrong_predictions

    assert plot_cosine(list(decision.configs), decision, False).startswith("data:image/png;base64,")
    pass_id, farthest = wrong_predictions(decision.evidence[0])  # the documents farthest from the reference
    assert pass_id == fast.pass_id and float(farthest[0]["cosine"]) == pytest.approx(fast.min_cosine, abs=1e-4)
    seal(out)
    report = audit_campaign(out)
    assert not report.differences, report.differences
    assert report.accepted == 1


def test_rerun_compares_vectors(tmp_path):
    from iteralab.campaign.verdict.judge import compare_predictions
    from iteralab.plan.protocol import load_protocol

    out = embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:batch4_perturbed"',
                             BATCH_VARIANTS, "b2")
    protocol = load_protocol(out / "inputs" / "protocol.toml")
    files = sorted((out / "predictions").glob("*.parquet"))
    b2, b4 = [f for f in files if "-b2-" in f.name][0], [f for f in files if "-b4-" in f.name][0]
    same = compare_predictions(b2, b2, protocol)
    assert same.identical and same.max_abs_prob_diff == 0.0 and same.common_ids == 40
    other = compare_predictions(b4, b2, protocol)
    assert not other.identical and other.same_ids and other.min_cosine < 0.99
    from iteralab.decision.report import finalize

    finalize([out])
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "minimum cosine with the reference vectors against min_cosine" in html and "min_cosine" in html
    note = (out / "decision.md").read_text(encoding="utf-8")
    assert "min cosine with the reference vectors" in note


def test_an_encoder_folder_embeds_like_its_own_pooling(tmp_path, tiny_encoder_dir):
    """A tiny BERT encoder built from a config: the stored vectors are its mean-pooled, normalised hidden states,
    whatever the batch size and bucketing."""
    import shutil

    import torch
    from transformers import AutoModel, AutoTokenizer

    from iteralab.campaign.folder import read_raw_rows
    from iteralab.campaign.kinds.embedding.output import read_vectors

    shutil.copytree(tiny_encoder_dir, tmp_path / "model")
    variants = """
[[variants]]
name = "b1"
batch_size = 1

[[variants]]
name = "b4-bucketed"
batch_size = 4
bucketing = true
"""
    out = embedding_campaign(tmp_path, 'kind = "encoder"\npath = "model"', variants, "b1", min_cosine=0.999,
                             threshold=0.0)
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    assert all(r.ids_match and r.format_ok and r.corpus_accepted for r in rows.values()), rows
    assert rows["b4-bucketed"].min_cosine > 0.999
    texts = [t for _, t, _ in corpus_rows()[:3]]
    tok = AutoTokenizer.from_pretrained(str(tiny_encoder_dir))
    model = AutoModel.from_pretrained(str(tiny_encoder_dir)).eval()
    with torch.inference_mode():
        enc = tok(texts[:1], return_tensors="pt")
        hidden = model(**enc).last_hidden_state[0].mean(dim=0)
    stored = read_vectors(out / rows["b1"].prediction_file, normalize=True)
    assert stored.dim == 32
    expected = (hidden / hidden.norm()).numpy()
    assert np.allclose(stored.vectors[0], expected, atol=1e-5)
