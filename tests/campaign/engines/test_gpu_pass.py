"""What a GPU pass records, proven without a GPU: the real ``execute_pass`` against a fake ``torch.cuda`` that
records every call in one list, beside a fake clock and a fake workload that record into the same list.

Proven here (R3, R4, R8, M2 and the precision policy): the device is synchronized before the start timestamp
and before the stop timestamp; the peak counters are reset before the measured pass and read once each, never
summed; CUDA events time a labelled GPU scope kept apart from the pass time; bf16/fp16 are refused with their
reason where the device lacks them (no silent fp32); an out-of-memory error is a failed row with its count.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from campaign_factory import write_corpus_csv
from fakecuda import Card, FakeCuda
from iteralab.campaign.engines.passes import execute_pass
from iteralab.kit.memoire import precision_refusal
from iteralab.models import factory
from iteralab.models import device as dev

CLASSES = ["plot", "fresh", "rotten"]
EVENT_MS = 1234.0  # what the fake CUDA events report: 1.234 s of GPU stream time
INFER_S = 0.5  # what the fake clock advances per inferred batch


class Recorder:
    """One ordered list of everything the pass did: torch.cuda calls, clock reads, workload calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.t = 100.0

    def now(self) -> float:  # the injected clock
        self.calls.append(f"clock={self.t:g}")
        return self.t


def fake_cuda(monkeypatch, rec: Recorder, capability=(9, 0), name="Fake H200") -> FakeCuda:
    """The faithful fake (tests/support/fakecuda.py), its calls logged into the recorder's list; events are named by the
    order the pass creates them (start, then stop)."""
    fake = FakeCuda(cards=(Card(name=name, major=capability[0], minor=capability[1]),),
                    ms_per_batch=EVENT_MS / 3, block=4_096,
                    event_label=lambda n: ("event_start", "event_stop")[(n - 1) % 2])
    fake.listener = rec.calls.append
    rec.fake = fake
    return fake.install(monkeypatch)


class FakeWorkload:
    """Probabilities from a fixed rule; ``oom_at`` makes the n-th inferred batch of the measured pass fail."""

    def __init__(self, rec: Recorder, oom_at: int | None = None) -> None:
        self.rec, self.oom_at, self.batches = rec, oom_at, 0
        self.measuring = False

    def tokenize(self, texts):
        self.rec.calls.append(f"tokenize {len(texts)}")
        return {"n": len(texts)}

    def infer(self, encoded):
        n = encoded["n"]
        fake = getattr(self.rec, "fake", None)
        if fake is not None:  # GPU stream time (what the events measure) and 1,000 bytes of tensors per batch
            fake.run_batch()
            fake.allocate(1_000, "cuda:0")
        if self.measuring:
            self.batches += 1
            if self.batches == self.oom_at:
                self.rec.calls.append(f"infer {n} -> OOM")
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.rec.calls.append(f"infer {n}")
        self.rec.t += INFER_S
        probs = np.zeros((n, 3), dtype=np.float32)
        probs[:, 1] = 1.0
        return probs

    def token_lengths(self, texts):
        return [len(t.split()) for t in texts]

    def describe(self):
        return {"kind": "fake", "attn_implementation": None}

    def file_hashes(self):
        return {}


def _spec(tmp_path, precision="fp32", batch_size=4):
    corpus = write_corpus_csv(tmp_path)  # 12 texts
    (tmp_path / "predictions").mkdir(exist_ok=True)
    return {
        "pass_id": "r01-p01-b4-a1", "seed": 0, "deterministic": False, "classes": CLASSES,
        "variant": {"name": "b4", "device": "cuda:0", "precision": precision, "batch_size": batch_size,
                    "bucketing": False, "resume": False, "compile": False, "padding": "longest"},
        "model": {"kind": "hf_classifier", "path": None, "head": None, "callable": None, "max_length": 32,
                  "truncation": True, "trust_remote_code": False},
        "corpus_path": str(corpus), "prediction_dir": str(tmp_path / "predictions"),
        "warmup": {"inputs": 2, "passes": 1},
    }


