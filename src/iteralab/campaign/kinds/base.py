"""The interface every kind of job implements (:class:`JobKind`): what the rest of the product may ask a kind.

A kind is a stateless object, one per kind, found by its name in :mod:`iteralab.campaign.kinds.registry`. Code
outside the kinds' folders holds a ``JobKind`` and asks it; it never compares ``kind.name`` with a literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class OutputWords:
    """How a rerun comparison names one kind's outputs: the per-variant table's two output columns, the
    comparison key the first of them shows, and the meaning of *identical* and *within bound*."""

    first: str
    second: str
    identical: str
    bound: str
    #: The per-variant comparison key shown under ``first`` (``evidence.rerun``'s variant record).
    first_key: str


class JobKind:
    """One kind of job: its name as ``[task] kind`` spells it, and its facets (each kind's folder defines them)."""

    #: ``[task] kind`` of the protocols this kind judges.
    name: ClassVar[str]

    #: How a rerun comparison names this kind's outputs (``evidence.comparison``).
    rerun_words: ClassVar[OutputWords]

    #: Which wrong outputs the report shows (``decision.examples``): ``"labels"`` (a counted pass's documents
    #: whose predicted label is not the corpus's), ``"texts"`` (its texts scoring below 1 against their reference
    #: answer) or ``"vectors"`` (the counted pass farthest from the reference pass, its farthest documents).
    examples: ClassVar[str]

    #: Whether its model keeps a KV cache per prompt position while it runs (the memory estimate adds that term
    #: beside the weights: ``evidence.memory``).
    kv_cache: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"JobKind({self.name!r})"
