#!/usr/bin/env python3
"""Single-byte tampering check of a sealed campaign folder: every change must make ``verify`` fail.

    python scripts/tamper_check.py                      # builds a small sealed campaign itself
    python scripts/tamper_check.py path/to/campaign     # a sealed campaign folder (it is copied, never touched)
    python scripts/tamper_check.py --all                # every position of every file, whatever its size

For every file of the bundle (``SHA256SUMS`` and ``SHA256SUMS.sha256`` included) and every chosen byte
position, one byte is changed (XOR with a seeded random non-zero mask, so the byte always differs), the full
independent verification (``iteralab.evidence.verify.audit_campaign``, the code behind ``iteralab verify``) is run on the
copy, and the byte is restored. Positions: every position of a file of at most ``--per-file`` bytes; for a
larger file, ``--per-file`` positions drawn with the seed, always including its first and last byte
(``--all``: every position of every file). The last line is the summary; the exit code is 1 if anything was
missed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from iteralab.evidence.verify import audit_campaign
from iteralab.evidence.bundle import SEAL_FILES, list_files, seal

MODEL_MODULE = '''
def classify(texts):
    rows = []
    for text in texts:
        t = text.lower()
        k = 0 if "story" in t else 1 if "good" in t else 2
        row = [0.1, 0.1, 0.1]
        row[k] = 0.8
        rows.append(row)
    return rows
'''

TEXTS = [("a story about a bank", "plot"), ("good fun", "fresh"), ("dull and long", "rotten"),
         ("the story of a dog", "plot"), ("good acting", "fresh"), ("boring", "rotten"),
         ("story of two cities", "plot"), ("really good", "fresh"), ("weak script", "rotten")]

PROTOCOL = '''schema_version = 1
name = "tamper-check"
version = 1
question = "Does every single-byte change of a sealed bundle fail verification?"
scenario = "offline"

[corpus]
path = "corpus.csv"
classes = ["plot", "fresh", "rotten"]

[model]
kind = "callable"
callable = "tamper_check_model:classify"

[metric]
name = "macro_f1"
threshold = 0.5
tolerance = 0.05
reference_variant = "b4"

# (a length subgroup needs strata counted by a model's tokenizer; this callable has none: classes instead)
[[subgroups]]
name = "class"
by = "label"

[warmup]
inputs = 2
passes = 1

[run]
passes = 1
isolation = "inprocess"
device = "cpu"

[[variants]]
name = "b1"
batch_size = 1

[[variants]]
name = "b4"
batch_size = 4

[[series]]
name = "batch"
factor = "batch_size"
variants = ["b1", "b4"]
'''


def build_campaign(root: Path) -> Path:
    """A small campaign (2 variants x 1 pass, 9 texts, a callable model), run and sealed under ``root``."""
    import csv

    from iteralab.lock.inputs import lock
    from iteralab.evidence.run import run_campaign

    root.mkdir(parents=True, exist_ok=True)
    (root / "tamper_check_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    sys.path.insert(0, str(root))
    with open(root / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "label", "stratum"])
        for i, (text, label) in enumerate(TEXTS):
            writer.writerow([f"d{i:02d}", text, label, "short" if len(text) < 15 else "long"])
    (root / "protocol.toml").write_text(PROTOCOL, encoding="utf-8")
    lock(root / "protocol.toml")
    run_campaign(root / "protocol.toml", root / "campaign")
    seal(root / "campaign")
    return root / "campaign"


def positions_for(size: int, per_file: int, everything: bool, rng: random.Random) -> list[int]:
    if everything or size <= per_file:
        return list(range(size))
    chosen = {0, size - 1} | set(rng.sample(range(1, size - 1), per_file - 2))
    return sorted(chosen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", help="sealed campaign folder (default: build a small one)")
    parser.add_argument("--per-file", type=int, default=256,
                        help="files up to this size are tried at every position; larger ones at this many "
                             "seeded positions (default 256)")
    parser.add_argument("--all", action="store_true", help="every position of every file")
    parser.add_argument("--seed", type=int, default=20260924)
    args = parser.parse_args(argv)
    if args.per_file < 2:
        parser.error("--per-file must be at least 2")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="tamper-check-") as tmp:
        tmp_path = Path(tmp)
        source = Path(args.folder) if args.folder else build_campaign(tmp_path / "built")
        work = tmp_path / "work"
        shutil.copytree(source, work, symlinks=True)
        baseline = audit_campaign(work)
        if not baseline.ok:
            print(f"{source}: does not verify before any change:", *baseline.differences, sep="\n- ")
            return 2
        files = list_files(work) + list(SEAL_FILES)
        tried = detected = 0
        missed: list[str] = []
        started = time.monotonic()
        mode = ("every position of every file" if args.all else
                f"every position of files <= {args.per_file} bytes, {args.per_file} seeded positions "
                f"(seed {args.seed}, first and last byte included) of larger files")
        print(f"bundle: {source} ({len(files)} files, {sum((work / f).stat().st_size for f in files)} bytes); "
              f"positions: {mode}; one byte XOR a random non-zero mask per position", flush=True)
        for rel in files:
            path = work / rel
            original = path.read_bytes()
            chosen = positions_for(len(original), args.per_file, args.all, rng)
            for position in chosen:
                changed = bytearray(original)
                changed[position] ^= rng.randrange(1, 256)
                path.write_bytes(bytes(changed))
                tried += 1
                if audit_campaign(work).ok:
                    missed.append(f"{rel} byte {position}")
                else:
                    detected += 1
            path.write_bytes(original)
            print(f"  {rel}: {len(chosen)} of {len(original)} positions tried "
                  f"({time.monotonic() - started:.0f} s so far)", file=sys.stderr, flush=True)
        if not audit_campaign(work).ok:
            print("the restored copy no longer verifies: the check itself is broken")
            return 2
    for line in missed:
        print(f"MISSED: {line}")
    print(f"tampered files tried: {len(files)}, byte positions tried: {tried}, detected: {detected}, "
          f"missed: {len(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
