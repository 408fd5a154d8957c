"""A rerun of an unpacked bundle imports the callable module the bundle carries (39.2), and its staging folder
never outlives the command.

The callable's module is written by the test into a folder of its own, importable only while the earlier campaign
runs (on ``sys.path``, never on ``PYTHONPATH``); the rerun sees a machine where it cannot be found.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from campaign_factory import callable_campaign
from iteralab.cli import main
from iteralab.evidence import rerun as rerun_module
from iteralab.evidence.bundle import pack, unpack
from iteralab.evidence.rerun import rerun, staging_folder
from iteralab.evidence.run import run_campaign

MODULE = "carried_scorer_for_rerun"
CODE = '''
def score(texts):
    """Keyword scores over the classes plot, fresh, rotten."""
    rows = []
    for text in texts:
        plot, fresh = "story" in text, "good" in text
        rows.append([0.8, 0.1, 0.1] if plot else [0.1, 0.8, 0.1] if fresh else [0.1, 0.1, 0.8])
    return rows
'''


def _forget(code: Path) -> None:
    """This interpreter, from now on, is a machine without the module."""
    while str(code) in sys.path:
        sys.path.remove(str(code))
    for name in [n for n in sys.modules if n == MODULE]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """An unpacked bundle of a campaign whose callable lives in a folder this machine no longer has on its path."""
    root = tmp_path_factory.mktemp("carried")
    code = root / "code"
    code.mkdir()
    (code / f"{MODULE}.py").write_text(CODE, encoding="utf-8")
    sys.path.insert(0, str(code))
    try:
        protocol = callable_campaign(root, fn=f"{MODULE}:score", passes=1)
        run_campaign(protocol, root / "camp")
        archive, _ = pack(root / "camp", root / "camp.tar.gz")
    finally:
        _forget(code)
    return unpack(archive, root / "unpacked").dest


def test_rerun_of_an_unpacked_bundle_imports_the_callable_it_carries(bundle, tmp_path, capsys):
    assert importlib.util.find_spec(MODULE) is None
    assert MODULE not in __import__("os").environ.get("PYTHONPATH", "")
    out = tmp_path / "again"
    assert main(["rerun", str(bundle), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    line = (f"model.callable: '{MODULE}:score' is not on this machine: using the copy the bundle carries "
            "(inputs/model/callable, 1 file(s) with their recorded sha256)")
    assert line in " ".join(text.split()), text
    assert "b1: accepted -> accepted (same verdict); outputs identical" in text
    assert (out / "inputs/model/callable" / f"{MODULE}.py").read_bytes() == \
        (bundle / "inputs/model/callable" / f"{MODULE}.py").read_bytes()
    assert not staging_folder(out).exists()
    assert MODULE not in sys.modules and importlib.util.find_spec(MODULE) is None  # nothing left importable


def test_each_pass_worker_process_imports_the_carried_callable(bundle, tmp_path):
    result = rerun(bundle, tmp_path / "again", isolation="process")
    assert result["comparison"]["same_verdicts"] is True
    assert {v["outputs"] for v in result["comparison"]["variants"].values()} == {"identical"}
    assert result["comparison"]["rerun"]["model_inputs"][0]["key"] == "model.callable"


def test_the_staging_folder_is_removed_when_the_rerun_fails(bundle, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        assert staging_folder(tmp_path / "again").is_dir()  # the inputs were staged
        raise KeyboardInterrupt

    monkeypatch.setattr(rerun_module, "run_campaign", broken)
    with pytest.raises(KeyboardInterrupt):
        rerun(bundle, tmp_path / "again")
    assert not staging_folder(tmp_path / "again").exists()


GENERATOR = "carried_answerer_for_rerun"


def test_a_generation_callable_the_bundle_carries_reruns_without_its_folder(tmp_path, capsys):
    from generation_jobs import write_job

    code = tmp_path / "code"
    code.mkdir()
    (code / f"{GENERATOR}.py").write_text("def answer(prompts):\n    return [p.split()[-1] for p in prompts]\n",
                                          encoding="utf-8")
    sys.path.insert(0, str(code))
    try:
        from iteralab.lock.inputs import lock

        (tmp_path / "job").mkdir()
        protocol = write_job(tmp_path / "job", f'kind = "callable"\ncallable = "{GENERATOR}:answer"')
        lock(protocol)
        run_campaign(protocol, tmp_path / "camp")
        archive, _ = pack(tmp_path / "camp", tmp_path / "camp.tar.gz")
    finally:
        while str(code) in sys.path:
            sys.path.remove(str(code))
        sys.modules.pop(GENERATOR, None)
        importlib.invalidate_caches()
    received = unpack(archive, tmp_path / "received").dest
    out = tmp_path / "again"
    assert main(["rerun", str(received), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert f"model.callable: '{GENERATOR}:answer' is not on this machine: using the copy the bundle carries" in text
    assert "b1: accepted -> accepted (same verdict); outputs identical" in text
    assert not staging_folder(out).exists()
