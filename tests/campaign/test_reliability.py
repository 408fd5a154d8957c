"""Reliability (R8, R9, D3 and the bad-input standard): kills at precise moments, bad input, full disk, fuzz.

Kills: a campaign runner (the real ``iteralab run`` entry point, in a forked process) is paused by a hook at
a chosen moment and killed with SIGKILL; the folder must then be consistent (``iteralab table`` regenerates
it, the interrupted pass is an aborted row, no temporary or half-written prediction file is counted, every
referenced file matches its hash, ``iteralab verify --unsealed`` passes) and ``iteralab run`` must resume to
completion without touching a finished pass. See ``tests/support/reliability_support.py`` for the harness and
``scripts/reliability.py`` for the long randomized loop.
"""

from __future__ import annotations

import json
import os
import random
import string
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reliability_support as rs
from corpus_strategies import RANDOM_FILES, mutated_valid_files, record_files
from iteralab.plan.corpus import load_corpus, write_corpus
from iteralab.errors import CorpusError, ProtocolError
from iteralab.campaign.journal import read_journal
from iteralab.plan.protocol import parse_protocol
from iteralab.evidence.table import read_raw_table
from protocol_factory import protocol_toml

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _no_problems(problems: list[str]) -> None:
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module", autouse=True)
def _preloaded():
    rs.preload()  # a forked runner then starts at once instead of importing torch again


@pytest.fixture
def reaper():
    """Kill, at the end of a test, every process it started that is still running."""
    workers: list[tuple[int, str | None]] = []  # (pid, start time): never a later process with the same id
    children: list[rs.Child] = []
    yield workers, children
    for child in children:
        child.kill()
    for pid, ident in workers:
        rs.kill_pid(pid, ident)


# ------------------------------------------------------------------------------------ kills, in-process

