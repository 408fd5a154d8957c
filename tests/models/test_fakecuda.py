"""The fake CUDA of the tests behaves like the real runtime where the product depends on it
(tests/support/fakecuda.py)."""

from __future__ import annotations

import os

import pytest
import torch

from fakecuda import DEVICE_ASSERT, FakeCuda, cards


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def test_an_error_is_sticky_for_every_later_device_call(monkeypatch, clean_env):
    fake = FakeCuda(cards=cards(1)).install(monkeypatch)
    event = torch.cuda.Event(enable_timing=True)
    with pytest.raises(torch.AcceleratorError, match="device-side assert"):
        fake.fail()
    for call in (lambda: torch.cuda.synchronize(0), lambda: torch.cuda.max_memory_allocated(0),
                 lambda: torch.cuda.max_memory_reserved(0), lambda: torch.cuda.reset_peak_memory_stats(0),
                 lambda: torch.cuda.memory_stats(0), lambda: torch.cuda.get_device_properties(0),
                 lambda: torch.cuda.current_device(), lambda: event.record("s"),
                 lambda: event.elapsed_time(event)):
        with pytest.raises(torch.AcceleratorError, match=DEVICE_ASSERT):
            call()
    assert torch.cuda.is_available() and torch.cuda.device_count() == 1  # cached by the runtime: still answered


@pytest.mark.parametrize("hip, env, physical", [
    (None, {"CUDA_VISIBLE_DEVICES": "2,3"}, [2, 3]),
    (None, {"CUDA_VISIBLE_DEVICES": "3,9,1"}, [3]),  # cut at the first unknown entry
    (None, {"CUDA_VISIBLE_DEVICES": ""}, []),
    (None, {"CUDA_VISIBLE_DEVICES": "GPU-00000001-0000-0000-0000-000000000001"}, [1]),
    (None, {"HIP_VISIBLE_DEVICES": "1"}, [0, 1, 2, 3]),  # a CUDA build ignores the ROCm variables
    ("6.2", {"HIP_VISIBLE_DEVICES": "2,3"}, [2, 3]),
    ("6.2", {"ROCR_VISIBLE_DEVICES": "1,3"}, [1, 3]),
    ("6.2", {"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "2"}, [3]),  # HIP indexes ROCR's list
    ("6.2", {"CUDA_VISIBLE_DEVICES": "1"}, [1]),  # HIP reads CUDA_VISIBLE_DEVICES too
])
def test_device_count_follows_the_visibility_variables(monkeypatch, clean_env, hip, env, physical):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fake = FakeCuda(cards=cards(4), hip=hip).install(monkeypatch)
    assert torch.cuda.device_count() == len(physical) and fake.visible() == physical
    names = [torch.cuda.get_device_properties(i).uuid for i in range(len(physical))]
    assert names == [fake.cards[p].uuid.removeprefix("GPU-") for p in physical]


def test_peaks_are_per_process_and_per_card(monkeypatch, clean_env):
    fake = FakeCuda(cards=cards(2), block=1_024).install(monkeypatch)
    fake.allocate(3_000, 1)
    assert (torch.cuda.max_memory_allocated(1), torch.cuda.max_memory_reserved(1)) == (3_000, 3_072)
    assert torch.cuda.max_memory_allocated(0) == 0
    monkeypatch.setattr(os, "getpid", lambda: -1)  # another process (a forked worker) starts at zero
    assert torch.cuda.max_memory_allocated(1) == 0


def test_elapsed_time_only_after_both_events_completed(monkeypatch, clean_env):
    fake = FakeCuda(cards=cards(1), ms_per_batch=7.0).install(monkeypatch)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="recorded"):
        start.elapsed_time(stop)
    start.record()
    fake.run_batch()
    stop.record()
    with pytest.raises(RuntimeError, match="not ready"):
        start.elapsed_time(stop)
    torch.cuda.synchronize()
    assert start.elapsed_time(stop) == 7.0
