"""The rerun comparison names what each kind of job outputs: vectors and texts are never 'labels and
probabilities' (a folder compared with itself: no rerun needed to render the page)."""

from __future__ import annotations

import pytest

from iteralab.evidence.comparison import render_comparison
from iteralab.evidence.rerun import compare_campaigns


@pytest.mark.parametrize("kind", ["embedding", "generation"])
def test_the_comparison_page_speaks_of_the_job_s_own_outputs(tmp_path, kind):
    if kind == "embedding":
        import embedding_jobs as te

        out = te.embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:word_embedder"',
                                    te.BATCH_VARIANTS, "b2")
        words, column = "same ids and vectors", "| min cosine |"
    else:
        import generation_jobs as tg

        out = tg.run_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators:last_words"')
        words, column = "same ids and texts", "| identical texts (min share) |"
    comparison = compare_campaigns(out, out)
    assert comparison["protocol"]["kind"] == kind
    page = render_comparison(comparison)
    assert "label" not in page and "probabilit" not in page, page
    assert f"*identical* = {words}" in page and column in page
    if kind == "embedding":
        assert all(v["outputs"] == "identical" and v["min_cosine"] == pytest.approx(1.0, abs=1e-6)
                   for v in comparison["variants"].values())
        assert "| 1.0000 |" in page


def test_a_classification_comparison_keeps_its_words(tmp_path):
    from campaign_factory import callable_campaign
    from iteralab.evidence.run import run_campaign

    run_campaign(callable_campaign(tmp_path, passes=1), tmp_path / "camp")
    comparison = compare_campaigns(tmp_path / "camp", tmp_path / "camp")
    comparison["protocol"].pop("kind")  # a comparison.json written before the kind was recorded
    page = render_comparison(comparison)
    assert "*identical* = same ids, labels and probabilities" in page and "| label agreement (min) |" in page
