"""C2: token-length strata and the stratified, reproducible sample drawn from them.

Reads token counts (from the model's tokenizer) and a :class:`~iteralab.plan.corpus.Corpus`; writes nothing.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from iteralab.errors import CorpusError
from iteralab.plan.corpus import Corpus, examples_of


def describe_strata(strata: Mapping[str, tuple[int, int | None]]) -> str:
    return ", ".join(f"{name} {lo}+" if hi is None else f"{name} {lo}-{hi}" for name, (lo, hi) in strata.items())


def _checked_strata(strata: Mapping[str, tuple[int, int | None]]) -> list[tuple[int, int | None, str]]:
    if not strata:
        raise CorpusError("length strata: none defined")
    bounds = []
    for name, spec in strata.items():
        if not isinstance(spec, (tuple, list)) or len(spec) != 2:
            raise CorpusError(f"length strata, field {name}: expected (min, max) token counts, got {spec!r}")
        lo, hi = spec
        if isinstance(lo, bool) or not isinstance(lo, int) or lo < 0:
            raise CorpusError(f"length strata, field {name}: minimum {lo!r} is not a whole number >= 0")
        if hi is not None and (isinstance(hi, bool) or not isinstance(hi, int) or hi < lo):
            raise CorpusError(f"length strata, field {name}: maximum {hi!r} is not a whole number >= {lo} (or None)")
        bounds.append((lo, hi, name))
    bounds.sort(key=lambda b: b[0])
    for (lo_a, hi_a, a), (lo_b, _hi_b, b) in zip(bounds, bounds[1:]):
        if hi_a is None or lo_b <= hi_a:
            raise CorpusError(f"length strata: {a!r} and {b!r} overlap ({describe_strata(strata)})")
        if lo_b > hi_a + 1:
            raise CorpusError(
                f"length strata: a gap between {a!r} and {b!r}: {hi_a + 1}-{lo_b - 1} tokens fall in no stratum"
            )
    return bounds


def assign_strata(
    lengths: Sequence[int],
    strata: Mapping[str, tuple[int, int | None]],
    *,
    names: Sequence[str] | None = None,
) -> list[str]:
    """The stratum of each token length; bounds are inclusive, ``None`` means no upper bound.

    Overlapping or gapped definitions, and a length that falls in no stratum, are refused; ``names``
    (e.g. the ids) label the texts in that error."""
    bounds = _checked_strata(strata)
    lows = [b[0] for b in bounds]
    out = []
    for i, n in enumerate(lengths):
        who = f"text {names[i]!r}" if names is not None else f"text #{i + 1}"
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise CorpusError(f"length strata: {who} has an invalid token count {n!r}")
        k = bisect_right(lows, n) - 1
        if k < 0 or (bounds[k][1] is not None and n > bounds[k][1]):
            raise CorpusError(f"length strata: {who} has {n} tokens, in no stratum ({describe_strata(strata)})")
        out.append(bounds[k][2])
    return out


def largest_remainder(total: int, weights: Mapping[Any, int]) -> dict[Any, int]:
    """Split ``total`` in proportion to ``weights`` (Hamilton's method, exact integer arithmetic).

    Ties go to the larger weight, then to the earlier key. Every share stays <= its weight when
    ``total <= sum(weights)``."""
    whole = sum(weights.values())
    if total < 0 or any(w < 0 for w in weights.values()):
        raise ValueError("largest_remainder needs non-negative numbers")
    if whole == 0:
        if total:
            raise ValueError("cannot split a positive total over zero weights")
        return {k: 0 for k in weights}
    shares = {k: total * w // whole for k, w in weights.items()}
    order = sorted(weights, key=lambda k: (-(total * weights[k] % whole), -weights[k]))
    for k in order[: total - sum(shares.values())]:
        shares[k] += 1
    return shares


def _key(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass")).digest()


def stratified_sample(corpus: Corpus, strata_of: Mapping[str, str], counts: Mapping[str, int], seed: int) -> Corpus:
    """Draw ``counts[stratum]`` records per stratum, each class in proportion to its share of the stratum.

    The draw keeps, per (stratum, class), the ids with the smallest SHA-256 of (seed, stratum, id), so
    it depends only on the seed and the set of records (not their order); the result is ordered by
    another seeded hash. Strata not in ``counts`` are not drawn from. Refuses a stratum with too few texts.
    """
    missing = [r.id for r in corpus.records if r.id not in strata_of]
    if missing:
        raise CorpusError(f"{corpus.source}: {len(missing)} texts have no stratum (e.g. {examples_of(missing)})")
    groups: dict[str, dict[str | None, list[str]]] = {}
    for r in corpus.records:
        groups.setdefault(strata_of[r.id], {}).setdefault(r.label, []).append(r.id)
    chosen: list[str] = []
    for stratum, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise CorpusError(f"{corpus.source}, stratum {stratum!r}: count {n!r} is not a whole number >= 0")
        by_class = groups.get(stratum, {})
        available = sum(len(v) for v in by_class.values())
        if n > available:
            raise CorpusError(
                f"{corpus.source}, stratum {stratum!r}: {n} texts requested, only {available} available",
                hint="lower the count for this stratum, or widen its token bounds",
            )
        classes = sorted(by_class, key=lambda c: (c is None, c or ""))
        shares = largest_remainder(n, {c: len(by_class[c]) for c in classes})
        for c in classes:
            ranked = sorted(by_class[c], key=lambda i: _key("select", seed, stratum, i))
            chosen.extend(ranked[: shares[c]])
    chosen.sort(key=lambda i: _key("order", seed, i))
    picked = corpus.subset(chosen).reordered(chosen)
    return Corpus(picked.records, f"{corpus.source} [stratified sample, seed {seed}]", corpus.id_origin, corpus.notes)
