"""The report's examples of wrong outputs, for every kind of job: real wrong outputs of a counted pass (id, output,
reference; for vectors the documents farthest from the reference pass's vectors), or a true sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from iteralab.decision.examples import NO_COUNTED_PASS, wrong_examples
from iteralab.evidence.reads import load_evidence

#: the test corpus (test_generation.WORDS) documents whose prompt holds the word "cat": answered "dog"
CAT_DOCS = {"d0": "mat", "d3": "cat", "d8": "mat", "d11": "cat"}


@pytest.fixture(scope="module")
def generation(tmp_path_factory):
    import generation_jobs as tg

    root = tmp_path_factory.mktemp("gen")
    return tg.run_job(root, 'kind = "callable"\ncallable = "fake_answers:last_word_unless_cat"',
                      metric='name = "exact_match"')


def test_a_generation_report_shows_the_wrong_answers_of_a_counted_pass(generation):
    from iteralab.decision.report import finalize

    examples = wrong_examples(load_evidence(generation))
    assert examples.pass_id is not None and examples.pass_id.endswith("-b1-a1")  # the reference variant's
    assert examples.caption.startswith(f"Pass {examples.pass_id} (the reference variant b1's first counted pass): "
                                       "4 of 16 outputs score below 1 on exact_match")
    assert examples.columns == ("id", "exact_match", "output", "reference", "text")
    assert {r["id"]: r["reference"] for r in examples.rows} == CAT_DOCS
    assert all(r["output"] == "dog" and r["exact_match"] == "0.000" and "cat" in r["text"] for r in examples.rows)
    finalize([generation])
    html = (generation / "report.html").read_text(encoding="utf-8")
    section = html[html.index("Examples of wrong predictions"):html.index("<h2>Statistics")]
    assert "no counted pass" not in section.lower() and "4 of 16 outputs" in section
    assert "<td>dog</td><td>mat</td>" in section


def test_under_a_routine_a_wrong_answer_is_one_that_is_not_an_exact_match(tmp_path):
    import generation_jobs as tg

    out = tg.run_job(tmp_path, 'kind = "callable"\ncallable = "fake_answers:last_word_unless_cat"',
                     metric='routine = "generation_routines:last_word_match"')
    examples = wrong_examples(load_evidence(out), limit=2)
    assert "4 of 16 outputs are not an exact match of their reference answer" in examples.caption
    assert "generation_routines:last_word_match scores the corpus as a whole" in examples.caption
    assert [r["id"] for r in examples.rows] == ["d0", "d3"]  # corpus order


def test_a_generation_pass_without_a_wrong_answer_says_so(tmp_path):
    import generation_jobs as tg

    out = tg.run_job(tmp_path, 'kind = "callable"\ncallable = "fake_answers:last_word_unless_cat"',
                     metric='name = "exact_match"')
    for path in (out / "predictions").glob("*.parquet"):  # every answer made right, the table rebuilt
        _rewrite_answers(path)
    from iteralab.evidence.table import regenerate_table

    regenerate_table(out)
    examples = wrong_examples(load_evidence(out))
    assert examples.rows == ()
    assert examples.caption.startswith("No wrong output in pass") and "all 16 outputs score 1 on exact_match" \
        in examples.caption


def _rewrite_answers(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    texts = ["cat" if t == "dog" and i in ("d3", "d11") else "mat" if t == "dog" else t
             for i, t in zip(table.column("id").to_pylist(), table.column("text").to_pylist())]
    pq.write_table(table.set_column(1, "text", pa.array(texts, pa.string())), path)


def test_an_embedding_report_shows_the_documents_farthest_from_the_reference_vectors(tmp_path):
    import embedding_jobs as te

    out = te.embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:batch4_perturbed"',
                                te.BATCH_VARIANTS, "b2")
    ev = load_evidence(out)
    examples = wrong_examples(ev, limit=3)
    fast = next(r for r in ev.rows if r.variant == "b4")
    ref = next(r for r in ev.rows if r.variant == "b2")
    assert examples.pass_id == fast.pass_id
    assert examples.columns == ("id", "cosine", "stratum", "label", "text")
    cosines = [float(r["cosine"]) for r in examples.rows]
    assert len(cosines) == 3 and cosines == sorted(cosines)
    assert cosines[0] == pytest.approx(fast.min_cosine, abs=1e-4) and cosines[-1] < 0.99
    assert f"farthest from the reference pass {ref.pass_id}'s vectors" in examples.caption
    assert "of 40 documents are below embedding.min_cosine 0.99" in examples.caption
    assert all(r["label"] in ("fresh", "rotten") and r["text"] for r in examples.rows)


def test_an_embedding_campaign_of_the_reference_pass_alone_says_so(tmp_path):
    import embedding_jobs as te

    one = '\n[[variants]]\nname = "b2"\nbatch_size = 2\n'
    out = te.embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:word_embedder"', one, "b2")
    examples = wrong_examples(load_evidence(out))
    assert examples.rows == () and examples.caption.startswith("Only the reference pass r01-p01-b2-a1 was counted")


def test_a_campaign_without_a_counted_pass_says_so(tmp_path):
    import generation_jobs as tg

    out = tg.run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:raising_on_blue"')  # every pass fails
    examples = wrong_examples(load_evidence(out))
    assert examples == type(examples)(None, (), (), NO_COUNTED_PASS)


# --------------------------------------------------------------------- one reason, the first cause (NaN, warm-up)


def test_a_nan_routine_and_a_warm_up_failure_each_give_one_reason_everywhere(tmp_path):
    import csv

    import generation_jobs as tg
    from iteralab.decision.report import finalize

    out = tg.run_job(tmp_path, 'kind = "callable"\ncallable = "fake_answers:one_at_a_time"',
                     metric='routine = "fake_answers:no_number"')
    nan = "metric routine fake_answers:no_number returned nan, not a finite number"
    rows = {r["pass_id"]: r for r in csv.DictReader((out / "raw_table.csv").open(encoding="utf-8"))}
    ref = [r for r in rows.values() if r["variant"] == "b1"]
    failed = [r for r in rows.values() if r["variant"] == "b4"]
    assert ref and failed and all(r["status"] == "failed" and r["completed"] == "0" for r in failed)
    for r in ref:  # the reference variant: its one reason, no threshold or tolerance judged without a value
        reasons = [n for n in r["notes"].split(" | ") if n.startswith("not accepted: ")]
        assert reasons == [f"not accepted: {nan}"], r["notes"]
        assert r["threshold_ok"] == r["tolerance_ok"] == ""  # not evaluated, never false
    for r in failed:  # failed in its first warm-up batch: that is the cause, not ids, format, hash, coverage …
        assert [n for n in r["notes"].split(" | ") if n.startswith("not accepted: ")] == ["not accepted: pass failed"]
    written = finalize([out])
    stats = (out / "stats.txt").read_text(encoding="utf-8")
    b1 = next(line for line in stats.splitlines() if line.startswith("  b1: "))
    assert f"fake_answers:no_number NO VALUE: {nan}" in b1
    assert "BELOW THRESHOLD" not in stats and "OUTSIDE TOLERANCE" not in stats and "outside the tolerance" not in stats
    assert "(completed 0)" in stats and "completed unknown" not in stats
    note = (out / "decision.md").read_text(encoding="utf-8")
    assert f"b1: no fake_answers:no_number value: {nan}" in note and "outside the tolerance" not in note
    assert "below the threshold" not in note
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<td>0 of 16</td>" in html and "unknown of" not in html
    assert written["chosen"] is None
