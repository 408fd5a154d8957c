"""Several datasets in one campaign (K6): read, checked disjoint, copied, one pass per dataset.

Reads the protocol's ``[[datasets]]`` (each read with the ``[corpus]`` columns, classes and strata); writes
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
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file
from iteralab.errors import CorpusError
from iteralab.plan.corpus import Corpus, text_fingerprint, write_corpus
from iteralab.plan.protocol import Protocol

DATASETS_DIR = "inputs/datasets"


def dataset_file(name: str) -> str:
    """Where a dataset's copy lives in a campaign folder (relative path)."""
    return f"{DATASETS_DIR}/{name}.csv"


def load_datasets(protocol: Protocol, protocol_path: Path) -> tuple[list[tuple[str, Corpus]], Corpus | None]:
    """Every declared dataset (name, corpus) and the tuning split, each refused when it overlaps another
    dataset or the tuning split (ids or whitespace-normalised texts, P4/K6)."""
    from iteralab.campaign.inputs import load_inputs

    named: list[tuple[str, Corpus]] = []
    tuning: Corpus | None = None
    for dataset in protocol.datasets:
        corpus, tuning = load_inputs(protocol, protocol_path, dataset)  # the tuning split: checked per dataset
        named.append((dataset.name, corpus))
    check_datasets_disjoint(named)
    return named, tuning


def _short(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def check_datasets_disjoint(named: list[tuple[str, Corpus]]) -> None:
    """Refuse two datasets that share an id or a (whitespace-normalised) text: one line naming both datasets
    and an example. One pass over the records (a dict per id and per text digest)."""
    seen_ids: dict[str, str] = {}
    seen_texts: dict[str, tuple[str, str]] = {}
    for name, corpus in named:
        for record in corpus.records:
            other = seen_ids.get(record.id)
            if other is not None and other != name:
                raise CorpusError(
                    f"datasets {other!r} and {name!r} overlap: both hold id {_short(record.id)}",
                    hint="every dataset of a job must be disjoint: an output is counted once (K6)")
            digest = text_fingerprint(record.text)
            first = seen_texts.get(digest)
            if first is not None and first[0] != name:
                raise CorpusError(
                    f"datasets {first[0]!r} and {name!r} overlap: the same text {_short(record.text)} "
                    f"(id {_short(first[1])} in {first[0]!r}, id {_short(record.id)} in {name!r})",
                    hint="every dataset of a job must be disjoint: an output is counted once (K6)")
        for record in corpus.records:
            seen_ids.setdefault(record.id, name)
            seen_texts.setdefault(text_fingerprint(record.text), (name, record.id))


def combined_fingerprint(fingerprints: list[str]) -> str:
    """The fingerprint of a set of datasets: SHA-256 of their sorted fingerprints (order-independent)."""
    return hashlib.sha256(json.dumps(sorted(fingerprints), separators=(",", ":")).encode()).hexdigest()


def combined_order_hash(order_hashes: list[str]) -> str:
    """The pass order of a set of datasets: SHA-256 of their order hashes in declaration order."""
    return hashlib.sha256(json.dumps(list(order_hashes), separators=(",", ":")).encode()).hexdigest()


def write_dataset_copies(protocol: Protocol, protocol_path: Path, out: Path
                         ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]:
    """Copy every dataset into ``inputs/datasets/`` (and the tuning split into ``inputs/tuning.csv``).

    Returns the campaign's ``datasets`` records (name, fingerprint, order hash, size, file, sha256, strata),
    its ``corpus`` record (the combined fingerprint and order hash, the total size, no file) and the tuning
    record."""
    spec = protocol.corpus
    named, tuning = load_datasets(protocol, protocol_path)
    (out / DATASETS_DIR).mkdir(parents=True, exist_ok=True)
    by_stratum = any(sg.by == "stratum" for sg in protocol.subgroups) and bool(spec.stratum_column)
    records: list[dict[str, Any]] = []
    for name, corpus in named:
        strata = [s or "" for s in corpus.columns[spec.stratum_column]] if by_stratum else [""] * len(corpus)
        target = out / dataset_file(name)
        write_corpus(corpus, target, extra={"stratum": strata})
        counts: dict[str, int] = {}
        for s in strata if by_stratum else ():
            counts[s] = counts.get(s, 0) + 1
        records.append({"name": name, "fingerprint": corpus.fingerprint(), "order_hash": corpus.order_hash(),
                        "size": len(corpus), "id_origin": corpus.id_origin, "file": dataset_file(name),
                        "file_sha256": sha256_file(target), "strata": dict(sorted(counts.items()))})
    origins = {r["id_origin"] for r in records}
    corpus_record = {"fingerprint": combined_fingerprint([r["fingerprint"] for r in records]),
                     "order_hash": combined_order_hash([r["order_hash"] for r in records]),
                     "size": sum(r["size"] for r in records), "id_origin": origins.pop() if len(origins) == 1
                     else "mixed", "file": None, "file_sha256": None, "strata": {},
                     "datasets": [r["name"] for r in records]}
    tuning_info = None
    if tuning is not None:
        copy = out / "inputs" / "tuning.csv"
        write_corpus(tuning, copy)
        tuning_info = {"file": "inputs/tuning.csv", "id_origin": tuning.id_origin, "size": len(tuning),
                       "fingerprint": tuning.fingerprint(), "file_sha256": sha256_file(copy)}
    return records, corpus_record, tuning_info


def dataset_records(campaign: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``datasets`` of a campaign record (empty for a one-corpus campaign)."""
    return list(campaign.get("datasets") or [])


__all__ = ["DATASETS_DIR", "check_datasets_disjoint", "combined_fingerprint", "dataset_file", "dataset_records",
           "load_datasets", "write_dataset_copies"]
