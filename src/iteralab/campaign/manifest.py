"""Campaign manifest (C3) and manifest differences (C5).

``environment_manifest`` reads what this process actually runs on: interpreter, OS, package versions,
the device inventory, the code version (git commit + dirty flag of the installed iteralab package's own source
tree, whatever the current folder), determinism options and thread count.
No hostname (privacy). ``campaign_manifest`` ties it to the workload, file hashes, corpus fingerprint, order
hash, seeds and the reproduction target into a :class:`Manifest`, the typed manifest.json
(:func:`read_manifest` and :func:`write_manifest` its one reader and writer). ``diff_manifests`` lists the dotted keys that differ, so a pass
whose environment drifted from the campaign's is flagged, and two campaigns' differing fields are listed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import iteralab
from iteralab.common.files import sha256_file, write_json_atomic
from iteralab.errors import RunError
from iteralab.models.device import device_inventory, host_inventory

__all__ = ["GIT_NOT_READ", "MANIFEST_SCHEMA_VERSION", "PACKAGES", "RESUME_KEYS", "GitState", "Manifest", "ObservedFacts",
           "campaign_manifest", "check_resume_environment", "code_version", "determinism_settings",
           "diff_manifests", "env_summary", "environment_manifest", "flatten", "git_state", "load_observed",
           "manifest_differences", "read_manifest", "rocm_compatibility", "rocm_compatibility_line", "sha256_file",
           "write_json_atomic", "write_manifest"]

MANIFEST_SCHEMA_VERSION = 1
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "scikit-learn", "iteralab",
            "nvidia-ml-py")
ABSENT = "<absent>"


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}  # read-only: never refresh the index
    return subprocess.run(["git", "-C", str(workdir), *args], capture_output=True, text=True, timeout=30, env=env)


@dataclass(frozen=True)
class GitState:
    """The state of a git work tree: its HEAD commit and whether it holds changes (None + ``reason`` where it
    could not be read); the manifest's ``git`` record (:meth:`to_json`)."""

    commit: str | None
    dirty: bool | None
    reason: str | None

    def to_json(self) -> dict[str, str | bool | None]:
        return {"commit": self.commit, "dirty": self.dirty, "reason": self.reason}


def _unknown(reason: str) -> GitState:
    return GitState(None, None, reason)


