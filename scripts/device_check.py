"""Device check for the first GPU: what users will run, run end to end on the rental's card, one line per check.

    python scripts/device_check.py                   # on a GPU machine (CUDA or ROCm torch), sized for < 5 minutes
    python scripts/device_check.py --cpu-self-test   # every check's code path on the CPU (the GPU parts on a fake)
    python scripts/device_check.py --only bf16,ray   # some checks alone (with the passes they read)

It builds a small BERT classifier from a config (random weights, nothing downloaded) twice, with SDPA and with
eager attention, writes a corpus and locked protocols, runs them with the product's own runner in its default
``process`` isolation (each pass forked in a worker of its own), prints per pass the synchronized host pass time
beside the CUDA-event GPU scope and the memory peaks, then one line per check:

    process        every local pass ran in a worker process of its own (the default isolation)
    fp32 bf16 fp16 each precision's passes: ok, ids match, host pass time >= GPU event time, 0 < allocated <=
                   reserved; bf16 and fp16 within the declared bound of fp32 (fp16: refused on CPU, as the policy says)
    sdpa eager     the attention implementation recorded as asked; eager and SDPA agree on the same weights
    compile        torch.compile ran a compiled graph, recorded with the backend and mode it was given
    manifest       the device inventory read from the runtime, and no pass differs from the campaign's manifest
    data-parallel  a pass over 2 cards, each worker on its own card (UUID); n/a with fewer than 2 cards
    ray            a Ray pass with one GPU actor on the card Ray assigned; n/a when ray is not installed
    generation     the tiny causal LM of tests/support/tiny_generators.py (random weights, a tokenizer built locally) as
                   a generation job in fp32, bf16 and fp16 (fp16 refused on CPU): every pass ok, its texts complete,
                   generated tokens per second measured; with vllm importable, the same job through a callable calling
                   vLLM's LLM.generate with greedy SamplingParams

``--cpu-self-test`` runs the same checks on the CPU: the real model on the CPU for process, precisions, attention,
compile and manifest, and the GPU parts (event scope, device peaks, 2 cards for data-parallel, a Ray actor given a
GPU) against the fake CUDA of ``tests/support/fakecuda.py``. It proves the check's code, not the card.

Exit 0 when every applicable check holds, 1 when one fails, 2 when it cannot run (no GPU visible without
--cpu-self-test, an unknown check name in --only, a --keep folder that is not empty). A check that does not apply
here says why on its line ([n/a]) and fails nothing.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BOUND = 0.05  # declared before running: bf16/fp16/compiled/data-parallel/Ray probabilities within 0.05 of fp32
WORDS = ("the a an and but or not no very so too is was it this that of to in on with for movie film story plot "
         "acting actor director script scene cast good great fine bad awful boring dull fun funny fresh rotten "
         "love hate best worst really quite review character ending beautiful mess").split()
CLASSES = ("plot", "fresh", "rotten")
CHECKS = ("process", "fp32", "bf16", "fp16", "sdpa", "eager", "compile", "manifest", "data-parallel", "ray",
          "generation")
TESTS = Path(__file__).resolve().parents[1] / "tests" / "support"
#: The variants the campaigns may hold, beside the protocol's batch size (fp32 is every campaign's reference).
VARIANTS = {
    "fp32": {"name": "fp32"},
    "bf16": {"name": "bf16", "precision": "bf16"},
    "fp16": {"name": "fp16", "precision": "fp16"},
    "compiled": {"name": "compiled", "compile": True, "padding": "max_length"},
    "dp2": {"name": "dp2", "data_parallel": 2, "padding": "max_length"},
    "ray": {"name": "ray", "engine": "ray"},
}
#: The variants each check reads, by campaign ("gpu": the fake campaign's 2 fake cards in the self-test, the main
#: campaign on a GPU); "process" reads whatever ran, "generation" runs a generation job of its own (_run_generation).
NEEDS = {"process": {}, "fp32": {"main": ["fp32"]}, "bf16": {"main": ["bf16"]}, "fp16": {"main": ["fp16"]},
         "sdpa": {"main": ["fp32"]}, "eager": {"main": ["fp32"], "eager": ["fp32"]},
         "compile": {"main": ["compiled"]}, "manifest": {"main": ["fp32"]}, "data-parallel": {"gpu": ["dp2"]},
         "ray": {"gpu": ["ray"]}, "generation": {}}


#: Sized for < 5 minutes on one H200-class card (an estimate until the first real runs), and for the self-test.
GPU_SIZES = dict(hidden=256, layers=4, heads=4, docs=512, batch=32, max_length=256, passes=2, longest=180)
SELF_TEST_SIZES = dict(hidden=32, layers=2, heads=2, docs=16, batch=8, max_length=32, passes=1, longest=24)


def _sizes(gpu: bool) -> dict[str, int]:
    return dict(GPU_SIZES if gpu else SELF_TEST_SIZES)


# ------------------------------------------------------------------------------------------------ what runs


@dataclass(frozen=True)
class Machine:
    """What the check runs on: a GPU (``gpus`` cards), or the CPU self-test (the fake's 2 cards); ``refused``: the
    precisions the product's own policy refuses on this card, with its reason (bf16 below compute capability 8.0)."""

    self_test: bool
    gpus: int
    ray: bool
    refused: dict[str, str] = field(default_factory=dict)

    def campaigns(self, only: tuple[str, ...]) -> dict[str, list[str]]:
        """Campaign name -> its variants, for the checks in ``only`` (fp32 first: the reference)."""
        wanted: dict[str, list[str]] = {}
        for check in only:
            for campaign, variants in NEEDS[check].items():
                if campaign == "gpu":
                    campaign = "fake" if self.self_test else "main"
                if self.applies(check) is not None or (check == "fp16" and self.self_test):
                    continue  # not run: not applicable here, or (fp16 in the self-test) refused on the CPU
                for variant in variants:
                    if variant not in wanted.setdefault(campaign, ["fp32"]):
                        wanted[campaign].append(variant)
        return wanted

    def applies(self, check: str) -> str | None:
        """Why ``check`` does not apply here (None: it applies)."""
        if check == "data-parallel" and self.gpus < 2:
            return f"{'one card' if self.gpus == 1 else 'no card'} visible, data-parallel needs 2"
        if check == "ray" and not self.ray:
            return "ray is not installed (pip install iteralab[ray]): no Ray pass"
        if check in self.refused:
            return f"the product refuses {check} on this card: {self.refused[check]}"
        if check == "generation":
            from iteralab.plan.task import TASK_KINDS

            if "generation" not in TASK_KINDS:
                return "generation jobs are not in this version"
        return None


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


def _write_corpus(root: Path, size: dict[str, int]) -> None:
    import csv
    import random

    rng = random.Random(0)
    with open(root / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "label"])
        for i in range(size["docs"]):
            length = rng.randint(3, size["longest"])
            writer.writerow([f"d{i:04d}", " ".join(rng.choice(WORDS) for _ in range(length)), CLASSES[i % 3]])


