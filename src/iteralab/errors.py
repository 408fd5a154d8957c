"""Small typed errors a person can act on.

Every error carries a one-line message that names the file/field at fault and an optional hint. The CLI
prints ``Error: <message>`` (and ``Hint: <hint>``) and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations

#: The longest one-line description of an exception (:func:`one_line`).
LINE_LIMIT = 240


class IteraError(Exception):
    """Base class of the errors that are the user's to fix (bad input, refused action)."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ProtocolError(IteraError):
    """The protocol file is invalid, unlocked, or changed after its lock."""


class CorpusError(IteraError):
    """The corpus cannot be read or breaks an identifier/text rule."""


class WorkloadError(IteraError):
    """The model/callable cannot be loaded or used as declared."""


class RowError(WorkloadError):
    """A model's output is wrong for one document of a batch: ``row`` is its place in the batch, and ``{document}``
    in the message stands for it. The pass, which knows the batch's ids, names the document
    (:meth:`for_document`); until then the message says "the batch's row N"."""

    def __init__(self, message: str, row: int, hint: str | None = None) -> None:
        self.template, self.row = message, row
        super().__init__(message.replace("{document}", f"the batch's row {row}"), hint)

    def for_document(self, document_id: object) -> RowError:
        """The same error naming the document by its corpus id."""
        named = RowError(self.template, self.row, self.hint)
        named.message = self.template.replace("{document}", f"document {document_id!r}")
        named.args = (named.message,)
        return named


class RunError(IteraError):
    """A campaign cannot start or continue (e.g. output folder unusable)."""


class VerificationError(IteraError):
    """Stored evidence does not verify (used by ``verify``)."""

    exit_code = 1


class BundleError(IteraError):
    """An evidence bundle cannot be packed or unpacked safely."""


class RoutineError(IteraError):
    """The protocol's own evaluation routine cannot be imported, raised, or returned no finite number (one line:
    a pass's verdict fails with it; ``lock`` refuses a routine that cannot be imported)."""


def one_line(exc: BaseException) -> str:
    """``ValueError: the first line of its message`` (cut at :data:`LINE_LIMIT` characters): a library's own
    error, said in one line."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 1] + "…"
