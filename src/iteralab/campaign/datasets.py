"""Several datasets in one campaign (K6): read, checked disjoint, copied, one pass per dataset.

Reads the protocol's ``[[datasets]]`` (each read in record batches with the ``[corpus]`` columns, classes and
strata; checked disjoint by comparing 64-bit digests of ids and normalised texts); writes
``inputs/datasets/<name>.csv`` (one corpus copy per dataset, with its own fingerprint) and the campaign's
``datasets`` record.

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

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.campaign.lockrecords import OverlapKeys, Suspects, shared_keys
from iteralab.errors import CorpusError
from iteralab.plan.corpus import Corpus, text_fingerprint
from iteralab.plan.protocol import Protocol
from iteralab.plan.paths import resolve
from iteralab.plan.scan import CorpusScan, Sink, scan_corpus

DATASETS_DIR = "inputs/datasets"


def dataset_file(name: str) -> str:
    """Where a dataset's copy lives in a campaign folder (relative path)."""
    return f"{DATASETS_DIR}/{name}.csv"


@dataclass(frozen=True)
class DatasetScans:
    """Every declared dataset's scan (name, scan) in declaration order, and the tuning split's."""

    named: list[tuple[str, CorpusScan]]
    tuning: CorpusScan | None


def scan_datasets(protocol: Protocol, protocol_path: Path, *,
                  sinks_for: Callable[[str], Sequence[Sink]] | None = None,
                  tuning_sinks: Sequence[Sink] = ()) -> DatasetScans:
    """Read every declared dataset and the tuning split in record batches, with the checks of a one-corpus
    protocol (P4, C2), each refused when it overlaps another dataset or the tuning split (ids or
    whitespace-normalised texts, K6). ``sinks_for(name)``: the sinks of that dataset's validated batches."""
    from iteralab.campaign.inputs import scan_inputs

    named: list[tuple[str, CorpusScan]] = []
    keys: list[OverlapKeys] = []
    strata_later: list[Callable[[], None]] = []
    tuning: CorpusScan | None = None
    tuning_keys: OverlapKeys | None = None
    for n, dataset in enumerate(protocol.datasets):
        mine = OverlapKeys()
        # the tuning split: read with the first dataset, its digests then checked disjoint with every dataset
        scans = scan_inputs(protocol, protocol_path, sinks=[mine, *(sinks_for(dataset.name) if sinks_for else ())],
                            tuning_sinks=tuning_sinks, dataset=dataset, strata_later=strata_later,
                            tuning_keys=tuning_keys)
        if n == 0:
            tuning, tuning_keys = scans.tuning, scans.tuning_keys
        named.append((dataset.name, scans.corpus))
        keys.append(mine)
    _check_keys_disjoint(protocol, protocol_path, keys)
    for finish in strata_later:
        finish()
    return DatasetScans(named, tuning)


def _check_keys_disjoint(protocol: Protocol, protocol_path: Path, keys: list[OverlapKeys]) -> None:
    """:func:`check_datasets_disjoint` from the datasets' digests: when no id digest and no text digest is
    shared, they are disjoint; otherwise the documents whose digests are shared are read again (only those
    are kept) and checked exactly, to name the first overlap (or to find that the digests merely collided)."""
    from iteralab.campaign.inputs import _columns

    shared_ids = shared_keys([k.ids() for k in keys])
    shared_texts = shared_keys([k.texts() for k in keys])
    if not len(shared_ids) and not len(shared_texts):
        return
    columns, extra = _columns(protocol)
    suspects: list[tuple[str, list[tuple[str, str]]]] = []
    for dataset in protocol.datasets:
        found = Suspects(shared_ids, shared_texts)
        scan_corpus(resolve(protocol_path, dataset.path), **columns, extra_columns=extra, sinks=[found])
        suspects.append((dataset.name, found.rows))
    _first_overlap(suspects)


