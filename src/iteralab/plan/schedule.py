"""Rotated pass order (R6): no variant is always first.

For an even number of variants and a multiple of that many rounds, a Williams design is used: every variant
takes every position equally often *and* follows every other variant equally often (first-order carry-over
balance). Otherwise a cyclic Latin square is used (1-4-8, 4-8-1, 8-1-4 …): every variant takes every
position once per cycle of rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol


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


@dataclass(frozen=True)
class Slot:
    round: int
    position: int
    variant: str
    seed: int
    #: The dataset of a several-dataset protocol (K6); None for a one-corpus protocol.
    dataset: str | None = None

    def record(self) -> dict[str, Any]:
        """As campaign.json stores it (no dataset key for a one-corpus protocol)."""
        return {k: v for k, v in self.__dict__.items() if k != "dataset" or v is not None}


def schedule_slots(protocol: Protocol) -> tuple[str, list[Slot]]:
    """Every (round, position) of the campaign; each seed of a stochastic protocol has its own slots (Q3), and
    each dataset of a several-dataset protocol too (K6): in every round, every variant processes every dataset,
    the datasets in a cyclic order that shifts by one each round, the variants in the round's rotated order."""
    design, rounds = plan_rounds([v.name for v in protocol.variants], protocol.run.passes)
    slots: list[Slot] = []
    seeds = list(protocol.reproduction.seeds)
    names = [source.name for source in protocol.sources()]  # [None]: one corpus
    for r, order in enumerate(rounds, start=1):
        shift = (r - 1) % len(names)
        datasets = names[shift:] + names[:shift]
        for s_index, seed in enumerate(seeds):
            for d_index, dataset in enumerate(datasets):
                for p, name in enumerate(order, start=1):
                    position = p + (s_index * len(datasets) + d_index) * len(order)
                    slots.append(Slot(round=r, position=position, variant=name, seed=seed, dataset=dataset))
    return design, slots
