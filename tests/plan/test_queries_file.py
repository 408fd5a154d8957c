"""The queries file of an embedding job's ``recall_at_k`` as a user writes it: its id and text columns named by the
protocol (``metric.queries_id_column``, ``metric.queries_text_column``), its refusals at the file line where the
bad record starts (a quoted text may span lines), and ``lock`` naming it among the inputs it fingerprinted. Fake
embedders and a small corpus written here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from iteralab.errors import CorpusError, ProtocolError
from iteralab.plan.protocol import parse_protocol
from iteralab.plan.queries import load_queries
from recall_jobs import QUERIES, lock_and_run, recall_protocol, write_queries, write_unlabelled_corpus

RENAMED = 'queries = "queries.csv"\nqueries_id_column = "qid"\nqueries_text_column = "question"'


def _renamed_protocol() -> str:
    text = recall_protocol()
    assert 'queries = "queries.csv"' in text
    return text.replace('queries = "queries.csv"', RENAMED)


def test_the_protocol_names_the_queries_files_id_and_text_columns():
    metric = parse_protocol(_renamed_protocol()).metric
    assert (metric.queries_id_column, metric.queries_text_column) == ("qid", "question")
    default = parse_protocol(recall_protocol()).metric
    assert (default.queries_id_column, default.queries_text_column) == ("query_id", "text")


@pytest.mark.parametrize("edit, words", [
    ('queries_text_column = "question"', 'queries_text_column = "qid"'),
    ('queries_id_column = "qid"', 'queries_id_column = "relevant_ids"'),
])
def test_the_id_text_and_relevant_columns_are_three_columns(edit, words):
    with pytest.raises(ProtocolError, match="the id, text and relevant_ids columns are three columns"):
        parse_protocol(_renamed_protocol().replace(edit, words), "protocol.toml")


def test_a_queries_column_without_a_queries_file_is_refused():
    text = recall_protocol().replace('name = "recall_at_k"\nk = 3\nqueries = "queries.csv"',
                                     'name = "knn_accuracy"\nk = 3\nqueries_text_column = "question"')
    text = text.replace("classes = []", 'classes = ["fresh", "rotten"]')
    with pytest.raises(ProtocolError, match="metric.queries_text_column names a column of metric.queries"):
        parse_protocol(text, "protocol.toml")


def test_a_queries_file_with_its_own_column_names_is_read_by_them(tmp_path):
    path = tmp_path / "q.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:  # other names, another order, one more column
        w = csv.writer(fh)
        w.writerow(("relevant_ids", "qid", "question", "note"))
        w.writerows((r, q, t, "x") for q, t, r in QUERIES)
    queries = load_queries(path, id_column="qid", text_column="question")
    assert queries.ids == tuple(q for q, _, _ in QUERIES) and queries.texts == tuple(t for _, t, _ in QUERIES)
    with pytest.raises(CorpusError) as err:
        load_queries(path)  # the default names: no column 'query_id', and the hint names the keys
    assert "no column 'query_id'" in err.value.message and "metric.queries_text_column" in str(err.value.hint)


def test_a_recall_campaign_reads_the_queries_by_the_protocols_column_names(tmp_path):
    from iteralab.campaign.folder import read_raw_rows

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv", header=("qid", "question", "relevant_ids"))
    out = lock_and_run(tmp_path, _renamed_protocol())
    record = json.loads((out / "campaign.json").read_text(encoding="utf-8"))["queries"]
    assert record["columns"] == {"id_column": "qid", "text_column": "question"}
    rows = list(read_raw_rows(out / "raw_table.csv"))
    assert rows and all(r.metric is not None and r.metric > 0 for r in rows if r.status == "ok"), \
        [(r.variant, r.notes) for r in rows]


# ------------------------------------------------------------------------------------------------ line numbers


def _queries_with_a_long_text(path: Path, last: tuple[str, str, str]) -> Path:
    """A header (line 1), a query whose quoted text spans three lines (lines 2-4), a plain one (line 5) and
    ``last`` (line 6): the third record starts on file line 6."""
    return write_queries(path, [("q1", "good\nfun\nagain", "d00;d03"), ("q2", "boring and dull", "d14"), last])


@pytest.mark.parametrize("last, words", [
    (("q3", " ", "d13"), "line 6, field text: empty text"),
    (("q1", "a repeat", "d13"), "line 6, field query_id: duplicate query id 'q1' (first at line 2)"),
    (("q3", "weak script", " ; "), "line 6, field relevant_ids: no relevant id"),
])
def test_a_bad_query_is_named_at_the_file_line_where_its_record_starts(tmp_path, last, words):
    with pytest.raises(CorpusError) as err:
        load_queries(_queries_with_a_long_text(tmp_path / "queries.csv", last))
    assert f"{tmp_path / 'queries.csv'} {words}" in err.value.message


def test_lock_names_an_unknown_relevant_id_at_the_file_line_where_its_query_starts(tmp_path):
    from iteralab.lock.inputs import lock

    write_unlabelled_corpus(tmp_path)
    _queries_with_a_long_text(tmp_path / "queries.csv", ("q3", "weak script", "d13;x99"))
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(recall_protocol(), encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        lock(protocol)
    assert "queries.csv line 6, field relevant_ids: query 'q3' names id 'x99'" in err.value.message


def test_a_queries_row_of_another_width_is_named_at_its_first_line(tmp_path):
    path = tmp_path / "queries.csv"
    path.write_text('query_id,text,relevant_ids\nq1,"two\nlines",d00,extra\n', encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        load_queries(path)
    assert f"{path} line 2: unreadable CSV row, 4 fields where the header (line 1) has 3" in err.value.message


# ------------------------------------------------------------------------------------------------ lock's account


def test_lock_names_the_queries_file_among_the_inputs_it_fingerprinted(tmp_path, capsys):
    from iteralab.cli import main

    write_unlabelled_corpus(tmp_path)
    write_queries(tmp_path / "queries.csv")
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(recall_protocol(), encoding="utf-8")
    assert main(["lock", str(protocol)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "inputs fingerprinted: corpus, model files, queries file (queries.csv), catalog" in out, out
