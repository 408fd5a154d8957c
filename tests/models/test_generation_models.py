"""Generation models: greedy outputs, finish reasons and token counts, prompt limits, the seq2seq kind, callable
generators, bf16 and the manifest's facts — on the tiny models of tests/support/tiny_generators.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from iteralab.common.files import sha256_file
from iteralab.errors import WorkloadError
from iteralab.models.factory import WorkloadSpec, load_workload
from iteralab.models.generation import FINISH_REASONS, GeneratedBatch, GenerationSettings, check_prompts

SHORT = "the cat sat"
PROMPTS = [SHORT, "what is the answer to the question of the long story ?", "translate the text to french"]


def _load(kind: str, path: Path, **generation) -> object:
    precision = generation.pop("precision", "fp32")
    return load_workload(WorkloadSpec(kind, path=path, task="generation", precision=precision,
                         generation=GenerationSettings(**generation)))


def _check_batch(batch: GeneratedBatch, n: int, max_new_tokens: int) -> None:
    assert len(batch.texts) == n and all(isinstance(t, str) for t in batch.texts)
    assert batch.tokens is not None and batch.tokens.dtype == np.int32 and batch.tokens.shape == (n,)
    assert np.all((batch.tokens >= 1) & (batch.tokens <= max_new_tokens))
    assert len(batch.finish) == n and set(batch.finish) <= set(FINISH_REASONS)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.fixture(scope="module")
def causal(tiny_causal_lm):
    return _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=6)


# ----------------------------------------------------------------------------------------- greedy outputs


def test_greedy_outputs_repeat_and_do_not_depend_on_the_batch(causal):
    counts = causal.prompt_token_counts(PROMPTS)
    assert counts[0] < max(counts)  # the short prompt is left-padded in the batch
    first, second = causal.generate(PROMPTS), causal.generate(PROMPTS)
    _check_batch(first, len(PROMPTS), 6)
    assert (first.texts, first.tokens.tolist(), first.finish) == (second.texts, second.tokens.tolist(), second.finish)
    alone = causal.generate([SHORT])
    assert (alone.texts[0], int(alone.tokens[0]), alone.finish[0]) == (first.texts[0], int(first.tokens[0]),
                                                                       first.finish[0])
    assert len(set(first.texts)) > 1  # the prompts steer the outputs


def test_an_empty_batch_gives_an_empty_result(causal):
    batch = causal.generate([])
    assert batch.texts == [] and batch.finish == [] and batch.tokens is not None and batch.tokens.size == 0


# ----------------------------------------------------------------------------------------- finish reasons


def test_a_small_max_new_tokens_ends_on_length(tiny_chain_lm):
    model = _load("hf_causal_lm", tiny_chain_lm, max_new_tokens=3)
    batch = model.generate(["red", "the dog"])
    assert batch.finish == ["length", "length"] and batch.tokens.tolist() == [3, 3]
    assert batch.texts == ["la la la", "la la la"]


def test_eos_ends_the_text_and_is_counted_with_it(tiny_chain_lm):
    model = _load("hf_causal_lm", tiny_chain_lm, max_new_tokens=8)
    batch = model.generate(["the cat sat on one", "red"])  # the second row runs to the limit: padding follows eos
    assert batch.texts == ["two three", "la la la la la la la la"]
    assert batch.tokens.tolist() == [3, 8]  # two, three, <eos>; padding after eos is not counted
    assert batch.finish == ["eos", "length"]


def test_a_stop_string_cuts_the_text(tiny_chain_lm):
    model = _load("hf_causal_lm", tiny_chain_lm, max_new_tokens=8, stop=("three",))
    batch = model.generate(["sat on one", "red"])
    assert batch.texts[0] == "two " and batch.finish[0] == "stop" and int(batch.tokens[0]) == 2
    assert (batch.texts[1], batch.finish[1], int(batch.tokens[1])) == ("la la la la la la la la", "length", 8)
    spanning = _load("hf_causal_lm", tiny_chain_lm, max_new_tokens=8, stop=["two three", "blue"])
    assert spanning.generation.stop == ("two three", "blue")
    batch = spanning.generate(["one"])  # the stop string spans two tokens: counted up to the one completing it
    assert (batch.texts, batch.tokens.tolist(), batch.finish) == ([""], [2], ["stop"])


def test_without_a_pad_token_eos_pads_and_finish_reasons_still_hold(tiny_chain_lm, tmp_path):
    folder = tmp_path / "no-pad"
    shutil.copytree(tiny_chain_lm, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    del config["pad_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    model = _load("hf_causal_lm", folder, max_new_tokens=6)
    assert model.describe()["generation"]["pad_token_id"] == 1 and any("eos" in n for n in model.describe()["notes"])
    batch = model.generate(["one", "the cat sat on the red mat"])  # the first row is padded with eos ids
    assert (batch.texts, batch.tokens.tolist(), batch.finish) == (["two three", "la la la la la la"], [3, 6],
                                                                  ["eos", "length"])


# ----------------------------------------------------------------------------------------- prompts


def test_prompt_token_counts_are_the_tokenizers_with_the_chat_template_when_asked(tiny_causal_lm):
    prompts = ["the cat sat", "red", "what is the answer ?"]
    words = [len(p.split()) for p in prompts]
    plain = _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=2)
    assert plain.prompt_token_counts(prompts) == [n + 1 for n in words]  # <bos> + words
    chat = _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=2, chat_template=True)
    assert chat.prompt_token_counts(prompts) == [n + 5 for n in words]  # <bos> user : … assistant :
    assert chat.describe()["generation"]["chat_template"] is True
    _check_batch(chat.generate(prompts), len(prompts), 2)


def test_check_prompts_finds_the_prompts_over_the_limit_and_generate_refuses_them(tiny_causal_lm):
    prompts = ["the cat", "the cat sat on the mat", "red", "one two three four five six"]
    model = _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=2, prompt_max_length=5)
    assert check_prompts(model, prompts) == [1, 3]
    with pytest.raises(WorkloadError, match=r"prompts\[1\]: 7 tokens, over prompt_max_length 5") as exc:
        model.generate(prompts)
    _one_line(exc)
    truncating = _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=2, prompt_max_length=5, allow_truncation=True)
    assert check_prompts(truncating, prompts) == [1, 3]  # still reported: the caller decides
    _check_batch(truncating.generate(prompts), len(prompts), 2)
    assert truncating.describe()["truncation"] is True


# ----------------------------------------------------------------------------------------- seq2seq


def test_the_seq2seq_model_generates_with_the_same_interface(tiny_seq2seq):
    model = _load("hf_seq2seq", tiny_seq2seq, max_new_tokens=5)
    assert model.prompt_token_counts(["the cat sat", "red"]) == [4, 2]  # words + </s>
    batch = model.generate(PROMPTS)
    _check_batch(batch, len(PROMPTS), 5)
    again, alone = model.generate(PROMPTS), model.generate([PROMPTS[1]])
    assert again.texts == batch.texts and again.tokens.tolist() == batch.tokens.tolist()
    assert (alone.texts[0], alone.finish[0]) == (batch.texts[1], batch.finish[1])
    info = model.describe()
    assert info["kind"] == "hf_seq2seq" and info["model_class"] == "T5ForConditionalGeneration"
    assert info["padding"] == "longest (right)"


# ----------------------------------------------------------------------------------------- callables


def test_a_callable_returning_texts_is_counted_by_its_tokenizer_folder(tiny_causal_lm):
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:echo_words", path=tiny_causal_lm,
                          task="generation", generation=GenerationSettings(max_new_tokens=3)))
    batch = model.generate(["the cat sat", "red", "one two"])
    assert batch.texts == ["the cat sat", "red", "one two"]
    assert batch.tokens.tolist() == [3, 1, 2] and batch.finish == ["length", "eos", "eos"]
    assert model.prompt_token_counts(["the cat sat"]) == [4]
    stopping = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:last_words", path=tiny_causal_lm,
                             task="generation", generation=GenerationSettings(max_new_tokens=8, stop=("end",))))
    batch = stopping.generate(["the cat sat on the mat"])
    # counted on the stored text: "end ." was cut off with the stop string
    assert batch.texts == ["on the mat "] and batch.finish == ["stop"] and batch.tokens.tolist() == [3]


def test_a_callable_without_a_tokenizer_leaves_tokens_not_measured():
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:echo_words", task="generation",
                          generation=GenerationSettings(max_new_tokens=3)))
    batch = model.generate(["the cat sat", "red"])
    assert batch.tokens is None and batch.finish == ["eos", "eos"] and batch.texts == ["the cat sat", "red"]
    assert check_prompts(model, ["the cat sat"]) == []
    assert model.describe()["generation"]["tokens"].startswith("not measured")
    with pytest.raises(WorkloadError, match="no tokenizer"):
        model.prompt_token_counts(["red"])


def test_a_callable_may_return_its_own_counts_and_finish_reasons():
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:with_counts", task="generation",
                          generation=GenerationSettings(max_new_tokens=5)))
    batch = model.generate(["the cat sat", "red"])
    assert batch.texts == ["THE CAT SAT", "RED"] and batch.tokens.tolist() == [4, 2] and batch.finish == ["eos"] * 2
    assert batch.tokens.dtype == np.int32
    with pytest.raises(WorkloadError, match=r"returned 5 generated tokens for the batch's row 0, outside "
                                            r"0…max_new_tokens 4"):
        load_workload(WorkloadSpec("callable", callable_ref="fake_generators:with_counts", task="generation",
                      generation=GenerationSettings(max_new_tokens=4))).generate(["one two three four", "red"])


@pytest.mark.parametrize(("name", "message"), [
    ("one_text_short", r"returned 1 texts for 2 prompts"),
    ("not_strings", r"returned int for the batch's row 0, expected a string"),
    ("bad_finish", r"returned finish reason 'done' for the batch's row 0"),
])
def test_a_callable_returning_the_wrong_shape_is_a_one_line_error(name, message):
    model = load_workload(WorkloadSpec("callable", callable_ref=f"fake_generators:{name}", task="generation",
                          generation=GenerationSettings(max_new_tokens=4)))
    with pytest.raises(WorkloadError, match=message) as exc:
        model.generate(["the cat", "red"])
    assert _one_line(exc).startswith(f"callable: fake_generators:{name}")


def test_a_callable_counted_over_the_limit_is_cut_there_and_finishes_length(tiny_causal_lm):
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:echo_words", path=tiny_causal_lm,
                          task="generation", generation=GenerationSettings(max_new_tokens=2)))
    batch = model.generate(["red", "the cat sat"])
    assert batch.texts == ["red", "the cat"] and batch.tokens.tolist() == [1, 2] and batch.finish == ["eos", "length"]


def test_a_stop_string_is_cut_before_the_tokens_are_counted(tiny_causal_lm):
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:junk_after_newline", path=tiny_causal_lm,
                          task="generation", generation=GenerationSettings(max_new_tokens=8, stop=("\n",))))
    batch = model.generate(["why is the sky blue", "red"])
    # the six words after the newline are neither stored nor counted
    assert batch.texts == ["the sky blue", "red"] and batch.tokens.tolist() == [3, 1]
    assert batch.finish == ["stop", "stop"]


def test_a_text_ended_by_no_stop_string_and_no_limit_finishes_eos(tiny_causal_lm):
    for path in (tiny_causal_lm, None):  # counted or not
        model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:last_words", path=path, task="generation",
                              generation=GenerationSettings(max_new_tokens=8, stop=("mat",))))
        batch = model.generate(["the cat sat on the mat", "red green blue"])
        assert batch.finish == ["stop", "eos"], path


def test_a_callable_answer_over_the_limit_is_cut_at_max_new_tokens(tiny_causal_lm):
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:rambling", path=tiny_causal_lm,
                          task="generation", generation=GenerationSettings(max_new_tokens=4)))
    batch = model.generate(["the cat", "red"])
    assert batch.texts == ["the cat la la", "red la la la"] and batch.tokens.tolist() == [4, 4]
    assert batch.finish == ["length", "length"]


def test_a_callable_count_over_the_limit_names_the_row_for_the_pass_to_name_its_document():
    from iteralab.errors import RowError

    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:over_counted", task="generation",
                          generation=GenerationSettings(max_new_tokens=4)))
    with pytest.raises(RowError) as info:
        model.generate(["a", "b", "c"])
    assert info.value.row == 2 and "the batch's row 2" in info.value.message
    named = info.value.for_document("d7")
    assert "returned 99 generated tokens for document 'd7', outside 0…max_new_tokens 4" in named.message
    assert "row" not in named.message and "cuts a text at the limit" in named.hint


# ----------------------------------------------------------------------------------------- precision, manifest


def test_bf16_loads_and_generates(tiny_causal_lm, tiny_seq2seq):
    for kind, path in (("hf_causal_lm", tiny_causal_lm), ("hf_seq2seq", tiny_seq2seq)):
        model = _load(kind, path, max_new_tokens=4, precision="bf16")
        assert model.describe()["param_dtypes"] == ["bfloat16"]
        _check_batch(model.generate(PROMPTS), len(PROMPTS), 4)


def test_int8_dynamic_quantizes_the_linear_layers_and_generates(tiny_seq2seq):
    model = _load("hf_seq2seq", tiny_seq2seq, max_new_tokens=4, precision="int8-dynamic")
    assert model.describe()["quantization"]["quantized_layers"] > 0
    _check_batch(model.generate(PROMPTS), len(PROMPTS), 4)


def test_describe_and_file_hashes_name_the_model_files(causal, tiny_causal_lm):
    hashes = causal.file_hashes()
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= set(hashes)
    assert hashes["model.safetensors"] == sha256_file(tiny_causal_lm / "model.safetensors")
    info = causal.describe()
    assert info["kind"] == "hf_causal_lm" and info["model_path"] == str(tiny_causal_lm.resolve())
    assert info["padding"] == "longest (left)" and info["classes"] == []
    generation = info["generation"]
    assert generation["max_new_tokens"] == 6 and generation["eos_token_ids"] == [1]
    assert generation["generation_config"]["do_sample"] is False and generation["generation_config"]["num_beams"] == 1
    assert causal.tokenizer_folder == tiny_causal_lm
    json.dumps(info)
    model = load_workload(WorkloadSpec("callable", callable_ref="fake_generators:echo_words", path=tiny_causal_lm,
                          task="generation", generation=GenerationSettings(max_new_tokens=3)))
    assert "callable/fake_generators.py" in model.file_hashes() and "tokenizer/tokenizer.json" in model.file_hashes()
    assert model.describe()["callable"] == "fake_generators:echo_words"


# ----------------------------------------------------------------------------------------- refusals


def test_refusals_name_the_field(tiny_causal_lm, tiny_seq2seq):
    with pytest.raises(WorkloadError, match="does not give what a classification job needs"):
        load_workload(WorkloadSpec("hf_causal_lm", path=tiny_causal_lm))
    with pytest.raises(WorkloadError, match="does not give what a generation job needs"):
        load_workload(WorkloadSpec("hf_classifier", path=tiny_causal_lm, task="generation",
                      generation=GenerationSettings(max_new_tokens=2)))
    with pytest.raises(WorkloadError, match="^generation: settings are required"):
        load_workload(WorkloadSpec("hf_causal_lm", path=tiny_causal_lm, task="generation"))
    with pytest.raises(WorkloadError, match="^max_new_tokens: 0 must be an integer"):
        _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=0)
    with pytest.raises(WorkloadError, match="^max_new_tokens: prompt_max_length \\+ max_new_tokens = 1124 exceeds"):
        _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=100, prompt_max_length=1024)
    with pytest.raises(WorkloadError, match="^chat_template: the tokenizer in .* has no chat template"):
        _load("hf_seq2seq", tiny_seq2seq, max_new_tokens=2, chat_template=True)
    with pytest.raises(WorkloadError, match="^padding: 'max_length': a generation job pads"):
        load_workload(WorkloadSpec("hf_causal_lm", path=tiny_causal_lm, task="generation", padding="max_length",
                      generation=GenerationSettings(max_new_tokens=2)))
    with pytest.raises(WorkloadError, match="^stop: "):
        _load("hf_causal_lm", tiny_causal_lm, max_new_tokens=2, stop=("",))
    with pytest.raises(WorkloadError, match="^precision/compile"):
        load_workload(WorkloadSpec("callable", callable_ref="fake_generators:echo_words", task="generation", precision="bf16",
                      generation=GenerationSettings(max_new_tokens=2)))


def test_a_compiled_generator_gives_the_same_greedy_outputs(tiny_chain_lm, monkeypatch):
    """A real torch.compile of the forward (TorchDynamo with the "eager" backend: the graph capture is real, no C++
    compiler is needed); the record says a compiled graph ran."""
    from iteralab.models import hf

    monkeypatch.setattr(hf, "COMPILE_BACKEND", "eager")
    model = load_workload(WorkloadSpec("hf_causal_lm", path=tiny_chain_lm, task="generation", compile=True,
                          generation=GenerationSettings(max_new_tokens=4)))
    batch = model.generate(["sat on one", "red"])
    assert batch.texts == ["two three", "la la la la"] and batch.finish == ["eos", "length"]
    record = model.describe()["compile"]
    assert record["enabled"] is True and record["backend"] == "eager" and record["compiled_graph_ran"] is True
