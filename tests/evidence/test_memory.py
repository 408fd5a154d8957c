"""Memory estimate arithmetic, weight counting, and the per-variant memory table of a campaign (M1–M3)."""

import csv
import json
import shutil

import pytest

from campaign_factory import callable_campaign, write_corpus_csv
from iteralab.campaign.engines import prefork
from iteralab.cli import main
from iteralab.kit import memoire
from iteralab.evidence.memory import (
    M3_NOTE,
    count_weights,
    estimate_for_model,
    estimate_memory,
    memory_table,
)
from iteralab.lock.inputs import lock
from iteralab.evidence.run import run_campaign
from iteralab.evidence.table import COLUMNS, read_raw_table
from protocol_factory import write_protocol

SMALL = dict(parameter_count=1000, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=32,
             batch_size=2, seq_len=4, activation_bytes=4)
PRECISION_VARIANTS = """
[[variants]]
name = "p32"
batch_size = 4

[[variants]]
name = "p16"
batch_size = 4
precision = "bf16"

[[variants]]
name = "i8"
batch_size = 4
precision = "int8-dynamic"

[[series]]
name = "precision"
factor = "precision"
variants = ["p32", "p16", "i8"]
"""
OVERHEAD = 123_456_789
CUDA_SCOPE = "torch.cuda max_memory_allocated/max_memory_reserved since reset, device cuda:0"


def test_library_uses_the_kit_arithmetic():
    import iteralab.evidence.memory

    assert iteralab.evidence.memory.estimate_memory is memoire.estimate_memory
    assert iteralab.evidence.memory.estimate_for_model is memoire.estimate_for_model


def test_estimate_hand_computed_small_case():
    est = estimate_memory(bytes_per_param=4, allocator_margin=0.25, runtime_overhead_bytes=100, **SMALL)
    assert est.weights_bytes == 4000                      # 1000 x 4 B
    assert est.hidden_states_bytes == 2 * 2 * 4 * 8 * 4   # 2·B·S·H·e = 512
    assert est.attention_scores_bytes == 2 * 2 * 4 * 4 * 4  # B·A·S·S·e = 256
    assert est.ffn_intermediate_bytes == 2 * 4 * 32 * 4   # B·S·I·e = 1024
    assert est.inputs_bytes == 3 * 2 * 4 * 8              # 192
    assert est.activations_bytes == 1984
    assert est.margin_bytes == 1496                       # 0.25 x (4000 + 1984)
    assert est.total_bytes == 4000 + 1984 + 1496 + 100 == 7580
    assert est.terms()["total_bytes"] == 7580 and est.terms()["runtime_overhead_bytes"] == 100
    assert "attention scores" in est.assumptions_text and "FFN intermediate" in est.assumptions_text
    with pytest.raises(AttributeError):
        est.total_bytes = 0  # frozen


def test_bf16_halves_weights_and_activations():
    fp32 = estimate_memory(bytes_per_param=4, **SMALL)
    bf16 = estimate_memory(bytes_per_param=2, **{**SMALL, "activation_bytes": 2})
    assert bf16.weights_bytes * 2 == fp32.weights_bytes
    assert bf16.activations_bytes - bf16.inputs_bytes == (fp32.activations_bytes - fp32.inputs_bytes) // 2


def test_int8_dynamic_counts_quantized_linear_weights_at_one_byte():
    est = estimate_memory(bytes_per_param=4, quantized_params=600, **SMALL)
    assert est.weights_bytes == 400 * 4 + 600 * 1
    with pytest.raises(memoire.MemoryKitError, match="quantized_params"):
        estimate_memory(bytes_per_param=4, quantized_params=2000, **SMALL)
    with pytest.raises(memoire.MemoryKitError, match="batch_size"):
        estimate_memory(bytes_per_param=4, **{**SMALL, "batch_size": 0})


@pytest.fixture(scope="module")
def tiny_bert():
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=64)).eval()


def test_count_weights_fp32_bf16_and_int8_dynamic(tiny_bert):
    import copy
    import warnings

    import torch

    params = sum(p.numel() for p in tiny_bert.parameters())
    buffers = sum(b.numel() * b.element_size() for b in tiny_bert.buffers())
    fp32 = count_weights(tiny_bert, "fp32")
    assert fp32.parameter_count == params and fp32.total_bytes == params * 4 + buffers and not fp32.predicted
    # bf16: predicted on the fp32 model == counted on the converted one; floating weights halve
    predicted = count_weights(tiny_bert, "bf16")
    actual = count_weights(copy.deepcopy(tiny_bert).to(torch.bfloat16), "bf16")
    assert predicted.predicted and predicted.total_bytes == actual.total_bytes == params * 2 + buffers
    # int8-dynamic: every nn.Linear weight at 1 byte, the rest float32
    linears = [m for m in tiny_bert.modules() if isinstance(m, torch.nn.Linear)]
    lin_w = sum(m.weight.numel() for m in linears)
    lin_b = sum(m.bias.numel() for m in linears)
    rows = sum(m.weight.shape[0] for m in linears)
    int8 = count_weights(tiny_bert, "int8-dynamic")
    assert int8.quantized_params == lin_w and int8.int8_bytes == lin_w
    assert int8.float_bytes == (params - lin_w - lin_b) * 4
    assert int8.int8_side_bytes == lin_b * 4 + rows * 4 + 16 * len(linears)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(tiny_bert), {torch.nn.Linear},
                                                           dtype=torch.qint8)
    measured = count_weights(quantized, "int8-dynamic")
    assert measured.quantized_params == lin_w and measured.total_bytes == int8.total_bytes
    assert measured.parameter_count == params