def git_state(workdir: Path) -> GitState:
    """The commit, dirty flag and reason of the git work tree holding ``workdir``; None + reason otherwise."""
    if not workdir.is_dir():
        return _unknown(f"{workdir} is not a folder")
    try:
        inside = _git(workdir, "rev-parse", "--is-inside-work-tree")
    except FileNotFoundError:
        return _unknown("git is not installed")
    except subprocess.TimeoutExpired:
        return _unknown("git did not answer within 30 s")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return _unknown(f"{workdir} is not inside a git work tree")
    head = _git(workdir, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return _unknown("the repository has no commit yet")
    status = _git(workdir, "status", "--porcelain", "--untracked-files=normal")
    if status.returncode != 0:
        return GitState(head.stdout.strip(), None, f"git status failed: {status.stderr.strip()[:200]}")
    return GitState(head.stdout.strip(), bool(status.stdout.strip()), None)


def determinism_settings() -> dict[str, bool | str | None]:
    import torch

    return {
        "torch_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch_deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
    }


def code_version() -> GitState:
    """The code version (C3): the git state of the tree the imported iteralab package is a tracked part of, read
    from the package's own folder, so a run started in any folder records the same. None + reason where the
    package is not tracked by git (an installed wheel, even inside another project's tree)."""

    folder = Path(iteralab.__file__).resolve().parent
    try:
        tracked = _git(folder, "ls-files", "--error-unmatch", "--", "__init__.py")
    except FileNotFoundError:
        return _unknown("git is not installed")
    except subprocess.TimeoutExpired:
        return _unknown("git did not answer within 30 s")
    if tracked.returncode != 0:
        return _unknown("the installed iteralab package is not part of a git work tree")
    return git_state(folder)


#: The code version of a pass that does not read it (``git=False``): only the campaign's manifest keeps it.
GIT_NOT_READ = GitState(None, None, "not read: the campaign's manifest records the code version of its first pass")


def environment_manifest(*, runtime: bool = True, git: bool = True) -> dict[str, Any]:
    """The software and hardware this process runs on, read from the runtime. The code version is that of the
    iteralab package's source tree (:func:`code_version`), never of the current folder; ``git=False`` skips it
    (a pass whose environment is only compared with the campaign's, where the working tree may legitimately
    change: ``git status`` of a large tree costs seconds). ``runtime=False`` (a workload that owns its model and
    device, e.g. a Python callable) reads no fact that would import torch: torch's version comes from the
    installed package, its runtime fields are None with the reason."""

    versions = {name: _package_version(name) for name in PACKAGES}
    if runtime and versions["torch"] is None:  # e.g. a torch built from source: the module still knows its version
        import torch

        versions["torch"] = torch.__version__
    env = {
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "platform": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                     "platform": platform.platform(), "libc": "-".join(filter(None, platform.libc_ver())) or None},
        "packages": versions,
        # torch already imported in this process (an in-process campaign): its runtime facts cost nothing more
        "device_inventory": device_inventory() if runtime or "torch" in sys.modules else host_inventory(),
        "git": (code_version() if git else GIT_NOT_READ).to_json(),
    }
    if runtime:
        import torch

        env["determinism"] = determinism_settings()
        env["torch_threads"] = torch.get_num_threads()
    else:
        env["determinism"] = {"pythonhashseed": os.environ.get("PYTHONHASHSEED"),
                              "reason": "torch not imported: the workload owns its model and device"}
        env["torch_threads"] = None
    return env


def owns_device(model_kind: str | None) -> bool:
    """A workload kind that owns its model and device (the harness then never imports torch)."""
    return model_kind == "callable"


def _jsonable(value: Any, where: str) -> Any:
    """A deep, JSON-native copy (tuples → lists), so a manifest compares equal to its reloaded file."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: not JSON-serialisable ({exc})") from exc


@dataclass(frozen=True)
class ObservedFacts:
    """The manifest facts a pass observed that every later pass of its campaign must match (C3/C5): the
    environment it ran in (its code version left out: the working tree may change between passes) and the model's
    file hashes; the manifest's ``observed`` part (:meth:`to_json`), written by the first successful pass."""

    #: the environment record as :func:`environment_manifest` read it
    environment: dict[str, Any]
    file_hashes: Mapping[str, str] | None = None

    @classmethod
    def from_json(cls, record: Mapping[str, object]) -> ObservedFacts:
        environment = record.get("environment")
        hashes = record.get("file_hashes")
        return cls(dict(environment) if isinstance(environment, Mapping) else {},
                   dict(hashes) if isinstance(hashes, Mapping) else None)

    def to_json(self) -> dict[str, object]:
        return {"environment": self.environment, "file_hashes": self.file_hashes}


