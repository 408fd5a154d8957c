"""The embedding job of ``bench_scale.py --task embedding``: a near-free callable returning vectors, its protocol,
and what is measured beyond the classification run — the split of ``verify`` (hash, read + format checks, ids,
cosine with the reference pass, kNN) measured by running the same library functions one by one on the
campaign's stored files, in a child process whose peak RSS is printed too (cosine: with the pass's set already
read and checked, as ``verify`` holds it after its own checks).

The callable costs almost nothing (a checksum per text, then a few rows of a fixed random table summed and
normalised), so what is measured is the harness: streaming the vectors to the file, reading and checking them.
Each text always gets the same vector, so every variant's vectors agree with the reference's (cosine 1).

With ``--no-knn`` the run and verify processes replace the library's kNN by :data:`NO_KNN`'s stub (every document
counted wrong: the metric is then 0 and the threshold, 0, still holds; nothing else changes), because one exact
kNN at 200,000 documents takes many minutes on a small CPU and the run and verify would pay it once per pass; the
split still times the real kNN once, on one pass's stored vectors.
"""

from __future__ import annotations

import csv
from pathlib import Path

MODEL = '''"""A near-free embedder for the scale benchmark: a checksum per text picks rows of a fixed random table."""
import os
import zlib

import numpy as np

DIM = int(os.environ.get("ITERALAB_BENCH_DIM", "384"))
TABLE = np.random.default_rng(0).standard_normal((4096, DIM)).astype(np.float32)


def embed(texts):
    h = np.fromiter((zlib.crc32(t.encode()) for t in texts), dtype=np.uint32, count=len(texts))
    v = TABLE[h & 4095] + 0.5 * TABLE[(h >> 12) & 4095] + 0.25 * TABLE[(h >> 20) & 4095]
    return v / np.linalg.norm(v, axis=1, keepdims=True)
'''

PROTOCOL = """schema_version = 1
name = "scale-benchmark-embedding"
version = 1
question = "What does the harness cost per document at scale for an embedding job?"
scenario = "offline"

[task]
kind = "embedding"

[embedding]
pooling = "mean"
normalize = true
dim = {dim}
min_cosine = 0.99

[corpus]
path = "corpus.csv"
classes = ["plot", "fresh", "rotten"]
stratum_column = ""

[model]
kind = "callable"
callable = "bench_scale_embed:embed"

[metric]
name = "knn_accuracy"
k = 10
threshold = 0.0
tolerance = 1.0
reference_variant = "b64"

[reproduction]
target = "acceptable"

[warmup]
inputs = 256
passes = 1

[run]
passes = {passes}
isolation = "process"
device = "cpu"

[[variants]]
name = "b64"
batch_size = 64

[[variants]]
name = "b256"
batch_size = 256

[[series]]
name = "batch"
factor = "batch_size"
variants = ["b64", "b256"]
"""

WORDS = ("story", "good", "dull", "space", "acting", "script", "long", "fun", "city", "dog", "mess", "great")

#: Run in a child process on a finished campaign (argv: folder, "knn" to time kNN): each piece of
#: the check timed on its own over every pass (kNN: the first pass only, it is O(n^2 d)); one JSON line.
SPLIT = r'''
import json, resource, sys, time
from pathlib import Path
import numpy as np
from iteralab.campaign.kinds.embedding.output import read_vectors
from iteralab.campaign.kinds.expected import file_rows, load_expected, match_ids
from iteralab.campaign.verdict.evaluate import PredictionReader, campaign_protocol
from iteralab.campaign.kinds.embedding.cosine import compare_vectors
from iteralab.campaign.kinds.embedding.knn import knn_correct
from iteralab.common.files import sha256_file

folder = Path(sys.argv[1])
events = [json.loads(l) for l in (folder / "journal.jsonl").read_text().splitlines() if l.strip()]
finished = [e for e in events if e["event"] == "pass_finished" and e.get("prediction_file")]
protocol = campaign_protocol(folder)
t = {"hash": 0.0, "read_format": 0.0, "ids": 0.0, "cosine": 0.0, "knn": None}
t0 = time.perf_counter(); expected = load_expected(folder, protocol.corpus.classes); t["ids"] += time.perf_counter() - t0
variant = {e["pass_id"]: e["variant"] for e in events if e["event"] == "pass_started"}
reference = next(folder / e["prediction_file"] for e in finished
                 if variant[e["pass_id"]] == protocol.metric.reference_variant)
knn_rows, same = None, None
for e in finished:
    path = folder / e["prediction_file"]
    t0 = time.perf_counter(); sha256_file(path); t["hash"] += time.perf_counter() - t0
    t0 = time.perf_counter(); vs = read_vectors(path, normalize=True, dim=protocol.embedding.dim)
    t["read_format"] += time.perf_counter() - t0
    t0 = time.perf_counter(); match = match_ids(vs.ids, expected); t["ids"] += time.perf_counter() - t0
    reader = PredictionReader(protocol)
    reader.read(path, expected.ids)  # not timed: the set read and checked above, held as verify holds it
    t0 = time.perf_counter(); same = compare_vectors(path, reference, reader, expected)
    t["cosine"] += time.perf_counter() - t0
    if t["knn"] is None and sys.argv[2:] == ["knn"]:
        labels = expected.labels.astype(np.int64)
        rows = file_rows(match, len(expected))
        t0 = time.perf_counter(); knn_correct(vs.vectors, labels, protocol.metric.k, rows=rows)
        t["knn"] = time.perf_counter() - t0
        knn_rows = len(rows)
    del vs, reader
print(json.dumps({"split_s": t, "passes": len(finished), "knn_rows": knn_rows,
                  "min_cosine": float(np.nanmin(same.cosines)) if same is not None else None,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


#: Prepended to the run's and verify's code under ``--no-knn``: the verdict's kNN becomes a stub (benchmark only).
#: The stub replaces the name where the verdict calls it (``campaign.kinds.embedding.verdict``).
NO_KNN = ("import sys\nimport numpy as np\nimport iteralab.campaign.kinds.embedding.verdict as _embedding\n"
          "assert callable(_embedding.knn_correct), 'the kNN stub must replace a name the verdict calls'\n"
          "_embedding.knn_correct = lambda vectors, labels, k, rows=None: np.zeros(len(labels), dtype=bool)\n")


def write_inputs(folder: Path, docs: int, dim: int, passes: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench_scale_embed.py").write_text(MODEL, encoding="utf-8")
    classes = ("plot", "fresh", "rotten")
    with open(folder / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "text", "label"])
        for i in range(docs):
            n = 4 + i % 9
            text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(n)) + f" #{i}"
            w.writerow([f"d{i:07d}", text, classes[len(text) % 3]])
    path = folder / "protocol.toml"
    path.write_text(PROTOCOL.format(dim=dim, passes=passes), encoding="utf-8")
    return path


def split_line(split: dict, docs: int) -> str:
    """The verify split as one line: µs per prediction of each piece (kNN: of the one pass it was timed on)."""
    s, n = split["split_s"], docs * split["passes"]
    parts = [f"{name} {s[name] / n * 1e6:.2f}" for name in ("hash", "read_format", "ids", "cosine")]
    knn = (f"kNN {s['knn']:.1f} s for one pass = {s['knn'] / docs * 1e6:.1f} us/prediction"
           if s["knn"] is not None else "kNN not timed")
    return (f"  verify split, us/prediction over {split['passes']} passes: {', '.join(parts)}; {knn}; "
            f"peak RSS of the split child {split['rss'] / 1e6:.0f} MB; min cosine {split['min_cosine']}")
