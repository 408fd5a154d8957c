"""A corpus read record by record, streamed, with every check in the order a person reads the file: its shape
first (compression, UTF-8, CSV or JSON syntax, Parquet schema), then its columns, then each record in file
order. The first fault is refused in one line naming the file, the line (Parquet: the row) and the field (C1).

:mod:`iteralab.plan.scan` reads in record batches and comes here only when a batch fails a check or has a shape
it does not take (JSONL records whose keys differ, repeated derived ids to skip): this read names the fault, or
reads the records it accepts. It reads the file two or three times and keeps each id with its line (to name the
first occurrence of a repeated id), never the texts.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.errors import CorpusError
from iteralab.kit.calcul_forfaits import CsvRecordError, numbered_records
from iteralab.plan.corpusfile import (
    MAX_CSV_FIELD,
    bad_utf8,
    check_is_file,
    columns_text,
    csv_row_error,
    csv_width_error,
    json_kind,
    short,
    text_fingerprint,
)

#: Bytes read (or decompressed) per step.
CHUNK = 1 << 20


@dataclass(frozen=True)
class ReadOptions:
    """What a reader is asked: the columns, the classes a label must be one of, the extra columns to carry,
    whether labels and the named id column are required, and what to do with a repeated text in a file without
    ids (``"skip"`` leaves it out and says so in the reader's notes)."""

    id_column: str = "id"
    text_column: str = "text"
    label_column: str = "label"
    classes: tuple[str, ...] | None = None
    require_labels: bool = True
    extra_columns: tuple[str, ...] = ()
    require_id: bool = False
    duplicate_texts: Literal["refuse", "skip"] = "refuse"

    @property
    def wanted(self) -> list[str]:
        return [self.id_column, self.text_column, self.label_column, *self.extra_columns]


@dataclass(frozen=True)
class Batch:
    """Validated records of one record batch, in file order (ids as strings, ``None`` for an absent label);
    ``lines``: where each starts in its file (Parquet: the row number), when the reader tracked it."""

    ids: list[str]
    texts: list[str]
    labels: list[str | None]
    extra: dict[str, list[str | None]]
    lines: list[int] | None = None


# ------------------------------------------------------------------------------------------------- bytes


def _not_valid(where: str, compression: str, exc: BaseException) -> CorpusError:
    reason = "CRC check failed" if str(exc).startswith("CRC check failed") else str(exc)
    return CorpusError(f"{where}: not a valid {compression} file ({reason})")


def _read(fh: Any, where: str) -> bytes:
    try:
        return fh.read(CHUNK)
    except OSError as exc:
        raise CorpusError(f"{where}: cannot be read ({exc.strerror or exc})") from None


def _multistream(fh: Any, where: str, compression: str) -> Iterator[bytes]:
    """bz2 or xz streams one after the other, as ``bz2.decompress`` and ``lzma.decompress`` read them: an error in
    the first stream refuses the file, data after a complete stream that is not a stream is ignored."""
    new: Callable[[], Any] = bz2.BZ2Decompressor if compression == "bz2" else lzma.LZMADecompressor
    decomp, completed = new(), False
    data = _read(fh, where)
    if not data and compression == "bz2":
        return
    while True:
        try:
            out = decomp.decompress(data)
        except (OSError, lzma.LZMAError) as exc:
            if completed:
                return
            raise _not_valid(where, compression, exc) from None
        if out:
            yield out
        if decomp.eof:
            completed = True
            data = decomp.unused_data or _read(fh, where)
            if not data:
                return
            decomp = new()
            continue
        data = _read(fh, where)
        if not data:
            raise CorpusError(f"{where}: not a valid {compression} file (Compressed data ended before the "
                              "end-of-stream marker was reached)")


def byte_chunks(path: Path, where: str, compression: str | None) -> Iterator[bytes]:
    """The file's bytes, decompressed, in chunks; a missing, unreadable or badly compressed file is refused."""
    check_is_file(path, where)
    try:
        fh = open(path, "rb")  # noqa: SIM115  # closed below, after the last chunk
    except OSError as exc:
        raise CorpusError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    with fh:
        if compression in ("bz2", "xz"):
            yield from _multistream(fh, where, compression)
        elif compression is None:
            while chunk := _read(fh, where):
                yield chunk
        else:
            source = gzip.GzipFile(fileobj=fh)
            while True:
                try:
                    chunk = source.read(CHUNK)
                except (OSError, EOFError, ValueError, zlib.error) as exc:
                    raise _not_valid(where, compression, exc) from None
                if not chunk:
                    return
                yield chunk


class _Chunks(io.RawIOBase):
    """A file object over :func:`byte_chunks`, for ``io.TextIOWrapper``."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.rest, self.at = chunks, memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self.at == len(self.rest):
            chunk = next(self.chunks, b"")
            if not chunk:
                return 0
            self.rest, self.at = memoryview(chunk), 0
        n = min(len(buffer), len(self.rest) - self.at)
        buffer[:n] = self.rest[self.at:self.at + n]
        self.at += n
        return n


def text_of(path: Path, where: str, compression: str | None, newline: str,
            encoding: str = "utf-8-sig", errors: str = "strict") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BufferedReader(_Chunks(byte_chunks(path, where, compression))), encoding=encoding,
                            errors=errors, newline=newline)


@dataclass
class _Bytes:
    """What one pass over the bytes found: the first byte that is not UTF-8 (line, value, offset) and whether
    the text holds anything but whitespace (a leading BOM dropped)."""

    bad: tuple[int, int, int] | None = None
    blank: bool = True


def _scan_bytes(path: Path, where: str, compression: str | None) -> _Bytes:
    found, offset, lines, pending, first = _Bytes(), 0, 0, b"", True
    for chunk in byte_chunks(path, where, compression):  # to the end: a compression error comes first
        if found.bad:
            continue
        data = pending + chunk
        try:
            text, used, pending = data.decode("utf-8"), len(data), b""
        except UnicodeDecodeError as exc:
            if exc.end != len(data) or exc.reason != "unexpected end of data":
                found.bad = (lines + data.count(b"\n", 0, exc.start) + 1, data[exc.start], offset + exc.start)
                continue
            text, used, pending = data[:exc.start].decode("utf-8"), exc.start, data[exc.start:]
        if first and text:
            text, first = text[1:] if text.startswith("\ufeff") else text, False
        found.blank = found.blank and not text.strip()
        lines, offset = lines + data.count(b"\n", 0, used), offset + used
    if pending and not found.bad:
        found.bad = (lines + 1, pending[0], offset)
    return found


# ------------------------------------------------------------------------------------------ file shapes


@dataclass
class Shape:
    """A file's columns as its rows will be checked: ``at`` (the location for a missing-column error), the
    columns, and for CSV the header's line and its fields."""

    at: str
    columns: list[str]
    header: list[str] = field(default_factory=list)
    header_line: int = 0


def _csv_rows(fh: io.TextIOWrapper, where: str) -> Iterator[tuple[int, int, list[str]]]:
    """(start line, end line, fields) of each non-blank CSV row; unreadable quoting refused at its line."""
    old_limit = csv.field_size_limit()
    csv.field_size_limit(MAX_CSV_FIELD)
    try:
        for start, end, fields in numbered_records(csv.reader(fh, strict=True)):
            if fields:
                yield start, end, fields
    except CsvRecordError as exc:
        raise csv_row_error(where, exc.line, exc.error) from None
    finally:
        csv.field_size_limit(old_limit)


def _bad_utf8_column(path: Path, where: str, compression: str | None) -> str | None:
    """The CSV column of the first undecodable byte, when the whole file parses (``"(header)"`` in the header)."""
    found: str | None = None
    header: list[str] | None = None
    header_line = 0
    try:
        with text_of(path, where, compression, "", encoding="utf-8", errors="surrogateescape") as fh:
            for start, end, fields in _csv_rows(fh, where):
                if header is None:
                    header, header_line = fields, start
                elif len(fields) != len(header):
                    return None
                if found is None:
                    bad = next((k for k, cell in enumerate(fields)
                                if any("\udc80" <= ch <= "\udcff" for ch in cell)), None)
                    if bad is not None:
                        found = "(header)" if header_line == start else header[bad]
    except CorpusError:
        return None
    return found if header is not None else None


def _csv_shape(path: Path, where: str, compression: str | None, wanted: list[str]) -> Shape:
    header: list[str] | None = None
    header_line = records = 0
    with text_of(path, where, compression, "") as fh:
        for start, end, fields in _csv_rows(fh, where):
            if header is None:
                header, header_line = fields, start
                continue
            if len(fields) != len(header):
                raise csv_width_error(where, start, end, len(fields), header_line, len(header))
            records += 1
    if header is None:
        raise CorpusError(f"{where}: empty file (no header, no records)")
    for name in wanted:
        places = [i + 1 for i, col in enumerate(header) if col == name]
        if len(places) > 1:
            raise CorpusError(
                f"{where} line {header_line}: column {name!r} appears {len(places)} times (columns {places})")
    if not records:
        raise CorpusError(f"{where}: no records after the header (line {header_line})")
    return Shape(f"{where} line {header_line}", header, header, header_line)


def _json_lines(fh: io.TextIOWrapper, where: str) -> Iterator[tuple[int, dict]]:
    """(line, object) of each non-blank JSON line; malformed JSON or a non-object refused at its line."""
    for number, raw in enumerate(fh, start=1):
        raw = raw[:-1] if raw.endswith("\n") else raw
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except RecursionError:
            raise CorpusError(f"{where} line {number}: unreadable JSON line (nested too deeply)") from None
        except ValueError as exc:
            reason = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise CorpusError(f"{where} line {number}: malformed JSON ({reason})") from None
        if not isinstance(obj, dict):
            raise CorpusError(f"{where} line {number}: expected a JSON object, got {json_kind(obj)}")
        yield number, obj


def _jsonl_shape(path: Path, where: str, compression: str | None) -> Shape:
    columns: dict[str, None] = {}
    records = 0
    with text_of(path, where, compression, "\n") as fh:
        for _, obj in _json_lines(fh, where):
            columns.update(dict.fromkeys(obj))
            records += 1
    if not records:
        raise CorpusError(f"{where}: empty file (no JSON lines)")
    return Shape(where, list(columns))


def _parquet_file(path: Path, where: str) -> pq.ParquetFile:
    check_is_file(path, where)
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        raise CorpusError(f"{where}: not a readable Parquet file (Could not open Parquet input source "
                          f"'{os.fspath(path)}': {first})") from None


def _parquet_shape(path: Path, where: str, wanted: list[str]) -> Shape:
    handle = _parquet_file(path, where)
    try:
        for _ in handle.iter_batches():  # every column, as a whole read would, for damaged pages
            pass
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorpusError(f"{where}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if handle.metadata.num_rows == 0:
        raise CorpusError(f"{where}: no records (0 rows)")
    columns = list(handle.schema_arrow.names)
    for name in wanted:
        if name not in columns:
            continue
        if columns.count(name) > 1:
            raise CorpusError(f"{where}: column {name!r} appears {columns.count(name)} times")
        kind = handle.schema_arrow.field(name).type
        value = kind.value_type if pa.types.is_dictionary(kind) else kind
        if not (pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_integer(value)):
            raise CorpusError(f"{where}, field {name}: Parquet column type {kind} (strings or integers expected)")
        row = 0
        for batch in handle.iter_batches(batch_size=CHUNK >> 6, columns=[name]):
            try:
                batch.column(0).to_pylist()
            except UnicodeDecodeError:
                bad = next(i for i in range(batch.num_rows) if not _decodes(batch.column(0), i))
                raise CorpusError(f"{where} row {row + bad + 1}, field {name}: invalid UTF-8") from None
            row += batch.num_rows
    return Shape(where, columns)


def _decodes(column: Any, i: int) -> bool:
    try:
        column[i].as_py()
    except UnicodeDecodeError:
        return False
    return True


def file_shape(path: Path, where: str, fmt: str, compression: str | None, options: ReadOptions) -> Shape:
    """The file read through once (twice when a byte is not UTF-8) without keeping its rows: the first fault of
    its shape is refused, then a column the options need and the file lacks."""
    if fmt == "parquet":
        shape = _parquet_shape(path, where, options.wanted)
    else:
        found = _scan_bytes(path, where, compression)
        if found.bad:
            line, byte, offset = found.bad
            column = _bad_utf8_column(path, where, compression) if fmt == "csv" else None
            error = bad_utf8(where, line, byte, offset)
            if column is None:
                raise error
            head, reason = error.message.split(": ", 1)
            raise CorpusError(f"{head}, field {column}: {reason}", hint=error.hint)
        if found.blank:
            raise CorpusError(f"{where}: empty file")
        shape = _csv_shape(path, where, compression, options.wanted) if fmt == "csv" else \
            _jsonl_shape(path, where, compression)
    check_columns(shape, options)
    return shape


def check_columns(shape: Shape, options: ReadOptions) -> None:
    """The columns the caller needs are in the file: the texts, the labels and the ids when required, the extras."""
    at, columns = shape.at, shape.columns
    if options.text_column not in columns:
        raise CorpusError(f"{at}: no text column {options.text_column!r} (columns found: {columns_text(columns)})",
                          hint="name the text column with the text_column option")
    if options.require_labels and options.label_column not in columns:
        raise CorpusError(
            f"{at}: no label column {options.label_column!r} (columns found: {columns_text(columns)})",
            hint="name the label column with the label_column option, or load without requiring labels")
    if options.require_id and options.id_column not in columns:
        raise CorpusError(
            f"{at}: no id column {options.id_column!r} (columns found: {columns_text(columns)})",
            hint="check the spelling of corpus.id_column; without it, ids are derived from the texts")
    absent = [c for c in options.extra_columns if c not in columns]
    if absent:
        raise CorpusError(f"{at}: no column {absent[0]!r} (columns found: {columns_text(columns)})",
                          hint="add the column to the corpus file or remove it from the protocol")


# ---------------------------------------------------------------------------------------------- records


def _cells(path: Path, where: str, fmt: str, compression: str | None, shape: Shape,
           wanted: list[str]) -> Iterator[tuple[int, dict]]:
    """(line or row, the wanted cells) of each record of a file whose shape was checked."""
    if fmt == "csv":
        index = {name: shape.header.index(name) for name in wanted if name in shape.header}
        with text_of(path, where, compression, "") as fh:
            rows = _csv_rows(fh, where)
            next(rows)  # the header
            for start, _, fields in rows:
                yield start, {name: fields[i] for name, i in index.items()}
    elif fmt == "jsonl":
        with text_of(path, where, compression, "\n") as fh:
            yield from _json_lines(fh, where)
    else:
        present = [name for name in dict.fromkeys(wanted) if name in shape.columns]
        row = 0
        for batch in _parquet_file(path, where).iter_batches(batch_size=CHUNK >> 6, columns=present):
            values = {name: batch.column(name).to_pylist() for name in present}
            for i in range(batch.num_rows):
                row += 1
                yield row, {name: column[i] for name, column in values.items()}


def _cell(value: Any, loc: str, name: str, numbers_ok: bool) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CorpusError(f"{loc}, field {name}: not valid Unicode text (lone surrogate at character {exc.start})",
                              hint="fix the escape sequence in the file") from None
        return value
    if value is None:
        return value
    if numbers_ok and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    expected = "a string or an integer" if numbers_ok else "a string"
    raise CorpusError(f"{loc}, field {name}: expected {expected}, got {json_kind(value)}")


class _Checker:
    """The checks of one record after another, keeping each id with its line (and, for ids derived from the
    texts, the text's fingerprint) to name a repeated id's first occurrence."""

    def __init__(self, where: str, unit: str, options: ReadOptions, has_id: bool, has_label: bool) -> None:
        self.where, self.unit, self.o, self.has_id, self.has_label = where, unit, options, has_id, has_label
        self.allowed = set(options.classes) if options.classes is not None else None
        self.first_at: dict[str, int] = {}
        self.full_fp: dict[str, str] = {}
        self.skipped: list[str] = []

    def record(self, line: int, cells: dict) -> tuple[str, str, str | None, list[str | None]] | None:
        """(id, text, label, extra cells) of a valid record, ``None`` for a repeated text skipped."""
        o, loc, unit = self.o, f"{self.where} {self.unit} {line}", self.unit
        text = _cell(cells.get(o.text_column), loc, o.text_column, numbers_ok=False)
        if text is None or not text.strip():
            raise CorpusError(f"{loc}, field {o.text_column}: empty text", hint="remove the record or fill its text")
        if self.has_id:
            rid = _cell(cells.get(o.id_column), loc, o.id_column, numbers_ok=True)
            if rid is None or not rid.strip():
                raise CorpusError(f"{loc}, field {o.id_column}: missing or empty id")
            if rid in self.first_at:
                raise CorpusError(f"{loc}, field {o.id_column}: duplicate id {short(rid)} "
                                  f"(first at {unit} {self.first_at[rid]})")
        else:
            fp = text_fingerprint(text)
            rid = "t-" + fp[:16]
            if rid in self.first_at:
                same = self.full_fp[rid] == fp
                if same and o.duplicate_texts == "skip":
                    self.skipped.append(f"{unit} {line}: same text as {unit} {self.first_at[rid]} (derived id {rid})")
                    return None
                raise CorpusError(
                    f"{loc}, field {o.text_column}: " + ("same text as" if same else "derived id collides with")
                    + f" {unit} {self.first_at[rid]} (derived id {rid}; the file has no {o.id_column!r} column)",
                    hint="remove the duplicate, or add an id column so each record keeps its own id")
            self.full_fp[rid] = fp
        self.first_at[rid] = line
        return rid, text, self._label(loc, cells), [_cell(cells.get(n), loc, n, numbers_ok=True)
                                                    for n in o.extra_columns]

    def _label(self, loc: str, cells: dict) -> str | None:
        o = self.o
        label = _cell(cells.get(o.label_column), loc, o.label_column, numbers_ok=True) if self.has_label else None
        if label is not None and not label.strip():
            label = None
        if label is None and o.require_labels:
            raise CorpusError(f"{loc}, field {o.label_column}: missing label")
        if label is not None and self.allowed is not None and label not in self.allowed:
            raise CorpusError(f"{loc}, field {o.label_column}: label {short(label)} is not one of the classes "
                              f"({', '.join(o.classes or ())})")  # in the protocol's order
        return label


class CarefulRead:
    """One file read record by record with every check in file order (see the module's note). ``batches()``
    yields the accepted records; ``id_origin`` and ``notes`` (repeated texts skipped) are known once it is done."""

    def __init__(self, path: Path, where: str, fmt: str, compression: str | None, options: ReadOptions,
                 batch_rows: int) -> None:
        self.path, self.where, self.fmt, self.compression = path, where, fmt, compression
        self.options, self.batch_rows = options, batch_rows
        self.id_origin: str | None = None
        self.notes: list[str] = []

    def batches(self) -> Iterator[Batch]:
        o = self.options
        shape = file_shape(self.path, self.where, self.fmt, self.compression, o)
        has_id = o.id_column in shape.columns
        self.id_origin = "data" if has_id else "content"
        checker = _Checker(self.where, "row" if self.fmt == "parquet" else "line", o, has_id,
                           o.label_column in shape.columns)
        self.notes = checker.skipped
        rows: list[tuple[str, str, str | None, list[str | None]]] = []
        lines: list[int] = []
        for line, cells in _cells(self.path, self.where, self.fmt, self.compression, shape, o.wanted):
            record = checker.record(line, cells)
            if record is not None:
                rows.append(record)
                lines.append(line)
            if len(rows) == self.batch_rows:
                yield self._batch(rows, lines)
                rows, lines = [], []
        if rows:
            yield self._batch(rows, lines)

    def _batch(self, rows: list[tuple[str, str, str | None, list[str | None]]], lines: list[int]) -> Batch:
        extra = {name: [r[3][k] for r in rows] for k, name in enumerate(self.options.extra_columns)}
        return Batch([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], extra, lines)