def _run(monkeypatch, tmp_path, rec: Recorder, workload: FakeWorkload):
    def loader(spec):
        rec.calls.append(f"load_workload device={spec.device} precision={spec.precision}")
        return workload

    monkeypatch.setattr(factory, "load_workload", loader)
    original = workload.tokenize

    def tokenize(texts):  # the measured pass starts right after the warm-up: mark it once the events exist
        workload.measuring = len(rec.fake.events) == 2
        return original(texts)

    workload.tokenize = tokenize
    return execute_pass(_spec(tmp_path), clock=rec)


def _measured_region(calls: list[str]) -> tuple[int, int]:
    return calls.index("record event_start"), calls.index("record event_stop")


def test_pass_synchronizes_before_both_timestamps_and_resets_peaks_first(monkeypatch, tmp_path):
    rec = Recorder()
    fake_cuda(monkeypatch, rec)
    result = _run(monkeypatch, tmp_path, rec, FakeWorkload(rec))
    calls = rec.calls
    start, stop = _measured_region(calls)
    assert result["status"] == "ok" and result["completed"] == 12
    # reset → synchronize → start timestamp → GPU start event → the whole pass → GPU stop event → synchronize
    # → stop timestamp → counters read (each once) → events read
    assert calls[start - 4: start] == ["synchronize cuda:0", "reset_peak_memory_stats cuda:0", "synchronize cuda:0",
                                       "clock=100.5"]
    assert calls[start + 1: stop] == ["tokenize 4", "infer 4", "tokenize 4", "infer 4", "tokenize 4", "infer 4"]
    assert calls[stop: stop + 7] == ["record event_stop", "synchronize cuda:0", "clock=102",
                                     "synchronize cuda:0", "max_memory_allocated", "max_memory_reserved",
                                     "elapsed_time event_start->event_stop"]
    # events are made outside every timed region; nothing but the work happens between the timestamps
    assert calls.index("new event_stop") < calls.index("reset_peak_memory_stats cuda:0")
    # every phase went through the same boundaries: load and warm-up too
    load = calls.index("load_workload device=cuda:0 precision=fp32")
    assert calls[load - 2: load] == ["synchronize cuda:0", "clock=100"]
    assert calls[load + 1: load + 3] == ["synchronize cuda:0", "clock=100"]
    assert calls.count("reset_peak_memory_stats cuda:0") == 1
    assert [e.stream for e in rec.fake.events] == ["stream:cuda:0", "stream:cuda:0"]  # the pass device's stream


def test_gpu_event_time_is_a_labelled_scope_never_a_pass_time(monkeypatch, tmp_path):
    rec = Recorder()
    fake_cuda(monkeypatch, rec)
    result = _run(monkeypatch, tmp_path, rec, FakeWorkload(rec))
    assert result["phases"]["pass_s"] == pytest.approx(3 * INFER_S)  # the synchronized host clock
    assert result["gpu_scope"] == {"label": dev.GPU_SCOPE_LABEL, "seconds": pytest.approx(EVENT_MS / 1000),
                                   "reason": None}
    assert "never a pass time" in dev.GPU_SCOPE_LABEL
    assert EVENT_MS / 1000 not in result["phases"].values()


def test_peak_counters_are_read_separately_never_summed(monkeypatch, tmp_path):
    rec = Recorder()
    fake_cuda(monkeypatch, rec)
    result = _run(monkeypatch, tmp_path, rec, FakeWorkload(rec))
    assert result["memory"] == {
        "cuda_max_allocated_bytes": 1_000, "cuda_max_reserved_bytes": 4_096, "reason": None,
        "scope": "torch.cuda max_memory_allocated/max_memory_reserved since reset, device cuda:0"}
    assert rec.calls.count("max_memory_allocated") == 1 and rec.calls.count("max_memory_reserved") == 1
    assert "5096" not in json.dumps(result)


