"""Benchmark: what the demo's answer buys, as ratios measured in one run.

From a finished demo campaign folder (default ``demo-out/campaign``) it prints:

* from the campaign's own evidence: median pass of the configuration the decision chose on this machine /
  median pass of ``b1-fp32`` (the naive configuration);
* measured now, in ONE process, interleaved and rotated over ``--repeats``, on the campaign's own corpus copy,
  model and head: the chosen configuration's measured pass (``MeasuredPass``, what a campaign times), what a
  MiniLM user would run instead — a transformers ``pipeline("feature-extraction")`` at batch 8 (+ mean
  pooling and the same head) and, when installed, sentence-transformers' ``encode`` at batch 8 (it sorts by
  length internally) — and the ratios ``pipeline / ours`` and ``encode / ours``.

Timing assertions do not belong in tests; this script is where the figures are measured. Every figure names
the CPU (model, logical cores, relevant flags).

    python bench/bench_answer.py                       # after: bash scripts/demo.sh
    python bench/bench_answer.py demo-out/campaign --repeats 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("campaign", nargs="?", default="demo-out/campaign")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from iteralab.campaign.folder import CampaignFolder
    from iteralab.campaign.engines.passes import MeasuredPass
    from iteralab.plan.scan import read_options
    from iteralab.decision.rule import decide
    from iteralab.models.factory import WorkloadSpec, load_workload
    from iteralab.models.device import cpu_flags, device_inventory
    from iteralab.models.head import load_head

    folder = CampaignFolder.open(args.campaign)
    decision = decide([folder.path])
    [machine] = decision.machines
    if machine.chosen is None:
        print(f"no configuration qualified on this machine: {machine.line}", file=sys.stderr)
        return 1
    chosen = machine.chosen
    naive = next((c for c in decision.configs if c.variant == "b1-fp32"), None)
    protocol = folder.protocol
    variant = protocol.variant(chosen.variant)
    model = folder.campaign["model"]
    classes = list(protocol.corpus.classes)
    workload = load_workload(WorkloadSpec.of(model, {"precision": variant.precision, "padding": variant.padding}, classes,
                                             "cpu", {}))
    kwargs = dict(id_column="id", text_column="text", label_column="label", classes=classes)
    corpus = str(folder.corpus_path)

    def ours() -> None:
        MeasuredPass().run(workload, corpus, read_options(**kwargs), variant.batch_size, variant.bucketing, False, len(classes))

    from iteralab.plan.corpus import load_corpus

    texts = list(load_corpus(corpus, **kwargs).texts)
    head = load_head(model["head"])
    from transformers import pipeline

    extractor = pipeline("feature-extraction", model=model["path"], tokenizer=model["path"], device="cpu")

    def with_pipeline() -> None:
        out = extractor(texts, batch_size=8, truncation=True, max_length=model["max_length"])
        pooled = np.stack([np.asarray(o[0]).mean(axis=0) for o in out])
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        (pooled @ head.weight.T + head.bias).argmax(axis=1)

    methods = {"ours": ours, "pipeline": with_pipeline}
    encode_note = None
    try:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(model["path"], device="cpu")

        def with_encode() -> None:
            emb = st.encode(texts, batch_size=8, normalize_embeddings=True)
            (emb @ head.weight.T + head.bias).argmax(axis=1)

        methods["encode"] = with_encode
    except ImportError:
        encode_note = "sentence-transformers not installed (pip install sentence-transformers): encode not measured"

    for fn in methods.values():  # one untimed warm-up each
        fn()
    times: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    for rep in range(args.repeats):
        for m in names[rep % len(names):] + names[: rep % len(names)]:
            t0 = time.perf_counter()
            methods[m]()
            times[m].append(time.perf_counter() - t0)
    med = {m: statistics.median(v) for m, v in times.items()}
    inventory = device_inventory()
    cpu = inventory["cpu"]
    result = {
        "cpu": {"model": cpu["model"], "logical_cores": cpu["logical_cores"], "relevant_flags": cpu_flags(),
                "torch_threads": cpu["torch_threads"]},
        "campaign": str(folder.path), "chosen": chosen.variant, "chosen_line": machine.line,
        "campaign_median_chosen_s": chosen.times.median,
        "campaign_median_b1_fp32_s": naive.times.median if naive else None,
        "chosen_over_b1_fp32": (chosen.times.median / naive.times.median) if naive and naive.times.median else None,
        "now_median_s": med, "docs": len(texts), "repeats": args.repeats,
        "pipeline_over_ours": med["pipeline"] / med["ours"],
        "encode_over_ours": (med["encode"] / med["ours"]) if "encode" in med else None,
        "encode_note": encode_note,
    }
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    flags = " ".join(result["cpu"]["relevant_flags"] or []) or "none"
    print(f"CPU: {cpu['model']}, {cpu['logical_cores']} logical cores, flags: {flags}, torch threads "
          f"{cpu['torch_threads']}")
    print(f"chosen on this machine: {machine.line}")
    if result["chosen_over_b1_fp32"] is not None:
        print(f"campaign medians: {chosen.variant} {chosen.times.median:.3f} s / b1-fp32 {naive.times.median:.3f} s "
              f"= {result['chosen_over_b1_fp32']:.3f}")
    print(f"now, {len(texts)} texts, median of {args.repeats}: " + ", ".join(f"{m} {v:.3f} s" for m, v in med.items()))
    print(f"pipeline / ours = {result['pipeline_over_ours']:.3f}")
    if result["encode_over_ours"] is not None:
        print(f"encode / ours = {result['encode_over_ours']:.3f} (above 1: the chosen configuration is faster)")
    else:
        print(encode_note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
