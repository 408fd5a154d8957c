"""Generation callables whose answers are right for some documents and wrong for others (report examples)."""

from __future__ import annotations


def last_word_unless_cat(prompts: list[str]) -> list[str]:
    """The prompt's last word (the test corpus's reference answer), except ``dog`` for a prompt about a cat."""
    return ["dog" if "cat" in p.split() else p.split()[-1] for p in prompts]
