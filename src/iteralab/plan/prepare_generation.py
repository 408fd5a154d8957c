"""C2 + P4 for a generation job (``iteralab prepare --task generation``): the stratified final corpus, a disjoint
tuning split and a draft protocol whose prompt and length rules are drafted from the corpus.

A generation corpus has a text and a reference answer per document (``--reference-column``), and may have other
columns (a question, a title). The draft's prompt template names ``{text}`` and each other column of the file, one
line each, and ends with the reference column's name (``"{text}\\nQuestion: {question}\\nAnswer:"``), unless
``--prompt`` gives one. Every document's prompt is rendered from that template and counted with the model's own
tokenizer, so the length strata are those ``lock`` checks (the rendered prompt's tokens, not the bare text's).
The length rules come from the data: ``max_new_tokens`` from the longest reference answer, ``model.max_length``
from the longest prompt, ``stop = ["\\n"]`` when no reference answer holds a line break, and the metric from the
answers' lengths (``exact_match`` for short answers, ``token_f1`` otherwise). The files hold id, text, an empty
label, the reference answers, the columns the prompt names and the stratum; the other steps are
:mod:`iteralab.plan.prepare`'s (the same draw, the same refusals, byte-identical files for the same seed).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import math
import os
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from string import Template
from typing import Any

import pyarrow.parquet as pq

from iteralab.common.files import sha256_file, write_bytes_atomic
from iteralab.errors import CorpusError
from iteralab.plan.corpus import load_corpus, write_corpus
from iteralab.plan.corpusfile import detect_format
from iteralab.plan.prepare import (COUNTED, DEFAULT_SAMPLE, DEFAULT_STRATA, PREPARE_SCHEMA, Bounds, class_mix,
                                   refuse_edited_draft, toml_string, without_labels, draw_splits, drop_repeated_texts,
                                   parse_sample, parse_strata)
from iteralab.plan.prompting import TEXT_FIELD, render_prompts, template_fields
from iteralab.plan.strata import assign_strata
from iteralab.plan.task import KIND_RULES

#: A generation job's draft (``prepare --task generation``), filled by :func:`draft_generation_protocol`.
GENERATION_DRAFT_TEMPLATE = Path(__file__).with_name("draft_generation.toml.tmpl")
#: Columns never put in a drafted prompt: the corpus's own, and the stratum a previous ``prepare`` wrote.
NOT_PROMPTED = ("id", "text", "label", "stratum")
#: A column name a prompt template can name as ``{name}`` (no braces, no format syntax, no attribute or index).
PROMPTABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_ -]*")
#: Reference answers whose median is at most this many tokens are short answers: the draft's metric is exact_match.
SHORT_ANSWER_TOKENS = 3


def file_columns(path: Path) -> list[str]:
    """The column names of a CSV, JSONL or Parquet corpus file (its header, its first record's keys, its schema)."""
    fmt, compression = detect_format(path)
    if fmt == "parquet":
        return list(pq.ParquetFile(path).schema_arrow.names)
    opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(compression or "", open)
    with io.TextIOWrapper(opener(path, "rb"), encoding="utf-8-sig", newline="" if fmt == "csv" else "\n") as fh:
        if fmt == "csv":
            return next((row for row in csv.reader(fh) if row), [])
        first = next((line for line in fh if line.strip()), "{}")
    try:
        record = json.loads(first)
    except ValueError:
        return []  # the careful read that follows names the line at fault
    return list(record) if isinstance(record, dict) else []


def draft_prompt(columns: Sequence[str], text_column: str, reference_column: str) -> tuple[str, list[str]]:
    """The drafted template: ``{text}``, a line ``Name: {name}`` for each other column a template can name, and the
    reference column's name to answer after; returned with the columns left out of it (names no field can hold)."""
    others = [c for c in columns if c not in (*NOT_PROMPTED, text_column, reference_column)]
    named = [c for c in others if PROMPTABLE.fullmatch(c)]
    lines = [f"{{{TEXT_FIELD}}}", *(f"{_title(c)}: {{{c}}}" for c in named), f"{_title(reference_column)}:"]
    return "\n".join(lines), [c for c in others if c not in named]


def _title(column: str) -> str:
    words = column.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def answer_tokens(token_length: Callable[[list[str]], list[int]], answers: Sequence[str]) -> list[int]:
    """Tokens of each reference answer as a model generates them: the counter's count less the special tokens it
    adds to any text (its count of the empty text)."""
    specials = token_length([""])[0]
    return [max(0, n - specials) for n in token_length(list(answers))]


def length_rules(answers: Sequence[str], tokens: Sequence[int]) -> dict[str, Any]:
    """``max_new_tokens`` (the longest reference answer plus a quarter, at least 4 tokens more: a right answer is
    never cut), the stop strings (a line break, unless an answer holds one) and the metric (``exact_match`` for
    short answers, ``token_f1`` otherwise), each with the sentence the draft shows beside it."""
    longest, median = max(tokens), statistics.median(tokens)
    multiline = any("\n" in a or "\r" in a for a in answers)
    metric = "exact_match" if median <= SHORT_ANSWER_TOKENS else "token_f1"
    return {
        "max_new_tokens": longest + max(4, math.ceil(longest / 4)),
        "answers_note": (f"drafted from the reference answers: the longest has {longest} "
                         f"token{'' if longest == 1 else 's'} (median {median:g}) by "
                         "the model's tokenizer; max_new_tokens leaves a quarter more (at least 4)"),
        "stop": [] if multiline else ["\n"],
        "stop_note": ("some reference answers hold line breaks: no stop string drafted" if multiline else
                      "no reference answer holds a line break: an answer ends at the first one"),
        "metric": metric,
        "metric_note": (f"drafted: the median reference answer has {median:g} token{'' if median == 1 else 's'}; "
                        + ("short answers are judged whole" if metric == "exact_match" else
                           "longer answers are judged by their shared words")
                        + "; or token_f1, exact_match, rouge_l, chrf, or metric.routine = \"pkg.mod:fn\""),
        "longest_answer": longest, "median_answer": median,
    }


def draft_generation_protocol(*, name: str, model_ref: str, model_kind: str, reference: str, prompt: str,
                              prompt_note: str, rules: Mapping[str, Any], strata: Bounds, max_length: int,
                              prompts_note: str, columns_note: str) -> str:
    """A generation job's draft: corpus, prompt, strata and length rules filled; every other choice ``"CHOOSE"``."""
    strata_toml = ", ".join(f"{n} = [{lo}]" if hi is None else f"{n} = [{lo}, {hi}]" for n, (lo, hi) in strata.items())
    if model_kind == "callable":
        model = ('kind = "callable"\ncallable = "CHOOSE: package.module:function"   # your generator: a list of '
                 f'prompts in, a list of texts out\npath = {toml_string(model_ref)}   # the tokenizer that counts the tokens')
    else:
        model = f"kind = {toml_string(model_kind)}\npath = {toml_string(model_ref)}"
    return Template(GENERATION_DRAFT_TEMPLATE.read_text(encoding="utf-8")).substitute(
        name=toml_string(name), prompt=toml_string(prompt), prompt_note=prompt_note, max_new_tokens=rules["max_new_tokens"],
        answers_note=rules["answers_note"], stop="[" + ", ".join(toml_string(s) for s in rules["stop"]) + "]",
        stop_note=rules["stop_note"], columns_note=columns_note, reference=toml_string(reference), strata=strata_toml,
        model=model, max_length=max_length, prompts_note=prompts_note, metric=toml_string(rules["metric"]),
        metric_note=rules["metric_note"])


def prepare_generation(source: str | os.PathLike[str], out: str | os.PathLike[str], *,
                       token_length: Callable[[list[str]], list[int]], tokenizer: Mapping[str, Any], model_ref: str,
                       model_kind: str, id_column: str = "id", text_column: str = "text",
                       reference_column: str = "answer", prompt: str | None = None, strata: Bounds | None = None,
                       sample: Mapping[str, int] | None = None, tuning: int | None = None, seed: int = 0,
                       max_length: int | None = None, require_id: bool = False) -> dict[str, Any]:
    """Write final.csv, tuning.csv, prepare.json and a draft protocol.toml for a generation job into ``out``;
    return prepare.json. ``token_length`` counts as a pass does (special tokens included); ``prompt`` replaces the
    drafted template. A folder holding a locked or edited protocol.toml is refused, as by ``prepare_corpus``."""
    source, folder = Path(source), Path(out)
    refuse_edited_draft(folder)
    strata = dict(strata or parse_strata(DEFAULT_STRATA))
    sample = dict(sample or parse_sample(DEFAULT_SAMPLE, strata))
    columns = file_columns(source) if source.is_file() else []
    if source.is_file() and reference_column not in columns:
        raise CorpusError(f"{source}: no column {reference_column!r} for the reference answers (columns: "
                          f"{', '.join(map(repr, columns))})", hint="name it with --reference-column")
    drafted, skipped = draft_prompt(columns, text_column, reference_column)
    template = prompt or drafted
    named = _prompt_columns(template, reference_column, columns, source)
    loaded = load_corpus(source, id_column=id_column, text_column=text_column, label_column="label",
                         require_labels=False, extra_columns=[reference_column, *named], duplicate_texts="skip",
                         require_id=require_id)
    cells = {name: dict(zip(loaded.ids, values)) for name, values in loaded.columns.items()}
    corpus, left_out = drop_repeated_texts(loaded)
    corpus = without_labels(corpus)  # a generation corpus has reference answers, never labels
    left_out = [{"reason": note} for note in loaded.notes] + left_out
    answers = [cells[reference_column][i] for i in corpus.ids]
    missing = [i for i, a in zip(corpus.ids, answers) if a is None or not str(a).strip()]
    if missing:
        raise CorpusError(f"{source}: id {missing[0]!r} has no reference answer in column {reference_column!r} "
                          f"({len(missing)} such rows)", hint="give every document its reference answer, or leave "
                                                              "those rows out of the source")
    prompts = render_prompts(template, list(corpus.texts), {n: [cells[n][i] for i in corpus.ids] for n in named})
    lengths = token_length(prompts)
    splits = draw_splits(corpus, lengths, strata, sample, tuning_size=tuning, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    for file, part in (("final.csv", splits.final), ("tuning.csv", splits.tuning)):
        extra = {name: [cells[name][i] for i in part.ids] for name in dict.fromkeys([reference_column, *named])}
        write_corpus(part, folder / file, extra={**extra, "stratum": [splits.strata[i] for i in part.ids]})
    kept = [*splits.final.ids, *splits.tuning.ids]
    rules = length_rules([str(cells[reference_column][i]) for i in kept],
                         answer_tokens(token_length, [str(cells[reference_column][i]) for i in kept]))
    longest_prompt = max(splits.n_tokens[i] for i in kept)
    prompt_note = ("given with --prompt; the strata count it, so prepare again to change it"
                   if prompt else f"drafted from the columns of {source.name}" + (
                       f" ({', '.join(map(repr, skipped))} left out: no template field can name them)" if skipped
                       else "") + "; the strata count this prompt, so change it with prepare --prompt")
    columns_note = (f"from {source.name}: id = {id_column!r}" if corpus.id_origin == "data" else
                    f"from {source.name}: no {id_column!r} column, ids derived from the texts (t- + sha256)")
    columns_note += f", text = {text_column!r}, reference answers = {reference_column!r}"
    draft = draft_generation_protocol(
        name=f"{source.stem}-{Path(model_ref).name or 'model'}", model_ref=model_ref, model_kind=model_kind,
        reference=reference_column, prompt=template, prompt_note=prompt_note, rules=rules, strata=strata,
        max_length=max(max_length or 0, longest_prompt),
        prompts_note=f"the longest rendered prompt has {longest_prompt} tokens, {COUNTED}", columns_note=columns_note)
    write_bytes_atomic(folder / "protocol.toml", draft.encode("utf-8"))
    record = {
        "schema_version": PREPARE_SCHEMA, "task": "generation",
        "source": {"file": str(source), "sha256": sha256_file(source), "size_bytes": source.stat().st_size,
                   "records": len(loaded) + len(loaded.notes), "id_origin": corpus.id_origin,
                   "columns": {"id": id_column, "text": text_column, "reference": reference_column}},
        "tokenizer": {**tokenizer, "counted": COUNTED},
        "prompt": {"template": template, "drafted": prompt is None, "columns": named, "longest_tokens": longest_prompt},
        "answers": {"longest_tokens": rules["longest_answer"], "median_tokens": rules["median_answer"],
                    "max_new_tokens": rules["max_new_tokens"], "stop": rules["stop"], "metric": rules["metric"]},
        "strata": {n: [lo, hi] for n, (lo, hi) in strata.items()},
        "sample": sample, "tuning_size": len(splits.tuning), "seed": seed, "max_length": max_length, "classes": [],
        "counts": {"source": class_mix(corpus, dict(zip(corpus.ids, assign_strata(lengths, strata, names=corpus.ids)))),
                   "final": class_mix(splits.final, splits.strata), "tuning": class_mix(splits.tuning, splits.strata)},
        "left_out": left_out,
        "files": {name: sha256_file(folder / name) for name in ("final.csv", "tuning.csv", "protocol.toml")},
    }
    write_bytes_atomic(folder / "prepare.json",
                       (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))
    return record


def _prompt_columns(template: str, reference: str, columns: Sequence[str], source: Path) -> list[str]:
    """The corpus columns a template names besides the text, each refused in one line when the file lacks it or
    when it is the reference answers' column."""
    try:
        named = [n for n in template_fields(template) if n != TEXT_FIELD]
    except ValueError as exc:
        raise CorpusError(f"--prompt: not a prompt template ({exc})",
                          hint="write {{ and }} for literal braces") from None
    if TEXT_FIELD not in template_fields(template):
        raise CorpusError("--prompt: the template never names {text}", hint="every document's text must enter its "
                                                                            "prompt, e.g. --prompt 'Summarise: {text}'")
    if reference in named:
        raise CorpusError(f"--prompt names {{{reference}}}, the reference answers' column: a prompt holding its answer "
                          "measures nothing", hint="name another column")
    absent = [n for n in named if columns and n not in columns]
    if absent:
        raise CorpusError(f"--prompt names {{{absent[0]}}}: {source} has no column {absent[0]!r}",
                          hint=f"the file's columns: {', '.join(columns)}")
    return list(dict.fromkeys(named))


def generation_options(task: str, reference_column: str | None, prompt: str | None) -> dict[str, Any]:
    """The keywords only a generation job's ``prepare`` takes (the reference column defaults to ``answer``);
    given with another ``--task``, refused in one line."""
    if task in KIND_RULES and KIND_RULES[task].prompts:
        return {"reference_column": reference_column or "answer", "prompt": prompt}
    given = [flag for flag, value in (("--reference-column", reference_column), ("--prompt", prompt)) if value]
    if given:
        raise CorpusError(f"{given[0]} is for --task generation (this is --task {task})",
                          hint="add --task generation, or leave the option out")
    return {}


def generation_lines(record: Mapping[str, Any], out: Path) -> list[str]:
    """What ``prepare --task generation`` prints: the draw, the drafted prompt and length rules, what comes next."""
    lines = [f"final {name}: {sum(mix.values())} texts" for name, mix in record["counts"]["final"].items()]
    lines.append(f"tuning: {record['tuning_size']} texts, disjoint from final by id and text")
    if record["left_out"]:
        lines.append(f"left out: {len(record['left_out'])} repeated texts (see prepare.json)")
    p, a = record["prompt"], record["answers"]
    lines.append(f"prompt: {json.dumps(p['template'], ensure_ascii=False)} ("
                 f"{'drafted from the corpus columns' if p['drafted'] else 'given with --prompt'}; the longest has "
                 f"{p['longest_tokens']} tokens)")
    lines.append(f"reference answers: the longest has {a['longest_tokens']} tokens, the median {a['median_tokens']:g}: "
                 f"max_new_tokens {a['max_new_tokens']}, stop {json.dumps(a['stop'])}, metric {a['metric']}")
    draft = out / "protocol.toml"
    lines.append(f"written: {out / 'final.csv'}, {out / 'tuning.csv'}, {out / 'prepare.json'}, {draft}")
    lines.append(f"next: name your callable in {draft} if its [model] says CHOOSE, iteralab threshold {draft} (the "
                 f"model on the tuning split, a suggested threshold), make each CHOOSE in it, then iteralab lock "
                 f"{draft}")
    return lines
