"""Hypothesis strategies for corpus files, shared by the fuzz of ``load_corpus`` (test_reliability.py) and of the
streamed reader that ``lock`` and ``run`` use (test_scan_fuzz.py), so that both readers meet the same inputs.

- :data:`RANDOM_FILES`: any bytes under a corpus suffix (CSV, JSONL, Parquet, compressed);
- :func:`mutated_valid_files`: a valid CSV or JSONL corpus with a few bytes inserted, deleted or replaced;
- :func:`record_files`: valid-looking corpora of odd records (any Unicode id and text, blank or unknown labels,
  a stratum column, no id column) written as CSV, JSONL or Parquet;
- :func:`compressed_files`: CSV or JSONL corpora (valid or mutated) compressed with gzip, bz2 or xz, then
  perhaps cut short, given trailing bytes or a second stream.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

CLASSES = ("plot", "fresh", "rotten")
SUFFIXES = [".csv", ".jsonl", ".parquet", ".csv.gz", ".jsonl.xz", ".csv.bz2"]
RANDOM_FILES = st.tuples(st.binary(max_size=300), st.sampled_from(SUFFIXES))

VALID_CSV = "id,text,label\nd1,a good story,fresh\nd2,\"dull, long\",rotten\nd3,the plot,plot\n".encode()
VALID_JSONL = b'{"id": "d1", "text": "a good story", "label": "fresh"}\n{"id": 2, "text": "dull", "label": "rotten"}\n'
PIECES = st.sampled_from([b",", b'"', b"\n", b"\r", b"\x00", b"\xff", b"\xe9", b"{", b"}", b":", b"null", b"1",
                          b'"id"', b'"text"', b"\\ud800", b"\\u00e9", b"\\", b"[", b"]", b"\xef\xbb\xbf"])

#: Texts of any Unicode a UTF-8 file can hold, not blank.
texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(str.strip)
ids = st.text(min_size=1, max_size=8).filter(str.strip)


@st.composite
def mutated_valid_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """(bytes, suffix): a valid CSV or JSONL corpus after up to five byte edits."""
    raw, suffix = draw(st.sampled_from([(VALID_CSV, ".csv"), (VALID_JSONL, ".jsonl")]))
    buf = bytearray(raw)
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, len(buf)))
        how = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(PIECES)
        if how == "insert":
            buf[at:at] = piece
        elif how == "delete":
            del buf[at:at + draw(st.integers(1, 8))]
        else:
            buf[at:at + len(piece)] = piece
    return bytes(buf), suffix


@st.composite
def record_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """(bytes, suffix): records with odd ids and texts; sometimes a repeated id or text, a blank or unknown
    label, an integer id, no id column, a stratum column with blank cells."""
    n = draw(st.integers(1, 9))
    with_id, with_stratum = draw(st.booleans()), draw(st.booleans())
    rows = [{"id": draw(ids), "text": draw(texts), "label": draw(st.sampled_from(CLASSES)),
             "stratum": draw(st.sampled_from(["short", "long", ""]))} for _ in range(n)]
    if draw(st.integers(0, 3)) == 0:  # a blank or unknown label, now and then
        rows[draw(st.integers(0, n - 1))]["label"] = draw(st.sampled_from(["", " ", "meh", "Plot"]))
    if n > 1 and draw(st.integers(0, 4)) == 0:  # a repeated id or text, now and then
        key = draw(st.sampled_from(["id", "text"]))
        rows[-1][key] = rows[0][key]
    columns = ["id"] * with_id + ["text", "label"] + ["stratum"] * with_stratum
    fmt = draw(st.sampled_from(["csv", "jsonl", "parquet"]))
    if fmt == "csv":
        buf = io.StringIO(newline="")
        quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]))
        writer = csv.writer(buf, lineterminator=draw(st.sampled_from(["\n", "\r\n"])), quoting=quoting)
        writer.writerow(columns)
        writer.writerows([[r[c] for c in columns] for r in rows])
        return buf.getvalue().encode("utf-8"), ".csv"
    if fmt == "jsonl":
        int_ids = with_id and draw(st.booleans())
        lines = []
        for k, r in enumerate(rows):
            obj = {c: r[c] for c in columns}
            if int_ids:
                obj["id"] = k if not draw(st.booleans()) else r["id"]  # integers beside strings
            lines.append(json.dumps(obj, ensure_ascii=draw(st.booleans())) + "\n")
        return "".join(lines).encode("utf-8"), ".jsonl"
    table = pa.table({c: pa.array([r[c] for r in rows], pa.string()) for c in columns})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=draw(st.integers(1, 4)))
    return sink.getvalue(), ".parquet"


@st.composite
def compressed_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """(bytes, suffix): a CSV or JSONL corpus compressed, then now and then damaged at the stream level."""
    raw, suffix = draw(st.one_of(record_files().filter(lambda f: f[1] != ".parquet"), mutated_valid_files()))
    layer, compress = draw(st.sampled_from([(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)]))
    data = compress(raw)
    how = draw(st.sampled_from(["whole", "whole", "cut", "trailing", "twice", "empty"]))
    if how == "cut":
        data = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    elif how == "trailing":
        data += draw(st.sampled_from([b"\0\0\0\0", b"garbage", b"\x1f\x8b", b"BZh9"]))
    elif how == "twice":
        data += compress(draw(st.sampled_from([raw, b"\n", b"more"])))
    elif how == "empty":
        data = b""
    return data, suffix + layer
