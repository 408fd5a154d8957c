"""Fault injection for the reliability checks (R8, R9, D3 and the bad-input standard).

Used by ``tests/campaign/test_reliability.py`` (a few kill points, quick) and ``scripts/reliability.py`` (many).

How a campaign is killed at a precise moment
--------------------------------------------
The campaign runs in a separate process (``os.fork`` of an interpreter that already imported torch and
scikit-learn, or a fresh interpreter with ``--exec``) through the real CLI entry point
``iteralab.cli.main(["run", PROTOCOL, "--out", DIR, "--json"])``. Before it starts, that process installs
*hooks*: thin wrappers around library functions (``os.replace`` in ``iteralab.common.files``,
``factory.load_workload``, ``device.reset_peaks``, ``verify.evaluate_pass``, ``Journal.append``) that only
note the phase in ``phases.log`` and, at the requested moment, write a ``paused`` marker and wait. The test
then sends SIGKILL. The model is :func:`hooked_classifier` (the keyword classifier of ``fake_models``), which
notes warm-up and measured calls; in ``process`` isolation the worker imports this module as its model and
installs the same hooks, so a worker can be paused (and killed, or released to finish as an orphan) too.
Nothing here changes what the library writes: the hooks call the real functions.

After a kill
------------
:func:`evidence_phase` says where the kill landed from the folder alone (journal + files), refined by the
model's phase log; :func:`check_after_kill` runs ``iteralab table`` and ``iteralab verify --unsealed``
through ``cli.main``, checks aborted rows, prediction files and their hashes, and that every pass finished
before the kill is unchanged; :func:`check_complete` checks a resumed campaign (and seals + verifies a copy).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

TESTS = Path(__file__).resolve().parent
ENV = "RELIABILITY_HOOKS"
PASS_NO_ENV = "RELIABILITY_PASS_NO"
MODEL = "reliability_support:hooked_classifier"
CLASSES = ("plot", "fresh", "rotten")
#: Moments a kill can target. Runner side: inputs, prepared, evaluation, between, table. Pass side: the rest.
#: ``inputs``: the corpus copy is written to a temporary name (before campaign.json); ``prepared``: right after
#: campaign.json; ``writing``: a prediction file is complete under its temporary name; ``written``: renamed,
#: not yet in the journal; ``manifest``: manifest.json written after the first good pass, which is not yet in
#: the journal; ``between``: right after a pass_evaluated record.
PAUSE_POINTS = ("inputs", "prepared", "load", "warmup", "pass", "writing", "written", "manifest", "evaluation",
                "between", "table")
RUNNER_SIDE = ("inputs", "prepared", "manifest", "evaluation", "between", "table")
#: What evidence_phase can say, in the order of a campaign.
PHASES = ("prepare", "start", "load", "warm-up", "in pass", "writing", "written", "evaluation", "between",
          "table")
IN_PASS = ("load", "warm-up", "in pass", "writing", "written")

# ------------------------------------------------------------------------------------- the fake model

_STATE: dict[str, Any] = {"installed": False, "measuring": False, "pass_no": 0, "counts": {}, "config": None}


def _keyword_rows(texts: list[str]) -> list[list[float]]:
    rows = []
    for text in texts:
        t = text[:10_000].lower()  # a 10 MB text: its start decides, quickly
        k = 0 if "story" in t else 1 if "good" in t else 2
        row = [0.1, 0.1, 0.1]
        row[k] = 0.8
        rows.append(row)
    return rows


def hooked_classifier(texts: list[str]) -> list[list[float]]:
    """The keyword classifier; under hooks it notes warm-up / measured calls, may sleep, may pause."""
    config = _STATE["config"]
    if config is not None:
        phase = "pass" if _STATE["measuring"] else "warmup"
        _enter(phase)
        delay = float(config.get("delay") or 0)
        if delay:
            time.sleep(delay)
    return _keyword_rows(texts)


# ------------------------------------------------------------------------------------------ the hooks


def _log(line: str) -> None:
    config = _STATE["config"]
    fd = os.open(os.path.join(config["dir"], "phases.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{os.getpid()} {line}\n".encode())
    finally:
        os.close(fd)


def _pass_no() -> int:
    return int(os.environ.get(PASS_NO_ENV) or _STATE["pass_no"] or 0)


def _enter(phase: str) -> None:
    """Note ``phase``; pause here if it is the requested (phase, pass number, occurrence)."""
    config = _STATE["config"]
    pass_no = _pass_no() if phase not in ("inputs", "prepared", "table") else 0
    key = (phase, pass_no)
    _STATE["counts"][key] = _STATE["counts"].get(key, 0) + 1
    _log(f"{phase} {pass_no} {_STATE['counts'][key]}")
    pause = config.get("pause")
    if not pause or pause[0] != phase:
        return
    if phase not in ("inputs", "prepared", "table") and pause[1] != pass_no:
        return
    if pause[2] != _STATE["counts"][key]:
        return
    marker = Path(config["dir"]) / "paused"
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"phase": phase, "pass_no": pass_no, "pid": os.getpid()}))
    os.replace(tmp, marker)
    release = Path(config["dir"]) / "release"
    deadline = time.monotonic() + float(config.get("pause_limit_s", 300))
    while not release.exists():
        if time.monotonic() > deadline:
            os._exit(99)  # nobody came: never continue past an unattended pause
        time.sleep(0.01)
    _log(f"released {phase} {pass_no}")


def install_hooks(config: dict[str, Any]) -> None:
    """Wrap the library's functions in this process (only ever in a process started to be killed)."""
    if _STATE["installed"]:
        return
    _STATE.update(installed=True, config=config, counts={}, measuring=False, pass_no=0)
    import iteralab.models.device as device
    import iteralab.common.files as fsutil
    import iteralab.campaign.journal as journal
    import iteralab.campaign.verdict.evaluate as verify
    import iteralab.models.factory as workloads

    real_replace = os.replace

    class _OsProxy:
        """``fsutil`` sees this instead of ``os``: the same module, with ``replace`` noted."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def replace(src: Any, dst: Any, *a: Any, **k: Any) -> None:
            dst_path = Path(dst)
            if dst_path.parent.name == "predictions":
                _enter("writing")  # the temporary file is complete, not yet renamed
                real_replace(src, dst, *a, **k)
                _enter("written")  # renamed, not yet recorded in the journal
                return
            if dst_path.name == "raw_table.csv":
                _enter("table")
            if dst_path.name == "corpus.csv" and dst_path.parent.name == "inputs":
                _enter("inputs")
            real_replace(src, dst, *a, **k)
            if dst_path.name == "campaign.json":
                _enter("prepared")
            if dst_path.name == "manifest.json":
                _enter("manifest")

    fsutil.os = _OsProxy()

    real_load = workloads.load_workload

    def load_workload(*args: Any, **kwargs: Any) -> Any:
        _STATE["measuring"] = False
        _enter("load")
        return real_load(*args, **kwargs)

    workloads.load_workload = load_workload

    real_reset = device.reset_peaks

    def reset_peaks(dev: Any) -> Any:
        _STATE["measuring"] = True
        return real_reset(dev)

    device.reset_peaks = reset_peaks

    real_evaluate = verify.evaluate_pass

    def evaluate_pass(*args: Any, **kwargs: Any) -> Any:
        _enter("evaluation")
        return real_evaluate(*args, **kwargs)

    verify.evaluate_pass = evaluate_pass

    real_append = journal.Journal.append

    def append(self: Any, event: str, **payload: Any) -> Any:
        if event == "pass_started":
            _STATE["pass_no"] += 1
            os.environ[PASS_NO_ENV] = str(_STATE["pass_no"])  # a worker process inherits it
        record = real_append(self, event, **payload)
        if event == "pass_evaluated":
            _enter("between")
        return record

    journal.Journal.append = append


def _hooks_from_env() -> None:
    """A worker process (``python -m iteralab.campaign.engines.passes``) imports this module as its model: hook it
    too."""
    raw = os.environ.get(ENV)
    is_worker = bool(sys.argv) and Path(sys.argv[0]).parts[-4:] == ("iteralab", "campaign", "engines", "passes.py")
    if raw and is_worker and not _STATE["installed"]:
        install_hooks(json.loads(raw))
        # the import itself is the model load of this worker
        _STATE["measuring"] = False
        _enter("load")


# --------------------------------------------------------------------------------------- campaigns


def write_corpus(folder: Path, n: int = 12, long_text_bytes: int = 0) -> Path:
    from campaign_factory import TEXTS

    rows = [(f"d{i:03d}", TEXTS[i % len(TEXTS)][0] + ("" if i < len(TEXTS) else f" #{i}"), TEXTS[i % len(TEXTS)][1])
            for i in range(n)]
    if long_text_bytes:
        filler = ("a story that goes on " * (long_text_bytes // 21 + 1))[:long_text_bytes]
        rows.append(("long-1", filler, "plot"))
    path = folder / "corpus.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "text", "label", "stratum"])
        for rid, text, label in rows:
            w.writerow([rid, text, label, "short" if len(text) < 20 else "long"])
    return path


def variants_toml(names_sizes: list[tuple[str, int]]) -> str:
    parts = [f'\n[[variants]]\nname = "{n}"\nbatch_size = {b}\n' for n, b in names_sizes]
    if len(names_sizes) > 1:
        listed = ", ".join(f'"{n}"' for n, _ in names_sizes)
        parts.append(f'\n[[series]]\nname = "batch"\nfactor = "batch_size"\nvariants = [{listed}]\n')
    return "".join(parts)


def make_campaign(folder: Path, *, isolation: str = "inprocess", passes: int = 2,
                  variants: list[tuple[str, int]] | None = None, deterministic: bool = False, n_docs: int = 12,
                  long_text_bytes: int = 0, warmup: str = "inputs = 2\npasses = 1") -> Path:
    """A corpus, a protocol using :func:`hooked_classifier`, locked. Returns the protocol path.

    ``deterministic`` is off by default only because ``torch.use_deterministic_algorithms`` imports
    ``torch._inductor`` (seconds per fresh worker process); it plays no part in what is checked here."""
    from iteralab.lock.inputs import lock
    from protocol_factory import write_protocol

    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder, n_docs, long_text_bytes)
    variants = variants or [("b1", 1), ("b4", 4)]
    reproduction = 'target = "acceptable"' + ("" if deterministic else "\ndeterministic = false")
    path = write_protocol(folder, model=f'kind = "callable"\ncallable = "{MODEL}"', passes=passes,
                          variants=variants_toml(variants), reference=variants[-1][0], isolation=isolation,
                          reproduction=reproduction, warmup=warmup)
    lock(path)
    return path


def slot_count(out: Path) -> int:
    return len(json.loads((out / "campaign.json").read_text(encoding="utf-8"))["schedule"]["slots"])


# ------------------------------------------------------------------------------ running to be killed


@dataclass
class Child:
    pid: int
    dir: Path
    popen: subprocess.Popen | None = None
    log: Path | None = None
    rc: int | None = None

    def exited(self) -> int | None:
        """Exit status once the process has ended (it is reaped here), else None."""
        if self.rc is not None:
            return self.rc
        if self.popen is not None:
            self.rc = self.popen.poll()
            return self.rc
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid != 0:
            self.rc = os.waitstatus_to_exitcode(status)
        return self.rc

    def kill(self) -> None:
        """SIGKILL, then reap; nothing happens to a process that already ended."""
        if self.exited() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        if self.popen is not None:
            self.rc = self.popen.wait()
        else:
            with contextlib.suppress(ChildProcessError):
                self.rc = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])

    def log_tail(self, n: int = 15) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def preload() -> None:
    """Import what a campaign imports, so that a forked runner starts at once (torch, sklearn)."""
    import sklearn.metrics  # noqa: F401
    import torch  # noqa: F401

    import iteralab.evidence.verify  # noqa: F401
    import iteralab.evidence.bundle  # noqa: F401
    import iteralab.cli  # noqa: F401
    import iteralab.campaign.manifest  # noqa: F401
    import iteralab.campaign.engines.passes  # noqa: F401
    import iteralab.campaign.runner  # noqa: F401
    import iteralab.evidence.table  # noqa: F401
    import iteralab.campaign.verdict.evaluate  # noqa: F401
    import iteralab.models.factory  # noqa: F401


def _child_env(config: dict[str, Any]) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {ENV: json.dumps(config), "PYTHONPATH": str(TESTS) + (os.pathsep + path if path else ""),
            PASS_NO_ENV: ""}


def start_run(protocol: Path, out: Path, work: Path, *, pause: tuple[str, int, int] | None = None,
              delay: float = 0.0, mode: str = "fork") -> Child:
    """Start ``iteralab run PROTOCOL --out OUT --json`` in a process of its own, hooked; return it."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("paused", "release", "phases.log"):
        with contextlib.suppress(FileNotFoundError):
            (work / name).unlink()
    config = {"dir": str(work), "pause": list(pause) if pause else None, "delay": delay}
    argv = ["run", str(protocol), "--out", str(out), "--json"]
    log = work / "child.log"
    if mode == "exec":
        env = {**os.environ, **_child_env(config)}
        code = ("import sys, json, reliability_support as r; r.install_hooks(json.loads(sys.argv[1])); "
                "from iteralab.cli import main; sys.exit(main(sys.argv[2:]))")
        with open(log, "ab") as fh:
            popen = subprocess.Popen([sys.executable, "-c", code, json.dumps(config), *argv], env=env, cwd=work,
                                     stdout=fh, stderr=subprocess.STDOUT)
        return Child(popen.pid, work, popen, log)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the runner process: never returns into the caller
        rc = 70
        try:
            os.environ.update(_child_env(config))
            os.chdir(work)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if str(TESTS) not in sys.path:
                sys.path.insert(0, str(TESTS))
            install_hooks(config)
            from iteralab.cli import main

            rc = main(argv)
        except BaseException:  # noqa: BLE001 - report and end this process, whatever happened
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os._exit(rc if isinstance(rc, int) else 70)
    return Child(pid, work, None, log)


