"""Benchmark: the measured pass's own cost per document, with a model that costs almost nothing.

``bench_scale.py`` times a whole campaign, in which a pass of a near-free callable is a few tenths of a second among
process starts, the lock check and the evaluation: on a 2-core cloud VM its run-to-run spread (20–60 %) hides a
5 % change of the pass itself. This script times only ``MeasuredPass.run`` (``campaign.engines.passes``, the region
a campaign measures: read the corpus file in record batches, cut the batches, call the model, hand each batch to
the kind's sink, check the limit, publish progress) and the probabilities' collection after it, ``--repeats`` times
in one process on a synthetic corpus of ``--docs`` short texts, with bench_scale's checksum classifier as the model.
It prints the best and the median pass and the harness's microseconds per document (best pass / documents).

It runs against the revision's code on ``PYTHONPATH``, including a revision from before the job kinds' seam (issue
40, whose ``MeasuredPass`` took no sink), so that ``interleave.py`` can put two revisions side by side:

    python bench/bench_pass_core.py --docs 200000 --repeats 5
    python bench/interleave.py --old 1be5da1 --new HEAD --rounds 5 -- bench_pass_core.py --docs 200000

Timing assertions do not belong in tests (machines are noisy): this script is where the figure is measured.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from iteralab.campaign.engines import passes

WORDS = ("story", "good", "dull", "space", "acting", "script", "long", "fun", "city", "dog", "mess", "great")
CLASSES = ["plot", "fresh", "rotten"]


class NearFree:
    """bench_scale's classifier as a workload: a checksum per text, then numpy (no tokenizer)."""

    def tokenize(self, texts: list[str]) -> list[str]:
        return texts

    def infer(self, texts: list[str]) -> np.ndarray:
        h = np.fromiter((zlib.crc32(t.encode()) for t in texts), dtype=np.uint32, count=len(texts))
        x = (h & 0xFFFF).astype(np.float32) / 65536.0
        y = ((h >> 16) & 0xFFFF).astype(np.float32) / 65536.0
        rows = np.stack([0.2 + x, 0.2 + y, 1.2 - 0.5 * (x + y)], axis=1)
        return rows / rows.sum(axis=1, keepdims=True)


class Clock:
    def now(self) -> float:
        return time.perf_counter()


def write_corpus(path: Path, docs: int) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "text"])
        for i in range(docs):
            n = 4 + i % 9
            w.writerow([f"d{i:07d}", " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(n)) + f" #{i}"])


def one_pass(corpus: Path, scratch: Path, index: int, batch_size: int) -> float:
    """One measured pass as a campaign's worker sets it up (the kind's sink and a progress beacon where the
    revision has them), timed from the first read to the probabilities collected."""
    if hasattr(passes, "corpus_options"):  # the kinds' seam: a sink per kind, a beacon, the public Limit
        from iteralab.campaign.engines.passlimit import Limit
        from iteralab.campaign.kinds.registry import kind_named
        from iteralab.campaign.progress import Beacon
        sink = kind_named("classification").sink(scratch / f"pass{index}.parquet", CLASSES)
        run = passes.MeasuredPass(Beacon(scratch / f"pass{index}.beacon"), sink, None)
        limit, options = Limit(Clock(), None, None), None
    else:  # before it (1be5da1 and earlier): no sink for a classifier, corpus options as a dict
        run = passes.MeasuredPass()
        limit, options = passes._Limit(Clock(), None, None), {}
    start = time.perf_counter()
    run.run(NearFree(), str(corpus), options, batch_size, False, False, len(CLASSES), limit, None)
    probs = run.probs
    seconds = time.perf_counter() - start
    if probs.shape != (run.expected, len(CLASSES)):
        raise SystemExit(f"the pass returned {probs.shape} for {run.expected} documents")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="timed passes (default 5), after one untimed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="iteralab-pass-core-") as tmp:
        scratch = Path(tmp)
        corpus = scratch / "corpus.csv"
        write_corpus(corpus, args.docs)
        one_pass(corpus, scratch, 0, args.batch_size)  # untimed: the file in the page cache, the code paths warm
        times = [one_pass(corpus, scratch, i + 1, args.batch_size) for i in range(args.repeats)]
    best, median = min(times), statistics.median(times)
    result = {"docs": args.docs, "batch_size": args.batch_size, "repeats": args.repeats, "best_s": best,
              "median_s": median, "us_per_doc_best": best / args.docs * 1e6, "load_average_1min": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"MeasuredPass.run, {args.docs:,} documents, batch {args.batch_size}, near-free callable, "
          f"{args.repeats} passes: best {best:.4f} s, median {median:.4f} s = {result['us_per_doc_best']:.2f} us per "
          f"document (best); load average (1 min) {result['load_average_1min']:.2f} on {os.cpu_count()} logical cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
