"""Shared fixtures: tiny BERT models built locally from a config (no download), reused by the whole suite.

Session-scoped fixtures (each a folder under pytest's temporary directory; treat them as read-only):

- ``tiny_classifier_dir`` → ``Path``: a ``BertForSequenceClassification`` folder (safetensors weights,
  ``config.json`` with ``id2label`` 0 plot / 1 fresh / 2 rotten, and a WordPiece tokenizer). Loads with
  ``load_workload(WorkloadSpec("hf_classifier", path=...))`` and every default (max_length 256 fits its 512 positions).
- ``tiny_encoder_dir`` → ``Path``: a bare ``BertModel`` folder (safetensors + the same tokenizer), hidden size 32.
- ``tiny_head_path`` → ``Path``: a ``head.safetensors`` trained with ``train_linear_head`` on mean-pooled,
  L2-normalised embeddings of ``tiny_encoder_dir`` (classes plot/fresh/rotten, ``normalize`` true). Use with
  ``load_workload(WorkloadSpec("encoder_head", path=tiny_encoder_dir, head=tiny_head_path))``.
- ``tiny_vocab`` → ``list[str]``: the tokenizer's vocabulary (lowercase words, letters and ``##`` pieces,
  so any ASCII text tokenizes without a flood of ``[UNK]``).

The weights are random (seeded): outputs are deterministic but meaningless as classifications.

Generation models (tests/support/tiny_generators.py, built once per session): ``tiny_causal_lm`` (a random GPT-2-shaped
causal LM with a chat template), ``tiny_chain_lm`` (the same shape rigged so that greedy decoding follows
``tiny_generators.CHAIN``) and ``tiny_seq2seq`` (a random T5-shaped encoder-decoder), each a ``Path``.
"""

from __future__ import annotations

import os
import string
import sys
from pathlib import Path

import pytest

# The suite's support modules (fakes, factories, routines, golden data) live in tests/support: on ``sys.path`` for
# every test folder and for the ``module:function`` callables the protocols name; tests that start worker
# processes put the same folder on their PYTHONPATH.
SUPPORT = Path(__file__).resolve().parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY_CLASSES = ("plot", "fresh", "rotten")
_WORDS = (
    "the a an and but or not no very so too is was are were be it this that of to in on with for as by "
    "movie film story plot acting actor actors director script scene scenes cast good great fine bad "
    "awful boring dull fun funny fresh rotten love loved hate hated best worst ever really quite "
    "review character characters ending beautiful mess"
).split()


def _vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits)
    punct = list(".,!?;:'\"-()")
    return specials + _WORDS + chars + punct + ["##" + c for c in chars]


def bert_tokenizer(vocab_file: Path):
    """A WordPiece tokenizer of ``vocab_file`` that saves a tokenizer.json, on every transformers set-up allows:
    transformers 5's BertTokenizer is the fast one and takes ``vocab`` (it ignores ``vocab_file``); 4.x names the
    fast one BertTokenizerFast and takes ``vocab_file``."""
    import inspect

    from transformers import BertTokenizer, BertTokenizerFast

    if "vocab" in inspect.signature(BertTokenizer.__init__).parameters:
        return BertTokenizer(vocab=str(vocab_file), model_max_length=512)
    return BertTokenizerFast(vocab_file=str(vocab_file), model_max_length=512)


def _tokenizer(folder: Path):
    vocab_file = folder.parent / f"{folder.name}-vocab.txt"
    vocab_file.write_text("\n".join(_vocab()) + "\n", encoding="utf-8")
    return bert_tokenizer(vocab_file)


def _config(**extra):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(_vocab()), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=512, **extra)


# ------------------------------------------------------------------------------------------ parallel runs
# scripts/test.sh runs the suite on pytest-xdist workers with ``--dist loadfile``: a module's tests run on one worker
# in their order, so its module-scoped fixtures are built once (the demo run, for one). The modules with an
# end-to-end test run first (scripts/test.sh passes --no-loadscope-reorder so that xdist keeps this order), so
# that no worker starts one near the end while the others sit idle. The tests that start a local Ray (each a
# cluster of its own, sized to the whole machine, with no-progress timeouts) take a lock shared by the workers of
# the run, so two Rays never share the cores: a test marked ``ray``, or skipped "when Ray is not installed" (the
# suite's convention for those tests). Under a plain ``pytest`` (no xdist) all this changes nothing but the order
# of the modules.

RAY_SKIP_REASON = "Ray is not installed"


