"""Scoring jobs (``[task] kind = "scoring"``): the protocol's keys, the score file, the metrics against independent
computations (sklearn's ndcg_score per group, scipy's kendalltau), a tiny cross-encoder, and a campaign whose
hand-edited score fails verify."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from iteralab.errors import ProtocolError
from iteralab.plan.protocol import parse_protocol
from scoring_jobs import (BATCH_VARIANTS, CALLABLE, corpus_rows, scoring_campaign, scoring_protocol,
                          tiny_cross_encoder_dir)


def test_a_scoring_protocol_reads_its_keys():
    protocol = parse_protocol(scoring_protocol(CALLABLE, variants=BATCH_VARIANTS, reference="b2"))
    assert protocol.task.kind == "scoring"
    assert protocol.scoring.columns == ["text_pair", "group", "relevance"]
    assert protocol.scoring.min_kendall_tau == 0.9


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace('relevance_column = "relevance"\n', ""), "declare scoring.relevance_column"),
    (lambda t: t.replace("k = 3\n", ""), "metric 'ndcg_at_k' needs metric.k"),
    (lambda t: t.replace('name = "ndcg_at_k"', 'name = "knn_accuracy"'), "a scoring job's metric is one of mrr"),
    (lambda t: t.replace("[scoring]", "[scorin]"), "unknown key 'scorin' (did you mean 'scoring'?)"),
    (lambda t: t.replace('kind = "callable"', 'kind = "encoder"\npath = "m"'), "a scoring job's model.kind"),
])
def test_scoring_protocol_mistakes_are_one_line(edit, expected):
    text = edit(scoring_protocol(CALLABLE, variants=BATCH_VARIANTS, reference="b2"))
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_pairs_pack_and_unpack_whatever_the_texts_hold():
    from iteralab.campaign.kinds.scoring.sink import pack_pairs, unpack_pairs

    firsts = ["a\x1fb", "", "élan 12", "x"]
    seconds = ["c", "d\x1f", "", "3\x1f4"]
    assert unpack_pairs(pack_pairs(pa.array(firsts), pa.array(seconds)).to_pylist()) == (firsts, seconds)


def test_group_ranking_agrees_with_sklearn_ndcg_per_group():
    from sklearn.metrics import ndcg_score

    from iteralab.campaign.kinds.scoring.verdict import group_ranking

    rng = np.random.default_rng(0)
    sizes = [5, 8, 3, 6]
    groups = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(groups)  # groups interleaved in the corpus
    scores = rng.permutation(len(groups)).astype(np.float64)  # tie-free
    relevance = rng.integers(0, 3, len(groups)).astype(np.float64)
    relevance[groups == 2] = 0  # a group without a relevant pair counts 0 in both
    for k in (1, 3, 10):
        ranking = group_ranking(scores, groups, relevance, k)
        expected = [ndcg_score([relevance[groups == g]], [scores[groups == g]], k=k) if relevance[groups == g].any()
                    else 0.0 for g in range(len(sizes))]
        assert ranking.queries == len(sizes)
        assert ranking.ndcg_at_k == pytest.approx(np.mean(expected), abs=1e-12)
        ranks = []
        for g in range(len(sizes)):
            order = np.argsort(-scores[groups == g])[:k]
            hit = np.flatnonzero(relevance[groups == g][order] > 0)
            ranks.append(1.0 / (hit[0] + 1) if len(hit) else 0.0)
        assert ranking.mrr == pytest.approx(np.mean(ranks), abs=1e-12)


def test_kendall_tau_within_groups_agrees_with_scipy():
    from scipy.stats import kendalltau

    from iteralab.campaign.kinds.scoring.agreement import score_agreement

    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(4), 7)
    reference = rng.normal(size=len(groups)).astype(np.float32)
    mine = (reference + rng.normal(scale=0.5, size=len(groups))).astype(np.float32)
    mine[groups == 3] = np.round(mine[groups == 3])  # ties: scipy's tau-b
    got = score_agreement(mine, reference, groups, 0.9)
    taus = [kendalltau(mine[groups == g], reference[groups == g])[0] for g in range(4)]
    assert got.overall.min_tau == pytest.approx(min(taus)) and got.overall.median_tau == pytest.approx(np.median(taus))
    diff = np.abs(mine.astype(np.float64) - reference)
    assert got.max_abs_diff == pytest.approx(diff.max()) and got.diff_at_quantile == pytest.approx(np.quantile(diff, 0.9))


def test_a_tiny_cross_encoder_scores_pairs_in_any_batching(tmp_path):
    from iteralab.campaign.kinds.scoring.sink import PairWorkload, pack_pairs
    from iteralab.models.factory import WorkloadSpec, load_workload

    folder = tiny_cross_encoder_dir(tmp_path / "ce")
    scorer = PairWorkload(load_workload(WorkloadSpec("hf_cross_encoder", path=folder, task="scoring",
                                                     activation="sigmoid")))
    packed = pack_pairs(pa.array(["good fun", "dull film", "the story"]),
                        pa.array(["a good fun film", "boring", "a story of a director"])).to_pylist()
    whole = scorer.infer(scorer.tokenize(packed))
    one_by_one = np.concatenate([scorer.infer(scorer.tokenize([p])) for p in packed])
    assert whole.shape == (3,) and whole.dtype == np.float32 and ((whole > 0) & (whole < 1)).all()
    np.testing.assert_allclose(whole, one_by_one, atol=1e-5)
    assert scorer.token_lengths(packed[:1]) == [len(scorer.scorer.tokenizer("good fun", "a good fun film")["input_ids"])]


def test_a_cross_encoder_of_several_outputs_needs_its_positive_class(tmp_path):
    from iteralab.errors import WorkloadError
    from iteralab.models.factory import WorkloadSpec, load_workload

    folder = tiny_cross_encoder_dir(tmp_path / "ce3", outputs=3)
    with pytest.raises(WorkloadError, match="positive_class"):
        load_workload(WorkloadSpec("hf_cross_encoder", path=folder, task="scoring"))
    workload = load_workload(WorkloadSpec("hf_cross_encoder", path=folder, task="scoring", positive_class="c2"))
    assert (workload.activation, workload.positive) == ("softmax", 2)


def test_a_scoring_campaign_is_verified_and_a_hand_edited_score_fails_verify(tmp_path):
    from iteralab.evidence.verify import audit_campaign

    out = scoring_campaign(tmp_path, CALLABLE)
    assert audit_campaign(out, require_seal=False).ok
    path = sorted((out / "predictions").glob("*b4*.parquet"))[0]
    table = pq.read_table(path)
    scores = table.column("score").to_numpy().copy()
    scores[0] = -5.0  # the group's best pair moved to its bottom: its ranking and its order change
    pq.write_table(table.set_column(1, "score", pa.array(scores, pa.float32())), path)
    report = audit_campaign(out, require_seal=False)
    recomputed = " ".join(d for d in report.differences if path.name in d)
    # the verdict recomputed from the stored scores is not the one recorded: the hash, and the scores' own cells
    for column in ("min_kendall_tau", "max_abs_score_diff", "corpus_accepted"):
        assert f"column '{column}' stored" in recomputed, report.differences


def test_strata_count_both_texts_and_a_gating_stratum_is_judged_by_its_groups_taus(tmp_path):
    import csv

    from campaign_factory import write_tokenizer
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.models.pairs import count_pair_tokens
    from iteralab.models.tokens import load_tokenizer

    tokenizer = write_tokenizer(tmp_path / "tokenizer")
    rows = corpus_rows()
    counts = count_pair_tokens(load_tokenizer(tokenizer), [r[1] for r in rows], [r[2] for r in rows])
    cut = sorted(counts)[len(counts) // 2]
    with open(tmp_path / "strata.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "text_pair", "group", "relevance", "stratum"])
        writer.writerows([(*r, "short" if n <= cut else "long") for r, n in zip(rows, counts)])
    strata = f"strata = {{ short = [0, {cut}], long = [{cut + 1}] }}\n"
    subgroups = '[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n'
    text = scoring_protocol(f'{CALLABLE}\npath = "tokenizer"', variants=BATCH_VARIANTS, reference="b2",
                            subgroups=subgroups)
    text = text.replace('path = "pairs.csv"\nstratum_column = ""', f'path = "strata.csv"\n{strata}')
    (tmp_path / "protocol.toml").write_text(text, encoding="utf-8")
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    lock(tmp_path / "protocol.toml")  # every row's stratum agrees with its pair's token count
    out = tmp_path / "camp"
    run_campaign(tmp_path / "protocol.toml", out)
    table = CampaignFolder.open(out).raw_rows()
    assert all(r.status == "ok" and r.corpus_accepted and r.subgroups_ok for r in table), [r.notes for r in table]
    assert all("subgroup Kendall's tau" in r.notes and "length:short" in r.notes for r in table)
    # a stratum cell that counts one text only is refused at lock, naming the row
    lines = (tmp_path / "strata.csv").read_text(encoding="utf-8").splitlines()
    first = counts.index(min(counts))
    lines[first + 1] = lines[first + 1].rsplit(",", 1)[0] + ",long"
    (tmp_path / "strata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"stratum 'long' .* tokenizer counts"):
        lock(tmp_path / "protocol.toml")


def test_a_bucketed_variant_orders_pairs_by_both_texts_and_stores_them_in_corpus_order(tmp_path):
    from campaign_factory import write_tokenizer
    from iteralab.campaign.folder import CampaignFolder

    write_tokenizer(tmp_path / "tokenizer")
    variants = BATCH_VARIANTS.replace("batch_size = 4\n", "batch_size = 4\nbucketing = true\n").replace(
        'name = "batch"\nfactor = "batch_size"', 'name = "batch"\nfactor = "bucketing"').replace(
        "batch_size = 2\n", "batch_size = 4\n")
    out = scoring_campaign(tmp_path, f'{CALLABLE}\npath = "tokenizer"', variants=variants)
    campaign = CampaignFolder.open(out)
    rows = {r.variant: r for r in campaign.raw_rows()}
    assert rows["b4"].bucketing and all(r.corpus_accepted for r in rows.values()), [r.notes for r in rows.values()]
    files = {name: pq.read_table(campaign.prediction_path(r.prediction_file)) for name, r in rows.items()}
    assert files["b4"].column("id").to_pylist() == [r[0] for r in corpus_rows()]  # rewritten in corpus order
    assert files["b4"].column("score").equals(files["b2"].column("score"))  # the same pair, the same score


def test_small_and_large_groups_taus_are_scipys_with_ties_and_flat_groups():
    from scipy.stats import kendalltau

    from iteralab.campaign.kinds.scoring import agreement

    rng = np.random.default_rng(2)
    sizes = [1, 2, 3, 10, 64, 65, 200, 5, 5]
    groups = np.repeat(np.arange(len(sizes)), sizes)
    reference = np.round(rng.normal(size=len(groups)), 1)  # ties in both passes
    mine = np.round(reference + rng.normal(scale=0.3, size=len(groups)), 1)
    mine[groups == 7] = 0.5  # one pass ties a whole group: 0
    mine[groups == 8], reference[groups == 8] = 0.25, 0.75  # both do: 1
    taus, unordered = agreement.group_taus(mine, reference, groups, np.ones(len(groups), bool))
    expected = []
    for g in range(len(sizes)):
        a, b = mine[groups == g], reference[groups == g]
        if len(a) < 2:
            continue
        flat_a, flat_b = len(set(a)) == 1, len(set(b)) == 1
        expected.append(1.0 if flat_a and flat_b else 0.0 if flat_a or flat_b else kendalltau(a, b)[0])
    # the small groups come first (counted together), then the large ones (scipy, one call each)
    order = [g for g in range(len(sizes)) if 2 <= sizes[g] <= agreement.SMALL_GROUP] + \
        [g for g in range(len(sizes)) if sizes[g] > agreement.SMALL_GROUP]
    by_group = dict(zip([g for g in range(len(sizes)) if sizes[g] >= 2], expected))
    assert unordered == 1
    np.testing.assert_allclose(taus, [by_group[g] for g in order], rtol=0, atol=1e-12)


def test_group_ranking_in_blocks_equals_one_block(monkeypatch):
    from iteralab.campaign.kinds.scoring import verdict

    rng = np.random.default_rng(3)
    groups = rng.integers(0, 30, 300)
    scores, relevance = rng.normal(size=300), rng.integers(0, 3, 300).astype(np.float64)
    whole = verdict.group_ranking(scores, groups, relevance, 5)
    monkeypatch.setattr(verdict, "BLOCK_PAIRS", 7)  # a block per group or two (a group over 7 pairs: alone)
    blocked = verdict.group_ranking(scores, groups, relevance, 5)
    assert blocked.queries == whole.queries == 30
    for name in ("recall_at_k", "recall_of_relevant", "mrr", "ndcg_at_k"):  # the same up to summation order
        assert getattr(blocked, name) == pytest.approx(getattr(whole, name), abs=1e-12)


def test_a_variant_whose_scores_move_is_measured_and_the_report_shows_its_farthest_pairs(tmp_path):
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.decision.examples import wrong_examples
    from iteralab.evidence.reads import load_evidence

    out = scoring_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_scorers:batch_rounded_scorer"',
                           extra_scoring="max_abs_diff = 0.01", min_tau=-1.0)
    rows = {r.variant: r for r in CampaignFolder.open(out).raw_rows()}
    moved = rows["b4"]
    assert rows["b2"].corpus_accepted and not moved.corpus_accepted
    assert 0.01 < moved.max_abs_score_diff <= 0.05 + 1e-6  # rounded to one decimal
    assert moved.tolerance_ok is False and "not accepted: largest score difference" in moved.notes
    assert "above scoring.max_abs_diff 0.01" in moved.notes
    # the quality interval resamples the groups (a ranking metric is their mean)
    assert moved.delta_units == len({row[3] for row in corpus_rows()})  # one unit per group (query)
    assert moved.delta_low <= moved.metric_delta <= moved.delta_high
    examples = wrong_examples(load_evidence(out))
    assert examples.pass_id == moved.pass_id and examples.columns[:4] == ("id", "score", "reference score",
                                                                          "difference")
    shown = [float(r["difference"]) for r in examples.rows]
    assert shown == sorted(shown, reverse=True) and shown[0] == pytest.approx(moved.max_abs_score_diff, abs=1e-4)


def test_a_scoring_job_of_two_datasets_is_judged_and_verified_per_dataset(tmp_path):
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.evidence.run import run_campaign
    from iteralab.evidence.verify import audit_campaign
    from iteralab.lock.inputs import lock
    from scoring_jobs import write_corpus

    rows = corpus_rows()
    for name, part in (("a", rows[:12]), ("b", rows[12:])):
        write_corpus(tmp_path, part).rename(tmp_path / f"{name}.csv")
    text = scoring_protocol(CALLABLE, variants=BATCH_VARIANTS, reference="b2").replace('path = "pairs.csv"\n', "")
    text += '\n[[datasets]]\nname = "a"\npath = "a.csv"\n\n[[datasets]]\nname = "b"\npath = "b.csv"\n'
    (tmp_path / "protocol.toml").write_text(text, encoding="utf-8")
    lock(tmp_path / "protocol.toml")
    run_campaign(tmp_path / "protocol.toml", tmp_path / "camp")
    table = CampaignFolder.open(tmp_path / "camp").raw_rows()
    assert sorted((r.dataset, r.variant) for r in table) == [("a", "b2"), ("a", "b4"), ("b", "b2"), ("b", "b4")]
    assert all(r.corpus_accepted and "ranking of 2 groups" in r.notes for r in table), [r.notes for r in table]
    # verify reads each dataset's own groups and relevance (its copy), as the run did
    assert audit_campaign(tmp_path / "camp", require_seal=False).differences == []


def test_a_scoring_job_gates_on_the_interval_over_its_groups_under_metric_confidence(tmp_path):
    """With metric.confidence a built-in ranking metric's interval (its groups resampled) decides: passes whose
    scores give the reference's orderings are established within the tolerance, and accepted."""
    from iteralab.campaign.folder import CampaignFolder

    out = scoring_campaign(tmp_path, CALLABLE, metric='name = "ndcg_at_k"\nk = 3\nconfidence = 0.95')
    rows = CampaignFolder.open(out).raw_rows()
    assert rows and all(r.corpus_accepted for r in rows), [(r.pass_id, r.notes) for r in rows]
    groups = len({row[3] for row in corpus_rows()})
    assert {r.delta_units for r in rows} == {groups}
    assert all(r.delta_low == r.delta_high == 0 for r in rows)  # the same scores: a difference of 0, established
