"""Generation jobs beyond one local device, and prompts that name other corpus columns: a data-parallel pass and a
Ray pass write the one-device pass's text file (corpus order, the same texts, tokens and finish reasons); lock
checks and counts the columns a prompt names, and the pass renders them."""

from __future__ import annotations

import csv
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from iteralab.errors import CorpusError
from generation_jobs import causal, generation_toml, rows_of

TITLES = ("rain", "one", "a day", "one", "the cat", "blue")
TEMPLATE = 'prompt = "Q: {text} T: {title}"'
WITH_COUNTS = 'kind = "callable"\ncallable = "fake_generators:with_counts"'


def titled_corpus(folder: Path, n: int = 12, *, title: bool = True) -> list[tuple[str, str, str]]:
    """A corpus of id, text, title (when ``title``) and answer; returns (id, text, title) of each row."""
    rows = [(f"d{i}", ("what is the answer", "a good movie", "the dog sat on the mat")[i % 3], TITLES[i % len(TITLES)])
            for i in range(n)]
    with (folder / "corpus.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", *(["title"] if title else []), "answer"])
        for rid, text, name in rows:
            writer.writerow([rid, text, *([name] if title else []), name])
    return rows


def titled_job(folder: Path, model: str, *, variants: str = "", reference: str = "b1", passes: int = 1,
               **kwargs) -> Path:
    kwargs.setdefault("generation", TEMPLATE)
    text = generation_toml(model, variants=variants, **kwargs).replace(
        'reference_variant = "b1"', f'reference_variant = "{reference}"').replace("passes = 2", f"passes = {passes}")
    path = folder / "protocol.toml"
    path.write_text(text, encoding="utf-8")
    return path


def run_titled(folder: Path, model: str, **kwargs) -> Path:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    protocol = titled_job(folder, model, **kwargs)
    lock(protocol)
    out = folder / "camp"
    run_campaign(protocol, out)
    return out


# ------------------------------------------------------------------------- prompts that name other columns


def test_lock_refuses_a_prompt_column_the_corpus_lacks_in_one_line(tmp_path):
    from iteralab.lock.inputs import lock

    titled_corpus(tmp_path, title=False)
    protocol = titled_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:last_words"')
    with pytest.raises(CorpusError) as info:
        lock(protocol)
    message = str(info.value)
    assert "corpus.csv" in message and "no column 'title'" in message and "{title}" in message
    assert "\n" not in message and "generation.prompt" in (info.value.hint or "")
    assert not list(tmp_path.glob("*.lock.json"))


def test_the_cli_says_a_missing_prompt_column_in_one_line_and_a_hint(tmp_path, capsys):
    from iteralab.cli import main

    titled_corpus(tmp_path, title=False)
    protocol = titled_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:last_words"')
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"Error: {tmp_path / 'corpus.csv'} line 1: no column 'title', which generation.prompt names "
                      "as {title} (columns found: 'id', 'text', 'answer')")
    assert err[1].startswith("Hint: add the column 'title' to the corpus file") and len(err) == 2


