"""A generation job's prompt template (``generation.prompt``): the names its fields give, and the prompts of a batch
filled from the document's text and the corpus columns it names. Apart from the protocol's models, so that a pass
worker renders its prompts without importing pydantic."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence

__all__ = ["PROMPT_COLUMN", "TEXT_FIELD", "copy_column", "render_prompts", "template_fields"]

#: The name a prompt template gives the document's text (``corpus.text_column``); every other name is a column
#: of the corpus file by that name.
TEXT_FIELD = "text"
#: A prompt column's name in the campaign's corpus copy (``inputs/corpus.csv``), apart from the copy's own columns.
PROMPT_COLUMN = "prompt.{}"


def template_fields(template: str) -> list[str]:
    """The names a prompt template's fields give, in order of first appearance, each once (a malformed template
    raises ``ValueError``)."""
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    return list(dict.fromkeys(names))


def render_prompts(template: str, texts: Sequence[str],
                   columns: Mapping[str, Sequence[str | None]] | None = None) -> list[str]:
    """The prompts of a batch of documents: ``template`` filled with each text and, for every other name it gives,
    the document's cell of that column (``columns``: the batch's cells by column name; an absent or empty cell
    renders empty)."""
    names = [name for name in template_fields(template) if name != TEXT_FIELD]
    if not names:
        return [template.format(text=t) for t in texts]
    cells = [(columns or {}).get(name) or [None] * len(texts) for name in names]
    return [template.format(text=t, **{n: c or "" for n, c in zip(names, row)}) for t, *row in zip(texts, *cells)]


def copy_column(name: str) -> str:
    """The corpus copy's column holding the cells of the corpus column ``name`` that a prompt names."""
    return PROMPT_COLUMN.format(name)
