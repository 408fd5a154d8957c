"""The Python API on a reported campaign folder: the raw table as Arrow (and pandas), the statistics, verdicts and
stored decision as typed records, a pass's outputs in corpus order, and the lazy re-export from ``iteralab``."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import iteralab
from iteralab.api import campaign as campaign_api
from iteralab.campaign.folder import COLUMNS
from iteralab.errors import IteraError
from reported_campaigns import reported_campaign
from stats_campaigns import CORPUS

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return reported_campaign(tmp_path_factory.mktemp("api") / "campaign")


def test_the_raw_table_as_arrow_holds_every_cell_of_the_csv_typed(folder):
    camp = iteralab.open_campaign(folder)
    table = camp.raw_table()
    with open(folder / "raw_table.csv", newline="", encoding="utf-8") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert table.column_names[:len(COLUMNS)] == list(COLUMNS)
    assert table.num_rows == len(csv_rows) == 15
    assert table.schema.field("pass_s").type == "double" and table.schema.field("corpus_accepted").type == "bool"
    for arrow_row, csv_row in zip(table.to_pylist(), csv_rows):
        assert arrow_row["pass_id"] == csv_row["pass_id"] and arrow_row["status"] == csv_row["status"]
        assert arrow_row["pass_s"] == (float(csv_row["pass_s"]) if csv_row["pass_s"] else None)
        assert arrow_row["corpus_accepted"] == {"true": True, "false": False, "": None}[csv_row["corpus_accepted"]]
        if csv_row["subgroup_metrics"]:
            assert json.loads(arrow_row["subgroup_metrics"]) == json.loads(csv_row["subgroup_metrics"])
    frame = camp.dataframe()
    assert list(frame.columns) == table.column_names and len(frame) == 15
    assert frame["pass_s"].median() == pytest.approx(table.to_pandas()["pass_s"].median())


def test_without_pandas_the_dataframe_names_the_extra(folder, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(campaign_api.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pandas" else real(name, *a))
    with pytest.raises(IteraError) as refused:
        iteralab.open_campaign(folder).dataframe()
    assert "pandas" in refused.value.message and "iteralab[pandas]" in refused.value.hint


def test_statistics_verdicts_and_decision_are_the_folders_typed_records(folder):
    camp = iteralab.open_campaign(folder)
    stats = camp.stats()
    assert {v.variant: v.median for v in stats.variants} == {"b1": 10.0, "b4": 4.0, "b8": 3.8, "b16": 3.05,
                                                             "b8-int8": 2.05}
    verdicts = camp.verdicts()
    rows = {r.pass_id: r for r in camp.raw_rows()}
    finished = [pid for pid, r in rows.items() if r.status in ("ok", "failed")]
    assert list(verdicts) == finished
    # the hand-built table's metrics are written by hand; the ids and the format are what the files hold
    assert [(verdicts[p].ids_match, verdicts[p].format_ok) for p in finished] == \
        [(rows[p].ids_match, rows[p].format_ok) for p in finished]
    assert {verdicts[p].observed_ids for p in finished if rows[p].ok} == {len(CORPUS)}
    decision = camp.decision()
    stored = json.loads((folder / "decision.json").read_text(encoding="utf-8"))
    assert decision.line == stored["decision"] and decision.chosen == stored["chosen"] == "b8"
    assert decision.rental.answer == stored["rental"]["answer"]
    assert decision.configuration_line == stored["configuration_per_machine"][0]["answer"]
    assert decision.protocol.sha256 == camp.record.protocol.sha256 and decision.protocol.version == 1
    b8 = decision.figures("b8")
    assert b8.times == (3.8, 4.5, 3.6) and b8.median_pass_s == 3.8 and str(b8.cost_per_verified_corpus) == "110.00"


def test_a_pass_outputs_come_in_corpus_order_through_its_kinds_reader(folder):
    camp = iteralab.open_campaign(folder)
    ok = next(r for r in camp.raw_rows() if r.ok)
    table = camp.outputs(ok.pass_id)
    assert table.column_names == ["id", *camp.kind.output.columns]
    assert table.column("id").to_pylist() == [row[0] for row in CORPUS]
    assert table.num_rows == camp.output_set(ok.pass_id).records
    with pytest.raises(campaign_api.OutputFileError, match="no pass 'r99'"):
        camp.outputs("r99")


def test_the_decision_of_an_unreported_folder_says_how_to_write_it(tmp_path, folder):
    from stats_campaigns import build_campaign

    bare = build_campaign(tmp_path / "bare")
    with pytest.raises(IteraError) as refused:
        iteralab.open_campaign(bare).decision()
    assert "no stored decision" in refused.value.message and "iteralab report" in refused.value.hint


def test_every_public_name_resolves_and_an_unknown_one_is_refused():
    for name in iteralab.__all__:
        assert getattr(iteralab, name) is not None
    assert set(iteralab.__all__) <= set(dir(iteralab))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        iteralab.nothing_here  # noqa: B018


#: Imports ``iteralab`` the way its old ``__init__`` did (the version only), when asked to.
_OLD_INIT = ("import sys, types\n"
             "if sys.argv[1] == 'old':\n"
             "    m = types.ModuleType('iteralab'); m.__path__ = [{pkg!r}]; m.__version__ = '0.1.0'\n"
             "    sys.modules['iteralab'] = m\n"
             "import iteralab.cli\n"
             "cli = sorted(sys.modules)\n"
             "import iteralab.campaign.engines.passes\n"
             "print(repr((cli, sorted(sys.modules))))\n")


def test_help_and_a_pass_worker_import_nothing_more_than_with_the_version_only_init():
    """The lazy re-export costs nothing: ``import iteralab.cli`` (what ``iteralab --help`` loads) and the pass
    worker's module load the same modules, of ours and third-party, as with an ``__init__`` holding only the
    version (what it held before the API)."""
    code = _OLD_INIT.format(pkg=str(SRC / "iteralab"))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    seen = {}
    for which in ("old", "new"):
        out = subprocess.run([sys.executable, "-c", code, which], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        seen[which] = eval(out.stdout.strip().splitlines()[-1])  # a repr of two sorted lists of names
    assert seen["new"] == seen["old"]
    cli, worker = seen["new"]
    assert "iteralab.cli" in cli and "iteralab.campaign.engines.passes" in worker
    assert not [m for m in worker if m.startswith(("iteralab.api", "pandas", "mlflow"))]


def test_an_embedding_pass_outputs_come_as_vectors_in_corpus_order(tmp_path):
    """Another kind through the same seam: the API names no kind, the kind's reader and columns decide."""
    import numpy as np

    from embedding_jobs import BATCH_VARIANTS, corpus_rows, embedding_campaign
    from fake_embedders import word_embedder

    out = embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:word_embedder"',
                             BATCH_VARIANTS, "b2")
    camp = iteralab.open_campaign(out)
    ok = next(r for r in camp.raw_rows() if r.ok)
    table = camp.outputs(ok.pass_id)
    assert table.column_names == ["id", *camp.kind.output.columns] and camp.kind.name == "embedding"
    rows = corpus_rows()
    assert table.column("id").to_pylist() == [i for i, _, _ in rows]
    vectors = np.asarray(table.column(camp.kind.output.columns[0]).to_pylist(), dtype=np.float32)
    expected = word_embedder([text for _, text, _ in rows])
    assert np.allclose(vectors, expected, atol=1e-6)


def test_lock_run_decide_and_report_from_python(tmp_path):
    """The steps the commands take, called as functions: a protocol locked (again: the same entry), run into a
    folder, decided without writing, then reported; each answer equals what the folder then holds."""
    from campaign_factory import callable_campaign

    protocol = callable_campaign(tmp_path, locked=False)
    locked = iteralab.lock_protocol(protocol)
    assert locked.lock_file.is_file() and iteralab.lock_protocol(protocol).entry.sha256 == locked.entry.sha256
    run = iteralab.run_protocol(protocol, tmp_path / "camp")
    rows = run.campaign.raw_rows()
    assert run.raw_table == tmp_path / "camp" / "raw_table.csv" and run.accepted == sum(r.accepted for r in rows)
    decision = iteralab.decide(run.campaign.path)
    assert not (tmp_path / "camp" / "decision.json").exists()  # deciding writes nothing
    written = iteralab.render_report(run.campaign.path)
    assert written.report_html.is_file() and written.decision == decision.one_line
    assert run.campaign.decision().line == decision.one_line
