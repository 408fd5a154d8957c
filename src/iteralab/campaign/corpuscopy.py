"""The campaign's copy of its corpus (``inputs/corpus.csv``, ``inputs/tuning.csv``), written while the user's
file is read in record batches (:func:`iteralab.plan.scan.scan_corpus` calls it as a sink).

The bytes are those :func:`iteralab.plan.corpus.write_corpus` writes (UTF-8 CSV, every cell quoted, ``\\n`` line
ends, ``None`` as an empty cell), so a copy made before and after streaming has the same sha256. The file is
written under a temporary name in its folder, hashed as it is written, fsynced and renamed by :meth:`commit`;
:meth:`abort` removes it. Nothing per document is kept.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import TUNING
from iteralab.common import files
from iteralab.common.files import FILE_MODE
from iteralab.errors import RunError


class CorpusCopy:
    """A sink writing ``id,text,label`` (+ ``extra`` columns: output name -> the scan's column name, whose empty
    or absent cells are written empty) for each validated batch, in file order."""

    def __init__(self, target: str | os.PathLike[str], extra: dict[str, str] | None = None) -> None:
        self.target = Path(target)
        self.extra = dict(extra or {})
        self.tmp: str | None = None
        with self._io():
            fd, self.tmp = tempfile.mkstemp(prefix=f".tmp-{self.target.name}.", dir=self.target.parent)
            os.fchmod(fd, FILE_MODE)
            self.fh = os.fdopen(fd, "wb")
            self.size = 0
            self._start()

    @contextmanager
    def _io(self) -> Iterator[None]:
        """A write that fails (disk full, permissions) is the one-line error every evidence write gives."""
        try:
            yield
        except OSError as exc:
            self.abort()
            raise RunError(f"{self.target}: cannot write ({exc.strerror or exc})",
                           hint="free disk space or fix permissions, then run again: what was already "
                                "recorded is kept") from None

    def _start(self) -> None:
        self.fh.seek(0)
        self.fh.truncate()
        self.digest = hashlib.sha256()
        self.size = 0
        self._write([["id", "text", "label", *self.extra]])

    def _write(self, rows: Any) -> None:
        buf = io.StringIO(newline="")
        # QUOTE_ALL: a text holding a lone carriage return must stay one field when read back.
        csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL).writerows(rows)
        self._put(buf.getvalue())

    def _put(self, text: str) -> None:
        data = text.encode("utf-8")
        self.digest.update(data)
        self.fh.write(data)

    def _write_columns(self, columns: list[list[str]]) -> None:
        """Rows given as columns of strings, in the bytes ``csv.writer`` writes with ``QUOTE_ALL`` (each cell
        between quotes, a quote inside doubled, ``,`` between cells, ``\\n`` after each row), joined without
        a Python call per cell."""
        columns = [[v.replace('"', '""') for v in col] if '"' in "".join(col) else col for col in columns]
        self._put('"' + '"\n"'.join(map('","'.join, zip(*columns))) + '"\n')

    def __call__(self, batch: Any) -> None:
        if batch is None:  # the scan starts again from the first record
            self._start()
            return
        empty = [""] * len(batch.ids)
        columns = [[v or "" for v in batch.extra[name]] if name in batch.extra else empty
                   for name in self.extra.values()]
        labels = ["" if v is None else v for v in batch.labels]
        with self._io():
            if batch.ids:
                self._write_columns([batch.ids, batch.texts, labels, *columns])
        self.size += len(batch.ids)

    def commit(self) -> str:
        """fsync, rename to the target and return the file's sha256."""
        with self._io():
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            files.replace_durably(self.tmp, self.target)  # looked up at call time, like every evidence write
        return self.digest.hexdigest()

    def abort(self) -> None:
        fh = getattr(self, "fh", None)
        if fh is not None and not fh.closed:
            try:
                fh.close()
            except OSError:
                pass
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass


def tuning_record(copy: CorpusCopy | None, scan: Any) -> dict[str, Any] | None:
    """The campaign's record of its tuning split copy (``inputs/tuning.csv``): committed when the scan read the
    split, discarded otherwise."""
    if copy is None:
        return None
    if scan is None:
        copy.abort()
        return None
    return {"file": TUNING, "id_origin": scan.id_origin, "size": scan.size,
            "fingerprint": scan.fingerprint, "file_sha256": copy.commit()}
