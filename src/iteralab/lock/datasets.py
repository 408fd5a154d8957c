"""Several datasets in one campaign (K6): where each copy lives, the disjointness rule, the combined fingerprint.

Reads nothing and writes nothing itself: ``lock.inputs.scan_sources`` reads the protocol's ``[[datasets]]``
in record batches (with the ``[corpus]`` columns, classes and strata) and checks them disjoint by comparing
64-bit digests of ids and normalised texts, naming an overlap with :func:`first_overlap`;
``campaign.corpuscopy.write_corpus_copies`` writes ``inputs/datasets/<name>.csv`` (one corpus copy per
dataset, with its own fingerprint) and the campaign's ``datasets`` record.

Design: **one pass per dataset**. The schedule's slots are (variant, round, dataset): every variant processes
every dataset under the same checks, each pass writes its own prediction file (R7) and is verified against its
own dataset exactly as a one-corpus pass is against its corpus. This was chosen over one pass over the union
with per-dataset verification because (a) the pass worker, the prediction files and every check stay the ones
of a one-corpus campaign (a dataset copy *is* a corpus copy), (b) each dataset's verdict and pass time are
observed, not apportioned from a pooled pass, and (c) an accepted output counts once per dataset fingerprint
(K6) without any bookkeeping inside a pass. The job time of a configuration in one round is the sum of its
datasets' pass times (:mod:`iteralab.evidence.stats` says so wherever it is shown).
"""

from __future__ import annotations

from iteralab.common.digest import string_digest
from iteralab.errors import CorpusError
from iteralab.plan.corpus import text_fingerprint


def _short(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def first_overlap(named: list[tuple[str, list[tuple[str, str]]]]) -> None:
    """Refuse two datasets that share an id or a (whitespace-normalised) text: one line naming both datasets and
    an example. Run over each dataset's ``(id, text)`` in file order: the documents whose digests two datasets
    share (what ``lock.inputs`` keeps to name an overlap)."""
    seen_ids: dict[str, str] = {}
    seen_texts: dict[str, tuple[str, str]] = {}
    for name, rows in named:
        for id_, text in rows:
            other = seen_ids.get(id_)
            if other is not None and other != name:
                raise CorpusError(
                    f"datasets {other!r} and {name!r} overlap: both hold id {_short(id_)}",
                    hint="every dataset of a job must be disjoint: an output is counted once (K6)")
            digest = text_fingerprint(text)
            first = seen_texts.get(digest)
            if first is not None and first[0] != name:
                raise CorpusError(
                    f"datasets {first[0]!r} and {name!r} overlap: the same text {_short(text)} "
                    f"(id {_short(first[1])} in {first[0]!r}, id {_short(id_)} in {name!r})",
                    hint="every dataset of a job must be disjoint: an output is counted once (K6)")
        for id_, text in rows:
            seen_ids.setdefault(id_, name)
            seen_texts.setdefault(text_fingerprint(text), (name, id_))


def combined_fingerprint(fingerprints: list[str]) -> str:
    """The fingerprint of a set of datasets: the digest of their fingerprints, sorted (order-independent)."""
    return string_digest(sorted(fingerprints))


def combined_order_hash(order_hashes: list[str]) -> str:
    """The pass order of a set of datasets: the digest of their order hashes in declaration order."""
    return string_digest(list(order_hashes))


__all__ = ["combined_fingerprint", "combined_order_hash", "first_overlap"]
