"""Rotated pass order (R6): no variant is always first.

For an even number of variants and a multiple of that many rounds, a Williams design is used: every variant
takes every position equally often *and* follows every other variant equally often (first-order carry-over
balance). Otherwise a cyclic Latin square is used (1-4-8, 4-8-1, 8-1-4 …): every variant takes every
position once per cycle of rounds.
"""

from __future__ import annotations

from collections.abc import Sequence


def williams_rows(n: int) -> list[list[int]]:
    """The n rows of a Williams Latin square for even n (indices 0..n-1)."""
    if n % 2:
        raise ValueError("a Williams square of n rows balances carry-over only for even n")
    first: list[int] = []
    low, high = 0, n - 1
    for k in range(n):
        if k % 2 == 0:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    return [[(x + r) % n for x in first] for r in range(n)]


def plan_rounds(variants: Sequence[str], passes: int) -> tuple[str, list[list[str]]]:
    """Return (design name, rounds), each round listing every variant once in its rotated order."""
    names = list(variants)
    n = len(names)
    if n == 0 or passes <= 0:
        return "empty", []
    if n == 1:
        return "single", [names[:] for _ in range(passes)]
    if n % 2 == 0 and passes % n == 0:
        rows = williams_rows(n)
        return "williams", [[names[i] for i in rows[r % n]] for r in range(passes)]
    return "cyclic", [[names[(i + r) % n] for i in range(n)] for r in range(passes)]