def test_lock_counts_the_prompt_rendered_with_its_columns(tmp_path, tiny_causal_lm):
    from iteralab.lock.inputs import lock

    rows = titled_corpus(tmp_path)
    long_title = " ".join(["the"] * 12)
    with (tmp_path / "corpus.csv").open("a", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerow(["d99", "a good movie", long_title, "movie"])
    # "<bos> Q : <text> T : <title>", one token a word: the longest text (6) with a two-word title is 13 tokens;
    # the row whose title has twelve words is 1 + 2 + 3 + 2 + 12 = 20, though its text alone is short
    protocol = titled_job(tmp_path, causal(tiny_causal_lm), max_length=14)
    with pytest.raises(CorpusError, match="id 'd99': the rendered prompt has 20 tokens, over model.max_length = 14"):
        lock(protocol)
    titled_corpus(tmp_path, n=len(rows))
    lock(protocol)


def test_the_pass_renders_the_columns_a_prompt_names(tmp_path, tiny_chain_lm):
    from iteralab.campaign.kinds.generation.output import read_texts

    # the rigged model follows the prompt's last token: a title "one" is answered "two three" (then eos), any
    # other title "la la la" to the limit; the text alone never ends in "one"
    rows = titled_corpus(tmp_path)
    out = run_titled(tmp_path, causal(tiny_chain_lm), max_new_tokens=3, generation=TEMPLATE + "\nallow_empty = true")
    (row,) = [r for r in rows_of(out).values() if r.variant == "b1"]
    assert row.status == "ok" and row.ids_match and row.format_ok, row.notes
    texts = read_texts(out / row.prediction_file, max_new_tokens=3, allow_empty=True)
    expected = ["two three" if name == "one" else "la la la" for _, _, name in rows]
    assert texts.texts.to_pylist() == expected
    assert texts.finish.tolist() == [1 if name == "one" else 2 for _, _, name in rows]  # eos, length


def test_a_scan_tallies_only_the_columns_it_is_asked_to(tmp_path):
    """A reference answer or a prompt's cells hold a value per document: lock reads them without a tally."""
    from iteralab.lock.inputs import tallied
    from iteralab.plan.protocol import parse_protocol
    from iteralab.plan.scan import scan_corpus

    rows = titled_corpus(tmp_path)
    path = tmp_path / "corpus.csv"
    everything = scan_corpus(path, classes=[], require_labels=False, extra_columns=["title", "answer"])
    titles = [title for _, _, title in rows]
    assert everything.extra_counts["title"] == {title: titles.count(title) for title in sorted(set(titles))}
    protocol = parse_protocol(titled_job(tmp_path, 'kind = "callable"\ncallable = "m:f"').read_text())
    assert tallied(protocol) == []  # no strata: nothing tallied
    none = scan_corpus(path, classes=[], require_labels=False, extra_columns=["title", "answer"],
                       counted_columns=tallied(protocol))
    assert none.extra_counts == {} and none.fingerprint == everything.fingerprint


@pytest.mark.parametrize("bucketing", [False, True])
def test_the_measured_pass_renders_each_batch_as_it_reads(tmp_path, bucketing):
    """The prompts are rendered by the measured pass's own run (the region the pass time covers), from the copy's
    prompt columns; the workload is handed the rendered prompts only."""
    from iteralab.campaign.kinds.generation.sink import PromptRenderer
    from iteralab.campaign.engines.passes import MeasuredPass
    from iteralab.models.generation import GeneratedBatch

    copy = tmp_path / "corpus.csv"
    # the shortest text gets the longest title: bucketing by the text alone would put it first
    cells = [("d0", "a long text here", "t0"), ("d1", "short", "a very long title indeed"), ("d2", "mid text", "")]
    with copy.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, quoting=csv.QUOTE_ALL)
        writer.writerow(["id", "text", "label", "prompt.title"])
        writer.writerows([(rid, text, "", title) for rid, text, title in cells])
    seen: list[str] = []

    class Recorder:
        def tokenize(self, prompts):
            return list(prompts)

        def token_lengths(self, prompts):
            return [len(p) for p in prompts]

        def infer(self, prompts):
            seen.extend(prompts)
            return GeneratedBatch(list(prompts), None, ["stop"] * len(prompts))

    pass_run = MeasuredPass()
    pass_run.prompts = PromptRenderer("{text} / {title}")
    pass_run.run(Recorder(), str(copy), {}, 2, bucketing, False, 0)
    rendered = {rid: f"{text} / {title}" for rid, text, title in cells}
    assert sorted(seen) == sorted(rendered.values()) and pass_run.progress.completed == 3
    order = [rendered[i] for i in pass_run.ordered_ids().to_pylist()]
    assert seen == order  # handed over in pass order (bucketed: by the rendered prompt's length)
    assert (seen == sorted(seen, key=len)) is bucketing


