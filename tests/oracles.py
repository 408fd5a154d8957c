"""Whole-read versions of what the library computes by streaming, kept only as test oracles: each reads a corpus
whole into Python objects (``load_corpus``) and builds the same record the streamed reader builds in record
batches, in the plainest way, so the tests can compare the two."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any

from iteralab.common.digest import string_digest
from iteralab.lock.datasets import first_overlap
from iteralab.lock.lockrecords import RECORDS_ENCODING
from iteralab.plan.corpus import Corpus, check_disjoint, load_corpus


def load_inputs(protocol_file: Any, dataset: Any = None) -> tuple[Corpus, Corpus | None]:
    """The final corpus (with its stratum column when a stratum subgroup is planned) and the tuning split, read
    whole with the protocol's columns and classes; overlapping splits are refused (P4)."""
    protocol = protocol_file.protocol
    spec = protocol.corpus
    columns = dict(id_column=spec.id_column, text_column=spec.text_column, label_column=spec.label_column,
                   classes=list(spec.classes), require_id="id_column" in spec.model_fields_set)
    needs_strata = any(sg.by == "stratum" for sg in protocol.subgroups)
    extra = [spec.stratum_column] if spec.stratum_column and needs_strata else []
    corpus = load_corpus(protocol_file.where(dataset.path if dataset else spec.path), **columns, extra_columns=extra)
    tuning = None
    if spec.tuning_path:
        tuning = load_corpus(protocol_file.where(spec.tuning_path), **columns)
        check_disjoint(tuning, corpus)
    return corpus, tuning


def labels_digest(records: dict[str, list[Any]]) -> str:
    """``labels_sha256`` of per-id records ``{id: [text hash, label]}``: their labels in id order."""
    return string_digest([records[k][1] for k in sorted(records)])


def corpus_fingerprint(corpus: Corpus) -> dict[str, Any]:
    """The lock's record of a corpus read whole: size, fingerprint (C1), id origin, the digest of the labels in id
    order, and per id a text digest and the label (compressed, ``RECORDS_ENCODING``)."""
    records = sorted(corpus.records, key=lambda r: r.id)
    short = [hashlib.sha256(r.text.encode("utf-8", "surrogatepass")).hexdigest()[:16] for r in records]
    rows = json.dumps([[r.id, h, r.label] for r, h in zip(records, short)], ensure_ascii=False,
                      separators=(",", ":"))
    data = base64.b64encode(zlib.compress(rows.encode("utf-8", "surrogatepass"), 6)).decode("ascii")
    return {"size": len(corpus), "fingerprint": corpus.fingerprint(), "id_origin": corpus.id_origin,
            "labels_sha256": labels_digest({r.id: [None, r.label] for r in records}),
            "records": {"encoding": RECORDS_ENCODING, "data": data}}


def check_datasets_disjoint(named: list[tuple[str, Corpus]]) -> None:
    """The datasets' disjointness (K6) over every record of each, read whole."""
    first_overlap([(name, [(r.id, r.text) for r in corpus.records]) for name, corpus in named])
