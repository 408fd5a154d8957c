"""Several datasets in one campaign (K6): protocol, lock checks, one pass per dataset, per-dataset verdicts,
the cost per verified result counted once per dataset fingerprint, verify and rerun.

The workload is ``fake_models_datasets:batch_sensitive``: right on every text, except that it answers
'rotten' for a text holding "tricky" when given more than one text at a time. With reference variant b1
(batch 1), variant b4 (batch 4) therefore fails the quality gate on exactly the dataset that holds such a text.
"""

from __future__ import annotations

import csv
import json
from dataclasses import fields
from decimal import Decimal
from pathlib import Path

import pytest
from stats_campaigns import check_golden, normalised

from dataset_jobs import GOOD, LOCKED_AT, dataset_protocol, datasets_toml, write_dataset_csv
from iteralab.campaign.campaignrecord import CampaignRecord, ModelRecord, ProtocolStamp, SourceRecord
from iteralab.campaign.folder import COLUMNS, RawRow
from iteralab.cli import main
from iteralab.decision.note import decision_json, render_decision
from iteralab.decision.rule import decide
from iteralab.errors import CorpusError, ProtocolError
from iteralab.evidence.datasets import job_rounds
from iteralab.evidence.reads import load_evidence
from iteralab.evidence.run import run_campaign
from iteralab.evidence.stats import campaign_stats, render_stats
from iteralab.evidence.verify import audit_campaign
from iteralab.lock.inputs import lock
from iteralab.plan.protocol import parse_protocol
from protocol_factory import protocol_toml

#: A dataset on which b4 (batched) misses one text: its macro F1 falls below the threshold.
TRICKY = [("t1", "the story of a cat", "plot"), ("t2", "a tricky good one", "fresh"), ("t3", "dull and long", "rotten"),
          ("t4", "good acting again", "fresh")]


def run_datasets(folder: Path, datasets: dict, **kwargs) -> Path:
    protocol = dataset_protocol(folder, datasets, **kwargs)
    lock(protocol, now=LOCKED_AT)
    out = folder / "out"
    run_campaign(protocol, out)
    return out


def user_catalog(folder: Path, campaign: Path, price: str = "100.00") -> Path:
    """A catalog whose CPU server package prices exactly the machine observed in the campaign's manifest."""
    hw = load_evidence(campaign).hardware
    assert hw.cpu and hw.cpu_cores, "the manifest must name the CPU model and its logical cores"
    path = folder / "user-catalog.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["catalog_version", "catalog_date", "gpu_id", "gpu_name", "cards_per_lot", "package_days",
                    "price_per_lot", "currency", "device_match", "cpu_cores"])
        w.writerow(["u1", "2026-12-01", "cpu-here", hw.cpu, 1, 7, price, "USD", "", hw.cpu_cores])
    return path


def _config(decision, key):
    return next(c for c in decision.configs if c.key == key)


# ------------------------------------------------------------------------------------------- protocol


def test_protocol_declares_datasets_with_unique_names_and_no_corpus_path():
    base = protocol_toml(model='kind = "callable"\ncallable = "m:f"')
    with_sets = base.replace('[corpus]\npath = "corpus.csv"\n', datasets_toml(["a", "b"]) + "[corpus]\n")
    protocol = parse_protocol(with_sets)
    assert [d.name for d in protocol.datasets] == ["a", "b"] and protocol.corpus.path is None
    with pytest.raises(ProtocolError, match="give corpus.path or \\[\\[datasets\\]\\], not both"):
        parse_protocol(base.replace("[corpus]\n", datasets_toml(["a"]) + "[corpus]\n"))
    with pytest.raises(ProtocolError, match="duplicate dataset name\\(s\\): a"):
        parse_protocol(base.replace('[corpus]\npath = "corpus.csv"\n', datasets_toml(["a", "a"]) + "[corpus]\n"))
    with pytest.raises(ProtocolError, match="corpus.path is missing \\(or declare \\[\\[datasets\\]\\]\\)"):
        parse_protocol(base.replace('path = "corpus.csv"\n', ""))
    assert parse_protocol(base).datasets == ()  # a one-corpus protocol is read as before


# ------------------------------------------------------------------------------------------ lock checks


