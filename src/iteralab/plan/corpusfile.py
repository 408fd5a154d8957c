"""What a corpus file is before it is read: its format (from its name), its texts' fingerprints and ids, and the
pieces of the one-line errors that name a file, a line and a field (C1).

The readers (:mod:`iteralab.plan.rows`, :mod:`iteralab.plan.scan`) and the in-memory corpus
(:mod:`iteralab.plan.corpus`) share these; this module reads no file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from iteralab.errors import CorpusError
from iteralab.kit.calcul_forfaits import CsvRecordError, numbered_records

IdOrigin = Literal["data", "content"]

_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz"}
MAX_CSV_FIELD = 2**31 - 1  # the C long limit of csv.field_size_limit on every platform


def normalize_text(text: str) -> str:
    """Whitespace-normalised text: runs of whitespace become one space, ends are trimmed."""
    return " ".join(text.split())


def text_fingerprint(text: str) -> str:
    """SHA-256 (hex) of the whitespace-normalised text; equal for texts that differ only in spacing."""
    return hashlib.sha256(normalize_text(text).encode("utf-8", "surrogatepass")).hexdigest()


def content_id(text: str) -> str:
    """The id derived from a text when the data has none: ``t-`` + 16 hex of its fingerprint."""
    return "t-" + text_fingerprint(text)[:16]


def short(value: str, limit: int = 60) -> str:
    """A value quoted for an error line, cut to ``limit`` characters."""
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def examples_of(values: Iterable[str], n: int = 3) -> str:
    """The first ``n`` values in sorted order, each quoted and shortened, for an error line's "e.g. …"."""
    return ", ".join(short(v) for v in sorted(values)[:n])


def columns_text(columns: Sequence[str]) -> str:
    """The columns a file has, for "columns found: …" (the first 20)."""
    shown = ", ".join(repr(c) for c in columns[:20])
    return shown + (f", … ({len(columns) - 20} more)" if len(columns) > 20 else "") if columns else "none"


def json_kind(value: Any) -> str:
    """What a JSON value is, in words, for "expected …, got …"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    return {list: "an array", dict: "an object", str: "a string"}.get(type(value), type(value).__name__)


def check_is_file(path: Path, where: str) -> None:
    """Refuse a folder or a missing path, with a hint on where relative paths start."""
    if path.is_dir():
        raise CorpusError(f"{where}: is a folder, not a corpus file", hint="give the path of the file")
    if not path.exists():
        raise CorpusError(f"{where}: file not found",
                          hint=f"check the path (relative paths start from {os.getcwd()})" if not path.is_absolute()
                          else "check the path (paths written in a protocol start from the protocol file's folder)")


def detect_format(path: str | os.PathLike[str], format: str | None = None) -> tuple[str, str | None]:
    """(format, compression) from the suffixes, e.g. ``x.csv.bz2`` -> ``("csv", "bz2")``."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    compression = _COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression:
        suffixes = suffixes[:-1]
    if format is None:
        format = _FORMATS.get(suffixes[-1]) if suffixes else None
        if format is None:
            raise CorpusError(
                f"{path}: cannot tell the format from the name",
                hint="name it .csv, .jsonl/.ndjson or .parquet (.csv/.jsonl may add .gz/.bz2/.xz), or give the format",
            )
    if format not in ("csv", "jsonl", "parquet"):
        raise CorpusError(f"{path}: unknown format {format!r} (csv, jsonl or parquet)")
    if format == "parquet" and compression:
        raise CorpusError(f"{path}: a Parquet file is compressed inside; remove the .{compression} layer")
    return format, compression


def decode_utf8(data: bytes, where: str) -> str:
    """Strict UTF-8 (a leading BOM is dropped); invalid bytes are refused with their line and offset."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_utf8(where, data.count(b"\n", 0, exc.start) + 1, data[exc.start], exc.start) from None
    return text[1:] if text.startswith("\ufeff") else text


def bad_utf8(where: str, line: int, byte: int, offset: int) -> CorpusError:
    """The refusal of a byte that is not UTF-8: its line, value and offset in the (decompressed) file."""
    return CorpusError(f"{where} line {line}: invalid UTF-8 (byte 0x{byte:02x} at byte offset {offset})",
                       hint="save the file as UTF-8")


def csv_row_error(where: str, start: int, exc: csv.Error) -> CorpusError:
    """The refusal of a row the csv module cannot parse (``start``: its first line)."""
    reason = "a quoted field opened here is never closed" if "end of data" in str(exc) else str(exc)
    return CorpusError(f"{where} line {start}: unreadable CSV row ({reason})")


def csv_width_error(where: str, start: int, end: int, fields: int, header_line: int, width: int) -> CorpusError:
    """The refusal of a row whose number of fields differs from the header's."""
    span = f" (the row spans lines {start}-{end})" if end > start else ""
    return CorpusError(
        f"{where} line {start}: unreadable CSV row, {fields} fields where the header "
        f"(line {header_line}) has {width}{span}",
        hint="quote texts that contain commas, quotes or line breaks",
    )


def read_csv_rows(text: str, where: str) -> tuple[int, list[str], list[tuple[int, list[str]]]]:
    """Parse CSV text held in memory into (header line, header, [(start line, fields)]); blank lines are skipped.

    Lines are counted as a person sees them in the file (header = line 1); a record whose quoted text
    spans several lines is numbered by its first line. Malformed quoting and rows whose number of
    fields differs from the header are refused.
    """
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, min(len(text) + 1, MAX_CSV_FIELD)))
    try:
        header: list[str] | None = None
        header_line = 0
        rows: list[tuple[int, list[str]]] = []
        for start, end, fields in numbered_records(csv.reader(io.StringIO(text, newline=""), strict=True)):
            if not fields:
                continue
            if header is None:
                header, header_line = fields, start
                continue
            if len(fields) != len(header):
                raise csv_width_error(where, start, end, len(fields), header_line, len(header))
            rows.append((start, fields))
    except CsvRecordError as exc:
        raise csv_row_error(where, exc.line, exc.error) from None
    finally:
        csv.field_size_limit(old_limit)
    if header is None:
        raise CorpusError(f"{where}: empty file (no header, no records)")
    return header_line, header, rows
