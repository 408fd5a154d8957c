"""Generation callables whose answers are right for some documents and wrong for others (report examples)."""

from __future__ import annotations


def last_word_unless_cat(prompts: list[str]) -> list[str]:
    """The prompt's last word (the test corpus's reference answer), except ``dog`` for a prompt about a cat."""
    return ["dog" if "cat" in p.split() else p.split()[-1] for p in prompts]


def one_at_a_time(prompts: list[str]) -> list[str]:
    """The last word of a prompt handed alone; a batch of several prompts is refused (the first warm-up batch of a
    batch_size 4 variant fails)."""
    if len(prompts) > 1:
        raise RuntimeError("this server answers one prompt at a time")
    return [p.split()[-1] for p in prompts]


def no_number(*, ids, outputs, references) -> float:
    """A metric routine that returns NaN for every pass."""
    return float("nan")