def _starts_ray(item: pytest.Item) -> bool:
    if item.get_closest_marker("ray") is not None:
        return True
    return any(RAY_SKIP_REASON in str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config, items):
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    long = {module(item) for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: module(item) not in long)  # stable: the collection's order otherwise


@pytest.fixture(autouse=True)
def _one_ray_at_a_time(request, tmp_path_factory):
    if "PYTEST_XDIST_WORKER" not in os.environ or not _starts_ray(request.node):
        yield
        return
    import fcntl

    # every worker's base temporary folder is in the run's own one
    with open(tmp_path_factory.getbasetemp().parent / "ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session", autouse=True)
def _quiet_machine():
    """Passes run for real here, on a machine the suite shares with other jobs, and a pass measured under load is
    set apart by default (stats.loaded_passes, T4): so that what a test checks does not hang on its neighbours'
    load, each pass's load is measured and recorded as usual but never flagged, for the whole session (campaigns
    run once by module- and session-scoped fixtures included), except in a test marked ``real_load`` (which reads
    the flag it sets up: :func:`_real_load`). Yields the product's own measure."""
    import iteralab.models.device as dev

    measured = dev.concurrent_load

    def unflagged(before, after, seconds):
        load = measured(before, after, seconds)
        return None if load is None else {**load, "flagged": False}

    patch = pytest.MonkeyPatch()
    patch.setattr(dev, "concurrent_load", unflagged)
    yield measured
    patch.undo()


@pytest.fixture(autouse=True)
def _real_load(request, monkeypatch, _quiet_machine):
    """A test marked ``real_load`` sees the product's own flag of a pass measured under load."""
    if request.node.get_closest_marker("real_load"):
        import iteralab.models.device as dev

        monkeypatch.setattr(dev, "concurrent_load", _quiet_machine)
    yield


@pytest.fixture(scope="session")
def tiny_vocab() -> list[str]:
    return _vocab()


@pytest.fixture(scope="session")
def tiny_classifier_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    folder = tmp_path_factory.mktemp("models") / "tiny-classifier"
    folder.mkdir()
    torch.manual_seed(0)
    config = _config(id2label=dict(enumerate(TINY_CLASSES)), label2id={c: i for i, c in enumerate(TINY_CLASSES)})
    BertForSequenceClassification(config).eval().save_pretrained(folder, safe_serialization=True)
    _tokenizer(folder).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import BertModel

    folder = tmp_path_factory.mktemp("models") / "tiny-encoder"
    folder.mkdir()
    torch.manual_seed(1)
    BertModel(_config()).eval().save_pretrained(folder, safe_serialization=True)
    _tokenizer(folder).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_head_path(tiny_encoder_dir, tmp_path_factory) -> Path:
    from iteralab.models.head import load_encoder, save_head, train_linear_head

    texts = ["a good fun movie", "great acting, loved it", "the plot is a story of a director",
             "the story ends in a scene", "awful and boring", "the worst mess ever", "fine film, best cast",
             "a dull script", "the plot of this review"]
    labels = ["fresh", "fresh", "plot", "plot", "rotten", "rotten", "fresh", "rotten", "plot"]
    embeddings = load_encoder(tiny_encoder_dir).embed(texts, batch_size=4, normalize=True)
    weight, bias = train_linear_head(embeddings, labels, TINY_CLASSES, seed=0)
    path = tmp_path_factory.mktemp("heads") / "head.safetensors"
    save_head(path, weight, bias, TINY_CLASSES, normalize=True, extra_metadata={"trained_on": "conftest texts"})
    return path


# ------------------------------------------------------------------------------------------ generation models
# ``tiny_causal_lm`` / ``tiny_chain_lm`` / ``tiny_seq2seq`` → ``Path``: the folders of tests/support/tiny_generators.py
# (a random GPT-2-shaped causal LM, the same shape rigged to follow ``CHAIN``, a random T5-shaped seq2seq), built
# once per session. Load with ``load_workload(WorkloadSpec("hf_causal_lm" | "hf_seq2seq", path=..., task="generation",
# generation=GenerationSettings(max_new_tokens=...)))``.


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory) -> Path:
    from tiny_generators import tiny_causal_lm_dir

    return tiny_causal_lm_dir(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_chain_lm(tmp_path_factory) -> Path:
    from tiny_generators import tiny_chain_lm_dir

    return tiny_chain_lm_dir(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_seq2seq(tmp_path_factory) -> Path:
    from tiny_generators import tiny_seq2seq_dir

    return tiny_seq2seq_dir(tmp_path_factory.mktemp("models"))
