"""Benchmark: the rate of false "distinguished" for two identical variants under the product's own rule (T5).

Simulates many campaigns of two variants whose passes come from the SAME distribution of pass times: a
log-normal pass time (``--cv`` its spread) and, with probability ``--loaded``, a pass measured under concurrent
load (flagged, 1.5x to 6x slower, as on a shared machine). Each campaign goes through what ``iteralab stats``
does: the passes are set apart or counted by ``stats.loaded_passes`` (``set_apart``), then ``compare`` decides at
the declared level. It prints, per setting, the share of campaigns called "distinguished" (and, one-sided, the
share that called the first variant faster: the per-direction rate the level bounds), with its binomial
standard error, and the share a real 1.3x speed-up is distinguished (the power, for reference).

The rate must stay within the declared level (a 3-standard-error margin for the simulation's own noise); the
script exits 1 when it does not. Nothing here is timed, so the CPU does not change the figures (it is printed
with the run for the record).

    python bench/bench_speed_stats.py                       # 20000 campaigns per setting
    python bench/bench_speed_stats.py --campaigns 5000 --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time

from iteralab.evidence.datasets import PassTime
from iteralab.evidence.speed import VariantTimes, compare, set_apart
from iteralab.plan.tables import StatsSpec

SETTINGS = [  # (passes a variant, level, sided, loaded_passes)
    (3, 0.05, "one", "apart"), (3, 0.10, "two", "apart"), (4, 0.05, "two", "apart"), (5, 0.05, "two", "apart"),
    (5, 0.05, "two", "counted"), (5, 0.05, "one", "apart"), (5, 0.01, "two", "apart"), (8, 0.05, "two", "apart"),
    (8, 0.05, "two", "counted"),
]


def _variant(name: str, n: int, scale: float, rng: random.Random, cv: float, loaded: float,
             rule: StatsSpec) -> VariantTimes:
    passes = []
    for i in range(n):
        seconds = scale * rng.lognormvariate(0.0, cv)
        busy = rng.random() < loaded
        if busy:
            seconds *= rng.uniform(1.5, 6.0)
        passes.append(PassTime(f"{name}-{i}", "ok", seconds, {}, False, None, None, 100, busy))
    return VariantTimes(name, (), set_apart(tuple(passes), rule), rule=rule)


def simulate(n: int, rule: StatsSpec, campaigns: int, speedup: float, rng: random.Random, cv: float,
             loaded: float) -> dict[str, float]:
    """Shares of campaigns called distinguished (and, with the first variant called faster) for the given true
    speed-up of the first variant (1.0: identical variants)."""
    called = first = 0
    for _ in range(campaigns):
        a = _variant("a", n, 1.0 / speedup, rng, cv, loaded, rule)
        b = _variant("b", n, 1.0, rng, cv, loaded, rule)
        c = compare(a, b, rule=rule)
        if c.distinguished:
            called += 1
            first += c.faster == "a"
    return {"distinguished": called / campaigns, "first_faster": first / campaigns}


def cpu_name() -> str:
    """The CPU model and logical cores, for the record."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{model or platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--campaigns", type=int, default=20000)
    parser.add_argument("--cv", type=float, default=0.10, help="spread of a quiet pass (log-normal sigma)")
    parser.add_argument("--loaded", type=float, default=0.2, help="chance a pass runs under concurrent load")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    rows, failed = [], []
    for n, level, sided, loaded_passes in SETTINGS:
        rule = StatsSpec(level=level, sided=sided, loaded_passes=loaded_passes)
        null = simulate(n, rule, args.campaigns, 1.0, rng, args.cv, args.loaded)
        power = simulate(n, rule, max(args.campaigns // 4, 1), 1.3, rng, args.cv, args.loaded)
        rate = null["distinguished"] if sided == "two" else null["first_faster"]  # what the level bounds
        se = math.sqrt(level * (1 - level) / args.campaigns)
        ok = rate <= level + 3 * se
        rows.append({"passes": n, "level": level, "sided": sided, "loaded_passes": loaded_passes,
                     "false_distinguished": null["distinguished"], "false_first_faster": null["first_faster"],
                     "bounded_rate": rate, "standard_error": se, "within_level": ok,
                     "power_at_1.3x": power["distinguished"]})
        if not ok:
            failed.append(rows[-1])
    out = {"campaigns": args.campaigns, "cv": args.cv, "loaded": args.loaded, "seed": args.seed,
           "cpu": cpu_name(), "python": platform.python_version(),
           "seconds": round(time.perf_counter() - started, 1), "settings": rows}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.campaigns} campaigns of two identical variants per setting; quiet pass cv {args.cv}, "
              f"{args.loaded:.0%} of passes under concurrent load (1.5x-6x slower); seed {args.seed}; "
              f"{out['seconds']} s on {out['cpu']}")
        print("passes  level  sided  loaded   false 'distinguished'  bounded rate (se)   within  power at 1.3x")
        for r in rows:
            print(f"{r['passes']:>6}  {r['level']:<5}  {r['sided']:<5}  {r['loaded_passes']:<7}  "
                  f"{r['false_distinguished']:>20.4f}  {r['bounded_rate']:.4f} ({r['standard_error']:.4f})  "
                  f"{'yes' if r['within_level'] else 'NO':>6}  {r['power_at_1.3x']:>13.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
