"""The interface every kind of job implements (:class:`JobKind`): what the rest of the product may ask a kind.

A kind is a stateless object, one per kind, found by its name in :mod:`iteralab.campaign.kinds.registry`. Code
outside the kinds' folders holds a ``JobKind`` and asks it; it never compares ``kind.name`` with a literal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from iteralab.campaign.kinds.output import OutputFile, OutputSet
from iteralab.campaign.kinds.sink import PassSink
from iteralab.campaign.kinds.verdictpart import QualitySeries, VerdictPart


@dataclass(frozen=True)
class OutputWords:
    """How a rerun comparison names one kind's outputs: the per-variant table's two output columns, the
    comparison key the first of them shows, and the meaning of *identical* and *within bound*."""

    first: str
    second: str
    identical: str
    bound: str
    #: The per-variant comparison key shown under ``first`` (``evidence.rerun``'s variant record).
    first_key: str


class JobKind:
    """One kind of job: its name as ``[task] kind`` spells it, and its facets (each kind's folder defines them)."""

    #: ``[task] kind`` of the protocols this kind judges.
    name: ClassVar[str]
    #: Its prediction file (``<kind>/output.py``): ``output.output_kind`` (``records.OUTPUT_KINDS``),
    #: ``output.columns`` (after ``id``), ``output.read`` / ``output.read_with_sha256`` (the checked set).
    output: ClassVar[OutputFile]

    def read_output(self, path: Path, protocol: Any, like: pa.Array | None = None) -> OutputSet:
        """A pass's prediction file read and checked by what ``protocol`` declares for this kind (its classes and
        sum tolerance, its ``[embedding]`` or ``[generation]`` rules): the kind's
        :class:`~iteralab.campaign.kinds.output.OutputSet`, with the shared ``ids``, ``records``, ``problems`` and
        ``problem_count``. ``like``: the expected ids, shared by the set when the file holds exactly those."""
        return self.output.read(path, protocol, like)

    #: How a rerun comparison names this kind's outputs (``evidence.comparison``).
    rerun_words: ClassVar[OutputWords]

    #: Which wrong outputs the report shows (``decision.examples``): ``"labels"`` (a counted pass's documents
    #: whose predicted label is not the corpus's), ``"texts"`` (its texts scoring below 1 against their reference
    #: answer) or ``"vectors"`` (the counted pass farthest from the reference pass, its farthest documents).
    examples: ClassVar[str]

    #: Whether its model keeps a KV cache per prompt position while it runs (the memory estimate adds that term
    #: beside the weights: ``evidence.memory``).
    kv_cache: ClassVar[bool] = False
    #: Its verdict part: its metric cells, its comparison with the reference pass
    #: (``<kind>/verdict.py``; what it answers: :class:`~iteralab.campaign.kinds.verdictpart.VerdictPart`).
    verdict: ClassVar[VerdictPart]
    #: Its raw table's columns, in order: the common ones (``campaign.folder.COLUMNS``) and its own.
    table_columns: ClassVar[tuple[str, ...]]
    #: What the statistics, the decision and the report show of its quality beyond the metric (each a column of
    #: the raw table, one value per counted pass).
    quality_series: ClassVar[tuple[QualitySeries, ...]] = ()

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