def _variant_toml(name: str, batch: int) -> str:
    lines = [f"\n[[variants]]\nbatch_size = {batch}"]
    for key, value in VARIANTS[name].items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _write_protocol(root: Path, campaign: str, variants: list[str], size: dict[str, int], machine: Machine) -> Path:
    """A protocol as a user writes one: no ``isolation`` key, so the passes run in the default (process)."""
    import torch

    model = "model-eager" if campaign == "eager" else "model-sdpa"
    device = "cuda" if campaign == "fake" or not machine.self_test else "cpu"
    # the actor runs as many torch threads as a local pass worker (torch's default here), so their manifests agree
    ray = ("ray_actors = 1\nray_cpus_per_actor = 1\nray_gpus_per_actor = 1\nray_no_progress_timeout_s = 120\n"
           f"ray_threads_per_actor = {torch.get_num_threads()}\n")
    if machine.self_test:
        ray += "ray_num_cpus = 2\n"
    path = root / f"protocol-{campaign}.toml"
    path.write_text(f"""schema_version = 1
name = "device-check-{campaign}"
version = 1
question = "Do the GPU timers, memory counters, precisions and engines behave as the protocol assumes?"
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
device = "{device}"
{ray if "ray" in variants else ""}{"".join(_variant_toml(v, size["batch"]) for v in variants)}""", encoding="utf-8")
    return path


