"""Every protocol snippet of the documentation is read by the protocol parser, so that the pages show nothing the
product refuses.

The rule, for each fenced ```toml block of ``README.md`` and ``docs/**/*.md``:

- a block with top-level ``name`` and ``question`` keys is a whole protocol: it must parse as it stands;
- any other block is a fragment of one: it is laid over a known-good base protocol of its job kind (below) and the
  result must parse. Each table the fragment declares replaces the base's table of that name whole (a fragment's
  ``[metric]`` is the whole metric), each array of tables (``[[variants]]``, ``[[datasets]]``, ``[[expenses]]``) is
  appended to the base's, each top-level value replaces the base's. The job kind is the fragment's own
  ``[task] kind``, else the one its marker names, else classification;
- a marker, an HTML comment on the line right before the fence (invisible on the rendered page), says what the
  block is where the block cannot: ``<!-- toml: embedding fragment -->`` (or ``classification`` / ``generation``)
  for a fragment of that job kind without a ``[task]`` table, ``<!-- toml: not a protocol: WHY -->`` for TOML that
  is no protocol (a catalog, a tool's configuration). An unknown marker fails the test.

The base protocols parse on their own (tested), name the variants the pages refer to, and judge by a metric that
fits both a labelled and an unlabelled corpus, so a fragment changes one thing at a time.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from iteralab.plan.protocol import Protocol, parse_toml, refusal
from iteralab.plan.task import TASK_KINDS

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```toml[ \t]*$")
MARKER = re.compile(r"^<!--\s*toml:\s*(.*?)\s*-->$")

_COMMON = """
[[variants]]
name = "b8"
batch_size = 8

[[variants]]
name = "b16"
batch_size = 16

[[variants]]
name = "b8-fp32"
batch_size = 8
"""
BASES = {
    "classification": """schema_version = 1
name = "base"
question = "Which configuration classifies the corpus for the least money?"

[corpus]
path = "corpus.csv"
classes = ["negative", "positive"]

[model]
kind = "hf_classifier"
path = "model"

[metric]
name = "macro_f1"
threshold = 0.7
tolerance = 0.02
reference_variant = "b8"
""" + _COMMON,
    "embedding": """schema_version = 1
name = "base"
question = "Which configuration embeds the corpus for the least money?"

[task]
kind = "embedding"

[embedding]
min_cosine = 0.99

[corpus]
path = "corpus.csv"
classes = ["negative", "positive"]

[model]
kind = "encoder"
path = "model"

[metric]
routine = "my_metrics:score"
threshold = 0.5
tolerance = 0.02
reference_variant = "b8-fp32"
""" + _COMMON,
    "generation": """schema_version = 1
name = "base"
question = "Which configuration answers the corpus for the least money?"

[task]
kind = "generation"

[generation]
max_new_tokens = 16

[corpus]
path = "corpus.csv"
reference_column = "answer"

[model]
kind = "hf_causal_lm"
path = "model"
max_length = 128

[metric]
name = "token_f1"
threshold = 0.3
relative_tolerance = 0.01
reference_variant = "b8-fp32"
""" + _COMMON,
}


def toml_blocks(page: Path) -> list[tuple[int, str | None, str]]:
    """(line of the fence, its marker or None, text) of each ```toml block of a Markdown page."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            marker = MARKER.match(lines[i - 1].strip()) if i else None
            blocks.append((i + 1, marker.group(1) if marker else None, "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return blocks


def laid_over(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """The fragment laid over the base (module docstring): tables replaced whole, arrays of tables appended."""
    merged = dict(base)
    for key, value in fragment.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            merged[key] = [*base.get(key, []), *value]
        else:
            merged[key] = value
    return merged


def check(data: dict[str, Any], source: str) -> Protocol:
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        raise refusal(data, exc, source) from None


def read_snippet(marker: str | None, text: str, source: str) -> Protocol | None:
    """The protocol a snippet shows (module docstring), or None for a block marked as no protocol."""
    kind = None
    if marker is not None:
        if marker.startswith("not a protocol:") and marker.split(":", 1)[1].strip():
            return None
        found = re.fullmatch(r"(\w+) fragment", marker)
        assert found and found.group(1) in TASK_KINDS, (
            f"{source}: unknown marker {marker!r}: write '<kind> fragment' (kind: {', '.join(TASK_KINDS)}) or "
            "'not a protocol: <why>'")
        kind = found.group(1)
    data = parse_toml(text, source)
    if "name" in data and "question" in data:
        return check(data, source)
    kind = (data.get("task") or {}).get("kind") or kind or "classification"
    return check(laid_over(parse_toml(BASES[kind], f"base {kind}"), data), f"{source} (over the {kind} base)")


PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SNIPPETS = [(f"{page.relative_to(ROOT)}:{line}", marker, text)
            for page in PAGES for line, marker, text in toml_blocks(page)]


@pytest.mark.parametrize("kind", sorted(BASES))
def test_each_base_protocol_parses_and_is_of_its_kind(kind):
    assert check(parse_toml(BASES[kind]), f"base {kind}").task.kind == kind


def test_the_pages_have_protocol_snippets_to_check():
    assert len(SNIPPETS) >= 10, SNIPPETS  # a fence pattern that stopped matching would check nothing


@pytest.mark.parametrize("where, marker, text", SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_every_protocol_snippet_of_the_docs_parses(where, marker, text):
    read_snippet(marker, text, where)  # a refusal is the product's own one-line ProtocolError


def test_a_snippet_the_product_refuses_fails_and_a_marked_one_is_skipped():
    from iteralab.errors import ProtocolError

    with pytest.raises(ProtocolError, match=r"page.md:3 \(over the classification base\): unknown key 'metric.nme'"):
        read_snippet(None, '[metric]\nnme = "accuracy"\n', "page.md:3")
    with pytest.raises(ProtocolError, match="metric 'recall_at_k' needs metric.queries"):
        read_snippet("embedding fragment", '[metric]\nname = "recall_at_k"\nk = 3\nthreshold = 0.5\n'
                     'tolerance = 0.1\nreference_variant = "b8"\n', "page.md:9")
    assert read_snippet("not a protocol: a tool's configuration", "[tool]\nx = 1\n", "page.md:12") is None
    with pytest.raises(AssertionError, match="unknown marker"):
        read_snippet("embeding fragment", "[corpus]\n", "page.md:20")
    assert read_snippet(None, BASES["generation"], "page.md:30").task.kind == "generation"


def test_a_marker_is_read_from_the_line_before_the_fence(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n<!-- toml: embedding fragment -->\n```toml\n[corpus]\npath = \"a.csv\"\n```\n\n"
                    "```toml\n[run]\npasses = 3\n```\n", encoding="utf-8")
    assert toml_blocks(page) == [(4, "embedding fragment", '[corpus]\npath = "a.csv"\n'),
                                 (9, None, "[run]\npasses = 3\n")]


if __name__ == "__main__":  # pragma: no cover - a quick look at what the pages hold
    for where, marker, text in SNIPPETS:
        print(where, marker or "", file=sys.stdout)
