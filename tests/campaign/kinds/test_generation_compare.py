"""A generation pass's texts against the reference pass's, as the raw table and verify judge them: the identical
share counts the documents whose texts differ, and each text file is read once for both its own verdict and the
comparison."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from generation_jobs import run_job


def _rewrite_texts(out, pid, record, rows):
    """Change the texts of ``rows`` in a pass's file and put the file's new hash in the journal."""
    from iteralab.common.files import sha256_file

    path = out / record["prediction_file"]
    table = pq.read_table(path)
    texts = table.column("text").to_pylist()
    for row in rows:
        texts[row] = "something else entirely"
    pq.write_table(table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts, pa.string())),
                   path)
    journal = out / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(line.replace(record["prediction_sha256"], sha256_file(path))
                               if f'"{pid}"' in line else line for line in lines))
    return path


def test_the_identical_share_counts_differing_texts_and_each_file_is_read_once(tmp_path, monkeypatch):
    from iteralab.campaign.kinds.generation import output as texts_module
    from iteralab.campaign.journal import read_journal
    from iteralab.evidence.table import build_rows

    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8)
    state = read_journal(out / "journal.jsonl")
    variant = {pid: started["variant"] for pid, started in state.started.items()}
    pid = next(p for p in state.order if variant[p] == "b4")  # not the reference variant (b1)
    edited = _rewrite_texts(out, pid, state.finished[pid], rows=[0, 5, 9])

    reads: Counter = Counter()

    real = texts_module.read_texts

    def counting(path, **kwargs):
        reads[path.resolve()] += 1
        return real(path, **kwargs)

    monkeypatch.setattr(texts_module, "read_texts", counting)  # the one reader of a text file (TextFile.read)
    rows = {r["pass_id"]: r for r in build_rows(out)}
    assert len(rows) == 4
    assert float(rows[pid]["identical_share"]) == 13 / 16  # 16 documents, 3 texts changed
    assert all(float(r["identical_share"]) == 1.0 for p, r in rows.items() if p != pid)
    assert reads[edited.resolve()] == 1 and len(reads) == 4 and set(reads.values()) == {1}, reads