class _Patches:
    """Attributes, dictionary entries and environment variables set for the fake machine, undone after it."""

    def __init__(self) -> None:
        self.undo: list[Any] = []

    def setattr(self, target: Any, name: str, value: Any) -> None:
        old = getattr(target, name)
        self.undo.append(lambda: setattr(target, name, old))
        setattr(target, name, value)

    def setitem(self, mapping: Any, key: Any, value: Any) -> None:
        missing = object()
        old = mapping.get(key, missing)
        self.undo.append(lambda: mapping.pop(key, None) if old is missing else mapping.__setitem__(key, old))
        mapping[key] = value

    def setenv(self, key: str, value: str) -> None:
        self.setitem(os.environ, key, value)

    def restore(self) -> None:
        while self.undo:
            self.undo.pop()()


def _install_fake(root: Path, patches: _Patches) -> None:
    """The self-test's GPU machine: two fake cards (tests/support/fakecuda.py) here, in every worker process (its
    site folder on PYTHONPATH) and for Ray, told by RAY_OVERRIDE_RESOURCES that the node has one GPU for the actor."""
    sys.path.insert(0, str(TESTS))
    patches.undo.append(lambda: sys.path.remove(str(TESTS)))
    import fakecuda

    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if name in os.environ:
            patches.setitem(os.environ, name, os.environ[name])
            del os.environ[name]
    # GPU time in the fake advances per batch, not with the clock: kept far below any host pass time
    fake = fakecuda.FakeCuda(cards=fakecuda.cards(2), ms_per_batch=0.001)
    for key, value in fake.env().items():
        patches.setenv(key, value)
    patches.setenv("PYTHONPATH", fakecuda.worker_path(root / "fake-site"))
    patches.setenv("RAY_OVERRIDE_RESOURCES", json.dumps({"GPU": 1}))
    fake.install(patches)


# ------------------------------------------------------------------------------------------------ what ran


@dataclass
class Campaign:
    """One campaign's stored records as the checks read them (or the error that stopped it)."""

    name: str
    folder: Path
    gpu: bool
    error: str | None = None
    seconds: float | None = None
    rows: tuple[Any, ...] = ()
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)

    def read(self) -> Campaign:
        from iteralab.campaign.folder import CampaignFolder

        camp = CampaignFolder.open(self.folder)
        manifest = camp.manifest
        self.rows, self.finished = camp.raw_rows(), camp.journal().finished
        self.manifest = manifest.to_json() if manifest is not None else {}
        return self

    def of(self, variant: str) -> list[Any]:
        return [r for r in self.rows if r.variant == variant]

    def probs(self, variant: str) -> dict[str, list[float]]:
        import pyarrow.parquet as pq

        from iteralab.campaign.folder import CampaignFolder

        out: dict[str, list[float]] = {}
        for row in self.of(variant):
            if row.status == "ok" and row.prediction_file:
                table = pq.read_table(CampaignFolder.open(self.folder).prediction_path(row.prediction_file))
                out.update(dict(zip(table.column("id").to_pylist(), table.column("probs").to_pylist())))
        return out


def _run(root: Path, name: str, variants: list[str], size: dict[str, int], machine: Machine) -> Campaign:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    camp = Campaign(name, root / f"campaign-{name}", gpu=name == "fake" or not machine.self_test)
    protocol = _write_protocol(root, name, variants, size, machine)
    t0 = time.perf_counter()
    try:
        lock(protocol)
        # a variant this machine cannot run is a failed row its check names, not the end of the other checks
        run_campaign(protocol, camp.folder, keep_unrunnable=True)
    except Exception as exc:  # noqa: BLE001 - a campaign that cannot run fails its checks, named, and the rest go on
        hint = f" ({exc.hint})" if getattr(exc, "hint", None) else ""
        camp.error = (f"campaign {name} did not run: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
                      f"{hint}")
        traceback.print_exc()
        return camp
    finally:
        camp.seconds = time.perf_counter() - t0
    return camp.read()


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _passes(count: int, kind: str = "") -> str:
    return f"{count} {kind}pass{'' if count == 1 else 'es'}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def _print_campaign(camp: Campaign) -> None:
    print(f"\n== campaign {camp.name} ({camp.folder}): lock and run {camp.seconds:.0f} s")
    if camp.error:
        print(f"  {camp.error}")
        return
    print(f"{'pass':<22} {'status':<7} {'host pass s':>11} {'GPU events s':>12} {'allocated':>11} "
          f"{'reserved':>11} {'CPU peak RSS':>12} {'max|dp| ref':>11}")
    for row in camp.rows:
        event_s = ((camp.finished.get(row.pass_id) or {}).get("gpu_scope") or {}).get("seconds")
        print(f"{row.pass_id:<22} {row.status:<7} {_num(row.pass_s, '.6f'):>11} {_num(event_s, '.6f'):>12} "
              f"{_mib(row.cuda_max_allocated_bytes):>11} {_mib(row.cuda_max_reserved_bytes):>11} "
              f"{_mib(row.cpu_peak_rss_bytes):>12} {_num(row.max_abs_prob_diff, '.2e'):>11}")
        if row.error:
            print(f"    error: {row.error}")
    inv = (camp.manifest.get("environment") or {}).get("device_inventory") or {}
    for key in ("backend", "torch", "torch_cuda", "torch_hip", "driver_version", "gpu_count"):
        print(f"  manifest {key}: {json.dumps(inv.get(key))}")
    for gpu in inv.get("gpus") or []:
        print(f"  manifest gpu: {json.dumps({k: gpu.get(k) for k in ('name', 'compute_capability', 'uuid')})}")


