"""Tiny generation models built locally from a config (random, seeded weights; nothing is downloaded).
Their initialisation scale is raised from the library's default so that greedy outputs vary from token to token
instead of repeating one token.

- :func:`tiny_causal_lm_dir`: a GPT-2-shaped causal LM (2 layers, hidden size 64, 2 heads) with a word-level
  tokenizer that puts ``<bos>`` before every text and has a small chat template.
- :func:`tiny_seq2seq_dir`: a T5-shaped encoder-decoder (2 + 2 layers, d_model 64) whose tokenizer ends every
  text with ``</s>``.
- :func:`tiny_chain_lm_dir`: the causal LM's shape with weights set by hand so that greedy decoding follows
  :data:`CHAIN` whatever the numerics: the last token alone decides the next one, by a wide margin. A prompt
  ending in ``one`` generates ``two three <eos>``; any other prompt generates ``la la la …`` until the limit.

Every folder holds safetensors weights, ``config.json``, ``generation_config.json`` and the tokenizer files
(``save_pretrained``). Outputs of the random models are deterministic for a given set-up but meaningless.
"""

from __future__ import annotations

from pathlib import Path

#: Words of the tests' prompts; anything else becomes ``<unk>``.
WORDS = tuple(dict.fromkeys((
    "the a an and of to in is was it this that what who how why when where answer question summary "
    "summarize translate english french text story movie film good bad great short long very day night "
    "cat dog sat on mat red blue green one two three four five la user assistant system : . , ? !"
).split()))
CAUSAL_SPECIALS = ("<pad>", "<eos>", "<unk>", "<bos>")
SEQ2SEQ_SPECIALS = ("<pad>", "</s>", "<unk>")
#: Chat template of the causal tokenizer: each message as ``<bos> role : content``, then ``assistant :``.
CHAT_TEMPLATE = ("{% for m in messages %}<bos> {{ m['role'] }} : {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}assistant :{% endif %}")
#: What :func:`tiny_chain_lm_dir` generates after each token (every other token is followed by ``la``).
CHAIN = {"one": "two", "two": "three", "three": "<eos>", "la": "la"}


def _vocab(specials: tuple[str, ...]) -> dict[str, int]:
    return {token: i for i, token in enumerate(specials + WORDS)}


def _tokenizer(specials: tuple[str, ...], template: str, chat_template: str | None = None):
    """A word-level tokenizer (whitespace and punctuation split) wrapped for transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = _vocab(specials)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    added = [s for s in specials if s in template]
    core.post_processor = processors.TemplateProcessing(single=template, special_tokens=[(s, vocab[s]) for s in added])
    eos = "<eos>" if "<eos>" in specials else "</s>"
    extra = {"bos_token": "<bos>"} if "<bos>" in specials else {}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token=eos, unk_token="<unk>",
                                        model_max_length=1024, **extra)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def _causal_model(seed: int, tie: bool = True):
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    vocab = _vocab(CAUSAL_SPECIALS)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=1024, vocab_size=len(vocab),
                        bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"], pad_token_id=vocab["<pad>"],
                        tie_word_embeddings=tie, initializer_range=0.3)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"],
                                               pad_token_id=vocab["<pad>"])
    return model


def _save(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_causal_lm_dir(tmp_path: Path, seed: int = 0) -> Path:
    """A random GPT-2-shaped causal LM folder (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 3) under ``tmp_path``."""
    tokenizer = _tokenizer(CAUSAL_SPECIALS, "<bos> $A", CHAT_TEMPLATE)
    return _save(_causal_model(seed), tokenizer, Path(tmp_path) / "tiny-causal-lm")


def tiny_chain_lm_dir(tmp_path: Path) -> Path:
    """The causal LM's shape, rigged so greedy decoding follows :data:`CHAIN` (see the module docstring).

    Attention and MLP outputs and position embeddings are zero, so the last hidden state is the layer norm of
    the last token's embedding; embeddings are one-hot, and the (untied) output row of each token is large on
    the embeddings of the tokens it follows."""
    import torch

    model = _causal_model(seed=0, tie=False)
    vocab = _vocab(CAUSAL_SPECIALS)
    with torch.no_grad():
        for block in model.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.zero_()
                proj.bias.zero_()
        model.transformer.wpe.weight.zero_()
        model.transformer.wte.weight.copy_(torch.eye(len(vocab), 64))
        model.lm_head.weight.zero_()
        for token, index in vocab.items():
            model.lm_head.weight[vocab[CHAIN.get(token, "la")], index] = 10.0
    tokenizer = _tokenizer(CAUSAL_SPECIALS, "<bos> $A", CHAT_TEMPLATE)
    return _save(model, tokenizer, Path(tmp_path) / "tiny-chain-lm")


def tiny_seq2seq_dir(tmp_path: Path, seed: int = 0) -> Path:
    """A random T5-shaped encoder-decoder folder (``<pad>`` 0 = decoder start, ``</s>`` 1) under ``tmp_path``."""
    import torch
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

    vocab = _vocab(SEQ2SEQ_SPECIALS)
    config = T5Config(vocab_size=len(vocab), d_model=64, d_kv=32, d_ff=128, num_layers=2, num_decoder_layers=2,
                      num_heads=2, pad_token_id=vocab["<pad>"], eos_token_id=vocab["</s>"],
                      decoder_start_token_id=vocab["<pad>"], initializer_factor=10.0)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"],
                                               decoder_start_token_id=vocab["<pad>"])
    tokenizer = _tokenizer(SEQ2SEQ_SPECIALS, "$A </s>")
    return _save(model, tokenizer, Path(tmp_path) / "tiny-seq2seq")
