"""Embedding jobs the kinds, engines, threshold and report tests share: a corpus of short sentences, a protocol that
compares embedders on it, and a campaign of it run once."""

from __future__ import annotations

import csv
from pathlib import Path


#: 40 short texts in 2 classes whose words make their vectors (tests/support/fake_embedders.py) cluster by class.
POSITIVE = ["good fun", "really good", "good acting", "great fun film", "good great cast", "loved it, good",
            "great acting", "fun and good", "a good film", "great great fun"]
NEGATIVE = ["dull and long", "boring mess", "a dull script", "weak script", "boring and dull",
            "a mess of a film", "long boring film", "dull cast", "weak and dull", "mess, boring"]


def corpus_rows() -> list[tuple[str, str, str]]:
    texts = [(t, "fresh") for t in POSITIVE] + [(t, "rotten") for t in NEGATIVE]
    texts += [(f"{t} again", label) for t, label in texts]
    return [(f"d{i:02d}", text, label) for i, (text, label) in enumerate(texts)]


def embedding_protocol(model: str, *, variants: str, reference: str, min_cosine: float = 0.99,
                       extra_embedding: str = "", metric: str = 'name = "knn_accuracy"\nk = 3',
                       threshold: float = 0.5, subgroups: str = "", reproduction: str = "") -> str:
    return f"""schema_version = 1
name = "embed-test"
question = "Which batch size embeds the corpus for the least money with the same vectors?"

[task]
kind = "embedding"

[embedding]
pooling = "mean"
normalize = true
min_cosine = {min_cosine}
{extra_embedding}

[corpus]
path = "corpus.csv"
classes = ["fresh", "rotten"]
stratum_column = ""

[model]
{model}
max_length = 32

[metric]
{metric}
threshold = {threshold}
tolerance = 0.05
reference_variant = "{reference}"
{subgroups}
{reproduction}
[warmup]
inputs = 2
passes = 1

[run]
passes = 1
isolation = "inprocess"
device = "cpu"
{variants}
"""


def write_corpus(folder: Path) -> Path:
    path = folder / "corpus.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"])
        w.writerows(corpus_rows())
    return path


BATCH_VARIANTS = """
[[variants]]
name = "b2"
batch_size = 2

[[variants]]
name = "b4"
batch_size = 4

[[series]]
name = "batch"
factor = "batch_size"
variants = ["b2", "b4"]
"""


def embedding_campaign(tmp_path: Path, model: str, variants: str, reference: str, **kwargs) -> Path:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    write_corpus(tmp_path)
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(embedding_protocol(model, variants=variants, reference=reference, **kwargs), encoding="utf-8")
    lock(protocol)
    out = tmp_path / "camp"
    run_campaign(protocol, out)
    return out