# ------------------------------------------------------------------------------------------------ the checks


def _pass_problems(camp: Campaign, row: Any) -> list[str]:
    """What a pass must show: ok, every id back, a host time; on a GPU (real or fake) the GPU event scope within the
    host pass time and 0 < allocated <= reserved, on the CPU its peak RSS and no GPU scope; within the bound of
    fp32 when it is not the reference."""
    where = f"{camp.name} {row.pass_id}"
    if row.status != "ok":
        return [f"{where}: {row.status} ({row.error or 'no error recorded'})"]
    problems = []
    if row.ids_match is not True:
        problems.append(f"{where}: ids do not match ({row.observed_ids} of {row.expected_ids})")
    if not (row.pass_s and row.pass_s > 0):
        problems.append(f"{where}: no host pass time")
    scope = (camp.finished.get(row.pass_id) or {}).get("gpu_scope") or {}
    single = row.engine != "ray" and (row.data_parallel or 1) == 1
    if camp.gpu and single:
        event_s = scope.get("seconds")
        if not (event_s is not None and row.pass_s and 0 < event_s <= row.pass_s):
            problems.append(f"{where}: GPU event scope {event_s} s not within the host pass time {row.pass_s} s "
                            f"({scope.get('reason') or 'no reason recorded'})")
    if camp.gpu and row.engine != "ray":
        alloc, reserved = row.cuda_max_allocated_bytes, row.cuda_max_reserved_bytes
        if not (alloc and reserved and alloc <= reserved):
            problems.append(f"{where}: device peaks not 0 < allocated {alloc} <= reserved {reserved}")
    if not camp.gpu:
        if scope:
            problems.append(f"{where}: a GPU scope recorded on the CPU ({scope})")
        if not row.cpu_peak_rss_bytes:
            problems.append(f"{where}: no CPU peak RSS ({row.memory_scope})")
    if row.variant != "fp32" and not (row.reproduction_ok is True and row.max_abs_prob_diff is not None
                                      and row.max_abs_prob_diff <= BOUND):
        problems.append(f"{where}: max |dp| {row.max_abs_prob_diff} to fp32, declared bound {BOUND}")
    return problems


def _variant_problems(camps: dict[str, Campaign], name: str, variant: str) -> tuple[list[str], list[Any]]:
    camp = camps.get(name)
    if camp is None:
        return [f"campaign {name} was not run"], []
    if camp.error:
        return [camp.error], []
    rows = camp.of(variant)
    if not rows:
        return [f"campaign {name} has no pass of variant {variant}"], []
    return [p for row in rows for p in _pass_problems(camp, row)], rows


def _precision(camps: dict[str, Campaign], machine: Machine, precision: str) -> tuple[list[str], str]:
    if precision == "fp16" and machine.self_test:
        from iteralab.kit.memoire import precision_refusal

        refusal = precision_refusal("fp16", "cpu")
        ok = refusal is not None and "refused on CPU" in refusal[0]
        return ([] if ok else [f"fp16 on CPU not refused by the precision policy ({refusal})"],
                f"refused on CPU by the precision policy ({refusal[0] if refusal else None}); a GPU run measures it")
    problems, rows = _variant_problems(camps, "main", precision)
    bound = "" if precision == "fp32" else f", within {BOUND} of fp32"
    return problems, f"{_passes(len(rows))} ok, ids match, timers and memory consistent{bound}"


