"""Device check for the first GPU: a tiny campaign end to end on the GPU, its measured figures, its invariants.

    python scripts/device_check.py                  # on a GPU machine (CUDA or ROCm torch), sized for < 5 minutes
    python scripts/device_check.py --cpu-self-test  # the same checks on the CPU path (seconds; run by the tests)

It builds a small BERT classifier from a config (random weights, no download) twice, with SDPA and with eager
attention, writes a corpus and two locked protocols (fp32, bf16, fp16 variants — fp16 is refused on CPU by the
precision policy — and eager fp32), runs both campaigns with the product's own runner, then prints per pass the
synchronized host pass time beside the CUDA-event GPU scope, the allocated and reserved peaks, the manifest's
device fields, and checks: host pass time ≥ event time, 0 < allocated ≤ reserved, ids match, bf16 within the
declared bound, the attention implementation recorded as asked. Exit 0 when every check holds, 1 when one fails,
2 when the machine cannot run it (no GPU without --cpu-self-test).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

BOUND = 0.05  # declared before running: bf16/fp16 probabilities within 0.05 of the fp32 reference pass
WORDS = ("the a an and but or not no very so too is was it this that of to in on with for movie film story plot "
         "acting actor director script scene cast good great fine bad awful boring dull fun funny fresh rotten "
         "love hate best worst really quite review character ending beautiful mess").split()
CLASSES = ("plot", "fresh", "rotten")


def _sizes(gpu: bool) -> dict[str, int]:
    if gpu:
        return dict(hidden=256, layers=4, heads=4, docs=512, batch=32, max_length=256, passes=3, longest=180)
    return dict(hidden=32, layers=2, heads=2, docs=16, batch=8, max_length=32, passes=1, longest=24)


def _build_model(folder: Path, size: dict[str, int], attention: str) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(0)  # the same weights in both folders
    config = BertConfig(vocab_size=len(vocab), hidden_size=size["hidden"], num_hidden_layers=size["layers"],
                        num_attention_heads=size["heads"], intermediate_size=4 * size["hidden"],
                        max_position_embeddings=512, id2label=dict(enumerate(CLASSES)),
                        label2id={c: i for i, c in enumerate(CLASSES)})
    BertForSequenceClassification(config).eval().save_pretrained(folder, safe_serialization=True)
    # transformers 5's BertTokenizer takes the vocabulary as `vocab` (and ignores `vocab_file`: every word would be
    # [UNK]); 4.x's fast tokenizer is BertTokenizerFast(vocab_file=...)
    if "vocab" in inspect.signature(BertTokenizer.__init__).parameters:
        tokenizer = BertTokenizer(vocab=str(folder / "vocab.txt"), model_max_length=512)
    else:
        from transformers import BertTokenizerFast

        tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), model_max_length=512)
    if tokenizer.unk_token_id in tokenizer(WORDS[0])["input_ids"]:
        raise SystemExit(f"device_check: the test tokenizer does not know the word {WORDS[0]!r}")
    tokenizer.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    # read back by from_pretrained, not kept by save_pretrained: transformers 5 reads attn_implementation,
    # 4.x (4.56, the floor) _attn_implementation
    saved["attn_implementation"] = saved["_attn_implementation"] = attention
    (folder / "config.json").write_text(json.dumps(saved, indent=2), encoding="utf-8")


def _write_inputs(root: Path, size: dict[str, int], device: str, gpu: bool) -> tuple[Path, Path]:
    import csv
    import random

    rng = random.Random(0)
    with open(root / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "label"])
        for i in range(size["docs"]):
            length = rng.randint(3, size["longest"])
            writer.writerow([f"d{i:04d}", " ".join(rng.choice(WORDS) for _ in range(length)), CLASSES[i % 3]])
    precisions = ("fp32", "bf16", "fp16") if gpu else ("fp32", "bf16")
    main_variants = "".join(f'\n[[variants]]\nname = "{p}"\nbatch_size = {size["batch"]}\nprecision = "{p}"\n'
                            for p in precisions)
    main_series = f'\n[[series]]\nname = "precision"\nfactor = "precision"\nvariants = {list(precisions)}\n'
    eager_variants = f'\n[[variants]]\nname = "fp32"\nbatch_size = {size["batch"]}\nprecision = "fp32"\n'
    paths = []
    for name, model, variants in (("sdpa", "model-sdpa", main_variants + main_series),
                                  ("eager", "model-eager", eager_variants)):
        path = root / f"protocol-{name}.toml"
        path.write_text(f"""schema_version = 1
