"""The model's files travel with the evidence (D3): every small input is carried, the weights by hash.

At ``prepare`` the campaign folder receives, under ``inputs/model/``, a copy of every file the declared model
reads except its weights: the model folder's config and tokenizer files, the trained head, the callable's
module file. The weights (``*.safetensors`` and the other weight formats, or any file over
:data:`CARRY_LIMIT`) are recorded by name, size and sha256 only, because a bundle that copies a multi-GB model
into every campaign is a bundle nobody keeps; ``iteralab bundle pack --include-weights`` adds them when the
receiver has no copy. ``campaign.json`` lists every file (``model.files``), carried or not, so a ``rerun`` on
another machine can say exactly which file it lacks and which hash it must have.

Names are those of the lock's model fingerprint (``lock/inputs.py: model_files``): ``config.json``,
``tokenizer/vocab.txt`` (a callable's tokenizer folder), ``head/<file>``, ``callable/<file>``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file
from iteralab.errors import BundleError
from iteralab.lock.inputs import model_files
from iteralab.lock.modules import module_file
from iteralab.lock.usercode import copy_checked
from iteralab.plan.lockfile import ProtocolFile
from iteralab.plan.protocol import Protocol

#: Where the carried files live inside a campaign folder.
CARRY_DIR = "inputs/model"
#: Weight formats: recorded by hash, carried only on request.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".gguf", ".h5", ".msgpack", ".ot")
#: A file that is not weights but larger than this is recorded by hash too (a tokenizer is a few MB).
CARRY_LIMIT = 64 * 1024 * 1024


def source_file(name: str, folder: str | Path | None, head: str | Path | None,
                callable_file: str | Path | None = None) -> Path | None:
    """The file behind a fingerprint name, given the model folder, the head file and the callable's module file
    (None when the name's part is not declared)."""
    if name.startswith("head/"):
        return Path(head) if head else None
    if name.startswith("callable/"):
        return Path(callable_file) if callable_file else None
    return Path(folder) / name.removeprefix("tokenizer/") if folder else None


def _callable_file(protocol: Protocol) -> Path | None:
    return module_file(protocol.model.callable.partition(":")[0]) if protocol.model.callable else None


def is_weight(name: str, size: int) -> bool:
    """Recorded by hash only: a weight file of the model folder, or any file too large to carry. The head and
    the callable's module are always carried (they are the campaign's own, small, and nowhere else)."""
    if name.startswith(("head/", "callable/")):
        return False
    return name.lower().endswith(WEIGHT_SUFFIXES) or size > CARRY_LIMIT


def carry_model_files(protocol_file: ProtocolFile, out: Path, hashes: dict[str, str] | None = None) -> dict[str, Any]:
    """Copy the carried files into ``out/inputs/model`` and return the ``model.files`` record of campaign.json:
    per file its sha256, its size and whether the folder holds it. ``hashes`` are the model files' sha256 as the
    input check just computed them (``lock.inputs.check_inputs``); without them they are computed here."""
    if hashes is None:
        hashes = model_files(protocol_file)
    model = protocol_file.protocol.model
    folder, head = protocol_file.where(model.path), protocol_file.where(model.head)
    callable_file = _callable_file(protocol_file.protocol)
    target = out / CARRY_DIR
    files: dict[str, Any] = {}
    for name, digest in sorted(hashes.items()):
        source = source_file(name, folder, head, callable_file)
        assert source is not None, name  # every fingerprint name comes from a declared part of the model
        size = source.stat().st_size
        carried = not is_weight(name, size)
        if carried:
            copy_checked(source, target / name, digest)
        files[name] = {"sha256": digest, "bytes": size, "carried": carried}
    return {"folder": CARRY_DIR, "files": files}


def carried_path(campaign_dir: Path, name: str, record: dict[str, Any]) -> Path | None:
    """The carried copy of ``name`` when the folder holds it with the recorded hash, else None."""
    path = campaign_dir / CARRY_DIR / name
    if path.is_file() and sha256_file(path) == record.get("sha256"):
        return path
    return None


def describe_missing(name: str, record: dict[str, Any]) -> str:
    return f"{name} (sha256 {record['sha256']}, {record['bytes']:,} bytes)"


def include_weights(campaign_dir: Path, model: Mapping[str, Any]) -> list[str]:
    """Add the weight files recorded by hash to ``inputs/model`` from the folders the campaign read them in;
    each copy must have the recorded hash. ``model``: campaign.json's model record. Returns the names added
    (those already present are kept)."""
    record = (model.get("files") or {})
    added = []
    for name, info in record.items():
        if carried_path(campaign_dir, name, info) is not None:
            continue
        source = source_file(name, model.get("path"), model.get("head"))  # a callable's module is always carried
        if source is None or not source.is_file():
            raise BundleError(f"{campaign_dir}: cannot include {describe_missing(name, info)}: the file it was "
                              f"read from ({source}) is not on this machine",
                              hint="pack on the machine that ran the campaign, or copy the model folder back first")
        if sha256_file(source) != info["sha256"]:
            raise BundleError(f"{source}: differs from the {name} the campaign ran with (sha256 {info['sha256']})",
                              hint="the model folder changed after the run: restore it, or pack without weights")
        copy = campaign_dir / CARRY_DIR / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
        added.append(name)
    return added


__all__ = ["CARRY_DIR", "CARRY_LIMIT", "WEIGHT_SUFFIXES", "carried_path", "carry_model_files",
           "describe_missing", "include_weights", "is_weight", "source_file"]