def _short(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def check_datasets_disjoint(named: list[tuple[str, Corpus]]) -> None:
    """Refuse two datasets that share an id or a (whitespace-normalised) text: one line naming both datasets
    and an example. One pass over the records (a dict per id and per text digest)."""
    _first_overlap([(name, [(r.id, r.text) for r in corpus.records]) for name, corpus in named])


def _first_overlap(named: list[tuple[str, list[tuple[str, str]]]]) -> None:
    """The check of :func:`check_datasets_disjoint` over each dataset's ``(id, text)`` in file order."""
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
    """The fingerprint of a set of datasets: SHA-256 of their sorted fingerprints (order-independent)."""
    return hashlib.sha256(json.dumps(sorted(fingerprints), separators=(",", ":")).encode()).hexdigest()


def combined_order_hash(order_hashes: list[str]) -> str:
    """The pass order of a set of datasets: SHA-256 of their order hashes in declaration order."""
    return hashlib.sha256(json.dumps(list(order_hashes), separators=(",", ":")).encode()).hexdigest()


def write_dataset_copies(protocol: Protocol, protocol_path: Path, out: Path, lock_entry: dict[str, Any], *,
                         rerun: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None,
                                                       dict[str, str] | None]:
    """Copy every dataset into ``inputs/datasets/`` (and the tuning split into ``inputs/tuning.csv``), each
    written while it is read in record batches (:func:`scan_datasets`), and check that read against the lock
    (``check_inputs`` with these scans): each dataset is read once. A refused input leaves no copy.

    Returns the campaign's ``datasets`` records (name, fingerprint, order hash, size, file, sha256, strata),
    its ``corpus`` record (the combined fingerprint and order hash, the total size, no file), the tuning
    record and the model files' sha256 as checked."""
    from iteralab.campaign.corpuscopy import CorpusCopy, tuning_record
    from iteralab.campaign.inputs import check_inputs

    spec = protocol.corpus
    (out / DATASETS_DIR).mkdir(parents=True, exist_ok=True)
    by_stratum = any(sg.by == "stratum" for sg in protocol.subgroups) and bool(spec.stratum_column)
    copies: dict[str, CorpusCopy] = {}
    tuning_copy = None
    try:
        for dataset in protocol.datasets:
            copies[dataset.name] = CorpusCopy(out / dataset_file(dataset.name),
                                              extra={"stratum": spec.stratum_column if by_stratum else ""})
        tuning_copy = CorpusCopy(out / "inputs" / "tuning.csv") if spec.tuning_path else None
        scanned = scan_datasets(protocol, protocol_path, sinks_for=lambda name: [copies[name]],
                                tuning_sinks=[tuning_copy] if tuning_copy is not None else [])
        model_hashes = check_inputs(protocol_path, lock_entry, rerun=rerun, scans=scanned)
    except BaseException:
        for copy in [*copies.values(), *([tuning_copy] if tuning_copy is not None else [])]:
            copy.abort()
        raise
    records: list[dict[str, Any]] = []
    for name, scan in scanned.named:
        counts: dict[str, int] = {}
        if by_stratum:
            for value, n in (scan.extra_counts.get(spec.stratum_column) or {}).items():
                counts[value or ""] = counts.get(value or "", 0) + n
        records.append({"name": name, "fingerprint": scan.fingerprint, "order_hash": scan.order_hash,
                        "size": scan.size, "id_origin": scan.id_origin, "file": dataset_file(name),
                        "file_sha256": copies[name].commit(), "strata": dict(sorted(counts.items()))})
    origins = {r["id_origin"] for r in records}
    corpus_record = {"fingerprint": combined_fingerprint([r["fingerprint"] for r in records]),
                     "order_hash": combined_order_hash([r["order_hash"] for r in records]),
                     "size": sum(r["size"] for r in records), "id_origin": origins.pop() if len(origins) == 1
                     else "mixed", "file": None, "file_sha256": None, "strata": {},
                     "datasets": [r["name"] for r in records]}
    tuning_info = tuning_record(tuning_copy, scanned.tuning)
    return records, corpus_record, tuning_info, model_hashes


def dataset_records(campaign: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``datasets`` of a campaign record (empty for a one-corpus campaign)."""
    return list(campaign.get("datasets") or [])


__all__ = ["DATASETS_DIR", "DatasetScans", "check_datasets_disjoint", "combined_fingerprint", "dataset_file",
           "dataset_records", "scan_datasets", "write_dataset_copies"]
