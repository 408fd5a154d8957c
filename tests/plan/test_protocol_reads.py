"""The user's protocol file is read once per command (``lock``, ``run``): one read gives the bytes that are hashed,
parsed, checked against the lock and copied into the campaign folder. The campaign's sealed copy
(``inputs/protocol.toml``) is read by the stages that read the campaign folder, once each."""

from __future__ import annotations

import builtins
import io
import os
from collections import Counter
from pathlib import Path

import pytest

import fake_models
from campaign_factory import callable_campaign
from iteralab.lock.inputs import lock
from iteralab.cli import main
from iteralab.evidence.rerun import staging_folder
from dataset_jobs import GOOD, dataset_protocol


@pytest.fixture(autouse=True)
def _reset_calls():
    fake_models.CALLS.clear()


@pytest.fixture
def opened(monkeypatch):
    """How many times this process opens each file for reading, by resolved path: ``open()`` and
    ``Path.read_bytes``/``read_text``/``open`` all go through ``io.open``, which is ``builtins.open``."""
    counts: Counter[Path] = Counter()
    original = io.open

    def counting_open(file, *args, **kwargs):
        mode = args[0] if args else kwargs.get("mode", "r")
        if isinstance(file, (str, os.PathLike)) and not set(mode) & set("wax+"):
            counts[Path(file).resolve()] += 1
        return original(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    return counts


def test_run_reads_the_protocol_file_once(tmp_path, opened):
    protocol = callable_campaign(tmp_path, passes=2)
    opened.clear()
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 0
    assert opened[protocol.resolve()] == 1
    sealed = (tmp_path / "out" / "inputs" / "protocol.toml").resolve()
    # the stages that read the campaign folder: the evaluations (once for the whole run) and the raw table
    assert opened[sealed] == 2


def test_a_resumed_run_reads_the_protocol_file_once(tmp_path, opened):
    protocol = callable_campaign(tmp_path, passes=2)
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 0
    opened.clear()
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 0
    assert opened[protocol.resolve()] == 1


def test_run_of_several_datasets_reads_the_protocol_file_once(tmp_path, opened):
    protocol = dataset_protocol(tmp_path, GOOD, passes=1)
    lock(protocol)
    opened.clear()
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 0
    assert opened[protocol.resolve()] == 1


def test_lock_reads_the_protocol_file_once(tmp_path, opened, capsys):
    protocol = callable_campaign(tmp_path, locked=False)
    opened.clear()
    assert main(["lock", str(protocol)]) == 0
    assert opened[protocol.resolve()] == 1
    opened.clear()
    assert main(["lock", str(protocol)]) == 0  # locking the same content again: the existing entry
    assert opened[protocol.resolve()] == 1
    assert "locked" in capsys.readouterr().out


def test_rerun_reads_its_staged_protocol_copy_once(tmp_path, opened):
    protocol = callable_campaign(tmp_path, passes=1)
    assert main(["run", str(protocol), "--out", str(tmp_path / "first")]) == 0
    opened.clear()
    assert main(["rerun", str(tmp_path / "first"), "--out", str(tmp_path / "again")]) == 0
    staged = [p for p in opened if staging_folder(tmp_path / "again").resolve() in p.parents
              and p.name == "protocol.toml"]
    assert len(staged) == 1 and opened[staged[0]] == 1
    assert opened[protocol.resolve()] == 0  # the earlier campaign's sealed copy is what a rerun repeats
