"""Benchmark: peak RSS and wall of ``iteralab lock`` on a large corpus (issue 11).

Writes the corpus and protocol of ``bench_scale.py`` (N short synthetic texts, a near-free callable), then runs
``iteralab lock`` in a child process and prints its wall time and peak RSS (``RUSAGE_CHILDREN`` of a wrapper
process, so only the lock is counted). ``--datasets K`` splits the corpus into K ``[[datasets]]`` of one
protocol instead (K6), to measure a several-dataset lock.

    python bench/bench_lock.py --docs 200000
    python bench/bench_lock.py --docs 1000000 --datasets 2 --json
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import run_child, write_inputs


def split_datasets(folder: Path, protocol: Path, k: int) -> None:
    """Rewrite ``corpus.csv`` as ``part<i>.csv`` (rows dealt round-robin) and declare them as ``[[datasets]]``."""
    with ExitStack() as stack:
        reader = csv.reader(stack.enter_context(open(folder / "corpus.csv", newline="", encoding="utf-8")))
        header = next(reader)
        writers = [csv.writer(stack.enter_context(open(folder / f"part{i}.csv", "w", newline="", encoding="utf-8")),
                              lineterminator="\n") for i in range(k)]
        for w in writers:
            w.writerow(header)
        for n, row in enumerate(reader):
            writers[n % k].writerow(row)
    text = protocol.read_text(encoding="utf-8").replace('path = "corpus.csv"\n', "")
    text += "".join(f'\n[[datasets]]\nname = "part{i}"\npath = "part{i}.csv"\n' for i in range(k))
    protocol.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--datasets", type=int, default=0, help="split the corpus into this many [[datasets]]")
    parser.add_argument("--out", type=Path, default=None, help="folder for the inputs (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        protocol = write_inputs(folder, args.docs)
        if args.datasets:
            split_datasets(folder, protocol, args.datasets)
        for old in folder.glob("protocol.toml.lock.json"):
            old.unlink()
        wall, rss, proc = run_child([sys.executable, "-m", "iteralab.cli", "lock", str(protocol)], folder)
        if proc.returncode != 0:
            raise SystemExit(f"lock refused: {proc.stderr[-2000:]}")
        result = {"docs": args.docs, "datasets": args.datasets, "lock_wall_s": round(wall, 3),
                  "lock_peak_rss_bytes": rss, "peak_rss_bytes_per_doc": round(rss / args.docs, 1)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"lock of {args.docs:,} documents{f' in {args.datasets} datasets' if args.datasets else ''}: "
              f"{wall:.2f} s, peak RSS {rss / 1e6:.1f} MB ({rss / args.docs:.0f} bytes per document)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
