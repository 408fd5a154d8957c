"""Builds small protocol files for tests (a TOML text with overridable parts)."""

from __future__ import annotations

from pathlib import Path

VARIANTS = """
[[variants]]
name = "b1"
batch_size = 1

[[variants]]
name = "b4"
batch_size = 4

[[series]]
name = "batch"
factor = "batch_size"
variants = ["b1", "b4"]
"""


def protocol_toml(*, corpus: str = "corpus.csv", model: str | None = None, variants: str = VARIANTS,
                  extra: str = "", passes: int = 2, threshold: float = 0.0, tolerance: float = 0.05,
                  reference: str = "b4", isolation: str = "inprocess", subgroups: str = "",
                  reproduction: str = 'target = "acceptable"', warmup: str = "inputs = 2\npasses = 1",
                  head: str | None = None, version: int = 1, corpus_extra: str = "") -> str:
    model = model or 'kind = "hf_classifier"\npath = "model"'
    return f"""schema_version = 1
name = "test-protocol"
version = {version}
question = "Which batch size is cheapest for the same verified result?"
scenario = "offline"
{extra}
[corpus]
path = "{corpus}"
classes = ["plot", "fresh", "rotten"]
{corpus_extra}
[model]
{model}
max_length = 32

[metric]
name = "macro_f1"
threshold = {threshold}
tolerance = {tolerance}
reference_variant = "{reference}"
{subgroups}
[reproduction]
{reproduction}

[warmup]
{warmup}

[run]
passes = {passes}
isolation = "{isolation}"
device = "cpu"
{variants}
"""


def write_protocol(folder: Path, **kwargs) -> Path:
    path = folder / "protocol.toml"
    path.write_text(protocol_toml(**kwargs), encoding="utf-8")
    return path


def ids_protocol(name: str):
    """A parsed one-variant protocol (callable model, accuracy, no threshold) for checks of output sets alone."""
    from iteralab.plan.protocol import parse_protocol

    return parse_protocol(IDS_PROTOCOL.format(name=name))


IDS_PROTOCOL = """schema_version = 1
name = "{name}"
version = 1
question = "Are the output sets complete?"

[corpus]
path = "corpus.csv"
classes = ["plot", "fresh", "rotten"]

[model]
kind = "callable"
callable = "fake_models:keyword_classifier"

[metric]
name = "accuracy"
threshold = 0.0
tolerance = 0.05
reference_variant = "b1"

[[variants]]
name = "b1"
batch_size = 1
"""

#: An expense line that applies to some variants only (K5), shared by the expenses and decision tests.
LARGE_BATCH_EXPENSE = """
[[expenses]]
name = "large-batch memory check"
amount = 40
currency = "USD"
justification = "one operator hour rerunning the memory notebook on the rented card"
applies_to = ["b8", "b16"]
differs_because = "batches of 8 and more are the ones near the card's memory limit"
"""
