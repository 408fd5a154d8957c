"""Memory as a feasibility criterion (M1–M3): the estimate beside the observation, per variant.

``memory_table`` re-reads the stored files only — ``raw_table.csv`` (the observed peaks and their scopes,
status, ``ids_match``), ``inputs/protocol.toml`` (batch size, precision, max length), ``campaign.json`` /
``manifest.json`` (model kind and folder) and the journal (the workload each pass described) — plus the
model's ``config.json``, from which the architecture is built on PyTorch's ``meta`` device (shapes only, no
weights read) so that parameters, buffers and the Linear layers that int8-dynamic quantizes are counted
exactly. The arithmetic itself is the kit's (``iteralab/kit/memoire.py``): one implementation.

What is compared with what:

- CUDA: ``observed_bytes`` is the median of ``max_memory_allocated`` (tensors), the counter the estimate
  models; ``max_memory_reserved`` (the caching allocator) is shown in its own key with its own difference.
  The two are never summed: their peaks can occur at different moments. No runtime term (the counters see
  tensors only).
- CPU: ``observed_bytes`` is the median of the passes' process peak RSS (VmHWM). It includes the
  interpreter and libraries, so the estimate adds a runtime overhead, *measured once* by each pass worker
  after its imports and before loading the model, and stored in the journal: ``memory`` and ``report`` read
  the same record, so they show the same estimate. Only a folder without that record (in-process isolation)
  is measured again, by a fresh process that imports what a pass worker imports, and labelled as such.

A generation job's estimate adds the KV cache beside the weights (:func:`kv_cache_bytes`):
``2 × layers × key/value heads × head_dim × (prompt + max_new_tokens) × batch × bytes``, with the prompt at
``model.max_length`` (the longest prompt lock lets through) and the bytes of the variant's activations.

A number that cannot be computed is ``None`` with a reason, never 0.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from iteralab.campaign.campaignrecord import ModelRecord
from iteralab.campaign.folder import CampaignFolder, RawRow
from iteralab.campaign.journal import JOURNAL_NAME, read_journal
from iteralab.campaign.kinds.registry import kind_of
from iteralab.evidence.feasibility import feasibility
from iteralab.kit.memoire import (
    ACTIVATION_BYTES, BYTES_PER_PARAM, DEFAULT_MARGIN, NO_RUNTIME, MemoryEstimate, MemoryKitError, RuntimeOverhead,
    WeightCount, config_dims, count_weights, estimate_for_model, estimate_memory, measure_runtime_overhead, mib,
    runtime_imports)
from iteralab.plan.protocol import load_protocol

__all__ = [
    "ACTIVATION_BYTES", "BYTES_PER_PARAM", "M3_NOTE", "MemoryEstimate", "RuntimeOverhead", "WeightCount",
    "config_dims", "count_weights", "estimate_for_model", "estimate_memory", "memory_table",
    "recorded_runtime_overhead", "render_memory_table", "worker_runtime_overhead",
]

SCHEMA_VERSION = 1
M3_NOTE = ("A per-card capacity and a lot price say nothing about throughput, interconnect, or automatic "
           "distribution over several GPUs: an estimate that fits one card is a feasibility bound, not a speed, "
           "and a multi-card lot is only used in parallel when a variant measures it.")
#: What a pass worker has imported when its peak window starts (besides the model's own tensors).
WORKER_IMPORTS = ("iteralab.campaign.engines.passes", "iteralab.models.device", "iteralab.plan.corpus",
                  "iteralab.models.base", "iteralab.models.factory", "iteralab.models.hf", "iteralab.models.head",
                  "iteralab.campaign.manifest")


@functools.lru_cache(maxsize=8)
def _measured(imports: tuple[str, ...]) -> RuntimeOverhead:
    return measure_runtime_overhead(imports)


def worker_runtime_overhead(model_type: str | None = "bert") -> RuntimeOverhead:
    """The runtime overhead of a CPU pass worker, measured once per process on this machine."""
    return _measured(runtime_imports(model_type) + WORKER_IMPORTS)


def _model_spec(folder: CampaignFolder) -> ModelRecord:
    """The campaign's model record; without a model folder, the one the manifest's model spec or workload
    names."""
    spec = folder.campaign.model
    if spec.path:
        return spec
    manifest = folder.manifest
    path = ((manifest.extra if manifest else {}).get("model_spec") or {}).get("path") or \
        (manifest.workload if manifest else {}).get("model_path")
    return replace(spec, path=path)


def _meta_model(spec: ModelRecord) -> tuple[Any, int, str | None, str | None]:
    """(model on the meta device, bytes held beside it (a head), model_type, reason when there is no model)."""
    kind = spec.kind
    if kind == "callable":
        return None, 0, None, "a callable workload owns its model: there is no config to estimate from"
    if not spec.path:
        return None, 0, None, "the campaign names no model folder"
    folder = Path(spec.path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        return None, 0, None, f"model config not found: {config_file}"
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    trust = bool(spec.trust_remote_code)
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=trust)
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

        auto = {"hf_classifier": AutoModelForSequenceClassification, "hf_causal_lm": AutoModelForCausalLM,
                "hf_seq2seq": AutoModelForSeq2SeqLM}.get(str(kind), AutoModel)
        with torch.device("meta"):
            model = auto.from_config(config, trust_remote_code=trust)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        return None, 0, None, f"cannot build the architecture from {config_file}: {str(exc).splitlines()[0][:200]}"
    extra = 0
    if kind == "encoder_head" and spec.head:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(spec.head), framework="numpy") as fh:
                for name in fh.keys():
                    shape = fh.get_slice(name).get_shape()
                    extra += 4 * int(torch.Size(shape).numel())  # the head runs in float32
        except (SafetensorError, OSError) as exc:
            return None, 0, None, f"head {spec.head} unreadable: {exc}"
    return model, extra, getattr(config, "model_type", None), None


def _described_parameters(state: Any) -> dict[str, set[int]]:
    """Per variant, the parameter counts the passes' workloads described (journal ``pass_finished``)."""
    found: dict[str, set[int]] = {}
    for pid in state.finished:
        count = (state.result(pid).workload or {}).get("parameter_count")
        if isinstance(count, int):
            found.setdefault(state.started[pid]["variant"], set()).add(count)
    return found


