"""Data-parallel passes on GPUs, against the faithful fake (tests/support/fakecuda.py) in the runner and in every
worker: each worker gets one physical card in the variable its runtime reads (CUDA or ROCm), records which card it
ran on, the pass's manifest shows the machine as the runner sees it (so a data-parallel row is no manifest difference
and a resume is not refused), and a sticky device error on a worker is a failed row with the inputs completed."""

from __future__ import annotations

import json

import pytest

from fakecuda import DEVICE_ASSERT, FakeCuda, cards
from fakecuda import worker_path as fake_worker_path
from iteralab.campaign.engines.parallel import run_data_parallel
from iteralab.campaign.engines.shards import worker_layout
from iteralab.campaign.manifest import (ObservedFacts, check_resume_environment, environment_manifest,
                                        manifest_differences)
from device_passes import cuda_pass_spec  # the shards are planned by max_length: the fake model has no tokenizer

VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """Four cards; returns a function that sets the visibility, installs the fake here, and gives the workers the
    same machine (a fresh fake in each, with a workload failing at ``fail_at``)."""
    for name in VISIBILITY:
        monkeypatch.delenv(name, raising=False)

    def setup(hip=None, fail_at=None, **env):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        fake = FakeCuda(cards=cards(4), hip=hip).install(monkeypatch)
        for key, value in fake.env(fail_at=fail_at).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("PYTHONPATH", fake_worker_path(tmp_path / "site"))
        return fake

    return setup


@pytest.mark.parametrize("hip, env, physical", [
    (None, {}, ["0", "1"]),
    (None, {"CUDA_VISIBLE_DEVICES": "2,3"}, ["2", "3"]),
    ("6.2.41133", {"HIP_VISIBLE_DEVICES": "2,3"}, ["2", "3"]),
    ("6.2.41133", {"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "1,2"}, ["2", "3"]),
    ("6.2.41133", {"CUDA_VISIBLE_DEVICES": "3,1"}, ["3", "1"]),
])
def test_each_worker_gets_one_physical_card_in_its_runtimes_variable(monkeypatch, hip, env, physical):
    for name in VISIBILITY:
        monkeypatch.delenv(name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    layout = worker_layout("cuda", 2, gpu_count=lambda: 2, rocm=hip is not None)
    assert layout.physical == tuple(physical)
    if hip is None:
        assert [e["CUDA_VISIBLE_DEVICES"] for e in layout.envs] == physical
    else:  # one physical card for the ROCm runtime; the HIP and CUDA lists removed (they would index into it)
        assert [(e["ROCR_VISIBLE_DEVICES"], e["HIP_VISIBLE_DEVICES"], e["CUDA_VISIBLE_DEVICES"]) for e in layout.envs] \
            == [(p, None, None) for p in physical]


@pytest.mark.parametrize("hip, env, physical", [
    (None, {"CUDA_VISIBLE_DEVICES": "2,3"}, [2, 3]),
    ("6.2.41133", {"HIP_VISIBLE_DEVICES": "2,3"}, [2, 3]),
])
def test_a_gpu_data_parallel_pass_records_each_card_and_the_runners_view(machine, tmp_path, hip, env, physical):
    fake = machine(hip=hip, **env)
    result = run_data_parallel(cuda_pass_spec(tmp_path, data_parallel=2, padding="max_length"))
    assert result["status"] == "ok" and result["completed"] == 12
    devices = result["parallel"]["devices"]
    assert [d["physical_id"] for d in devices] == [str(p) for p in physical]
    assert [d["card"]["uuid"] for d in devices] == [fake.cards[p].uuid for p in physical]  # two distinct cards
    # the manifest's device inventory is the runner's: the two cards it sees, as a single-device pass records them
    inventory = result["environment"]["device_inventory"]
    assert inventory["gpu_count"] == 2
    here = json.loads(json.dumps(environment_manifest(git=False)))  # as a single-device pass's manifest is stored
    assert [k for k, _, _ in manifest_differences(result["environment"], here) if k.startswith("device_inventory")
            and not k.startswith("device_inventory.cpu")] == []
    check_resume_environment(tmp_path, ObservedFacts(result["environment"]))  # a resume is not refused


def test_the_runners_view_holds_the_values_a_stored_manifest_reads_back(machine, tmp_path):
    """The campaign compares each pass with its manifest as stored (JSON): the runner's device inventory a
    data-parallel pass records must read back as the same facts (torch's version a plain string, not the runtime's
    TorchVersion object, which the manifest comparison takes for another fact)."""
    machine(CUDA_VISIBLE_DEVICES="0,1")
    environment = run_data_parallel(cuda_pass_spec(tmp_path, data_parallel=2, padding="max_length"))["environment"]
    stored = json.loads(json.dumps(environment))
    assert manifest_differences(stored, environment) == []


def test_a_sticky_error_on_the_workers_is_a_failed_row_with_the_inputs_completed(machine, tmp_path):
    machine(fail_at=3, CUDA_VISIBLE_DEVICES="0,1")  # each worker: 1 warm-up batch, then its shard's 2nd batch fails
    result = run_data_parallel(cuda_pass_spec(tmp_path, data_parallel=2, padding="max_length"))
    assert result["status"] == "failed" and result["error_kind"] == "pass"
    assert result["error"] == f"cuda:0: AcceleratorError: {DEVICE_ASSERT}"
    assert [d["completed"] for d in result["parallel"]["devices"]] == [4, 4] and result["completed"] == 8