def wait_paused(child: Child, timeout: float = 120.0) -> dict[str, Any] | None:
    """The ``paused`` marker once the child reaches its pause point; None if it ended first."""
    marker = child.dir / "paused"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists():
            with contextlib.suppress(ValueError, FileNotFoundError):
                info = json.loads(marker.read_text())
                info["ident"] = identity(info["pid"])
                return info
        if child.exited() is not None:
            return None
        time.sleep(0.01)
    raise TimeoutError(f"no pause within {timeout:.0f} s; child log:\n{child.log_tail()}")


def last_phase_line(work: Path, pid: int | None = None) -> str | None:
    path = work / "phases.log"
    if not path.exists():
        return None
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    if pid is not None:
        lines = [x for x in lines if x.split(" ", 1)[0] == str(pid)]
    return lines[-1].split(" ", 1)[1] if lines else None


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _is_worker_process(pid: int) -> bool:
    try:
        return b"iteralab.campaign.engines.passes" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def worker_of(pid: int) -> tuple[int, str | None] | None:
    """The pass worker that runner ``pid`` started, with its identity: the worker forked by the runner's worker
    template (``python -m iteralab.campaign.engines.passes --template``), else the template itself (between two passes),
    or a worker the runner started directly (``python -m iteralab.campaign.engines.passes SPEC RESULT``)."""
    for child in children_of(pid):
        if _is_worker_process(child):
            forked = [g for g in children_of(child) if _is_worker_process(g)]
            chosen = forked[0] if forked else child
            return chosen, identity(chosen)
    return None


