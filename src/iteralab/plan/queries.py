"""recall_at_k's queries file (``metric.queries``), read and checked without the protocol's models: a pass worker
reads it too, and never imports pydantic.

A UTF-8 CSV file with a header and at least these columns (any order; other columns are ignored)::

    query_id      a non-empty id, unique in the file (another name: ``metric.queries_id_column``)
    text          the query's text (non-empty), embedded by every pass with the pass's own variant (another name:
                  ``metric.queries_text_column``)
    relevant_ids  the ids of the corpus documents relevant to the query, separated by ";" (at least one; spaces
                  around an id are ignored; an id repeated in one cell counts once)

and optionally::

    grades        graded relevance: one number > 0 per id of relevant_ids, in the same order, separated by ";"
                  (a repeated id keeps its highest grade). Without the column every relevant id has grade 1
                  (binary relevance); nDCG uses the grades as linear gains, recall and MRR count any grade as relevant

Every refusal is one :class:`~iteralab.errors.CorpusError` line naming the file, the line and the field; the line
is the file line where the record starts (a quoted text may span lines), counted by the corpus readers' own CSV
reader (:func:`~iteralab.plan.corpusfile.read_csv_rows`). Whether each relevant id is a document of the corpus is
checked by ``lock`` (:func:`unknown_relevant`), which reads both.
"""

from __future__ import annotations

import os
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

from iteralab.errors import CorpusError
from iteralab.plan.corpusfile import decode_utf8, read_csv_rows

__all__ = ["QUERY_COLUMNS", "Queries", "load_queries", "queries_hint", "unknown_relevant"]

#: The default columns of a queries file (``metric.queries``): id, text, relevant ids.
QUERY_COLUMNS = ("query_id", "text", "relevant_ids")
#: What separates the ids of ``relevant_ids``.
RELEVANT_SEPARATOR = ";"
#: The optional column of graded relevance (module docstring).
GRADES_COLUMN = "grades"


def queries_hint(id_column: str = QUERY_COLUMNS[0], text_column: str = QUERY_COLUMNS[1]) -> str:
    """What a queries file is, in one hint line (its id and text columns as the protocol names them)."""
    return (f"a queries file is a CSV with columns {id_column}, {text_column}, relevant_ids (ids separated by ';'); "
            "metric.queries_id_column and metric.queries_text_column name other id and text columns")


QUERIES_HINT = queries_hint()


@dataclass(frozen=True)
class Queries:
    """The queries of a file, in file order: ids, texts, the relevant document ids of each, and the file line of
    each (for messages); ``grades``: each relevant id's grade (None: binary relevance, no grades column)."""

    source: str
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    relevant: tuple[tuple[str, ...], ...]
    lines: tuple[int, ...]
    grades: tuple[tuple[float, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self.ids)


def load_queries(path: str | os.PathLike[str], id_column: str = QUERY_COLUMNS[0],
                 text_column: str = QUERY_COLUMNS[1]) -> Queries:
    """Read and check a queries file (module docstring) whose id and text columns are ``id_column`` and
    ``text_column`` (every problem: one line naming the file, the line where the record starts, and the field)."""
    where = os.fspath(path)
    hint = queries_hint(id_column, text_column)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorpusError(f"{where}: cannot read the queries file ({exc.strerror or exc})", hint=hint) from None
    try:
        _, header, rows = read_csv_rows(decode_utf8(data, where), where)
    except CorpusError as exc:
        raise CorpusError(exc.message, hint=exc.hint or hint) from None
    header = [h.strip() for h in header]
    columns = (id_column, text_column, QUERY_COLUMNS[2])
    missing = [c for c in columns if c not in header]
    if missing or len(set(header)) != len(header):
        found = ", ".join(header) or "none"
        problem = f"no column {missing[0]!r}" if missing else "a column name is repeated"
        raise CorpusError(f"{where}: {problem} (columns found: {found})", hint=hint)
    at = [header.index(c) for c in columns]
    first: dict[str, int] = {}
    ids, texts, relevant, lines, grades = [], [], [], [], []
    for line, row in rows:
        loc = f"{where} line {line}"
        qid, query, cell = (row[i] for i in at)
        if not qid.strip():
            raise CorpusError(f"{loc}, field {id_column}: missing or empty id")
        if qid in first:
            raise CorpusError(f"{loc}, field {id_column}: duplicate query id {qid!r} (first at line {first[qid]})")
        if not query.strip():
            raise CorpusError(f"{loc}, field {text_column}: empty text", hint="remove the query or fill its text")
        docs = tuple(dict.fromkeys(d.strip() for d in cell.split(RELEVANT_SEPARATOR) if d.strip()))
        if not docs:
            raise CorpusError(f"{loc}, field relevant_ids: no relevant id",
                              hint="give at least one corpus id, several separated by ';'")
        if GRADES_COLUMN in header:
            grades.append(_grades(loc, cell, row[header.index(GRADES_COLUMN)], docs))
        first[qid] = line
        ids.append(qid)
        texts.append(query)
        relevant.append(docs)
        lines.append(line)
    if not ids:
        raise CorpusError(f"{where}: no query (a header only)", hint=hint)
    return Queries(where, tuple(ids), tuple(texts), tuple(relevant), tuple(lines),
                   tuple(grades) if GRADES_COLUMN in header else None)


def _grades(loc: str, cell: str, grades: str, docs: tuple[str, ...]) -> tuple[float, ...]:
    """The grade of each of ``docs`` from the ``grades`` cell (module docstring)."""
    listed = [d.strip() for d in cell.split(RELEVANT_SEPARATOR) if d.strip()]
    values = [g.strip() for g in grades.split(RELEVANT_SEPARATOR) if g.strip()]
    if len(values) != len(listed):
        raise CorpusError(f"{loc}, field grades: {len(values)} grades for {len(listed)} relevant ids",
                          hint="give one grade per relevant id, in the same order, separated by ';'")
    best: dict[str, float] = {}
    for doc, value in zip(listed, values):
        try:
            grade = float(value)
        except ValueError:
            grade = float("nan")
        if not grade > 0 or grade == float("inf"):
            raise CorpusError(f"{loc}, field grades: {value!r} is not a number > 0",
                              hint="a grade is a finite number above 0; leave an irrelevant document out")
        best[doc] = max(grade, best.get(doc, grade))
    return tuple(best[d] for d in docs)




def unknown_relevant(queries: Queries, corpus_ids: Container[str], corpus: str) -> None:
    """Refuse, in one line, the first relevant id that is not an id of the corpus (``corpus``: its name)."""
    for qid, docs, line in zip(queries.ids, queries.relevant, queries.lines):
        unknown = [d for d in docs if d not in corpus_ids]
        if unknown:
            more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
            raise CorpusError(f"{queries.source} line {line}, field relevant_ids: query {qid!r} names id "
                              f"{unknown[0]!r}{more}, not an id of the corpus {corpus}",
                              hint="relevant_ids are ids of the corpus's id column")
