"""The benchmarks run end to end on a tiny size and print their figure lines.

What is checked is that each script works and says what it measured (the ratio line, the memory and verify lines,
the outputs compared); never a timing: the figures themselves are measured by running the scripts at full size
on a named machine (docs/performance-generation.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: int = 600) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_bench_gen_pass_prints_ours_over_bare_for_both_orders_with_identical_texts():
    out = run_bench("bench_gen_pass.py", "--docs", "12", "--batch-size", "4", "--max-new-tokens", "3", "--rounds",
                    "1", "--layers", "1", "--hidden", "32", "--heads", "2")
    assert out.startswith("CPU: ")
    for order in ("fixed", "bucketed"):
        line = next(line for line in out.splitlines() if line.strip().startswith(order))
        ratio = re.search(r"ours/bare (\d+\.\d+) \((meets|MISSES) <= 1\.05\)", line)
        assert ratio and float(ratio.group(1)) > 0, line
        # the pass and the bare loop decoded the same greedy texts: same batches, padding, precision and settings
        assert "identical texts 12/12" in line, line
        after = out.split(line, 1)[1]
        # one ratio per round, each batch of the pass timed beside its bare twin; the median is the one printed
        rounds = re.search(r"ours/bare in each round ([\d. ]+) \(median above", after)
        assert rounds and rounds.group(1).split() == [ratio.group(1)], after
        # the harness's own share, from the time the pass spent inside model.generate (the model was called)
        own = re.search(r"ours / its own time inside model.generate (\d+\.\d+)", after)
        assert own and float(own.group(1)) >= 1.0, out
    assert re.search(r"^load average \(1 min\) [\d.]+ before, [\d.]+ after", out, re.M)


def test_bench_scale_generation_prints_memory_verify_and_the_metric_apart():
    out = run_bench("bench_scale.py", "--task", "generation", "--docs", "400", "--baseline-docs", "200",
                    "--no-beside")
    assert out.startswith("bench_scale: 400 documents, 4 passes (2 variants), callable returning short texts")
    assert re.search(r"PSS \d+ MB .*target <= 400 MB at 200,000 documents", out)
    verify = re.search(r"verify [\d.]+ s = ([\d.]+) us/prediction \(target <= 5 plus the metric's cost\), "
                       r"peak RSS \d+ MB, (\S+)", out)
    assert verify and verify.group(2) == "ok", out  # every pass of the job verified
    split = re.search(r"verify split, us/prediction over 4 passes: hash [\d.]+, read_format [\d.]+, ids [\d.]+, "
                      r"references [\d.]+, compare [\d.]+ \(harness [\d.]+\); the metric's own cost \(token_f1 in "
                      r"Python\) [\d.]+; .* score (0\.\d+), identical share 1\.0", out)
    assert split, out
    # two documents in three carry the callable's answer: the score is that share, the job really was judged
    assert abs(float(split.group(1)) - 2 / 3) < 0.01
    bytes_per_doc = float(re.search(r"prediction file ([\d.]+) bytes/doc", out).group(1))
    assert bytes_per_doc > 0
    assert "beside the classification job" not in out


@pytest.mark.slow  # a simulation: kept out of the default run
def test_bench_speed_stats_keeps_false_distinguished_within_the_declared_level():
    out = run_bench("bench_speed_stats.py", "--campaigns", "200", "--json")
    report = json.loads(out)
    assert report["campaigns"] == 200 and len(report["settings"]) >= 8
    assert all(row["within_level"] for row in report["settings"])  # the script also exits 1 otherwise
    assert {(r["sided"], r["loaded_passes"]) for r in report["settings"]} >= {("two", "apart"), ("two", "counted"),
                                                                            ("one", "apart")}


@pytest.mark.slow  # builds a cross-encoder from MiniLM and runs it: kept out of the default run
def test_bench_score_prints_ours_over_bare_with_identical_scores():
    out = run_bench("bench_score.py", "--pairs", "32", "--repeats", "1", "--batch-size", "16")
    ratio = re.search(r"ours / bare (\d+\.\d+) \(target <= 1\.05\); ours / bare\+tok (\d+\.\d+); scores identical: "
                      r"(\w+)", out)
    assert ratio and float(ratio.group(1)) > 0 and float(ratio.group(2)) > 0, out
    assert ratio.group(3) == "True", out  # the same model over the same batches: the stored scores are the bare ones


@pytest.mark.slow  # two child processes over a campaign of a few thousand pairs
def test_bench_score_scale_prints_peak_rss_and_verify_with_the_metric_apart():
    out = run_bench("bench_score.py", "scale", "--pairs", "2000", "--passes", "2")
    assert re.search(r"^2000 pairs in 200 groups, 2 pass\(es\) on .+", out, re.M), out
    line = re.search(r"run peak RSS (\d+) MB \(target <= 400\); verify ([\d.]+) µs per prediction in all, of which the "
                     r"metric ([\d.]+) µs .*: the harness ([\d.]+) µs \(target <= 5\); verify ok: (\w+)", out)
    assert line and int(line.group(1)) > 0 and line.group(5) == "True", out


def test_bench_pass_core_times_the_measured_pass_alone_and_prints_json_for_interleave():
    out = run_bench("bench_pass_core.py", "--docs", "3000", "--batch-size", "64", "--repeats", "2")
    line = re.search(r"MeasuredPass\.run, 3,000 documents, batch 64, near-free callable, 2 passes: best ([\d.]+) s, "
                     r"median ([\d.]+) s = ([\d.]+) us per document \(best\)", out)
    assert line, out
    best, median, per_doc = (float(g) for g in line.groups())
    assert 0 < best <= median and per_doc > 0, out  # (the line rounds: the relation is checked on the JSON)
    figures = json.loads(run_bench("bench_pass_core.py", "--docs", "500", "--repeats", "1", "--json"))
    assert figures["docs"] == 500 and figures["best_s"] == figures["median_s"] > 0, figures
    assert figures["us_per_doc_best"] == pytest.approx(figures["best_s"] / 500 * 1e6), figures