def descendants_of(pid: int) -> list[int]:
    """The children of ``pid``, their children, and so on."""
    found, todo = [], [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a reaper counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def identity(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of /proc/PID/stat): tells a process from a later one reusing its id."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def kill_pid(pid: int, ident: str | None = None) -> None:
    """SIGKILL ``pid`` — only if it is still the process identified by ``ident`` when one is given."""
    if ident is not None and identity(pid) != ident:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def wait_gone(pid: int, timeout: float = 120.0, ident: str | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid) or (ident is not None and identity(pid) != ident):
            return True
        time.sleep(0.02)
    return False


# ------------------------------------------------------------------------------------------- evidence


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Snapshot:
    """What a campaign folder holds as finished: pass id -> (slot, recorded sha256, sha256 of the file)."""

    finished: dict[str, tuple[tuple[int, int], str | None, str | None]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    attempts: dict[tuple[int, int], int] = field(default_factory=dict)


def snapshot(out: Path) -> Snapshot:
    from iteralab.campaign.journal import read_journal

    snap = Snapshot()
    state = read_journal(out / "journal.jsonl")
    snap.started = set(state.order)
    for pid in state.order:
        start = state.started[pid]
        key = (start["round"], start["position"])
        snap.attempts[key] = snap.attempts.get(key, 0) + 1
    for pid, fin in state.finished.items():
        start = state.started[pid]
        rel = fin.get("prediction_file")
        actual = sha256(out / rel) if rel and (out / rel).is_file() else None
        snap.finished[pid] = ((start["round"], start["position"]), fin.get("prediction_sha256"), actual)
    return snap


def folder_hashes(folder: Path) -> dict[str, str]:
    """Every recorded file's sha256; the scratch folder is no record (a running pass's progress count lives there,
    and a killed run leaves it for the next run to clear)."""
    from iteralab.campaign.runner import SCRATCH

    return {p.relative_to(folder).as_posix(): sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] != SCRATCH}


def evidence_phase(out: Path, model_phase: str | None = None) -> str:
    """Where a kill landed, from the folder (journal + files); ``model_phase`` (the last line of the killed
    process's phase log) tells load / warm-up / measured pass apart inside a started pass."""
    from iteralab.campaign.journal import read_journal

    if not (out / "campaign.json").exists():
        return "prepare"
    state = read_journal(out / "journal.jsonl")
    if not state.order:
        return "start"
    last = state.order[-1]
    if last not in state.finished:
        preds = out / "predictions"
        if list(preds.glob(f".tmp-{last}.parquet.*")):
            return "writing"
        if (preds / f"{last}.parquet").exists():
            return "written"
        word = (model_phase or "").split(" ", 1)[0]
        return {"load": "load", "warmup": "warm-up", "pass": "in pass", "released": "in pass"}.get(word, "load")
    if last not in state.evaluated:
        return "evaluation"
    if len(state.done_slots()) < slot_count(out):
        return "between"
    return "table"


@dataclass
class CliResult:
    argv: list[str]
    rc: int | None
    stdout: str
    stderr: str
    exception: str | None = None

    def one_line_error(self) -> str | None:
        """None if this is a proper refusal (exit != 0, 'Error:' line, optional 'Hint:', no traceback)."""
        if self.exception:
            return f"traceback: {self.exception}"
        if self.rc in (0, None):
            return f"exit code {self.rc}"
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        if not lines or not lines[0].startswith("Error: "):
            return f"stderr does not start with 'Error: ': {self.stderr[:200]!r}"
        if len(lines) > 2 or (len(lines) == 2 and not lines[1].startswith("Hint: ")):
            return f"more than one Error line (+ Hint): {self.stderr[:300]!r}"
        if "Traceback" in self.stderr + self.stdout:
            return "a traceback was printed"
        return None

    def describe(self) -> str:
        return (f"iteralab {' '.join(self.argv)} -> rc {self.rc}; stderr {self.stderr.strip()[:300]!r}"
                + (f"; {self.exception}" if self.exception else ""))


def cli(argv: list[str]) -> CliResult:
    """``iteralab.cli.main(argv)`` in this process with stdout/stderr captured; an escaping exception (what a
    user would see as a traceback) is caught and returned as text."""
    from iteralab.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = [str(a) for a in argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except BaseException as exc:  # noqa: BLE001 - an escaping exception is the finding
            tb = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}iteralab{os.sep}" in f.filename]
            where = " (via " + " -> ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in tb[-3:]) + ")" \
                if tb else ""
            return CliResult(argv, None, out.getvalue(), err.getvalue(),
                             f"{type(exc).__name__}: {str(exc)[:200]}{where}")
    return CliResult(argv, rc, out.getvalue(), err.getvalue())


