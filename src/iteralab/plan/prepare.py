"""C2 + P4 for any corpus: token-length strata, the stratified final corpus and a disjoint tuning split.

Reads a CSV/JSONL/Parquet source and the token count of each text (by the chosen model's tokenizer, given as a
function: the tokenizer itself lives behind ``models/``); writes ``final.csv``, ``tuning.csv`` (id, text, label,
stratum), ``prepare.json`` (what was done, to reproduce it) and a draft ``protocol.toml`` whose remaining
choices are marked ``"CHOOSE"`` (strings where numbers belong, so the draft cannot be locked before they are
made). The same seed on the same source gives byte-identical files. The demo draws its split with this code.

``task = "embedding"`` prepares an embedding job's corpus: the label column is optional. When every text has a
label and there are at least two classes, the draft keeps them (``knn_accuracy``, a subgroup per class);
otherwise the files carry no labels, the draft declares ``classes = []`` and judges the job by ``recall_at_k``
over a queries file the user writes (``plan.queries.load_queries``). With ``queries`` (a queries file), the
corpus is cut together with its queries instead (``plan.prepare_queries``): ``final.csv`` + ``queries.csv`` and
``tuning.csv`` + ``tuning_queries.csv``, and the draft judges the job by ``recall_at_k`` (``ndcg_at_k`` when the
file gives grades).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from string import Template
from typing import Any

from iteralab.common.files import sha256_file, write_bytes_atomic
from iteralab.errors import CorpusError
from iteralab.plan.corpus import Corpus, check_disjoint, load_corpus, text_fingerprint, write_corpus
from iteralab.plan.lockfile import lock_path
from iteralab.plan.prepare_queries import DEFAULT_DISTRACTORS, QueryCut, cut_with_queries, write_queries_file
from iteralab.plan.queries import load_queries
from iteralab.plan.strata import assign_strata, stratified_sample
from iteralab.plan.task import KIND_RULES

PREPARE_SCHEMA = 1
DEFAULT_STRATA = "short=0-30,medium=31-50,long=51-"
DEFAULT_SAMPLE = "short=600,medium=300,long=100"
COUNTED = "special tokens included, no truncation (as a pass tokenizes)"
Bounds = Mapping[str, tuple[int, int | None]]
#: The draft protocol with ``$name`` placeholders (``string.Template``), filled by ``draft_protocol``.
DRAFT_TEMPLATE = Path(__file__).with_name("draft.toml.tmpl")
#: An embedding job's draft (``prepare --task embedding``), filled by ``draft_embedding_protocol``.
EMBEDDING_DRAFT_TEMPLATE = Path(__file__).with_name("draft_embedding.toml.tmpl")
#: The kinds of job ``prepare`` drafts a protocol for.
PREPARE_TASKS = ("classification", "embedding")


def parse_strata(text: str) -> dict[str, tuple[int, int | None]]:
    """``short=0-30,medium=31-50,long=51-`` → token bounds, inclusive; an empty maximum is open-ended."""
    out: dict[str, tuple[int, int | None]] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(\d+)\s*-\s*(\d*)\s*", part)
        if not m:
            raise CorpusError(f"--strata: {part.strip()!r} is not NAME=MIN-MAX or NAME=MIN- (token counts)",
                              hint=f"e.g. --strata {DEFAULT_STRATA}")
        name, lo, hi = m.group(1), int(m.group(2)), m.group(3)
        if name in out:
            raise CorpusError(f"--strata: stratum {name!r} is given twice")
        out[name] = (lo, int(hi) if hi else None)
    assign_strata([], out)  # refuses overlaps and gaps
    return out


def parse_sample(text: str, strata: Bounds) -> dict[str, int]:
    """``short=600,medium=300,long=100`` → texts per stratum; every stratum named, none unknown."""
    out: dict[str, int] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(\d+)\s*", part)
        if not m:
            raise CorpusError(f"--sample: {part.strip()!r} is not NAME=COUNT", hint=f"e.g. --sample {DEFAULT_SAMPLE}")
        out[m.group(1)] = int(m.group(2))
    unknown = [n for n in out if n not in strata]
    missing = [n for n in strata if n not in out]
    if unknown or missing:
        raise CorpusError(f"--sample: strata {', '.join(unknown or missing)} "
                          + ("are not in --strata" if unknown else "have no count"),
                          hint="give one count per stratum of --strata")
    return {n: out[n] for n in strata}


def _bounds_text(lo: int, hi: int | None) -> str:
    return f"≥ {lo}" if hi is None else f"{lo}-{hi}"


@dataclass(frozen=True)
class Splits:
    """The final comparison corpus, the disjoint tuning split, and the stratum and token count of every id
    of the source (after duplicates are left out)."""

    final: Corpus
    tuning: Corpus
    strata: dict[str, str]
    n_tokens: dict[str, int]


def draw_splits(corpus: Corpus, lengths: Sequence[int], strata: Bounds, counts: Mapping[str, int], *,
                tuning_size: int | None, seed: int) -> Splits:
    """The final corpus takes ``counts[s]`` texts of each stratum with that stratum's class mix (largest
    remainder); the tuning split takes ``tuning_size`` of the other texts (default: what remains, capped at the
    final size) with their class mix. Both depend only on the seed and the set of records."""
    lengths = list(lengths)
    if len(lengths) != len(corpus):
        raise CorpusError(f"{corpus.source}: the token counter returned {len(lengths)} counts for {len(corpus)} texts")
    ids = corpus.ids
    strata_of = dict(zip(ids, assign_strata(lengths, strata, names=ids)))
    available = Counter(strata_of.values())
    for name, wanted in counts.items():
        if wanted > available.get(name, 0):
            lo, hi = strata[name]
            raise CorpusError(f"{corpus.source}: {name}: {wanted} wanted, {available.get(name, 0)} texts have "
                              f"{_bounds_text(lo, hi)} tokens; lower the bound or the count")
    final = stratified_sample(corpus, strata_of, counts, seed)
    chosen = set(final.ids)
    rest = corpus.subset(i for i in ids if i not in chosen)
    size = min(len(rest), len(final)) if tuning_size is None else tuning_size
    if size > len(rest):
        raise CorpusError(f"{corpus.source}: a tuning sample of {size} needs texts outside the final corpus, "
                          f"only {len(rest)} are left", hint="lower the tuning size or the final counts")
    tuning = stratified_sample(rest, dict.fromkeys(rest.ids, "tuning"), {"tuning": size}, seed)
    final = Corpus(final.records, f"{corpus.source} [final, stratified, seed {seed}]", corpus.id_origin, corpus.notes)
    tuning = Corpus(tuning.records, f"{corpus.source} [tuning, seed {seed}]", corpus.id_origin, corpus.notes)
    check_disjoint(tuning, final)
    n_tokens = dict(zip(ids, lengths))
    kept = [*final.ids, *tuning.ids]
    return Splits(final, tuning, {i: strata_of[i] for i in kept}, {i: n_tokens[i] for i in kept})


def write_splits(splits: Splits, folder: Path) -> None:
    """``final.csv`` and ``tuning.csv``: id, text, label, stratum (atomic writes)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("final.csv", splits.final), ("tuning.csv", splits.tuning)):
        write_corpus(part, folder / name, extra={"stratum": [splits.strata[i] for i in part.ids]})