def test_the_shard_plan_weighs_each_rendered_prompt(tmp_path, tiny_causal_lm):
    from iteralab.campaign.engines.shards import corpus_lengths
    from iteralab.campaign.records import PassSpec

    copy = tmp_path / "corpus.csv"
    cells = [("d0", "the cat sat on the mat", "one"), ("d1", "red", "the dog and the cat sat on the mat")]
    with copy.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, quoting=csv.QUOTE_ALL)
        writer.writerow(["id", "text", "label", "prompt.title"])
        writer.writerows([(rid, text, "", title) for rid, text, title in cells])
    generation = {"task": "generation", "prompt": "{text} : {title}", "chat_template": False}

    def lengths(**model):
        spec = PassSpec("p", kind="generation", variant={"padding": "longest"}, model={"max_length": 64, "generation": generation,
                                                                      **model},
                        classes=(), corpus_path=str(copy), prediction_dir=str(tmp_path), warmup={})
        found, unit = corpus_lengths(spec)
        return found.tolist(), unit

    # the second text is the shorter, its prompt the longer: the plan weighs what the model reads (<bos>, one
    # token a word and one for ":")
    assert lengths(kind="callable") == ([len(f"{t} : {n}") for _, t, n in cells], "characters")
    assert lengths(kind="hf_causal_lm", path=str(tiny_causal_lm)) == ([1 + 6 + 1 + 1, 1 + 1 + 1 + 9], "tokens")


def test_the_corpus_copy_keeps_the_prompt_columns_apart(tmp_path):
    from iteralab.campaign.folder import read_corpus_batches

    rows = titled_corpus(tmp_path, n=4)
    out = run_titled(tmp_path, 'kind = "callable"\ncallable = "fake_generators:echo_words"')
    batches = list(read_corpus_batches(out / "inputs" / "corpus.csv", ["id", "text", "prompt.title", "reference"]))
    assert [b.column("prompt.title").to_pylist() for b in batches] == [[name for _, _, name in rows]]
    texts_row = next(iter(rows_of(out).values()))
    from iteralab.campaign.kinds.generation.output import read_texts

    stored = read_texts(out / texts_row.prediction_file, max_new_tokens=4, allow_empty=False)
    assert stored.texts.to_pylist() == [f"Q: {text} T: {name}" for _, text, name in rows]


def test_a_rerun_stages_the_prompt_columns_and_renders_the_same_prompts(tmp_path):
    from iteralab.evidence.rerun import rerun

    titled_corpus(tmp_path, n=6)
    out = run_titled(tmp_path, 'kind = "callable"\ncallable = "fake_generators:echo_words"')
    comparison = rerun(out, tmp_path / "again")["comparison"]["variants"]
    assert set(comparison) == {"b1", "b4"}
    assert all(p["common_ids"] == 6 and p["identical"] for v in comparison.values() for p in v["pairs"])


# ------------------------------------------------------------------------- data-parallel and Ray passes

DP_VARIANTS = """
[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-dp2"
batch_size = 4
data_parallel = 2
"""
RAY_VARIANTS = """ray_num_cpus = 2
ray_actors = 2
ray_cpus_per_actor = 0.5
ray_no_progress_timeout_s = 60

[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-ray"
batch_size = 4
engine = "ray"
"""


@pytest.fixture
def worker_path(monkeypatch):
    """Pass workers and Ray actors are fresh interpreters: they import this checkout and
    tests/support/fake_generators.py."""
    import iteralab

    tests, src = (Path(__file__).resolve().parents[2] / "support"), Path(iteralab.__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(src)]))


