"""``prepare --task embedding --queries FILE``: a retrieval corpus cut together with its queries (P4).

A stratified sample of documents would lose the documents the queries name. Instead, from a seeded shuffle of the
queries whose every relevant id is a document of the source (after repeated texts are left out):

- the final queries (``query_sample``, default every query left after the tuning ones) keep every relevant
  document, and ``distractors`` other documents drawn at random join them: ``final.csv`` and ``queries.csv``;
- the tuning queries (``tuning_queries``, default a fifth of the queries) are drawn the same way, among the queries
  none of whose relevant documents is a final one, with as many distractors per query as the final set has:
  ``tuning.csv`` and ``tuning_queries.csv``, disjoint from the final files by document (``iteralab threshold``
  measures the ranking metric on them).

Both corpora keep the source's order; both queries files keep the source's columns (``grades`` included) and order.
The same seed on the same files gives the same cut.
"""

from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file, write_bytes_atomic
from iteralab.errors import CorpusError
from iteralab.plan.corpus import Corpus, check_disjoint
from iteralab.plan.queries import Queries
from iteralab.plan.task import KIND_RULES

__all__ = ["DEFAULT_DISTRACTORS", "QueryCut", "cut_with_queries", "queries_options", "write_queries_file"]

#: Documents that are relevant to no chosen query, drawn into the final corpus beside the relevant ones.
DEFAULT_DISTRACTORS = 1000


@dataclass(frozen=True)
class QueryCut:
    """The final and tuning corpora and the queries of each (indices into the source's queries, file order), and
    the queries left out with why."""

    final: Corpus
    tuning: Corpus
    final_queries: tuple[int, ...]
    tuning_queries: tuple[int, ...]
    left_out: tuple[dict[str, str], ...]
    #: the queries file it was cut with (its path and sha256)
    source: str = ""
    sha256: str = ""
    #: the distractors drawn into each corpus (fewer than asked when the source has no more)
    drawn: tuple[int, int] = (0, 0)

    def record(self, distractors: int) -> dict[str, Any]:
        """What prepare.json says of the cut."""
        return {"file": self.source, "sha256": self.sha256, "final": len(self.final_queries),
                "tuning": len(self.tuning_queries), "distractors": distractors,
                "final_distractors": self.drawn[0], "tuning_distractors": self.drawn[1]}


def cut_with_queries(corpus: Corpus, queries: Queries, *, query_sample: int | None, tuning_queries: int | None,
                     distractors: int, seed: int) -> QueryCut:
    """The cut of the module docstring."""
    known = set(corpus.ids)
    left_out: list[dict[str, str]] = []
    usable = []
    for i, docs in enumerate(queries.relevant):
        missing = [d for d in docs if d not in known]
        if missing:
            left_out.append({"query_id": queries.ids[i], "reason": f"relevant id {missing[0]!r} is not a document "
                                                                   "of the source (or its text is repeated)"})
        else:
            usable.append(i)
    rng = random.Random(seed)
    rng.shuffle(usable)
    n_tuning = len(usable) // 5 if tuning_queries is None else tuning_queries
    n_final = len(usable) - n_tuning if query_sample is None else query_sample
    if n_final < 1 or n_final + n_tuning > len(usable):
        raise CorpusError(f"{queries.source}: {n_final} final and {n_tuning} tuning queries wanted, {len(usable)} "
                          "queries name only documents of the source",
                          hint="lower --query-sample or --tuning-queries")
    final_q = usable[:n_final]
    final_docs = {d for q in final_q for d in queries.relevant[q]}
    tuning_q = []
    for q in usable[n_final:]:
        if len(tuning_q) == n_tuning:
            break
        if final_docs.isdisjoint(queries.relevant[q]):  # a document on both sides would break P4
            tuning_q.append(q)
    if len(tuning_q) < n_tuning:
        raise CorpusError(f"{queries.source}: {n_tuning} tuning queries wanted, only {len(tuning_q)} share no "
                          "relevant document with the final queries", hint="lower --tuning-queries")
    tuning_docs = {d for q in tuning_q for d in queries.relevant[q]}
    pool = [d for d in corpus.ids if d not in final_docs and d not in tuning_docs]
    rng.shuffle(pool)
    n_other = min(distractors, len(pool))
    n_tuning_other = min(round(distractors * len(tuning_q) / n_final), len(pool) - n_other)
    final_ids = final_docs | set(pool[:n_other])
    tuning_ids = tuning_docs | set(pool[n_other:n_other + n_tuning_other])
    final = Corpus(tuple(r for r in corpus.records if r.id in final_ids),
                   f"{corpus.source} [final, {n_final} queries, {n_other} distractors, seed {seed}]",
                   corpus.id_origin, corpus.notes)
    tuning = Corpus(tuple(r for r in corpus.records if r.id in tuning_ids),
                    f"{corpus.source} [tuning, {len(tuning_q)} queries, seed {seed}]", corpus.id_origin, corpus.notes)
    check_disjoint(tuning, final)
    return QueryCut(final, tuning, tuple(sorted(final_q)), tuple(sorted(tuning_q)), tuple(left_out), queries.source,
                    sha256_file(queries.source), (n_other, n_tuning_other))


def write_queries_file(source: Path, chosen: tuple[int, ...], path: Path) -> None:
    """The source queries file's header and the records of the ``chosen`` queries (indices in file order), as
    they are (every column kept), atomically."""
    with open(source, encoding="utf-8-sig", newline="") as fh:
        rows = [row for row in csv.reader(fh, strict=True) if row]
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(rows[0])
    writer.writerows(rows[1 + i] for i in chosen)
    write_bytes_atomic(path, buf.getvalue().encode("utf-8"))


def queries_options(task: str, queries: Path | None, query_sample: int | None, tuning_queries: int | None,
                    distractors: int) -> dict[str, Any]:
    """The keywords of ``prepare --queries`` (an embedding job's cut); a generation draft takes none, and a queries
    option given with ``--task generation`` is refused in one line."""
    if task not in KIND_RULES or not KIND_RULES[task].prompts:
        return {"queries": queries, "query_sample": query_sample, "tuning_queries": tuning_queries,
                "distractors": distractors}
    given = [flag for flag, value in (("--queries", queries), ("--query-sample", query_sample),
                                      ("--tuning-queries", tuning_queries)) if value is not None]
    if given:
        raise CorpusError(f"{given[0]} is for --task embedding (this is --task generation)",
                          hint="add --task embedding, or leave the option out")
    return {}
