"""The corpus: persistent ids, fingerprints, length strata and the tuning/final split (C1, C2, P4, X5).

A corpus is read from CSV, JSONL or Parquet into frozen :class:`Record` objects. Every record has a
persistent id, taken from the data or derived from the text (``t-`` + 16 hex of the SHA-256 of the
whitespace-normalised text; ``id_origin="content"`` records which). Anything that would make ids or
texts ambiguous is refused with a one-line :class:`CorpusError` naming the file, the line and the field.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import lzma
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.common.digest import pairs_digest, string_digest
from iteralab.common.files import write_bytes_atomic
from iteralab.errors import CorpusError

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


def _short(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def examples_of(values: Iterable[str], n: int = 3) -> str:
    """The first ``n`` values in sorted order, each quoted and shortened, for an error line's "e.g. …"."""
    return ", ".join(_short(v) for v in sorted(values)[:n])


@dataclass(frozen=True)
class Record:
    """One input text. ``line`` is where it starts in its file (1-based; for Parquet the row number)."""

    id: str
    text: str
    label: str | None
    line: int


@dataclass(frozen=True)
class Corpus:
    """An ordered, id-unique set of records with the file it came from and where its ids came from.

    ``notes`` tells what the loader dropped or changed (empty for :func:`load_corpus`, which refuses).
    """

    records: tuple[Record, ...]
    source: str
    id_origin: IdOrigin
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: Extra columns asked of the loader (e.g. a length stratum): name -> one value per record, in order.
    columns: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", tuple(self.records))
        object.__setattr__(self, "notes", tuple(self.notes))
        if self.id_origin not in ("data", "content"):
            raise CorpusError(f"{self.source}: id_origin must be 'data' or 'content', not {self.id_origin!r}")
        if len(self._index) != len(self.records):
            seen: set[str] = set()
            dups: set[str] = set()
            for r in self.records:
                (dups if r.id in seen else seen).add(r.id)
            raise CorpusError(f"{self.source}: {len(dups)} duplicate ids (e.g. {examples_of(dups)})")

    @cached_property
    def _index(self) -> dict[str, int]:
        return {r.id: i for i, r in enumerate(self.records)}

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.records)

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(r.text for r in self.records)

    @property
    def labels(self) -> tuple[str | None, ...]:
        return tuple(r.label for r in self.records)

    def __len__(self) -> int:
        return len(self.records)

    def label_counts(self) -> dict[str | None, int]:
        """How many records carry each label (``None`` for unlabelled), labels sorted."""
        counts: dict[str | None, int] = {}
        for r in self.records:
            counts[r.label] = counts.get(r.label, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))

    def fingerprint(self) -> str:
        """The digest of the (id, text) pairs sorted by id (:mod:`iteralab.common.digest`): independent of order,
        sensitive to any character."""
        pairs = sorted((r.id, r.text) for r in self.records)
        return pairs_digest([p[0] for p in pairs], [p[1] for p in pairs])

    def order_hash(self) -> str:
        """The digest of the ids in pass order (C1: the pass order is recorded)."""
        return string_digest([r.id for r in self.records])

    def text_fingerprints(self) -> set[str]:
        return {text_fingerprint(r.text) for r in self.records}

    def subset(self, ids: Iterable[str]) -> Corpus:
        """The records whose id is in ``ids``, in this corpus's order. Unknown ids are refused."""
        wanted = set(ids)
        unknown = wanted - self._index.keys()
        if unknown:
            raise CorpusError(f"{self.source}: {len(unknown)} ids are not in the corpus (e.g. {examples_of(unknown)})")
        kept = tuple(r for r in self.records if r.id in wanted)
        return Corpus(kept, self.source, self.id_origin, self.notes)

    def reordered(self, ids: Sequence[str]) -> Corpus:
        """The same records in the order of ``ids``, which must list every id exactly once."""
        ids = list(ids)
        unknown = set(ids) - self._index.keys()
        missing = self._index.keys() - set(ids)
        if unknown or missing or len(ids) != len(self.records):
            raise CorpusError(
                f"{self.source}: a new order must list each of the {len(self.records)} ids once "
                f"(got {len(ids)}; {len(unknown)} unknown, {len(missing)} missing"
                + (f", e.g. missing {examples_of(missing)}" if missing else "")
                + (f", e.g. unknown {examples_of(unknown)}" if unknown else "")
                + ")"
            )
        return Corpus(tuple(self.records[self._index[i]] for i in ids), self.source, self.id_origin, self.notes)


