"""A run stopped by the user or a scheduler (SIGINT, SIGTERM, SIGHUP): an interrupt, never a failure.

Ctrl-C sends SIGINT to the whole foreground process group: the runner and every pass worker (a worker forked
by a template, the data-parallel workers, a local Ray's processes) receive it together. While
:class:`StopSignals` is active the runner turns the first of these signals into :class:`RunInterrupted`; the
runner journals it (``run_interrupted``, naming the pass that was running) and the command ends with
128 + the signal number (130, 143, 129). A worker that dies of the same signal is not a crashed pass: the
interrupted attempt counts for nothing and a later ``iteralab run`` runs its slot again. A worker ended by
anything else (the out-of-memory killer, SIGKILL, a crash) while the run goes on stays a failed row.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

#: The signals that stop a run: Ctrl-C, ``kill`` / a scheduler, the terminal closing (no SIGHUP on Windows).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by ``signum``; ``done``/``total`` are the campaign's finished and scheduled passes
    when the runner knew them."""

    def __init__(self, signum: int, done: int | None = None, total: int | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.done, self.total = int(signum), done, total

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self, resume: str) -> str:
        """What a command that runs a campaign (``run``, ``demo``, ``rerun``) prints: how far the campaign got and
        ``resume``, the command that resumes it."""
        where = f"{self.done} of {self.total} passes done; " if self.total is not None else ""
        return f"interrupted: {where}resume with `{resume}`"


class StopSignals:
    """While active (in the main thread): the first stop signal raises :class:`RunInterrupted`, and a repeat
    while the interrupt is being recorded is ignored (a second Ctrl-C must not cut that record short). The
    previous handlers come back on exit. ``install`` again after a library replaced a handler (``ray.init``
    sets its own SIGTERM handler)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            before = signal.signal(signum, self._handler)
            self.previous.setdefault(signum, before)

    def _handler(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            return
        self.received = signum
        raise RunInterrupted(signum)

    def check(self) -> None:
        """Raise the interrupt if a stop signal arrived (code that caught it, e.g. a library waiting on workers
        that died of the same signal, must not turn it into a failed pass)."""
        if self.received is not None:
            raise RunInterrupted(self.received)

    def __exit__(self, *exc: Any) -> None:
        for signum, before in self.previous.items():
            signal.signal(signum, before if before is not None else signal.SIG_DFL)
        self.previous.clear()