def check_after_kill(out: Path, before: Snapshot) -> list[str]:
    """Everything R9 promises about a folder whose runner was just killed. Returns the problems found."""
    from iteralab.campaign.journal import read_journal
    from iteralab.evidence.table import read_raw_table

    problems: list[str] = []
    if not (out / "campaign.json").exists():
        res = cli(["table", out])
        if res.one_line_error():
            problems.append(f"table on a folder without campaign.json: {res.one_line_error()}")
        return problems
    res = cli(["table", out])
    if res.rc != 0:
        return problems + [f"'iteralab table' failed after the kill: {res.describe()}"]
    state = read_journal(out / "journal.jsonl")
    rows = read_raw_table(out / "raw_table.csv")
    if [r["pass_id"] for r in rows] != state.order:
        problems.append(f"table rows {[r['pass_id'] for r in rows]} != attempted passes {state.order}")
    for row in rows:
        pid = row["pass_id"]
        rel = row["prediction_file"]
        if pid not in state.finished:
            if row["status"] != "aborted" or row["corpus_accepted"] != "false" or rel:
                problems.append(f"{pid}: interrupted pass is not an aborted row without file "
                                f"(status {row['status']!r}, file {rel!r})")
            continue
        if not rel:
            if row["status"] == "ok":
                problems.append(f"{pid}: successful pass has no prediction file")
            continue
        if ".tmp-" in rel:
            problems.append(f"{pid}: a temporary file is referenced: {rel}")
        path = out / rel
        if not path.is_file():
            problems.append(f"{pid}: referenced prediction file {rel} is missing")
        elif sha256(path) != row["prediction_sha256"] or row["prediction_sha256"] != \
                state.finished[pid].get("prediction_sha256"):
            problems.append(f"{pid}: {rel} does not match its recorded sha256")
    problems += lost_passes(before, snapshot(out))
    res = cli(["verify", out, "--unsealed"])
    if res.rc != 0:
        diffs = [x for x in res.stdout.splitlines() if x.startswith("- ")]
        problems.append(f"'iteralab verify --unsealed' fails after 'table': {'; '.join(diffs[:3]) or res.describe()}")
    return problems


