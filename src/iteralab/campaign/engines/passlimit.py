"""The pass time limit (``run.pass_timeout_s``, or ``run.pass_timeout = "Nx warmup"``): fixed before a measured
pass from its own warm-up, read between batches from the pass's own clock, and the error a pass past it ends with.
Used by every engine's pass (``engines.passes``, ``engines.raypass``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from iteralab.campaign.records import PassSpec

__all__ = ["Limit", "LimitRecord", "PassTimeout", "limit_basis", "pass_limit"]


class PassTimeout(Exception):
    """The measured pass ran past the protocol's pass time limit (``run.pass_timeout_s``, or ``run.pass_timeout``
    relative to the pass's warm-up: ``basis`` then says how the limit was projected)."""

    def __init__(self, limit: float, basis: str | None = None) -> None:
        super().__init__(f"exceeded the pass time limit of {limit:g} s" if basis is None else
                         f"exceeded the pass time limit of {limit:.2f} s ({basis})")


@dataclass(frozen=True)
class LimitRecord:
    """How a relative pass time limit was fixed (the result's ``pass_limit``, in the journal as :meth:`to_json`
    writes it): the rule, the warm-up it projects from, and the limit, or why there is none (``reason``)."""

    rule: str | None
    factor: float
    warmup_s: float | None
    warmup_inputs: int
    documents: int | None
    projected_s: float | None
    limit_s: float | None
    per_document_s: float | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, float | int | str | None]:
        """The journal's form: ``per_document_s`` only with a projection, ``reason`` only without one."""
        record = asdict(self)
        for key in ("per_document_s", "reason"):
            if record[key] is None:
                del record[key]
        return record


def pass_limit(spec: PassSpec, warm_s: float | None, warm_inputs: int,
               documents: int | None) -> tuple[float | None, LimitRecord | None]:
    """The limit of one measured pass in seconds, fixed before its measured region, and its journal record.

    ``run.pass_timeout_s`` is taken as given (no record). ``run.pass_timeout = "Nx warmup"`` is N × the warm-up's
    per-document time (``warm_s``, the time of its last repetition, ÷ ``warm_inputs``) × the ``documents`` this
    pass will process: every pass projects its own limit from its own warm-up."""
    factor = spec.pass_timeout_factor
    if factor is None:
        return spec.pass_timeout_s, None
    if warm_s is None or warm_inputs <= 0 or not documents:
        return None, LimitRecord(spec.pass_timeout, factor, warm_s, warm_inputs, documents, projected_s=None,
                                 limit_s=None,
                                 reason="no limit applied: the warm-up measured no time per document to project from")
    projected = warm_s / warm_inputs * documents
    return factor * projected, LimitRecord(spec.pass_timeout, factor, warm_s, warm_inputs, documents,
                                           projected_s=projected, limit_s=factor * projected,
                                           per_document_s=warm_s / warm_inputs)


def limit_basis(record: LimitRecord | None) -> str | None:
    """How a relative limit was projected, in words (the failed row's error names it)."""
    if record is None or record.limit_s is None or record.projected_s is None:
        return None
    return (f"{record.factor:g}x the warm-up's projection of {record.projected_s:.2f} s for "
            f"{record.documents} documents")


class Limit:
    """The pass time limit, read between batches from the pass's own clock (one reading per batch)."""

    def __init__(self, clock: Any, seconds: float | None, basis: str | None = None) -> None:
        self.clock, self.seconds, self.basis = clock, seconds, basis
        self.start = clock.now() if seconds is not None else 0.0

    def check(self) -> None:
        if self.seconds is not None and self.clock.now() - self.start > self.seconds:
            raise PassTimeout(self.seconds, self.basis)
