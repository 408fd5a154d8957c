"""The HTML report (X1): one self-contained, escaped page; ``finalize`` writes every derived artefact."""

from __future__ import annotations

import json
import re

import pytest

from iteralab.cli import main
from iteralab.decision.report import finalize, wrong_predictions
from iteralab.evidence.reads import load_evidence
from stats_campaigns import build_campaign


@pytest.fixture(scope="module")
def merged_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    rtx = build_campaign(root / "rtx4090", hardware="rtx4090")
    b200 = build_campaign(root / "b200", hardware="b200")
    result = finalize([rtx, b200], root / "out", rental_id="RENT-9")
    return result, (root / "out" / "report.html").read_text(encoding="utf-8")


def test_finalize_writes_every_artefact_and_returns_the_decision(merged_report):
    result, _ = merged_report
    for key in ("stats_txt", "stats_json", "decision_md", "decision_json", "report_html"):
        assert result[key].endswith(key.replace("_", "."))
    assert result["decision"].startswith("chosen: NVIDIA GeForce RTX 4090 / b8: rtx-4090 7-day package")
    assert result["chosen"] == "NVIDIA GeForce RTX 4090 / b8"
    stats = json.loads(open(result["stats_json"], encoding="utf-8").read())
    assert len(stats["campaigns"]) == 2


def test_report_is_self_contained(merged_report):
    _, html = merged_report
    assert "http://" not in html and "https://" not in html and 'src="//' not in html
    assert "<script" not in html.replace("&lt;script", "")  # no script at all, only escaped text
    assert "<link" not in html and "@import" not in html and "url(" not in html
    sources = re.findall(r'src="([^"]*)"', html)
    assert len(sources) == 6 and all(s.startswith("data:image/png;base64,") for s in sources)


def test_corpus_texts_and_errors_are_escaped(merged_report):
    _, html = merged_report
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; a story" in html  # the wrong-prediction example, escaped
    assert "<b>weak</b>" not in html
    assert "OutOfMemoryError: CUDA out of memory (simulated)" in html  # failures with their errors


def test_report_content(merged_report):
    _, html = merged_report
    for expected in ("110.00 USD committed", "2071.00 USD committed", "MARKED", "not feasible",
                     "calendar window against the 3, 7 and 30-day packages", "estimate", "RENT-9",
                     "pass times per configuration, every pass shown", "decision.md (Markdown source)",
                     "r02-p03-b16-a1", "does not qualify an interactive service",
                     "Speed comparisons (T5): exact rank test of the counted passes at the declared level 0.05 "
                     "two-sided", "no speed comparison is established at the declared level"):  # 3 passes each
        assert expected in html


def test_wrong_prediction_examples_carry_their_ids(tmp_path):
    ev = load_evidence(build_campaign(tmp_path / "camp"))
    pass_id, examples = wrong_predictions(ev)
    assert pass_id.endswith("-b4-a1")  # the reference variant's first counted pass
    assert examples == [{"id": "d03", "label": "plot", "predicted": "fresh", "stratum": "long",
                         "text": "<script>alert(1)</script> & a story"}]


def test_cpu_only_report_says_not_priced(tmp_path, capsys):
    folder = build_campaign(tmp_path / "camp")
    assert main(["report", str(folder), "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("configuration on CPU only (Test CPU 8-core): b8; rental not priced: ran on CPU only")
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Not priced: CPU-only campaign" in html
    assert main(["report", str(folder), str(folder)]) == 2
    assert "Error: several campaign folders need --out" in capsys.readouterr().err
