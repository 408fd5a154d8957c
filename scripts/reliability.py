#!/usr/bin/env python3
"""Long reliability loop (R8, R9, D3 and the bad-input standard); the last line printed is the summary.

    python scripts/reliability.py                  # 60 seeded kill points, bad inputs, full disk, tamper pass
    python scripts/reliability.py --kills 200 --seed 7 --process-share 0.3
    python scripts/reliability.py --mode exec      # each runner in a fresh interpreter (slower, no fork)

Crash loop: a campaign runner (``iteralab run`` through ``iteralab.cli.main``) is killed with SIGKILL at
N moments drawn with the seed: either at a hooked moment (corpus copy, right after campaign.json, model
load, warm-up, a measured batch, a prediction file complete under its temporary name, renamed but not yet
journaled, evaluation, between passes, table regeneration) or after a random delay. Some runs use worker
processes (``isolation = "process"``) where the runner, the worker, or both are killed; an orphaned worker
is left to finish. Several kills may hit one campaign before it is resumed to completion. After every kill
the folder is checked (``iteralab table``, aborted rows, hashes of referenced files, ``iteralab verify
--unsealed``, finished passes unchanged); after the resume, every slot must be finished exactly once,
nothing finished before lost or redone, and a sealed copy must verify. A share of kills also cuts the
journal's last line in half (an append cut short by a full disk or a power loss) before resuming.

Then the bad-input list (``reliability_support.bad_inputs``), full-disk resumes (a real tmpfs when this
machine allows mounting, and ENOSPC injected at each write), and ``scripts/tamper_check.py`` (single-byte
changes of a sealed bundle must all fail verification). Problems are printed to stderr, one per line; the
exit code is 1 if any.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

import reliability_support as rs  # noqa: E402
from iteralab.campaign.journal import read_journal  # noqa: E402

PASS_SIDE = ("load", "warmup", "pass", "writing", "written")


def say(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


@dataclass
class Kill:
    n: int
    how: str  # e.g. "pause pass#2/1", "delay 0.42 s"
    isolation: str
    style: str  # runner / both / worker
    phase: str = "?"
    aborted_ok: bool | None = None  # in-pass kill: the killed pass is an aborted row (None: not in a pass)
    torn: bool = False
    problems: list[str] = field(default_factory=list)
    resumed: bool = False


@dataclass
class Chain:
    folder: Path
    isolation: str
    protocol: Path
    kills: list[Kill] = field(default_factory=list)
    snapshots: list[rs.Snapshot] = field(default_factory=list)
    length: int = 1

    @property
    def out(self) -> Path:
        return self.folder / "out"

    def todo(self) -> int:
        if not (self.out / "campaign.json").exists():
            return 10**6
        return rs.slot_count(self.out) - len(read_journal(self.out / "journal.jsonl").done_slots())


class CrashLoop:
    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.rng = random.Random(args.seed)
        self.kills: list[Kill] = []
        self.chain: Chain | None = None
        self.chains = 0
        self.lost = 0
        self.finished_early = 0
        self.estimate = {"inprocess": 1.5, "process": 12.0}
        self.deck: list[str] = []

    # ------------------------------------------------------------------------------------------ chains
    def new_chain(self) -> Chain:
        self.chains += 1
        isolation = "process" if self.rng.random() < self.args.process_share else "inprocess"
        folder = self.root / f"campaign-{self.chains:03d}-{isolation}"
        variants = [("b1", 1), ("b2", 2), ("b4", 4)] if isolation == "inprocess" else [("b2", 2), ("b4", 4)]
        passes = 2 if isolation == "inprocess" else 1
        protocol = rs.make_campaign(folder, isolation=isolation, passes=passes, variants=variants)
        return Chain(folder, isolation, protocol, length=self.rng.choice([1, 1, 2, 3]))

    def finish_chain(self, chain: Chain) -> None:
        """Resume to completion and check against every snapshot taken after a kill of this chain."""
        if not chain.kills:
            return
        problems: list[str] = []
        res = rs.cli(["run", chain.protocol, "--out", chain.out, "--json"])
        if res.rc != 0:
            problems.append(f"resume failed: {res.describe()}")
        elif chain.snapshots:
            problems += rs.check_complete(chain.out, chain.snapshots[-1], seal_copy=chain.folder / "sealed")
            for snap in chain.snapshots[:-1]:
                problems += rs.lost_passes(snap, rs.snapshot(chain.out))
        else:
            problems += rs.check_complete(chain.out, rs.Snapshot(), seal_copy=chain.folder / "sealed")
        self.lost += sum(1 for p in problems if "finished pass lost" in p or "finished pass changed" in p)
        phases = ", ".join(f"#{k.n} {k.phase}" + (" (torn journal)" if k.torn else "") for k in chain.kills)
        for p in dict.fromkeys(problems):
            say(f"PROBLEM {chain.folder.name} after kills [{phases}]: {p}")
        for kill in chain.kills:
            kill.resumed = not problems
            kill.problems += problems
        if not self.args.keep:
            shutil.rmtree(chain.folder, ignore_errors=True)

    # ------------------------------------------------------------------------------------------- kills
    def next_point(self) -> str:
        """Hooked moments are dealt from a shuffled deck, so that every one of them is hit in turn."""
        if not self.deck:
            self.deck = list(rs.PAUSE_POINTS)
            self.rng.shuffle(self.deck)
        return self.deck.pop()

    def choose(self, chain: Chain, point: str | None) -> tuple[tuple[str, int, int] | None, float | None, str]:
        todo = chain.todo()
        style = "runner"
        if point is None:
            per_slot = self.estimate[chain.isolation] / 6
            delay = self.rng.uniform(0.02, per_slot * min(todo, 6) + 0.4)
            if chain.isolation == "process":
                style = self.rng.choice(["runner", "both"])
            return None, delay, style
        if point == "manifest" and (chain.out / "manifest.json").exists():
            point = "written"  # manifest.json is written once, after the campaign's first good pass
        pass_no = 0 if point in ("inputs", "prepared", "table") else self.rng.randint(1, max(1, min(2, todo)))
        if point == "manifest":
            pass_no = 1
        occurrence = self.rng.randint(1, 2) if point == "pass" else 1
        if chain.isolation == "process" and point in PASS_SIDE:
            style = self.rng.choice(["runner", "both", "worker"])
        return (point, pass_no, occurrence), None, style

    def one_kill(self, n: int) -> None:
        point = None if self.rng.random() < self.args.random_share else self.next_point()
        chain = self.chain
        if chain is None or len(chain.kills) >= chain.length or chain.todo() == 0 or \
                (point in ("inputs", "prepared") and (chain.out / "campaign.json").exists()):
            if chain is not None:
                self.finish_chain(chain)
            self.chain = chain = self.new_chain()
        pause, delay, style = self.choose(chain, point)
        work = chain.folder / f"work-{n:03d}"
        how = f"pause {pause[0]}#{pause[1]}/{pause[2]}" if pause else f"delay {delay:.2f} s"
        kill = Kill(n, how, chain.isolation, style)
        started = time.monotonic()
        child = rs.start_run(chain.protocol, chain.out, work, pause=pause, delay=0.01 if delay else 0.0,
                             mode=self.args.mode)
        worker: tuple[int, str | None] | None = None  # (pid, start time) of the pass worker, if any
        try:
            if pause:
                info = rs.wait_paused(child)
                if info is None:
                    return self.ended_early(child, kill, started)
                if info["pid"] != child.pid:
                    worker = (info["pid"], info["ident"])
            else:
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline:
                    if child.exited() is not None:
                        return self.ended_early(child, kill, started)
                    time.sleep(0.005)
                worker = rs.worker_of(child.pid)
            if style == "worker" and worker is not None:
                rs.kill_pid(*worker)
                rs.wait_gone(worker[0], ident=worker[1])
                rc = self.wait_exit(child)
                if rc != 0:
                    kill.problems.append(f"runner ended with {rc} after its worker was killed: {child.log_tail(3)}")
            else:
                child.kill()
                if worker is not None and style == "both":
                    rs.kill_pid(*worker)
                    rs.wait_gone(worker[0], ident=worker[1])
            # where the kill landed, before an orphaned worker is let go and writes its file
            phase = rs.evidence_phase(chain.out, rs.last_phase_line(work))
            if worker is not None and style == "runner":
                (work / "release").write_text("go")  # the orphan carries on; it must never be counted
                if not rs.wait_gone(worker[0], 180, ident=worker[1]):
                    rs.kill_pid(*worker)
                    kill.problems.append("orphaned worker did not end within 180 s")
        finally:
            child.kill()
            if worker is not None and rs.alive(worker[0]) and style != "runner":
                rs.kill_pid(*worker)
        self.after_kill(chain, kill, phase)

    def wait_exit(self, child: rs.Child, timeout: float = 300) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = child.exited()
            if rc is not None:
                return rc
            time.sleep(0.05)
        return None

    def ended_early(self, child: rs.Child, kill: Kill, started: float) -> None:
        """The run finished before the kill point: no kill, but it must have ended well."""
        rc = child.exited()
        self.finished_early += 1
        if rc not in (0, None):
            say(f"PROBLEM run #{kill.n} ({kill.how}) ended by itself with exit code {rc}: {child.log_tail(5)}")
            kill.problems.append(f"run ended with {rc}")
            self.kills.append(kill)
        elapsed = time.monotonic() - started
        self.estimate[kill.isolation] = max(self.estimate[kill.isolation] * 0.7 + elapsed * 0.3, 0.3)

    def after_kill(self, chain: Chain, kill: Kill, phase: str) -> None:
        out = chain.out
        kill.phase = phase
        if kill.style == "worker":
            kill.phase = "in pass (worker killed)"
        state = read_journal(out / "journal.jsonl") if (out / "journal.jsonl").exists() else None
        if kill.phase in rs.IN_PASS:
            kill.aborted_ok = bool(state and state.order and state.order[-1] in state.aborted())
        if kill.style == "worker" and state is not None:
            finished = [state.finished[p] for p in state.order if p in state.finished]
            if not any("signal 9" in (f.get("error") or "") for f in finished):
                kill.problems.append("the worker killed by SIGKILL is not a failed row naming signal 9")
        # A kill during a journal append can cut its line short, but only when that line was the last thing
        # written: not when a prediction file was written after it (phase writing/written, or an orphan).
        if (out / "journal.jsonl").exists() and rs.evidence_phase(out) not in ("writing", "written") \
                and self.rng.random() < self.args.torn_share:
            data = (out / "journal.jsonl").read_bytes()
            cut = data.rstrip(b"\n").rfind(b"\n") + 1
            last = len(data) - cut
            (out / "journal.jsonl").write_bytes(data[: cut + max(1, last // 2)])
            kill.torn = True
        before = rs.snapshot(out) if (out / "campaign.json").exists() else rs.Snapshot()
        earlier = {p for k in chain.kills for p in k.problems}  # left by an earlier kill of this campaign
        kill.problems += [p for p in rs.check_after_kill(out, before) if p not in earlier]
        for p in kill.problems:
            say(f"PROBLEM kill #{kill.n} ({kill.isolation}, {kill.how}, {kill.style}) in {kill.phase}"
                f"{' + torn journal' if kill.torn else ''}: {p}")
        chain.kills.append(kill)
        chain.snapshots.append(before)
        self.kills.append(kill)
        say(f"kill #{kill.n}: {kill.isolation} {kill.how} [{kill.style}] -> {kill.phase}"
            f"{' + torn journal' if kill.torn else ''}{'' if not kill.problems else ' PROBLEM'}")

    def run(self) -> None:
        n = 0
        attempts = 0
        while n < self.args.kills and attempts < self.args.kills * 3:
            attempts += 1
            before = len(self.kills)
            self.one_kill(n + 1)
            if len(self.kills) > before:
                n += 1
        if self.chain is not None:
            self.finish_chain(self.chain)

    def summary(self) -> str:
        counts = Counter(k.phase for k in self.kills)
        order = [*rs.PHASES, "in pass (worker killed)"]
        phases = ", ".join(f"{p} {counts[p]}" for p in order if counts[p])
        in_pass = [k for k in self.kills if k.aborted_ok is not None]
        torn = [k for k in self.kills if k.torn]
        return (f"kill points tried: {len(self.kills)} ({phases}; worker processes "
                f"{sum(k.isolation == 'process' for k in self.kills)}, random delays "
                f"{sum(k.how.startswith('delay') for k in self.kills)}) | aborted rows: "
                f"{sum(bool(k.aborted_ok) for k in in_pass)} of {len(in_pass)} in-pass kills, resumed to completion: "
                f"{sum(k.resumed for k in self.kills)} of {len(self.kills)}, finished passes lost: {self.lost}"
                f" | torn journal lines: {len(torn)}, verified after resume: {sum(k.resumed for k in torn)}")


# ------------------------------------------------------------------------------------------ bad input


def bad_input_part(root: Path) -> tuple[str, int]:
    good = rs.make_campaign(root / "good", passes=1)
    done = root / "good" / "out"
    if rs.cli(["run", good, "--out", done, "--json"]).rc != 0:
        say("PROBLEM the reference campaign for bad inputs does not run")
        return "bad inputs: not run", 1
    tried = errors = refusals = changed = valid = accepted = 0
    problems = 0
    for case in rs.bad_inputs(root / "cases", good, done):
        found = rs.run_bad_input(case, done)
        changed += sum("changed" in p for p in found)
        if case.accept:  # valid although unusual (a 10 MB text, a carriage return): must run
            valid += 1
            accepted += not found
        else:
            tried += 1
            refusals += 1
            errors += not any("traceback" in p or "exit code" in p or "Error" in p for p in found)
        for p in found:
            say(f"PROBLEM bad input {p}")
        problems += len(found)
    full = rs.disk_full_cases(root / "disk", [0, 2048, 4096, 8192, 16384, 32768, 65536]) or []
    full += rs.enospc_cases(root / "enospc", list(range(1, 9)))
    full += rs.enospc_cases(root / "enospc-new", list(range(1, 12)), fresh=True)
    answers = Counter(o.answer for o in full)
    for o in full:
        if o.answer != "not reached" and not o.full:
            o.problems.append(f"{o.name}: the disk was never full (the filler left more than the asked space)")
        if o.answer == "refused" and not o.refused_for_space():
            o.problems.append(f"{o.name}: refused for another reason than the full disk: {o.error}")
        for p in o.problems:
            say(f"PROBLEM full disk {p}")
        problems += len(o.problems)
    lost = sum(1 for o in full for p in o.problems if "lost" in p or "changed" in p)
    reached = [o for o in full if o.full and o.answer != "not reached"]
    text = (f"bad inputs tried: {tried}, one-line errors: {errors}, records changed: {changed}, unusual valid "
            f"inputs run (10 MB text, carriage return): {accepted} of {valid} | full disk tried: {len(reached)} (refused in one line "
            f"{answers['refused']}, ran {answers['ran']}, traceback {answers['traceback']}), records lost: {lost}")
    return text, problems


# --------------------------------------------------------------------------------------------- tamper


def tamper_part(per_file: int) -> tuple[str, int]:
    path = REPO / "scripts" / "tamper_check.py"
    if not path.exists():
        return "tampered files: not checked (scripts/tamper_check.py absent)", 0
    spec = importlib.util.spec_from_file_location("tamper_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        rc = module.main(["--per-file", str(per_file)])
    last = buffer.getvalue().strip().splitlines()[-1] if buffer.getvalue().strip() else ""
    match = re.search(r"tampered files tried: (\d+), byte positions tried: (\d+), detected: (\d+)", last)
    if not match:
        say(f"PROBLEM tamper_check.py said: {buffer.getvalue()[-300:]!r}")
        return "tampered files: tamper_check.py gave no summary", 1
    files, positions, detected = (int(g) for g in match.groups())
    if rc != 0:
        for line in buffer.getvalue().splitlines():
            if line.startswith("MISSED"):
                say(f"PROBLEM tamper {line}")
    return (f"tampered files tried: {files}, byte positions: {positions}, detected: {detected}",
            0 if rc == 0 and detected == positions else 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=60, help="kill points to try (default 60)")
    parser.add_argument("--seed", type=int, default=20260924)
    parser.add_argument("--process-share", type=float, default=0.2,
                        help="share of campaigns run with worker processes (slower: a fresh interpreter per pass)")
    parser.add_argument("--random-share", type=float, default=0.35, help="share of kills after a random delay")
    parser.add_argument("--torn-share", type=float, default=0.1,
                        help="share of kills after which the journal's last line is also cut in half")
    parser.add_argument("--mode", choices=("fork", "exec"), default="fork",
                        help="runner in a fork of this interpreter (fast) or a fresh one")
    parser.add_argument("--tamper-per-file", type=int, default=12, help="byte positions per file for tamper_check")
    parser.add_argument("--skip-bad-input", action="store_true")
    parser.add_argument("--skip-tamper", action="store_true")
    parser.add_argument("--keep", help="keep the campaign folders under this folder (default: a temporary one)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rs.preload()
    parts: list[str] = []
    failures = 0
    with tempfile.TemporaryDirectory(prefix="iteralab-reliability-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        loop = CrashLoop(root / "crash", args)
        loop.run()
        parts.append(loop.summary())
        failures += sum(bool(k.problems) for k in loop.kills) + loop.lost
        if not args.skip_bad_input:
            text, problems = bad_input_part(root / "bad")
            parts.append(text)
            failures += problems
        if not args.skip_tamper:
            text, problems = tamper_part(args.tamper_per_file)
            parts.append(text)
            failures += problems
    parts.append(f"problems: {failures} ({time.monotonic() - started:.0f} s, seed {args.seed})")
    print(" | ".join(parts), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
