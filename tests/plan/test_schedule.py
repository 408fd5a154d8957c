from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from iteralab.plan.schedule import plan_rounds, williams_rows


def test_cyclic_example_from_the_protocol():
    design, rounds = plan_rounds(["b1", "b4", "b8"], 3)
    assert design == "cyclic"
    assert rounds == [["b1", "b4", "b8"], ["b4", "b8", "b1"], ["b8", "b1", "b4"]]


@given(n=st.integers(1, 7), cycles=st.integers(1, 3))
def test_every_variant_takes_every_position_equally(n, cycles):
    names = [f"v{i}" for i in range(n)]
    _, rounds = plan_rounds(names, n * cycles)
    for position in range(n):
        counts = Counter(r[position] for r in rounds)
        assert set(counts) == set(names)
        assert set(counts.values()) == {cycles}
    assert all(sorted(r) == sorted(names) for r in rounds)


@given(half=st.integers(1, 4))
def test_williams_balances_carry_over(half):
    n = 2 * half
    rows = williams_rows(n)
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    assert len(follows) == n * (n - 1)
    assert set(follows.values()) == {1}
