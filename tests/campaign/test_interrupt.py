"""A run stopped by the user or a scheduler (SIGINT to the process group, SIGTERM, SIGHUP) is an interrupt:
journaled, one line printed, exit 128 + the signal; the campaign is incomplete, never infeasible, and once
resumed it decides as if the interrupt had not happened (no failure row, no M1 infeasibility). Each engine:
the worker template and the in-process mode, data-parallel workers, Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import iteralab
import pytest
from campaign_factory import callable_campaign

from iteralab.campaign.journal import read_journal
from iteralab.campaign.stopping import STOP_SIGNALS
from iteralab.campaign.engines.raypass import ray_installed
from iteralab.cli import main
from iteralab.decision.rule import decide
from iteralab.evidence.stats import INTERRUPTED_LINE, campaign_stats, render_stats
from iteralab.evidence.table import read_raw_table

TESTS = (Path(__file__).resolve().parents[1] / "support")
SRC = Path(iteralab.__file__).resolve().parents[1]
NO_WARMUP = "inputs = 0\npasses = 0"
# the passes run in processes of their own, out of reach of the session's quiet-machine patch (tests/conftest.py):
# what these tests check is the interrupt, so a pass measured beside other tests' load is counted, never set apart
COUNTED = '[stats]\nloaded_passes = "counted"\n'


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(TESTS), str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def _start(protocol: Path, out: Path, **env: str) -> subprocess.Popen:
    """``iteralab run`` in a session of its own: its process group is what a terminal's Ctrl-C reaches."""
    return subprocess.Popen([sys.executable, "-m", "iteralab.cli", "run", str(protocol), "--out", str(out)],
                            env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.05)
    assert proc.poll() is None and ready(), proc.communicate()[1][-2000:] if proc.poll() is not None else "timeout"


def _running(out: Path) -> list[str]:
    journal = out / "journal.jsonl"
    state = read_journal(journal) if journal.exists() else None
    return [p for p in state.order if p not in state.finished] if state else []


def _stop(proc: subprocess.Popen, signum: int, group: bool = True) -> tuple[int, str]:
    if group:
        os.killpg(os.getpgid(proc.pid), signum)
    else:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _interrupted_line(err: str, protocol: Path, out: Path, done: int, total: int) -> None:
    lines = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert lines == [f"interrupted: {done} of {total} passes done; resume with `iteralab run {protocol} --out {out}`"], err
    assert "Traceback" not in err, err


def _resume(protocol: Path, out: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "iteralab.cli", "run", str(protocol), "--out", str(out), "--json"],
                          env=_env(FAKE_MODEL_DELAY="0"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _as_if_never_interrupted(out: Path, stopped: str, slots: int) -> None:
    """The interrupted attempt stays in the raw table as 'interrupted'; nothing downstream counts it."""
    rows = read_raw_table(out / "raw_table.csv")
    assert [(r["pass_id"], r["status"]) for r in rows if r["status"] != "ok"] == [(stopped, "interrupted")]
    assert len(rows) == slots + 1 and stopped.replace("-a1", "-a2") in {r["pass_id"] for r in rows}
    assert "not a failure and not counted" in next(r["notes"] for r in rows if r["pass_id"] == stopped)
    stats = campaign_stats(out)
    for v in stats.variants:
        assert (v.count("failed"), v.count("aborted"), len(v.excluded)) == (0, 0, 0)
        assert all(p.status == "ok" for p in v.passes) and stopped not in {p.pass_id for p in v.passes}
    text = render_stats(stats)
    assert "campaign incomplete" not in text and "timeout" not in text
    # listed once, as what it is (docs/running.md): never a failure, a time or a quality
    assert [line for line in text.splitlines() if stopped in line] == [f"  {stopped} {INTERRUPTED_LINE}"]
    decision = decide([out])
    assert all(c.feasible and not c.failures and not c.exclusions for c in decision.configs), \
        [(c.variant, c.failures, c.exclusions) for c in decision.configs]
    state = read_journal(out / "journal.jsonl")
    assert not state.aborted() and set(state.interrupted) == {stopped}


@pytest.mark.slow  # a signal timed against a running pass: run with no other test beside it
@pytest.mark.parametrize("isolation", ["process", "inprocess"])
def test_ctrl_c_to_the_process_group_is_an_interrupt_and_the_resumed_campaign_ignores_it(tmp_path, isolation):
    protocol = callable_campaign(tmp_path, fn="fake_models:marking_slow_classifier", passes=2, isolation=isolation,
                                 warmup=NO_WARMUP, extra=COUNTED)
    out, mark = tmp_path / "out", tmp_path / "batch-running"
    proc = _start(protocol, out, FAKE_MODEL_DELAY="0.5", FAKE_MODEL_MARK=str(mark))
    _wait_for(proc, lambda: mark.exists() and _running(out))  # a pass is inside its measured region
    [stopped] = _running(out)
    code, err = _stop(proc, signal.SIGINT)
    assert code == 130, err
    _interrupted_line(err, protocol, out, 0, 4)
    state = read_journal(out / "journal.jsonl")
    assert set(state.interrupted) == {stopped} and not state.finished and not state.aborted()
    assert state.interrupted[stopped]["signal"] == "SIGINT"
    # incomplete, never infeasible: decide refuses it until it is resumed
    assert main(["decide", str(out)]) == 2
    _resume(protocol, out)
    _as_if_never_interrupted(out, stopped, 4)
    resumed = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()
               if '"campaign_resumed"' in line]
    assert resumed[0]["interrupted"] == [stopped] and resumed[0]["aborted"] == []


