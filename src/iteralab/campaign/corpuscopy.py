"""The campaign's copy of its corpus (``inputs/corpus.csv``, ``inputs/tuning.csv``, or one
``inputs/datasets/<name>.csv`` per dataset: :func:`write_corpus_copies`), written while the user's file is read
in record batches (:func:`iteralab.plan.scan.scan_corpus` calls it as a sink).

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

from iteralab.lock.datasets import combined_fingerprint, combined_order_hash
from iteralab.lock.inputs import check_inputs, scan_sources
from iteralab.campaign.campaignrecord import SourceRecord
from iteralab.campaign.folder import TUNING, corpus_copy
from iteralab.common import files
from iteralab.common.files import FILE_MODE
from iteralab.errors import RunError
from iteralab.plan.lockfile import LockedProtocol
from iteralab.plan.prompting import copy_column
from iteralab.plan.task import prompt_columns, reference_column


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


def tuning_record(copy: CorpusCopy | None, scan: Any) -> dict[str, str | int] | None:
    """The campaign's record of its tuning split copy (``inputs/tuning.csv``; campaign.json's ``tuning``: its file,
    id origin, size, fingerprint and sha256): committed when the scan read the split, discarded otherwise."""
    if copy is None:
        return None
    if scan is None:
        copy.abort()
        return None
    return {"file": TUNING, "id_origin": scan.id_origin, "size": scan.size,
            "fingerprint": scan.fingerprint, "file_sha256": copy.commit()}


def write_corpus_copies(locked: LockedProtocol, out: Path, *, rerun: bool = False
                        ) -> tuple[tuple[SourceRecord, ...], SourceRecord, dict[str, str | int] | None,
                                   dict[str, str] | None]:
    """Copy every corpus source (:meth:`Protocol.sources`: the one corpus into ``inputs/corpus.csv``, or each
    dataset into ``inputs/datasets/``) and the tuning split into ``inputs/tuning.csv``, each written while it is
    read in record batches (:func:`scan_sources`), and check that read against the lock (``check_inputs`` with
    these scans): each file is read once. A refused input leaves no copy. The copies carry the columns a verdict
    reads besides id, text and label: the stratum (when a subgroup is by stratum), a generation job's
    reference answers and the cells its prompt names (``prompt.<name>``).

    Returns the campaign's ``datasets`` records (name, fingerprint, order hash, size, file, sha256, strata; none
    for a one-corpus protocol), its ``corpus`` record (the one corpus's, or the datasets' combined fingerprint and
    order hash, total size and no file), the tuning record and the model files' sha256 as checked."""
    protocol = locked.protocol
    spec = protocol.corpus
    by_stratum = any(sg.by == "stratum" for sg in protocol.subgroups) and bool(spec.stratum_column)
    extra = {"stratum": spec.stratum_column if by_stratum else ""}
    if reference := reference_column(protocol):  # the references the verdict reads
        extra["reference"] = reference
    extra.update({copy_column(name): name for name in prompt_columns(protocol)})  # the cells a prompt names
    copies: dict[str | None, CorpusCopy] = {}
    tuning_copy = None
    try:
        for source in protocol.sources():
            target = out / corpus_copy(source.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            copies[source.name] = CorpusCopy(target, extra=extra)
        tuning_copy = CorpusCopy(out / TUNING) if spec.tuning_path else None
        scanned = scan_sources(locked, sinks_for=lambda name: [copies[name]],
                               tuning_sinks=[tuning_copy] if tuning_copy is not None else [])
        model_hashes = check_inputs(locked, rerun=rerun, scans=scanned)
    except BaseException:
        for copy in [*copies.values(), *([tuning_copy] if tuning_copy is not None else [])]:
            copy.abort()
        raise
    records: list[SourceRecord] = []
    for name, scan in scanned.named:
        counts: dict[str, int] = {}
        if by_stratum:
            for value, n in (scan.extra_counts.get(spec.stratum_column) or {}).items():
                counts[value or ""] = counts.get(value or "", 0) + n
        records.append(SourceRecord(scan.fingerprint, scan.order_hash, scan.size, scan.id_origin, corpus_copy(name),
                                    copies[name].commit(), dict(sorted(counts.items())), name=name))
    tuning_info = tuning_record(tuning_copy, scanned.tuning)
    if [r.name for r in records] == [None]:  # one corpus: its record is the corpus record
        return (), records[0], tuning_info, model_hashes
    origins = {r.id_origin for r in records}
    corpus_record = SourceRecord(combined_fingerprint([r.fingerprint for r in records]),
                                 combined_order_hash([r.order_hash for r in records]), sum(r.size for r in records),
                                 origins.pop() if len(origins) == 1 else "mixed",
                                 datasets=tuple(str(r.name) for r in records))
    return tuple(records), corpus_record, tuning_info, model_hashes