def lost_passes(before: Snapshot, after: Snapshot) -> list[str]:
    """Finished passes of ``before`` missing or changed in ``after``; slots finished before and redone."""
    problems = []
    for pid, (slot, recorded, actual) in before.finished.items():
        now = after.finished.get(pid)
        if now is None:
            problems.append(f"{pid}: finished pass lost")
        elif now[1] != recorded or now[2] != actual:
            problems.append(f"{pid}: finished pass changed (sha256 {recorded} -> {now[1]}, file {actual} -> {now[2]})")
        elif after.attempts.get(slot, 0) != before.attempts.get(slot, 0):
            problems.append(f"{pid}: slot {slot} was finished but attempted again")
    return problems


def check_complete(out: Path, before: Snapshot, seal_copy: Path | None = None) -> list[str]:
    """A resumed campaign: every slot has one finished pass, nothing finished before lost or redone,
    every aborted attempt is a row, the table and ``verify`` agree; optionally seal a copy and verify it."""
    from iteralab.campaign.journal import read_journal
    from iteralab.evidence.table import read_raw_table

    problems: list[str] = []
    state = read_journal(out / "journal.jsonl")
    slots = json.loads((out / "campaign.json").read_text())["schedule"]["slots"]
    done: dict[tuple[int, int], list[str]] = {}
    for pid in state.finished:
        s = state.started[pid]
        done.setdefault((s["round"], s["position"]), []).append(pid)
    for s in slots:
        got = done.get((s["round"], s["position"]), [])
        if len(got) != 1:
            problems.append(f"slot {s['round']}/{s['position']}: {len(got)} finished passes")
    rows = read_raw_table(out / "raw_table.csv")
    if len(rows) != len(state.order):
        problems.append(f"{len(rows)} table rows for {len(state.order)} attempted passes")
    aborted = [r for r in rows if r["status"] == "aborted"]
    if len(aborted) != len(state.aborted()):
        problems.append(f"{len(aborted)} aborted rows, {len(state.aborted())} interrupted passes in the journal")
    not_ok = [r["pass_id"] for r in rows if r["status"] == "ok" and r["corpus_accepted"] != "true"]
    if not_ok and not any(r["status"] == "failed" for r in rows):  # a failed reference pass may explain it
        problems.append(f"ok passes not accepted: {not_ok}")
    problems += lost_passes(before, snapshot(out))
    res = cli(["verify", out, "--unsealed"])
    if res.rc != 0:
        problems.append(f"verify after completion: {res.describe()} {res.stdout[:400]!r}")
    if seal_copy is not None and not problems:
        shutil.copytree(out, seal_copy)
        sealed = cli(["bundle", "seal", seal_copy])
        verified = cli(["verify", seal_copy])
        if sealed.rc != 0 or verified.rc != 0:
            problems.append(f"sealed copy does not verify: {verified.stdout[:400]!r} {sealed.describe()}")
    return problems


# ------------------------------------------------------------------------------------------ full disk


