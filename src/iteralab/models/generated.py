"""What a generation job's model is asked and what it gives back, free of the model classes: the settings every
prompt is generated with (:class:`GenerationSettings`, checked by :func:`check_generation`) and one batch's outputs
(:class:`GeneratedBatch`). The kinds' pass sink and ``verify`` import them without the workloads
(:mod:`iteralab.models.generation` and :mod:`iteralab.models.generation_hf` build on them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from iteralab.errors import WorkloadError

FINISH_REASONS = ("stop", "eos", "length")
GREEDY = "greedy (do_sample=False, num_beams=1)"


@dataclass(frozen=True)
class GenerationSettings:
    """How every prompt is generated; fixed by the protocol before any timing."""

    max_new_tokens: int
    stop: tuple[str, ...] = ()
    chat_template: bool = False
    allow_truncation: bool = False
    prompt_max_length: int = 512

    def __post_init__(self) -> None:
        if isinstance(self.stop, list):  # as a protocol file's array reads
            object.__setattr__(self, "stop", tuple(self.stop))

    def record(self) -> dict[str, Any]:
        """JSON-ready, for ``describe()``."""
        return {"max_new_tokens": self.max_new_tokens, "stop": list(self.stop), "chat_template": self.chat_template,
                "allow_truncation": self.allow_truncation, "prompt_max_length": self.prompt_max_length,
                "decoding": GREEDY}


@dataclass(frozen=True)
class GeneratedBatch:
    """One batch's outputs, in prompt order. ``tokens`` is None when they could not be counted."""

    texts: list[str]
    tokens: np.ndarray | None
    finish: list[str]


def _positive_int(value: Any, name: str, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise WorkloadError(f"{name}: {value!r} must be an integer ≥ {low}")


def check_generation(settings: GenerationSettings) -> None:
    """Refuse settings no generator can honour, naming the field."""
    if not isinstance(settings, GenerationSettings):
        raise WorkloadError("generation: settings are required for a generation job",
                            hint="pass generation=GenerationSettings(max_new_tokens=...)")
    _positive_int(settings.max_new_tokens, "max_new_tokens", 1)
    _positive_int(settings.prompt_max_length, "prompt_max_length", 2)
    if not isinstance(settings.stop, tuple) or not all(isinstance(s, str) and s for s in settings.stop):
        raise WorkloadError(f"stop: {settings.stop!r} must be a tuple of non-empty strings")


def empty_batch() -> GeneratedBatch:
    return GeneratedBatch([], np.zeros(0, dtype=np.int32), [])
