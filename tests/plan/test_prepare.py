"""``iteralab prepare`` (C2, P4) on corpora written here, with a tiny WordPiece tokenizer; ``head train``; and the
README's "Your own corpus" walk end to end on a tiny model."""

import json
import shutil
from collections import Counter

import pytest

from campaign_factory import write_tokenizer
from iteralab.cli import main
from iteralab.models.tokens import load_tokenizer, token_counter
from iteralab.plan.corpus import check_disjoint, load_corpus, text_fingerprint
from iteralab.plan.strata import largest_remainder
from strata_rows import STRATA, strata_rows, write_strata_csv


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")


def _prepare(capsys, source, tok, out, *extra):
    rc = main(["prepare", str(source), "--model", str(tok), "--out", str(out), "--strata", STRATA, *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err.splitlines()


def test_strata_class_mix_files_and_reproducibility(tmp_path, tok, capsys):
    source = write_strata_csv(tmp_path / "src.csv", strata_rows())
    rc, out, err = _prepare(capsys, source, tok, tmp_path / "a", "--sample", "short=20,long=12", "--tuning", "30")
    assert rc == 0, err
    final = load_corpus(tmp_path / "a" / "final.csv", extra_columns=["stratum"])
    tuning = load_corpus(tmp_path / "a" / "tuning.csv", extra_columns=["stratum"])
    assert len(final) == 32 and len(tuning) == 30
    check_disjoint(tuning, final)
    # every stratum agrees with the tokenizer, and its class mix is the source's by largest remainder
    count = token_counter(load_tokenizer(tok))
    source_corpus = load_corpus(source)
    n_tokens = dict(zip(source_corpus.ids, count(list(source_corpus.texts))))
    stratum = {i: "short" if n_tokens[i] <= 8 else "long" for i in n_tokens}
    assert all(stratum[i] == s for i, s in zip(final.ids, final.columns["stratum"]))
    for name, wanted in (("short", 20), ("long", 12)):
        pool = Counter(r.label for r in source_corpus.records if stratum[r.id] == name)
        got = Counter(r.label for r in final.records if stratum[r.id] == name)
        assert dict(got) == {c: n for c, n in largest_remainder(wanted, dict(sorted(pool.items()))).items() if n}
    record = json.loads((tmp_path / "a" / "prepare.json").read_text())
    assert record["strata"] == {"short": [0, 8], "long": [9, None]} and record["seed"] == 0
    assert record["source"]["id_origin"] == "data" and record["source"]["records"] == 90
    assert set(record["tokenizer"]["files"]) >= {"tokenizer.json", "tokenizer_config.json"}
    assert record["tokenizer"]["counted"].startswith("special tokens included, no truncation")
    assert sum(sum(m.values()) for m in record["counts"]["final"].values()) == 32
    assert "final short: 20 texts" in out
    # same source + seed: byte-identical files; another seed: another sample
    _prepare(capsys, source, tok, tmp_path / "b", "--sample", "short=20,long=12", "--tuning", "30")
    for name in ("final.csv", "tuning.csv", "prepare.json", "protocol.toml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    _prepare(capsys, source, tok, tmp_path / "c", "--sample", "short=20,long=12", "--tuning", "30", "--seed", "1")
    assert (tmp_path / "c" / "final.csv").read_bytes() != (tmp_path / "a" / "final.csv").read_bytes()


def test_draft_protocol_has_corpus_filled_and_choices_marked(tmp_path, tok, capsys):
    source = write_strata_csv(tmp_path / "src.csv", strata_rows())
    _prepare(capsys, source, tok, tmp_path / "p", "--sample", "short=10,long=10")
    draft = (tmp_path / "p" / "protocol.toml").read_text()
    assert 'classes = ["fresh", "plot", "rotten"]' in draft and "strata = { short = [0, 8], long = [9] }" in draft
    assert 'kind = "encoder_head"' in draft  # a bare tokenizer folder names no classifier architecture
    assert main(["lock", str(tmp_path / "p" / "protocol.toml")]) == 2
    err = capsys.readouterr().err.splitlines()[0]
    assert err.startswith(f"Error: {tmp_path / 'p' / 'protocol.toml'}: key 'question': ")
    assert err.endswith("key 'metric.threshold': expected a number, got the string 'CHOOSE'; key 'metric.tolerance': "
                        "expected a number, got the string 'CHOOSE'")
    # the numbers chosen, the question still marked: the draft is still not lockable, and the line says why
    path = tmp_path / "p" / "protocol.toml"
    path.write_text(draft.replace('threshold = "CHOOSE"', "threshold = 0.5").replace('tolerance = "CHOOSE"',
                                                                                    "tolerance = 0.05"))
    assert main(["lock", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()[0]
    assert err.startswith(f"Error: {path}: key 'question': ") and "still marked CHOOSE" in err
    assert not (tmp_path / "p" / "protocol.toml.lock.json").exists()
    # default tuning size: what remains, capped at the sample size
    assert len(load_corpus(tmp_path / "p" / "tuning.csv")) == 20


def test_draft_carries_a_commented_calendar_and_catalog(tmp_path, tok, capsys):
    """Without dated tasks no rental is priced: the draft shows where they go (issue 24, item 6)."""
    from iteralab.plan.protocol import CatalogSpec, Calendar, tomllib

    _prepare(capsys, write_strata_csv(tmp_path / "src.csv", strata_rows()), tok, tmp_path / "p", "--sample",
             "short=10,long=10")
    lines = (tmp_path / "p" / "protocol.toml").read_text().splitlines()
    start, catalog = lines.index("# [calendar]"), lines.index("# [catalog]")
    assert "decide plans no window, so it prices no rental" in lines[start - 2]
    block = lines[start:lines.index("", start)]
    calendar = Calendar.model_validate(tomllib.loads("\n".join(line[2:] for line in block))["calendar"])
    assert calendar.timezone == "Europe/Paris" and len(calendar.tasks) == 2  # valid once uncommented
    assert lines[catalog + 1] == '# path = "tarifs-forfaits.csv"'
    assert CatalogSpec.model_validate(tomllib.loads(lines[catalog + 1][2:])).path == "tarifs-forfaits.csv"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_other_formats_without_id_column(tmp_path, tok, capsys, fmt):
    rows = [{"review": t, "sentiment": l} for _, t, l in strata_rows(40)]
    source = tmp_path / f"src.{fmt}"
    if fmt == "jsonl":
        source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), source)
    rc, _, err = _prepare(capsys, source, tok, tmp_path / "o", "--sample", "short=8,long=8", "--text-column",
                          "review", "--label-column", "sentiment")
    assert rc == 0, err
    final = load_corpus(tmp_path / "o" / "final.csv")
    assert all(i == "t-" + text_fingerprint(t)[:16] for i, t in zip(final.ids, final.texts))
    record = json.loads((tmp_path / "o" / "prepare.json").read_text())
    assert record["source"]["id_origin"] == "content"
    assert "ids derived from the texts" in (tmp_path / "o" / "protocol.toml").read_text()


def test_repeated_texts_never_land_on_both_sides(tmp_path, tok, capsys):
    rows = strata_rows(40)
    dupes = [(f"dup-{i}", "  " + t.upper().lower() + "  ", l) for i, (_, t, l) in enumerate(rows[:20])]
    source = write_strata_csv(tmp_path / "src.csv", rows + dupes)
    rc, out, err = _prepare(capsys, source, tok, tmp_path / "o", "--sample", "short=10,long=10")
    assert rc == 0, err
    final, tuning = load_corpus(tmp_path / "o" / "final.csv"), load_corpus(tmp_path / "o" / "tuning.csv")
    check_disjoint(tuning, final)
    record = json.loads((tmp_path / "o" / "prepare.json").read_text())
    assert len(record["left_out"]) == 20 and record["left_out"][0]["reason"] == "same text as doc-000"
    assert "left out: 20 repeated texts" in out
    # without an id column, a repeated text is left out too (its derived id would repeat)
    plain = write_strata_csv(tmp_path / "plain.csv", [(t, l) for _, t, l in rows + dupes[:3]] + [(rows[0][1], "plot")],
                             header=("text", "label"))
    rc, _, err = _prepare(capsys, plain, tok, tmp_path / "p", "--sample", "short=10,long=10")
    assert rc == 0, err
    assert len(json.loads((tmp_path / "p" / "prepare.json").read_text())["left_out"]) == 4


def test_unicode_texts(tmp_path, tok, capsys):
    rows = [(f"u{i}", f"café naïve 東京 {'good ' * (i % 12)}🎬 {i}", "fresh" if i % 2 else "rotten")
            for i in range(40)]
    source = write_strata_csv(tmp_path / "src.csv", rows)
    rc, _, err = _prepare(capsys, source, tok, tmp_path / "o", "--strata", "all=0-", "--sample", "all=14")
    assert rc == 0, err
    texts = set(load_corpus(tmp_path / "o" / "final.csv").texts)
    assert texts <= {t for _, t, _ in rows}


def test_refusals_name_stratum_and_numbers(tmp_path, tok, capsys):
    source = write_strata_csv(tmp_path / "src.csv", strata_rows())
    long_count = sum(1 for n in token_counter(load_tokenizer(tok))([t for _, t, _ in strata_rows()]) if n >= 9)
    rc, _, err = _prepare(capsys, source, tok, tmp_path / "o", "--sample", f"short=10,long={long_count + 50}")
    assert rc == 2
    assert err == [f"Error: {source}: long: {long_count + 50} wanted, {long_count} texts have ≥ 9 tokens; lower the "
                   "bound or the count"]
    empty = tmp_path / "empty.csv"
    empty.write_text("id,text,label\n", encoding="utf-8")
    assert _prepare(capsys, empty, tok, tmp_path / "o", "--sample", "short=1,long=1")[2][0] == (
        f"Error: {empty}: no records after the header (line 1)")
    one = write_strata_csv(tmp_path / "one.csv", [(i, t, "fresh") for i, t, _ in strata_rows()])
    assert _prepare(capsys, one, tok, tmp_path / "o", "--sample", "short=1,long=1")[2][0] == (
        f"Error: {one}: label column 'label' holds a single class ('fresh'); a comparison of classifiers needs at "
        "least two")
    assert _prepare(capsys, source, tok, tmp_path / "o", "--sample", "short=1,mid=2")[2][0] == (
        "Error: --sample: strata mid are not in --strata")
    assert not (tmp_path / "o").exists()


def test_head_train_suggests_a_threshold_and_refuses_overlap(tmp_path, tiny_encoder_dir, capsys):
    source = write_strata_csv(tmp_path / "src.csv", strata_rows())
    assert main(["prepare", str(source), "--model", str(tiny_encoder_dir), "--out", str(tmp_path / "p"),
                 "--strata", STRATA, "--sample", "short=20,long=12"]) == 0
    capsys.readouterr()
    assert main(["head", "train", "--model", str(tiny_encoder_dir), "--tuning", str(tmp_path / "p" / "tuning.csv"),
                 "--out", str(tmp_path / "p" / "head.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "suggested threshold" in out and "5-fold cross-validated macro-F1" in out
    record = json.loads((tmp_path / "p" / "prepare.json").read_text())
    assert record["head"]["suggested_threshold"] >= 0 and record["head"]["classes"] == ["fresh", "plot", "rotten"]
    assert "# suggested threshold" in (tmp_path / "p" / "protocol.toml").read_text()
    shutil.copyfile(tmp_path / "p" / "final.csv", tmp_path / "p" / "leak.csv")
    assert main(["head", "train", "--model", str(tiny_encoder_dir), "--tuning", str(tmp_path / "p" / "leak.csv"),
                 "--out", str(tmp_path / "p" / "h2.safetensors")]) == 2
    assert capsys.readouterr().err.splitlines()[0].startswith(
        f"Error: tuning data ({tmp_path / 'p' / 'leak.csv'}) and final corpus ({tmp_path / 'p' / 'final.csv'}) "
        "overlap: 32 shared ids")


def test_readme_walk_from_csv_to_decision(tmp_path, tiny_classifier_dir, capsys, monkeypatch):
    """README "Your own corpus": prepare → edit the draft → lock → run → decide, on a tiny classifier."""
    monkeypatch.chdir(tmp_path)
    write_strata_csv(tmp_path / "reviews.csv", [(t, l) for _, t, l in strata_rows()], header=("review", "sentiment"))
    assert main(["prepare", "reviews.csv", "--model", str(tiny_classifier_dir), "--out", "prep", "--text-column",
                 "review", "--label-column", "sentiment", "--strata", STRATA, "--sample", "short=12,long=8"]) == 0
    draft = tmp_path / "prep" / "protocol.toml"
    text = draft.read_text()
    assert 'kind = "hf_classifier"' in text
    text = (text.replace('question = "CHOOSE: ', 'question = "')
            .replace('threshold = "CHOOSE"', "threshold = 0.0").replace('tolerance = "CHOOSE"', "tolerance = 1.0")
            .replace("passes = 5", 'passes = 1\nisolation = "inprocess"\ndevice = "cpu"'))
    draft.write_text(text.replace("max_length = 256", "max_length = 64"))
    assert main(["lock", "prep/protocol.toml"]) == 0
    assert "schedule: 2 variants × 1 pass = 2 measured passes, rotated" in capsys.readouterr().out
    assert main(["run", "prep/protocol.toml", "--out", "camp", "--json"]) == 0
    capsys.readouterr()
    assert main(["decide", "camp"]) == 0
    note = capsys.readouterr().out
    assert "b1-fp32" in note and "b8-fp32" in note
    campaign = json.loads((tmp_path / "camp" / "campaign.json").read_text())
    assert campaign["corpus"]["strata"] == {"long": 8, "short": 12}


def test_a_named_id_column_the_file_lacks_is_refused(tmp_path, tok, capsys):
    """``--id-column`` names a column on purpose: a misspelt header never turns into ids derived from the texts."""
    source = write_strata_csv(tmp_path / "src.csv", strata_rows(), header=("review_id", "text", "label"))
    rc, _, err = _prepare(capsys, source, tok, tmp_path / "p", "--sample", "short=10,long=10", "--id-column",
                          "reviewid")
    assert rc == 2 and err[0].startswith(f"Error: {source}") and "'reviewid'" in err[0], err
    assert "review_id" in err[0]  # the columns found are named
    assert not (tmp_path / "p" / "final.csv").exists()
    rc, _, err = _prepare(capsys, source, tok, tmp_path / "q", "--sample", "short=10,long=10", "--id-column",
                          "review_id")
    assert rc == 0, err
    assert json.loads((tmp_path / "q" / "prepare.json").read_text())["source"]["id_origin"] == "data"


def test_prepare_never_writes_over_an_edited_or_locked_protocol(tmp_path, tok, capsys):
    source = write_strata_csv(tmp_path / "src.csv", strata_rows())
    out = tmp_path / "p"
    assert _prepare(capsys, source, tok, out, "--sample", "short=10,long=10")[0] == 0
    assert _prepare(capsys, source, tok, out, "--sample", "short=10,long=10")[0] == 0  # unedited: the same files
    draft = out / "protocol.toml"
    edited = draft.read_text().replace('threshold = "CHOOSE"', "threshold = 0.5")
    draft.write_text(edited)
    rc, _, err = _prepare(capsys, source, tok, out, "--sample", "short=10,long=10")
    assert rc == 2 and err[0] == (f"Error: {draft}: edited since prepare wrote it (or not written by prepare); "
                                  "prepare never writes over it"), err
    assert draft.read_text() == edited  # the user's edits are kept
    (out / "protocol.toml.lock.json").write_text("{}")
    rc, _, err = _prepare(capsys, source, tok, out, "--sample", "short=10,long=10")
    assert rc == 2 and err[0] == f"Error: {draft}: a locked protocol is in this folder; prepare never writes over it"
    assert draft.read_text() == edited


def test_prepare_an_embedding_job_on_a_corpus_without_labels(tmp_path, tok, capsys):
    """--task embedding: no label column needed; the draft is an embedding job judged by recall_at_k, and once its
    choices are made (and the queries written) it locks."""
    import tomllib

    from iteralab.lock.inputs import lock

    rows = [(i, t) for i, t, _ in strata_rows()]
    source = write_strata_csv(tmp_path / "docs.csv", rows, header=("id", "text"))
    out = tmp_path / "prep"
    rc, stdout, err = _prepare(capsys, source, tok, out, "--sample", "short=20,long=20", "--task", "embedding")
    assert rc == 0, err
    draft = (out / "protocol.toml").read_text(encoding="utf-8")
    data = tomllib.loads(draft)
    assert data["task"]["kind"] == "embedding" and data["corpus"]["classes"] == []
    assert data["model"]["kind"] == "encoder" and data["metric"]["name"] == "recall_at_k"
    assert data["embedding"]["min_cosine"] == "CHOOSE" and [s["by"] for s in data["subgroups"]] == ["stratum"]
    assert "(no label) 20" in stdout and "with no labels, write the queries file" in stdout
    final = load_corpus(out / "final.csv", require_labels=False)
    assert len(final) == 40 and set(final.labels) == {None}
    assert json.loads((out / "prepare.json").read_text(encoding="utf-8"))["task"] == "embedding"
    # the choices made, the queries written: the draft locks
    chosen = final.ids[:3]
    write_strata_csv(out / "queries.csv", [("q1", "good story", ";".join(chosen))], header=("query_id", "text",
                                                                                         "relevant_ids"))
    made = draft.replace('min_cosine = "CHOOSE"', "min_cosine = 0.99").replace(
        'threshold = "CHOOSE"', "threshold = 0.5").replace('tolerance = "CHOOSE"', "tolerance = 0.05")
    made = made.replace('question = "CHOOSE: ', 'question = "').replace(  # a callable, counted by the same tokenizer
        'kind = "encoder"\n', 'kind = "callable"\ncallable = "fake_embedders:word_embedder"\n', 1)
    (out / "protocol.toml").write_text(made, encoding="utf-8")
    entry = lock(out / "protocol.toml")
    assert entry.inputs["queries"]["queries"] == 1


def test_prepare_an_embedding_job_keeps_complete_labels(tmp_path, tok, capsys):
    import tomllib

    source = write_strata_csv(tmp_path / "docs.csv", strata_rows())
    out = tmp_path / "prep"
    rc, _, err = _prepare(capsys, source, tok, out, "--sample", "short=20,long=20", "--task", "embedding")
    assert rc == 0, err
    data = tomllib.loads((out / "protocol.toml").read_text(encoding="utf-8"))
    assert data["corpus"]["classes"] == ["fresh", "plot", "rotten"] and data["metric"]["name"] == "knn_accuracy"
    assert [s["by"] for s in data["subgroups"]] == ["stratum", "label"]
    assert set(load_corpus(out / "final.csv").labels) == {"fresh", "plot", "rotten"}


def test_prepare_cuts_a_corpus_together_with_its_queries(tmp_path, tok, capsys):
    """--queries: every relevant document of the sampled queries kept, the declared distractors beside them, the
    tuning queries and documents disjoint from the final ones; the draft judges by recall@k over the written files
    and, once its choices are made, locks."""
    import tomllib

    from iteralab.lock.inputs import lock
    from iteralab.plan.queries import load_queries

    rows = [(i, t) for i, t, _ in strata_rows()]
    source = write_strata_csv(tmp_path / "docs.csv", rows, header=("id", "text"))
    queries = [(f"q{n}", f"query {n}", ";".join(rows[j][0] for j in (3 * n, 3 * n + 1))) for n in range(10)]
    queries.append(("q-gone", "names no document", "doc-999"))
    qfile = write_strata_csv(tmp_path / "queries.csv", queries, header=("query_id", "text", "relevant_ids"))
    out = tmp_path / "prep"
    rc, stdout, err = _prepare(capsys, source, tok, out, "--task", "embedding", "--queries", str(qfile),
                               "--query-sample", "6", "--tuning-queries", "2", "--distractors", "12")
    assert rc == 0, err
    final, tuning = (load_corpus(out / n, require_labels=False) for n in ("final.csv", "tuning.csv"))
    kept, kept_tuning = load_queries(out / "queries.csv"), load_queries(out / "tuning_queries.csv")
    assert (len(kept), len(kept_tuning)) == (6, 2)
    relevant = {d for docs in kept.relevant for d in docs}
    assert relevant <= set(final.ids) and len(final) == len(relevant) + 12
    tuning_relevant = {d for docs in kept_tuning.relevant for d in docs}
    assert tuning_relevant <= set(tuning.ids) and len(tuning) == len(tuning_relevant) + 4  # 12 × 2 / 6
    assert not set(final.ids) & set(tuning.ids) and "q-gone" not in kept.ids + kept_tuning.ids
    record = json.loads((out / "prepare.json").read_text(encoding="utf-8"))
    assert record["queries"]["final"] == 6 and {"queries.csv", "tuning_queries.csv"} <= set(record["files"])
    assert any(e.get("query_id") == "q-gone" for e in record["left_out"])
    draft = (out / "protocol.toml").read_text(encoding="utf-8")
    metric = tomllib.loads(draft)["metric"]
    assert (metric["name"], metric["queries"], metric["tuning_queries"]) == ("recall_at_k", "queries.csv",
                                                                              "tuning_queries.csv")
    assert ("6 final queries with every relevant document and 12 distractors (12 asked); 2 tuning queries with 4; "
            "1 left out") in stdout
    # the same seed: the same cut
    again = tmp_path / "again"
    assert _prepare(capsys, source, tok, again, "--task", "embedding", "--queries", str(qfile), "--query-sample",
                    "6", "--tuning-queries", "2", "--distractors", "12")[0] == 0
    for name in ("final.csv", "tuning.csv", "queries.csv", "tuning_queries.csv"):
        assert (again / name).read_bytes() == (out / name).read_bytes()
    made = draft.replace('min_cosine = "CHOOSE"', "min_cosine = 0.99").replace(
        'threshold = "CHOOSE"', "threshold = 0.5").replace('tolerance = "CHOOSE"', "tolerance = 0.05")
    made = made.replace('question = "CHOOSE: ', 'question = "').replace(
        'kind = "encoder"\n', 'kind = "callable"\ncallable = "fake_embedders:word_embedder"\n', 1)
    (out / "protocol.toml").write_text(made, encoding="utf-8")
    assert lock(out / "protocol.toml").inputs["queries"]["queries"] == 6


def test_prepare_drafts_ndcg_for_graded_queries_and_refuses_queries_without_the_embedding_task(tmp_path, tok,
                                                                                               capsys):
    import tomllib

    rows = [(i, t) for i, t, _ in strata_rows()]
    source = write_strata_csv(tmp_path / "docs.csv", rows, header=("id", "text"))
    qfile = write_strata_csv(tmp_path / "q.csv", [(f"q{n}", f"query {n}", rows[n][0], "2") for n in range(5)],
                             header=("query_id", "text", "relevant_ids", "grades"))
    out = tmp_path / "prep"
    rc, _, err = _prepare(capsys, source, tok, out, "--task", "embedding", "--queries", str(qfile))
    assert rc == 0, err
    assert tomllib.loads((out / "protocol.toml").read_text(encoding="utf-8"))["metric"]["name"] == "ndcg_at_k"
    assert load_corpus(out / "final.csv", require_labels=False).ids  # 4 relevant + every other document
    rc, _, err = _prepare(capsys, source, tok, tmp_path / "cls", "--queries", str(qfile))
    assert rc != 0 and err[0].startswith("Error: --queries: a queries file is for an embedding job")
