"""A device-side failure (a kernel assert, an illegal address) is sticky on a real card: every later CUDA call of the
process raises. Proven against the faithful fake (tests/support/fakecuda.py): such a pass is a failed row with its
completed count, in the runner's process, in a worker process and on data-parallel workers; the next pass gets a
fresh process, and a device that stays broken fails the following passes as rows, never the campaign."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from campaign_factory import write_corpus_csv
from device_passes import cuda_pass_spec
from fakecuda import DEVICE_ASSERT, FakeCuda, cards, patch_factory, worker_path
from iteralab.campaign.engines import local
from iteralab.campaign.engines.passes import execute_pass
from iteralab.campaign.folder import CampaignFolder
from iteralab.evidence.run import run_campaign
from iteralab.lock.inputs import lock
from protocol_factory import write_protocol

#: warm-up: 2 inputs, one batch of 4; the measured pass: 12 inputs in 3 batches; batch 4 is the measured pass's 3rd
FAIL_AT = 4


@pytest.fixture
def visible(monkeypatch):
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def _assert_failed_row_after_two_batches(result, tmp_path):
    assert result["status"] == "failed" and result["error_kind"] == "pass"
    assert result["error"] == f"AcceleratorError: {DEVICE_ASSERT}"
    assert (result["completed"], result["expected"]) == (8, 12)
    assert result["device_error"] == f"AcceleratorError: {DEVICE_ASSERT}"
    assert result["memory"]["cuda_max_allocated_bytes"] is None and result["memory"]["cuda_max_reserved_bytes"] is None
    assert result["memory"]["reason"].startswith("not measured: the device is unusable after the error")
    assert result["gpu_scope"]["seconds"] is None and "did not complete" in result["gpu_scope"]["reason"]
    assert pq.read_table(tmp_path / "predictions" / result["prediction_file"].split("/")[-1]).num_rows == 8


def test_a_sticky_error_in_the_runners_process_is_a_failed_row_with_its_completed_count(monkeypatch, tmp_path,
                                                                                        visible):
    fake = FakeCuda(cards=cards(1)).install(monkeypatch)
    patch_factory(fake, monkeypatch, fail_at=FAIL_AT)
    result = execute_pass(cuda_pass_spec(tmp_path))
    _assert_failed_row_after_two_batches(result, tmp_path)
    assert fake.calls.count("FAIL " + DEVICE_ASSERT) == 1
    # in-process isolation: nothing more is asked of the broken device, the environment included
    fake = FakeCuda(cards=cards(1)).install(monkeypatch)
    patch_factory(fake, monkeypatch, fail_at=FAIL_AT)
    again = local.run_in_process(local.PassSpec.from_json(cuda_pass_spec(tmp_path)))
    assert again["status"] == "failed" and again["environment"] is None
    assert "environment: not read, the device is unusable in this process after the error" in again["notes"]


def test_a_sticky_error_in_a_worker_process_is_a_failed_row_with_its_completed_count(monkeypatch, tmp_path, visible):
    fake = FakeCuda(cards=cards(1))
    for key, value in fake.env(fail_at=FAIL_AT).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", worker_path(tmp_path / "site"))
    result = local.run_in_worker(local.PassSpec.from_json(cuda_pass_spec(tmp_path)), None)
    _assert_failed_row_after_two_batches(result, tmp_path)
    assert result["environment"]["device_inventory"]["gpu_count"] == 1  # read by the worker before the pass


@pytest.mark.parametrize("stays_broken", [True, False])
def test_after_a_broken_device_the_next_pass_runs_in_a_fresh_process(monkeypatch, tmp_path, visible,
                                                                     tiny_classifier_dir, stays_broken):
    """In-process isolation: the first pass breaks the card in the runner's process; the next one runs in a fresh
    interpreter, where the card either stays broken (a failed row, and the campaign still ends) or works again."""
    import shutil

    shutil.copytree(tiny_classifier_dir, tmp_path / "model")
    write_corpus_csv(tmp_path)
    protocol = write_protocol(tmp_path, passes=1, isolation="inprocess")
    protocol.write_text(protocol.read_text().replace('device = "cpu"', 'device = "cuda"'))
    lock(protocol)
    fake = FakeCuda(cards=cards(1)).install(monkeypatch)
    patch_factory(fake, monkeypatch, fail_at=FAIL_AT)  # the runner's process: fails in the first measured pass
    worker = FakeCuda(cards=cards(1), broken=DEVICE_ASSERT if stays_broken else None)
    for key, value in worker.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", worker_path(tmp_path / "site"))
    run_campaign(protocol, tmp_path / "camp")
    rows = {r.pass_id: r for r in CampaignFolder.open(tmp_path / "camp").raw_rows()}
    first, second = sorted(rows.values(), key=lambda r: r.pass_id)
    assert first.status == "failed" and first.observed_ids is not None
    assert "device unusable after the error" in first.notes
    assert "isolation: a fresh process, not the runner's" in second.notes
    if stays_broken:
        assert second.status == "failed" and f"AcceleratorError: {DEVICE_ASSERT}" in second.error
    else:
        assert second.status == "ok" and second.ids_match is True