@contextlib.contextmanager
def tmpfs(where: Path, size_kib: int = 2048) -> Iterator[Path | None]:
    """A small tmpfs mounted at ``where`` (None when this machine does not allow mounting)."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        yield None
        return
    if done.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def fill(folder: Path, leave_bytes: int) -> Path:
    """Write a filler file so that about ``leave_bytes`` stay free on the file system of ``folder``."""
    filler = folder / "filler.bin"
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    size = max(0, free - leave_bytes)
    with open(filler, "wb") as fh:
        chunk = b"\0" * (1 << 16)
        left = size
        while left > 0:
            try:
                fh.write(chunk[: min(left, len(chunk))])
                fh.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            left -= min(left, len(chunk))
    return filler


@contextlib.contextmanager
def enospc_on_write(n: int) -> Iterator[dict[str, int]]:
    """The ``n``-th atomic write of the library (``fsutil.write_bytes_atomic``, all evidence files) and every
    journal append after it fail with ENOSPC, as on a disk that just became full."""
    import iteralab.plan.corpus as corpus
    import iteralab.common.files as fsutil
    import iteralab.campaign.journal as journal

    real_write = fsutil.write_bytes_atomic
    real_append = journal.Journal.append
    seen = {"writes": 0, "full": 0}

    def write_bytes_atomic(path: Any, data: bytes) -> None:
        seen["writes"] += 1
        if seen["writes"] >= n:
            seen["full"] = 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_write(path, data)

    def append(self: Any, event: str, **payload: Any) -> Any:
        if not seen["full"]:
            return real_append(self, event, **payload)

        def full_open(*a: Any, **k: Any) -> Any:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))

        journal.open = full_open  # type: ignore[attr-defined]  # shadows the builtin inside journal.py
        try:
            return real_append(self, event, **payload)
        finally:
            del journal.open  # type: ignore[attr-defined]

    fsutil.write_bytes_atomic = write_bytes_atomic
    corpus.write_bytes_atomic = write_bytes_atomic
    journal.Journal.append = append
    try:
        yield seen
    finally:
        fsutil.write_bytes_atomic = real_write
        corpus.write_bytes_atomic = real_write
        journal.Journal.append = real_append


# ----------------------------------------------------------------------------------------- bad input


#: Every case :func:`bad_inputs` builds, in order (test ids).
BAD_INPUT_NAMES = (
    "corpus-duplicate-ids", "corpus-empty-text", "corpus-invalid-utf8", "corpus-missing-column",
    "corpus-unknown-label", "corpus-lone-surrogate-jsonl", "protocol-unknown-key", "protocol-negative-threshold",
    "protocol-unknown-metric", "protocol-two-factors-lock", "protocol-two-factors-run", "protocol-changed-after-lock",
    "protocol-deeply-nested", "tasks-deeply-nested", "catalog-missing-columns", "catalog-missing-columns-report", "out-under-a-file",
    "out-in-proc", "corpus-carriage-return", "corpus-10MB-text",
)


@dataclass
class BadInput:
    name: str
    argv: list[str]
    expect: str | None  # a fragment the Error line must contain (None: any one-line error)
    accept: bool = False  # True: this input is valid and must run (e.g. a 10 MB text)


def bad_inputs(root: Path, good_protocol: Path, done: Path) -> list[BadInput]:
    """Every bad input of the brief, as CLI argument lists. ``done`` is a finished campaign folder that must
    stay byte-identical whatever happens; ``good_protocol`` is the protocol that produced it."""
    from iteralab.lock.inputs import lock
    from protocol_factory import protocol_toml

    cases: list[BadInput] = []
    model = f'kind = "callable"\ncallable = "{MODEL}"'

    def corpus_case(name: str, body: bytes, expect: str | None, suffix: str = ".csv") -> None:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"corpus{suffix}").write_bytes(body)
        p = folder / "protocol.toml"
        p.write_text(protocol_toml(corpus=f"corpus{suffix}", model=model, passes=1), encoding="utf-8")
        # lock reads the corpus before recording anything: the mistake is refused there (issue 14, item 2)
        cases.append(BadInput(name, ["lock", p], expect))

    header = b"id,text,label\n"
    corpus_case("corpus-duplicate-ids", header + b"a,good fun,fresh\nb,a story,plot\na,boring,rotten\n",
                "duplicate id")
    corpus_case("corpus-empty-text", header + b"a,good fun,fresh\nb,,plot\n", "empty text")
    corpus_case("corpus-invalid-utf8", header + b"a,good fun,fresh\nb,caf\xe9 story,plot\n", "invalid UTF-8")
    corpus_case("corpus-missing-column", b"id,text\na,good fun\nb,a story\n", "no label column")
    corpus_case("corpus-unknown-label", header + b"a,good fun,fresh\nb,a story,meh\n", "not one of the classes")
    corpus_case("corpus-lone-surrogate-jsonl",
                b'{"id": "a", "text": "good fun", "label": "fresh"}\n'
                b'{"id": "b", "text": "a story \\ud800 here", "label": "plot"}\n', None, suffix=".jsonl")

    def protocol_case(name: str, text: str, expect: str, command: str = "run") -> None:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(good_protocol.parent / "corpus.csv", folder / "corpus.csv")
        p = folder / "protocol.toml"
        p.write_text(text, encoding="utf-8")
        argv = ["run", p, "--out", done, "--json"] if command == "run" else ["lock", p]
        cases.append(BadInput(name, argv, expect))

    good = good_protocol.read_text(encoding="utf-8")
    protocol_case("protocol-unknown-key", good.replace('scenario = "offline"', 'scenario = "offline"\ncolour = "red"'),
                  "unknown key 'colour'")
    protocol_case("protocol-negative-threshold", good.replace("threshold = 0.0", "threshold = -0.2"), "threshold")
    protocol_case("protocol-unknown-metric", good.replace('name = "macro_f1"', 'name = "f3_score"'),
                  "unknown metric")
    two = good.replace("batch_size = 4", "batch_size = 4\nbucketing = true")
    protocol_case("protocol-two-factors-lock", two, "also differ in bucketing", command="lock")
    protocol_case("protocol-two-factors-run", two, "not locked")
    changed = root / "protocol-changed-after-lock"
    changed.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(good_protocol.parent / "corpus.csv", changed / "corpus.csv")
    shutil.copyfile(good_protocol.with_name(good_protocol.name + ".lock.json"), changed / "protocol.toml.lock.json")
    (changed / "protocol.toml").write_text(good.replace("threshold = 0.0", "threshold = 0.9"), encoding="utf-8")
    cases.append(BadInput("protocol-changed-after-lock", ["run", changed / "protocol.toml", "--out", done, "--json"],
                          "changed after it was locked"))
    protocol_case("protocol-deeply-nested", good + "\nnotes = " + "[" * 3000 + "]" * 3000 + "\n", "protocol",
                  command="lock")

    deep_tasks = root / "deep-tasks.toml"
    deep_tasks.write_text('timezone = "UTC"\nx = ' + "[" * 3000 + "]" * 3000 + "\n", encoding="utf-8")
    cases.append(BadInput("tasks-deeply-nested", ["window", "--gpu", "rtx-4090", "--tasks", deep_tasks], "TOML"))

    bad_catalog = root / "bad-catalog.csv"
    bad_catalog.write_text("catalog_version,gpu_id,price_per_lot\n1,rtx-4090,110.00\n", encoding="utf-8")
    cases.append(BadInput("catalog-missing-columns",
                          ["price", "--catalog", bad_catalog, "--gpu", "rtx-4090", "--days", "7"], "missing column"))
    cases.append(BadInput("catalog-missing-columns-report", ["report", done, "--catalog", bad_catalog],
                          "missing column"))

    blocker = root / "file.txt"
    blocker.write_text("a file, not a folder\n", encoding="utf-8")
    cases.append(BadInput("out-under-a-file", ["run", good_protocol, "--out", blocker / "sub", "--json"],
                          "not writable"))
    cases.append(BadInput("out-in-proc", ["run", good_protocol, "--out", "/proc/iteralab-reliability/out", "--json"],
                          "not writable"))

    cr_dir = root / "corpus-carriage-return"
    cr_protocol = make_campaign(cr_dir, passes=1)
    with open(cr_dir / "corpus.csv", "a", encoding="utf-8", newline="") as fh:
        fh.write('cr-1,"good\rfun",fresh,short\n')  # a valid, quoted text holding a carriage return
    (cr_dir / "protocol.toml.lock.json").unlink()  # the corpus is part of the lock: lock it as it now is
    lock(cr_protocol)
    cases.append(BadInput("corpus-carriage-return", ["run", cr_protocol, "--out", cr_dir / "out", "--json"], None,
                          accept=True))

    long_dir = root / "long-text"
    long_protocol = make_campaign(long_dir, passes=1, long_text_bytes=10 * 1024 * 1024)
    cases.append(BadInput("corpus-10MB-text", ["run", long_protocol, "--out", long_dir / "out", "--json"], None,
                          accept=True))
    return cases


def run_bad_input(case: BadInput, done: Path) -> list[str]:
    """Run one case; return its problems (wrong kind of answer, or the finished campaign changed)."""
    before = folder_hashes(done)
    res = cli(case.argv)
    problems = []
    if case.accept:
        if res.rc != 0:
            problems.append(f"{case.name}: valid input refused: {res.describe()}")
        else:
            out = Path(case.argv[case.argv.index("--out") + 1])
            verified = cli(["verify", out, "--unsealed"])
            if verified.rc != 0:
                problems.append(f"{case.name}: ran but does not verify: {verified.stdout[:300]!r}")
            from iteralab.evidence.table import read_raw_table

            rows = read_raw_table(out / "raw_table.csv")
            if not rows or any(r["corpus_accepted"] != "true" for r in rows):
                problems.append(f"{case.name}: passes not accepted")
    else:
        bad = res.one_line_error()
        if bad:
            problems.append(f"{case.name}: {bad} [{res.describe()}]")
        elif case.expect and case.expect not in res.stderr.splitlines()[0]:
            problems.append(f"{case.name}: the Error line does not mention {case.expect!r}: {res.stderr.strip()!r}")
    if folder_hashes(done) != before:
        problems.append(f"{case.name}: the finished campaign {done} changed")
    return problems


def interrupted_campaign(folder: Path, kill_in_pass: int = 2) -> tuple[Path, Path]:
    """A campaign whose runner was killed in the measured region of its ``kill_in_pass``-th pass."""
    protocol = make_campaign(folder)
    out = folder / "out"
    child = start_run(protocol, out, folder / "work", pause=("pass", kill_in_pass, 1))
    try:
        if wait_paused(child) is None:
            raise RuntimeError(f"runner ended before its pause: {child.log_tail()}")
    finally:
        child.kill()
    return protocol, out


#: What the command line prints after "Error: <file>: " when a write fails with ENOSPC.
NO_SPACE = os.strerror(errno.ENOSPC)


@dataclass
class Outcome:
    """One resume attempted under a full disk: ``answer`` is 'refused' (one-line error), 'ran' (enough space
    after all), 'not reached' (the run made fewer writes than the failing one) or 'traceback'/'bad answer'.
    ``error``: the first line the command printed on stderr ("" when it ran); ``full``: the disk-full condition
    was really produced (the filler left at most the asked free space, or the injected ENOSPC was raised), so
    a case that never filled the disk cannot pass for one that did."""

    name: str
    answer: str
    problems: list[str] = field(default_factory=list)
    error: str = ""
    full: bool = False

    def refused_for_space(self) -> bool:
        """Refused in one line that names the full disk (not some other error)."""
        return self.answer == "refused" and self.error.startswith("Error: ") and NO_SPACE in self.error


def _journal_kept(old: bytes, new: bytes) -> bool:
    """The journal is append-only: every complete line recorded before must still be there, in order."""
    keep = old[: old.rfind(b"\n") + 1]
    return new.startswith(keep)


def _resume_when_full(name: str, protocol: Path, target: Path, attempt: Callable[[], CliResult],
                      free_space: Callable[[], None]) -> Outcome:
    before = snapshot(target)
    hashes = folder_hashes(target) if target.exists() else {}
    journal = target / "journal.jsonl"
    journal_before = journal.read_bytes() if journal.exists() else b""
    res = attempt()
    free_space()
    outcome = Outcome(name, "ran" if res.rc == 0 else "refused",
                      error=next((x for x in res.stderr.splitlines() if x.strip()), "") if res.rc != 0 else "")
    bad = res.one_line_error() if res.rc != 0 else None
    if bad:
        outcome.answer = "traceback" if bad.startswith("traceback") else "bad answer"
        outcome.problems.append(f"{name}: {bad} [{res.describe()}]")
    now = folder_hashes(target)
    changed = [k for k, v in hashes.items() if now.get(k) != v and k not in ("journal.jsonl", "raw_table.csv")]
    if changed:
        outcome.problems.append(f"{name}: recorded files changed or lost: {changed}")
    if not _journal_kept(journal_before, journal.read_bytes() if journal.exists() else b""):
        outcome.problems.append(f"{name}: journal.jsonl lost or changed recorded lines")
    outcome.problems += [f"{name}: {p}" for p in lost_passes(before, snapshot(target))]
    res = cli(["run", protocol, "--out", target, "--json"])
    if res.rc != 0:
        outcome.problems.append(f"{name}: resume after the disk is free again fails: {res.describe()}")
    else:
        outcome.problems += [f"{name}: {p}" for p in check_complete(target, before)]
    return outcome


def disk_full_cases(root: Path, leave: list[int]) -> list[Outcome] | None:
    """Resume an interrupted campaign that sits on a small tmpfs with about ``leave`` bytes free. Each attempt
    must end in a one-line error (or succeed), lose nothing, and complete once space is freed.
    None when this machine does not allow mounting a tmpfs."""
    protocol, source = interrupted_campaign(root / "source")
    results: list[Outcome] = []
    with tmpfs(root / "mnt", 1024) as where:
        if where is None:
            return None
        for free in leave:
            target = where / "camp"
            shutil.rmtree(target, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (where / "filler.bin").unlink()
            shutil.copytree(source, target)
            filler = fill(where, free)
            st = os.statvfs(where)
            filled = st.f_bavail * st.f_frsize <= free + st.f_frsize  # the filler really took the rest
            outcome = _resume_when_full(f"disk-full-{free}B", protocol, target,
                                        lambda: cli(["run", protocol, "--out", target, "--json"]), filler.unlink)
            outcome.full = filled
            results.append(outcome)
            shutil.rmtree(target, ignore_errors=True)
    return results


def enospc_cases(root: Path, writes: list[int], fresh: bool = False) -> list[Outcome]:
    """Resume an interrupted campaign (``fresh``: start a new one) in this process while its ``n``-th atomic
    write (and every write and journal append after it) fails with ENOSPC; same expectations as
    :func:`disk_full_cases`."""
    results = []
    if fresh:
        protocol, source = make_campaign(root / "source"), None
    else:
        protocol, source = interrupted_campaign(root / "source")
    for n in writes:
        target = root / f"enospc-{'new' if fresh else 'resume'}-write-{n}"
        if source is not None:
            shutil.copytree(source, target)
        seen: dict[str, int] = {}

        def attempt() -> CliResult:
            with enospc_on_write(n) as counts:
                res = cli(["run", protocol, "--out", target, "--json"])
            seen.update(counts)
            return res

        outcome = _resume_when_full(target.name, protocol, target, attempt, lambda: None)
        outcome.full = bool(seen.get("full"))
        if not outcome.full:
            outcome.answer = "not reached"
        results.append(outcome)
    return results


_hooks_from_env()
