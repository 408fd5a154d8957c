"""A worker template (R2, R6): one process that has imported what a pass worker needs, forking a fresh worker per pass.

Every pass still runs in a new process of its own: the template forks it, the worker loads its own model, builds
its own thread pools, and ends with the pass; nothing runs in the template but imports, so nothing is carried
from one pass to the next. What the fork saves is the interpreter start and the imports each fresh interpreter
paid (numpy, pyarrow, and torch + transformers for a model the harness runs; never torch for a Python callable,
which owns its model). The template never initialises CUDA: it imports, measures its own resident memory, and
forks.

The runner talks to a template over its stdin/stdout, one JSON line per message: a request names the pass's spec,
result and stderr files; the template answers with the worker's pid, then its exit status (the negative signal
number when a signal ended it, as ``subprocess`` reports it). A worker gets SIGKILL when its template dies
(Linux parent-death signal); a template ends when the runner closes its stdin, after its current worker ended (a
runner killed mid-pass leaves the worker to finish as an orphan, as a worker started by the runner did).

A template is reused only while the runner's environment variables, working folder and interpreter are those it
started with; anything else starts a new template.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from iteralab.campaign.engines import passes
from iteralab.campaign.manifest import owns_device
from iteralab.campaign.records import Startup
from iteralab.kit.memoire import runtime_imports, runtime_overhead

#: What every pass worker imports before it reads its spec (the worker's own modules and their libraries).
WORKER_MODULES = ("iteralab.campaign.engines.passes", "iteralab.campaign.kinds.classification.output", "iteralab.campaign.folder",
                  "iteralab.campaign.manifest", "iteralab.models.base", "iteralab.models.factory",
                  "iteralab.models.device", "psutil")


def available() -> bool:
    """Forking a template is used on Linux (fork, and the parent-death signal that ties a worker to it)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def preload_for(model_kind: str | None) -> tuple[str, ...]:
    """The modules a template imports for a workload kind: torch and transformers only for a model the harness
    runs, never for a Python callable (it owns its model and device)."""

    if owns_device(model_kind):
        return WORKER_MODULES

    return WORKER_MODULES + runtime_imports()


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover - no libc by that name
        pass


# ------------------------------------------------------------------------------------------ the messages


@dataclass(frozen=True)
class ForkRequest:
    """The runner's request: fork one worker for the pass whose spec, result and stderr files these are."""

    spec: str
    result: str
    stderr: str
    spawned_at: float | None = None

    def to_line(self) -> bytes:
        return (json.dumps({"spec": self.spec, "result": self.result, "stderr": self.stderr,
                            "spawned_at": self.spawned_at}) + "\n").encode("utf-8")

    @classmethod
    def from_line(cls, line: bytes | str) -> ForkRequest:
        data = json.loads(line)
        return cls(str(data["spec"]), str(data["result"]), str(data["stderr"]), data.get("spawned_at"))


@dataclass(frozen=True)
class Reply:
    """One line of the template's answer: it is ready (its own start-up record), the worker's pid, or the worker's
    exit status; each line holds one of them."""

    ready: Startup | None = None
    pid: int | None = None
    status: int | None = None

    def to_line(self) -> str:
        if self.ready is not None:
            return json.dumps({"ready": self.ready}) + "\n"
        return json.dumps({"pid": self.pid} if self.pid is not None else {"status": self.status}) + "\n"

    @classmethod
    def from_line(cls, line: bytes | str) -> Reply:
        data = json.loads(line)
        return cls(ready=data.get("ready"), pid=data.get("pid"), status=data.get("status"))

    def number(self, name: str) -> int:
        """The pid or the exit status this line holds (a line without it is the template's error)."""
        value = getattr(self, name)
        if value is None:
            raise RuntimeError(f"worker template: expected its worker's {name}, got another reply")
        return int(value)


# ------------------------------------------------------------------------------------------ the template


def serve(preload: list[str]) -> int:
    """``python -m iteralab.campaign.engines.prefork MODULE…``: import, then fork one worker per request."""

    t0 = time.perf_counter()
    for name in preload:
        importlib.import_module(name)
    ready: Startup = {"template_imports_s": time.perf_counter() - t0}
    runtime: Startup = {}
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and getattr(cuda, "_initialized", False):  # an attribute read, not a CUDA call
        sys.stderr.write(f"the worker template initialised CUDA while importing {', '.join(preload)}: a forked "
                         "worker could not use the GPU\n")
        return 1
    if "torch" in preload:
        # The runtime's own resident memory (interpreter + libraries, no model), read here once, before any fork:
        # a forked worker maps the libraries lazily and would read less than a fresh process holds.

        t1 = time.perf_counter()
        runtime = {"runtime_rss_bytes": runtime_overhead(runtime_imports()).bytes,
                   "runtime_imports_s": time.perf_counter() - t1}
    ready["template_threads"] = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
    # What the imports built is never collected (frozen as it is, without a collection first: that would cost the
    # full walk here): a worker's first full collection would otherwise walk (and copy, page by page) the whole
    # inherited heap inside whichever timed phase it falls in.
    gc.freeze()
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the replies
    template = os.getpid()

    def reply(message: Reply) -> None:
        replies.write(message.to_line())
        replies.flush()

    try:
        reply(Reply(ready=ready))
        for line in requests:
            request = ForkRequest.from_line(line)
            pid = os.fork()
            if pid == 0:
                _worker(request, template, replies, runtime)  # never returns
            reply(Reply(pid=pid))
            _, status = os.waitpid(pid, 0)
            reply(Reply(status=os.waitstatus_to_exitcode(status)))
    except BrokenPipeError:  # the runner is gone: nothing left to serve
        pass
    return 0


