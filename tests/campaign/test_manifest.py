"""Environment and campaign manifests (C3), manifest differences (C5), atomic JSON."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iteralab.campaign.manifest import (
    MANIFEST_SCHEMA_VERSION,
    GitState,
    campaign_manifest,
    code_version,
    diff_manifests,
    environment_manifest,
    flatten,
    git_state,
    manifest_differences,
    write_json_atomic,
)

HAS_GIT = shutil.which("git") is not None


def _campaign(**over):
    args = dict(environment={"python": {"version": "3.11.9"}, "device_inventory": {"gpus": []}},
                workload_description={"kind": "hf_classifier", "classes": ("plot", "fresh", "rotten")},
                file_hashes={"model.safetensors": "ab" * 32, "config.json": "cd" * 32},
                corpus_fingerprint="f" * 64, order_hash="0" * 64, seeds=[0, 1],
                reproduction_target={"target": "bounded", "bound": 0.001})
    args.update(over)
    return campaign_manifest(**args).to_json()


# ------------------------------------------------------------------------------------------ environment


def test_environment_manifest_reads_the_runtime(tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)  # not a git work tree: the code version is still the package's
    env = environment_manifest()
    assert set(env) == {"python", "platform", "packages", "device_inventory", "git", "determinism",
                        "torch_threads"}
    assert env["python"]["version"] == platform.python_version()
    assert env["packages"]["torch"] in (torch.__version__, torch.__version__.split("+")[0])
    for name in ("transformers", "tokenizers", "safetensors", "numpy", "scikit-learn", "iteralab"):
        assert env["packages"][name], name
    assert env["device_inventory"]["torch"] == torch.__version__
    assert env["determinism"]["torch_deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["git"] == code_version().to_json()
    text = json.dumps(env)
    host = platform.node()
    if len(host) >= 4:
        assert host not in text  # no hostname (privacy)


def _git_repo(folder):
    def git(*args):
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": str(folder), "PATH": "/usr/bin:/bin"})

    git("init", "-q")
    return git


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_git_commit_and_dirty_flag(tmp_path):
    git = _git_repo(tmp_path)
    assert git_state(tmp_path) == GitState(None, None, "the repository has no commit yet")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    clean = git_state(tmp_path)
    assert len(clean.commit) == 40 and clean.dirty is False and clean.reason is None
    (tmp_path / "a.txt").write_text("two")
    dirty = git_state(tmp_path / ".")
    assert dirty.commit == clean.commit and dirty.dirty is True


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_the_code_version_is_that_of_the_package_source_tree_whatever_the_current_folder(tmp_path, monkeypatch):
    """A tracked package records its tree's commit from any folder; an untracked copy (an installed package in a
    project's ignored virtual environment) records none, though the folder around it is a git tree."""
    import iteralab

    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    (repo / "src" / "iteralab").mkdir(parents=True)
    (repo / ".venv" / "iteralab").mkdir(parents=True)
    (repo / ".gitignore").write_text("/.venv/\n")
    for folder in (repo / "src" / "iteralab", repo / ".venv" / "iteralab"):
        (folder / "__init__.py").write_text("")
    elsewhere.mkdir()
    git = _git_repo(repo)
    git("add", ".")
    git("commit", "-q", "-m", "first")
    commit = git_state(repo).commit
    monkeypatch.setattr(iteralab, "__file__", str(repo / "src" / "iteralab" / "__init__.py"))
    for cwd in (elsewhere, repo, repo / ".venv"):
        monkeypatch.chdir(cwd)
        assert code_version() == GitState(commit, False, None)
    monkeypatch.setattr(iteralab, "__file__", str(repo / ".venv" / "iteralab" / "__init__.py"))
    for cwd in (elsewhere, repo):
        monkeypatch.chdir(cwd)
        assert code_version() == GitState(None, None, "the installed iteralab package is not part of a git work tree")
    monkeypatch.setattr(iteralab, "__file__", str(elsewhere / "iteralab" / "__init__.py"))
    (elsewhere / "iteralab").mkdir()
    assert code_version().reason == "the installed iteralab package is not part of a git work tree"


def test_git_missing_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert git_state(tmp_path) == GitState(None, None, "git is not installed")
    assert git_state(tmp_path / "nope").reason.endswith("is not a folder")


