"""The quality difference's interval (kinds/interval.py and each kind's ``quality_samples``) against an independent
paired bootstrap (scipy's), the exactness of the classifier's count form, strata, seeds and the gate's rule."""

from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from iteralab.campaign.kinds.classification.resample import LabelUnits, difference_statistic
from iteralab.campaign.kinds.classification.verdict import CLASSIFICATION_VERDICT, metric_of_codes, metric_value
from iteralab.campaign.kinds.embedding.verdict import EmbeddingVerdict
from iteralab.campaign.kinds.generation.textmetrics import document_scores
from iteralab.campaign.kinds.generation.verdict import GENERATION_VERDICT
from iteralab.campaign.kinds.interval import (FEW_VALUES, NOT_ESTABLISHED, OUTSIDE, WITHIN, CellSample, MeanSample,
                                              UnitValues, paired_interval, seed_of, standing)
from iteralab.campaign.kinds.ranking import Ranking, Relevance, rank_block
from iteralab.campaign.verdict.judge import subgroup_check
from iteralab.plan.metric import MetricSpec

K = 3
#: A bound may differ from scipy's by this share of the interval's width: about 4 Monte-Carlo standard errors of
#: the difference of two 2000-replicate percentile bounds (a variance wrong by 20 % moves a bound further).
AGREE = 0.08


def _labels(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, K, n)
    reference = np.where(rng.random(n) < 0.8, truth, rng.integers(0, K, n))
    variant = np.where(rng.random(n) < 0.9, reference, rng.integers(0, K, n))
    return truth, variant, reference


def _expected(truth, strata=None, names=()):
    return SimpleNamespace(labels=truth, classes=["a", "b", "c"], strata=strata if strata is not None
                           else np.full(len(truth), -1), stratum_names=names)


def _protocol(name: str, subgroups=()):
    return SimpleNamespace(metric=SimpleNamespace(name=name), subgroups=subgroups)


def _macro_f1(t, p, axis=-1):
    """macro-F1 over K classes by per-document indicators (no confusion table), vectorised over resamples."""
    f1 = []
    for c in range(K):
        tp = ((t == c) & (p == c)).sum(axis=axis)
        wrong = ((t == c) != (p == c)).sum(axis=axis)
        f1.append(np.where(2 * tp + wrong > 0, 2 * tp / np.maximum(2 * tp + wrong, 1), 0.0))
    return np.mean(f1, axis=0)


SCIPY_STATISTICS = {
    "accuracy": lambda t, v, r, axis=-1: (v == t).mean(axis=axis) - (r == t).mean(axis=axis),
    "macro_f1": lambda t, v, r, axis=-1: _macro_f1(t, v, axis) - _macro_f1(t, r, axis),
}


def _agree(ours, theirs):
    width = theirs.high - theirs.low
    assert width > 0
    assert abs(ours.low - theirs.low) <= AGREE * width and abs(ours.high - theirs.high) <= AGREE * width, \
        (ours, theirs)


@pytest.mark.parametrize("name", ["accuracy", "macro_f1"])
def test_classifier_interval_agrees_with_scipys_paired_bootstrap(name):
    truth, variant, reference = _labels(1500)
    samples = CLASSIFICATION_VERDICT.quality_samples(
        SimpleNamespace(units=LabelUnits(variant, np.ones(len(truth), bool))),
        SimpleNamespace(units=LabelUnits(reference, np.ones(len(truth), bool))), _protocol(name), _expected(truth))
    ours = paired_interval(samples[""], 0.95, seed_of("test", name))
    theirs = stats.bootstrap((truth, variant, reference), SCIPY_STATISTICS[name], paired=True, n_resamples=4000,
                             method="percentile", random_state=5).confidence_interval
    assert ours.units == len(truth) and ours.low < samples[""].point() < ours.high
    _agree(ours, theirs)