def _worker(request: ForkRequest, template: int, replies: IO[str], runtime: Startup) -> None:
    """The forked worker: its own stderr file, no stdin/stdout of the template, then one pass. ``runtime``: the
    runtime's memory as the template read it before any fork, handed to the pass in its start-up record."""
    forked_at, started = time.time(), time.perf_counter()
    code = 1
    try:
        _die_with_parent()
        if os.getppid() != template:  # the template died between the fork and the line above
            os._exit(1)
        replies.close()
        err = os.open(request.stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        os.close(err)

        spec_path, result_path = request.spec, request.result
        sys.argv = [passes.__file__, spec_path, result_path]
        spawned = request.spawned_at
        startup: Startup = {
            "process_start_s": forked_at - spawned if isinstance(spawned, (int, float)) else None,
            "imports_s": time.perf_counter() - started, "forked": True, **runtime}
        code = passes.worker_main([spec_path, result_path], startup=startup)
    except BaseException:  # noqa: BLE001 - the worker ends here whatever happened; the error goes to its stderr
        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


# ------------------------------------------------------------------------------------------- the runner side


class TemplateGone(Exception):
    """The template ended before it reported a worker (its exit status and stderr tail are in ``outcome``);
    ``started`` is False when it ended before it was ready (it never forked a worker)."""

    def __init__(self, outcome: tuple[int, str], started: bool) -> None:
        super().__init__(f"worker template ended ({outcome[0]})")
        self.outcome, self.started = outcome, started


class Template:
    """A running template process, as the runner holds it."""

    def __init__(self, preload: tuple[str, ...], scratch: Path) -> None:
        self.key = _key(preload)
        self.stderr_path = scratch / f"template-{time.time_ns()}.stderr"
        self.started = time.perf_counter()
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "iteralab.campaign.engines.prefork", *preload],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self.ready: Startup | None = None
        self.passes = 0

    def _read(self) -> Reply:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise TemplateGone(self.ended(), self.ready is not None)
        return Reply.from_line(line)

    def ended(self) -> tuple[int, str]:
        """The template's exit status and the last line of its stderr (after it ended)."""
        returncode = self.proc.wait()
        return returncode, _tail(self.stderr_path)

    def run(self, spec_path: Path, result_path: Path, stderr_path: Path, spawned_at: float
            ) -> tuple[int, Startup]:
        """Fork one worker for a pass and wait for it; returns its exit status and what the template adds to the
        pass's start-up record (its own start-up, on the first pass it serves)."""
        assert self.proc.stdin is not None
        extra: Startup = {}
        pid: int | None = None
        try:
            if self.ready is None:
                self.ready = self._read().ready or {}
                extra = {**self.ready, "template_start_s": time.perf_counter() - self.started}
                spawned_at = time.time()  # the worker's process start is its fork, after the template's own start
            request = ForkRequest(str(spec_path), str(result_path), str(stderr_path), spawned_at)
            try:
                self.proc.stdin.write(request.to_line())
                self.proc.stdin.flush()
            except BrokenPipeError:
                raise TemplateGone(self.ended(), True) from None
            pid = self._read().number("pid")
            status = self._read().number("status")
            pid = None
        except BaseException:
            # SIGTERM in the runner (SystemExit), an interrupt, or a template gone: no worker outlives the pass.
            if pid is not None:
                _kill(pid)
            self.close(kill=True)
            raise
        self.passes += 1
        return status, extra

    def close(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                try:
                    if self.proc.stdin is not None:
                        self.proc.stdin.close()
                except BrokenPipeError:
                    pass
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class Templates:
    """The runner's templates, one at a time: reused while its key (modules, environment, folder) holds."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.current: Template | None = None
        #: Why no template could start (its stderr tail): the run's later passes start fresh interpreters.
        self.refused: str | None = None

    def for_kind(self, model_kind: str | None) -> Template:
        preload = preload_for(model_kind)
        if self.current is not None and (self.current.key != _key(preload) or self.current.proc.poll() is not None):
            self.close()
        if self.current is None:
            self.scratch.mkdir(parents=True, exist_ok=True)
            self.current = Template(preload, self.scratch)
        return self.current

    def forget(self) -> None:
        self.current = None

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def _key(preload: tuple[str, ...]) -> tuple[Any, ...]:
    return preload, tuple(sorted(os.environ.items())), os.getcwd(), sys.executable


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess in tests
    sys.exit(serve(sys.argv[1:]))