def _same_file_as_one_device(tmp_path: Path, variants: str, other: str, model: str = WITH_COUNTS,
                             expected: Any = None, **kwargs):
    """Run ``model`` with ``b4`` and ``other``; check ``other``'s file is ``b4``'s, in corpus order, with the texts
    ``expected(text, title)`` gives for each row (default: the callable's upper-cased rendered prompt); return the
    raw rows by variant and the folder."""
    from iteralab.campaign.kinds.generation.output import read_texts

    rows = titled_corpus(tmp_path)
    kwargs.setdefault("max_new_tokens", 16)
    out = run_titled(tmp_path, model, variants=variants, reference="b4", **kwargs)
    by_variant = {r.variant: r for r in rows_of(out).values()}
    files = {name: read_texts(out / by_variant[name].prediction_file, max_new_tokens=kwargs["max_new_tokens"],
                              allow_empty=True) for name in ("b4", other)}
    single, spread = files["b4"], files[other]
    ids = [rid for rid, _, _ in rows]
    expected = expected or (lambda text, title: f"Q: {text} T: {title}".upper())
    assert single.ids.to_pylist() == ids and spread.ids.to_pylist() == ids  # corpus order, every id once
    assert spread.texts.to_pylist() == single.texts.to_pylist() == [expected(t, n) for _, t, n in rows]
    assert spread.tokens.tolist() == single.tokens.tolist() and spread.finish.tolist() == single.finish.tolist()
    assert spread.problem_count == 0 and spread.tokens_measured
    row = by_variant[other]
    assert row.status == "ok" and row.ids_match and row.format_ok and row.corpus_accepted, row.notes
    assert row.identical_share == 1.0
    return by_variant, out


def test_a_data_parallel_generation_pass_writes_the_one_device_file(tmp_path, worker_path):
    from iteralab.campaign.journal import read_journal
    from iteralab.campaign.kinds.generation.output import read_texts

    bucketed = '\n[[variants]]\nname = "b4-dp2-bucketed"\nbatch_size = 4\ndata_parallel = 2\nbucketing = true\n'
    rows, out = _same_file_as_one_device(tmp_path, DP_VARIANTS + bucketed, "b4-dp2")
    finished = read_journal(out / "journal.jsonl").finished[rows["b4-dp2"].pass_id]
    shards = finished["parallel"]["shards"]
    assert len(shards) == 2 and all(s["rows"][1] > s["rows"][0] for s in shards)  # both workers generated
    assert finished["output_kind"] == "generated_texts"
    # bucketed shards: each run in its own length order, the same text for every id, the file in corpus order
    row = rows["b4-dp2-bucketed"]
    assert row.status == "ok" and row.ids_match and row.format_ok and row.identical_share == 1.0, row.notes
    files = [read_texts(out / rows[name].prediction_file, max_new_tokens=16, allow_empty=False)
             for name in ("b4", "b4-dp2-bucketed")]
    single, spread = (dict(zip(f.ids.to_pylist(), f.texts.to_pylist())) for f in files)
    assert spread == single and list(spread) == list(single)  # same texts, and the corpus order restored
    assert row.order_hash != rows["b4"].order_hash  # the shards did run in length order


def test_a_data_parallel_pass_of_a_greedy_model_writes_the_one_device_file(tmp_path, tiny_chain_lm, worker_path):
    # the rigged model (whatever the numerics): a title "one" is answered "two three", any other "la la la"
    _same_file_as_one_device(tmp_path, DP_VARIANTS, "b4-dp2", causal(tiny_chain_lm), max_new_tokens=3,
                             expected=lambda text, title: "two three" if title == "one" else "la la la",
                             generation=TEMPLATE + "\nallow_empty = true")


@pytest.mark.ray  # a local Ray of its own: CI's one-process step runs it (.ci/run); test_raypass keeps one in the default run
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install iteralab[ray])")
def test_a_ray_generation_pass_writes_the_one_device_file_in_corpus_order(tmp_path, worker_path):
    rows, _ = _same_file_as_one_device(tmp_path, RAY_VARIANTS, "b4-ray")
    assert "row order corpus order" in rows["b4-ray"].notes


def test_a_data_parallel_pass_of_a_raising_generator_is_a_failed_row(tmp_path, worker_path):
    titled_corpus(tmp_path)
    # raises on the prompts titled "blue" (d5): after the first warm-up batch, which a raising callable fails
    out = run_titled(tmp_path, 'kind = "callable"\ncallable = "fake_generators:raising_on_blue"', variants=DP_VARIANTS,
                     reference="b4")
    row = next(r for r in rows_of(out).values() if r.variant == "b4-dp2")
    assert row.status != "ok" and row.corpus_accepted is False
    assert "the generator's server is down" in (row.error or "")
