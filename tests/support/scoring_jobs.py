"""Scoring jobs (``[task] kind = "scoring"``) the kinds and engine tests share: a corpus of (query, passage) pairs
in groups with graded relevance, a protocol comparing scorers on it, a tiny cross-encoder folder built from a
config, and a campaign of it run once."""

from __future__ import annotations

import csv
from pathlib import Path

QUERIES = {"q0": "good fun film", "q1": "dull boring script", "q2": "the story of a director", "q3": "great cast"}
PASSAGES = ["a good fun film with a great cast", "boring and dull, a weak script", "the story of a film director",
            "great acting and a great cast", "a mess of a movie", "fun, good, really fun"]


def corpus_rows() -> list[tuple[str, str, str, str, str]]:
    """(id, text, text_pair, group, relevance): every query against every passage, relevance by shared words."""
    rows = []
    for q, query in QUERIES.items():
        for j, passage in enumerate(PASSAGES):
            shared = len(set(query.split()) & set(passage.replace(",", "").split()))
            rows.append((f"{q}-p{j}", query, passage, q, str(min(shared, 2))))
    return rows


def write_corpus(folder: Path, rows=None) -> Path:
    path = folder / "pairs.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "text_pair", "group", "relevance"])
        w.writerows(rows if rows is not None else corpus_rows())
    return path


def scoring_protocol(model: str, *, variants: str, reference: str, metric: str = 'name = "ndcg_at_k"\nk = 3',
                     min_tau: float = 0.9, threshold: float = 0.3, extra_scoring: str = "", subgroups: str = "",
                     reproduction: str = "", run: str = 'isolation = "inprocess"', extra: str = "") -> str:
    return f"""schema_version = 1
name = "score-test"
question = "Which batch size reranks the pairs for the least money with the same orderings?"

[task]
kind = "scoring"

[scoring]
relevance_column = "relevance"
min_kendall_tau = {min_tau}
{extra_scoring}

[corpus]
path = "pairs.csv"
stratum_column = ""

[model]
{model}
max_length = 64

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
{run}
device = "cpu"
{extra}
{variants}
"""


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

CALLABLE = 'kind = "callable"\ncallable = "fake_scorers:overlap_scorer"'


def tiny_cross_encoder_dir(folder: Path, outputs: int = 1, seed: int = 0) -> Path:
    """A ``BertForSequenceClassification`` folder of ``outputs`` logits (safetensors, the conftest tokenizer)."""
    import torch
    from transformers import BertForSequenceClassification

    from conftest import _config, _tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    labels = {0: "score"} if outputs == 1 else {i: f"c{i}" for i in range(outputs)}
    config = _config(num_labels=outputs, id2label=labels, label2id={v: k for k, v in labels.items()})
    BertForSequenceClassification(config).eval().save_pretrained(folder, safe_serialization=True)
    _tokenizer(folder).save_pretrained(folder)
    return folder


def scoring_campaign(tmp_path: Path, model: str, variants: str = BATCH_VARIANTS, reference: str = "b2",
                     **kwargs) -> Path:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    write_corpus(tmp_path)
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(scoring_protocol(model, variants=variants, reference=reference, **kwargs), encoding="utf-8")
    lock(protocol)
    out = tmp_path / "camp"
    run_campaign(protocol, out)
    return out
