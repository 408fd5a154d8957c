"""Python callables used as generation models in tests (``model.callable = "fake_generators:<name>"``)."""

from __future__ import annotations


def last_words(prompts: list[str]) -> list[str]:
    """Texts only: the prompt's last three words, then ``end`` (a stop string some tests declare), then ``.``."""
    return [" ".join(p.split()[-3:] + ["end", "."]) for p in prompts]


def echo_words(prompts: list[str]) -> list[str]:
    """Texts only: the prompt itself."""
    return list(prompts)


def with_counts(prompts: list[str]) -> tuple[list[str], list[int], list[str]]:
    """Texts, token counts and finish reasons: ``eos`` after as many tokens as the prompt has words (+1 for eos)."""
    return [p.upper() for p in prompts], [len(p.split()) + 1 for p in prompts], ["eos"] * len(prompts)


def one_text_short(prompts: list[str]) -> list[str]:
    return ["x"] * (len(prompts) - 1)


def not_strings(prompts: list[str]) -> list[object]:
    return [len(p) for p in prompts]


def bad_finish(prompts: list[str]) -> tuple[list[str], list[int], list[str]]:
    return list(prompts), [1] * len(prompts), ["done"] * len(prompts)


def raising(prompts: list[str]) -> list[str]:
    raise RuntimeError("the generator's server is down")