@dataclass(frozen=True)
class Manifest:
    """manifest.json (C3): the corpus it ran (fingerprint, order hash), the workload, the model files' hashes, the
    environment of the first successful pass, the seeds, the reproduction target, the protocol/variants/model
    spec (``extra``), and the manifest facts that pass observed (``observed``: what every later pass must match)."""

    corpus: Mapping[str, Any]
    workload: Mapping[str, Any] = field(default_factory=dict)
    file_hashes: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    reproduction_target: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    observed: Mapping[str, Any] | None = None
    schema_version: int = MANIFEST_SCHEMA_VERSION

    @classmethod
    def from_json(cls, record: Any, where: object) -> Manifest:
        if not isinstance(record, Mapping) or not isinstance(record.get("corpus"), Mapping):
            raise RunError(f"{where}: not a campaign manifest (no corpus section)",
                           hint="restore the file from the evidence bundle")
        known = {k: record[k] for k in cls.__dataclass_fields__ if k in record}
        return cls(**{**known, "seeds": tuple(known.get("seeds") or ())})

    def to_json(self) -> dict[str, object]:
        """The JSON form, keys in the stable order (``observed`` once the first successful pass wrote it)."""
        record: dict[str, object] = {
            "schema_version": self.schema_version, "corpus": dict(self.corpus), "workload": self.workload,
            "file_hashes": dict(self.file_hashes), "environment": self.environment, "seeds": list(self.seeds),
            "reproduction_target": self.reproduction_target, "extra": self.extra}
        return record if self.observed is None else {**record, "observed": self.observed}

    def with_observed(self, observed: Mapping[str, Any]) -> Manifest:
        return replace(self, observed=observed)


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``; None before the first successful pass wrote it."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunError(f"{path}: the manifest is not valid JSON ({exc})",
                       hint="restore the file from the evidence bundle") from None
    return Manifest.from_json(record, path)


def write_manifest(path: Path, manifest: Manifest) -> None:
    write_json_atomic(path, manifest.to_json())