def drop_repeated_texts(corpus: Corpus) -> tuple[Corpus, list[dict[str, str]]]:
    """Keep the first record of each whitespace-normalised text, so that no text can land on both sides of
    the split (P4); return what was left out and why."""
    first: dict[str, str] = {}
    kept, left_out = [], []
    for r in corpus.records:
        fp = text_fingerprint(r.text)
        if fp in first:
            left_out.append({"id": r.id, "line": str(r.line), "reason": f"same text as {first[fp]}"})
            continue
        first[fp] = r.id
        kept.append(r)
    return Corpus(tuple(kept), corpus.source, corpus.id_origin, corpus.notes), left_out


def class_mix(corpus: Corpus, strata_of: Mapping[str, str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in corpus.records:
        cell = out.setdefault(strata_of[r.id], {})
        label = "(no label)" if r.label is None else str(r.label)
        cell[label] = cell.get(label, 0) + 1
    return {s: dict(sorted(c.items())) for s, c in sorted(out.items())}


def toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def draft_protocol(*, name: str, model_ref: str, model_kind: str, classes: Sequence[str], strata: Bounds,
                   max_length: int | None, columns_note: str) -> str:
    """A protocol with the corpus, classes and strata filled; every other choice marked ``"CHOOSE"``."""
    strata_toml = ", ".join(f"{n} = [{lo}]" if hi is None else f"{n} = [{lo}, {hi}]" for n, (lo, hi) in strata.items())
    head = ('head = "head.safetensors"   # train it on the tuning split only: iteralab head train --model '
            f'{model_ref} --tuning tuning.csv --out head.safetensors\n') if model_kind == "encoder_head" else ""
    return Template(DRAFT_TEMPLATE.read_text(encoding="utf-8")).substitute(
        name=toml_string(name), columns_note=columns_note, classes=", ".join(toml_string(c) for c in classes),
        strata=strata_toml, model_kind=toml_string(model_kind), model_ref=toml_string(model_ref), head=head,
        max_length=max_length or 256)


def draft_embedding_protocol(*, name: str, model_ref: str, classes: Sequence[str], strata: Bounds,
                             max_length: int | None, columns_note: str, queries: str | None = None) -> str:
    """An embedding job's draft: the corpus and strata filled, the labels' metric (``knn_accuracy``) when the corpus
    has classes, else ``recall_at_k`` over a queries file to write; with ``queries`` (the metric prepare cut the
    queries for: ``recall_at_k`` or ``ndcg_at_k``), that metric over the written queries files; every other choice
    marked ``"CHOOSE"``."""
    strata_toml = ", ".join(f"{n} = [{lo}]" if hi is None else f"{n} = [{lo}, {hi}]" for n, (lo, hi) in strata.items())
    if queries:
        metric = (f'name = {toml_string(queries)}  # recall_at_k, mrr or ndcg_at_k: the raw table reports all three\n'
                  'k = 10                 # the cut-off: the top 10 documents by cosine\n'
                  'queries = "queries.csv"                # the final queries (prepare --queries)\n'
                  'tuning_queries = "tuning_queries.csv"  # the tuning queries, over tuning.csv (iteralab threshold)')
        class_subgroup = ""
        note = f"   # judged by {queries} over the queries prepare wrote"
    elif classes:
        metric = 'name = "knn_accuracy"\nk = 10                 # neighbours of the leave-one-out label vote'
        class_subgroup = '\n[[subgroups]]\nname = "class"\nby = "label"\ngating = true\n'
        note = ""
    else:
        metric = ('name = "recall_at_k"\nk = 10                 # the cut-off: the top 10 documents by cosine\n'
                  'queries = "queries.csv"  # CHOOSE: write it: query_id, text, relevant_ids (ids joined by ";")')
        class_subgroup = ""
        note = "   # no labels: judged by recall_at_k (or your own metric.routine)"
    return Template(EMBEDDING_DRAFT_TEMPLATE.read_text(encoding="utf-8")).substitute(
        name=toml_string(name), columns_note=columns_note, classes=", ".join(toml_string(c) for c in classes), classes_note=note,
        strata=strata_toml, model_ref=toml_string(model_ref), max_length=max_length or 256, metric=metric,
        class_subgroup=class_subgroup)


def _query_splits(corpus: Corpus, lengths: Sequence[int], strata: Bounds, cut: QueryCut, queries: Path,
                  folder: Path) -> Splits:
    """The splits of a corpus cut with its queries (``plan.prepare_queries``), written with both queries files."""
    strata_of = dict(zip(corpus.ids, assign_strata(list(lengths), strata, names=corpus.ids)))
    n_tokens = dict(zip(corpus.ids, lengths))
    kept = [*cut.final.ids, *cut.tuning.ids]
    splits = Splits(cut.final, cut.tuning, {i: strata_of[i] for i in kept}, {i: n_tokens[i] for i in kept})
    write_splits(splits, folder)
    write_queries_file(queries, cut.final_queries, folder / "queries.csv")
    write_queries_file(queries, cut.tuning_queries, folder / "tuning_queries.csv")
    return splits


def _counts(corpus: Corpus, splits: Splits, lengths: Sequence[int], strata: Bounds) -> dict[str, Any]:
    """prepare.json's counts: the class mix of each stratum in the source, the final corpus and the tuning split."""
    source_strata = dict(zip(corpus.ids, assign_strata(list(lengths), strata, names=corpus.ids)))
    return {"source": class_mix(corpus, source_strata), "final": class_mix(splits.final, splits.strata),
            "tuning": class_mix(splits.tuning, splits.strata)}


def without_labels(corpus: Corpus) -> Corpus:
    """The corpus with no record's label (an embedding job's corpus whose labels are absent or incomplete)."""
    return Corpus(tuple(replace(r, label=None) for r in corpus.records), corpus.source, corpus.id_origin, corpus.notes)


def refuse_edited_draft(folder: Path) -> None:
    """``prepare`` writes a new draft: never over a locked protocol, nor over a draft edited since ``prepare``
    wrote it (prepare.json records the sha256 of the draft it wrote)."""
    draft = folder / "protocol.toml"
    if lock_path(draft).exists():
        raise CorpusError(f"{draft}: a locked protocol is in this folder; prepare never writes over it",
                          hint="choose another --out folder")
    if not draft.is_file():
        return
    try:
        written = json.loads((folder / "prepare.json").read_text(encoding="utf-8"))["files"]["protocol.toml"]
    except (OSError, ValueError, KeyError, TypeError):
        written = None
    if written != sha256_file(draft):
        raise CorpusError(f"{draft}: edited since prepare wrote it (or not written by prepare); prepare never "
                          "writes over it", hint="choose another --out folder, or move the file away first")


def prepare_corpus(source: str | os.PathLike[str], out: str | os.PathLike[str], *,
                   token_length: Callable[[list[str]], list[int]], tokenizer: Mapping[str, Any],
                   model_ref: str, model_kind: str, id_column: str = "id", text_column: str = "text",
                   label_column: str = "label", strata: Bounds | None = None, sample: Mapping[str, int] | None = None,
                   tuning: int | None = None, seed: int = 0, max_length: int | None = None,
                   class_order: Sequence[str] | None = None, require_id: bool = False,
                   task: str = "classification", queries: str | os.PathLike[str] | None = None,
                   query_sample: int | None = None, tuning_queries: int | None = None,
                   distractors: int = DEFAULT_DISTRACTORS) -> dict[str, Any]:
    """Write final.csv, tuning.csv, prepare.json and a draft protocol.toml into ``out``; return prepare.json.
    ``require_id``: the id column was named on purpose, so a file without it is refused (never ids derived from
    the texts because of a misspelt header). A folder holding a locked or edited protocol.toml is refused.
    ``task``: ``"embedding"`` drafts an embedding job, on a corpus with or without labels (module docstring);
    ``queries``: its queries file, cut with the corpus (``plan.prepare_queries``: ``query_sample`` final and
    ``tuning_queries`` tuning queries, ``distractors`` other documents)."""
    if task not in PREPARE_TASKS:
        raise CorpusError(f"--task: {task!r} is not one of {', '.join(PREPARE_TASKS)}")
    embedding = KIND_RULES[task].vectors  # a corpus turned into vectors: labels optional, queries cut with it
    if queries is not None and not embedding:
        raise CorpusError("--queries: a queries file is for an embedding job's ranking metrics",
                          hint="add --task embedding")
    queries_read = load_queries(queries) if queries is not None else None
    source = Path(source)
    folder = Path(out)
    refuse_edited_draft(folder)
    strata = dict(strata or parse_strata(DEFAULT_STRATA))
    sample = dict(sample or ({} if queries is not None else parse_sample(DEFAULT_SAMPLE, strata)))
    loaded = load_corpus(source, id_column=id_column, text_column=text_column, label_column=label_column,
                         duplicate_texts="skip", require_id=require_id, require_labels=not embedding)
    corpus, left_out = drop_repeated_texts(loaded)
    left_out = [{"reason": note} for note in loaded.notes] + left_out
    classes = sorted({str(label) for label in corpus.labels if label is not None})
    if embedding and (len(classes) < 2 or None in corpus.labels or queries_read is not None):
        # labels are used only when every text has one, and never beside queries (the job is a ranking)
        corpus, classes = without_labels(corpus), []
    if class_order is not None and set(class_order) == set(classes):
        classes = list(class_order)  # the classifier's own output order, so the draft matches the model
    if len(classes) < 2 and not embedding:
        raise CorpusError(f"{source}: label column {label_column!r} holds a single class ({classes[0]!r}); a "
                          "comparison of classifiers needs at least two", hint="check --label-column")
    lengths = token_length(list(corpus.texts))
    cut = None
    if queries_read is not None:
        cut = cut_with_queries(corpus, queries_read, query_sample=query_sample, tuning_queries=tuning_queries,
                               distractors=distractors, seed=seed)
        splits = _query_splits(corpus, lengths, strata, cut, Path(queries_read.source), folder)
        left_out += list(cut.left_out)
    else:
        splits = draw_splits(corpus, lengths, strata, sample, tuning_size=tuning, seed=seed)
        write_splits(splits, folder)
    written = ["final.csv", "tuning.csv", "protocol.toml", *(["queries.csv", "tuning_queries.csv"] if cut else [])]
    columns_note = (f"from {source.name}: id = {id_column!r}" if corpus.id_origin == "data" else
                    f"from {source.name}: no {id_column!r} column, ids derived from the texts (t- + sha256)")
    columns_note += f", text = {text_column!r}, label = {label_column!r}" if classes else \
        f", text = {text_column!r}, no labels"
    name = f"{source.stem}-{Path(model_ref).name or 'model'}"
    ranking = None if queries_read is None else "ndcg_at_k" if queries_read.grades is not None else "recall_at_k"
    common = dict(name=name, model_ref=model_ref, classes=classes, strata=strata, max_length=max_length,
                  columns_note=columns_note)
    draft = draft_embedding_protocol(**common, queries=ranking) if embedding else \
        draft_protocol(**common, model_kind=model_kind)
    write_bytes_atomic(folder / "protocol.toml", draft.encode("utf-8"))
    record = {
        "schema_version": PREPARE_SCHEMA,
        "source": {"file": str(source), "sha256": sha256_file(source), "size_bytes": source.stat().st_size,
                   "records": len(loaded) + len(loaded.notes), "id_origin": corpus.id_origin,
                   "columns": {"id": id_column, "text": text_column, "label": label_column}},
        "tokenizer": {**tokenizer, "counted": COUNTED},
        "strata": {n: [lo, hi] for n, (lo, hi) in strata.items()},
        "sample": sample, "tuning_size": len(splits.tuning), "seed": seed, "max_length": max_length,
        "classes": classes, **({"task": task} if embedding else {}),
        **({"queries": cut.record(distractors)} if cut else {}),
        "counts": _counts(corpus, splits, lengths, strata),
        "left_out": left_out,
        "files": {name: sha256_file(folder / name) for name in written},
    }
    write_bytes_atomic(folder / "prepare.json",
                       (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))
    return record


#: A suggested threshold is a metric measured on the tuning split minus this margin, rounded down.
THRESHOLD_MARGIN = 0.05


def suggest_threshold(measured: float, metric: str, where: str) -> tuple[float, str]:
    """The minimum quality suggested from ``measured`` (``metric`` on the tuning split ``where``, P4): the value
    minus :data:`THRESHOLD_MARGIN`, rounded down to two decimals; returned with how it was made, in words. The
    one rule of ``iteralab head train`` and ``iteralab threshold``."""
    # rounded to 9 decimals before the floor: 0.86 - 0.05 is 0.80999… in binary and must give 0.81, not 0.80
    suggested = max(0.0, math.floor(round((measured - THRESHOLD_MARGIN) * 100, 9)) / 100)
    return suggested, f"{metric} {measured:.4f} on {where} minus {THRESHOLD_MARGIN}, rounded down"


def record_suggestion(folder: Path, head: Mapping[str, Any]) -> bool:
    """After ``iteralab head train`` on a prepared tuning split: the head and its suggested threshold go into
    prepare.json, and beside the draft's still-unchosen threshold as a comment. False when ``folder`` holds no
    prepare.json (a tuning file of the user's own)."""
    record_path = folder / "prepare.json"
    if not record_path.is_file():
        return False
    record = json.loads(record_path.read_text(encoding="utf-8"))
    record["head"] = dict(head)
    draft = folder / "protocol.toml"
    if draft.is_file():
        text = draft.read_text(encoding="utf-8")
        marker = 'threshold = "CHOOSE"'
        if marker in text:
            note = f"# suggested threshold {head['suggested_threshold']:.2f}: {head['how']} (iteralab head train)\n"
            text = "\n".join(line for line in text.split("\n") if not line.startswith("# suggested threshold"))
            text = text.replace(marker, note + marker, 1)
            write_bytes_atomic(draft, text.encode("utf-8"))
        record.setdefault("files", {})["protocol.toml"] = sha256_file(draft)
    write_bytes_atomic(record_path, (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
                       .encode("utf-8"))
    return True
