"""Token counts by the chosen model's own tokenizer (C2), counted the way a pass tokenizes: special tokens
included, no truncation. Reads a model folder's tokenizer files; writes nothing.

Used by ``prepare`` (to build the strata), by ``lock``/``run`` (to check every row's stratum) and by the demo.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file
from iteralab.errors import CorpusError, ProtocolError, WorkloadError
from iteralab.models.prompts import count_prompt_tokens
from iteralab.plan.paths import PACKAGE_PREFIX, resolve
from iteralab.plan.prepare import prepare_corpus
from iteralab.plan.prepare_generation import prepare_generation
from iteralab.plan.protocol import Protocol
from iteralab.plan.scan import CorpusReader
from iteralab.plan.strata import assign_strata, describe_strata
from iteralab.models.pairs import count_pair_tokens
from iteralab.plan.task import KIND_RULES, prompt_spec, scoring_spec

#: The files a Hugging Face tokenizer may read; their hashes are recorded wherever token counts are used.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "added_tokens.json",
                   "config.json")


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer of a local model folder (nothing is downloaded)."""

    from iteralab.models.hf import quiet_transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    quiet_transformers()
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkloadError(f"model: folder {folder} does not exist",
                            hint="give a local model folder (hub ids are never downloaded)")
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkloadError(f"model: cannot load a tokenizer from {folder}: {first}") from None


def token_counter(tokenizer: Any, batch_size: int = 1024) -> Callable[[Sequence[str]], list[int]]:
    """Token counts as a pass sees them: special tokens included, no truncation."""

    def count(texts: Sequence[str]) -> list[int]:
        items = list(texts)
        out: list[int] = []
        for start in range(0, len(items), batch_size):
            batch = tokenizer(items[start:start + batch_size], add_special_tokens=True, truncation=False)
            out.extend(len(ids) for ids in batch["input_ids"])
        return out

    return count


def protocol_counter(protocol: Protocol, tokenizer: Any) -> Callable[..., list[int]]:
    """The token counts a protocol's strata and limits are about: a document's text, or for a generation job the
    document's rendered prompt (its template filled from the text and the columns it names, and the chat
    template when declared) as the model reads it, and for a scoring job each pair (the text and its
    ``scoring.pair_column`` cell, joined by the tokenizer's pair template). The counter takes a batch's texts and, for a template that
    names other columns, the batch's cells by column name (a reader batch's ``extra``)."""
    generation = prompt_spec(protocol)
    pairs = scoring_spec(protocol)
    if pairs is not None:  # a scoring job: both texts of each pair, as the model reads them

        def count_pairs(texts: Sequence[str], columns: Mapping[str, Sequence[str | None]] | None = None) -> list[int]:
            seconds = (columns or {}).get(pairs.pair_column) or [None] * len(texts)
            return count_pair_tokens(tokenizer, list(texts), [s or "" for s in seconds])

        return count_pairs
    if generation is None:
        plain = token_counter(tokenizer)

        def count_texts(texts: Sequence[str], columns: Mapping[str, Sequence[str | None]] | None = None) -> list[int]:
            return plain(texts)

        return count_texts

    def count(texts: Sequence[str], columns: Mapping[str, Sequence[str | None]] | None = None) -> list[int]:
        return count_prompt_tokens(tokenizer, generation.render_all(texts, columns), generation.chat_template)

    return count


def tokenizer_hashes(folder: str | Path) -> dict[str, str]:
    folder = Path(folder)
    return {name: sha256_file(folder / name) for name in TOKENIZER_FILES if (folder / name).is_file()}


def protocol_strata(protocol: Protocol) -> dict[str, tuple[int, int | None]]:
    """The declared strata as (min, max or None) token bounds."""
    return {name: (b[0], b[1] if len(b) == 2 else None) for name, b in protocol.corpus.strata.items()}


