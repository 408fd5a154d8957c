"""The streamed corpus reader that ``lock`` and ``run`` use (``scan_corpus`` with a ``CorpusCopy`` sink) fuzzed
with the strategies that fuzz ``load_corpus`` (``tests/corpus_strategies.py``), against ``load_corpus`` itself:

- both accept or both refuse, and a refusal is ``load_corpus``'s one-line error, word for word;
- what both accept gives the same records (ids, texts, labels, stratum cells, in file order) to the sinks, the
  same digests (size, fingerprint, order hash, labels digest, id origin, stratum counts) and a campaign copy with
  ``write_corpus``'s bytes;
- a file of valid records is read by the batch reader alone (no fallback to the whole read).

Batches of 3 rows (sorted hashing in steps of 2), so that a corpus of a few records spans several batches.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from corpus_strategies import CLASSES, RANDOM_FILES, mutated_valid_files, record_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iteralab.campaign.corpuscopy import CorpusCopy
from iteralab.errors import CorpusError
from iteralab.plan import scan
from iteralab.plan.corpus import Corpus, load_corpus, write_corpus
from iteralab.plan.scan import scan_corpus, scan_of

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
#: The options lock and run pass (the protocol's classes; a stratum column when a stratum subgroup is planned).
OPTIONS = [dict(classes=list(CLASSES)), dict(classes=list(CLASSES), extra_columns=["stratum"]),
           dict(classes=list(CLASSES), require_labels=False)]


@dataclass
class Recorder:
    """A sink keeping the records it was handed, in order; ``None`` starts again."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def __call__(self, batch: Any) -> None:
        if batch is None:
            self.rows.clear()
            return
        extra = [batch.extra.get("stratum", [None] * len(batch.ids))]
        self.rows += zip(batch.ids, batch.texts, batch.labels, *extra)


def _records(corpus: Corpus) -> list[tuple[Any, ...]]:
    strata = corpus.columns.get("stratum", (None,) * len(corpus))
    return [(r.id, r.text, r.label, s) for r, s in zip(corpus.records, strata)]


def _digests(s: scan.CorpusScan) -> tuple[Any, ...]:
    return s.source, s.id_origin, s.size, s.fingerprint, s.order_hash, s.labels_sha256, s.extra_counts


def _agree(data: bytes, suffix: str, options: dict[str, Any], batch_only: bool = False) -> None:
    """``scan_corpus`` + ``CorpusCopy`` against ``load_corpus`` on one file. ``batch_only``: the file must be
    read without the fallback to ``load_corpus`` whenever ``load_corpus`` accepts it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"corpus{suffix}"
        path.write_bytes(data)
        try:
            reference: Corpus | None = load_corpus(path, **options)
            refused = None
        except CorpusError as exc:
            reference, refused = None, exc.message
        fell_back = []

        def whole_read(*args: Any, **kwargs: Any) -> Corpus:
            fell_back.append(1)
            return load_corpus(*args, **kwargs)

        stratum = {"stratum": "stratum"} if "stratum" in options.get("extra_columns", ()) else None
        copy, seen = CorpusCopy(Path(tmp) / "copy.csv", extra=stratum), Recorder()
        with mock.patch.object(scan, "BATCH_ROWS", 3), mock.patch.object(scan, "HASH_ROWS", 2), \
                mock.patch.object(scan, "load_corpus", whole_read):
            try:
                streamed = scan_corpus(path, sinks=[seen, copy], **options)
            except CorpusError as exc:
                copy.abort()
                assert reference is None, f"streamed read refused what load_corpus accepts: {exc.message}"
                assert exc.message == refused
                return
        assert reference is not None, f"streamed read accepted what load_corpus refuses ({refused}); " \
                                      f"fell back: {bool(fell_back)}"
        assert seen.rows == _records(reference)
        assert _digests(streamed) == _digests(scan_of(reference))
        copy.commit()
        write_corpus(reference, Path(tmp) / "reference.csv",
                     extra={"stratum": reference.columns["stratum"]} if stratum else None)
        assert (Path(tmp) / "copy.csv").read_bytes() == (Path(tmp) / "reference.csv").read_bytes()
        if batch_only:
            assert not fell_back, "a file of valid records was read whole, not in batches"


@FUZZ
@given(RANDOM_FILES, st.sampled_from(OPTIONS))
def test_streamed_read_of_random_bytes_agrees_with_load_corpus(file, options):
    _agree(*file, options)


@FUZZ
@given(mutated_valid_files(), st.sampled_from(OPTIONS))
def test_streamed_read_of_mutated_valid_files_agrees_with_load_corpus(file, options):
    _agree(*file, options)


@FUZZ
@given(record_files(), st.sampled_from(OPTIONS))
def test_streamed_read_of_odd_records_agrees_with_load_corpus(file, options):
    _agree(*file, options, batch_only=True)
