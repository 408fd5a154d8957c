"""Generation jobs end to end on the tiny models (tests/tiny_generators.py) and on callables
(tests/fake_generators.py): lock, run and the verdicts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from iteralab.errors import CorpusError

WORDS = ("the cat sat on the mat", "what is the answer", "a good movie", "the dog and the cat",
         "one two three", "a short story of a day", "why is the sky blue", "red green blue")


def write_corpus(folder: Path, n: int = 16, long_row: int | None = None) -> Path:
    path = folder / "corpus.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "answer"])
        for i in range(n):
            text = WORDS[i % len(WORDS)]
            if i == long_row:
                text = " ".join([text] * 20)
            writer.writerow([f"d{i}", text, text.split()[-1]])
    return path


def generation_toml(model: str, *, max_new_tokens: int = 4, max_length: int = 40, metric: str = 'name = "token_f1"',
                    generation: str = "", variants: str = "", reproduction: str = "acceptable") -> str:
    variants = variants or ('[[variants]]\nname = "b1"\nbatch_size = 1\n\n'
                            '[[variants]]\nname = "b4"\nbatch_size = 4\n')
    return f"""schema_version = 1
name = "gen-test"
question = "Which batch size answers the same for the least money?"

[task]
kind = "generation"

[generation]
max_new_tokens = {max_new_tokens}
{generation}

[corpus]
path = "corpus.csv"
classes = []
reference_column = "answer"

[model]
{model}
max_length = {max_length}

[metric]
{metric}
threshold = 0.0
relative_tolerance = 0.5
reference_variant = "b1"

[reproduction]
target = "{reproduction}"

[warmup]
inputs = 2
passes = 1

[run]
passes = 2
isolation = "inprocess"
device = "cpu"

{variants}
"""


def write_job(folder: Path, model: str, **kwargs) -> Path:
    write_corpus(folder, long_row=kwargs.pop("long_row", None))
    path = folder / "protocol.toml"
    path.write_text(generation_toml(model, **kwargs), encoding="utf-8")
    return path


def causal(folder: Path) -> str:
    return f'kind = "hf_causal_lm"\npath = "{folder.as_posix()}"'


def test_a_prompt_over_max_length_is_refused_at_lock(tmp_path, tiny_causal_lm):
    from iteralab.lock.inputs import lock

    protocol = write_job(tmp_path, causal(tiny_causal_lm), long_row=5)
    with pytest.raises(CorpusError) as info:
        lock(protocol)
    message = str(info.value)
    assert "id 'd5'" in message and "over model.max_length = 40" in message and "\n" not in message
    assert "allow_truncation" in (info.value.hint or "")
    assert not list(tmp_path.glob("*.lock.json"))


def test_the_prompt_template_is_what_lock_counts(tmp_path, tiny_causal_lm):
    from iteralab.lock.inputs import lock

    # every prompt fits alone; the template's twenty words push each over the limit
    padding = " ".join(["the"] * 20)
    protocol = write_job(tmp_path, causal(tiny_causal_lm), max_length=21,
                         generation=f'prompt = "{padding} {{text}}"')
    with pytest.raises(CorpusError, match="id 'd0': the rendered prompt has"):
        lock(protocol)
    protocol.write_text(generation_toml(causal(tiny_causal_lm), max_length=21), encoding="utf-8")
    lock(protocol)


def run_job(folder: Path, model: str, **kwargs) -> Path:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    protocol = write_job(folder, model, **kwargs)
    lock(protocol)
    out = folder / "camp"
    run_campaign(protocol, out)
    return out


def rows_of(out: Path) -> dict[str, object]:
    from iteralab.campaign.folder import read_raw_rows

    return {r.pass_id: r for r in read_raw_rows(out / "raw_table.csv")}


def test_a_callable_generation_job_runs_and_is_judged(tmp_path):
    from iteralab.campaign.texts import read_texts

    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8)
    rows = rows_of(out)
    assert len(rows) == 4 and all(r.status == "ok" for r in rows.values())
    assert all(r.ids_match and r.format_ok and r.corpus_accepted for r in rows.values()), \
        [r.notes for r in rows.values()]
    texts = read_texts(next((out / "predictions").glob("*.parquet")), max_new_tokens=8, allow_empty=False)
    assert texts.records == 16 and texts.problem_count == 0


def test_two_fp32_passes_of_the_causal_lm_give_identical_texts(tmp_path, tiny_causal_lm):
    from iteralab.campaign.texts import read_texts

    out = run_job(tmp_path, causal(tiny_causal_lm), reproduction="identical")
    rows = rows_of(out)
    assert all(r.status == "ok" and r.ids_match and r.format_ok for r in rows.values()), \
        [r.notes for r in rows.values()]
    files = sorted((out / "predictions").glob("*.parquet"))
    sets = [read_texts(f, max_new_tokens=4, allow_empty=True) for f in files]
    by_id = [dict(zip(s.ids.to_pylist(), s.texts.to_pylist())) for s in sets]
    assert all(b == by_id[0] for b in by_id[1:])  # batch 1 and batch 4, both fp32: the same greedy texts
    assert all(r.identical_share == 1.0 and r.reproduction_ok for r in rows.values())
    assert all(r.tokens_per_s and r.tokens_per_s > 0 and r.mean_tokens is not None for r in rows.values())
    header = (out / "raw_table.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[header.index("docs_per_s") + 1] == "tokens_per_s"


def test_a_too_small_max_new_tokens_is_flagged_by_the_length_share(tmp_path, tiny_chain_lm):
    # the rigged model answers "one" with "two three <eos>" and anything else with "la la ..." to the limit
    out = run_job(tmp_path, causal(tiny_chain_lm), max_new_tokens=3, generation="max_length_share = 0.5\nallow_empty = true")
    rows = rows_of(out)
    row = next(iter(rows.values()))
    assert row.status == "ok" and row.format_ok
    assert row.length_share is not None and row.length_share > 0.5
    assert row.corpus_accepted is False and "length share" in row.notes


def test_a_raising_callable_is_a_failed_row(tmp_path):
    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:raising"')
    rows = rows_of(out)
    assert all(r.status != "ok" and r.corpus_accepted is False for r in rows.values())
    assert all("the generator's server is down" in (r.error or "") for r in rows.values())