def _attention(camps: dict[str, Campaign], name: str) -> tuple[list[str], str]:
    """sdpa: the main campaign's passes recorded SDPA; eager: the eager campaign's recorded eager, and its fp32
    probabilities agree with the SDPA ones on the same weights."""
    campaign = "main" if name == "sdpa" else "eager"
    problems, rows = _variant_problems(camps, campaign, "fp32")
    for row in rows:
        asked = ((camps[campaign].finished.get(row.pass_id) or {}).get("workload") or {}).get("attn_implementation")
        if asked != name:
            problems.append(f"{campaign} {row.pass_id}: attention implementation recorded {asked!r}, asked {name!r}")
    said = f"{_passes(len(rows))} recorded attn_implementation {name!r}"
    if name == "sdpa" or problems:
        return problems, said
    reference, _ = _variant_problems(camps, "main", "fp32")
    if reference:
        return [f"no SDPA reference: {reference[0]}"], said
    a, b = camps["main"].probs("fp32"), camps["eager"].probs("fp32")
    diff = max((abs(x - y) for i in a.keys() & b.keys() for x, y in zip(a[i], b[i])), default=None)
    if diff is None or set(a) != set(b) or diff > BOUND:
        problems.append(f"eager and SDPA differ: max |dp| {diff} over {len(a.keys() & b.keys())} common ids "
                        f"(bound {BOUND})")
    return problems, f"{said}; agrees with SDPA on the same weights, max |dp| {diff}"


def _compile(camps: dict[str, Campaign]) -> tuple[list[str], str]:
    from iteralab.models.hf import COMPILE_BACKEND, COMPILE_MODE

    problems, rows = _variant_problems(camps, "main", "compiled")
    record: dict[str, Any] = {}
    for row in rows:
        finished = camps["main"].finished.get(row.pass_id) or {}
        record = (finished.get("workload") or {}).get("compile") or {}
        given = (record.get("backend"), record.get("mode"))
        if row.status == "ok" and not (record.get("enabled") and given == (COMPILE_BACKEND, COMPILE_MODE)
                                       and record.get("compiled_graph_ran") is True):
            problems.append(f"main {row.pass_id}: compile record {record} (given backend {COMPILE_BACKEND!r}, "
                            f"mode {COMPILE_MODE!r}; a compiled graph must have run)")
        if row.status == "ok" and row.compile_s is None:
            problems.append(f"main {row.pass_id}: no compile_s recorded")
    return problems, (f"{_passes(len(rows))}: backend {record.get('backend')!r}, mode {record.get('mode')!r}, "
                      f"compiled graphs run: {record.get('graphs_captured')}")


def _manifest(camps: dict[str, Campaign], machine: Machine) -> tuple[list[str], str]:
    import torch

    problems, said = [], []
    for camp in camps.values():
        if camp.error:
            problems.append(camp.error)
            continue
        inv = (camp.manifest.get("environment") or {}).get("device_inventory") or {}
        backend = "cpu" if not camp.gpu else "rocm" if torch.version.hip else "cuda"
        gpus = torch.cuda.device_count() if camp.gpu else 0
        if (inv.get("backend"), inv.get("gpu_count")) != (backend, gpus):
            problems.append(f"{camp.name}: manifest says backend {inv.get('backend')!r} with "
                            f"{inv.get('gpu_count')} GPUs, the runtime {backend!r} with {gpus}")
        for pid, record in camp.finished.items():
            if record.get("manifest_diff"):
                problems.append(f"{camp.name} {pid}: differs from the campaign's manifest in "
                                f"{', '.join(record['manifest_diff'])}")
        said.append(f"{camp.name} {backend} x{gpus}")
    return problems, f"backend and GPU count as the runtime says ({'; '.join(said)}), no pass differs"


