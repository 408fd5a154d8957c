"""Benchmark: data-parallel passes (X3) — the merged ids, the token balance of the shards, and throughput.

Two parts, measured in one run:

1. Ids and balance, for N ∈ {1, 2, 3, 7} workers, on a Rotten Tomatoes corpus of ``--docs`` texts and on a
   5-text corpus (fewer documents than 7 workers): the merged prediction file's ids must be exactly the
   corpus's (no padding duplicate, none missing, file order), and the shards' token imbalance (largest /
   smallest shard by MiniLM tokens, the target is ≤ 1.10). The model here is a cheap keyword callable that
   names the MiniLM tokenizer folder, so the shards are cut by real token counts while the check stays fast.
2. Throughput on MiniLM + a trained linear head (encoder_head, fp32, batch ``--batch-size``) over the first
   ``--timed-docs`` texts, rotated over ``--repeats`` rounds: the plain single-device pass (one worker
   process, what the runner's ``process`` isolation runs), ``dp1`` (the data-parallel path with one worker)
   and ``dp2`` (two workers). It prints the medians and ``dp2 / dp1`` and ``dp2 / plain`` throughput ratios.

On a machine without GPUs the workers are CPU processes sharing the cores (threads split between them): these
figures say nothing about two cards; on a 2-GPU machine the same script measures two cards. Every figure
names the CPU. Timing assertions do not belong in tests; this script is where the figures are measured.

    python bench/bench_parallel.py                   # 1,000 texts for the ids, 400 timed, 2 rounds
    python bench/bench_parallel.py --docs 500 --timed-docs 200 --repeats 3 --json
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
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
HERE = Path(__file__).resolve().parent


def keyword_model(texts: list[str]) -> list[str]:
    """A deterministic, nearly free callable returning labels of the demo's classes (the ids check does not
    need a real model)."""
    return ["fresh" if "good" in t.lower() else "rotten" for t in texts]


def _write_csv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["id", "text", "label"])
        w.writerows(rows)
    return path


def _spec(folder: Path, name: str, corpus: Path, workers: int, model: dict, classes: list[str], batch: int,
          warmup: int) -> dict:
    preds = folder / f"pred-{name}"
    preds.mkdir(exist_ok=True)
    return {"pass_id": name, "classes": classes, "corpus_path": str(corpus), "prediction_dir": str(preds),
            "variant": {"name": name, "batch_size": batch, "precision": "fp32", "bucketing": False,
                        "padding": "longest", "resume": False, "compile": False, "device": "cpu",
                        "data_parallel": workers},
            "model": model, "warmup": {"inputs": warmup, "passes": 1 if warmup else 0}, "pass_timeout_s": None,
            "device": "cpu", "seed": 0, "deterministic": False, "workdir": str(folder)}


def _ids_part(tmp: Path, rows: list[tuple[str, str, str]], tokenizer: Path, classes: list[str]) -> list[dict]:
    import pyarrow.parquet as pq

    from iteralab.campaign.engines.parallel import run_data_parallel

    model = {"kind": "callable", "callable": "bench_parallel:keyword_model", "path": str(tokenizer), "head": None,
             "max_length": 256, "truncation": True, "trust_remote_code": False}
    corpora = {len(rows): _write_csv(tmp / "ids-full.csv", rows), 5: _write_csv(tmp / "ids-5.csv", rows[:5])}
    out = []
    for workers in (1, 2, 3, 7):
        for size, corpus in corpora.items():
            name = f"ids-n{workers}-d{size}"
            result = run_data_parallel(_spec(tmp, name, corpus, workers, model, classes, 32, 0))
            merged = tmp / f"pred-{name}" / f"{name}.parquet"
            got = pq.read_table(merged).column("id").to_pylist() if merged.is_file() else []
            expected = [r[0] for r in rows[:size]]
            parallel = result.get("parallel") or {}
            costs = [s["cost"] for s in parallel.get("shards", []) if s.get("cost") is not None]
            out.append({"workers": workers, "docs": size, "status": result["status"], "error": result.get("error"),
                        "ids_exact": got == expected, "duplicates": len(got) - len(set(got)),
                        "missing": len(set(expected) - set(got)), "extra": len(set(got) - set(expected)),
                        "shard_docs": [b - a for a, b in (s["rows"] for s in parallel.get("shards", []))],
                        "shard_tokens": costs, "token_imbalance": parallel.get("token_imbalance"),
                        "length_unit": parallel.get("length_unit")})
    return out


def _timed_part(tmp: Path, rows, model_path: Path, head: Path, classes: list[str], batch: int,
                repeats: int) -> dict:
    from iteralab.campaign.engines.parallel import run_data_parallel
    from iteralab.campaign.engines.local import run_in_worker

    corpus = _write_csv(tmp / "timed.csv", rows)
    model = {"kind": "encoder_head", "path": str(model_path), "head": str(head), "callable": None,
             "max_length": 256, "truncation": True, "trust_remote_code": False}
    configs = {"plain": lambda s: run_in_worker(s), "dp1": run_data_parallel, "dp2": run_data_parallel}
    workers = {"plain": 1, "dp1": 1, "dp2": 2}
    times: dict[str, list[float]] = {c: [] for c in configs}
    shard_times: list[dict] = []
    threads: dict[str, int | None] = {}
    load_before = os.getloadavg()[0]
    names = list(configs)
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            spec = _spec(tmp, f"{name}-r{rep}", corpus, workers[name], model, classes, batch, 16)
            result = configs[name](spec)
            if result.get("status") != "ok":
                raise SystemExit(f"{name} pass failed: {result.get('error')}")
            times[name].append(result["phases"]["pass_s"])
            env_cpu = (((result.get("environment") or {}).get("device_inventory") or {}).get("cpu") or {})
            threads[name] = (result.get("parallel") or {}).get("threads_per_worker") or env_cpu.get("torch_threads")
            if name == "dp2":
                shard_times.append({"device_pass_s": result["parallel"]["device_pass_s"],
                                    "time_imbalance": result["parallel"]["time_imbalance"],
                                    "token_imbalance": result["parallel"]["token_imbalance"]})
    med = {c: statistics.median(v) for c, v in times.items()}
    return {"docs": len(rows), "batch_size": batch, "repeats": repeats, "pass_s": times,
            "median_pass_s": med, "docs_per_s": {c: len(rows) / m for c, m in med.items()},
            "dp2_over_dp1_throughput": med["dp1"] / med["dp2"], "dp2_over_plain_throughput": med["plain"] / med["dp2"],
            "dp2_shards": shard_times, "torch_threads_per_process": threads,
            "load_avg_1m": [load_before, os.getloadavg()[0]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--timed-docs", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-timed", action="store_true", help="only the ids and balance part")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # workers are fresh interpreters: they import this file's keyword model and this iteralab
    import iteralab

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), str(Path(iteralab.__file__).parents[1]),
                                                           os.environ.get("PYTHONPATH", "")) if p)
    sys.path.insert(0, str(HERE))
    from bench_pass import _prepare

    from iteralab.demo.run import CLASSES
    from iteralab.models.device import _cpu_model, cpu_flags
    from iteralab.campaign.engines.shards import cpu_cores

    classes = list(CLASSES)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="iteralab-bench-dp-") as name:
        tmp = Path(name)
        corpus_path, head_path, model_path = _prepare(tmp, args.docs, 0)
        with open(corpus_path, encoding="utf-8", newline="") as fh:
            rows = [(r["id"], r["text"], r["label"]) for r in csv.DictReader(fh)]
        ids = _ids_part(tmp, rows, model_path, classes)
        timed = None if args.skip_timed else _timed_part(tmp, rows[:args.timed_docs], model_path, head_path,
                                                         classes, args.batch_size, args.repeats)
    cpu = {"model": _cpu_model()[0], "logical_cores": cpu_cores(), "flags": cpu_flags()}
    report = {"cpu": cpu, "workers_are": "CPU processes (no GPU on this machine)", "ids": ids, "timed": timed,
              "wall_s": time.perf_counter() - t0,
              "not_measured": "dp2 on a 2-GPU machine (no GPU here): the target dp2 >= 1.8 x one card is untested"}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"CPU: {cpu['model']}, {cpu['logical_cores']} logical cores, flags {' '.join(cpu['flags'] or [])}")
    print("workers are CPU processes sharing these cores (threads split between them), never cards")
    print("\n1. merged ids and shard balance (token imbalance = largest / smallest shard, target <= 1.10)")
    for r in ids:
        imb = "n/a (a shard is empty)" if r["token_imbalance"] is None else f"{r['token_imbalance']:.4f}"
        print(f"  N={r['workers']} docs={r['docs']:>5}: {r['status']}, ids exact {r['ids_exact']} "
              f"(duplicates {r['duplicates']}, missing {r['missing']}, extra {r['extra']}), shard docs "
              f"{r['shard_docs']}, {r['length_unit']} {r['shard_tokens']}, imbalance {imb}"
              + (f"; error: {r['error']}" if r["error"] else ""))
    if timed:
        print(f"\n2. throughput, MiniLM + head, fp32, batch {timed['batch_size']}, {timed['docs']} texts, "
              f"{timed['repeats']} rotated rounds; torch threads per process {timed['torch_threads_per_process']}; "
              f"1-min load average {timed['load_avg_1m'][0]:.1f} before, {timed['load_avg_1m'][1]:.1f} after "
              f"(on {cpu['logical_cores']} cores: other processes compete, multi-threaded processes suffer most)")
        for c, values in timed["pass_s"].items():
            print(f"  {c:>5}: pass_s {', '.join(f'{v:.2f}' for v in values)}; "
                  f"median {timed['median_pass_s'][c]:.2f} s, {timed['docs_per_s'][c]:.1f} docs/s")
        for s in timed["dp2_shards"]:
            per = ", ".join(f"{k} {v:.2f} s" for k, v in s["device_pass_s"].items())
            print(f"  dp2 shards: {per}; slowest/fastest {s['time_imbalance']:.3f}, tokens {s['token_imbalance']:.4f}")
        print(f"  dp2 / dp1 throughput: {timed['dp2_over_dp1_throughput']:.3f} x; dp2 / plain single pass: "
              f"{timed['dp2_over_plain_throughput']:.3f} x")
    print(f"\nnot measured: {report['not_measured']}")
    print(f"bench wall time {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