# ------------------------------------------------------------------------------------------ campaign


def test_campaign_manifest_shape_and_stable_order():
    m = _campaign(extra={"first_pass": "r01-p01"})
    assert list(m) == ["schema_version", "corpus", "workload", "file_hashes", "environment", "seeds",
                       "reproduction_target", "extra"]
    assert m["schema_version"] == MANIFEST_SCHEMA_VERSION == 1
    assert m["corpus"] == {"fingerprint": "f" * 64, "order_hash": "0" * 64}
    assert list(m["file_hashes"]) == ["config.json", "model.safetensors"]
    assert m["workload"]["classes"] == ["plot", "fresh", "rotten"]  # JSON-native: tuples become lists
    assert _campaign()["extra"] == {}


def test_campaign_manifest_survives_a_round_trip(tmp_path):
    m = _campaign()
    path = tmp_path / "manifest.json"
    write_json_atomic(path, m)
    text = path.read_text()
    assert text.endswith("\n") and text.index('"corpus"') < text.index('"schema_version"')  # sorted keys
    assert diff_manifests(json.loads(text), m) == []
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left behind


@pytest.mark.parametrize("field, value, message", [
    ("seeds", [0, "1"], "seeds"),
    ("seeds", [True], "seeds"),
    ("corpus_fingerprint", "", "corpus_fingerprint"),
    ("order_hash", None, "order_hash"),
    ("file_hashes", {"a": 1}, "file_hashes"),
    ("reproduction_target", {"bound": float("nan")}, "reproduction_target"),
    ("extra", {"when": object()}, "extra"),
])
def test_campaign_manifest_refuses_bad_fields(field, value, message):
    with pytest.raises(ValueError, match=message):
        _campaign(**{field: value})


# ------------------------------------------------------------------------------------------ differences


def test_diff_nested_added_removed_changed():
    a = {"environment": {"packages": {"torch": "2.13.0", "numpy": "2.4.6"},
                         "device_inventory": {"gpus": [{"name": "H200"}, {"name": "H200"}]}},
         "workload": {"precision": "fp32", "compile": {"enabled": False}}, "seeds": [0]}
    b = {"environment": {"packages": {"torch": "2.14.0", "numpy": "2.4.6", "pynvml": "12"},
                         "device_inventory": {"gpus": [{"name": "H200"}]}},
         "workload": {"precision": "fp32"}, "seeds": [0]}
    assert diff_manifests(a, b) == [
        "environment.device_inventory.gpus.1.name",
        "environment.packages.pynvml",
        "environment.packages.torch",
        "workload.compile.enabled",
    ]
    rows = dict((k, (va, vb)) for k, va, vb in manifest_differences(a, b))
    assert rows["environment.packages.torch"] == ("2.13.0", "2.14.0")
    assert rows["environment.packages.pynvml"] == ("<absent>", "12")
    assert diff_manifests(a, b, ignore=["environment.packages", "*.gpus.*"]) == ["workload.compile.enabled"]


def test_diff_is_type_sensitive_and_sees_empty_containers():
    assert diff_manifests({"x": 1}, {"x": 1.0}) == ["x"]
    assert diff_manifests({"x": True}, {"x": 1}) == ["x"]
    assert diff_manifests({"x": None}, {}) == ["x"]
    assert diff_manifests({}, {}) == [] and flatten({}) == {}
    assert diff_manifests({"x": {}}, {"x": []}) == ["x"]
    assert diff_manifests({"x": (1, 2)}, {"x": [1, 2]}) == []
    assert flatten({"a": {"b": [1, {"c": 2}]}, "d": {}}) == {"a.b.0": 1, "a.b.1.c": 2, "d": {}}


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text("abc", max_size=3))
_tree = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.text("xyz", min_size=1, max_size=2),
                                                                    inner, max_size=3)), max_leaves=12)
_manifest = st.dictionaries(st.text("pqr", min_size=1, max_size=2), _tree, max_size=4)


@settings(max_examples=200, deadline=None)
@given(_manifest, _manifest)
def test_diff_properties(a, b):
    assert diff_manifests(a, a) == []
    forward = diff_manifests(a, b)
    assert forward == diff_manifests(b, a) == sorted(forward)
    assert (forward == []) == (json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True))
    assert diff_manifests(a, b, ignore=forward) == []
