"""The campaign-folder layer: typed rows, one "not a campaign folder" error, the catalog and tuning split
carried (and sealed) inside the folder, and verified corpora counted once per corpus (K6)."""

import csv
import shutil

import pytest

import fake_models
from campaign_factory import callable_campaign, write_corpus_csv
from iteralab.campaign.folder import COLUMNS, CampaignFolder, NotACampaignFolder, RawRow, read_raw_rows
from iteralab.cli import main
from iteralab.decision.note import render_decision
from iteralab.decision.rule import decide
from iteralab.errors import IteraError
from iteralab.evidence.bundle import seal
from iteralab.evidence.run import run_campaign
from iteralab.evidence.verify import audit_campaign
from iteralab.kit.calcul_forfaits import DEFAULT_CATALOG
from iteralab.lock.inputs import lock

FIVE_VARIANTS = "\n".join(f"[[variants]]\nname = \"b{b}\"\nbatch_size = {b}\n" for b in (1, 2, 4, 8, 16)) + """
[[series]]
name = "batch"
factor = "batch_size"
variants = ["b1", "b2", "b4", "b8", "b16"]
"""


@pytest.fixture(autouse=True)
def _reset_calls():
    fake_models.CALLS.clear()


def test_typed_rows_have_real_values(tmp_path):
    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path, passes=1), out)
    rows = CampaignFolder.open(out).raw_rows()
    assert len(rows) == 2 and all(isinstance(r, RawRow) for r in rows)
    for r in rows:
        assert r.ok and r.accepted is True and r.ids_match is True and r.excluded is False
        assert isinstance(r.pass_s, float) and r.pass_s > 0 and isinstance(r.completed, int)
        assert r.compile_s is None  # not measured: None, never 0
        assert r.cell("corpus_accepted") == "true" and r.cell("compile_s") == ""
        assert r.engine == "local" and r.cell("engine") == "local"


def test_a_table_of_another_layout_is_refused_in_one_line(tmp_path):
    """0.1.0 has had no release: a table without the ``engine`` or ``dataset`` column of this version is not read
    (and not guessed at), it is regenerated from the journal."""
    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path, passes=1), out)
    table = out / "raw_table.csv"
    with open(table, encoding="utf-8", newline="") as fh:
        written = list(csv.reader(fh))
    assert [r.dataset for r in read_raw_rows(table)] == [None, None]  # one corpus: the dataset cell is empty
    for column in ("engine", "dataset"):
        at = COLUMNS.index(column)
        with open(table, "w", encoding="utf-8", newline="") as fh:
            csv.writer(fh).writerows(cells[:at] + cells[at + 1:] for cells in written)
        with pytest.raises(IteraError) as err:
            read_raw_rows(table)
        assert "not a raw table of this version" in str(err.value) and "iteralab table" in err.value.hint


def test_damaged_table_cell_is_one_line_error(tmp_path):
    table = tmp_path / "raw_table.csv"
    row = ["x"] * len(COLUMNS)
    row[COLUMNS.index("ids_match")] = "yes"
    table.write_text(",".join(COLUMNS) + "\n" + ",".join(row) + "\n", encoding="utf-8")
    with pytest.raises(IteraError) as err:
        read_raw_rows(table)
    assert "line 2, column round" in str(err.value)


@pytest.mark.parametrize("command", [["stats"], ["table"], ["memory"], ["decide"], ["exclude", "_", "p", "--reason",
                                                                                     "r"]])
def test_every_command_says_not_a_campaign_folder_the_same_way(tmp_path, capsys, command):
    args = [command[0], str(tmp_path)] + command[2:] if command[0] == "exclude" else command + [str(tmp_path)]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert f"Error: {tmp_path}: not a campaign folder (no campaign.json)" in err
    with pytest.raises(NotACampaignFolder):
        CampaignFolder.open(tmp_path)


def test_run_reports_one_verified_corpus_for_five_variants_times_two_passes(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=2, variants=FIVE_VARIANTS, reference="b4")
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "10 attempted passes, 10 accepted; 1 verified corpus" in out


def _catalog_campaign(tmp_path):
    catalog = tmp_path / "my-catalog.csv"
    shutil.copyfile(DEFAULT_CATALOG, catalog)
    protocol = callable_campaign(tmp_path, passes=1, extra='[catalog]\npath = "my-catalog.csv"\n')
    out = tmp_path / "out"
    run_campaign(protocol, out)
    return catalog, out


def test_catalog_is_copied_sealed_and_named_in_the_note(tmp_path):
    catalog, out = _catalog_campaign(tmp_path)
    copy = out / "inputs" / "catalog.csv"
    assert copy.read_bytes() == catalog.read_bytes()
    catalog.unlink()  # the original is gone: the folder still decides from its own copy
    note = render_decision(decide([out]))
    assert "priced from `inputs/catalog.csv` of the campaign folder (sealed copy of my-catalog.csv)" in note

    seal(out)
    assert audit_campaign(out).ok
    copy.write_text(copy.read_text(encoding="utf-8").replace("110.00", "11.00"), encoding="utf-8")
    report = audit_campaign(out)
    assert not report.ok and any("inputs/catalog.csv" in d for d in report.differences)