@pytest.mark.parametrize("name", ["accuracy", "macro_f1", "weighted_f1", "balanced_accuracy"])
def test_count_form_gives_scikit_learns_difference(name):
    truth, variant, reference = _labels(700, seed=3)
    variant[:40] = -1  # labels that are no class count against their true class
    cells = (truth * (K + 1) + variant + 1) * (K + 1) + reference + 1
    point = CellSample(cells, difference_statistic(name, K)).point()
    assert point == pytest.approx(metric_value(name, truth, variant, range(K))
                                  - metric_value(name, truth, reference, range(K)), abs=1e-12)
    # a subgroup's F1 averages over the classes present (verdict.counted_codes): class 2 absent here
    keep = truth < 2
    present = CellSample(cells[keep], difference_statistic(name, K, present_only=True)).point()
    variant_codes = sorted({int(c) for c in np.union1d(truth[keep], variant[keep]) if c >= 0})
    reference_codes = sorted({int(c) for c in np.union1d(truth[keep], reference[keep]) if c >= 0})
    if name == "accuracy":
        variant_codes = reference_codes = None
    elif name == "balanced_accuracy":
        variant_codes = reference_codes = sorted({int(c) for c in truth[keep]})
    assert present == pytest.approx(metric_of_codes(name, truth[keep], variant[keep], K, variant_codes)
                                    - metric_of_codes(name, truth[keep], reference[keep], K, reference_codes),
                                    abs=1e-12)


def _ranking(seed: int, noise: float):
    rng = np.random.default_rng(seed)
    m, n = 600, 40
    relevant = [np.array([q % n]) for q in range(m)]
    base = np.random.default_rng(0).normal(size=(m, n))
    base[np.arange(m), np.arange(m) % n] += 1.5
    return Ranking.of(5, [rank_block(base + noise * rng.normal(size=(m, n)), Relevance.of(relevant), 5)])


def test_ranking_interval_is_over_queries_and_agrees_with_scipy():
    mine, reference = _ranking(1, 0.6), _ranking(2, 0.2)
    a, b = mine.values_of("mrr"), reference.values_of("mrr")
    assert a.mean() == pytest.approx(mine.mrr) and len(a) == mine.queries
    samples = EmbeddingVerdict().quality_samples(SimpleNamespace(units=UnitValues(a)),
                                                 SimpleNamespace(units=UnitValues(b)), _protocol("mrr"), None)
    ours = paired_interval(samples[""], 0.95, seed_of("mrr"))
    theirs = stats.bootstrap((a, b), lambda x, y, axis=-1: (x - y).mean(axis=axis), paired=True,
                             n_resamples=4000, method="percentile", random_state=2).confidence_interval
    assert ours.units == 600
    _agree(ours, theirs)


def test_generation_interval_agrees_with_scipy():
    rng = np.random.default_rng(4)
    words = np.array("the cat sat on a mat while dogs ran far away from home".split())
    refs = [" ".join(rng.choice(words, 6)) for _ in range(1200)]
    def noisy(texts, p):
        return [" ".join(w if rng.random() > p else str(rng.choice(words)) for w in t.split()) for t in texts]
    outputs_ref, outputs_var = noisy(refs, 0.2), noisy(refs, 0.3)
    a = document_scores("token_f1", outputs_var, refs)
    b = document_scores("token_f1", outputs_ref, refs)
    samples = GENERATION_VERDICT.quality_samples(SimpleNamespace(units=UnitValues(a)),
                                                 SimpleNamespace(units=UnitValues(b)), _protocol("token_f1"),
                                                 _expected(np.zeros(1200, int)))
    ours = paired_interval(samples[""], 0.95, seed_of("token_f1"))
    theirs = stats.bootstrap((a, b), lambda x, y, axis=-1: (x - y).mean(axis=axis), paired=True,
                             n_resamples=4000, method="percentile", random_state=3).confidence_interval
    _agree(ours, theirs)


def test_continuous_differences_are_grouped_and_still_agree():
    rng = np.random.default_rng(6)
    d = rng.normal(-0.01, 0.1, 5000) * (rng.random(5000) < 0.4)
    assert len(np.unique(d)) > FEW_VALUES  # the grouped form, not the exact counts
    ours = paired_interval(MeanSample(d), 0.95, seed_of("continuous"))
    theirs = stats.bootstrap((d,), lambda x, axis=-1: x.mean(axis=axis), n_resamples=4000,
                             method="percentile", random_state=4).confidence_interval
    _agree(ours, theirs)