name = "device-check-{name}"
version = 1
question = "Do the GPU timers, memory counters and precisions behave as the protocol assumes?"
scenario = "offline"

[corpus]
path = "corpus.csv"
classes = {list(CLASSES)}

[model]
kind = "hf_classifier"
path = "{model}"
max_length = {size["max_length"]}

[metric]
name = "macro_f1"
threshold = 0.0
tolerance = 1.0
reference_variant = "fp32"

[reproduction]
target = "bounded"
bound = {BOUND}

[warmup]
inputs = {size["batch"]}
passes = 1

[run]
passes = {size["passes"]}
isolation = "inprocess"
device = "{device}"
{variants}""", encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.count = 0

    def check(self, ok: bool, what: str) -> None:
        self.count += 1
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            self.failed.append(what)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def _report(folder: Path, gpu: bool, checks: Checks) -> dict[str, dict[str, float]]:
    from iteralab.campaign.folder import CampaignFolder

    camp = CampaignFolder.open(folder)
    state = camp.journal()
    probs: dict[str, dict[str, float]] = {}
    print(f"{'pass':<22} {'status':<7} {'host pass s':>11} {'GPU events s':>12} {'allocated':>11} "
          f"{'reserved':>11} {'CPU peak RSS':>12} {'max|dp| ref':>11}")
    for row in camp.raw_rows():
        scope = (state.finished.get(row.pass_id) or {}).get("gpu_scope") or {}
        event_s = scope.get("seconds")
        print(f"{row.pass_id:<22} {row.status:<7} {_num(row.pass_s, '.6f'):>11} {_num(event_s, '.6f'):>12} "
              f"{_mib(row.cuda_max_allocated_bytes):>11} {_mib(row.cuda_max_reserved_bytes):>11} "
              f"{_mib(row.cpu_peak_rss_bytes):>12} {_num(row.max_abs_prob_diff, '.2e'):>11}")
        where = f"{folder.name} {row.pass_id}"
        checks.check(row.status == "ok", f"{where}: status ok ({row.error or 'no error'})")
        if row.status != "ok":
            continue
        checks.check(row.ids_match is True, f"{where}: ids match ({row.observed_ids} of {row.expected_ids})")
        checks.check(row.pass_s is not None and row.pass_s > 0, f"{where}: host pass time > 0")
        if gpu:
            checks.check(event_s is not None and 0 < event_s <= row.pass_s,
                         f"{where}: host pass time {row.pass_s:.4f} s >= GPU event scope {event_s} s")
            alloc, reserved = row.cuda_max_allocated_bytes, row.cuda_max_reserved_bytes
            checks.check(bool(alloc) and bool(reserved) and alloc <= reserved,
                         f"{where}: 0 < allocated {alloc} <= reserved {reserved}")
        else:
            checks.check(scope == {}, f"{where}: no GPU scope recorded on CPU")
            checks.check(bool(row.cpu_peak_rss_bytes), f"{where}: CPU peak RSS > 0 ({row.memory_scope})")
        if row.variant != "fp32":
            checks.check(row.reproduction_ok is True and row.max_abs_prob_diff is not None
                         and row.max_abs_prob_diff <= BOUND,
                         f"{where}: {row.variant} within the declared bound {BOUND} of fp32 "
                         f"(max |dp| {row.max_abs_prob_diff})")
        if row.variant == "fp32" and row.prediction_file:
            import pyarrow.parquet as pq

            table = pq.read_table(camp.prediction_path(row.prediction_file)).to_pydict()
            probs.setdefault(row.variant, {}).update(dict(zip(table["id"], table["probs"])))
    return probs


def _manifest_fields(folder: Path) -> dict[str, object]:
    from iteralab.campaign.folder import CampaignFolder

    manifest = CampaignFolder.open(folder).manifest or {}
    env = manifest.get("environment") or {}
    inv = env.get("device_inventory") or {}
    work = manifest.get("workload") or {}
    return {
        "backend": inv.get("backend"), "torch": inv.get("torch"), "torch_cuda (runtime built with)": inv.get("torch_cuda"),
        "torch_hip": inv.get("torch_hip"), "driver_version": inv.get("driver_version") or inv.get("driver_version_reason"),
        "cuda_driver_api_version": inv.get("cuda_driver_api_version") or inv.get("cuda_driver_api_version_reason"),
        "gpus": [{k: g.get(k) for k in ("name", "compute_capability", "total_memory_bytes", "gcn_arch_name") if k in g}
                 for g in inv.get("gpus") or []],
        "attn_implementation": work.get("attn_implementation"), "precision (first pass)": work.get("precision"),
        "tf32": inv.get("tf32"), "determinism": env.get("determinism"),
        "rocm (C4)": (inv.get("rocm") or {}).get("verdict"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Tiny GPU campaign: measured figures and invariants.")
    parser.add_argument("--cpu-self-test", action="store_true", help="run the same checks on the CPU path")
    parser.add_argument("--keep", type=Path, help="write the campaigns here instead of a temporary folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    gpu = not args.cpu_self_test
    if gpu and not torch.cuda.is_available():
        print(f"device_check: refused: no GPU visible to torch {torch.__version__} (CUDA {torch.version.cuda}, "
              f"HIP {torch.version.hip}); run it on a GPU machine, or use --cpu-self-test", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    size = _sizes(gpu)
    root = args.keep or Path(tempfile.mkdtemp(prefix="iteralab-device-check-"))
    root.mkdir(parents=True, exist_ok=True)
    device = "cuda" if gpu else "cpu"
    _build_model(root / "model-sdpa", size, "sdpa")
    _build_model(root / "model-eager", size, "eager")
    sdpa_protocol, eager_protocol = _write_inputs(root, size, device, gpu)
    checks = Checks()
    probs: dict[str, dict[str, dict[str, float]]] = {}
    for name, protocol in (("sdpa", sdpa_protocol), ("eager", eager_protocol)):
        lock(protocol)
        out = root / f"campaign-{name}"
        run_campaign(protocol, out)
        print(f"\n== campaign {name} ({out})")
        probs[name] = _report(out, gpu, checks)
        fields = _manifest_fields(out)
        for key, value in fields.items():
            print(f"  manifest {key}: {json.dumps(value, sort_keys=True)}")
        checks.check(fields["attn_implementation"] == name, f"{name}: manifest attention implementation "
                                                            f"{fields['attn_implementation']!r} as asked")
        checks.check(fields["backend"] == ("cpu" if not gpu else "rocm" if torch.version.hip else "cuda"),
                     f"{name}: manifest backend {fields['backend']!r} read from the runtime")
    a, b = probs["sdpa"].get("fp32", {}), probs["eager"].get("fp32", {})
    diff = max((abs(x - y) for i in a.keys() & b.keys() for x, y in zip(a[i], b[i])), default=None)
    print(f"\neager vs SDPA, fp32, same weights: max |dp| = {diff}")
    checks.check(diff is not None and set(a) == set(b) and diff <= BOUND,
                 f"eager and SDPA agree within {BOUND} on the same ids")
    if not gpu:
        from iteralab.kit.memoire import precision_refusal

        refusal = precision_refusal("fp16", "cpu")
        checks.check(refusal is not None and "refused on CPU" in refusal[0], f"fp16 on CPU refused: {refusal}")
    print(f"\ndevice_check ({'GPU' if gpu else 'CPU self-test'}): "
          + (f"all {checks.count} checks passed" if not checks.failed
             else f"{len(checks.failed)} of {checks.count} checks FAILED: " + "; ".join(checks.failed)))
    return 0 if not checks.failed else 1


if __name__ == "__main__":
    sys.exit(main())
