"""Python-callable workloads for runner tests (``kind = "callable"``): deterministic and instrumented."""

from __future__ import annotations

import os
import time

CLASSES = ("plot", "fresh", "rotten")
CALLS: list[int] = []


def keyword_classifier(texts: list[str]) -> list[list[float]]:
    """'plot' if the text mentions a story, 'fresh' if it says good, else 'rotten' (probability rows)."""
    CALLS.append(len(texts))
    rows = []
    for text in texts:
        t = text.lower()
        k = 0 if "story" in t else 1 if "good" in t else 2
        row = [0.1, 0.1, 0.1]
        row[k] = 0.8
        rows.append(row)
    return rows


def slow_classifier(texts: list[str]) -> list[list[float]]:
    time.sleep(float(os.environ.get("FAKE_MODEL_DELAY", "0.05")))
    return keyword_classifier(texts)


def oom_on_third_call(texts: list[str]) -> list[list[float]]:
    """Fails like a CUDA allocator would on its third batch."""
    import torch

    if len(CALLS) == 2:
        CALLS.append(len(texts))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
    return keyword_classifier(texts)


def fail_on_weak_script(texts: list[str]) -> list[list[float]]:
    """Raises on the batch holding the corpus's last text (d11, "weak script"), like a bad document would."""
    if "weak script" in texts:
        raise ValueError("weak script is not supported")
    return keyword_classifier(texts)


def marking_slow_classifier(texts: list[str]) -> list[list[float]]:
    """``slow_classifier`` that first creates the file named by FAKE_MODEL_MARK: a batch is being processed."""
    mark = os.environ.get("FAKE_MODEL_MARK")
    if mark:
        open(mark, "a").close()
    return slow_classifier(texts)


def fail_or_die(texts: list[str]) -> list[list[float]]:
    """On the batch holding "weak script" (d11): a batch of one kills its own process (a lost worker, as the
    kernel's out-of-memory killer would), a larger batch raises."""
    if "weak script" in texts:
        if len(texts) == 1:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("weak script is not supported")
    return keyword_classifier(texts)


def noting_classifier(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` that appends this process's id, its parent's, and whether torch is imported, to the
    file named by FAKE_MODEL_NOTE (one line per call)."""
    import sys

    note = os.environ.get("FAKE_MODEL_NOTE")
    if note:
        with open(note, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {os.getppid()} {'torch' in sys.modules}\n")
    return keyword_classifier(texts)


def dying_classifier(texts: list[str]) -> list[list[float]]:
    """Writes a line to stderr, then ends its process with exit code 3 (a worker lost without a result)."""
    import sys

    sys.stderr.write("about to end: the model's last words\n")
    sys.stderr.flush()
    os._exit(3)


def swallowing_interrupt(texts: list[str]) -> list[list[float]]:
    """On the batch holding "weak script" (d11): sends SIGINT to its own process and reports the interrupt as an
    ordinary error, as a library waiting on workers killed by the same Ctrl-C would."""
    if "weak script" in texts:
        import signal

        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the signal's handler runs here
        except KeyboardInterrupt:
            pass
        raise RuntimeError("worker lost")
    return keyword_classifier(texts)


class WorkClock:
    """A clock that moves only when :func:`clocked_classifier` works (install it as the pass clock): a pass's
    times then depend on the texts it processed, never on the machine's speed."""

    def __init__(self) -> None:
        self.t = 0.0
        #: Seconds per unit of work: 2.0 plays a machine twice as slow (or twice as loaded).
        self.scale = 1.0

    def now(self) -> float:
        return self.t


WORK_CLOCK = WorkClock()


def clocked_classifier(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` that advances WORK_CLOCK by 1 s per text, 20 s for the factory corpus's long text."""
    WORK_CLOCK.t += WORK_CLOCK.scale * sum(20.0 if "many many words" in t else 1.0 for t in texts)
    return keyword_classifier(texts)


def slow_warmup_classifier(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` whose first call in a process (the warm-up) takes 0.5 s: a relative pass limit then
    projects minutes for a few texts, which the pass never comes near."""
    if not CALLS:
        time.sleep(0.5)
    return keyword_classifier(texts)


def seeded_noise_classifier(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` with up to 0.05 of noise on each row's winning probability, drawn from NumPy's global
    generator, which the harness seeds with the pass's seed: the same seed gives the same outputs whatever the
    batch size, another seed other outputs (the labels never change)."""
    import numpy as np

    rows = keyword_classifier(texts)
    for row in rows:
        k = row.index(max(row))
        noise = 0.05 * float(np.random.random())
        row[k] -= noise
        row[(k + 1) % 3] += noise
    return rows


def batch_odd_classifier(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier``, except that in a batch of odd size the first text's class moves one on (plot →
    fresh → rotten → plot): a variant whose batches have another size disagrees with it on some documents."""
    rows = keyword_classifier(texts)
    if len(rows) % 2 and rows:
        rows[0] = rows[0][-1:] + rows[0][:-1]
    return rows


def batch_shifted_classifier(texts: list[str]) -> list[list[float]]:
    """:func:`keyword_classifier`, but a batch of one text moves every third text's label (by its length) to the next
    class: two batch sizes then give different labels, as a numeric change would."""
    rows = keyword_classifier(texts)
    if len(texts) == 1:
        for row, text in zip(rows, texts):
            if len(text) % 3 == 0:
                k = row.index(max(row))
                row[k], row[(k + 1) % 3] = row[(k + 1) % 3], row[k]
    return rows