def _data_parallel(camps: dict[str, Campaign], machine: Machine) -> tuple[list[str], str]:
    name = "fake" if machine.self_test else "main"
    problems, rows = _variant_problems(camps, name, "dp2")
    cards: list[Any] = []
    for row in rows:
        parallel = (camps[name].finished.get(row.pass_id) or {}).get("parallel") or {}
        devices = parallel.get("devices") or []
        cards = [((d.get("card") or {}).get("uuid"), d.get("physical_id")) for d in devices]
        uuids, physical = {uuid for uuid, _ in cards}, {p for _, p in cards}
        if len(devices) != 2 or len(uuids) != 2 or len(physical) != 2 or None in uuids:
            problems.append(f"{name} {row.pass_id}: workers' cards {cards}, want 2 distinct cards with UUIDs")
        if any(d.get("completed") != d.get("expected") for d in devices):
            problems.append(f"{name} {row.pass_id}: shards incomplete "
                            f"{[(d.get('completed'), d.get('expected')) for d in devices]}")
    return problems, f"{_passes(len(rows))} over cards {[physical for _, physical in cards]} ({[u for u, _ in cards]})"


def _ray(camps: dict[str, Campaign], machine: Machine) -> tuple[list[str], str]:
    name = "fake" if machine.self_test else "main"
    problems, rows = _variant_problems(camps, name, "ray")
    camp = camps.get(name)
    gpus = ((camp.manifest.get("extra") or {}).get("ray") or {}).get("gpus") if camp and not camp.error else None
    if rows and not gpus:
        problems.append(f"{name}: the Ray cluster reported GPUs {gpus}")
    card: dict[str, Any] = {}
    for row in rows:
        actors = ((camp.finished.get(row.pass_id) or {}).get("startup") or {}).get("ray_actors") or []
        card = (actors[0].get("card") or {}) if actors else {}
        if row.status == "ok" and not (card.get("ray_gpu_ids") and card.get("uuid")):
            problems.append(f"{name} {row.pass_id}: the actor recorded no card Ray assigned ({card or 'none'})")
    return problems, (f"{_passes(len(rows))}, one actor on the GPU Ray assigned ({card.get('ray_gpu_ids')}, "
                      f"{card.get('uuid')}), cluster GPUs {gpus}")


def _process(camps: dict[str, Campaign]) -> tuple[list[str], str]:
    problems, count, forked = [], 0, 0
    for camp in camps.values():
        if camp.error:
            problems.append(camp.error)
        for row in camp.rows:
            if row.engine == "ray" or (row.data_parallel or 1) > 1:
                continue  # Ray's actors and the data-parallel workers are processes of their own by construction
            record = camp.finished.get(row.pass_id) or {}
            if record.get("error_kind") in ("unrunnable", "not_run"):
                continue  # never started (its own check names why)
            startup = record.get("startup") or {}
            count += 1
            forked += startup.get("forked") is True
            if startup.get("worker_wall_s") is None:
                problems.append(f"{camp.name} {row.pass_id}: not run in a worker process ({startup})")
    if not count:
        problems.append("no local pass ran")
    return problems, (f"{_passes(count, 'local ')}, each in a worker process of its own ({forked} forked from a "
                      "template)")


def _evaluate(check: str, camps: dict[str, Campaign], machine: Machine) -> tuple[list[str], str]:
    if check == "process":
        return _process(camps)
    if check in ("fp32", "bf16", "fp16"):
        return _precision(camps, machine, check)
    if check in ("sdpa", "eager"):
        return _attention(camps, check)
    if check == "compile":
        return _compile(camps)
    if check == "manifest":
        return _manifest(camps, machine)
    if check == "data-parallel":
        return _data_parallel(camps, machine)
    if check == "ray":
        return _ray(camps, machine)
    return _generation(camps)


GENERATION_PROTOCOL = """schema_version = 1
name = "device-check-{name}"
question = "Does a generation job run, generate and measure its tokens on this card?"

[task]
kind = "generation"

[generation]
max_new_tokens = 8
allow_empty = true

[corpus]
path = "generation.csv"
classes = []
reference_column = "answer"

[model]
{model}
max_length = 64

[metric]
name = "token_f1"
threshold = 0.0
tolerance = 1.0
reference_variant = "fp32"

[warmup]
inputs = 4
passes = 1

[run]
passes = 1
device = "{device}"
{variants}"""

