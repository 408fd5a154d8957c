"""A bucketed pass over a Hugging Face model tokenizes each text once: the token rows it sorts by are the rows it
pads into each batch (``HFText.token_rows`` / ``pad_rows``), giving the tensors ``tokenize`` gives, and the pass's
outputs, put back in corpus order, are those of a pass in file order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from campaign_factory import TEXTS, write_corpus_csv
from conftest import TINY_CLASSES
from iteralab.campaign.engines.passes import MeasuredPass
from iteralab.plan.scan import read_options
from iteralab.models.factory import WorkloadSpec, load_workload

KWARGS = read_options(id_column="id", text_column="text", label_column="label", classes=TINY_CLASSES)


def _classifier(folder, **settings):
    return load_workload(WorkloadSpec("hf_classifier", path=folder, classes=tuple(TINY_CLASSES), device="cpu", **settings))


@pytest.mark.parametrize("settings", [dict(padding="longest", max_length=64), dict(padding="longest", max_length=5),
                                      dict(padding="max_length", max_length=12),
                                      dict(padding="longest", truncation=False)])
def test_padded_token_rows_are_the_tensors_tokenize_makes(tiny_classifier_dir, settings):
    workload = _classifier(tiny_classifier_dir, **settings)
    texts = [t for t, _ in TEXTS]
    flat, lengths = workload.token_rows(texts)
    assert flat.dtype == np.int32 and len(lengths) == len(texts) and int(lengths.sum()) == len(flat)
    ends = np.cumsum(lengths)
    rows = [flat[e - n:e] for e, n in zip(ends, lengths)]
    for start in range(0, len(texts), 5):
        expected, padded = workload.tokenize(texts[start:start + 5]), workload.pad_rows(rows[start:start + 5])
        assert list(padded) == list(expected)
        for key, tensor in expected.items():
            assert padded[key].dtype == tensor.dtype and torch.equal(padded[key], tensor), key


def test_a_bucketed_pass_tokenizes_once_and_matches_the_file_order_pass(tiny_classifier_dir, tmp_path, monkeypatch):
    corpus = write_corpus_csv(tmp_path)
    workload = _classifier(tiny_classifier_dir, padding="longest", max_length=64)
    fixed = MeasuredPass()
    fixed.run(workload, str(corpus), KWARGS, 4, False, False, len(TINY_CLASSES))

    def refused(texts):
        raise AssertionError("a bucketed pass tokenized a batch again")

    monkeypatch.setattr(workload, "tokenize", refused)
    bucketed = MeasuredPass()
    bucketed.run(workload, str(corpus), KWARGS, 4, True, False, len(TINY_CLASSES))
    lengths = workload.token_rows([t for t, _ in TEXTS])[1]
    assert bucketed.order.tolist() == np.argsort(lengths, kind="stable").tolist() != list(range(len(TEXTS)))
    back = np.empty_like(bucketed.probs)
    back[bucketed.order] = bucketed.probs
    np.testing.assert_allclose(back, fixed.probs, atol=1e-5)
    assert bucketed.ordered_ids().to_pylist() == [f"d{i:02d}" for i in bucketed.order]
