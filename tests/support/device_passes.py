"""A pass spec for one classifier pass on the cuda device (the broken-device and data-parallel GPU tests run it on the
fake device): the shards are planned by max_length, the fake model having no tokenizer."""

from __future__ import annotations

from campaign_factory import write_corpus_csv


CLASSES = ["plot", "fresh", "rotten"]


def cuda_pass_spec(tmp_path, **variant):
    corpus = write_corpus_csv(tmp_path)  # 12 texts
    (tmp_path / "predictions").mkdir(exist_ok=True)
    return {
        "pass_id": "r01-p01-b4-a1", "seed": 0, "deterministic": False, "classes": CLASSES,
        "variant": {"name": "b4", "device": "cuda", "precision": "fp32", "batch_size": 4, "bucketing": False,
                    "resume": False, "compile": False, "padding": "longest", "data_parallel": 1, **variant},
        "model": {"kind": "hf_classifier", "path": None, "head": None, "callable": None, "max_length": 32,
                  "truncation": True, "trust_remote_code": False},
        "corpus_path": str(corpus), "prediction_dir": str(tmp_path / "predictions"),
        "warmup": {"inputs": 2, "passes": 1}, "scratch_dir": str(tmp_path / ".tmp"),
    }
