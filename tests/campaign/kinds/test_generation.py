"""Generation jobs end to end on the tiny models (tests/support/tiny_generators.py) and on callables
(tests/support/fake_generators.py): lock, run and the verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from generation_jobs import WORDS, causal, generation_toml, rows_of, run_job, write_corpus, write_job
from iteralab.errors import CorpusError


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


def test_a_callable_generation_job_runs_and_is_judged(tmp_path):
    from iteralab.campaign.kinds.generation.output import read_texts

    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8)
    rows = rows_of(out)
    assert len(rows) == 4 and all(r.status == "ok" for r in rows.values())
    assert all(r.ids_match and r.format_ok and r.corpus_accepted for r in rows.values()), \
        [r.notes for r in rows.values()]
    texts = read_texts(next((out / "predictions").glob("*.parquet")), max_new_tokens=8, allow_empty=False)
    assert texts.records == 16 and texts.problem_count == 0


def test_two_fp32_passes_of_the_causal_lm_give_identical_texts(tmp_path, tiny_causal_lm):
    from iteralab.campaign.kinds.generation.output import read_texts

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
    out = run_job(tmp_path, causal(tiny_chain_lm), max_new_tokens=3,
                  generation="max_length_share = 0.5\nallow_empty = true")
    rows = rows_of(out)
    row = next(iter(rows.values()))
    assert row.status == "ok" and row.format_ok
    assert row.length_share is not None and row.length_share > 0.5
    assert row.corpus_accepted is False and "length share" in row.notes


def test_a_callable_raising_during_a_pass_is_a_failed_row(tmp_path):
    # (one that raises on its first warm-up batch is refused before any pass: test_generation_failures.py)
    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:raising_on_blue"')
    rows = rows_of(out)
    assert all(r.status != "ok" and r.corpus_accepted is False for r in rows.values())
    assert all("the generator's server is down" in (r.error or "") for r in rows.values())


def end_to_end(tmp_path: Path, model: str, **kwargs) -> tuple[Path, dict]:
    """lock → run → stats → decide (note, report) → seal, pack → verify → rerun, on one generation job."""
    from iteralab.decision.report import finalize
    from iteralab.evidence.bundle import pack, seal
    from iteralab.evidence.rerun import rerun
    from iteralab.evidence.verify import audit_campaign

    out = run_job(tmp_path, model, **kwargs)
    written = finalize([out])
    assert (out / "stats.txt").is_file() and (out / "decision.md").is_file() and (out / "report.html").is_file()
    seal(out)
    archive, _ = pack(out, tmp_path / "bundle.tar.gz")
    assert Path(archive).is_file()
    report = audit_campaign(out)
    assert not report.differences, report.differences
    comparison = rerun(out, tmp_path / "again")
    return out, {"written": written, "report": report, "rerun": comparison}


def assert_answered(out: Path, result: dict, metric: str = "token_f1", lengths: bool = True) -> None:
    import json

    assert result["report"].accepted >= 1
    decision = json.loads((out / "decision.json").read_text(encoding="utf-8"))
    assert f"metric {metric} >=" in (out / "decision.md").read_text(encoding="utf-8")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert ("output length per configuration" in html) is lengths  # only where the tokens were measured
    assert decision["configuration_per_machine"] and decision["decision"]  # an answer: a configuration chosen
    assert "## How sure: quality and speed per variant" in (out / "decision.md").read_text(encoding="utf-8")
    if metric in ("token_f1", "rouge_l", "exact_match"):  # a mean of document scores: an interval over the 16
        assert {v["n"] for v in decision["quality"]["variants"]} == {16}
    variants = result["rerun"]["comparison"]["variants"]
    assert set(variants) == {"b1", "b4"}
    assert all(v["pairs"] and all(p["common_ids"] == 16 for p in v["pairs"]) for v in variants.values())


def test_a_causal_lm_generation_job_end_to_end(tmp_path, tiny_causal_lm):
    out, result = end_to_end(tmp_path, causal(tiny_causal_lm))
    assert_answered(out, result)
    # greedy fp32 on the same machine: the rerun's texts are the earlier ones
    assert all(p["identical"] for v in result["rerun"]["comparison"]["variants"].values()
               for p in v["pairs"])


def test_a_seq2seq_generation_job_end_to_end(tmp_path, tiny_seq2seq):
    out, result = end_to_end(tmp_path, f'kind = "hf_seq2seq"\npath = "{tiny_seq2seq.as_posix()}"')
    assert_answered(out, result)


def test_a_callable_generation_job_end_to_end(tmp_path):
    out, result = end_to_end(tmp_path, 'kind = "callable"\ncallable = "fake_generators:last_words"',
                             metric='name = "rouge_l"')
    assert_answered(out, result, "rouge_l", lengths=False)
    rows = rows_of(out)
    # texts only, no tokenizer: tokens are not measured, and said so
    assert all(r.tokens_per_s is None and r.length_share is None for r in rows.values())
    assert all("not measured" in r.notes for r in rows.values())


def test_verify_fails_on_a_hand_edited_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from iteralab.campaign.kinds.generation.output import read_texts
    from iteralab.evidence.verify import audit_campaign

    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8)
    assert not audit_campaign(out, require_seal=False).differences
    path = sorted((out / "predictions").glob("*.parquet"))[0]
    table = pq.read_table(path)
    texts = table.column("text").to_pylist()
    texts[0] = texts[0] + " edited"
    pq.write_table(table.set_column(1, "text", pa.array(texts, pa.string())), path)
    assert read_texts(path, max_new_tokens=8, allow_empty=False).problem_count == 0  # still a well-formed file
    differences = audit_campaign(out, require_seal=False).differences
    assert any(path.name in d and "sha256" in d for d in differences), differences


def test_verify_recomputes_the_metric_from_the_stored_texts(tmp_path):
    """A forger who rewrites a pass's texts and fixes the file's hash in the journal: only the recomputed metric
    (and the raw table row it no longer matches) can show it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from iteralab.campaign.journal import read_journal
    from iteralab.common.files import sha256_file
    from iteralab.evidence.verify import audit_campaign

    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8)
    journal = out / "journal.jsonl"
    finished = read_journal(journal).finished
    pid, record = next(iter(finished.items()))
    path = out / record["prediction_file"]
    table = pq.read_table(path)
    wrong = pa.array(["zzz"] * table.num_rows, pa.string())  # no reference answer shares a token with it
    pq.write_table(table.set_column(table.schema.get_field_index("text"), "text", wrong), path)
    lines = journal.read_text().splitlines(keepends=True)  # every pass wrote the same texts: fix this pass's only
    journal.write_text("".join(line.replace(record["prediction_sha256"], sha256_file(path))
                               if f'"{pid}"' in line else line for line in lines))
    differences = audit_campaign(out, require_seal=False).differences
    assert not any("edited" in d for d in differences), differences  # every file matches the journal's hash
    assert any(f"pass {pid}'s verdict field 'metric' recomputed" in d for d in differences), differences