# ---------------------------------------------------------------------------------------------- reading


def _check_is_file(path: Path, where: str) -> None:
    if path.is_dir():
        raise CorpusError(f"{where}: is a folder, not a corpus file", hint="give the path of the file")
    if not path.exists():
        raise CorpusError(f"{where}: file not found",
                          hint=f"check the path (relative paths start from {os.getcwd()})" if not path.is_absolute()
                          else "check the path (paths written in a protocol start from the protocol file's folder)")


def _read_bytes(path: Path, where: str, compression: str | None) -> bytes:
    _check_is_file(path, where)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if compression is None:
        return data
    try:
        if compression == "gzip":
            return gzip.decompress(data)
        if compression == "bz2":
            return bz2.decompress(data)
        return lzma.decompress(data)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise CorpusError(f"{where}: not a valid {compression} file ({exc})") from None


def decode_utf8(data: bytes, where: str) -> str:
    """Strict UTF-8 (a leading BOM is dropped); invalid bytes are refused with their line and offset."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise CorpusError(
            f"{where} line {line}: invalid UTF-8 (byte 0x{data[exc.start]:02x} at byte offset {exc.start})",
            hint="save the file as UTF-8",
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_csv_rows(text: str, where: str) -> tuple[int, list[str], list[tuple[int, list[str]]]]:
    """Parse CSV text into (header line, header, [(start line, fields)]); blank lines are skipped.

    Lines are counted as a person sees them in the file (header = line 1); a record whose quoted text
    spans several lines is numbered by its first line. Malformed quoting and rows whose number of
    fields differs from the header are refused.
    """
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, min(len(text) + 1, MAX_CSV_FIELD)))
    try:
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        header: list[str] | None = None
        header_line = 0
        rows: list[tuple[int, list[str]]] = []
        end = 0
        while True:
            start = end + 1
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                reason = "a quoted field opened here is never closed" if "end of data" in str(exc) else str(exc)
                raise CorpusError(f"{where} line {start}: unreadable CSV row ({reason})") from None
            end = reader.line_num
            if not fields:
                continue
            if header is None:
                header, header_line = fields, start
                continue
            if len(fields) != len(header):
                span = f" (the row spans lines {start}-{end})" if end > start else ""
                raise CorpusError(
                    f"{where} line {start}: unreadable CSV row, {len(fields)} fields where the header "
                    f"(line {header_line}) has {len(header)}{span}",
                    hint="quote texts that contain commas, quotes or line breaks",
                )
            rows.append((start, fields))
    finally:
        csv.field_size_limit(old_limit)
    if header is None:
        raise CorpusError(f"{where}: empty file (no header, no records)")
    return header_line, header, rows


def _columns_text(columns: Sequence[str]) -> str:
    shown = ", ".join(repr(c) for c in columns[:20])
    return shown + (f", … ({len(columns) - 20} more)" if len(columns) > 20 else "") if columns else "none"


def _load_csv(text: str, where: str, wanted: Sequence[str]) -> tuple[str, list[str], list[tuple[int, dict]]]:
    header_line, header, rows = read_csv_rows(text, where)
    for name in wanted:
        places = [i + 1 for i, col in enumerate(header) if col == name]
        if len(places) > 1:
            raise CorpusError(
                f"{where} line {header_line}: column {name!r} appears {len(places)} times (columns {places})"
            )
    if not rows:
        raise CorpusError(f"{where}: no records after the header (line {header_line})")
    index = {name: header.index(name) for name in wanted if name in header}
    cells = [(line, {name: fields[i] for name, i in index.items()}) for line, fields in rows]
    return f"{where} line {header_line}", header, cells


def _load_jsonl(text: str, where: str) -> tuple[str, list[str], list[tuple[int, dict]]]:
    columns: dict[str, None] = {}
    rows: list[tuple[int, dict]] = []
    # JSON strings cannot hold a raw line feed, so splitting on "\n" (not str.splitlines) is exact.
    for number, raw in enumerate(text.split("\n"), start=1):
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
            raise CorpusError(f"{where} line {number}: expected a JSON object, got {_json_kind(obj)}")
        columns.update(dict.fromkeys(obj))
        rows.append((number, obj))
    if not rows:
        raise CorpusError(f"{where}: empty file (no JSON lines)")
    return where, list(columns), rows


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    return {list: "an array", dict: "an object", str: "a string"}.get(type(value), type(value).__name__)


def _load_parquet(path: Path, where: str, wanted: Sequence[str]) -> tuple[str, list[str], list[tuple[int, dict]]]:
    _check_is_file(path, where)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorpusError(f"{where}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if table.num_rows == 0:
        raise CorpusError(f"{where}: no records (0 rows)")
    columns = list(table.column_names)
    values: dict[str, list] = {}
    for name in wanted:
        if name not in columns:
            continue
        if columns.count(name) > 1:
            raise CorpusError(f"{where}: column {name!r} appears {columns.count(name)} times")
        col = table.column(name)
        kind = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
            raise CorpusError(f"{where}, field {name}: Parquet column type {col.type} (strings or integers expected)")
        try:
            values[name] = col.to_pylist()
        except UnicodeDecodeError:
            row = next(i for i in range(len(col)) if _bad_utf8(col, i))
            raise CorpusError(f"{where} row {row + 1}, field {name}: invalid UTF-8") from None
    rows = [(i + 1, {name: vals[i] for name, vals in values.items()}) for i in range(table.num_rows)]
    return where, columns, rows


def _bad_utf8(col: Any, i: int) -> bool:
    try:
        col[i].as_py()
    except UnicodeDecodeError:
        return True
    return False


def _bad_utf8_column(data: bytes, where: str) -> str | None:
    """The CSV column of the first undecodable byte, when the rest of the file parses."""
    try:
        _, header, rows = read_csv_rows(data.decode("utf-8", "surrogateescape"), where)
    except CorpusError:
        return None
    for fields in (header, *(f for _, f in rows)):
        for k, cell in enumerate(fields):
            if any("\udc80" <= ch <= "\udcff" for ch in cell):
                return "(header)" if fields is header else header[k]
    return None


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
    raise CorpusError(f"{loc}, field {name}: expected {expected}, got {_json_kind(value)}")


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


def load_corpus(
    path: str | os.PathLike[str], *, id_column: str = "id", text_column: str = "text", label_column: str = "label",
    classes: Sequence[str] | None = None, format: str | None = None, require_labels: bool = True,
    extra_columns: Sequence[str] = (), duplicate_texts: Literal["refuse", "skip"] = "refuse", require_id: bool = False,
) -> Corpus:
    """Read a CSV, JSONL or Parquet corpus, refusing anything that would make ids or texts ambiguous.

    Ids come from ``id_column`` when the file has that column; when it has none, they are derived from
    the texts (``id_origin="content"``) and two records with the same normalised text are refused.
    Raises :class:`CorpusError` naming the file, line (Parquet: row) and field at fault. With
    ``duplicate_texts="skip"`` a repeated text in a file without ids is left out instead, and ``notes`` says so.
    ``require_id``: the id column was named on purpose (a protocol's ``corpus.id_column``), so a file without it
    is refused rather than given ids derived from the texts.
    """
    where = os.fspath(path)
    fmt, compression = detect_format(path, format)
    unit = "row" if fmt == "parquet" else "line"
    at, columns, rows = _read_rows(Path(path), where, fmt, compression,
                                   [id_column, text_column, label_column, *extra_columns])
    _check_columns(at, columns, id_column=id_column, text_column=text_column, label_column=label_column,
                   extra_columns=extra_columns, require_labels=require_labels, require_id=require_id)
    has_label = label_column in columns
    extra: dict[str, list[str | None]] = {c: [] for c in extra_columns}
    has_id = id_column in columns
    allowed = set(classes) if classes is not None else None
    first_at: dict[str, int] = {}
    full_fp: dict[str, str] = {}
    records: list[Record] = []
    skipped: list[str] = []
    for line, cells in rows:
        loc = f"{where} {unit} {line}"
        text_value = _cell(cells.get(text_column), loc, text_column, numbers_ok=False)
        if text_value is None or not text_value.strip():
            raise CorpusError(f"{loc}, field {text_column}: empty text", hint="remove the record or fill its text")
        if has_id:
            rid = _cell(cells.get(id_column), loc, id_column, numbers_ok=True)
            if rid is None or not rid.strip():
                raise CorpusError(f"{loc}, field {id_column}: missing or empty id")
            if rid in first_at:
                first = f"{unit} {first_at[rid]}"
                raise CorpusError(f"{loc}, field {id_column}: duplicate id {_short(rid)} (first at {first})")
        else:
            fp = text_fingerprint(text_value)
            rid = "t-" + fp[:16]
            if rid in first_at and duplicate_texts == "skip" and full_fp[rid] == fp:
                skipped.append(f"{unit} {line}: same text as {unit} {first_at[rid]} (derived id {rid})")
                continue
            if rid in first_at:
                raise _derived_id_refusal(loc, unit, first_at[rid], rid, full_fp[rid] == fp, text_column, id_column)
            full_fp[rid] = fp
        first_at[rid] = line
        label = _cell(cells.get(label_column), loc, label_column, numbers_ok=True) if has_label else None
        if label is not None and not label.strip():
            label = None
        if label is None and require_labels:
            raise CorpusError(f"{loc}, field {label_column}: missing label")
        if label is not None and allowed is not None and label not in allowed:
            raise CorpusError(
                f"{loc}, field {label_column}: label {_short(label)} is not one of the classes "
                f"({', '.join(classes)})"  # in the protocol's order
            )
        for name, values in extra.items():
            values.append(_cell(cells.get(name), loc, name, numbers_ok=True))
        records.append(Record(rid, text_value, label, line))
    return Corpus(tuple(records), where, "data" if has_id else "content", tuple(skipped),
                  columns={name: tuple(values) for name, values in extra.items()})


def _read_rows(path: Path, where: str, fmt: str, compression: str | None,
               wanted: list[str]) -> tuple[str, list[str], list[tuple[int, dict]]]:
    """The file's location for messages, its columns and its rows as ``(line or row, cells)``; an empty or
    non-UTF-8 file is refused (a CSV's bad bytes named by their column)."""
    if fmt == "parquet":
        return _load_parquet(path, where, wanted)
    data = _read_bytes(path, where, compression)
    try:
        text = decode_utf8(data, where)
    except CorpusError as exc:
        column = _bad_utf8_column(data, where) if fmt == "csv" else None
        if column is None:
            raise
        line, reason = exc.message.split(": ", 1)
        raise CorpusError(f"{line}, field {column}: {reason}", hint=exc.hint) from None
    if not text.strip():
        raise CorpusError(f"{where}: empty file")
    return _load_csv(text, where, wanted) if fmt == "csv" else _load_jsonl(text, where)


def _check_columns(at: str, columns: list[str], *, id_column: str, text_column: str, label_column: str,
                   extra_columns: Sequence[str], require_labels: bool, require_id: bool) -> None:
    """The columns the caller needs are in the file: the texts, the labels and the ids when required, the extras."""
    if text_column not in columns:
        raise CorpusError(
            f"{at}: no text column {text_column!r} (columns found: {_columns_text(columns)})",
            hint="name the text column with the text_column option",
        )
    if require_labels and label_column not in columns:
        raise CorpusError(
            f"{at}: no label column {label_column!r} (columns found: {_columns_text(columns)})",
            hint="name the label column with the label_column option, or load without requiring labels",
        )
    if require_id and id_column not in columns:
        raise CorpusError(
            f"{at}: no id column {id_column!r} (columns found: {_columns_text(columns)})",
            hint="check the spelling of corpus.id_column; without it, ids are derived from the texts",
        )
    absent = [c for c in extra_columns if c not in columns]
    if absent:
        raise CorpusError(
            f"{at}: no column {absent[0]!r} (columns found: {_columns_text(columns)})",
            hint="add the column to the corpus file or remove it from the protocol",
        )


def _derived_id_refusal(loc: str, unit: str, first: int, rid: str, same: bool, text_column: str,
                        id_column: str) -> CorpusError:
    """A second record whose text gives an id already taken, in a file without ids: the same text, or a collision."""
    return CorpusError(
        f"{loc}, field {text_column}: "
        + ("same text as" if same else "derived id collides with")
        + f" {unit} {first} (derived id {rid}; the file has no {id_column!r} column)",
        hint="remove the duplicate, or add an id column so each record keeps its own id",
    )


def write_corpus(
    corpus: Corpus, path: str | os.PathLike[str], *, extra: Mapping[str, Sequence[Any]] | None = None
) -> None:
    """Write ``id,text,label`` (+ ``extra`` columns, one value per record in corpus order) as UTF-8 CSV,
    atomically (temporary file in the same folder, fsync, rename). ``None`` becomes an empty cell."""
    extra = dict(extra or {})
    for name, values in extra.items():
        if name in ("id", "text", "label"):
            raise CorpusError(f"{path}: extra column {name!r} clashes with a corpus column")
        if len(values) != len(corpus):
            raise CorpusError(f"{path}: extra column {name!r} has {len(values)} values for {len(corpus)} records")
    buf = io.StringIO(newline="")
    # QUOTE_ALL: a text holding a lone carriage return must stay one field when read back.
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(["id", "text", "label", *extra])
    columns = list(extra.values())
    for i, r in enumerate(corpus.records):
        cells = ("" if c[i] is None else c[i] for c in columns)
        writer.writerow([r.id, r.text, "" if r.label is None else r.label, *cells])
    write_bytes_atomic(path, buf.getvalue().encode("utf-8"))


# ------------------------------------------------------------------------------------- P4: disjointness


def check_disjoint(tuning: Corpus, final: Corpus) -> None:
    """P4: refuse when the tuning data and the final corpus share an id or a (whitespace-normalised) text."""
    check_rows_disjoint(tuning.source, [(r.id, r.text) for r in tuning.records],
                        final.source, [(r.id, r.text) for r in final.records])


def check_rows_disjoint(tuning_source: str, tuning: Sequence[tuple[str, str]], final_source: str,
                        final: Sequence[tuple[str, str]]) -> None:
    """:func:`check_disjoint` over ``(id, text)`` rows: a whole split's, or only those a streamed read found
    suspect (their id or text digest shared; every shared id and text is among them, so the counts are exact)."""
    shared_ids = {i for i, _ in tuning} & {i for i, _ in final}
    final_by_fp = {text_fingerprint(text): id_ for id_, text in final}
    shared_texts = sorted(
        (id_, final_by_fp[fp]) for id_, text in tuning if (fp := text_fingerprint(text)) in final_by_fp
    )
    if not shared_ids and not shared_texts:
        return
    parts = []
    if shared_ids:
        parts.append(f"{len(shared_ids)} shared ids (e.g. {examples_of(shared_ids)})")
    if shared_texts:
        shown = ", ".join(f"{_short(t)}={_short(f)}" for t, f in shared_texts[:3])
        parts.append(f"{len(shared_texts)} shared texts (tuning id=final id, e.g. {shown})")
    raise CorpusError(
        f"tuning data ({tuning_source}) and final corpus ({final_source}) overlap: " + "; ".join(parts),
        hint="remove these texts from the tuning data: the final comparison must use texts never seen while tuning",
    )