#: A callable that generates through vLLM (written next to the campaign, imported by the pass worker).
VLLM_CALLABLE = """import os
from vllm import LLM, SamplingParams

_LLM = None


def generate(prompts):
    global _LLM
    if _LLM is None:
        _LLM = LLM(model=os.environ["DEVICE_CHECK_VLLM_MODEL"], dtype="float32", enforce_eager=True)
    outputs = _LLM.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8))
    return [o.outputs[0].text for o in outputs]
"""


def _run_generation(root: Path, machine: Machine) -> list[Campaign]:
    """The generation check's campaigns: the tiny causal LM in each precision this machine runs, and through vLLM
    when it is importable."""
    import csv
    import importlib.util

    sys.path.insert(0, str(TESTS))
    try:
        from tiny_generators import tiny_causal_lm_dir
    finally:
        sys.path.remove(str(TESTS))
    folder = tiny_causal_lm_dir(root / "generation-model")
    with open(root / "generation.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "answer"])
        for i in range(32):
            writer.writerow([f"g{i:03d}", " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 9)),
                             WORDS[i % len(WORDS)]])
    device = "cpu" if machine.self_test else "cuda"
    precisions = [p for p in ("fp32", "bf16", "fp16") if p not in machine.refused
                  and not (machine.self_test and p == "fp16")]
    variants = "".join(f'\n[[variants]]\nname = "{p}"\nbatch_size = 8\nprecision = "{p}"\n' for p in precisions)
    runs = [("generation", f'kind = "hf_causal_lm"\npath = "{folder.as_posix()}"', variants)]
    if importlib.util.find_spec("vllm") is not None and not machine.self_test:
        (root / "device_check_vllm.py").write_text(VLLM_CALLABLE, encoding="utf-8")
        os.environ["DEVICE_CHECK_VLLM_MODEL"] = str(folder)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        sys.path.insert(0, str(root))  # lock fingerprints the callable's module from here
        runs.append(("generation-vllm", f'kind = "callable"\ncallable = "device_check_vllm:generate"\n'
                     f'path = "{folder.as_posix()}"', '\n[[variants]]\nname = "fp32"\nbatch_size = 8\n'))
    camps = []
    for name, model, declared in runs:
        protocol = root / f"protocol-{name}.toml"
        protocol.write_text(GENERATION_PROTOCOL.format(name=name, model=model, device=device, variants=declared),
                            encoding="utf-8")
        camps.append(_run_protocol(protocol, Campaign(name, root / f"campaign-{name}", gpu=not machine.self_test)))
    return camps


def _run_protocol(protocol: Path, camp: Campaign) -> Campaign:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    t0 = time.perf_counter()
    try:
        lock(protocol)
        run_campaign(protocol, camp.folder, keep_unrunnable=True)
    except Exception as exc:  # noqa: BLE001 - a campaign that cannot run fails its check, named
        camp.error = f"campaign {camp.name} did not run: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
        traceback.print_exc()
        return camp
    finally:
        camp.seconds = time.perf_counter() - t0
    return camp.read()


def _generation(camps: dict[str, Campaign]) -> tuple[list[str], str]:
    """Every generation pass ok with its texts complete and its tokens per second measured; fp32's texts are the
    reference's (identical share 1); the other precisions' identical shares are reported, not judged."""
    mine = [c for name, c in camps.items() if name.startswith("generation")]
    problems = [c.error for c in mine if c.error]
    said = []
    for camp in mine:
        for row in camp.rows:
            where = f"{camp.name} {row.variant}"
            if row.status != "ok" or not row.ids_match or not row.format_ok:
                problems.append(f"{where}: status {row.status}, ids {row.ids_match}, format {row.format_ok} "
                                f"({row.error or (row.notes or '')[:160]})")
            elif camp.name == "generation" and not row.tokens_per_s:
                problems.append(f"{where}: generated tokens per second not measured")
            else:
                said.append(f"{where} {_num(row.tokens_per_s, '.0f')} tok/s, identical to fp32 "
                            f"{_num(row.identical_share, '.0%')}")
    if not mine or not any(c.rows for c in mine):
        problems.append("no generation campaign ran")
    vllm = any(c.name == "generation-vllm" for c in mine)
    return problems, "; ".join(said) + ("" if vllm else "; vLLM callable not run (vllm not importable here)")


def _report(checks: tuple[str, ...], camps: dict[str, Campaign], machine: Machine, started: float | None = None
            ) -> int:
    failed, skipped = [], []
    print("\nchecks:")
    for check in checks:
        why = machine.applies(check)
        if why is not None:
            skipped.append(check)
            print(f"  [n/a]  {check}: {why}")
            continue
        problems, said = _evaluate(check, camps, machine)
        if problems:
            failed.append(check)
        print(f"  [{'FAIL' if problems else 'ok'}]{'' if problems else '  '} {check}: "
              + ("; ".join(problems) if problems else said))
    applicable = len(checks) - len(skipped)
    mode = "CPU self-test" if machine.self_test else "GPU"
    if started is not None:  # the budget on one H200-class card is 5 minutes: the first real runs say if it holds
        print(f"\nwall time: {time.perf_counter() - started:.0f} s, models and campaigns included")
    result = (f"{len(failed)} of {applicable} applicable checks FAILED: {', '.join(failed)}" if failed
              else "no check applies here" if not applicable
              else "the 1 applicable check passed" if applicable == 1 else f"all {applicable} applicable checks passed")
    print(f"\ndevice_check ({mode}): {result}" + (f"; not applicable: {', '.join(skipped)}" if skipped else ""))
    return 1 if failed else 0


def _refused_here() -> dict[str, str]:
    """The half precisions the product's precision policy refuses on this machine's first card."""
    from iteralab.kit.memoire import precision_refusal

    refused = {p: precision_refusal(p, "cuda:0") for p in ("bf16", "fp16")}
    return {p: why[0] for p, why in refused.items() if why}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="What users run, on the rental's first GPU: one line per check.")
    parser.add_argument("--cpu-self-test", action="store_true",
                        help="every check's code path on the CPU, the GPU parts on the fake CUDA of tests/support/")
    parser.add_argument("--keep", type=Path, help="write the campaigns here instead of a temporary folder")
    parser.add_argument("--only", default=",".join(CHECKS),
                        help=f"comma-separated checks to run (default: all of {', '.join(CHECKS)})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    only = tuple(c.strip() for c in args.only.split(",") if c.strip())
    unknown = [c for c in only if c not in CHECKS]
    if unknown or not only:
        print(f"device_check: refused: --only {args.only!r}: unknown check {unknown[0] if unknown else '(none)'!r}; "
              f"known: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        print(f"device_check: refused: --keep {args.keep}: the folder is not empty; give a new folder",
              file=sys.stderr)
        return 2
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if not args.cpu_self_test and not torch.cuda.is_available():
        print(f"device_check: refused: no GPU visible to torch {torch.__version__} (CUDA {torch.version.cuda}, "
              f"HIP {torch.version.hip}); run it on a GPU machine, or use --cpu-self-test", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from iteralab.campaign.engines.raypass import ray_installed

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    machine = Machine(self_test=args.cpu_self_test, gpus=2 if args.cpu_self_test else torch.cuda.device_count(),
                      ray=ray_installed(), refused={} if args.cpu_self_test else _refused_here())
    size = _sizes(not machine.self_test)
    root = args.keep or Path(tempfile.mkdtemp(prefix="iteralab-device-check-"))
    root.mkdir(parents=True, exist_ok=True)
    plan = machine.campaigns(only)
    print(f"device_check ({'CPU self-test, the GPU parts on 2 fake cards' if machine.self_test else 'GPU'}): "
          f"torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip}), "
          f"{machine.gpus if not machine.self_test else 0} GPUs visible, ray {'installed' if machine.ray else 'absent'}"
          f"; campaigns {', '.join(f'{k} {v}' for k, v in plan.items()) or 'none'} in {root}")
    if plan:
        _write_corpus(root, size)
        for attention in ("sdpa", "eager") if "eager" in plan else ("sdpa",):
            _build_model(root / f"model-{attention}", size, attention)
    camps: dict[str, Campaign] = {}
    if "generation" in only and machine.applies("generation") is None:  # before any fake card is installed
        for camp in _run_generation(root, machine):
            camps[camp.name] = camp
            _print_campaign(camp)
    patches = _Patches()
    try:
        for name, variants in plan.items():
            if name == "fake":
                _install_fake(root, patches)
            camps[name] = _run(root, name, variants, size, machine)
            _print_campaign(camps[name])
        return _report(only, camps, machine, started)
    finally:
        patches.restore()


if __name__ == "__main__":
    sys.exit(main())
