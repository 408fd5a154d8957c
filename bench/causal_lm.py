"""A causal language model for the generation benchmarks, built here from a config with random, seeded weights
(nothing is downloaded): GPT-2's shape at a size where the model, not the harness's fixed costs, takes the time
(6 layers, hidden size 512, 8 heads by default), and a word-level tokenizer built the way the tests build theirs
(``tests/support/tiny_generators.py``: whitespace split, ``<bos>`` before every text, ``<pad>`` and ``<eos>``).

The folder holds safetensors weights, ``config.json``, ``generation_config.json`` and the tokenizer files, as
``iteralab``'s ``hf_causal_lm`` kind reads them. Greedy outputs are deterministic for a given set-up but
meaningless; the weights' scale is raised from the library's default so that they vary from token to token.
"""

from __future__ import annotations

import random
from pathlib import Path

SPECIALS = ("<pad>", "<eos>", "<unk>", "<bos>")
#: The prompts' words; the vocabulary adds numbered words so that the output layer has a realistic width.
WORDS = tuple(dict.fromkeys((
    "the a an and of to in is was it this that what who how why when where answer question summary summarize "
    "translate english french text story movie film good bad great short long very day night cat dog sat on mat "
    "red blue green one two three four five city river mountain train ticket price report market year people "
    "government company school water house music game player team season week month money paper letter"
).split()))
VOCAB_SIZE = 2048


def vocabulary(size: int = VOCAB_SIZE) -> dict[str, int]:
    tokens = list(SPECIALS + WORDS)
    tokens += [f"w{i}" for i in range(max(0, size - len(tokens)))]
    return {token: i for i, token in enumerate(tokens)}


def tokenizer(vocab: dict[str, int]):
    """A word-level tokenizer (whitespace and punctuation split, ``<bos>`` first) wrapped for transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                   bos_token="<bos>", model_max_length=1024)


def causal_lm_dir(folder: Path, *, layers: int = 6, hidden: int = 512, heads: int = 8, positions: int = 512,
                  vocab_size: int = VOCAB_SIZE, seed: int = 0) -> Path:
    """A random GPT-2-shaped causal LM folder at ``folder`` (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 3)."""
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    vocab = vocabulary(vocab_size)
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=positions, vocab_size=len(vocab),
                        bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"], pad_token_id=vocab["<pad>"],
                        initializer_range=0.1)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"],
                                               pad_token_id=vocab["<pad>"])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer(vocab).save_pretrained(folder)
    return folder


def prompts(n: int, seed: int = 0, shortest: int = 4, longest: int = 32) -> list[str]:
    """``n`` prompts of mixed length (``shortest``…``longest`` words, drawn uniformly) from :data:`WORDS`."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(shortest, longest))) for _ in range(n)]