def test_catalog_override_is_written_in_the_note(tmp_path):
    catalog, out = _catalog_campaign(tmp_path)
    other = tmp_path / "override.csv"
    shutil.copyfile(DEFAULT_CATALOG, other)
    note = render_decision(decide([out], catalog=other))
    assert f"priced from `{other}`, given with --catalog when deciding (it overrides the copy" in note


def test_unreadable_catalog_refused_before_any_pass(tmp_path):
    (tmp_path / "bad.csv").write_text("not,a,catalog\n", encoding="utf-8")
    protocol = callable_campaign(tmp_path, passes=1, locked=False, extra='[catalog]\npath = "bad.csv"\n')
    with pytest.raises(IteraError) as err:  # lock checks the catalog before recording anything
        lock(protocol)
    assert "bad.csv" in str(err.value) and str(err.value).startswith(f"{protocol}: catalog.path: ")
    assert not (tmp_path / "protocol.toml.lock.json").exists()
    with pytest.raises(IteraError):
        run_campaign(protocol, tmp_path / "out")
    assert not (tmp_path / "out" / "journal.jsonl").exists()


def test_tuning_split_is_carried_in_the_folder(tmp_path):
    write_corpus_csv(tmp_path, rows=[("t1", "a tuning text only", "plot"), ("t2", "another tuning one", "fresh")],
                     name="tuning.csv", strata=False)
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    text = protocol.read_text(encoding="utf-8").replace('path = "corpus.csv"',
                                                        'path = "corpus.csv"\ntuning_path = "tuning.csv"')
    protocol.write_text(text, encoding="utf-8")
    lock(protocol)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    folder = CampaignFolder.open(out)
    assert folder.tuning_path is not None
    assert folder.campaign.tuning["size"] == 2
    assert "a tuning text only" in folder.tuning_path.read_text(encoding="utf-8")


class StepClock:
    """Every reading is one second after the previous one."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        self.t += 1.0
        return self.t


def test_every_phase_of_the_real_pass_is_timed_by_the_one_injectable_clock(tmp_path, monkeypatch):
    import iteralab.models.device as dev

    monkeypatch.setattr(dev, "PERF_CLOCK", StepClock())
    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path, passes=1, warmup="inputs = 2\npasses = 2"), out)
    for row in CampaignFolder.open(out).raw_rows():
        # two readings per phase (start, stop): exactly one step each; warm-up is two timed passes
        assert (row.load_s, row.warmup_s, row.pass_s, row.writing_s) == (1.0, 2.0, 1.0, 1.0), row


def test_run_refuses_an_unrelated_non_empty_out_folder(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "mydata"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["run", str(protocol), "--out", str(out)]) == 2
    assert f"Error: {out}: not empty and not a campaign folder (holds notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written beside the user's files


def test_evidence_files_follow_the_umask_not_mkstemp(tmp_path):
    import os
    import stat

    from iteralab.common.files import write_text_atomic

    old = os.umask(0o022)
    try:
        import importlib

        import iteralab.common.files as files
        importlib.reload(files)
        files.write_text_atomic(tmp_path / "report.html", "<p>x</p>")
        assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o644
    finally:
        os.umask(old)
        importlib.reload(files)
    assert write_text_atomic  # the module-level name stays importable


def test_price_names_a_cpu_server_package_as_such(tmp_path, capsys):
    catalog = tmp_path / "c.csv"
    catalog.write_text("catalog_version,catalog_date,gpu_id,gpu_name,cards_per_lot,package_days,price_per_lot,"
                       "currency,device_match,cpu_cores\nu1,2026-12-01,epyc-16c,AMD EPYC,1,7,35.00,USD,,16\n",
                       encoding="utf-8")
    assert main(["price", "--gpu", "epyc-16c", "--days", "7", "--catalog", str(catalog)]) == 0
    out = capsys.readouterr().out
    assert "package price: 35.00 USD for 1 CPU server" in out and "GPU (" not in out.split("package price")[1]


def test_streamed_corpus_digests_equal_the_corpus_loaders(tmp_path):
    """verify recomputes the corpus copy's fingerprint and order hash from Arrow chunks: the same digests as
    plan.corpus, on texts with CRLF, a lone CR, quotes, commas, non-ASCII and an astral character."""
    import csv as csv_module

    from iteralab.campaign.folder import corpus_digests
    from iteralab.plan.corpus import load_corpus, write_corpus

    source = tmp_path / "c.csv"
    rows = [("b", "line\r\nbreak é", "x"), ("a", "lone\rcr \U0001F600", "y"), ("c", 'quote " and , comma\n', "x"),
            ("a2", "tab\tz", "y"), ("a10", "z", "x")]
    with open(source, "w", newline="", encoding="utf-8") as fh:
        writer = csv_module.writer(fh)
        writer.writerow(["id", "text", "label"])
        writer.writerows(rows)
    corpus = load_corpus(source, classes=["x", "y"])
    write_corpus(corpus, tmp_path / "copy.csv", extra={"stratum": ["s"] * len(corpus)})
    digests = corpus_digests(tmp_path / "copy.csv", ["x", "y"])
    assert (digests.size, digests.fingerprint, digests.order_hash) == (5, corpus.fingerprint(), corpus.order_hash())
    assert (digests.duplicate_ids, digests.labels_outside) == (0, 0)
    assert corpus_digests(tmp_path / "copy.csv", ["x"]).labels_outside == 2
