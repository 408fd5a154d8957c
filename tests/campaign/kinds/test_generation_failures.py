"""What a generation job's user sees when a callable fails: the lock refuses a callable it cannot call, the run
refuses a callable that fails on its first warm-up batch, names the first failure and exits non-zero when no pass
is accepted; an answer over ``max_new_tokens`` is cut and judged by the length share; an error about one answer
names its document."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iteralab.errors import ProtocolError, RunError
from generation_jobs import rows_of, write_job

COUNTS = 'kind = "callable"\ncallable = "fake_generators:{}"'


def callable_job(folder: Path, name: str, edit=None, **kwargs) -> Path:
    from iteralab.lock.inputs import lock

    protocol = write_job(folder, COUNTS.format(name), **kwargs)
    if edit is not None:
        protocol.write_text(edit(protocol.read_text()))
    lock(protocol)
    return protocol


# ----------------------------------------------------------------------------------------- lock


def test_lock_refuses_a_function_the_callable_module_does_not_define(tmp_path):
    from iteralab.lock.inputs import lock

    protocol = write_job(tmp_path, COUNTS.format("nope"))
    with pytest.raises(ProtocolError) as info:
        lock(protocol)
    message = info.value.message
    assert "model.callable: module 'fake_generators'" in message and "defines no 'nope'" in message
    assert "with_counts" in message and "\n" not in message  # what it does define
    assert "module:function" in info.value.hint
    assert not list(tmp_path.glob("*.lock.json"))


def test_lock_shows_the_module_function_form_for_a_dotted_callable(tmp_path, capsys):
    from iteralab.cli import main

    protocol = write_job(tmp_path, 'kind = "callable"\ncallable = "fake_generators.with_counts"')
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"Error: {protocol}: model.callable: 'fake_generators.with_counts' is not of the form "
                      "module:function — did you mean 'fake_generators:with_counts'?")
    assert err[1].startswith("Hint: write module:function (e.g. my_generator:generate") and len(err) == 2
    protocol.write_text(protocol.read_text().replace("fake_generators.with_counts", "no_such_module:generate"))
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "module 'no_such_module' cannot be found" in err[0] and "module:function" in err[1]
    assert not list(tmp_path.glob("*.lock.json"))


def test_lock_does_not_run_the_callable_module(tmp_path, monkeypatch):
    # a module that would fail (or load a model) when imported is read, not run: the function is found in its source
    module = tmp_path / "heavy_generator.py"
    module.write_text('raise RuntimeError("loads a model at import")\n\n\ndef generate(prompts):\n    return prompts\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    from iteralab.lock.inputs import lock

    protocol = write_job(tmp_path, 'kind = "callable"\ncallable = "heavy_generator:generate"')
    lock(protocol)
    assert list(tmp_path.glob("*.lock.json"))


def test_the_names_a_callable_module_binds_are_read_from_its_source(tmp_path):
    from iteralab.lock.usercode import top_level_names

    module = tmp_path / "m.py"
    module.write_text("import os.path\ntry:\n    from fast import generate\nexcept ImportError:\n"
                      "    def generate(prompts):\n        local = 1\n        return prompts\n"
                      "client = object()\nclass Server:\n    pass\n")
    assert {"os", "generate", "client", "Server"} <= top_level_names(module)
    assert "local" not in top_level_names(module)  # a function's own names are not the module's
    module.write_text("from fast import *\n")
    assert top_level_names(module) is None  # cannot be told without running it: not refused
    module.write_text("def __getattr__(name):\n    return print\n")
    assert top_level_names(module) is None


# ----------------------------------------------------------------------------------------- run


def test_run_refuses_a_callable_that_fails_on_its_first_warmup_batch(tmp_path, capsys):
    from iteralab.cli import main

    protocol = callable_job(tmp_path, "raising")
    out = tmp_path / "camp"
    assert main(["run", str(protocol), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"Error: {protocol}: model.callable: the call on the first warm-up batch (1 document, "
                      "variant b1) failed before any pass: RuntimeError: the generator's server is down")
    assert err[1].startswith("Hint: fix the callable") and len(err) == 2
    assert not out.exists()  # nothing run, nothing left behind


def test_the_first_batch_check_names_the_document_a_wrong_answer_belongs_to(tmp_path):
    from iteralab.evidence.run import run_campaign

    variants = '[[variants]]\nname = "b4"\nbatch_size = 4\n\n[[variants]]\nname = "b1"\nbatch_size = 1\n'
    protocol = callable_job(tmp_path, "over_counted", variants=variants, edit=lambda text: text.replace(
        'reference_variant = "b1"', 'reference_variant = "b4"').replace("inputs = 2", "inputs = 4"))
    with pytest.raises(RunError) as info:
        run_campaign(protocol, tmp_path / "camp")
    assert "(4 documents, variant b4)" in info.value.message
    assert "returned 99 generated tokens for document 'd2', outside 0…max_new_tokens 4" in info.value.message


def test_a_wrong_answer_in_a_pass_names_its_document(tmp_path):
    from iteralab.evidence.run import run_campaign

    protocol = callable_job(tmp_path, "over_counted")
    summary = run_campaign(protocol, tmp_path / "camp")
    rows = rows_of(tmp_path / "camp")
    b4 = [r for r in rows.values() if r.variant == "b4"]
    assert b4 and all(r.status == "failed" and "for document 'd2'" in (r.error or "") for r in b4)
    assert all("row" not in (r.error or "") for r in b4)
    assert summary["accepted"] == 2  # b1's passes: one document per batch, never a third row


def test_run_exits_1_naming_the_first_failure_when_no_pass_is_accepted(tmp_path, capsys):
    from iteralab.cli import main

    protocol = callable_job(tmp_path, "short_on_blue")  # the first batches pass; the document about blue fails
    out = tmp_path / "camp"
    assert main(["run", str(protocol), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    why = "WorkloadError: callable: fake_generators:short_on_blue returned 0 texts for 1 prompts"
    assert f"first failure, r01-p01-b1-a1: {why}" in err  # said as it happens
    lines = [line for line in err.splitlines() if line.startswith(("Error:", "Hint:"))]
    assert lines[0] == f"Error: no pass accepted in {out}; first failure: r01-p01-b1-a1: {why}"
    assert "--allow-no-accepted" in lines[1] and len(lines) == 2
    assert len(rows_of(out)) == 4  # every pass ran and is recorded


def test_allow_no_accepted_keeps_exit_0(tmp_path, capsys):
    from iteralab.cli import main

    protocol = callable_job(tmp_path, "short_on_blue")
    assert main(["run", str(protocol), "--out", str(tmp_path / "camp"), "--allow-no-accepted"]) == 0
    assert "no pass accepted" in capsys.readouterr().err


def test_a_routine_that_returns_nan_accepts_no_pass_and_says_why(tmp_path, capsys):
    from iteralab.cli import main

    protocol = callable_job(tmp_path, "last_words", metric='routine = "generation_routines:nan_score"')
    assert main(["run", str(protocol), "--out", str(tmp_path / "camp")]) == 1
    err = capsys.readouterr().err
    assert "first failure, r01-p01-b1-a1: metric routine" in err  # said as it happens, though the pass is "ok"
    assert "Error: no pass accepted" in err and "first failure: r01-p01-b1-a1: not accepted: " in err
    assert "nan" in err.lower().split("first failure:")[1]


# ----------------------------------------------------------------------------------------- lengths


def test_an_answer_over_max_new_tokens_is_cut_and_judged_by_the_length_share(tmp_path, tiny_causal_lm):
    from iteralab.campaign.kinds.generation.output import read_texts
    from iteralab.evidence.run import run_campaign

    model = f'kind = "callable"\ncallable = "fake_generators:rambling"\npath = "{tiny_causal_lm.as_posix()}"'
    from iteralab.lock.inputs import lock

    protocol = write_job(tmp_path, model, generation="max_length_share = 0.5")
    lock(protocol)
    summary = run_campaign(protocol, tmp_path / "camp")
    rows = rows_of(tmp_path / "camp")
    assert all(r.status == "ok" and r.format_ok and r.length_share == 1.0 for r in rows.values())
    assert all(not r.corpus_accepted and "length share" in r.notes for r in rows.values())
    assert summary["accepted"] == 0
    texts = read_texts(next((tmp_path / "camp" / "predictions").glob("*.parquet")), max_new_tokens=4,
                       allow_empty=False)
    assert set(texts.tokens.tolist()) == {4} and texts.texts.to_pylist()[0] == "the cat sat on"


def test_tokens_are_counted_on_the_stored_text_in_a_campaign(tmp_path, tiny_causal_lm):
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    model = f'kind = "callable"\ncallable = "fake_generators:junk_after_newline"\npath = "{tiny_causal_lm.as_posix()}"'
    protocol = write_job(tmp_path, model, max_new_tokens=8, generation='stop = ["\\n"]')
    lock(protocol)
    run_campaign(protocol, tmp_path / "camp")
    rows = rows_of(tmp_path / "camp")
    # every stored answer is the prompt's last three words (at most three tokens); the six after the newline are
    # neither stored nor counted
    assert all(r.mean_tokens is not None and r.mean_tokens <= 3 for r in rows.values()), \
        [r.mean_tokens for r in rows.values()]
    assert all(r.length_share == 0.0 for r in rows.values())


def test_a_refused_first_batch_in_a_forked_worker_leaves_nothing_behind(tmp_path, monkeypatch):
    from iteralab.evidence.run import run_campaign

    tests = str((Path(__file__).resolve().parents[2] / "support"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    protocol = callable_job(tmp_path, "one_text_short",
                            edit=lambda text: text.replace('isolation = "inprocess"', 'isolation = "process"'))
    out = tmp_path / "camp"
    out.mkdir()  # an empty folder the user made: kept, emptied
    with pytest.raises(RunError, match="returned 0 texts for 1 prompts"):
        run_campaign(protocol, out)
    assert out.is_dir() and not list(out.iterdir())
