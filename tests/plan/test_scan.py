"""The corpus read in record batches (plan/scan.py, campaign/corpuscopy.py, the lock check at prepare): the same
digests and the same one-line refusals as the whole read it replaced (``oracles.whole_read_corpus``), whatever the
batch boundaries; a good file is read in batches alone, never record by record."""

import csv
import gzip
import io
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaign_factory import callable_campaign
from oracles import corpus_fingerprint, labels_digest, whole_read_corpus

from iteralab.lock import inputs
from iteralab.campaign.corpuscopy import CorpusCopy
from iteralab.lock.inputs import corpus_records
from iteralab.campaign.runner import prepare
from iteralab.errors import CorpusError, ProtocolError
from iteralab.plan import scan
from iteralab.plan.corpus import load_corpus, write_corpus
from iteralab.plan.lockfile import lock_path
from iteralab.plan.scan import scan_corpus

CLASSES = ["pos", "neg", "mixed"]


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 7 rows: a corpus of a few dozen rows spans several of them."""
    monkeypatch.setattr(scan, "BATCH_ROWS", 7)
    monkeypatch.setattr(scan, "HASH_ROWS", 5)


def _without_fallback(monkeypatch):
    """A good file must be read by the batch reader alone, never record by record by the careful read."""
    monkeypatch.setattr(scan, "CarefulRead", lambda *a, **k: pytest.fail("the batch reader fell back to the careful "
                                                                          "read"))


def _rows(n=40, seed=0, shuffle=False):
    rnd = random.Random(seed)
    rows = [(f"d{i:03d}", f"text {i} " + "é" * (i % 3) + (", with a comma" if i % 5 == 0 else "")
             + ("\nand a second line" if i % 11 == 0 else ""), CLASSES[i % 3]) for i in range(n)]
    if shuffle:
        rnd.shuffle(rows)
    return rows


def _csv(path, rows, header=("id", "text", "label")):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _expected(path, **kwargs):
    corpus = whole_read_corpus(path, **kwargs)
    labels = {r.id: [None, r.label] for r in corpus.records}
    return (len(corpus), corpus.fingerprint(), corpus.order_hash(), corpus.id_origin,
            labels_digest(dict(sorted(labels.items()))))


def _scanned(path, **kwargs):
    s = scan_corpus(path, **kwargs)
    return s.size, s.fingerprint, s.order_hash, s.id_origin, s.labels_sha256


@pytest.mark.parametrize("shuffle", [False, True], ids=["ids-ascending", "ids-shuffled"])
def test_batches_give_load_corpus_digests_csv(tmp_path, small_batches, shuffle):
    path = _csv(tmp_path / "c.csv", _rows(shuffle=shuffle))
    expected = _expected(path, classes=CLASSES)
    with pytest.MonkeyPatch.context() as mp:
        _without_fallback(mp)
        assert _scanned(path, classes=CLASSES) == expected


def test_batches_give_load_corpus_digests_other_formats(tmp_path, small_batches):
    rows = _rows(shuffle=True)
    jsonl = tmp_path / "c.jsonl.gz"
    jsonl.write_bytes(gzip.compress("".join(json.dumps({"id": i, "text": t, "label": lab}) + "\n"
                                            for i, t, lab in rows).encode()))
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows],
                             "label": [r[2] for r in rows]}), parquet, row_group_size=9)
    no_ids = _csv(tmp_path / "n.csv", [(t, lab) for _, t, lab in rows], header=("text", "label"))
    with pytest.MonkeyPatch.context() as mp:
        _without_fallback(mp)
        results = {path.name: _scanned(path, classes=CLASSES) for path in (jsonl, parquet, no_ids)}
    for path in (jsonl, parquet, no_ids):
        assert results[path.name] == _expected(path, classes=CLASSES), path.name
    assert results["n.csv"][3] == "content"


@pytest.mark.parametrize("line, edit, message", [
    (30, lambda r: (r[0], "   ", r[2]), "line 30, field text: empty text"),
    (30, lambda r: ("d005", r[1], r[2]), "line 30, field id: duplicate id 'd005' (first at line 7)"),
    (30, lambda r: (r[0], r[1], "meh"), "line 30, field label: label 'meh' is not one of the classes"),
    (30, lambda r: (r[0], r[1], ""), "line 30, field label: missing label"),
])
def test_bad_row_in_a_later_batch_gives_the_whole_read_error(tmp_path, small_batches, line, edit, message):
    rows = _rows()  # texts on one line, so that row k is on line k + 2
    rows = [(i, t.replace("\n", " "), lab) for i, t, lab in rows]
    rows[line - 2] = edit(rows[line - 2])
    path = _csv(tmp_path / "c.csv", rows)
    with pytest.raises(CorpusError) as reference:
        whole_read_corpus(path, classes=CLASSES)
    with pytest.raises(CorpusError) as streamed:
        scan_corpus(path, classes=CLASSES)
    with pytest.raises(CorpusError) as collected:
        load_corpus(path, classes=CLASSES)
    assert streamed.value.message == reference.value.message == collected.value.message
    assert f"{path} {message}" in streamed.value.message


def test_repeated_id_in_shuffled_corpus_and_bad_bytes_later_are_refused_like_the_whole_read(tmp_path,
                                                                                           small_batches):
    rows = [(i, t.replace("\n", " "), lab) for i, t, lab in _rows(shuffle=True)]
    rows[33] = (rows[2][0], "another text", rows[33][2])
    dup = _csv(tmp_path / "dup.csv", rows)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(_csv(tmp_path / "ok.csv", rows[:30]).read_bytes() + b'x1,"caf\xe9",pos\n')
    messages = {}
    for path in (dup, bad):
        with pytest.raises(CorpusError) as reference:
            whole_read_corpus(path, classes=CLASSES)
        with pytest.raises(CorpusError) as streamed:
            scan_corpus(path, classes=CLASSES)
        assert streamed.value.message == reference.value.message
        messages[path.name] = streamed.value.message
    assert messages["dup.csv"].startswith(f"{dup} line 35, field id: duplicate id {rows[2][0]!r} (first at line 4)")
    assert messages["bad.csv"].startswith(f"{bad} line 32, field text: invalid UTF-8")


def test_jsonl_whose_records_differ_in_keys_is_read_record_by_record_with_the_same_digests(tmp_path, small_batches):
    lines = [{"id": f"j{i}", "text": f"t{i}"} | ({"label": "pos"} if i % 4 else {}) for i in range(20)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert _scanned(path, require_labels=False) == _expected(path, require_labels=False)


def test_corpus_copy_has_write_corpus_bytes(tmp_path, small_batches):
    rows = _rows(shuffle=True) + [("r1", "a lone \r carriage return", "pos"), ("r2", 'a "quoted" text', "neg"),
                                  ("r3", "line\nfeed, comma", "pos"), ("r4", 'é "" ü', "neg"), ('r"5', "ok", "pos")]
    path = tmp_path / "c.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_ALL)
        writer.writerow(["id", "text", "label", "stratum"])
        writer.writerows((i, t, lab if k % 9 else "", "short" if k % 2 else "") for k, (i, t, lab) in enumerate(rows))
    copy = CorpusCopy(tmp_path / "copy.csv", extra={"stratum": "stratum"})
    scan_corpus(path, require_labels=False, extra_columns=["stratum"], sinks=[copy])
    digest = copy.commit()
    corpus = whole_read_corpus(path, require_labels=False, extra_columns=["stratum"])
    write_corpus(corpus, tmp_path / "reference.csv", extra={"stratum": corpus.columns["stratum"]})
    assert (tmp_path / "copy.csv").read_bytes() == (tmp_path / "reference.csv").read_bytes()
    import hashlib
    assert digest == hashlib.sha256((tmp_path / "copy.csv").read_bytes()).hexdigest()
    assert not list(tmp_path.glob(".tmp-*"))


def test_lock_records_are_compressed_and_a_changed_label_is_said_in_words(tmp_path):
    protocol = callable_campaign(tmp_path)
    record = json.loads(lock_path(protocol).read_text())
    locked = record["locks"][0]["inputs"]["corpus"]
    assert locked["records"]["encoding"] == inputs.RECORDS_ENCODING and "labels_sha256" in locked
    per_id = corpus_records(locked)
    assert len(per_id) == locked["size"] and all(len(v) == 2 for v in per_id.values())
    assert locked["labels_sha256"] == labels_digest(per_id)
    prepare(protocol, tmp_path / "out")
    corpus_file = tmp_path / "corpus.csv"
    text = corpus_file.read_text()
    first = next(r for r in csv.DictReader(io.StringIO(text)))
    other = next(c for c in ("plot", "fresh", "rotten") if c != first["label"])
    lines = text.split("\n")
    lines[1] = lines[1][: lines[1].rindex(first["label"])] + other + lines[1][lines[1].rindex(first["label"]) + len(
        first["label"]):]
    corpus_file.write_text("\n".join(lines))
    with pytest.raises(ProtocolError, match=r"corpus: 1 reference label changed \(e.g. '" + first["id"] + "'"):
        prepare(protocol, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()  # a refused input leaves no folder behind


def test_fingerprint_of_a_loaded_corpus_matches_its_scan(tmp_path):
    path = _csv(tmp_path / "c.csv", _rows(shuffle=True))
    fingerprint = corpus_fingerprint(whole_read_corpus(path, classes=CLASSES))
    scanned = scan_corpus(path, classes=CLASSES)
    assert fingerprint["fingerprint"] == scanned.fingerprint and fingerprint["labels_sha256"] == scanned.labels_sha256


def test_a_full_disk_while_copying_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch):
    import errno
    import os

    from iteralab.errors import RunError

    protocol = callable_campaign(tmp_path)
    real_put = CorpusCopy._put
    calls = []

    def full(self, text):
        calls.append(1)
        if len(calls) > 1:  # the header went through; the first batch does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_put(self, text)

    monkeypatch.setattr(CorpusCopy, "_put", full)
    with pytest.raises(RunError, match=r"inputs/corpus.csv: cannot write \(No space left on device\)"):
        prepare(protocol, tmp_path / "out")
    assert len(calls) == 2 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("block_size", [16, 64, 1 << 20])
def test_campaign_copy_is_read_back_in_pieces_at_record_boundaries(tmp_path, block_size):
    from iteralab.campaign.folder import read_corpus_batches

    rows = [(f"q{i:02d}", t, CLASSES[i % 3]) for i, t in enumerate([
        "plain", 'a "quoted" word', "comma, and\nline feed", "x" * 200, '""', "\r\nwindows\r\n", "é ü ß",
        "y" * (3 << 20), "end"])]  # a text longer than pyarrow's default parser block (1 MB)
    path = tmp_path / "c.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "text", "label"])
        writer.writerows(rows)
    corpus = load_corpus(path, classes=CLASSES)
    write_corpus(corpus, tmp_path / "copy.csv", extra={"stratum": ["s"] * len(corpus)})
    batches = list(read_corpus_batches(tmp_path / "copy.csv", ["id", "text", "stratum", "absent"],
                                       block_size=block_size))
    table = pa.Table.from_batches(batches)
    assert table.column_names == ["id", "text", "stratum"]
    assert list(zip(table.column("id").to_pylist(), table.column("text").to_pylist())) == \
        [(r.id, r.text) for r in corpus.records]
    assert set(table.column("stratum").to_pylist()) == {"s"}
    assert len(batches) > (3 if block_size == 16 else 0)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='a"\n,', max_size=40))
def test_the_last_record_boundary_is_the_last_line_feed_after_an_even_number_of_quotes(data):
    from iteralab.campaign.folder import _last_record_end

    raw = data.encode()
    boundaries = [i + 1 for i, byte in enumerate(raw) if byte == 10 and raw[:i].count(b'"') % 2 == 0]
    assert _last_record_end(raw) == (boundaries[-1] if boundaries else 0)


@pytest.mark.parametrize("ids", [
    [f"d{i:07d}" for i in range(70_000)],
    ["plain", "é ü", 'a "quote"', "back\\slash", "tab\there", "nl\nx", "\u2028"],
    ["only"], [],
], ids=["plain-many-chunks", "escapes", "one", "none"])
def test_pass_order_hash_is_the_digest_of_the_ids(ids):
    """A pass's order hash frames each id (8-byte little-endian UTF-8 length, then the bytes), written out here by
    hand, and equals the corpus order hash of the same ids."""
    import hashlib

    from iteralab.campaign.engines.passes import order_hash
    from iteralab.common.arrow import string_array
    from iteralab.plan.corpus import Corpus, Record

    framed = b"".join(len(i.encode()).to_bytes(8, "little") + i.encode() for i in ids)
    expected = hashlib.sha256(framed).hexdigest()
    assert order_hash(string_array(ids)) == expected
    assert order_hash(string_array(ids).slice(0)) == expected
    corpus = Corpus(tuple(Record(i, "t", None, n) for n, i in enumerate(ids)), "c.csv", "data")
    assert corpus.order_hash() == expected


def test_a_pass_reads_a_jsonl_corpus_through_the_reader_even_when_it_starts_again(tmp_path, small_batches):
    """A pass over a corpus that is neither CSV nor Parquet takes its ids and texts from the corpus reader; records
    whose keys differ make the reader start again record by record, and the pass still sees each record once."""
    from iteralab.campaign.engines.passes import _text_batches
    from iteralab.plan.scan import read_options

    lines = [{"id": f"j{i:02d}", "text": f"t{i}"} | ({"label": "pos"} if i % 4 else {}) for i in range(20)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    batches = list(_text_batches(str(path), read_options(require_labels=False), ["id", "text"]))
    table = pa.Table.from_batches(batches)
    assert table.column("id").to_pylist() == [x["id"] for x in lines]
    assert table.column("text").to_pylist() == [x["text"] for x in lines]
