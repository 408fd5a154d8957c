"""Atomic, deterministic file writing and hashing shared by every stage that writes evidence."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from iteralab.errors import RunError


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


#: Pickled weights: refused by a workload, never hashed as its files.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: Files never read by a workload: documentation, other frameworks' weights. Everything else is hashed.
UNUSED_MODEL_SUFFIXES = (".md", ".png", ".jpg", ".jpeg", ".gif", ".h5", ".msgpack", ".onnx", ".ot") + PICKLE_SUFFIXES


def folder_hashes(folder: Path, prefix: str = "") -> dict[str, str]:
    """sha256 of the top-level files a model folder contributes (weights, config, tokenizer, code): what ``lock``
    records and every pass reports for its model."""
    hashes = {}
    for item in sorted(folder.iterdir()):
        name = item.name
        if not item.is_file() or name.startswith(".") or name.upper().startswith(("README", "LICENSE")):
            continue
        if item.suffix.lower() in UNUSED_MODEL_SUFFIXES:
            continue
        hashes[prefix + name] = sha256_file(item)
    return hashes


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


FILE_MODE = _file_mode()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temporary name in the same folder, fsync, then rename: readers never see half a file."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}.", dir=path.parent)
        os.fchmod(fd, FILE_MODE)  # mkstemp creates 0600: evidence gets the user's usual permissions
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(exc, OSError):
            raise RunError(f"{path}: cannot write ({exc.strerror or exc})",
                           hint="free disk space or fix permissions, then run again: what was already "
                                "recorded is kept") from None
        raise
    _fsync_folder(path.parent)


def replace_durably(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename a complete, fsynced temporary file onto ``path`` and fsync the folder (the end of an atomic write
    made by a streaming writer)."""
    os.replace(tmp, path)
    _fsync_folder(Path(path).parent)


def publish_file(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> str:
    """A file written whole under ``tmp`` (a writer's partial name) fsynced and renamed onto ``path`` durably; its
    sha256: the end of every streamed prediction file."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    replace_durably(tmp, path)
    return sha256_file(path)


def _fsync_folder(folder: Path) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def dumps_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    write_text_atomic(path, dumps_json(obj))