def check_row_strata(protocol: Protocol, where: str, folder: Path | None, reader: CorpusReader) -> None:
    """When a subgroup by stratum is planned: every row's stratum is a declared one and agrees with its token
    count by the model's tokenizer (in ``folder``, the protocol's resolved ``model.path``) under the declared
    bounds. Refused with one line naming file (``where``: the protocol file), line and id. ``reader`` (asked for
    lines) is read through twice, batch by batch: the cells first, then the token counts."""
    if not any(sg.by == "stratum" for sg in protocol.subgroups):
        return
    strata = protocol_strata(protocol)
    if not strata:
        raise ProtocolError(f"{where}: corpus.strata: a subgroup by 'stratum' needs the strata declared "
                            "(e.g. strata = { short = [0, 30], long = [31] }, token bounds, inclusive)",
                            hint="iteralab prepare writes them for you")
    column = protocol.corpus.stratum_column or "stratum"
    declared = describe_strata(strata)
    for batch in filter(None, reader.batches()):
        for rid, line, cell in zip(batch.ids, batch.lines or (), batch.extra.get(column, ())):
            at = f"{reader.where} line {line}, id {rid!r}"
            if cell is None or not cell.strip():
                raise CorpusError(f"{at}: empty {column} cell (declared: {declared})",
                                  hint="every row needs its length stratum; iteralab prepare writes them")
            if cell not in strata:
                raise CorpusError(f"{at}: {column} {cell!r} is not declared in corpus.strata ({declared})",
                                  hint="declare it, or fix the cell")
    if folder is None:
        raise ProtocolError(f"{where}: model.path: length strata are counted with the model's tokenizer; this "
                            "callable names none", hint="set model.path to the folder of the tokenizer it uses")
    count = protocol_counter(protocol, load_tokenizer(folder))
    first: CorpusError | None = None  # a count in no stratum anywhere is refused before a disagreeing cell
    for batch in reader.batches():
        if batch is None:
            first = None
            continue
        counts = count(batch.texts, batch.extra)
        expected = assign_strata(counts, strata, names=batch.ids)
        cells = batch.extra.get(column, ())
        for rid, line, cell, n, should in zip(batch.ids, batch.lines or (), cells, counts, expected):
            if first is None and cell != should:
                lo, hi = strata[cell]  # type: ignore[index]
                bounds = f"{lo}+" if hi is None else f"{lo}-{hi}"
                first = CorpusError(
                    f"{reader.where} line {line}, id {rid!r}: stratum {cell!r} ({bounds} tokens) but "
                    f"the model's tokenizer counts {n} tokens ({should!r})",
                    hint="recompute the strata with: iteralab prepare")
    if first is not None:
        raise first


class RowStrataCheck:
    """:func:`check_row_strata`, batch by batch, as a sink of :func:`iteralab.plan.scan.scan_corpus`: each
    batch's strata cells and token counts are checked and only a flag is kept. :meth:`finish` raises the
    precise one-line error by running :func:`check_row_strata` over the corpus read again (in batches)."""

    def __init__(self, protocol: Protocol, where: str, folder: Path | None) -> None:
        self.protocol, self.where = protocol, where
        self.active = any(sg.by == "stratum" for sg in protocol.subgroups)
        self.strata = protocol_strata(protocol)
        self.column = protocol.corpus.stratum_column or "stratum"
        self.folder = folder
        self.count: Callable[..., list[int]] | None = None
        if self.active and self.strata and self.folder is not None:
            self.count = protocol_counter(protocol, load_tokenizer(self.folder))
        self.bad = False

    def __call__(self, batch: Any) -> None:
        if batch is None:  # the scan starts again from the first record
            self.bad = False
            return
        if not self.active or self.bad or self.count is None:
            return
        cells = batch.extra.get(self.column) or [None] * len(batch.ids)
        if any(c is None or c not in self.strata for c in cells):
            self.bad = True
            return
        try:
            expected = assign_strata(self.count(batch.texts, batch.extra), self.strata, names=batch.ids)
        except CorpusError:
            self.bad = True
            return
        self.bad = expected != cells

    def finish(self, reader: Callable[[], CorpusReader]) -> None:
        """Raise as :func:`check_row_strata` would when a batch disagreed or the declaration is incomplete
        (``reader``: a reader of the corpus that tracks lines)."""
        if self.active and (self.bad or self.count is None):
            check_row_strata(self.protocol, self.where, self.folder, reader())


