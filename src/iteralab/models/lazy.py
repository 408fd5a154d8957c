"""PyTorch, imported on first use: a workload that does not need it (a Python callable) never loads it."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for a module; the first attribute read imports it (``torch.cuda`` → ``import torch``)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


torch: Any = LazyModule("torch")