def test_out_of_memory_is_a_failed_row_with_the_completed_count(monkeypatch, tmp_path):
    rec = Recorder()
    fake_cuda(monkeypatch, rec)
    result = _run(monkeypatch, tmp_path, rec, FakeWorkload(rec, oom_at=3))
    assert result["status"] == "failed" and result["error_kind"] == "oom"
    assert (result["completed"], result["expected"], result["retries"]) == (8, 12, 0)
    assert result["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert ("failed after 8 of 12 inputs: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; "
            "no retry with a smaller batch") in result["notes"]
    assert result["phases"]["pass_s"] is None
    assert result["gpu_scope"]["seconds"] is None and "did not complete" in result["gpu_scope"]["reason"]
    start = rec.calls.index("record event_start")
    assert [c for c in rec.calls[start:] if c.startswith("infer")] == ["infer 4", "infer 4", "infer 4 -> OOM"]
    assert "record event_stop" not in rec.calls  # no stop event, no elapsed_time on a failed pass
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "predictions" / result["prediction_file"].split("/")[-1]).num_rows == 8
    # the completed inputs only
    assert result["memory"]["cuda_max_allocated_bytes"] == 1_000  # still read after the failure


@pytest.mark.parametrize("precision, capability, message", [
    ("bf16", (7, 5), "precision: bf16 is not supported natively by Fake GPU (compute capability 7.5); bf16 "
                     "arithmetic needs compute capability 8.0"),
    ("fp16", (5, 2), "precision: fp16 is not supported natively by Fake GPU (compute capability 5.2); half "
                     "arithmetic needs compute capability 5.3"),
])
def test_unsupported_precision_is_refused_never_run_in_fp32(monkeypatch, tmp_path, tiny_classifier_dir, precision,
                                                            capability, message):
    rec = Recorder()
    fake_cuda(monkeypatch, rec, capability=capability, name="Fake GPU")
    spec = _spec(tmp_path, precision=precision)
    spec["model"]["path"] = str(tiny_classifier_dir)  # the real loader: it refuses before touching the device
    result = execute_pass(spec, clock=rec)
    assert result["status"] == "failed" and result["error_kind"] == "load"
    assert result["error"] == f"WorkloadError: {message}"
    assert result["workload"] is None and result["completed"] == 0
    assert not any(c.startswith(("infer", "reset_peak")) for c in rec.calls)


@pytest.mark.parametrize("precision, capability, refused", [
    ("bf16", (8, 0), False), ("bf16", (8, 9), False), ("bf16", (7, 0), True),
    ("fp16", (5, 3), False), ("fp16", (7, 5), False), ("fp16", (5, 0), True),
])
def test_precision_policy_thresholds(monkeypatch, precision, capability, refused):
    rec = Recorder()
    fake_cuda(monkeypatch, rec, capability=capability)
    assert (precision_refusal(precision, "cuda:0") is not None) is refused


@pytest.mark.parametrize("arch, bf16_refused", [
    ("gfx942:sramecc+:xnack-", False), ("gfx90a", False), ("gfx1100", False), ("gfx906", True), ("gfx1030", True),
])
def test_rocm_precision_policy_reads_the_gpu_target_not_a_compute_capability(monkeypatch, arch, bf16_refused):
    rec = Recorder()
    fake_cuda(monkeypatch, rec, name="AMD GPU")
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: pytest.fail("not read on ROCm"))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: types.SimpleNamespace(gcnArchName=arch))
    assert precision_refusal("fp16", "cuda:0") is None
    refusal = precision_refusal("bf16", "cuda:0")
    assert (refusal is not None) is bf16_refused
    if bf16_refused:
        assert refusal == (f"bf16 is not supported natively by AMD GPU ({arch}); bf16 matrix instructions start "
                           "with gfx908, gfx90a (MI100, MI200)", "use fp16 or fp32 on this GPU")


def test_gpu_events_on_cpu_record_nothing_and_say_why():
    scope = dev.GpuEvents(torch.device("cpu"))
    scope.record_start()
    scope.record_stop()
    assert scope.result() == {"label": dev.GPU_SCOPE_LABEL, "seconds": None,
                              "reason": "not measured: no CUDA events on cpu"}


def test_cpu_pass_has_no_gpu_scope(tmp_path, monkeypatch):
    rec = Recorder()
    workload = FakeWorkload(rec)
    monkeypatch.setattr(factory, "load_workload", lambda spec: workload)
    spec = _spec(tmp_path)
    spec["variant"]["device"] = "cpu"
    result = execute_pass(spec, clock=types.SimpleNamespace(now=rec.now))
    assert result["status"] == "ok" and "gpu_scope" not in result
    assert "cuda_max_allocated_bytes" not in result["memory"]
