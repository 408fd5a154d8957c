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


def junk_after_newline(prompts: list[str]) -> list[str]:
    """Texts only: the prompt's last three words, a newline (a stop string some tests declare), then words the
    stop string removes."""
    return [" ".join(p.split()[-3:]) + "\nthe cat sat on the mat" for p in prompts]


def rambling(prompts: list[str]) -> list[str]:
    """Texts only: the prompt, then twenty words: longer than the tests' max_new_tokens."""
    return [p + " " + " ".join(["la"] * 20) for p in prompts]


def over_counted(prompts: list[str]) -> tuple[list[str], list[int], list[str]]:
    """Its own counts, the third one beyond any test's max_new_tokens (the harness cannot cut a text it does not
    count)."""
    return list(prompts), [1 if i != 2 else 99 for i in range(len(prompts))], ["eos"] * len(prompts)


def short_on_blue(prompts: list[str]) -> list[str]:
    """Texts only, one short on a batch holding a prompt about blue (none is in the corpus's first two
    documents)."""
    texts = last_words(prompts)
    return texts[:-1] if any("blue" in p for p in prompts) else texts


def raising_on_blue(prompts: list[str]) -> list[str]:
    """Raises on a batch holding a prompt about blue (none is in the corpus's first two documents)."""
    if any("blue" in p for p in prompts):
        raise RuntimeError("the generator's server is down")
    return last_words(prompts)