def test_within_strata_each_strata_keeps_its_size():
    """Each stratum's difference is constant: resampled within strata the mean never moves; across them it does."""
    strata = np.repeat([0, 1], [300, 700])
    d = np.where(strata == 0, 0.5, -0.1)
    within = paired_interval(MeanSample(d, strata), 0.95, 1)
    across = paired_interval(MeanSample(d), 0.95, 1)
    assert within.low == within.high == pytest.approx(d.mean())
    assert across.high - across.low > 0.02  # 3.92 × 0.6 × √(0.3 × 0.7 / 1000) ≈ 0.034
    truth, variant, reference = _labels(1000)
    cells = (truth * (K + 1) + variant + 1) * (K + 1) + reference + 1
    strata = (variant == reference).astype(int)  # a stratum of agreement, one of disagreement
    stratified = paired_interval(CellSample(cells, difference_statistic("accuracy", K), strata), 0.95, 2)
    plain = paired_interval(CellSample(cells, difference_statistic("accuracy", K)), 0.95, 2)
    assert stratified.high - stratified.low < plain.high - plain.low


def test_the_same_seed_gives_the_same_bits_and_another_seed_other_bounds():
    truth, variant, reference = _labels(800)
    sample = CellSample((truth * (K + 1) + variant + 1) * (K + 1) + reference + 1, difference_statistic("macro_f1", K))
    first, again = paired_interval(sample, 0.95, seed_of("p", "x")), paired_interval(sample, 0.95, seed_of("p", "x"))
    assert (first.low, first.high) == (again.low, again.high)
    other = paired_interval(sample, 0.95, seed_of("p", "y"))
    assert (other.low, other.high) != (first.low, first.high)
    assert seed_of("a", "b") != seed_of("ab", "")


def test_standing_says_what_the_interval_establishes():
    assert standing(-0.004, 0.002, 0.01) == WITHIN
    assert standing(-0.03, -0.02, 0.01) == OUTSIDE
    assert standing(-0.015, 0.001, 0.01) == NOT_ESTABLISHED
    assert standing(-0.002, 0.004, 0.01, higher_is_better=False) == WITHIN
    assert standing(0.02, 0.03, 0.01, higher_is_better=False) == OUTSIDE
    assert standing(None, None, 0.01) is None


def _metric(**extra):
    return MetricSpec(name=extra.pop("name", "macro_f1"), threshold=0.5, tolerance=0.01, reference_variant="b4",
                      **extra)


def test_confidence_is_a_level_and_needs_a_resampled_metric():
    assert _metric().interval_level == 0.95 and _metric().confidence is None
    assert _metric(confidence=0.9).interval_level == 0.9
    for bad in (0, 1, 1.5):
        with pytest.raises(ValidationError):
            _metric(confidence=bad)
    with pytest.raises(ValidationError, match="corpus chrF is no mean of per-document values"):
        MetricSpec(name="chrf", threshold=0.5, relative_tolerance=0.01, reference_variant="b4", confidence=0.95)


def test_a_group_gates_on_the_interval_only_when_confidence_is_declared():
    group = [SimpleNamespace(name="length", gating=True, by="stratum", threshold=None, tolerance=None)]
    point = SimpleNamespace(metric=_metric(), subgroups=group)
    declared = SimpleNamespace(metric=_metric(confidence=0.95), subgroups=group)
    # the point difference -0.005 is within 0.01; the interval's lower bound -0.02 is not
    assert not subgroup_check(point, "length:long", 0.795, 0.8, True, interval=[-0.02, 0.01]).failed
    check = subgroup_check(declared, "length:long", 0.795, 0.8, True, interval=[-0.02, 0.01])
    assert check.failed and "interval's bound -0.0200" in check.why("b4")
    assert not subgroup_check(declared, "length:long", 0.795, 0.8, True, interval=[-0.009, 0.0]).failed


def test_a_kind_without_units_gives_no_sample():
    empty = SimpleNamespace(units=None)
    assert CLASSIFICATION_VERDICT.quality_samples(empty, empty, _protocol("accuracy"), _expected(np.zeros(3, int))) \
        == {}
    assert GENERATION_VERDICT.quality_samples(empty, empty, _protocol("token_f1"), _expected(np.zeros(3, int))) == {}