def test_the_memory_estimate_adds_the_kv_cache(tmp_path, tiny_causal_lm):
    from transformers import AutoConfig

    from iteralab.evidence.memory import memory_table

    out = run_job(tmp_path, causal(tiny_causal_lm))
    config = AutoConfig.from_pretrained(str(tiny_causal_lm))
    rows = {r["variant"]: r for r in memory_table(out, runtime_overhead=0)}
    for name, batch in (("b1", 1), ("b4", 4)):
        terms = rows[name]["estimate_terms"]
        head_dim = config.hidden_size // config.num_attention_heads
        expected = 2 * config.num_hidden_layers * config.num_attention_heads * head_dim * (40 + 4) * batch * 4
        assert terms["kv_cache_bytes"] == expected
        assert terms["total_bytes"] == rows[name]["estimate_bytes"]
        assert any("KV cache" in a for a in rows[name]["estimate_assumptions"])
        assert rows[name]["observed_bytes"] is not None  # shown against the observed peak


def test_a_routine_is_handed_the_texts_and_the_references(tmp_path):
    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:last_words"',
                  metric='routine = "generation_routines:last_word_match"')
    rows = rows_of(out)
    assert all(r.status == "ok" and r.metric_name == "generation_routines:last_word_match" for r in rows.values())
    # last_words ends every text with the prompt's last three words: the reference (the last word) is in each
    # text only when the routine is handed each text beside its own reference
    assert all(r.metric == 1.0 and r.corpus_accepted for r in rows.values()), [r.notes for r in rows.values()]


def test_a_routine_sees_a_wrong_answer(tmp_path):
    out = run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8,
                  metric='routine = "generation_routines:last_word_match"')
    rows = rows_of(out)
    assert all(r.status == "ok" and r.metric == 0.0 for r in rows.values())  # upper-cased: no reference matches


def counted(folder: Path, texts: list[str]) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return [len(ids) for ids in tokenizer(texts)["input_ids"]]


def test_strata_count_the_rendered_prompt_and_judge_quality_per_stratum(tmp_path, tiny_causal_lm):
    from iteralab.lock.inputs import lock

    template = "answer this : {text}"
    write_corpus(tmp_path)
    texts = [WORDS[i % len(WORDS)] for i in range(16)]
    bare = counted(tiny_causal_lm, texts)
    rendered = counted(tiny_causal_lm, [template.format(text=t) for t in texts])
    cut = sorted(rendered)[len(rendered) // 2]
    strata = f'strata = {{ short = [0, {cut - 1}], long = [{cut}] }}'
    subgroups = '[[subgroups]]\nname = "len"\nby = "stratum"\ngating = false\n'

    def with_strata(counts: list[int]) -> None:
        lines = (tmp_path / "corpus.csv").read_text(encoding="utf-8").splitlines()
        out = [lines[0] + ",stratum"] + [f"{line},{'short' if n < cut else 'long'}"
                                         for line, n in zip(lines[1:], counts)]
        (tmp_path / "corpus.csv").write_text("\n".join(out) + "\n", encoding="utf-8")

    text = generation_toml(causal(tiny_causal_lm), generation=f'prompt = "{template}"').replace(
        'reference_column = "answer"', f'reference_column = "answer"\n{strata}').replace(
        'reference_variant = "b1"', f'reference_variant = "b1"\n\n{subgroups}')
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(text, encoding="utf-8")
    with_strata(bare)  # strata of the bare texts: every prompt is longer than its text
    assert bare != rendered
    with pytest.raises(CorpusError, match="the model's tokenizer counts"):
        lock(protocol)
    write_corpus(tmp_path)
    with_strata(rendered)
    lock(protocol)
    from iteralab.evidence.run import run_campaign

    run_campaign(protocol, tmp_path / "camp")
    rows = rows_of(tmp_path / "camp")
    assert all(set(r.subgroup_metrics) == {"len:short", "len:long"} for r in rows.values())


def test_a_reference_column_missing_from_the_corpus_is_one_line_at_lock(tmp_path, capsys):
    from iteralab.cli import main

    protocol = write_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:with_counts"', max_new_tokens=8)
    protocol.write_text(protocol.read_text().replace('reference_column = "answer"', 'reference_column = "answers"'))
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"Error: {tmp_path / 'corpus.csv'} line 1: no column 'answers' (columns found: 'id', 'text', " \
                     "'answer')"
    assert err[1].startswith("Hint: ") and len(err) == 2
    assert not list(tmp_path.glob("*.lock.json"))