#: (pause point, pass number in this run, occurrence) -> the phase the evidence must show afterwards.
#: Pass-side points target the second pass, so that a finished pass exists before the kill.
KILL_POINTS = {
    "inputs": (("inputs", 0, 1), "prepare"),
    "prepared": (("prepared", 0, 1), "start"),
    "load": (("load", 2, 1), "load"),
    "warmup": (("warmup", 2, 1), "warm-up"),
    "pass": (("pass", 2, 2), "in pass"),
    "writing": (("writing", 2, 1), "writing"),
    "written": (("written", 2, 1), "written"),
    "manifest": (("manifest", 1, 1), "written"),
    "evaluation": (("evaluation", 2, 1), "evaluation"),
    "between": (("between", 2, 1), "between"),
    "table": (("table", 0, 1), "table"),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_sigkill_inprocess_at_each_moment_then_resume(tmp_path, reaper, point):
    pause, expected_phase = KILL_POINTS[point]
    protocol = rs.make_campaign(tmp_path)
    out = tmp_path / "out"
    child = rs.start_run(protocol, out, tmp_path / "work", pause=pause)
    reaper[1].append(child)
    assert rs.wait_paused(child) is not None, child.log_tail()
    child.kill()

    phase = rs.evidence_phase(out, rs.last_phase_line(tmp_path / "work", child.pid))
    assert phase == expected_phase
    before = rs.snapshot(out) if (out / "campaign.json").exists() else rs.Snapshot()
    if phase in rs.IN_PASS:
        state = read_journal(out / "journal.jsonl")
        assert state.aborted() == [state.order[-1]] and len(before.finished) == pause[1] - 1
    _no_problems(rs.check_after_kill(out, before))
    if phase in rs.IN_PASS:
        rows = {r["pass_id"]: r for r in read_raw_table(out / "raw_table.csv")}
        aborted = rows[read_journal(out / "journal.jsonl").order[-1]]
        assert aborted["status"] == "aborted" and aborted["pass_s"] == "" and aborted["prediction_file"] == ""

    resumed = rs.cli(["run", protocol, "--out", out, "--json"])
    assert resumed.rc == 0, resumed.describe()
    _no_problems(rs.check_complete(out, before, seal_copy=tmp_path / "sealed"))


def test_sigkill_twice_in_a_row_keeps_both_aborted_rows(tmp_path, reaper):
    """A resumed run killed again: every interrupted attempt stays a row, finished passes stay untouched."""
    protocol = rs.make_campaign(tmp_path)
    out = tmp_path / "out"
    snapshots = []
    for n, pause in enumerate((("pass", 2, 1), ("writing", 1, 1)), start=1):
        child = rs.start_run(protocol, out, tmp_path / f"work{n}", pause=pause)
        reaper[1].append(child)
        assert rs.wait_paused(child) is not None, child.log_tail()
        child.kill()
        snapshots.append(rs.snapshot(out))
        _no_problems(rs.check_after_kill(out, snapshots[-1]))
    assert len(read_journal(out / "journal.jsonl").aborted()) == 2
    assert rs.cli(["run", protocol, "--out", out, "--json"]).rc == 0
    for snap in snapshots:
        _no_problems(rs.check_complete(out, snap))
    rows = read_raw_table(out / "raw_table.csv")
    assert [r["status"] for r in rows].count("aborted") == 2 and len(rows) == 6


# ------------------------------------------------------------------------------ kills, worker processes


def test_sigkill_with_worker_processes_parent_then_both_then_worker(tmp_path, reaper):
    """``isolation = "process"``: (1) the runner is killed while its worker is in the measured pass, the
    orphaned worker finishes later and writes its file — which must never be counted; (2) runner and worker
    are both killed while the worker's prediction file is still a temporary file; (3) only the worker is
    killed: the runner records a failed row (no silent retry) and ends normally."""
    protocol = rs.make_campaign(tmp_path, isolation="process", passes=2, variants=[("b4", 4)])
    out = tmp_path / "out"

    child = rs.start_run(protocol, out, tmp_path / "w1", pause=("pass", 2, 2))
    reaper[1].append(child)
    paused = rs.wait_paused(child)
    assert paused is not None, child.log_tail()
    worker = paused["pid"]
    reaper[0].append((worker, paused["ident"]))
    assert worker in rs.descendants_of(child.pid)  # forked by the runner's worker template
    child.kill()
    assert rs.evidence_phase(out, rs.last_phase_line(tmp_path / "w1", worker)) == "in pass"
    before = rs.snapshot(out)
    (tmp_path / "w1" / "release").write_text("go")  # the orphan carries on after its runner died
    assert rs.wait_gone(worker, ident=paused["ident"])
    orphan_file = out / "predictions" / f"{read_journal(out / 'journal.jsonl').order[-1]}.parquet"
    assert orphan_file.exists()
    _no_problems(rs.check_after_kill(out, before))
    assert rs.cli(["verify", out, "--unsealed"]).stdout.count("written by aborted pass") == 1

    child = rs.start_run(protocol, out, tmp_path / "w2", pause=("writing", 1, 1))
    reaper[1].append(child)
    paused = rs.wait_paused(child)
    assert paused is not None, child.log_tail()
    reaper[0].append((paused["pid"], paused["ident"]))
    child.kill()
    rs.kill_pid(paused["pid"], paused["ident"])
    assert rs.wait_gone(paused["pid"], ident=paused["ident"])
    assert rs.evidence_phase(out) == "writing"
    before = rs.snapshot(out)
    _no_problems(rs.check_after_kill(out, before))

    child = rs.start_run(protocol, out, tmp_path / "w3", pause=("pass", 1, 1))
    reaper[1].append(child)
    paused = rs.wait_paused(child)
    assert paused is not None, child.log_tail()
    reaper[0].append((paused["pid"], paused["ident"]))
    rs.kill_pid(paused["pid"], paused["ident"])
    deadline = time.monotonic() + 120
    rc = None
    while rc is None and time.monotonic() < deadline:
        rc = child.exited()
        time.sleep(0.05)
    assert rc == 0, child.log_tail()
    rows = read_raw_table(out / "raw_table.csv")
    assert [r["status"] for r in rows] == ["ok", "aborted", "aborted", "failed"]
    assert "signal 9" in rows[-1]["error"] and rows[-1]["corpus_accepted"] == "false"
    _no_problems(rs.check_complete(out, before, seal_copy=tmp_path / "sealed"))


# ----------------------------------------------------------------------------------- torn journal line


def test_journal_line_cut_short_then_resume_still_verifies(tmp_path, reaper):
    """An append cut short (full disk, power loss) leaves a last line without its newline. The resumed run
    must not glue its next record onto it: the campaign_started record, here the torn one, must exist
    again after the resume, so that the finished campaign verifies."""
    protocol = rs.make_campaign(tmp_path)
    out = tmp_path / "out"
    child = rs.start_run(protocol, out, tmp_path / "work", pause=("load", 1, 1))
    reaper[1].append(child)
    assert rs.wait_paused(child) is not None, child.log_tail()
    child.kill()
    journal = out / "journal.jsonl"
    first = journal.read_bytes().splitlines(keepends=True)[0]
    journal.write_bytes(first[: len(first) // 2])  # the first append, cut in the middle
    before = rs.snapshot(out)
    assert rs.cli(["table", out]).rc == 0
    assert rs.cli(["run", protocol, "--out", out, "--json"]).rc == 0
    _no_problems(rs.check_complete(out, before))


# ------------------------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def bad_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    good = rs.make_campaign(root / "good", passes=1)
    done = root / "good" / "out"
    assert rs.cli(["run", good, "--out", done, "--json"]).rc == 0
    cases = {c.name: c for c in rs.bad_inputs(root / "cases", good, done)}
    assert tuple(cases) == rs.BAD_INPUT_NAMES
    return cases, done


@pytest.mark.parametrize("name", rs.BAD_INPUT_NAMES)
def test_bad_input_is_one_line_error_and_changes_nothing(bad_world, name):
    cases, done = bad_world
    _no_problems(rs.run_bad_input(cases[name], done))


def test_refused_corpus_leaves_no_campaign_behind(bad_world):
    cases, _ = bad_world
    case = cases["corpus-duplicate-ids"]
    protocol = Path(case.argv[1])
    rs.cli(case.argv)  # refused at lock: no lock recorded, so no run can start on it
    assert not protocol.with_name("protocol.toml.lock.json").exists()
    rs.cli(["run", protocol, "--out", protocol.parent / "out", "--json"])
    out = protocol.parent / "out"
    assert not (out / "campaign.json").exists() and not (out / "journal.jsonl").exists()


def test_full_disk_on_a_real_tmpfs_is_one_line_error_and_loses_nothing(tmp_path):
    outcomes = rs.disk_full_cases(tmp_path, [0, 8192])
    if outcomes is None:
        pytest.skip("mounting a tmpfs is not allowed here (see the ENOSPC test)")
    _no_problems([p for o in outcomes for p in o.problems])
    assert [o.name for o in outcomes if not o.full] == []  # the filler left no more than the asked free space
    assert all(o.answer in ("refused", "ran") for o in outcomes)
    # with no byte left the resume must hit ENOSPC and say so; any refusal is for the full disk, nothing else
    assert outcomes[0].name == "disk-full-0B" and outcomes[0].refused_for_space(), outcomes[0]
    assert [o for o in outcomes if o.answer == "refused" and not o.refused_for_space()] == []


def test_disk_full_at_each_write_of_a_resume_is_one_line_error(tmp_path):
    """ENOSPC injected at the 1st..4th atomic write of a resume (prediction files, then the raw table)."""
    outcomes = rs.enospc_cases(tmp_path, [1, 2, 3, 4])
    assert [o.answer for o in outcomes if o.answer == "not reached"] == []
    _no_problems([p for o in outcomes for p in o.problems])
    assert [o for o in outcomes if not (o.full and o.refused_for_space())] == []  # ENOSPC raised and reported


def test_disk_full_at_each_write_of_a_new_campaign_is_one_line_error(tmp_path):
    """ENOSPC at the 1st..6th atomic write of a new campaign: protocol lock copy, corpus copy, campaign.json,
    a prediction file, manifest.json; then the same command with space again must complete."""
    outcomes = rs.enospc_cases(tmp_path, [1, 2, 3, 4, 5], fresh=True)
    assert [o.answer for o in outcomes if o.answer == "not reached"] == []
    _no_problems([p for o in outcomes for p in o.problems])
    assert [o for o in outcomes if not (o.full and o.refused_for_space())] == []  # ENOSPC raised and reported


# ------------------------------------------------------------------------------------------------ fuzz

TOML_BITS = st.sampled_from(['[', ']', '[[', ']]', '=', '"', "'", '"""', '\n', ' ', ',', '{', '}', '.', '#', '-',
                             'true', 'false', 'nan', 'inf', '1e999', '0x1F', '2026-09-24', '12:00:00', 'name',
                             'variants', 'series', 'metric', 'threshold', 'corpus', 'model', 'run', 'passes',
                             'schema_version', 'kind', '\\u0000', '\\ud800', '\x00', 'é', '\r'])
VALID = protocol_toml(model='kind = "callable"\ncallable = "fake_models:keyword_classifier"')
VALUES = st.sampled_from(["-1", "0", "1e400", "-0.0", "nan", '""', '"x"', "[]", "{}", "true", "[1, [2]]",
                          "9" * 40, "1979-05-27T07:32:00Z", '"\\u00e9"', "{a = {b = 1}}"])


def _only_protocol_error(text: str) -> None:
    try:
        parse_protocol(text, source="fuzz.toml")
    except ProtocolError as exc:
        assert exc.message.startswith("fuzz.toml") and "\n" not in exc.message
    except Exception as exc:  # noqa: BLE001 - the finding
        pytest.fail(f"{type(exc).__name__} escaped parse_protocol: {str(exc)[:200]}")


@FUZZ
@given(st.lists(TOML_BITS | st.text(max_size=8), max_size=40).map("".join))
def test_fuzz_protocol_text_only_raises_protocol_error(text):
    _only_protocol_error(text)


@FUZZ
@given(st.data())
def test_fuzz_mutated_valid_protocol_only_raises_protocol_error(data):
    lines = VALID.split("\n")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["value", "drop", "dup", "cut", "insert"]))
        if how == "value" and "=" in lines[i]:
            lines[i] = lines[i].split("=", 1)[0] + "= " + data.draw(VALUES)
        elif how == "drop":
            del lines[i]
        elif how == "dup":
            lines.insert(i, lines[i])
        elif how == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
        else:
            lines.insert(i, data.draw(TOML_BITS) + data.draw(TOML_BITS))
        if not lines:
            lines = [""]
    _only_protocol_error("\n".join(lines))


def _only_corpus_error(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"corpus{suffix}"
        path.write_bytes(data)
        try:
            corpus = load_corpus(path, classes=["plot", "fresh", "rotten"])
        except CorpusError as exc:
            assert str(exc) and "\n" not in exc.message
            return
        except Exception as exc:  # noqa: BLE001 - the finding
            pytest.fail(f"{type(exc).__name__} escaped load_corpus({suffix}): {str(exc)[:200]}")
        # What the reader accepts, the runner must be able to copy into the campaign (inputs/corpus.csv).
        try:
            write_corpus(corpus, Path(tmp) / "copy.csv")
        except CorpusError:
            pass
        except Exception as exc:  # noqa: BLE001 - the finding
            pytest.fail(f"load_corpus({suffix}) accepted a corpus that write_corpus cannot write: "
                        f"{type(exc).__name__}: {str(exc)[:200]}")


@FUZZ
@given(RANDOM_FILES)
def test_fuzz_corpus_random_bytes_only_raise_corpus_error(file):
    _only_corpus_error(*file)


@FUZZ
@given(mutated_valid_files())
def test_fuzz_mutated_valid_corpus_only_raises_corpus_error(file):
    _only_corpus_error(*file)


@FUZZ
@given(record_files())
def test_fuzz_odd_records_only_raise_corpus_error(file):
    _only_corpus_error(*file)


def test_fuzz_corpus_lone_surrogate_escape_is_refused_or_copied():
    """Found by fuzzing: JSON may spell a lone surrogate (an invalid character) as an escape."""
    _only_corpus_error(b'{"id": "a", "text": "good \\ud800", "label": "fresh"}\n', ".jsonl")


def test_fuzz_protocol_deep_nesting_is_a_protocol_error():
    """Found by fuzzing: a deeply nested array makes the TOML parser recurse past Python's limit."""
    _only_protocol_error(VALID + "\nnotes = " + "[" * 3000 + "]" * 3000 + "\n")


def test_seeded_random_texts_round_trip_through_the_corpus_copy(tmp_path):
    """Odd but valid texts (quotes, commas, line breaks, tabs, non-ASCII) survive the campaign's corpus copy."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + ' ,;"\'\n\r\t' + "éß漢字🙂\u00a0"
    rows = [{"id": f"x{i}", "text": "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) + "a",
             "label": rng.choice(["plot", "fresh", "rotten"])} for i in range(60)]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    corpus = load_corpus(src, classes=["plot", "fresh", "rotten"])
    write_corpus(corpus, tmp_path / "copy.csv")
    again = load_corpus(tmp_path / "copy.csv", classes=["plot", "fresh", "rotten"])
    assert again.fingerprint() == corpus.fingerprint() and again.labels == corpus.labels
    assert os.path.getsize(tmp_path / "copy.csv") > 0
