"""Process isolation through a worker template (campaign.engines.prefork): every pass is still a fresh process of
its own, forked from a template that only imported modules; a callable's template never imports torch; a worker lost
without a result is the same failed row as before; the template follows the runner's environment."""

from __future__ import annotations

from pathlib import Path

import json
import os

import pytest
from campaign_factory import callable_campaign

from iteralab.campaign.engines import prefork
from iteralab.campaign.journal import read_journal
from iteralab.evidence.run import run_campaign
from iteralab.evidence.table import read_raw_table

pytestmark = pytest.mark.skipif(not prefork.available(), reason="worker templates need Linux fork")

TESTS = str(Path(__file__).resolve().parents[2] / "support")


@pytest.fixture
def tests_on_path(monkeypatch):
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", TESTS + (os.pathsep + path if path else ""))


def _finished(out):
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()
            if json.loads(line)["event"] == "pass_finished"]


def test_each_pass_runs_in_its_own_forked_process_without_torch(tmp_path, monkeypatch, tests_on_path):
    note = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_MODEL_NOTE", str(note))
    protocol = callable_campaign(tmp_path, fn="fake_models:noting_classifier", passes=2, isolation="process")
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    assert len(rows) == 4 and all(r["corpus_accepted"] == "true" for r in rows)
    calls = [line.split() for line in note.read_text().splitlines()]
    pids = {pid for pid, _, _ in calls}
    parents = {parent for _, parent, _ in calls}
    assert len(pids) == 5  # one process per pass and one for the first-batch check, none reused
    assert str(os.getpid()) not in pids | parents  # forked by the template, not by this process
    assert {torch for _, _, torch in calls} == {"False"}  # a callable's worker (and template) never imports torch
    finished = _finished(out)
    assert all(e["startup"]["forked"] is True for e in finished)
    for key in ("process_start_s", "imports_s", "environment_s", "runtime_s", "worker_wall_s"):
        assert all(e["startup"][key] >= 0 for e in finished), key
    # the template's own start-up is journaled once, with the first worker it served: the first-batch check's
    assert [("template_start_s" in e["startup"]) for e in finished] == [False, False, False, False]
    checks = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()
              if json.loads(line)["event"] == "first_batch_checked"]
    assert len(checks) == 1 and checks[0]["error"] is None and checks[0]["startup"]["forked"] is True
    assert checks[0]["startup"]["template_imports_s"] > 0 and "template_start_s" in checks[0]["startup"]
    assert not (out / ".tmp").exists()  # the template ended with the run, its scratch removed


def test_preloaded_modules_follow_the_model_kind():
    callable_modules = prefork.preload_for("callable")
    assert "iteralab.campaign.engines.passes" in callable_modules
    assert not {"torch", "transformers"} & set(callable_modules)
    assert {"torch", "transformers"} <= set(prefork.preload_for("hf_classifier"))


def test_a_worker_lost_without_a_result_is_a_crash_row_with_its_stderr(tmp_path, tests_on_path):
    protocol = callable_campaign(tmp_path, fn="fake_models:dying_classifier", passes=1, isolation="process",
                                 warmup="inputs = 0\npasses = 0")
    out = tmp_path / "out"
    run_campaign(protocol, out)
    finished = _finished(out)
    assert len(finished) == 2
    for event in finished:
        assert event["status"] == "failed" and event["error_kind"] == "crash"
        assert event["error"] == ("worker process ended (exit code 3) without a result: about to end: the "
                                  "model's last words")
    assert set(read_journal(out / "journal.jsonl").finished) == {e["pass_id"] for e in finished}


def test_a_changed_environment_starts_a_new_template(tmp_path, monkeypatch):
    templates = prefork.Templates(tmp_path / "scratch")
    try:
        first = templates.for_kind("callable")
        assert templates.for_kind("callable") is first
        monkeypatch.setenv("ITERALAB_TEST_CHANGED", "1")
        second = templates.for_kind("callable")
        assert second is not first and first.proc.wait(timeout=60) == 0  # the old one ended when its stdin closed
    finally:
        templates.close()
    assert second.proc.returncode == 0


