"""The interface every kind of job implements (:class:`JobKind`): what the rest of the product may ask a kind.

A kind is a stateless object, one per kind, found by its name in :mod:`iteralab.campaign.kinds.registry`. Code
outside the kinds' folders holds a ``JobKind`` and asks it; it never compares ``kind.name`` with a literal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from iteralab.campaign.kinds.sink import PassSink


class JobKind:
    """One kind of job: its name as ``[task] kind`` spells it, and its facets (each kind's folder defines them)."""

    #: ``[task] kind`` of the protocols this kind judges.
    name: ClassVar[str]

    def __repr__(self) -> str:
        return f"JobKind({self.name!r})"

    def sink(self, target: Path, classes: Sequence[str]) -> PassSink:
        """A new sink for one pass's outputs, bound for the prediction file ``target`` (``<kind>/sink.py``)."""
        raise NotImplementedError

    def model_record(self, protocol: Any, folder: Path | None) -> dict[str, Any]:
        """What the kind adds to the campaign's model record (``campaign.json``'s ``model``), from the locked
        protocol and the model's folder (``folder``; None for a callable); default: nothing."""
        return {}

    def workload_options(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """The kind's options of the workload (:class:`~iteralab.models.factory.WorkloadSpec`'s ``task`` and the
        task's own fields), from the campaign's model record; default: none (a classifier)."""
        return {}

    def prompts(self, model: Mapping[str, Any]) -> Any:
        """What turns each record batch the pass reads into (id, the text the model is handed), with its
        ``columns`` (the corpus copy's columns it reads); None: the pass reads (id, text) as they are."""
        return None

    def pass_workload(self, workload: Any, model: Mapping[str, Any]) -> Any:
        """The loaded workload as a pass drives it (tokenize, infer, token_lengths); default: itself."""
        return workload
