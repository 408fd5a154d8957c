"""A classifier's paired bootstrap for the sample-size figure (``kinds/classification/resample.py``): the metric
of each resample equals the verdict's own (scikit-learn's), and the spread of the paired difference agrees with
an independent paired bootstrap (``scipy.stats.bootstrap``)."""

import numpy as np
import pytest
from scipy.stats import bootstrap

from iteralab.campaign.kinds.classification.resample import confusion_metric, paired_bootstrap
from iteralab.campaign.kinds.classification.verdict import LABEL_SET_METRICS, metric_of_codes

NAMES = ("accuracy", *LABEL_SET_METRICS)


def _labels(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=n)
    reference = np.where(rng.random(n) < 0.8, y, rng.integers(-1, k, size=n))  # -1: no class
    candidate = np.where(rng.random(n) < 0.1, rng.integers(0, k, size=n), reference)  # about 10 % changed
    return y, reference, candidate


@pytest.mark.parametrize("name", NAMES)
def test_the_metric_of_a_count_table_is_the_verdicts(name):
    k = 4
    for seed in range(5):
        y, predicted, _ = _labels(60, k, seed)
        y[y == 3] = 2 if seed == 0 else y[y == 3]  # one seed where a class has no true document
        counts = np.zeros((1, k, k + 1), dtype=np.int64)
        np.add.at(counts, (0, y, predicted + 1), 1)
        value = confusion_metric(name, counts.astype(float))[0]
        assert value == pytest.approx(metric_of_codes(name, y, predicted, k), abs=1e-12)


@pytest.mark.parametrize("name", ["accuracy", "macro_f1"])
def test_the_spread_agrees_with_scipys_paired_bootstrap(name):
    k = 3
    y, reference, candidate = _labels(400, k, 11)
    draws = paired_bootstrap(name, y, reference, candidate, k, draws=2000, seed=0)
    assert np.all(draws == paired_bootstrap(name, y, reference, candidate, k, draws=2000, seed=0))  # seeded

    def difference(yy, rr, cc, axis=-1):  # scipy's resamples, scored by the table metric checked above
        yy, rr, cc = (np.atleast_2d(a).astype(np.int64) for a in (yy, rr, cc))
        rows = np.arange(len(yy))[:, None]
        ref, cand = (np.zeros((len(yy), k, k + 1)) for _ in range(2))
        np.add.at(ref, (np.broadcast_to(rows, yy.shape), yy, rr + 1), 1)
        np.add.at(cand, (np.broadcast_to(rows, yy.shape), yy, cc + 1), 1)
        change = confusion_metric(name, cand.astype(float)) - confusion_metric(name, ref.astype(float))
        return change.reshape(np.shape(yy)[:-1])

    theirs = bootstrap((y, reference, candidate), difference, paired=True, vectorized=True, n_resamples=1000,
                       batch=250, method="percentile", random_state=np.random.default_rng(3))
    # two Monte-Carlo estimates of one standard error: each within about 3 % (2000 and 1000 draws)
    assert np.std(draws, ddof=1) == pytest.approx(theirs.standard_error, rel=0.12)


@pytest.mark.slow
def test_at_the_printed_size_macro_f1_is_established_at_the_declared_power():
    """The tuning split stands for the population: final corpora of the printed size drawn from it, each judged by
    the worse bound of its own paired bootstrap's two-sided interval, are established within tolerance at about the power."""
    from scipy.stats import norm

    from iteralab.plan.samplesize import Disagreement

    k, tolerance, confidence, power = 3, 0.08, 0.95, 0.8  # the candidate loses about 0.058
    y, reference, candidate = _labels(1500, k, 5)
    draws = paired_bootstrap("macro_f1", y, reference, candidate, k)
    difference = metric_of_codes("macro_f1", y, candidate, k) - metric_of_codes("macro_f1", y, reference, k)
    n = Disagreement.of_bootstrap("c", difference, draws, len(y), "documents").size(tolerance, confidence, power)
    assert n is not None and 200 < n < 5000, n
    rng, z, campaigns = np.random.default_rng(9), norm.ppf((1 + confidence) / 2), 300
    established = 0
    for c in range(campaigns):
        pick = rng.integers(0, len(y), size=n)
        yy, rr, cc = y[pick], reference[pick], candidate[pick]
        found = metric_of_codes("macro_f1", yy, cc, k) - metric_of_codes("macro_f1", yy, rr, k)
        se = np.std(paired_bootstrap("macro_f1", yy, rr, cc, k, draws=200, seed=c), ddof=1)
        established += found - z * se > -tolerance
    assert abs(established / campaigns - power) < 0.08, (n, established)
