"""What `run` tells the person waiting on it (issue: a pass said nothing unless a terminal was attached): a plain
progress line at a steady interval where the output goes to a file, the campaign's projected duration right after
the first warm-up, `run --estimate` (warm-ups only, nothing recorded), the same interrupt line for every command
that runs a campaign, and the note on a bf16 pass where the CPU has no native bf16."""

from __future__ import annotations

import math
from typing import Any
import re
import signal
from pathlib import Path

import pytest
from campaign_factory import callable_campaign, write_corpus_csv

from iteralab.campaign import progress
from iteralab.campaign.progress import Beacon, Watch, estimate_line, progress_line, read_beacons
from iteralab.campaign.stopping import RunInterrupted
from iteralab.cli import main


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------------------------------ the watch


def test_the_watch_projects_the_campaign_after_the_first_warm_up_and_reports_at_its_interval(tmp_path):
    """Fake clocks, no thread: one pass of 100 documents warms up at 0.05 s a document after 4 s of start-up;
    the estimate comes once, at the first reading after the warm-up; a progress event every 30 s, no sooner."""
    events: list[tuple[str, Any]] = []
    clock, wall = FakeClock(100.0), FakeClock(1_000_000.0)
    watch = Watch(tmp_path, lambda kind, info: events.append((kind, info)), [("b1", 100), ("b4", 100), ("b1", 100)],
                  every_s=30.0, clock=clock, wall=wall)
    watch.pass_started("r01-p01-b1-a1", "b1", 100)
    clock.now += 2.0
    watch.tick()
    assert events == []  # no beacon yet (the worker is loading), and the interval has not passed
    beacon = Beacon.for_pass(str(tmp_path), "r01-p01-b1-a1")
    clock.now += 2.0
    watch.tick()
    assert events == []  # loading: no warm-up figure yet
    beacon.warmed(0.05)
    watch.tick()
    [(kind, estimate)] = events
    # each pass: 4 s outside its documents + 100 x 0.05 s; b4 is assumed as fast until measured
    assert kind == "estimate" and estimate.passes == 3 and estimate.campaign_s == pytest.approx(27.0)
    assert estimate.ends_at == pytest.approx(wall.now + 27.0 - 4.0)
    assert "3 passes in about 27 s" in estimate_line(estimate) and "20.0 documents/s" in estimate_line(estimate)
    beacon.done(40)
    clock.now += 25.0  # 29 s since the pass started: not yet
    watch.tick()
    assert len(events) == 1
    clock.now += 1.0
    watch.tick()
    kind, info = events[-1]
    assert kind == "progress" and info.done == 40 and info.documents == 100
    assert info.documents_per_s == pytest.approx(40 / 26.0)
    assert info.pass_left_s == pytest.approx(60 / (40 / 26.0))
    assert info.campaign_left_s == pytest.approx(info.pass_left_s + 18.0)
    line = progress_line(info)
    assert line.startswith("r01-p01-b1-a1: 40 of 100 documents, 1.5 documents/s; pass ends in 39 s (")
    assert "campaign (3 passes left) in 57 s" in line
    watch.tick()
    assert len(events) == 2  # the next one 30 s later
    clock.now += 30.0
    watch.tick()
    assert len(events) == 3
    assert [k for k, _ in events].count("estimate") == 1
    # the pass ends 64 s after it started, 30 s of them measured over 100 documents: b1 is now 34 s + 0.3 s a
    # document, and b4, not measured yet, goes at the mean pace of those seen
    clock.now += 4.0
    beacon.close()
    watch.pass_ended(30.0, 100)
    assert watch.projection.slot_s("b1", 100) == pytest.approx(64.0)
    assert watch.slots == [("b4", 100), ("b1", 100)] and watch.projection.remaining_s(watch.slots) == 128.0


def test_beacons_of_a_pass_split_over_processes_add_up(tmp_path):
    for pid_done in (30, 50):
        path = tmp_path / f"r01-p01-dp2-a1.{pid_done}{progress.SUFFIX}"
        path.write_bytes(progress.LAYOUT.pack(pid_done, 0.1, 1))
    (tmp_path / f"r01-p01-dp2-a10.7{progress.SUFFIX}").write_bytes(progress.LAYOUT.pack(999, 0.1, 1))
    reading = read_beacons(tmp_path, "r01-p01-dp2-a1")
    assert (reading.done, reading.parts, reading.warmed) == (80, 2, True)
    assert reading.per_document_s == pytest.approx(0.05)  # two processes share the documents
    assert read_beacons(tmp_path, "r01-p02-b1-a1") is None
    loading = tmp_path / f"r01-p03-b1-a1.1{progress.SUFFIX}"
    loading.write_bytes(progress.LAYOUT.pack(0, math.nan, 0))
    assert read_beacons(tmp_path, "r01-p03-b1-a1").per_document_s is None


# ------------------------------------------------------------------------------------------------ the CLI


