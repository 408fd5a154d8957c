"""The corpus size the tolerance needs (``plan/samplesize.py``): the one-sided non-inferiority figure of a paired
difference, checked against a simulation of the campaigns it promises (the rate of "established within tolerance"
at the printed size is the declared power), and the record that threshold writes and lock reads."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from iteralab.plan.samplesize import (Disagreement, SizeRecord, bound_level, record_path, required_size,
                                     size_lines)


def test_the_figure_is_the_closed_form_and_none_when_the_difference_is_not_within_the_tolerance():
    z = norm.ppf(0.975) + norm.ppf(0.8)
    assert required_size(0.3, 0.01, 0.0, 0.95, 0.8) == math.ceil((z * 0.3 / 0.01) ** 2)
    assert required_size(0.3, 0.05, -0.02, 0.95, 0.8) == math.ceil((z * 0.3 / 0.03) ** 2)
    assert required_size(0.3, 0.05, 0.02, 0.95, 0.8) == required_size(0.3, 0.05, -0.02, 0.95, 0.8)  # |difference|
    assert required_size(0.3, 0.02, -0.02, 0.95, 0.8) is None and required_size(0.3, 0.01, 0.03, 0.95, 0.8) is None
    assert required_size(0.0, 0.01, 0.0, 0.95, 0.8) == 1
    # more confidence or more power asks for more documents
    assert required_size(0.3, 0.01, 0, 0.99, 0.8) > required_size(0.3, 0.01, 0, 0.95, 0.8) > \
        required_size(0.3, 0.01, 0, 0.95, 0.5)


def _established_rate(probs: tuple[float, float], n: int, tolerance: float, confidence: float, campaigns: int,
                      seed: int) -> float:
    """Simulated campaigns of ``n`` documents whose paired correctness difference is -1, +1 or 0 with probabilities
    ``probs`` (-1, +1): the share where the worse bound of the two-sided interval of the mean difference lies within the tolerance."""
    counts = np.random.default_rng(seed).multinomial(n, [probs[0], probs[1], 1 - sum(probs)], size=campaigns)
    mean = (counts[:, 1] - counts[:, 0]) / n
    sd = np.sqrt(np.maximum((counts[:, 0] + counts[:, 1]) / n - mean ** 2, 0) * n / (n - 1))
    return float(np.mean(mean - norm.ppf(bound_level(confidence)) * sd / np.sqrt(n) > -tolerance))


def test_at_the_printed_size_the_rate_of_established_is_the_power():
    # the demo's case: about 9 % of the labels change; the candidate loses 6 % and gains 3 % (difference -0.03)
    tolerance, rng = 0.05, np.random.default_rng(7)
    tuning = rng.choice([-1.0, 1.0, 0.0], p=[0.06, 0.03, 0.91], size=2_000)  # a tuning split's paired outcomes
    reference = rng.integers(0, 2, size=len(tuning)).astype(float)
    measured = Disagreement.of_values("int8", reference, reference + tuning, "documents")
    # the campaigns simulated with the disagreement measured on the tuning split (its shares of -1 and +1)
    probs = (float(np.mean(tuning == -1)), float(np.mean(tuning == 1)))
    assert measured.difference == pytest.approx(probs[1] - probs[0])
    for confidence, power in ((0.95, 0.8), (0.9, 0.9)):
        n = measured.size(tolerance, confidence, power)
        rate = _established_rate(probs, n, tolerance, confidence, campaigns=20_000, seed=1)
        assert abs(rate - power) < 0.03, (confidence, power, n, rate)
    n = measured.size(tolerance, 0.95, 0.8)
    assert _established_rate(probs, n // 2, tolerance, 0.95, campaigns=20_000, seed=2) < 0.65  # half: short of it


def test_the_record_round_trips_beside_the_protocol_and_its_lines_name_the_size(tmp_path):
    candidate = Disagreement("b3", -0.01, 0.25, 400, "documents", "how", 0.05)
    record = SizeRecord("accuracy", "tuning.csv", "ab" * 32, 0.9, (candidate,))
    path = record_path(tmp_path / "protocol.toml")
    assert path == tmp_path / "protocol.toml.samplesize.json"
    record.write(path)
    assert SizeRecord.read(path) == record
    n = required_size(0.25, 0.02, -0.01, 0.95, 0.8)
    lines = size_lines(record, 0.02, None, 0.8)
    assert lines == [
        "b3 against the reference: difference -0.0100, 5.0% of the labels differ, sd 0.2500 per document (how)",
        f"final corpus the tolerance 0.02 needs at 0.95 confidence (metric.confidence absent), power 0.8: {n} "
        "documents (b3 needs most)"]
    assert size_lines(record, 0.01, 0.95, 0.8)[-1] == (
        "final corpus the tolerance 0.01 needs at 0.95 confidence, power 0.8: no size establishes it (b3's "
        "difference -0.0100 is not within it) (b3 needs most)")
    n2, n5 = (required_size(0.25, t, -0.01, 0.9, 0.8) for t in (0.02, 0.05))
    assert size_lines(record, None, 0.9, 0.8)[-1] == (
        f"final documents the tolerance needs at 0.9 confidence, power 0.8 (tolerance not chosen yet): 0.005: none, "
        f"0.01: none, 0.02: {n2}, 0.05: {n5} (b3 needs most; none: its difference is not within that tolerance)")
    agreeing = SizeRecord("accuracy", "tuning.csv", "ab" * 32, 0.9, (Disagreement("b3", 0.0, 0.0, 400, "documents",
                                                                                  "how", 0.0),))
    assert size_lines(agreeing, 0.02, None, 0.8)[-1] == (
        "corpus size the tolerance needs: not bounded by the tuning split (no variant disagrees with the reference on "
        "its 400 documents)")
    path.write_text("{not json")
    assert SizeRecord.read(path) is None