def test_overlapping_datasets_are_refused_at_lock_naming_both(tmp_path, capsys):
    shared_id = {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"] + [("o2", "something new", "fresh")]}
    path = dataset_protocol(tmp_path / "ids", shared_id)
    with pytest.raises(CorpusError, match="datasets '2026-10' and '2026-11' overlap: both hold id 'o2'"):
        lock(path)
    shared_text = {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"] + [("n9", "good   fun", "fresh")]}
    path = dataset_protocol(tmp_path / "texts", shared_text)
    assert main(["lock", str(path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == ("Error: datasets '2026-10' and '2026-11' overlap: the same text 'good   fun' (id 'o2' in "
                      "'2026-10', id 'n9' in '2026-11')")
    assert not (tmp_path / "texts" / "protocol.toml.lock.json").exists()


def test_a_dataset_overlapping_the_tuning_split_is_refused_at_lock(tmp_path):
    path = dataset_protocol(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"]},
                            tuning=[("x1", "really good", "fresh")])
    with pytest.raises(CorpusError, match=r"tuning data .* and final corpus .*2026-11\.csv\) overlap: .*shared texts"):
        lock(path)


def test_a_changed_dataset_after_the_lock_is_named(tmp_path):
    path = dataset_protocol(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"]})
    entry = lock(path, now=LOCKED_AT)
    assert sorted(entry.inputs["datasets"]) == ["2026-10", "2026-11"] and entry.inputs["corpus"] is None
    assert entry.schedule == "2 variants × 2 passes × 2 datasets = 8 measured passes, rotated"
    write_dataset_csv(tmp_path / "2026-11.csv", GOOD["2026-11"][:-1])
    with pytest.raises(ProtocolError, match="dataset '2026-11': 1 id missing \\(e.g. 'n4'\\) since the lock"):
        run_campaign(path, tmp_path / "out")


def test_prepare_reads_each_dataset_once_to_check_and_copy_it(tmp_path, monkeypatch):
    """The lock check and the copy come from one read of each dataset (and of the tuning split)."""
    from iteralab.lock import inputs
    from iteralab.campaign.runner import prepare

    path = dataset_protocol(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"]},
                            tuning=[("u1", "tuning text one", "plot"), ("u2", "tuning text two", "fresh")])
    lock(path, now=LOCKED_AT)
    reads: list[str] = []
    real = inputs.scan_corpus
    monkeypatch.setattr(inputs, "scan_corpus", lambda source, **kw: reads.append(Path(source).name) or real(source, **kw))
    campaign = prepare(path, tmp_path / "out")
    assert sorted(reads) == ["2026-10.csv", "2026-11.csv", "tuning.csv"]
    assert [d.name for d in campaign.datasets] == ["2026-10", "2026-11"]
    assert (tmp_path / "out" / "inputs" / "datasets" / "2026-11.csv").is_file()


def test_a_dataset_changed_after_the_lock_leaves_no_folder_and_no_copy(tmp_path):
    from iteralab.campaign.runner import prepare

    path = dataset_protocol(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"]})
    lock(path, now=LOCKED_AT)
    write_dataset_csv(tmp_path / "2026-11.csv", GOOD["2026-11"][:-1])
    with pytest.raises(ProtocolError, match="dataset '2026-11'"):
        prepare(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------- campaigns


def test_two_datasets_one_failing_the_gate_for_one_configuration(tmp_path):
    out = run_datasets(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": TRICKY})
    campaign = json.loads((out / "campaign.json").read_text(encoding="utf-8"))
    assert [d["name"] for d in campaign["datasets"]] == ["2026-10", "2026-11"]
    assert {s["dataset"] for s in campaign["schedule"]["slots"]} == {"2026-10", "2026-11"}
    assert (out / "inputs" / "datasets" / "2026-11.csv").is_file() and not (out / "inputs" / "corpus.csv").exists()
    with open(out / "raw_table.csv", encoding="utf-8", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert tuple(table[0]) == COLUMNS and len(table) == 8
    sizes = {d["name"]: (d["size"], d["fingerprint"]) for d in campaign["datasets"]}
    for row in table:  # each row is checked against its own dataset
        assert (int(row["expected_ids"]), row["corpus_fingerprint"]) == sizes[row["dataset"]]
        assert row["pass_id"].endswith(f"-d{row['dataset']}-a1")
    failing = {(r["variant"], r["dataset"]) for r in table if r["corpus_accepted"] != "true"}
    assert failing == {("b4", "2026-11")}

    decision = decide([out])
    b1, b4 = _config(decision, "b1"), _config(decision, "b4")
    assert [d.verified for d in b1.datasets] == [True, True] and b1.accepted == 2
    assert [(d.name, d.verified) for d in b4.datasets] == [("2026-10", True), ("2026-11", False)]
    assert b4.accepted == 1  # the verified dataset still counts once; the configuration is not accepted
    assert any(e.startswith("dataset '2026-11' not verified: pass r") for e in b4.exclusions)
    assert not any("2026-10" in e for e in b4.exclusions)
    note = render_decision(decision)
    assert "- b4: " in note and "dataset '2026-11' not verified" in note
    assert "| b4 | 2026-11 | 4 | 2 | 0 |" in note and "| b1 | 2026-11 | 4 | 2 | 2 |" in note
    data = json.loads(decision_json(decision))
    b4_json = next(c for c in data["configurations"] if c["variant"] == "b4")
    assert [(d["name"], d["verified"]) for d in b4_json["datasets"]] == [("2026-10", True), ("2026-11", False)]
    assert [d["name"] for d in data["corpus"]["datasets"]] == ["2026-10", "2026-11"]

    report = audit_campaign(out, require_seal=False)
    assert report.ok, report.differences
    assert report.datasets == {"2026-10": {"passes": 4, "accepted": 4}, "2026-11": {"passes": 4, "accepted": 2}}
    assert report.summary_line().endswith("per dataset (accepted of passes): 2026-10 4 of 4, 2026-11 2 of 4")


def test_three_datasets_cost_per_verified_result_and_job_times(tmp_path):
    out = run_datasets(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"],
                                  "2026-12": TRICKY})
    stats = campaign_stats(out)
    b1 = stats.times("b1")
    rows = [r for r in load_evidence(out).rows if r.variant == "b1"]
    for job in b1.passes:  # one job time per round: the sum of that round's three dataset passes
        parts = [r for r in rows if r.pass_id in job.pass_id.split(" + ")]
        assert len(parts) == 3 and {r.dataset for r in parts} == {"2026-10", "2026-11", "2026-12"}
        assert job.pass_s == pytest.approx(sum(r.pass_s for r in parts))
    assert "a pass time here is one round's job time" in render_stats(stats)
    catalog = user_catalog(tmp_path, out)
    decision = decide([out], catalog=catalog)
    assert decision.chosen is not None and decision.chosen.variant == "b1"
    cost = decision.chosen.pricing.cost
    assert cost.accepted_results == 3 and cost.per_result == (cost.total / 3).quantize(Decimal("0.01"))
    b4 = _config(decision, "b4")
    assert [d.name for d in b4.datasets if not d.verified] == ["2026-12"] and not b4.candidate


def test_two_dataset_campaign_costs_half_the_committed_budget_per_verified_result(tmp_path):
    out = run_datasets(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": GOOD["2026-11"]})
    decision = decide([out], catalog=user_catalog(tmp_path, out, price="100.00"))
    chosen = decision.chosen
    assert chosen is not None and [d.verified for d in chosen.datasets] == [True, True]
    assert str(chosen.pricing.budget.total) == "100.00"
    assert chosen.pricing.cost.accepted_results == 2 and str(chosen.pricing.cost.per_result) == "50.00"
    assert "100.00 USD committed, 50.00 USD per verified corpus (2 accepted)" in decision.one_line


def test_verify_and_rerun_carry_the_per_dataset_verdicts(tmp_path):
    from iteralab.evidence.rerun import rerun

    out = run_datasets(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": TRICKY}, passes=1)
    result = rerun(out, tmp_path / "again")
    variants = result["comparison"]["variants"]
    assert variants["b4"]["datasets"]["2026-11"]["new_verdict"] == "not accepted"
    assert variants["b4"]["datasets"]["2026-10"]["new_verdict"] == "accepted"
    assert all(d["same_verdict"] for v in variants.values() for d in v["datasets"].values())
    assert "## Per dataset (K6)" in (tmp_path / "again" / "comparison.md").read_text(encoding="utf-8")
    copy = out / "inputs" / "datasets" / "2026-10.csv"
    copy.write_text(copy.read_text(encoding="utf-8").replace("good fun", "good fun!"), encoding="utf-8")
    report = audit_campaign(out, require_seal=False)
    assert any(d.startswith("inputs/datasets/2026-10.csv: sha256 differs") for d in report.differences)


def test_one_corpus_campaign_has_the_same_columns_with_empty_dataset_cells(tmp_path):
    from campaign_factory import callable_campaign

    protocol = callable_campaign(tmp_path)
    run_campaign(protocol, tmp_path / "out")
    with open(tmp_path / "out" / "raw_table.csv", encoding="utf-8", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert tuple(table[0]) == COLUMNS and table and all(row["dataset"] == "" for row in table)
    campaign = json.loads((tmp_path / "out" / "campaign.json").read_text(encoding="utf-8"))
    assert "datasets" not in campaign and all("dataset" not in s for s in campaign["schedule"]["slots"])
    assert campaign["corpus"]["file"] == "inputs/corpus.csv" and not (tmp_path / "out" / "inputs" / "datasets").exists()


def test_a_generation_job_over_two_datasets_is_judged_against_each_datasets_references(tmp_path):
    """The copy of each dataset carries its reference answers and the column its prompt names, as the one
    corpus's copy does: every pass of a right generator is accepted on its own dataset."""
    from generation_jobs import WORDS, generation_toml

    for name in ("a", "b"):
        with open(tmp_path / f"{name}.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "text", "answer", "title"])
            w.writerows([f"{name}{i}", f"{name}: {WORDS[i]}", f"{name}{i}", f"{name}{i}"] for i in range(6))
    toml = generation_toml('kind = "callable"\ncallable = "fake_generators:last_words"',
                           generation='prompt = "{text} about {title}"')
    toml = toml.replace('[corpus]\npath = "corpus.csv"\n', datasets_toml(["a", "b"]) + "[corpus]\n")
    (tmp_path / "protocol.toml").write_text(toml, encoding="utf-8")
    lock(tmp_path / "protocol.toml")
    run_campaign(tmp_path / "protocol.toml", tmp_path / "out")
    for name in ("a", "b"):
        with open(tmp_path / "out" / "inputs" / "datasets" / f"{name}.csv", encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert [row["reference"] for row in rows] == [row["prompt.title"] for row in rows] == \
            [f"{name}{i}" for i in range(6)]
    with open(tmp_path / "out" / "raw_table.csv", encoding="utf-8", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert sorted({row["dataset"] for row in table}) == ["a", "b"] and len(table) == 8
    assert all(row["corpus_accepted"] == "true" and float(row["metric"]) > 0 for row in table), \
        [row["notes"] for row in table]


# ------------------------------------------------------------------------------------------------ golden


def _fix_measurements(out: Path) -> None:
    """Replace what a real run measures (clock readings, timestamps, the machine) by fixed values, so the
    decision note is byte-stable; ids, predictions, verdicts and fingerprints stay those of the real run."""
    from iteralab.evidence.table import write_raw_table

    journal = out / "journal.jsonl"
    records = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines() if line.strip()]
    sizes = {d["name"]: d["size"] for d in json.loads((out / "campaign.json").read_text(encoding="utf-8"))["datasets"]}
    started = {r["pass_id"]: r for r in records if r["event"] == "pass_started"}
    for minute, record in enumerate(records):
        record["at"] = f"2026-03-23T{10 + minute // 60:02d}:{minute % 60:02d}:00+00:00"
        if record["event"] == "pass_finished":
            start = started[record["pass_id"]]
            batch = 1 if start["variant"] == "b1" else 4
            # 0.4 s per document at batch 1, 0.1 s at batch 4, plus 0.01 s per round: fixed, distinct times
            pass_s = sizes[start["dataset"]] * (0.4 if batch == 1 else 0.1) + 0.01 * start["round"]
            record["phases"] = {"load_s": 0.5, "compile_s": None, "warmup_s": 0.2, "pass_s": pass_s,
                                "writing_s": 0.01}
            record["memory"] = {"cpu_peak_rss_bytes": 200_000_000, "scope": "process (fixed for the test)"}
            for key in ("concurrent_load", "startup", "environment_summary"):
                record.pop(key, None)
        if record["event"] == "pass_evaluated":
            record["evaluation_s"] = 0.05
    journal.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["environment"]["device_inventory"] = {"backend": "cpu", "gpu_count": 0, "gpus": [],
                                                   "cpu": {"model": "Test CPU 8-core", "logical_cores": 8}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    write_raw_table(out)


def test_decision_note_with_datasets_matches_golden(tmp_path):
    out = run_datasets(tmp_path, {"2026-10": GOOD["2026-10"], "2026-11": TRICKY}, passes=3)
    _fix_measurements(out)
    catalog = user_catalog(tmp_path, out, price="120.00")
    decision = decide([out], catalog=catalog)
    chosen = decision.chosen
    assert chosen is not None and chosen.variant == "b1" and str(chosen.pricing.cost.per_result) == "60.00"
    note = normalised(render_decision(decision), out).replace(str(catalog), "<catalog>")
    check_golden("decision_datasets.md", note)


def test_datasets_with_a_gating_length_subgroup_keep_each_datasets_strata(tmp_path):
    from campaign_factory import STRATA_TOML, token_strata, write_tokenizer

    tokenizer = write_tokenizer(tmp_path / "tokenizer")
    for name in ("2026-10", "2026-11"):
        rows = GOOD[name]
        with open(tmp_path / f"{name}.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "text", "label", "stratum"])
            w.writerows([(*r, s) for r, s in zip(rows, token_strata(tokenizer, [r[1] for r in rows]))])
    text = protocol_toml(model='kind = "callable"\ncallable = "fake_models_datasets:batch_sensitive"\n'
                               'path = "tokenizer"', threshold=0.5, reference="b1", passes=1,
                         subgroups='[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n')
    text = text.replace('[corpus]\npath = "corpus.csv"\n',
                        datasets_toml(["2026-10", "2026-11"]) + "[corpus]\n" + STRATA_TOML)
    (tmp_path / "protocol.toml").write_text(text, encoding="utf-8")
    lock(tmp_path / "protocol.toml", now=LOCKED_AT)
    run_campaign(tmp_path / "protocol.toml", tmp_path / "out")
    campaign = json.loads((tmp_path / "out" / "campaign.json").read_text(encoding="utf-8"))
    expected = {name: dict(sorted({s: token_strata(tokenizer, [r[1] for r in GOOD[name]]).count(s)
                                   for s in token_strata(tokenizer, [r[1] for r in GOOD[name]])}.items()))
                for name in ("2026-10", "2026-11")}
    assert {d["name"]: d["strata"] for d in campaign["datasets"]} == expected
    rows = load_evidence(tmp_path / "out").rows
    assert rows and all(r.subgroups_ok is True and r.subgroup_metrics for r in rows)
    assert audit_campaign(tmp_path / "out", require_seal=False).ok


def _row(pass_id: str, round_: int, status: str = "ok", pass_s: float | None = 1.0,
         dataset: str | None = None) -> RawRow:
    cells: dict = {f.name: None for f in fields(RawRow)}
    return RawRow(**{**cells, "pass_id": pass_id, "variant": "b1", "dataset": dataset, "round": round_,
                     "status": status, "pass_s": pass_s if status == "ok" else None, "completed": 3})


def _sources(size: int, datasets: tuple[str, ...] = ()) -> CampaignRecord:
    """A campaign record of one corpus of ``size`` documents, or of datasets of that size each."""
    return CampaignRecord("classification", ProtocolStamp("p", 1, "s"), SourceRecord("f", "o", size),
                          ModelRecord("callable"), {"slots": []}, (),
                          datasets=tuple(SourceRecord("f", "o", size, name=name) for name in datasets))


def test_one_corpus_is_a_job_of_one_source_and_a_retried_round_stays_beside_its_first_attempt():
    """K6's job-time rule is the rule of every campaign: with one corpus a round's job is its pass. A round whose
    first attempt failed and ran again after a resume (so after round 2 in the table) lists both attempts
    together, the failed one never counted."""
    one_corpus = _sources(3)
    rows = [_row("p1", 1, "failed"), _row("p2", 2, pass_s=2.0), _row("p3", 1, pass_s=3.0)]
    jobs = job_rounds(one_corpus, rows, {}, "concurrent")
    assert [(j.pass_id, j.status, j.counted) for j in jobs] == [("p1", "failed", False), ("p3", "ok", True),
                                                                ("p2", "ok", True)]
    assert [j.pass_s for j in jobs if j.counted] == [3.0, 2.0] and jobs[1].completed == 3
    two = _sources(3, ("a", "b"))
    rows = [_row("a1", 1, dataset="a"), _row("b1", 1, dataset="b", pass_s=2.0), _row("a2", 2, dataset="a")]
    jobs = job_rounds(two, rows, {"b1": "noisy"}, "concurrent")
    assert [(j.pass_id, j.status, j.pass_s, j.excluded, j.completed) for j in jobs] == [
        ("a1 + b1", "ok", 3.0, True, 6), ("a2", "not attempted", None, False, 3)]
    assert jobs[1].error == "not attempted: b"
