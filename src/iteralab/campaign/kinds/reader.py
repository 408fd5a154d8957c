"""Reads the prediction files of one folder once (:class:`FileReader`): one read gives a file's sha256 and its
arrays, through the file's kind (``kind.output.read_with_sha256``, the one reader of its file). Every kind's
comparison with a reference file reads through it, so no file is decoded twice for one campaign's verdict. Writes
nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pyarrow as pa

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.registry import kind_of
from iteralab.campaign.kinds.verdictpart import FileComparison
from iteralab.common.arrow import release_unused
from iteralab.plan.protocol import Protocol

__all__ = ["FileReader", "file_stamp"]


def file_stamp(path: Path) -> tuple[int, int] | None:
    """A file's version (size, modification time); None when it is missing."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_size, stat.st_mtime_ns) if path.is_file() else None


class FileReader:
    """Reads the prediction files of one folder once: the arrays of the ``keep`` most recently read files stay in
    memory; hashes (small) stay for every file."""

    def __init__(self, protocol: Protocol, keep: int = 4) -> None:
        self.protocol = protocol
        #: the protocol's kind: how its files are read and checked
        self.kind: JobKind = kind_of(protocol)
        self.keep = keep
        self._hashes: dict[Path, tuple[tuple[int, int], str]] = {}
        self._sets: OrderedDict[Path, tuple[tuple[int, int], Any]] = OrderedDict()
        #: (file, its sha256, reference file, its sha256) -> the kind's comparison of the two (kept small)
        self.comparisons: dict[tuple[Path, str, Path, str], FileComparison] = {}

    def drop(self, path: Path) -> None:
        """Let go of a file's arrays (its sha256 stays known)."""
        if self._sets.pop(path.resolve(), None) is not None:
            release_unused()

    def read(self, path: Path, like: pa.Array | None = None) -> tuple[str, Any] | None:
        """(sha256, arrays) of the file, or None when it is missing; ``like``: the expected ids, shared by the
        set when the file holds exactly those in that order."""
        stamp = file_stamp(path)
        if stamp is None:
            return None
        key = path.resolve()
        cached, known = self._sets.get(key), self._hashes.get(key)
        if cached is not None and known is not None and cached[0] == stamp == known[0]:
            self._sets.move_to_end(key)
            return known[1], cached[1]
        self._sets.pop(key, None)
        while len(self._sets) >= max(self.keep, 1):  # room made before the read: the sets dropped are not held
            self._sets.popitem(last=False)            # while the new one is built
        digest, found = self.kind.output.read_with_sha256(path, self.protocol, like)
        release_unused()
        self._hashes[key] = (stamp, digest)
        if self.keep:
            self._sets[key] = (stamp, found)
        return digest, found

    def sha256(self, path: Path, like: pa.Array | None = None) -> str | None:
        stamp = file_stamp(path)
        if stamp is None:
            return None
        known = self._hashes.get(path.resolve())
        if known is not None and known[0] == stamp:
            return known[1]
        entry = self.read(path, like)
        return entry[0] if entry else None
