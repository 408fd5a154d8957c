"""The document an error about one output is about: a model's :class:`~iteralab.errors.RowError` knows its row in
the batch, the pass knows which documents the batch holds, and the error the pass records names the document's
corpus id (never a position in a batch). Reads the corpus copy's id column, only after such an error."""

from __future__ import annotations

from typing import Any

from iteralab.campaign.folder import read_corpus_batches
from iteralab.errors import RowError


def in_warmup(exc: RowError, corpus_path: str, start: int) -> RowError:
    """An error in the warm-up batch starting at ``start``: the warm-up reads the corpus copy's first documents,
    in file order."""
    index = start + exc.row
    for batch in read_corpus_batches(corpus_path, ["id"], block_size=1 << 16):
        if index < len(batch):
            return exc.for_document(batch.column(0)[index].as_py())
        index -= len(batch)
    return exc


def in_pass(exc: BaseException, pass_run: Any) -> BaseException:
    """An error in the measured region (``pass_run``: its ``MeasuredPass``, every id read): the failing batch
    starts at the first document not completed, in pass order."""
    if not isinstance(exc, RowError):
        return exc
    ids = pass_run.ordered_ids()
    at = pass_run.progress.completed + exc.row
    return exc.for_document(ids[at].as_py()) if at < len(ids) else exc
