"""Benchmark: our measured pass against a bare forward loop and against a transformers pipeline.

All three run in ONE process, interleaved and rotated across repeats, on the same texts and the same
batches (batch 8 by default), for fixed order and for length bucketing:

* ``ours``     — ``iteralab.campaign.engines.passes.MeasuredPass``: reads the corpus file, tokenizes each batch, moves it to
                 the device, runs the model, materializes the probabilities on the host (what a campaign times);
* ``bare``     — forward only, on tensors tokenized and moved to the device *before* the timer starts;
* ``pipeline`` — what a user would write with transformers: ``pipeline("feature-extraction")`` then mean
                 pooling over real tokens and the same linear head, in numpy.

It prints the median of each and the ratios ``ours / bare`` and ``pipeline / ours``. The target is
``ours / bare <= 1.05`` at batch 8. Timing assertions do not belong in tests (machines are noisy): this
script is where the figure is measured.

    python bench/bench_pass.py                 # 200 Rotten Tomatoes texts, MiniLM + a trained head
    python bench/bench_pass.py --docs 400 --repeats 5 --json
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

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _prepare(tmp: Path, docs: int, seed: int) -> tuple[Path, Path, Path]:
    """A corpus CSV of `docs` real texts and a linear head trained on other texts (MiniLM embeddings)."""
    import random

    from iteralab.plan.corpus import write_corpus
    from iteralab.demo.run import CLASSES, minilm_path
    from iteralab.demo.data import load_rotten_tomatoes
    from iteralab.models.head import embed_texts, save_head, train_linear_head

    corpus = load_rotten_tomatoes()
    ids = list(corpus.ids)
    random.Random(seed).shuffle(ids)
    final = corpus.subset(ids[:docs])
    train = corpus.subset(ids[docs: docs + 300])
    model = minilm_path()
    emb = embed_texts(model, list(train.texts), batch_size=32, max_length=256)
    weight, bias = train_linear_head(emb, list(train.labels), CLASSES, seed=seed)
    head = tmp / "head.safetensors"
    save_head(head, weight, bias, CLASSES, normalize=True, extra_metadata={"purpose": "benchmark"})
    path = tmp / "bench.csv"
    write_corpus(final, path)
    return path, head, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import torch
    from transformers import pipeline

    from iteralab.models import device as dev
    from iteralab.plan.corpus import load_corpus
    from iteralab.demo.run import CLASSES
    from iteralab.campaign.engines.passes import MeasuredPass
    from iteralab.plan.scan import read_options
    from iteralab.models.factory import WorkloadSpec, load_workload
    from iteralab.models.head import load_head

    with tempfile.TemporaryDirectory(prefix="iteralab-bench-") as tmp_name:
        tmp = Path(tmp_name)
        corpus_path, head_path, model_path = _prepare(tmp, args.docs, args.seed)
        device = dev.resolve_device(args.device)
        workload = load_workload(WorkloadSpec("encoder_head", path=model_path, head=head_path, classes=tuple(CLASSES),
                                              device=str(device), max_length=args.max_length))
        kwargs = dict(id_column="id", text_column="text", label_column="label", classes=list(CLASSES))
        texts = list(load_corpus(corpus_path, **kwargs).texts)
        # the bucketed pass sorts by the length each text has in its batch (truncated at max_length): the bare
        # loop runs the very batches the pass runs
        lengths = [min(n, args.max_length) for n in workload.token_lengths(texts)]
        orders = {"fixed": list(range(len(texts))),
                  "bucketed": sorted(range(len(texts)), key=lambda i: (lengths[i], i))}
        head = load_head(head_path)
        extractor = pipeline("feature-extraction", model=str(model_path), tokenizer=str(model_path),
                             device=device, framework="pt") if "framework" in pipeline.__code__.co_varnames else \
            pipeline("feature-extraction", model=str(model_path), tokenizer=str(model_path), device=device)

        def run_ours(order_name: str) -> np.ndarray:
            mp = MeasuredPass()
            mp.run(workload, str(corpus_path), read_options(**kwargs), args.batch_size, order_name == "bucketed", False, len(CLASSES))
            return mp.probs

        prebuilt: dict[str, list] = {}
        for name, order in orders.items():
            batches = [order[i: i + args.batch_size] for i in range(0, len(order), args.batch_size)]
            prebuilt[name] = [workload.to_device(workload.tokenize([texts[i] for i in b])) for b in batches]

        def run_bare(order_name: str) -> None:
            with torch.inference_mode():
                for enc in prebuilt[order_name]:
                    workload.forward_device(enc)

        def run_pipeline(order_name: str) -> np.ndarray:
            ordered = [texts[i] for i in orders[order_name]]
            out = extractor(ordered, batch_size=args.batch_size, truncation=True, max_length=args.max_length)
            pooled = np.stack([np.asarray(o[0]).mean(axis=0) for o in out])  # pipeline output drops padding
            pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
            logits = pooled @ head.weight.T + head.bias
            return logits.argmax(axis=1)

        methods = {"ours": run_ours, "bare": run_bare, "pipeline": run_pipeline}
        for order_name in orders:  # one untimed warm-up of each, same for all
            for fn in methods.values():
                fn(order_name)
        times: dict[str, dict[str, list[float]]] = {o: {m: [] for m in methods} for o in orders}
        names = list(methods)
        for rep in range(args.repeats):
            for order_name in orders:
                rotated = names[rep % len(names):] + names[: rep % len(names)]
                for m in rotated:
                    dev.synchronize(device)
                    t0 = time.perf_counter()
                    methods[m](order_name)
                    dev.synchronize(device)
                    times[order_name][m].append(time.perf_counter() - t0)

    result = {"docs": args.docs, "batch_size": args.batch_size, "repeats": args.repeats, "device": str(device),
              "torch_threads": torch.get_num_threads(), "orders": {}}
    for order_name, per in times.items():
        med = {m: statistics.median(v) for m, v in per.items()}
        result["orders"][order_name] = {
            "median_s": med, "raw_s": per,
            "ours_over_bare": med["ours"] / med["bare"],
            "pipeline_over_ours": med["pipeline"] / med["ours"],
            "target_ours_over_bare_le_1.05": med["ours"] / med["bare"] <= 1.05,
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.docs} texts, batch {args.batch_size}, {args.repeats} interleaved repeats, device {device}, "
          f"torch threads {result['torch_threads']}")
    for order_name, r in result["orders"].items():
        m = r["median_s"]
        verdict = "meets" if r["target_ours_over_bare_le_1.05"] else "MISSES"
        print(f"  {order_name:8s}: ours {m['ours']:.2f} s | bare loop {m['bare']:.2f} s | pipeline {m['pipeline']:.2f} s"
              f" | ours/bare {r['ours_over_bare']:.3f} ({verdict} <= 1.05) | pipeline/ours {r['pipeline_over_ours']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