def test_run_without_a_terminal_prints_plain_progress_lines_and_the_projection(tmp_path, monkeypatch, capsys):
    """stdout is pytest's capture, not a terminal: plain lines, one at each interval, for a pass of 12 documents
    at 0.08 s each (the pass's beacon read by the runner's watch)."""
    monkeypatch.setenv("FAKE_MODEL_DELAY", "0.08")
    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.2)
    monkeypatch.setattr(progress, "POLL_S", 0.05)
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=1,
                                 variants='[[variants]]\nname = "b1"\nbatch_size = 1\n', reference="b1")
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "round 1: b1 (r01-p01-b1-a1) started" in err
    assert re.search(r"projected: 1 pass in about \d+ s \(ends about \d\d:\d\d\), from b1's warm-up: "
                     r"[\d.]+ documents/s", err), err
    lines = re.findall(r"r01-p01-b1-a1: (\d+) of 12 documents, [\d.]+ documents/s; pass ends in \d+ s", err)
    assert lines and all(0 <= int(n) <= 12 for n in lines), err
    assert "\x1b[" not in err  # no terminal codes in a log
    assert not (tmp_path / "out" / ".tmp").exists()  # the beacons went with the scratch folder


def test_run_estimate_warms_up_each_variant_and_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_MODEL_DELAY", "0.01")
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=2)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = tmp_path / "out"
    assert main(["run", str(protocol), "--out", str(out), "--estimate"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("estimate: one load and warm-up per variant; nothing was recorded (4 passes to run)")
    assert re.search(r"^  b1: load and warm-up [\d.]+ s, [\d.]+ documents/s$", text, re.M), text
    assert re.search(r"^projected: 4 passes in about \d+ s", text, re.M), text
    assert not out.exists()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    # an existing campaign: only the passes still to run, and the folder's files unchanged
    assert main(["run", str(protocol), "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["run", str(protocol), "--out", str(out), "--estimate"]) == 0
    assert "(0 passes to run, 4 done)" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files


def test_run_estimate_refuses_a_protocol_without_warm_up(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, warmup="inputs = 0\npasses = 0")
    assert main(["run", str(protocol), "--out", str(tmp_path / "out"), "--estimate"]) == 2
    err = capsys.readouterr().err
    assert "the protocol declares no warm-up" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, target, resume", [
    (["demo", "--out", "D", "--docs", "60", "--passes", "2"], "iteralab.demo.run.run_demo",
     "iteralab demo --out D --docs 60 --passes 2"),
    (["demo", "--out", "D", "--task", "embedding"], "iteralab.demo.run.run_demo",
     "iteralab demo --out D --task embedding"),
    (["rerun", "OLD", "--out", "NEW"], "iteralab.evidence.rerun.rerun", "iteralab rerun OLD --out NEW"),
])
def test_demo_and_rerun_stopped_by_a_signal_print_the_line_run_prints(argv, target, resume, monkeypatch, capsys):
    def stopped(*args, **kwargs):
        raise RunInterrupted(signal.SIGINT, 3, 12)

    monkeypatch.setattr(target, stopped)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("interrupted:")] == [
        f"interrupted: 3 of 12 passes done; resume with `{resume}`"]
    assert "Traceback" not in err


# ------------------------------------------------------------------------------------------------ bf16 on a CPU


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"model name\t: Test CPU 9000\nflags\t\t: fpu avx2 fma {flags}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("flags, emulated", [("avx512f", True), ("amx_tile amx_bf16", False)])
def test_a_bf16_pass_on_a_cpu_without_native_bf16_says_it_is_emulated(flags, emulated, tiny_classifier_dir,
                                                                      tmp_path, monkeypatch):
    from iteralab.campaign.engines.passes import execute_pass
    from iteralab.models import device as dev

    monkeypatch.setattr(dev, "_PROC_CPUINFO", _cpuinfo(tmp_path, flags))
    corpus = write_corpus_csv(tmp_path)
    (tmp_path / "predictions").mkdir()
    result = execute_pass({
        "pass_id": "p1", "classes": ["plot", "fresh", "rotten"], "corpus_path": str(corpus),
        "prediction_dir": str(tmp_path / "predictions"), "warmup": {"inputs": 2, "passes": 1}, "device": "cpu",
        "variant": {"name": "bf16", "batch_size": 4, "precision": "bf16", "bucketing": False,
                    "padding": "longest", "resume": False, "compile": False, "device": "cpu"},
        "model": {"kind": "hf_classifier", "path": str(tiny_classifier_dir), "head": None, "callable": None,
                  "max_length": 16, "truncation": True, "trust_remote_code": False}})
    assert result["status"] == "ok", result["error"]
    notes = [n for n in result["notes"] if "bf16 is emulated" in n]
    assert notes == ([] if not emulated else [
        "bf16 is emulated on this CPU (Test CPU 9000: no avx512_bf16 nor amx_bf16 in /proc/cpuinfo): its time is "
        "no guide to a CPU with native bf16"])
    assert dev.precision_note("fp32", dev.HOST) is None


def test_avx512_bf16_alone_is_native_bf16(tmp_path, monkeypatch):
    from iteralab.models import device as dev

    monkeypatch.setattr(dev, "_PROC_CPUINFO", _cpuinfo(tmp_path, "avx512f avx512_bf16"))
    assert dev.precision_note("bf16", dev.HOST) is None
    monkeypatch.setattr(dev, "_PROC_CPUINFO", _cpuinfo(tmp_path, "avx512f"))
    assert "bf16 is emulated on this CPU (Test CPU 9000" in dev.precision_note("bf16", dev.HOST)
    assert dev.precision_note("bf16", "cuda:0") is None
