"""The raw table (T1, T2) of a hand-written campaign folder, compared byte for byte with a golden CSV.

Nothing is run: the folder holds a locked protocol copy, the corpus copy, campaign.json, manifest.json, a
journal with fixed timestamps and fixed phase times, and the prediction files, all written here exactly as
the runner and a pass write them. ``write_raw_table`` must regenerate ``tests/support/golden/table/raw_table.csv``
from it; ``ITERALAB_UPDATE_GOLDEN=1`` rewrites the golden file (review its diff before keeping it). Apart
from the bytes, :func:`check_documented_cells` asserts the cells this docstring documents, on the produced
table and on the golden file; the update refuses to write a table that fails them, so a blind regeneration
cannot freeze a regression.

Campaign: one corpus (every row's ``dataset`` cell empty), protocol "golden-protocol" version 2, metric macro_f1 (threshold 0.5, tolerance 0.05, reference
variant b4), gating subgroup ``length`` by stratum, non-gating subgroup ``class`` by label, reproduction
target "bounded" (0.05), 4 rounds of the two variants of the series "precision": b4 (fp32) and b4-int8
(int8-dynamic), Williams order. The golden table's nine rows, in journal order:

1. r01-p01-b4-a1       ok, all 6 ids once, every label right: the reference pass, accepted (metric 1.0,
                       max_abs_prob_diff 0, docs_per_s 2.0).
2. r01-p02-b4-int8-a1  ok, quantized (``qint8 ... 12 layers``), d03 predicted wrong: below the reference
                       beyond the tolerance, gating subgroup length:long fails, probabilities 0.5 away from
                       the reference so the bounded reproduction fails; not accepted.
3. r02-p01-b4-int8-a1  ok, but d02 written twice: observed 7, duplicates 1, ids_match false, not accepted;
                       its manifest differs in one package version (manifest_diff and a note).
4. r02-p02-b4-a1       failed with an out-of-memory error after 4 of 6 inputs: pass_s and docs_per_s empty,
                       the prediction file holds the 4 completed ids (missing 2, coverage 0.666667); its
                       long stratum covers one text, a plot summary, so that stratum's macro-F1 averages the
                       plot class alone (the note lists the classes averaged).
5. r03-p01-b4-a1       aborted: started, its pass_finished line cut short (a damaged journal line), so the row
                       has only the schedule facts, ids_match false and the "aborted" note.
6. r03-p01-b4-a2       the same slot attempted again after the resume: ok and accepted, then excluded with a
                       reason (excluded true, exclusion_reason filled).
7. r03-p02-b4-int8-a1  ok, labels right, probabilities within 0.01 of the reference: accepted; its memory
                       could not be measured (empty cell, reason in notes).
8. r04-p01-b4-int8-a1  failed while loading: every phase, memory and prediction cell empty, the prediction
                       file is missing (observed_ids empty, coverage 0).
9. r04-p02-b4-a1       ok and accepted, a plain second reference-variant pass.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from golden_table import build_folder, sha256_hex
from iteralab.evidence.table import TABLE_NAME, write_raw_table

GOLDEN = (Path(__file__).resolve().parents[1] / "support") / "golden" / "table" / "raw_table.csv"
UPDATE = os.environ.get("ITERALAB_UPDATE_GOLDEN") == "1"


PASS_IDS = ["r01-p01-b4-a1", "r01-p02-b4-int8-a1", "r02-p01-b4-int8-a1", "r02-p02-b4-a1", "r03-p01-b4-a1",
            "r03-p01-b4-a2", "r03-p02-b4-int8-a1", "r04-p01-b4-int8-a1", "r04-p02-b4-a1"]
PHASE_CELLS = ("load_s", "compile_s", "warmup_s", "pass_s", "writing_s")
MEMORY_CELLS = ("cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "memory_scope")
#: macro-F1 of pass 2 (d03, a plot, predicted fresh): plot F1 2/3 (P 1, R 1/2), fresh F1 4/5 (P 2/3, R 1),
#: rotten 1 → 37/45; its long stratum (d03, d04, d05): plot 0, fresh 2/3, rotten 1 → 5/9.
INT8_WRONG_METRIC, INT8_WRONG_LONG = 37 / 45, 5 / 9


def _rows(table: bytes) -> dict[str, dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(table.decode("utf-8"), newline="")))
    assert [r["pass_id"] for r in rows] == PASS_IDS, "nine rows, in journal order"
    return {r["pass_id"]: r for r in rows}


def _notes(row: dict[str, str]) -> list[str]:
    return row["notes"].split(" | ") if row["notes"] else []


def check_documented_cells(table: bytes, folder: Path | None = None) -> None:
    """Assert the cells the module docstring documents, row by row, by column name (a new column does not
    disturb them). ``folder``: the campaign folder the table was written from, to check the prediction hashes
    against the files themselves."""
    rows = _rows(table)
    for pid, row in rows.items():
        assert (row["protocol_name"], row["protocol_version"], row["seed"], row["series"]) == \
            ("golden-protocol", "2", "0", "precision"), pid
        assert row["variant"] == ("b4-int8" if "int8" in pid else "b4"), pid
        assert row["dataset"] == "", pid  # one corpus: the dataset column is there, its cell empty
        assert (row["round"], row["position"], row["attempt"]) == (pid[1:3].lstrip("0"), pid[5:7].lstrip("0"),
                                                                     pid[-1]), pid
        assert row["precision"] == ("int8-dynamic" if "int8" in pid else "fp32"), pid
        assert row["excluded"] == ("" if row["status"] == "aborted" else
                                   "true" if pid == "r03-p01-b4-a2" else "false"), pid
        if row["status"] != "aborted":
            assert row["metric_name"] == "macro_f1" and row["metric_ref"] == "1.000000", pid
        if folder is not None and row["prediction_file"]:
            assert row["prediction_sha256"] == sha256_hex((folder / row["prediction_file"]).read_bytes()), pid
    accepted = [pid for pid, r in rows.items() if r["corpus_accepted"] == "true"]
    assert accepted == ["r01-p01-b4-a1", "r03-p01-b4-a2", "r03-p02-b4-int8-a1", "r04-p02-b4-a1"]
    assert [pid for pid, r in rows.items() if r["corpus_accepted"] != "false"] == accepted

    ref = rows["r01-p01-b4-a1"]  # 1. the reference pass
    assert (ref["status"], ref["observed_ids"], ref["ids_match"], ref["duplicates"], ref["coverage"]) == \
        ("ok", "6", "true", "0", "1.000000")
    assert (ref["metric"], ref["metric_delta"], ref["max_abs_prob_diff"], ref["docs_per_s"], ref["pass_s"]) == \
        ("1.000000", "0.000000", "0.000000", "2.000000", "3.000000")
    assert (ref["threshold_ok"], ref["tolerance_ok"], ref["subgroups_ok"], ref["reproduction_ok"]) == \
        ("true",) * 4

    wrong = rows["r01-p02-b4-int8-a1"]  # 2. int8, d03 wrong, probabilities 0.5 away
    assert wrong["status"] == "ok" and wrong["ids_match"] == "true" and wrong["coverage"] == "1.000000"
    assert "qint8" in wrong["quantization"] and "12 layers" in wrong["quantization"]
    assert float(wrong["metric"]) == pytest.approx(INT8_WRONG_METRIC, abs=1e-6)
    assert float(wrong["metric_delta"]) == pytest.approx(INT8_WRONG_METRIC - 1, abs=1e-6)
    assert json.loads(wrong["subgroup_metrics"])["length:long"] == pytest.approx(INT8_WRONG_LONG)
    assert json.loads(wrong["subgroup_metrics"])["length:short"] == 1.0
    assert (wrong["threshold_ok"], wrong["tolerance_ok"], wrong["subgroups_ok"]) == ("true", "false", "false")
    assert (wrong["max_abs_prob_diff"], wrong["label_agreement"], wrong["reproduction_ok"]) == \
        ("0.500000", "0.833333", "false")
    assert "not accepted: outside tolerance, subgroup length:long, reproduction target 'bounded'" in _notes(wrong)

    dup = rows["r02-p01-b4-int8-a1"]  # 3. d02 written twice
    assert (dup["status"], dup["expected_ids"], dup["observed_ids"], dup["duplicates"], dup["missing"],
            dup["extra"], dup["ids_match"]) == ("ok", "6", "7", "1", "0", "0", "false")
    assert (dup["metric"], dup["tolerance_ok"], dup["reproduction_ok"]) == ("1.000000", "true", "true")
    assert dup["manifest_diff"] == "environment.packages.transformers"
    assert "manifest differs from the campaign's in: environment.packages.transformers" in _notes(dup)
    assert "not accepted: ids do not match" in _notes(dup)

    oom = rows["r02-p02-b4-a1"]  # 4. out of memory after 4 of 6 inputs
    assert (oom["status"], oom["pass_s"], oom["docs_per_s"], oom["completed"], oom["observed_ids"],
            oom["missing"], oom["coverage"], oom["ids_match"]) == \
        ("failed", "", "", "4", "4", "2", "0.666667", "false")
    assert oom["error"] == "MemoryError: out of memory (simulated)"
    assert oom["prediction_file"] == "predictions/r02-p02-b4-a1.parquet"
    assert json.loads(oom["subgroup_metrics"])["length:long"] == 1.0
    assert 'subgroup classes averaged (a class absent from the subgroup is left out of its macro_f1): ' \
           '{"length:long": ["plot"]}' in _notes(oom)
    assert "pass_s: empty, the measured pass did not complete" in _notes(oom)

    aborted = rows["r03-p01-b4-a1"]  # 5. aborted: only the schedule facts
    assert (aborted["status"], aborted["ids_match"], aborted["corpus_accepted"], aborted["expected_ids"]) == \
        ("aborted", "false", "false", "6")
    measured = ("observed_ids", "duplicates", "missing", "coverage", "completed", "metric", "metric_delta",
                "threshold_ok", "tolerance_ok", "subgroups_ok", "subgroup_metrics", "label_agreement",
                "max_abs_prob_diff", "reproduction_ok", "prediction_file", "prediction_sha256", "error",
                "evaluation_s", "docs_per_s")
    assert {k: aborted[k] for k in (*measured, *PHASE_CELLS, *MEMORY_CELLS) if aborted[k] != ""} == {}
    assert aborted["notes"].startswith("aborted: the process ended during this pass")

    again = rows["r03-p01-b4-a2"]  # 6. the slot again, accepted, then excluded
    assert (again["status"], again["attempt"], again["ids_match"], again["corpus_accepted"]) == \
        ("ok", "2", "true", "true")
    assert (again["excluded"], again["exclusion_reason"]) == ("true", "host backup ran during the pass")
    assert [r["exclusion_reason"] for p, r in rows.items() if p != "r03-p01-b4-a2"] == [""] * 8

    bounded = rows["r03-p02-b4-int8-a1"]  # 7. within the bound, memory not measured
    assert (bounded["status"], bounded["ids_match"], bounded["max_abs_prob_diff"], bounded["reproduction_ok"]) == \
        ("ok", "true", "0.010000", "true")
    assert bounded["cpu_peak_rss_bytes"] == ""
    assert "memory: not measured: /proc/self/status has no VmHWM on this platform" in _notes(bounded)

    load = rows["r04-p01-b4-int8-a1"]  # 8. failed while loading
    assert (load["status"], load["observed_ids"], load["coverage"], load["completed"], load["ids_match"]) == \
        ("failed", "", "0.000000", "0", "false")
    assert {k: load[k] for k in (*PHASE_CELLS, *MEMORY_CELLS, "prediction_file", "prediction_sha256",
                                 "docs_per_s", "metric") if load[k] != ""} == {}
    assert load["error"] == "OSError: model/model.safetensors: Input/output error"
    assert "prediction file r04-p01-b4-int8-a1.parquet is missing" in _notes(load)

    plain = rows["r04-p02-b4-a1"]  # 9. a plain second reference-variant pass
    assert (plain["status"], plain["ids_match"], plain["metric"], plain["max_abs_prob_diff"],
            plain["corpus_accepted"]) == ("ok", "true", "1.000000", "0.000000", "true")

    # the cells of every row that completed with its ids, and of none other
    assert [p for p, r in rows.items() if r["ids_match"] == "true"] == \
        ["r01-p01-b4-a1", "r01-p02-b4-int8-a1", "r03-p01-b4-a2", "r03-p02-b4-int8-a1", "r04-p02-b4-a1"]


def compare_or_update(produced: bytes, golden: Path, update: bool, folder: Path | None = None) -> None:
    """The documented cells first: ``update`` writes ``golden`` only when they hold; then the bytes."""
    check_documented_cells(produced, folder)
    if update:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(produced)
    assert golden.is_file(), f"missing golden file {golden}; set ITERALAB_UPDATE_GOLDEN=1 to write it"
    assert produced == golden.read_bytes()


def test_raw_table_matches_golden_byte_for_byte(tmp_path):
    folder = build_folder(tmp_path / "camp")
    target = write_raw_table(folder)
    assert target == folder / TABLE_NAME
    compare_or_update(target.read_bytes(), GOLDEN, UPDATE, folder)


def test_golden_file_holds_the_documented_cells():
    check_documented_cells(GOLDEN.read_bytes())


@pytest.mark.parametrize("pass_id, column, value", [
    ("r02-p01-b4-int8-a1", "ids_match", "true"),
    ("r02-p01-b4-int8-a1", "duplicates", "0"),
    ("r01-p02-b4-int8-a1", "metric", "1.000000"),
    ("r02-p02-b4-a1", "coverage", "1.000000"),
    ("r04-p01-b4-int8-a1", "load_s", "2.500000"),
    ("r03-p01-b4-a1", "status", "ok"),
    ("r01-p02-b4-int8-a1", "subgroup_metrics", '{"length:long": 1.0, "length:short": 1.0}'),
    ("r03-p02-b4-int8-a1", "corpus_accepted", "false"),
])
def test_update_refuses_a_table_whose_documented_cells_changed(tmp_path, pass_id, column, value):
    """One regressed cell: the comparison fails and ITERALAB_UPDATE_GOLDEN writes nothing."""
    folder = build_folder(tmp_path / "camp")
    rows = list(csv.DictReader(io.StringIO(write_raw_table(folder).read_text(encoding="utf-8"), newline="")))
    for row in rows:
        if row["pass_id"] == pass_id:
            row[column] = value
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    golden = tmp_path / "golden" / "raw_table.csv"
    with pytest.raises(AssertionError):
        compare_or_update(out.getvalue().encode("utf-8"), golden, True, folder)
    assert not golden.exists()


def test_raw_table_does_not_depend_on_the_folder_location(tmp_path):
    first = write_raw_table(build_folder(tmp_path / "one")).read_bytes()
    second = write_raw_table(build_folder(tmp_path / "elsewhere" / "two")).read_bytes()
    assert first == second