def test_a_template_that_cannot_start_reports_its_error(tmp_path, monkeypatch):
    monkeypatch.setattr(prefork, "WORKER_MODULES",
                        ("iteralab.campaign.engines.passes", "no_such_module_for_a_template"))
    templates = prefork.Templates(tmp_path / "scratch")
    template = templates.for_kind("callable")
    with pytest.raises(prefork.TemplateGone) as gone:
        template.run(tmp_path / "spec.json", tmp_path / "result.json", tmp_path / "stderr.txt", 0.0)
    code, tail = gone.value.outcome
    assert code == 1 and tail == "ModuleNotFoundError: No module named 'no_such_module_for_a_template'"
    templates.close()


def test_each_forked_pass_reads_its_own_environment_and_a_change_is_flagged(tmp_path, tests_on_path):
    """The environment is read in every worker, after the fork: a package that changes between passes (here the
    installed metadata the worker reads, changed by a sitecustomize file that only the later passes see) shows in
    the journal's manifest diff of those passes."""
    protocol = callable_campaign(tmp_path, passes=2, isolation="process")
    out = tmp_path / "out"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('ITERALAB_TEST_FAKE_NUMPY'):\n"
        "    from importlib import metadata\n"
        "    real = metadata.version\n"
        "    metadata.version = lambda name: '0.0.0-changed' if name == 'numpy' else real(name)\n")
    from iteralab.campaign.engines import local

    real = local.run_in_worker
    calls = []

    def changing(spec, templates=None):  # from the third pass on, the runner's environment says numpy changed
        if not spec.check_only:  # the first-batch check before the first pass is no pass
            calls.append(spec.pass_id)
        if len(calls) == 3:
            os.environ["ITERALAB_TEST_FAKE_NUMPY"] = "1"
            os.environ["PYTHONPATH"] = str(hook) + os.pathsep + os.environ["PYTHONPATH"]
        return real(spec, templates)

    saved = dict(os.environ)
    try:
        local.run_in_worker = changing
        run_campaign(protocol, out)
    finally:
        local.run_in_worker = real
        os.environ.clear()
        os.environ.update(saved)
    finished = _finished(out)
    assert [e["manifest_diff"] for e in finished] == [[], [], ["environment.packages.numpy"],
                                                      ["environment.packages.numpy"]]
    # a changed environment started a new template: the third pass journals a template start-up again (the
    # first template's start-up is journaled with the first-batch check it served first)
    assert ["template_start_s" in e["startup"] for e in finished] == [False, False, True, False]


def test_the_code_version_is_read_once_by_the_pass_that_makes_the_manifest(tmp_path, monkeypatch):
    from iteralab.campaign import manifest

    protocol = callable_campaign(tmp_path, passes=2)  # in-process: the call count is seen here
    reads = []
    real = manifest.git_state
    monkeypatch.setattr(manifest, "git_state", lambda workdir: reads.append(workdir) or real(workdir))
    out = tmp_path / "out"
    run_campaign(protocol, out)
    assert len(reads) == 1
    git = json.loads((out / "manifest.json").read_text())["environment"]["git"]
    assert set(git) == {"commit", "dirty", "reason"} and git != manifest.GIT_NOT_READ.to_json()


def test_a_run_whose_template_cannot_start_runs_fresh_interpreters_and_says_why(tmp_path, monkeypatch,
                                                                                 tests_on_path):
    monkeypatch.setattr(prefork, "WORKER_MODULES",
                        ("iteralab.campaign.engines.passes", "no_such_module_for_a_template"))
    protocol = callable_campaign(tmp_path, passes=1, isolation="process")
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    assert [r["corpus_accepted"] for r in rows] == ["true", "true"]
    for event in _finished(out):
        assert "forked" not in event["startup"]
        assert event["startup"]["template_refused"] == (
            "exit 1: ModuleNotFoundError: No module named 'no_such_module_for_a_template'")