class PromptLengthCheck:
    """A generation job's prompts against ``model.max_length``, as a sink of :func:`iteralab.plan.scan.scan_corpus`:
    every document's rendered prompt counted by the model's tokenizer, the first one over the limit refused in one
    line naming the file, line and id (before any pass: a prompt is never cut silently). Inactive when the
    protocol allows truncation or when no tokenizer is named (a callable without ``model.path`` owns its limit)."""

    def __init__(self, protocol: Protocol, folder: Path | None, where: str) -> None:
        self.where = where
        generation = prompt_spec(protocol)
        self.active = (generation is not None
                       and not generation.allow_truncation and folder is not None)
        self.limit = protocol.model.max_length
        self.count = protocol_counter(protocol, load_tokenizer(folder)) if self.active and folder else None
        self.longest = 0

    def __call__(self, batch: Any) -> None:
        if batch is None or self.count is None:
            return
        counts = self.count(batch.texts, batch.extra)
        self.longest = max([self.longest, *counts])
        for i, n in enumerate(counts):
            if n > self.limit:
                line = batch.lines[i] if batch.lines else None
                at = f"{self.where} line {line}, " if line is not None else f"{self.where}: "
                raise CorpusError(f"{at}id {batch.ids[i]!r}: the rendered prompt has {n} tokens, over model.max_length "
                                  f"= {self.limit}", hint="raise model.max_length (within the model's positions), "
                                  "shorten the document or the prompt template, or declare "
                                  "generation.allow_truncation = true (a truncated prompt is another job)")


def model_kind(folder: Path) -> str:
    """``hf_classifier`` when the folder's config names a sequence-classification architecture, else an
    encoder that needs a trained head (``encoder_head``)."""

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "encoder_head"
    architectures = config.get("architectures") or []
    return "hf_classifier" if any(str(a).endswith("ForSequenceClassification") for a in architectures) \
        else "encoder_head"


def generation_kind(folder: Path) -> str:
    """A generation job's model kind from the folder's config: ``hf_seq2seq`` for an encoder-decoder,
    ``hf_causal_lm`` for a causal LM, else ``callable`` (a folder that only holds the tokenizer counting tokens)."""

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "callable"
    architectures = [str(a) for a in config.get("architectures") or []]
    if config.get("is_encoder_decoder") and any(a.endswith("ForConditionalGeneration") for a in architectures):
        return "hf_seq2seq"
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return "hf_causal_lm"
    return "callable"


def model_labels(folder: Path) -> list[str] | None:
    """A classifier's labels in its output order (config.json ``id2label``), or None."""

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        id2label = config.get("id2label") or {}
        return [str(id2label[k]) for k in sorted(id2label, key=int)] or None
    except (OSError, ValueError, TypeError):
        return None


def resolve_model(ref: str) -> tuple[Path, str]:
    """A model named on the command line: a folder (its absolute path goes into the draft) or
    ``package:NAME/sub`` (kept as written, so the protocol stays portable)."""

    folder = resolve(Path.cwd() / "command-line", ref)
    if folder is None or not folder.is_dir():
        raise WorkloadError(f"--model: {ref} is not a model folder",
                            hint="give a local Hugging Face folder or package:NAME/sub/folder")
    return folder, ref if ref.startswith(PACKAGE_PREFIX) else str(folder.resolve())


def prepare_for_model(source: str | Path, out: str | Path, *, model: str, **options: Any) -> dict[str, Any]:
    """``iteralab prepare``: token counts by ``model``'s own tokenizer, then :func:`plan.prepare.prepare_corpus`
    (or, for ``task="generation"``, :func:`plan.prepare_generation.prepare_generation`)."""

    folder, ref = resolve_model(model)
    tokenizer = load_tokenizer(folder)
    info = {"model": ref, "class": type(tokenizer).__name__, "files": tokenizer_hashes(folder)}
    rules = KIND_RULES.get(options.get("task") or "classification")
    if rules is not None and rules.prompts:
        kept = {k: v for k, v in options.items() if k not in ("task", "label_column")}  # no labels to read
        return prepare_generation(source, out, token_length=token_counter(tokenizer), tokenizer=info, model_ref=ref,
                                  model_kind=generation_kind(folder), **kept)
    kind = "encoder" if rules is not None and rules.vectors else model_kind(folder)
    order = model_labels(folder) if kind == "hf_classifier" else None
    return prepare_corpus(source, out, token_length=token_counter(tokenizer), tokenizer=info, model_ref=ref,
                          model_kind=kind, class_order=order, **options)
