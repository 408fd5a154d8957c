"""Benchmark: the embedding demo's chosen configuration beside sentence-transformers' ``encode``, in one process.

What an embedding user runs today is ``SentenceTransformer(<model folder>).encode(texts, batch_size=...)``. This
script times, on the same texts with the same batch size, interleaved over ``--rounds`` (the order alternates
each round, so a machine that slows down weighs on both alike), after one untimed warm-up of each:

* ours: the chosen configuration's measured pass (``MeasuredPass``, exactly what a campaign times: the corpus
  file read in record batches, ordered, tokenized, embedded, the vectors streamed to a Parquet file);
* encode: ``SentenceTransformer(<the same folder>).encode(texts, batch_size=B, normalize_embeddings=True)``
  (it sorts the texts by length internally).

It prints the median seconds of each, ``ours / encode`` (target <= 1.00: not slower than what the user runs),
the minimum cosine between the two sets of vectors, document by document (target >= 0.9999), and the CPU.

The configuration is the one the decision chose in a finished embedding demo campaign (``iteralab demo --task
embedding``), or the settings given with ``--batch-size`` (and ``--precision``, ``--bucketing``). The texts are
the campaign's corpus copy, or ``--corpus`` (a CSV with id and text columns).

sentence-transformers is not a dependency of iteralab: without it this script says so and exits 0, measuring
nothing. Timing assertions do not belong in tests; this script is where the figures are measured.

    python bench/bench_embed.py demo-embed/campaign                 # after: iteralab demo --task embedding -o demo-embed
    python bench/bench_embed.py demo-embed/campaign --batch-size 8 --bucketing --rounds 7 --json
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
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TARGET_RATIO = 1.00
TARGET_COSINE = 0.9999
ST_MISSING = ("sentence-transformers is not installed (it is not a dependency of iteralab; pip install "
              "sentence-transformers to measure it): nothing measured")


def _configuration(args: argparse.Namespace) -> dict[str, Any]:
    """The settings measured (from the command line, else the decision's choice) and the texts' file."""
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.demo.data import minilm_path

    folder = CampaignFolder.open(args.campaign) if args.campaign else None
    model = dict(folder.campaign["model"]) if folder else {"path": str(minilm_path()), "max_length": 256,
                                                            "truncation": True}
    embedding = (model.get("embedding") or {}) if folder else {"pooling": "mean", "normalize": True}
    if folder and embedding.get("task") != "embedding":
        raise SystemExit(f"{args.campaign}: not an embedding campaign (run: iteralab demo --task embedding)")
    corpus = args.corpus or (str(folder.corpus_path) if folder else None)
    if corpus is None:
        raise SystemExit("no texts: give an embedding campaign folder or --corpus FILE.csv")
    if args.batch_size:
        return {"source": "command line", "variant": f"b{args.batch_size}-{args.precision}"
                + ("-sorted" if args.bucketing else ""), "batch_size": args.batch_size, "precision": args.precision,
                "bucketing": args.bucketing, "padding": "longest", "model": model, "embedding": embedding,
                "corpus": corpus, "decision": None}
    if folder is None:
        raise SystemExit("no configuration: give an embedding campaign folder (its decision's choice) or "
                         "--batch-size")
    from iteralab.decision.rule import decide

    [machine] = decide([folder.path]).machines
    if machine.chosen is None:
        raise SystemExit(f"the decision chose no configuration on this machine ({machine.line}); give the "
                         "settings to measure with --batch-size, --precision, --bucketing")
    variant = folder.protocol.variant(machine.chosen.variant)
    return {"source": "the campaign's decision", "variant": variant.name, "batch_size": variant.batch_size,
            "precision": variant.precision, "bucketing": bool(variant.bucketing), "padding": variant.padding,
            "model": model, "embedding": embedding, "corpus": corpus, "decision": machine.line}


def _cpu() -> str:
    from iteralab.models.device import cpu_flags, device_inventory

    cpu = device_inventory()["cpu"]
    flags = " ".join(cpu_flags() or []) or "none"
    return (f"{cpu['model']}, {cpu['logical_cores']} logical cores, flags: {flags}, torch threads "
            f"{cpu['torch_threads']}")


def measure(config: dict[str, Any], rounds: int, scratch: Path) -> dict[str, Any]:
    """Interleaved medians of ours and encode, and the two sets of vectors compared document by document."""
    from sentence_transformers import SentenceTransformer

    from iteralab.campaign.engines.passes import MeasuredPass
    from iteralab.plan.scan import read_options
    from iteralab.campaign.kinds.embedding.output import read_vectors
    from iteralab.campaign.kinds.embedding.sink import VectorSink
    from iteralab.campaign.kinds.embedding.knn import cosine_rows
    from iteralab.models.factory import WorkloadSpec, load_workload
    from iteralab.plan.corpus import load_corpus

    model, embedding = config["model"], config["embedding"]
    workload = load_workload(WorkloadSpec("encoder", path=model["path"], precision=config["precision"], device="cpu",
                                          max_length=model["max_length"], truncation=model["truncation"],
                                          padding=config["padding"], task="embedding", pooling=embedding["pooling"],
                                          normalize=embedding["normalize"]))
    corpus = load_corpus(config["corpus"], id_column="id", text_column="text", require_labels=False)
    ids, texts = list(corpus.ids), list(corpus.texts)
    st = SentenceTransformer(str(model["path"]), device="cpu")
    batch = config["batch_size"]
    files: list[Path] = []

    def ours() -> float:
        sink = VectorSink(scratch / f"ours-{len(files)}.parquet", [])
        pass_run = MeasuredPass(sink=sink)
        t0 = time.perf_counter()
        pass_run.run(workload, config["corpus"], read_options(id_column="id", text_column="text", require_labels=False),
                     batch, config["bucketing"], False, 0)
        seconds = time.perf_counter() - t0
        sink.flush(pass_run, final=True)  # a campaign closes the file after the measured region, as here
        sink.writer.close()
        files.append(sink.writer.path)
        return seconds

    encoded: list[np.ndarray] = []

    def encode() -> float:
        t0 = time.perf_counter()
        vectors = st.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
        seconds = time.perf_counter() - t0
        encoded[:] = [vectors]
        return seconds

    methods = {"ours": ours, "encode": encode}
    for fn in methods.values():  # one untimed warm-up each
        fn()
    times: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    load_before = os.getloadavg()
    for round_ in range(rounds):
        for name in names[round_ % 2:] + names[:round_ % 2]:
            times[name].append(methods[name]())
    load_after = os.getloadavg()
    stored = read_vectors(files[-1], normalize=bool(embedding["normalize"]))
    where = {doc: i for i, doc in enumerate(stored.ids.to_pylist())}
    ours_vectors = stored.vectors[[where[doc] for doc in ids]]
    cosines, diffs = cosine_rows(ours_vectors, np.asarray(encoded[0], dtype=np.float32))
    med = {name: statistics.median(values) for name, values in times.items()}
    return {"docs": len(texts), "rounds": rounds, "seconds": times, "median_s": med,
            "ours_over_encode": med["ours"] / med["encode"], "min_cosine": float(np.min(cosines)),
            "median_cosine": float(np.median(cosines)), "max_abs_diff": float(np.max(diffs)),
            "load_average_1min": [round(load_before[0], 2), round(load_after[0], 2)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("campaign", nargs="?", help="a finished embedding demo campaign folder")
    parser.add_argument("--corpus", help="texts to embed (CSV with id, text); default: the campaign's corpus copy")
    parser.add_argument("--batch-size", type=int, help="measure these settings instead of the decision's choice")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16", "int8-dynamic"))
    parser.add_argument("--bucketing", action="store_true", help="with --batch-size: sort by length (bucketing)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each, interleaved (default 5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        import sentence_transformers  # noqa: F401  (an optional comparison, not a dependency)
    except ImportError:
        print(ST_MISSING)
        return 0
    config = _configuration(args)
    with tempfile.TemporaryDirectory(prefix="iteralab-bench-embed-") as scratch:
        result = measure(config, max(1, args.rounds), Path(scratch))
    result.update({"cpu": _cpu(), "configuration": {k: config[k] for k in (
        "source", "variant", "batch_size", "precision", "bucketing", "decision")}})
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    c, med = result["configuration"], result["median_s"]
    print(f"CPU: {result['cpu']}")
    print(f"configuration ({c['source']}): {c['variant']}: batch {c['batch_size']}, {c['precision']}, "
          f"{'sorted by length' if c['bucketing'] else 'file order'}")
    print(f"{result['docs']} texts, median of {result['rounds']} interleaved rounds: ours {med['ours']:.3f} s, "
          f"encode {med['encode']:.3f} s")
    ratio, low = result["ours_over_encode"], result["min_cosine"]
    print(f"ours / encode = {ratio:.3f} (target <= {TARGET_RATIO:.2f}: "
          f"{'met' if ratio <= TARGET_RATIO else 'NOT met'})")
    print(f"min cosine, ours vs encode, over {result['docs']} documents = {low:.6f} (target >= {TARGET_COSINE}: "
          f"{'met' if low >= TARGET_COSINE else 'NOT met'}); median {result['median_cosine']:.6f}")
    before, after = result["load_average_1min"]
    print(f"load average (1 min) {before} before, {after} after, on {os.cpu_count()} logical cores: above the core "
          "count, other processes shared the CPU and both times may be inflated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
