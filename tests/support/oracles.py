"""Whole-read versions of what the library computes by streaming, kept only as test oracles: each reads a corpus
whole into Python objects (``load_corpus``, or :func:`whole_read_corpus`, the whole-read reader that the
streamed one replaced) and builds the same record the streamed reader builds in record
batches, in the plainest way, so the tests can compare the two."""

from __future__ import annotations

import base64
import bz2
import gzip
import hashlib
import json
import lzma
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.common.digest import StringDigest, string_digest
from iteralab.errors import CorpusError
from iteralab.lock.datasets import first_overlap
from iteralab.lock.lockrecords import RECORDS_ENCODING
from iteralab.plan.corpus import Corpus, Record, check_disjoint, load_corpus
from iteralab.plan.corpusfile import (
    check_is_file,
    decode_utf8,
    detect_format,
    read_csv_rows,
    text_fingerprint,
)
from iteralab.plan.scan import BATCH_ROWS, Batch, CorpusScan, Sink


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


def _short(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def _read_bytes(path: Path, where: str, compression: str | None) -> bytes:
    check_is_file(path, where)
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
    check_is_file(path, where)
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


def whole_read_corpus(
    path: str | os.PathLike[str], *, id_column: str = "id", text_column: str = "text", label_column: str = "label",
    classes: Sequence[str] | None = None, format: str | None = None, require_labels: bool = True,
    extra_columns: Sequence[str] = (), duplicate_texts: Literal["refuse", "skip"] = "refuse", require_id: bool = False,
) -> Corpus:
    """The corpus read whole into Python objects, every check in the order of :mod:`iteralab.plan.rows` (the
    reference the streamed reader is fuzzed against). Read a CSV, JSONL or Parquet corpus, refusing anything
    that would make ids or texts ambiguous.

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




def scan_of(corpus: Corpus, sinks: Sequence[Sink] = ()) -> CorpusScan:
    """The scan of a corpus already loaded: sinks are told to start again (``None``), then get its batches."""
    for sink in sinks:
        sink(None)
    for start in range(0, len(corpus), BATCH_ROWS):
        part = corpus.records[start:start + BATCH_ROWS]
        batch = Batch([r.id for r in part], [r.text for r in part], [r.label for r in part],
                      {name: list(values[start:start + BATCH_ROWS]) for name, values in corpus.columns.items()})
        for sink in sinks:
            sink(batch)
    counts: dict[str, dict[str | None, int]] = {}
    for name, values in corpus.columns.items():
        tally: dict[str | None, int] = {}
        for v in values:
            tally[v] = tally.get(v, 0) + 1
        counts[name] = dict(sorted(tally.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
    labels = StringDigest()
    labels.update([r.label for r in sorted(corpus.records, key=lambda r: r.id)])
    return CorpusScan(corpus.source, corpus.id_origin, len(corpus), corpus.fingerprint(), corpus.order_hash(),
                      labels.hexdigest(), counts)
