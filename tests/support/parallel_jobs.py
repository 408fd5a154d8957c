"""Data-parallel runs the engine and interrupt tests share: the variants that spread a pass over workers, the
PYTHONPATH those workers import the support modules and the package from, and the worker processes of a running
pass."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

import iteralab


TESTS = Path(__file__).resolve().parent
SRC = Path(iteralab.__file__).resolve().parents[1]
DP_VARIANTS = """
[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-dp2"
batch_size = 4
data_parallel = 2

[[series]]
name = "cards"
factor = "data_parallel"
variants = ["b4", "b4-dp2"]
"""


def worker_pythonpath() -> str:
    """Workers are fresh interpreters: they must import this iteralab and the tests' models."""
    return os.pathsep.join(p for p in (str(TESTS), str(SRC), os.environ.get("PYTHONPATH", "")) if p)


def dp_workers(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    workers = []
    for child in children:
        try:
            if "iteralab.campaign.engines.parallel" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.Error:  # a short-lived helper process that already ended
            continue
    return workers
