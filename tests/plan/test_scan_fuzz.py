"""The one corpus reader (``plan/scan.py``), as ``lock`` and ``run`` use it (``scan_corpus`` with a ``CorpusCopy``
sink) and as the stages that need every text use it (``load_corpus``, a collect-all over it), fuzzed with the
strategies of ``tests/support/corpus_strategies.py`` against the whole read it replaced (``oracles.whole_read_corpus``):

- both accept or both refuse, and a refusal is the whole read's one-line error, word for word;
- what both accept gives the same records (ids, texts, labels, stratum cells, lines, in file order) to the sinks
  and to ``load_corpus``, the same digests (size, fingerprint, order hash, labels digest, id origin, stratum
  counts) and a campaign copy with ``write_corpus``'s bytes;
- a file of valid records is read in batches alone (never record by record by the careful read), and the careful
  read alone (forced) agrees with the whole read too.

Batches of 3 rows (sorted hashing in steps of 2), so that a corpus of a few records spans several batches.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from corpus_strategies import CLASSES, RANDOM_FILES, compressed_files, mutated_valid_files, record_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import scan_of, whole_read_corpus

from iteralab.campaign.corpuscopy import CorpusCopy
from iteralab.errors import CorpusError
from iteralab.plan import scan
from iteralab.plan.corpus import Corpus, load_corpus, write_corpus
from iteralab.plan.rows import CarefulRead
from iteralab.plan.scan import scan_corpus

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


def _lines(corpus: Corpus) -> list[tuple[Any, ...]]:
    return [(r.id, r.line) for r in corpus.records]


def _agree(data: bytes, suffix: str, options: dict[str, Any], batch_only: bool = False,
           careful_only: bool = False) -> None:
    """``scan_corpus`` + ``CorpusCopy`` and ``load_corpus`` against the whole read on one file. ``batch_only``: a
    file the whole read accepts must be read in batches alone; ``careful_only``: the batch read is skipped."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"corpus{suffix}"
        path.write_bytes(data)
        try:
            reference: Corpus | None = whole_read_corpus(path, **options)
            refused = None
        except CorpusError as exc:
            reference, refused = None, exc.message
        careful = []

        class Careful(CarefulRead):
            def batches(self) -> Any:
                careful.append(1)
                return super().batches()

        def no_batches(self: Any) -> Any:
            raise scan._Refused

        stratum = {"stratum": "stratum"} if "stratum" in options.get("extra_columns", ()) else None
        copy, seen = CorpusCopy(Path(tmp) / "copy.csv", extra=stratum), Recorder()
        with mock.patch.object(scan, "BATCH_ROWS", 3), mock.patch.object(scan, "HASH_ROWS", 2), \
                mock.patch.object(scan, "CarefulRead", Careful), \
                mock.patch.object(scan.CorpusReader, "_batched", no_batches) if careful_only else mock.MagicMock():
            try:
                streamed = scan_corpus(path, sinks=[seen, copy], **options)
            except CorpusError as exc:
                copy.abort()
                assert reference is None, f"streamed read refused what the whole read accepts: {exc.message}"
                assert exc.message == refused
                with pytest.raises(CorpusError) as collected:
                    load_corpus(path, **options)
                assert collected.value.message == refused
                return
            assert reference is not None, f"streamed read accepted what the whole read refuses ({refused}); " \
                                          f"careful read: {bool(careful)}"
            collected = load_corpus(path, **options)
        assert seen.rows == _records(reference) == _records(collected)
        assert _lines(collected) == _lines(reference)
        assert collected.id_origin == reference.id_origin
        assert _digests(streamed) == _digests(scan_of(reference))
        copy.commit()
        write_corpus(reference, Path(tmp) / "reference.csv",
                     extra={"stratum": reference.columns["stratum"]} if stratum else None)
        assert (Path(tmp) / "copy.csv").read_bytes() == (Path(tmp) / "reference.csv").read_bytes()
        if batch_only:
            assert not careful, "a file of valid records was read record by record, not in batches"
        if careful_only:
            assert careful


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


@FUZZ
@given(compressed_files(), st.sampled_from(OPTIONS))
def test_streamed_read_of_compressed_files_agrees_with_the_whole_read(file, options):
    _agree(*file, options)


@FUZZ
@given(st.one_of(record_files(), mutated_valid_files(), RANDOM_FILES, compressed_files()), st.sampled_from(OPTIONS))
def test_careful_read_alone_agrees_with_the_whole_read(file, options):
    _agree(*file, options, careful_only=True)