def recorded_runtime_overhead(state: Any) -> RuntimeOverhead | None:
    """The runtime overhead the pass workers read once, after their imports and before loading the model
    (journal ``pass_finished`` → ``startup.runtime_rss_bytes``): the median over passes. None when no pass
    recorded one (in-process isolation, or a folder written before the record existed). ``state``: the
    campaign's journal as read by ``campaign.journal.read_journal``."""
    values = [v for pid in state.finished
              if isinstance(v := (state.result(pid).startup or {}).get("runtime_rss_bytes"), int) and v > 0]
    if not values:
        return None
    return RuntimeOverhead(_median(values), f"VmRSS of the pass workers after importing the runtime, before loading "
                                            f"the model: median of {len(values)} passes, recorded in the journal")


def _median(values: list[int]) -> int | None:
    return int(round(statistics.median(values))) if values else None


def kv_cache_bytes(config: Any, precision: str, batch_size: int, tokens: int) -> tuple[int, str] | None:
    """The KV cache of a batch of ``tokens`` positions (prompt + max_new_tokens) and its formula in words; None
    when the config does not say its layers and heads."""
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hidden = getattr(config, "hidden_size", None)
    head_dim = getattr(config, "head_dim", None) or getattr(config, "d_kv", None) or (
        hidden // heads if hidden and heads else None)
    if not (layers and kv_heads and head_dim):
        return None
    size = ACTIVATION_BYTES.get(precision, 4)
    total = 2 * int(layers) * int(kv_heads) * int(head_dim) * int(tokens) * int(batch_size) * size
    return total, (f"KV cache 2 × {layers} layers × {kv_heads} heads × {head_dim} head_dim × {tokens} positions "
                   f"(prompt + max_new_tokens) × batch {batch_size} × {size} B")


def _with_kv_cache(row: dict[str, Any], model: Any, protocol: Any, variant: Any) -> None:
    """A generation job: the KV cache term added to the estimate beside the weights (and to its total)."""
    if not kind_of(protocol).kv_cache or protocol.generation is None or model is None \
            or not row.get("estimate_terms"):
        return
    tokens = protocol.model.max_length + protocol.generation.max_new_tokens
    kv = kv_cache_bytes(model.config, variant.precision, variant.batch_size, tokens)
    if kv is None:
        row["notes"].append("KV cache: not estimated (the config names no layers and heads)")
        return
    terms = row["estimate_terms"]
    terms["kv_cache_bytes"] = kv[0]
    terms["total_bytes"] = terms["total_bytes"] + kv[0]
    row["estimate_assumptions"].append(kv[1])
    if row["estimate_bytes"] is not None:
        row["estimate_bytes"] += kv[0]
        observed = row["observed_bytes"]
        row["difference_bytes"] = observed - row["estimate_bytes"] if observed is not None else None
        row["difference_pct"] = (round(100.0 * row["difference_bytes"] / row["estimate_bytes"], 1)
                                 if row["difference_bytes"] is not None and row["estimate_bytes"] else None)


def memory_table(campaign_dir: str | Path, *, runtime_overhead: RuntimeOverhead | int | None = None,
                 margin: float = DEFAULT_MARGIN) -> list[dict[str, Any]]:
    """One row per protocol variant: observed peak, estimate, difference, counter scope, feasibility (M1–M3).

    ``runtime_overhead`` (CPU only): given bytes, a :class:`RuntimeOverhead`, or None for the one the pass
    workers recorded in the journal (:func:`recorded_runtime_overhead`), measured here only for a folder that
    holds none (:func:`worker_runtime_overhead`).
    """
    folder = CampaignFolder.open(campaign_dir)
    campaign_dir = folder.path
    protocol = load_protocol(folder.protocol_path)
    raw = folder.counted_rows()
    expected = folder.corpus_size
    spec = _model_spec(folder)
    model, extra_bytes, model_type, model_reason = _meta_model(spec)

    journal = read_journal(campaign_dir / JOURNAL_NAME)  # read once: the described models and the runtime record
    described = _described_parameters(journal)
    if isinstance(runtime_overhead, int) and not isinstance(runtime_overhead, bool):
        runtime_overhead = RuntimeOverhead(runtime_overhead, "runtime overhead given by the caller "
                                                             "(--runtime-overhead-bytes)")
    out = []
    for variant in protocol.variants:
        rows = [r for r in raw if r.variant == variant.name]
        devices = {r.device for r in rows if r.device}
        cuda = any(r.cuda_max_allocated_bytes or r.cuda_max_reserved_bytes for r in rows) or any(
            d.startswith("cuda") for d in devices)
        if not cuda and runtime_overhead is None and model is not None:
            # the run's own record; a folder without one is measured here once, and labelled so
            runtime_overhead = recorded_runtime_overhead(journal) or worker_runtime_overhead(model_type)
        overhead = RuntimeOverhead(0, NO_RUNTIME) if cuda else runtime_overhead
        row = _variant_row(variant, protocol.model.max_length, rows, devices, cuda, model, extra_bytes,
                           model_reason, overhead, margin, spec, described.get(variant.name, set()), expected)
        _with_kv_cache(row, model, protocol, variant)
        if not cuda and protocol.run.isolation != "process":
            row["notes"].append(f"isolation {protocol.run.isolation!r}: the passes ran in the campaign's own process, "
                                "whose peak also holds whatever it had loaded before; the runtime overhead of a "
                                "fresh worker understates that")
        out.append(row)
    return out


def _variant_row(variant: Any, max_length: int, rows: list[RawRow], devices: set[str], cuda: bool,
                 model: Any, extra_bytes: int, model_reason: str | None, overhead: RuntimeOverhead | None,
                 margin: float, spec: ModelRecord, described: set[int], expected: int) -> dict[str, Any]:
    ok = [r for r in rows if r.ok and not r.excluded]
    notes: list[str] = []
    row: dict[str, Any] = {
        "variant": variant.name, "batch_size": variant.batch_size, "precision": variant.precision,
        "max_length": max_length, "padding": variant.padding, "device": ",".join(sorted(devices)) or None,
        "passes": len(rows), "observed_passes": 0,
    }
    if cuda:
        alloc = [r.cuda_max_allocated_bytes for r in ok if r.cuda_max_allocated_bytes is not None]
        reserved = [r.cuda_max_reserved_bytes for r in ok if r.cuda_max_reserved_bytes is not None]
        row.update(observed_counter="cuda max_memory_allocated (tensors); reserved in its own key, never summed",
                   observed_bytes=_median(alloc), observed_values=alloc,
                   observed_cuda_allocated_bytes=_median(alloc), observed_cuda_reserved_bytes=_median(reserved),
                   observed_cuda_reserved_values=reserved, observed_passes=len(alloc))
    else:
        rss = [r.cpu_peak_rss_bytes for r in ok if r.cpu_peak_rss_bytes is not None]
        row.update(observed_counter="process peak RSS (cpu_peak_rss_bytes)", observed_bytes=_median(rss),
                   observed_values=rss, observed_cuda_allocated_bytes=None, observed_cuda_reserved_bytes=None,
                   observed_passes=len(rss))
    used = [r for r in ok if (r.cuda_max_allocated_bytes if cuda else r.cpu_peak_rss_bytes)]
    scopes = sorted({r.memory_scope or "" for r in used} - {""})
    row["observed_scope"] = " | ".join(scopes) or None
    if len(scopes) > 1:
        notes.append("the passes' counters have different scopes: their values are not comparable as one median")
    if row["observed_bytes"] is None:
        row["observed_reason"] = ("no completed pass with a recorded peak" if not ok
                                  else "the completed passes recorded no peak (see the raw table's notes)")
    estimate, reason = None, model_reason
    if model is not None:
        try:
            estimate = estimate_for_model(
                model, precision=variant.precision, batch_size=variant.batch_size, seq_len=max_length,
                margin=margin, runtime_overhead_bytes=(overhead.bytes or 0) if overhead else 0,
                runtime_overhead_label=overhead.label if overhead else None, extra_weight_bytes=extra_bytes,
                extra_note=f"linear head {extra_bytes:,} B float32" if extra_bytes else None)
        except MemoryKitError as exc:
            reason = f"cannot estimate: {exc.one_line()}"
        if overhead is not None and overhead.bytes is None:
            reason = f"runtime overhead could not be measured ({overhead.reason}); terms shown, no total"
        counted = count_weights(model, "fp32").parameter_count
        mismatch = sorted(n for n in described if n != counted)
        if mismatch:
            notes.append(f"the passes' model had {', '.join(f'{n:,}' for n in mismatch)} parameters, the "
                         f"architecture built from config.json has {counted:,}: the weights term may be off")
    row["estimate_terms"] = estimate.terms() if estimate else None
    row["estimate_assumptions"] = list(estimate.assumptions) if estimate else None
    row["estimate_bytes"] = estimate.total_bytes if estimate and reason is None else None
    row["estimate_reason"] = reason
    observed, total = row["observed_bytes"], row["estimate_bytes"]
    row["difference_bytes"] = observed - total if observed is not None and total is not None else None
    row["difference_pct"] = (round(100.0 * row["difference_bytes"] / total, 1)
                             if row["difference_bytes"] is not None and total else None)
    if cuda:
        res = row["observed_cuda_reserved_bytes"]
        row["reserved_difference_bytes"] = res - total if res is not None and total is not None else None
    if variant.padding == "longest":
        notes.append(f"padding 'longest': most batches are shorter than max_length {max_length}; the estimate at "
                     "max_length bounds the activations from above")
    if not cuda and row["observed_scope"] and "since reset" in row["observed_scope"]:
        notes.append("the CPU peak window starts after load and warm-up: it includes the runtime, the weights, "
                     "the tokenizer and any heap the warm-up left resident")
    verdict = feasibility(rows, expected)
    row["feasible"], row["feasible_reason"] = verdict.feasible, verdict.reason()
    row["model_path"] = spec.path
    row["notes"] = notes
    return row


def render_memory_table(rows: list[dict[str, Any]]) -> list[str]:
    """Text lines: one line per variant (observed, estimate, difference, feasibility), the details of each
    variant, then the assumptions and notes that apply to every variant, said once."""
    header = f"{'variant':<14} {'device':<8} {'observed':>14} {'estimate':>14} {'difference':>22}  feasible"
    lines = [header, "-" * len(header)]
    for r in rows:
        diff = ("n/a" if r["difference_bytes"] is None
                else f"{r['difference_bytes'] / 1048576:+,.1f} MiB ({r['difference_pct']:+.1f} %)")
        lines.append(f"{r['variant']:<14} {(r['device'] or '?'):<8} {mib(r['observed_bytes']):>14} "
                     f"{mib(r['estimate_bytes']):>14} {diff:>22}  {'yes' if r['feasible'] else 'NO'}")
    details = [[*(r["estimate_assumptions"] or [])[1:], *r["notes"]] for r in rows]
    shared = [d for d in details[0] if all(d in other for other in details[1:])] if details else []
    lines.append("observed - estimate = difference; observed is the median of the passes' peaks")
    for r, extra in zip(rows, details):
        lines += ["", f"{r['variant']}: batch {r['batch_size']}, {r['precision']}, max length {r['max_length']}, "
                      f"{r['observed_passes']} pass(es) with a peak; counter: {r['observed_counter']}",
                  f"  scope: {r['observed_scope'] or 'none recorded'}"]
        if r.get("observed_cuda_reserved_bytes") is not None:
            lines.append(f"  cuda max_memory_reserved: {mib(r['observed_cuda_reserved_bytes'])} (difference to the "
                         f"estimate {mib(r.get('reserved_difference_bytes'))}); never added to allocated")
        if r.get("observed_reason"):
            lines.append(f"  observed: none, {r['observed_reason']}")
        if r["estimate_terms"]:
            lines.append("  estimate: " + ", ".join(f"{k.removesuffix('_bytes').replace('_', ' ')} {mib(v)}"
                                                   for k, v in r["estimate_terms"].items() if k != "total_bytes"))
            lines.append(f"    {r['estimate_assumptions'][0]}")
        if r["estimate_reason"]:
            lines.append(f"  estimate: none, {r['estimate_reason']}")
        lines.append(f"  feasible (M1): {r['feasible_reason']}")
        lines.extend(f"  - {d}" for d in extra if d not in shared)
    if shared:
        lines += ["", "For every variant:"] + [f"  - {d}" for d in shared]
    lines += ["", f"Note: {M3_NOTE}"]
    return lines


def memory_report(campaign_dir: str | Path, *, runtime_overhead: int | None = None) -> dict[str, Any]:
    """The JSON document of ``iteralab memory --json``."""
    rows = memory_table(campaign_dir, runtime_overhead=runtime_overhead)
    return {"schema_version": SCHEMA_VERSION, "campaign": str(campaign_dir), "variants": rows, "note": M3_NOTE}