def campaign_manifest(*, environment: Mapping[str, Any], workload_description: Mapping[str, Any],
                      file_hashes: Mapping[str, str], corpus_fingerprint: str, order_hash: str, seeds: list[int],
                      reproduction_target: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> Manifest:
    """The manifest written at the start of a campaign (C3), schema_version 1, its values JSON-native."""
    if not isinstance(corpus_fingerprint, str) or not corpus_fingerprint:
        raise ValueError("corpus_fingerprint: a non-empty string is required")
    if not isinstance(order_hash, str) or not order_hash:
        raise ValueError("order_hash: a non-empty string is required")
    if not isinstance(seeds, (list, tuple)) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"seeds: a list of integers is required, got {seeds!r}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in file_hashes.items()):
        raise ValueError("file_hashes: a mapping of file name → sha256 hex is required")
    return Manifest(
        corpus={"fingerprint": corpus_fingerprint, "order_hash": order_hash},
        workload=_jsonable(workload_description, "workload_description"),
        file_hashes=dict(sorted(file_hashes.items())),
        environment=_jsonable(environment, "environment"),
        seeds=tuple(seeds),
        reproduction_target=_jsonable(reproduction_target, "reproduction_target"),
        extra=_jsonable(extra or {}, "extra"))


def rocm_compatibility(manifest: Manifest | None) -> dict[str, Any] | None:
    """The C4 verdict a campaign's manifest recorded (``environment.device_inventory.rocm``): the lookup of what
    the ROCm runtime observed, ``{"verdict": "not applicable", …}`` on CUDA or CPU, None in a manifest written
    before the field existed."""
    inventory = (manifest.environment if manifest else {}).get("device_inventory") or {}
    found = inventory.get("rocm")
    return dict(found) if isinstance(found, Mapping) else None


def rocm_compatibility_line(manifest: Manifest | None) -> str | None:
    """One line for the raw table's notes and the decision note, e.g. ``C4 ROCm 6.2.0 matrix
    (compatibility-matrix-historical-6.0@7.2.0.csv, 2026-01-21): not listed: os Ubuntu 20.04 not listed; …``.
    None where C4 does not apply (no ROCm runtime) or was not recorded."""
    c4 = rocm_compatibility(manifest)
    if c4 is None or c4.get("verdict") == "not applicable":
        return None
    source = (f" ({c4['snapshot']}, {c4.get('snapshot_date')})" if c4.get("snapshot")
              else " (no shipped snapshot has this ROCm release)" if c4.get("facts") else "")
    facts = "; ".join(f"{f['fact']} {f['key']} {f['verdict']}" for f in c4.get("facts") or [])
    reason = c4.get("reason")
    tail = "; ".join(x for x in (facts, reason) if x)
    return f"C4 ROCm {c4.get('rocm_column') or c4.get('rocm') or '?'} matrix{source}: {c4['verdict']}" + (
        f": {tail}" if tail else "")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys → leaf values. Lists are indexed (``gpus.0.name``); empty dicts/lists are leaves."""
    if isinstance(obj, Mapping) and obj:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(obj, (list, tuple)) and obj:
        out = {}
        for i, value in enumerate(obj):
            out.update(flatten(value, f"{prefix}.{i}" if prefix else str(i)))
        return out
    if isinstance(obj, (Mapping, list, tuple)):  # empty: a leaf of its own, except at the root
        return {prefix: {} if isinstance(obj, Mapping) else []} if prefix else {}
    return {prefix: obj}


def _ignored(key: str, patterns: list[str]) -> bool:
    return any(key == p or key.startswith(p + ".") or fnmatch.fnmatchcase(key, p) for p in patterns)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 1 vs 1.0 vs True are different facts in a manifest


def manifest_differences(a: Mapping[str, Any], b: Mapping[str, Any], *, ignore: Iterable[str] = ()
                         ) -> list[tuple[str, Any, Any]]:
    """``(dotted key, value in a, value in b)`` for every differing leaf, sorted; ``"<absent>"`` marks a
    key present on one side only. ``ignore`` takes dotted keys (their children too) or glob patterns."""
    patterns = list(ignore)
    flat_a, flat_b = flatten(a), flatten(b)
    rows = []
    for key in sorted(set(flat_a) | set(flat_b)):
        if _ignored(key, patterns):
            continue
        va, vb = flat_a.get(key, ABSENT), flat_b.get(key, ABSENT)
        if (key in flat_a) != (key in flat_b) or not _same(va, vb):
            rows.append((key, va, vb))
    return rows


def diff_manifests(a: Mapping[str, Any], b: Mapping[str, Any], *, ignore: Iterable[str] = ()) -> list[str]:
    """Sorted dotted keys whose values differ between two manifests (added, removed or changed)."""
    return [key for key, _, _ in manifest_differences(a, b, ignore=ignore)]


if __name__ == "__main__":  # pragma: no cover - a quick look at this machine: python -m iteralab.campaign.manifest
    json.dump(environment_manifest(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


#: The environment facts that make a pass another configuration (C3/C5): a resume refuses to mix them.
RESUME_KEYS = ("python.version", "packages.torch", "packages.transformers", "packages.tokenizers",
               "packages.safetensors", "device_inventory.backend", "device_inventory.gpu_count",
               "device_inventory.gpus.*.name", "device_inventory.driver_version", "device_inventory.torch_cuda",
               "device_inventory.torch_hip")


def check_resume_environment(out: Path, reference: ObservedFacts) -> None:
    """Before a resumed campaign runs a pass: the software and devices must be those of its finished passes."""

    def wanted(key: str) -> bool:
        return any(key == p or fnmatch.fnmatchcase(key, p) for p in RESUME_KEYS)

    now = environment_manifest(git=False)  # the code version is not among the keys compared
    for key, before, after in manifest_differences(reference.environment, now):
        if wanted(key):
            raise RunError(
                f"{out}: resume refused: {key} was {before} for the passes already run, now {after}; the "
                "remaining passes would be another configuration",
                hint="resume in the environment the campaign started in, or run this protocol into a new --out folder")


def env_summary(environment: dict[str, Any] | None) -> dict[str, Any] | None:
    """The devices a pass observed, as its ``pass_finished`` record states them."""
    if not environment:
        return None
    inventory = environment.get("devices") or environment.get("device_inventory") or {}
    return {"devices": inventory}


def load_observed(path: Path) -> ObservedFacts | None:
    """The observed facts of a campaign's manifest file (None before the first successful pass wrote it)."""
    manifest = read_manifest(path)
    return None if manifest is None or manifest.observed is None else ObservedFacts.from_json(manifest.observed)
