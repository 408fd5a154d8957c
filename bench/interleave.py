"""Benchmark: two revisions of the code side by side, interleaved — a bench script's figures, old against new.

For each revision it checks out a detached copy of the repository (``git worktree add --detach``) in a
temporary folder, then runs a bench script against *that* revision's code (``PYTHONPATH`` to its ``src``),
``--rounds`` times per revision in alternation (old, new, new, old, old, new …) so that a machine that slows
down or speeds up during the run weighs on both alike. By default both revisions run the *new* revision's script:
a bench that gained a memory sampler or another figure would otherwise count its own cost as the code's.
``--bench own`` runs each revision's own script (when the new script needs what the old code lacks). Each run
must print one JSON object (``--json``); every numeric figure of it is collected, and for each the median over
the rounds of each revision is printed with the ratio new / old, each side's spread over its rounds
((max - min) / median), and the CPU.

    python bench/interleave.py --old 492234a --new HEAD --rounds 3 -- bench_scale.py --docs 200000
    python bench/interleave.py --old 492234a --new HEAD --rounds 3 --keys run_wall_s,fixed_per_pass_s \\
        -- bench_scale.py --docs 1000000

Figures are this machine's, on this day: read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_line() -> str:
    """The CPU's model, core count and the SIMD flags that change ML speed (bf16 runs 2x faster or 6x slower)."""
    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].strip()
    except OSError:
        pass
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags.split()]
    return f"{model or platform.processor() or platform.machine()}, {os.cpu_count()} cores, flags incl. {' '.join(simd) or 'none of avx2/avx512'}"


def flatten(data: object, prefix: str = "") -> dict[str, float]:
    """Every numeric leaf of a JSON object, keyed by its dotted path (booleans left out)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix.rstrip(".")] = float(data)
    return out


def spread(values: list[float]) -> str:
    """(max - min) / median of one side's rounds: a ratio of medians inside it is not told apart from noise."""
    middle = statistics.median(values)
    return f"{(max(values) - min(values)) / middle:.3f}" if middle else "n/a"


def checkout(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(where), rev], check=True)
    return where


def run_once(tree: Path, script: str, args: list[str], bench: Path | None = None) -> dict[str, float]:
    """One run of ``script`` (from ``bench``, else the tree's own bench folder) against the tree's code."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    folder = bench or tree / "bench"
    proc = subprocess.run([sys.executable, str(folder / script), *args, "--json"], cwd=tree, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{script} at {tree} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return flatten(json.loads(proc.stdout[proc.stdout.index("{"):]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the earlier revision (the ratios' denominator)")
    parser.add_argument("--new", default="HEAD", help="the revision compared with it (default HEAD)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per revision, interleaved (default 3)")
    parser.add_argument("--bench", choices=("new", "own"), default="new",
                        help="whose bench script runs: the new revision's for both (default), or each revision's own")
    parser.add_argument("--keys", default="", help="comma-separated figures to print (default: all)")
    parser.add_argument("script", help="a bench script of this folder that accepts --json, then its arguments")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="iteralab-interleave-") as tmp:
        trees = {"old": checkout(opts.old, Path(tmp) / "old"), "new": checkout(opts.new, Path(tmp) / "new")}
        bench = trees["new"] / "bench" if opts.bench == "new" else None
        try:
            for round_ in range(opts.rounds):
                # ABBA: old first in odd rounds, new first in even ones, so that a machine that drifts during the
                # run does not always favour the side that runs first
                for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                    runs[side].append(run_once(trees[side], opts.script, opts.args, bench))
                    print(f"round {round_ + 1}/{opts.rounds} {side} done", file=sys.stderr)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    wanted = [k for k in opts.keys.split(",") if k] or sorted(set(runs["old"][0]) & set(runs["new"][0]))
    script = "the new revision's script for both" if opts.bench == "new" else "each revision's own script"
    print(f"{opts.script} {' '.join(opts.args)}: old {opts.old}, new {opts.new}, {opts.rounds} rounds interleaved, "
          f"{script}; CPU: {cpu_line()}")
    print(f"  {'figure':<40} {'old (median)':>14} {'new (median)':>14} {'new / old':>10} {'old spread':>10} "
          f"{'new spread':>10}")
    for key in wanted:
        old = [r[key] for r in runs["old"] if key in r]
        new = [r[key] for r in runs["new"] if key in r]
        if not old or not new:
            continue
        m_old, m_new = statistics.median(old), statistics.median(new)
        ratio = f"{m_new / m_old:.3f}" if m_old else "n/a"
        print(f"  {key:<40} {m_old:>14.6g} {m_new:>14.6g} {ratio:>10} {spread(old):>10} {spread(new):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
