"""The generation job of ``bench_scale.py --task generation``: a near-free callable returning short texts, its
protocol, and what is measured beyond the classification run — the split of ``verify`` (hash, read + format
checks, ids, the metric, the texts compared with the reference pass's) measured by running the same library
functions one by one on the campaign's stored files, in a child process whose peak RSS is printed too.

The callable costs almost nothing (the prompt's last two words, their count and ``eos``, as a vLLM callable
returns texts, token counts and finish reasons), so what is measured is the harness: streaming the texts to the
file, reading and checking them. The metric is ``token_f1`` (SQuAD v1.1's definition, in Python, one document at
a time): its own cost per prediction is printed apart from the rest of ``verify``.
"""

from __future__ import annotations

import csv
from pathlib import Path

MODEL = '''"""A near-free generator for the scale benchmark: the prompt's last two words, counted, ending on eos."""


def generate(prompts):
    texts = [" ".join(p.rsplit(" ", 2)[-2:]) for p in prompts]
    return texts, [3] * len(texts), ["eos"] * len(texts)
'''

PROTOCOL = """schema_version = 1
name = "scale-benchmark-generation"
version = 1
question = "What does the harness cost per document at scale for a generation job?"
scenario = "offline"

[task]
kind = "generation"

[generation]
max_new_tokens = 8
max_length_share = 0.05
tokens_tolerance = 0.10

[corpus]
path = "corpus.csv"
classes = []
reference_column = "answer"

[model]
kind = "callable"
callable = "bench_scale_gen:generate"
max_length = 512

[metric]
name = "token_f1"
threshold = 0.0
relative_tolerance = 0.01
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

#: Run in a child process on a finished campaign (argv: folder): each piece of the check timed on its own over
#: every pass; one JSON line. ``compare`` is the texts of a pass against the reference pass's, both already read
#: (as verify compares them: each file read once, the reference's texts held).
SPLIT = r'''
import json, resource, sys, time
from pathlib import Path
import numpy as np
import pyarrow as pa
from iteralab.campaign.kinds.generation.output import read_texts
from iteralab.campaign.kinds.expected import load_expected, match_ids, file_rows
from iteralab.campaign.verdict.evaluate import campaign_protocol
from iteralab.campaign.kinds.generation.verdict import compare_text_sets, load_references
from iteralab.campaign.kinds.generation.textmetrics import corpus_score
from iteralab.common.files import sha256_file

folder = Path(sys.argv[1])
events = [json.loads(l) for l in (folder / "journal.jsonl").read_text().splitlines() if l.strip()]
finished = [e for e in events if e["event"] == "pass_finished" and e.get("prediction_file")]
protocol = campaign_protocol(folder)
spec = protocol.generation
t = {"hash": 0.0, "read_format": 0.0, "ids": 0.0, "references": 0.0, "metric": 0.0, "compare": 0.0}
t0 = time.perf_counter(); expected = load_expected(folder, protocol.corpus.classes); t["ids"] += time.perf_counter() - t0
t0 = time.perf_counter(); references = load_references(folder); t["references"] += time.perf_counter() - t0
variant = {e["pass_id"]: e["variant"] for e in events if e["event"] == "pass_started"}
reference = next(folder / e["prediction_file"] for e in finished
                 if variant[e["pass_id"]] == protocol.metric.reference_variant)
# not timed: the reference pass's texts, held as verify holds them after reading that pass's file
held = read_texts(reference, max_new_tokens=spec.max_new_tokens, allow_empty=spec.allow_empty)
score = None
for e in finished:
    path = folder / e["prediction_file"]
    t0 = time.perf_counter(); sha256_file(path); t["hash"] += time.perf_counter() - t0
    t0 = time.perf_counter(); texts = read_texts(path, max_new_tokens=spec.max_new_tokens, allow_empty=spec.allow_empty)
    t["read_format"] += time.perf_counter() - t0
    t0 = time.perf_counter(); match = match_ids(texts.ids, expected); rows = file_rows(match, len(expected))
    t["ids"] += time.perf_counter() - t0
    outputs = texts.texts.take(pa.array(rows))  # every row matched: the texts in corpus order
    t0 = time.perf_counter(); score = corpus_score(protocol.metric.name, outputs, references)
    t["metric"] += time.perf_counter() - t0
    t0 = time.perf_counter(); same = compare_text_sets(texts, held)
    t["compare"] += time.perf_counter() - t0
    del texts, outputs
print(json.dumps({"split_s": t, "passes": len(finished), "score": score, "identical_share": same.identical_share,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


def write_inputs(folder: Path, docs: int, passes: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench_scale_gen.py").write_text(MODEL, encoding="utf-8")
    with open(folder / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "text", "answer"])
        for i in range(docs):
            n = 4 + i % 9
            words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(n)] + [f"#{i}"]
            # the answer is the text's last two words for two documents in three (the callable's text), its first
            # two otherwise: token F1 is neither 0 nor 1, and every text differs from the others
            answer = " ".join(words[-2:]) if i % 3 else " ".join(words[:2])
            w.writerow([f"d{i:07d}", " ".join(words), answer])
    path = folder / "protocol.toml"
    path.write_text(PROTOCOL.format(passes=passes), encoding="utf-8")
    return path


def split_line(split: dict, docs: int) -> str:
    """The verify split as one line: µs per prediction of each piece, the metric apart."""
    s, n = split["split_s"], docs * split["passes"]
    harness = ("hash", "read_format", "ids", "references", "compare")
    parts = [f"{name} {s[name] / n * 1e6:.2f}" for name in harness]
    return (f"  verify split, us/prediction over {split['passes']} passes: {', '.join(parts)} (harness "
            f"{sum(s[k] for k in harness) / n * 1e6:.2f}); the metric's own cost (token_f1 in Python) "
            f"{s['metric'] / n * 1e6:.2f}; peak RSS of the split child {split['rss'] / 1e6:.0f} MB; "
            f"score {split['score']:.4f}, identical share {split['identical_share']}")