@pytest.mark.slow  # a signal timed against a running pass: run with no other test beside it
@pytest.mark.parametrize("signum, group, code", [(signal.SIGTERM, False, 143), (signal.SIGHUP, True, 129)])
def test_sigterm_and_sighup_stop_the_run_like_ctrl_c(tmp_path, signum, group, code):
    """SIGTERM to the runner alone (``kill``, a scheduler) and SIGHUP to the group (the terminal closing)."""
    protocol = callable_campaign(tmp_path, fn="fake_models:marking_slow_classifier", passes=1, isolation="process",
                                 warmup=NO_WARMUP, extra=COUNTED)
    out, mark = tmp_path / "out", tmp_path / "batch-running"
    proc = _start(protocol, out, FAKE_MODEL_DELAY="0.5", FAKE_MODEL_MARK=str(mark))
    _wait_for(proc, lambda: mark.exists() and _running(out))
    [stopped] = _running(out)
    returncode, err = _stop(proc, signum, group=group)
    assert returncode == code, err
    _interrupted_line(err, protocol, out, 0, 2)
    state = read_journal(out / "journal.jsonl")
    assert set(state.interrupted) == {stopped} and state.interrupted[stopped]["signal"] == signal.Signals(signum).name
    assert not list((out / "predictions").glob("*.parquet"))  # the worker was stopped with the run
    _resume(protocol, out)
    _as_if_never_interrupted(out, stopped, 2)


@pytest.mark.slow  # a signal timed against a running pass: run with no other test beside it
def test_ctrl_c_during_a_data_parallel_pass_is_an_interrupt(tmp_path):
    from parallel_jobs import DP_VARIANTS, dp_workers

    protocol = callable_campaign(tmp_path, fn="fake_models:marking_slow_classifier", passes=1,
                                 variants=DP_VARIANTS, warmup=NO_WARMUP, extra=COUNTED)
    out, mark = tmp_path / "out", tmp_path / "batch-running"
    proc = _start(protocol, out, FAKE_MODEL_DELAY="0.5", FAKE_MODEL_MARK=str(mark))
    _wait_for(proc, lambda: any("dp2" in p for p in _running(out)) and len(dp_workers(proc.pid)) == 2
              and mark.exists())
    workers = dp_workers(proc.pid)
    [stopped] = _running(out)
    code, err = _stop(proc, signal.SIGINT)
    assert code == 130, err
    import psutil

    _, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive
    state = read_journal(out / "journal.jsonl")
    assert set(state.interrupted) == {stopped} and not state.aborted()
    done = len(state.finished)
    _interrupted_line(err, protocol, out, done, 2)
    _resume(protocol, out)
    _as_if_never_interrupted(out, stopped, 2)


def test_an_interrupt_reported_as_an_error_by_the_code_that_caught_it_is_still_an_interrupt(tmp_path, monkeypatch):
    """The signal reached the run, but the code waiting on the pass caught it and reported a failure (as a library
    whose workers died of the same Ctrl-C would): the pass is interrupted, never a failed row."""
    from iteralab.campaign.stopping import RunInterrupted
    from iteralab.evidence.run import run_campaign
    from iteralab.evidence.table import write_raw_table

    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    protocol = callable_campaign(tmp_path, fn="fake_models:swallowing_interrupt", passes=1, warmup=NO_WARMUP,
                                 extra=COUNTED)
    out = tmp_path / "out"
    # what the run found, whatever started the tests (a background job starts with SIGINT ignored)
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    with pytest.raises(RunInterrupted) as stop:
        run_campaign(protocol, out)
    assert stop.value.exit_code == 130 and stop.value.total == 2
    state = read_journal(out / "journal.jsonl")
    [stopped] = state.order[-1:]
    assert set(state.interrupted) == {stopped} and stopped not in state.finished
    rows = read_raw_table(write_raw_table(out))
    assert rows[-1]["status"] == "interrupted" and rows[-1]["error"] == ""
    assert {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} == before  # the handlers are given back
    assert not list(out.glob(".tmp/*.progress"))  # the pass's progress beacons went with it


@pytest.mark.slow  # a signal timed against a running pass: run with no other test beside it
@pytest.mark.skipif(not ray_installed(), reason="Ray is not installed (pip install iteralab[ray])")
def test_ctrl_c_during_a_ray_pass_is_an_interrupt(tmp_path):
    from ray_jobs import RAY_ONLY

    protocol = callable_campaign(tmp_path, fn="fake_models:marking_slow_classifier", passes=1, variants=RAY_ONLY,
                                 reference="b4-ray", warmup=NO_WARMUP, extra=COUNTED)
    out, mark = tmp_path / "out", tmp_path / "batch-running"
    proc = _start(protocol, out, FAKE_MODEL_DELAY="0.5", FAKE_MODEL_MARK=str(mark))
    _wait_for(proc, lambda: mark.exists() and _running(out), timeout=180)  # an actor is inside the Ray pass
    [stopped] = _running(out)
    code, err = _stop(proc, signal.SIGINT)
    assert code == 130, err
    _interrupted_line(err, protocol, out, 0, 1)
    state = read_journal(out / "journal.jsonl")
    assert set(state.interrupted) == {stopped} and not state.finished
    _resume(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    assert [(r["pass_id"], r["status"]) for r in rows] == [(stopped, "interrupted"),
                                                          (stopped.replace("-a1", "-a2"), "ok")]
    assert all(c.feasible for c in decide([out]).configs)
