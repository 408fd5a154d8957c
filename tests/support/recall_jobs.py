"""Recall jobs the embedding-metrics, queries-file, ranking and threshold tests share: queries with the documents they
should find, an unlabelled corpus, a recall protocol, and a campaign of it locked and run."""

from __future__ import annotations

import csv
from pathlib import Path

from embedding_jobs import BATCH_VARIANTS, corpus_rows, embedding_protocol


EMBEDDER = 'kind = "callable"\ncallable = "fake_embedders:batch4_perturbed"'
#: Queries over the test corpus: a word shared with the relevant documents.
QUERIES = [("q1", "good fun", "d00;d03;d07"), ("q2", "boring and dull", "d14;d16;d10"),
           ("q3", "weak script", "d13;d18"), ("q4", "great acting", "d06"), ("q5", "a mess", "d15;d11;d35")]


def write_unlabelled_corpus(folder: Path) -> None:
    with open(folder / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text"])
        w.writerows((i, t) for i, t, _ in corpus_rows())


def write_queries(path: Path, rows=QUERIES, header=("query_id", "text", "relevant_ids")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def recall_protocol(**kwargs) -> str:
    text = embedding_protocol(EMBEDDER, variants=BATCH_VARIANTS, reference="b2", threshold=0.0,
                              metric='name = "recall_at_k"\nk = 3\nqueries = "queries.csv"', **kwargs)
    return text.replace('classes = ["fresh", "rotten"]', "classes = []")


def lock_and_run(tmp_path: Path, protocol_text: str) -> Path:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    protocol = tmp_path / "protocol.toml"
    protocol.write_text(protocol_text, encoding="utf-8")
    lock(protocol)
    out = tmp_path / "camp"
    run_campaign(protocol, out)
    return out