def test_estimate_for_model_reads_the_config(tiny_bert):
    est = estimate_for_model(tiny_bert, precision="fp32", batch_size=2, seq_len=8, margin=0.0)
    assert est.attention_scores_bytes == 2 * 2 * 8 * 8 * 4 and est.ffn_intermediate_bytes == 2 * 8 * 32 * 4
    assert est.weights_bytes == count_weights(tiny_bert, "fp32").total_bytes
    assert est.total_bytes == est.weights_bytes + est.activations_bytes


# ------------------------------------------------------------------------------------- memory table


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, tiny_classifier_dir):
    folder = tmp_path_factory.mktemp("memcampaign")
    write_corpus_csv(folder)
    protocol = write_protocol(folder, model=f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"',
                              variants=PRECISION_VARIANTS, reference="p32", passes=1, threshold=0.0, tolerance=1.0)
    lock(protocol)
    out = folder / "out"
    run_campaign(protocol, out)
    return out


def _copy(campaign, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(campaign, target)
    return target


def _rewrite_table(folder, edit):
    rows = read_raw_table(folder / "raw_table.csv")
    rows = edit(rows)
    with open(folder / "raw_table.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_memory_table_on_a_cpu_campaign(campaign):
    rows = {r["variant"]: r for r in memory_table(campaign, runtime_overhead=OVERHEAD)}
    assert list(rows) == ["p32", "p16", "i8"]
    for r in rows.values():
        assert r["observed_bytes"] > 0 and r["observed_passes"] == 1
        assert "VmHWM" in r["observed_scope"] and r["observed_counter"].startswith("process peak RSS")
        assert r["observed_cuda_allocated_bytes"] is None and r["observed_cuda_reserved_bytes"] is None
        assert r["estimate_bytes"] == r["estimate_terms"]["total_bytes"] and r["estimate_reason"] is None
        assert r["difference_bytes"] == r["observed_bytes"] - r["estimate_bytes"]
        assert r["difference_pct"] == pytest.approx(100 * r["difference_bytes"] / r["estimate_bytes"], abs=0.1)
        assert r["estimate_terms"]["runtime_overhead_bytes"] == OVERHEAD
        assert r["max_length"] == 32 and r["batch_size"] == 4
        assert r["feasible"] is True, r["feasible_reason"]
    weights = {name: r["estimate_terms"]["weights_bytes"] for name, r in rows.items()}
    assert weights["p16"] < weights["p32"] and weights["i8"] < weights["p32"]


def test_memory_table_cuda_counters_are_never_summed(campaign, tmp_path):
    folder = _copy(campaign, tmp_path)
    values = {"p32": [(100, 150), (300, 350), (200, 250)], "p16": [(50, 80), (70, 90), (60, 85)],
              "i8": [(10, 20), (30, 40), (20, 30)]}

    def to_cuda(rows):
        out = []
        for row in rows:
            for i, (alloc, reserved) in enumerate(values[row["variant"]]):
                copy = dict(row, pass_id=f"{row['pass_id']}-{i}", cpu_peak_rss_bytes="", device="cuda:0",
                            cuda_max_allocated_bytes=str(alloc * 2**20), cuda_max_reserved_bytes=str(reserved * 2**20),
                            memory_scope=CUDA_SCOPE)
                out.append(copy)
        return out

    _rewrite_table(folder, to_cuda)
    rows = {r["variant"]: r for r in memory_table(folder)}  # no CPU runtime overhead is measured for CUDA
    r = rows["p32"]
    assert r["observed_cuda_allocated_bytes"] == 200 * 2**20 and r["observed_cuda_reserved_bytes"] == 250 * 2**20
    assert r["observed_bytes"] == r["observed_cuda_allocated_bytes"] != 450 * 2**20
    assert r["observed_values"] == [100 * 2**20, 300 * 2**20, 200 * 2**20]
    assert r["estimate_terms"]["runtime_overhead_bytes"] == 0
    assert r["difference_bytes"] == 200 * 2**20 - r["estimate_bytes"]
    assert r["reserved_difference_bytes"] == 250 * 2**20 - r["estimate_bytes"]
    assert "never summed" in r["observed_counter"] and "torch.cuda" in r["observed_scope"]
    assert rows["p16"]["observed_bytes"] == 60 * 2**20


def test_memory_table_feasibility_comes_from_status_and_ids(campaign, tmp_path):
    folder = _copy(campaign, tmp_path)

    def fail_p16(rows):
        for row in rows:
            if row["variant"] == "p16":
                row.update(status="failed", completed="5", ids_match="false", corpus_accepted="false",
                           error="OutOfMemoryError: out of memory", cpu_peak_rss_bytes="")
        return rows

    _rewrite_table(folder, fail_p16)
    rows = {r["variant"]: r for r in memory_table(folder, runtime_overhead=OVERHEAD)}
    assert rows["p32"]["feasible"] is True
    bad = rows["p16"]
    assert bad["feasible"] is False and "completed 5 of 12" in bad["feasible_reason"]
    assert "OutOfMemoryError" in bad["feasible_reason"]
    assert bad["observed_bytes"] is None and bad["difference_bytes"] is None and bad["observed_reason"]
    assert bad["estimate_bytes"] is not None


def test_memory_table_without_model_config_has_no_estimate(campaign, tmp_path):
    folder = _copy(campaign, tmp_path)
    data = json.loads((folder / "campaign.json").read_text())
    data["model"]["path"] = str(tmp_path / "moved-away")
    (folder / "campaign.json").write_text(json.dumps(data))
    for r in memory_table(folder, runtime_overhead=OVERHEAD):
        assert r["estimate_bytes"] is None and r["difference_bytes"] is None
        assert "model config not found" in r["estimate_reason"] and r["estimate_terms"] is None
        assert r["observed_bytes"] > 0


def test_memory_table_of_a_callable_campaign(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = memory_table(out, runtime_overhead=OVERHEAD)
    assert {r["variant"] for r in rows} == {"b1", "b4"}
    assert all(r["estimate_bytes"] is None and "callable" in r["estimate_reason"] for r in rows)


def test_cli_memory_text_and_json(campaign, capsys):
    assert main(["memory", str(campaign), "--runtime-overhead-bytes", str(OVERHEAD)]) == 0
    text = capsys.readouterr().out
    for name in ("p32", "p16", "i8", "observed", "estimate", "difference", "scope: process peak RSS (VmHWM)"):
        assert name in text
    assert "interconnect" in text and "several GPUs" in text
    assert main(["memory", str(campaign), "--json", "--runtime-overhead-bytes", str(OVERHEAD)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["note"] == M3_NOTE and [v["variant"] for v in data["variants"]] == ["p32", "p16", "i8"]


def test_cli_memory_refuses_a_folder_that_is_no_campaign(tmp_path, capsys):
    assert main(["memory", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"Error: {tmp_path}: not a campaign folder (no campaign.json)"


def test_runtime_overhead_is_measured_by_a_fresh_process():
    measured = memoire.measure_runtime_overhead(("json",))
    assert measured.bytes and measured.bytes > 1_000_000 and measured.reason is None
    assert "json" in measured.label and "nothing loaded" in measured.label


def test_the_runtime_overhead_is_the_one_the_workers_recorded(tmp_path, tiny_classifier_dir, monkeypatch):
    """Measured once, by each pass worker before it loads the model, and stored in the journal: ``memory`` and
    ``report`` read that record and never measure again (a second measurement would give another estimate)."""
    from iteralab.campaign.journal import read_journal
    from iteralab.evidence import memory as memory_module

    write_corpus_csv(tmp_path)
    protocol = write_protocol(tmp_path, model=f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"',
                              variants='\n[[variants]]\nname = "p32"\nbatch_size = 4\n', reference="p32", passes=2,
                              threshold=0.0, tolerance=1.0, isolation="process")
    lock(protocol)
    campaign = tmp_path / "out"
    run_campaign(protocol, campaign)
    state = read_journal(campaign / "journal.jsonl")
    recorded = [r["startup"]["runtime_rss_bytes"] for r in state.finished.values()]
    assert len(recorded) == 2 and all(isinstance(v, int) and v > 10_000_000 for v in recorded)
    startups = [r["startup"] for r in state.finished.values()]
    if prefork.available():
        # forked from one template: it read the figures once, before any fork, and handed them to each worker
        assert all(s.get("forked") is True for s in startups)
        assert len({(s["runtime_rss_bytes"], s["runtime_imports_s"]) for s in startups}) == 1

    def never(*args, **kwargs):
        raise AssertionError("the runtime overhead was measured again")

    monkeypatch.setattr(memory_module, "worker_runtime_overhead", never)
    first = memory_table(campaign)
    second = memory_table(campaign)
    import statistics
    want = int(round(statistics.median(recorded)))
    for a, b in zip(first, second):
        assert a["estimate_terms"]["runtime_overhead_bytes"] == b["estimate_terms"]["runtime_overhead_bytes"] == want
        assert any("recorded in the journal" in line for line in a["estimate_assumptions"])
