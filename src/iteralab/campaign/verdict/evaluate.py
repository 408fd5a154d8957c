"""Verification of output sets (P3, Q1–Q3), from the stored files only, on Arrow/NumPy arrays.

A pass yields a *verified corpus* when its prediction file holds exactly the expected ids (no duplicate,
none missing, none extra), every record has the declared format, coverage is complete, and the metric
meets the threshold and stays within the tolerance of the reference variant — overall and in each gating
subgroup — and the declared reproduction target holds (those comparisons: ``campaign.verdict.judge``).
Nothing here reads the runner's memory: the expected ids and labels come from ``inputs/corpus.csv``, the rules
from the locked ``inputs/protocol.toml``.

What every kind shares is here (:func:`evaluate_set`: the ids, by Arrow hash joins, the format and the coverage,
``campaign.kinds.expected``); what the pass's file holds is its kind's to judge (``kind.verdict``: the metric
cells, ``campaign.kinds.<kind>.verdict``). A campaign's files are read once (:class:`PredictionReader`: one read
per file gives its sha256 and its arrays).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from iteralab.campaign.folder import PROTOCOL, CampaignFolder
from iteralab.campaign.kinds.expected import Expected, id_cells, id_examples, load_expected, match_ids
from iteralab.campaign.kinds.output import prediction_path
from iteralab.campaign.kinds.reader import FileReader, file_stamp
from iteralab.campaign.kinds.registry import kind_of
from iteralab.campaign.kinds.routine import Routine, load_routine
from iteralab.campaign.kinds.verdictpart import PassInputs
from iteralab.campaign.verdict.record import Verdict
from iteralab.plan.metric import TOL
from iteralab.plan.protocol import Protocol, load_protocol

__all__ = ["CampaignReads", "EvaluationContext", "PredictionReader", "campaign_protocol", "evaluate_file",
           "evaluate_pass", "evaluate_set", "missing_verdict"]


def evaluate_set(found: Any, protocol: Protocol, expected: Expected, routine: Routine | None = None,
                 queries: Any = None, path: Path | None = None,
                 references: pa.Array | None = None) -> Verdict:
    """The checks of one pass's output set on its own: ids, format, coverage (every kind alike), then its kind's
    metric cells (metric vs threshold, subgroups: ``kind.verdict.metric_cells``). ``routine``: the campaign's
    metric routine; ``queries``: an embedding job's queries, whose vectors the pass wrote beside ``path``;
    ``references``: a generation source's reference answers."""
    kind = kind_of(protocol)
    match = match_ids(found.ids, expected)
    ids = id_cells(match, found.records, len(found.ids), expected, found.problems, found.problem_count)
    verdict = Verdict.of(kind, **ids.cell_values(), coverage_ok=ids.coverage + TOL >= protocol.checks.coverage)
    verdict = kind.verdict.metric_cells(verdict, found, protocol, expected, match,
                                        PassInputs(routine, queries, references, path))
    assert isinstance(verdict, Verdict)
    if not verdict.has("subgroup_classes"):
        verdict = verdict.with_cells(subgroup_classes={})
    return verdict.with_cells(examples=id_examples(match, expected))


def missing_verdict(name: str, protocol: Protocol, expected: Expected) -> Verdict:
    """The verdict of a pass whose prediction file is missing: every check fails."""
    return Verdict.of(kind_of(protocol), expected_ids=len(expected), observed_ids=None, ids_match=False,
                      format_ok=False, coverage=0.0, coverage_ok=False, metric_name=protocol.metric.label,
                      metric=None, threshold_ok=False, subgroups={},
                      problems=(f"prediction file {name} is missing",))


def evaluate_file(pred_path: Path, protocol: Protocol, expected: Expected,
                  reader: PredictionReader | None = None, routine: Routine | None = None) -> Verdict:
    """:func:`evaluate_set` of a stored prediction file (a missing file fails every check)."""
    reader = reader or PredictionReader(protocol)
    entry = reader.read(pred_path, expected.ids)
    if entry is None:
        return missing_verdict(pred_path.name, protocol, expected)
    return evaluate_set(entry[1], protocol, expected, routine)


def campaign_protocol(campaign_dir: str | Path) -> Protocol:
    """The folder's locked protocol (``inputs/protocol.toml``)."""
    return load_protocol(Path(campaign_dir) / PROTOCOL)


class PredictionReader(FileReader):
    """Reads the prediction files of one folder once (:class:`~iteralab.campaign.kinds.reader.FileReader`), and
    computes each file's verdict once per file version (size, modification time); verdicts (small) stay for every
    file."""

    def __init__(self, protocol: Protocol, keep: int = 4) -> None:
        super().__init__(protocol, keep)
        self._verdicts: dict[tuple[Path, str, Any], Verdict] = {}

    def verdict(self, path: Path, protocol: Protocol, expected: Expected, routine: Routine | None = None,
                queries: Any = None, references: pa.Array | None = None) -> Verdict | None:
        """:func:`evaluate_set` of the file (computed once per file version; a verdict is never changed);
        ``routine``: the campaign's metric routine; ``queries``: its queries (metric.queries: the verdict also reads
        the pass's query vector file, whose version is part of the key)."""
        digest = self.sha256(path, expected.ids)
        if digest is None:
            return None
        key = (path.resolve(), digest, self._side(path) if queries is not None else None)
        if key not in self._verdicts:
            entry = self.read(path, expected.ids)
            if entry is None:
                return None
            self._verdicts[key] = evaluate_set(entry[1], protocol, expected, routine, queries, path, references)
        return self._verdicts[key]

    def _side(self, path: Path) -> tuple[int, int] | None:
        """The version of the file beside ``path`` that the kind's verdict also reads (None: none)."""
        side = self.kind.verdict.side_file(path)
        return file_stamp(side) if side is not None else None


class CampaignReads:
    """What every evaluation of one run and its raw table share: the protocol, the expected ids and the
    prediction files, each read once (lazily: nothing is read before the first evaluation)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._context: EvaluationContext | None = None
        self._reader: PredictionReader | None = None
        #: Per dataset (None: the corpus): the file, sha256, stamp and corpus order (its ids those of the corpus,
        #: in that order) of the first complete pass of the reference variant evaluated in this run.
        self._references: dict[str | None, tuple[Path, str, Any, bool]] = {}

    @property
    def context(self) -> EvaluationContext:
        if self._context is None:
            self._context = EvaluationContext.of(self.folder)
        return self._context

    @property
    def reader(self) -> PredictionReader:
        if self._reader is None:
            # One prediction set kept (≈ 30 bytes per document).
            self._reader = PredictionReader(self.context.protocol, keep=1)
        return self._reader

    def compare_with_reference(self, path: Path, finished: Mapping[str, Any], verdict: Verdict,
                               dataset: str | None) -> None:
        """After a pass's evaluation: remember it as its dataset's reference when it is the first complete pass
        of the reference variant (``finished``: its ``variant``, ``status`` and recorded ``prediction_sha256``),
        and compare it with the reference once there is one (memoised in ``reader.comparisons``, which the raw
        table uses instead of reading both files again)."""
        context = self.context.of_dataset(dataset)
        if not self.reader.kind.verdict.compares_while_running:  # judge compares them
            self.reader.drop(path)
            return
        entry = self.reader.read(path, context.expected.ids)
        if entry is None:
            return
        digest, preds = entry
        in_order = preds.ids is context.expected.ids  # read_predictions shares the corpus ids when they are its
        reference = self._references.get(dataset)
        if reference is None:
            if finished.get("variant") != context.protocol.metric.reference_variant or not (
                    finished.get("status") == "ok" and verdict.ids_match and verdict.format_ok
                    and finished.get("prediction_sha256") == digest):
                return
            reference = self._references[dataset] = (path.resolve(), digest, file_stamp(path), in_order)
            same = self.reader.kind.verdict.running_comparison(preds, None, context.protocol)
        elif reference[3] and in_order and file_stamp(reference[0]) == reference[2]:
            # both in the corpus order: the reference file is streamed against this set, never held whole
            same = self.reader.kind.verdict.running_comparison(preds, reference[0], context.protocol)
        else:
            return  # the raw table compares them (it reads the reference whole)
        if same is not None:
            self.reader.comparisons[(path.resolve(), digest, reference[0], reference[1])] = same
        del preds, entry
        self.reader.drop(path)  # its verdict and comparison are kept: between passes no prediction set is held


@dataclass
class EvaluationContext:
    """What every per-pass evaluation of one campaign shares (read once per run, not once per pass).

    Each corpus source has its own: a one-corpus campaign is one source (this context); a several-dataset campaign
    (K6) has no single corpus, so ``expected`` is None and ``datasets`` holds each dataset's context (its expected
    ids and, for a generation job, its references): a pass is always checked against its own (:meth:`of_dataset`)."""

    protocol: Protocol
    expected: Expected | None
    datasets: dict[str, EvaluationContext] = field(default_factory=dict)
    #: the protocol's metric routine, imported from the folder's carried copy (None: a built-in metric)
    routine: Routine | None = None
    #: metric.queries: the queries of the folder's copy (None: the protocol names none)
    queries: Any = None
    #: a generation job: the reference answers of the source's copy, in its order (None: none)
    references: pa.Array | None = None
    #: the locked protocol's sha256 as campaign.json records it: the quality intervals' seed ("": none recorded)
    protocol_sha256: str = ""

    @classmethod
    def of(cls, campaign_dir: str | Path) -> EvaluationContext:
        protocol = campaign_protocol(campaign_dir)
        campaign = CampaignFolder(Path(campaign_dir)).campaign
        routine = load_routine(Path(campaign_dir), protocol, campaign.routine)
        part = kind_of(protocol).verdict
        queries = part.queries(Path(campaign_dir), protocol, campaign.queries)
        digest = campaign.protocol.sha256 or ""
        sources = {name: cls(protocol, load_expected(campaign_dir, protocol.corpus.classes, name), routine=routine,
                             queries=queries, references=part.references(Path(campaign_dir), name),
                             protocol_sha256=digest)
                   for name in [d.name for d in campaign.datasets] or [None]}
        if list(sources) == [None]:
            return sources[None]
        return cls(protocol, None, {str(n): c for n, c in sources.items()}, routine, queries, protocol_sha256=digest)

    def of_dataset(self, dataset: str | None) -> EvaluationContext:
        """The context of one source's passes (itself for a one-corpus campaign)."""
        if dataset is None and self.expected is not None:
            return self
        if dataset not in self.datasets:
            raise KeyError(f"dataset {dataset!r} is not a dataset of this campaign ({', '.join(self.datasets)})")
        return self.datasets[dataset]


def evaluate_pass(campaign_dir: str | Path, pass_id: str, reads: CampaignReads | None = None,
                  dataset: str | None = None, finished: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The checks of one pass's file on its own, in the JSON form the journal holds (``pass_evaluated``'s
    ``intrinsic``); with ``finished`` (the pass's record and variant), also its comparison with the reference pass
    (:meth:`CampaignReads.compare_with_reference`)."""
    campaign_dir = Path(campaign_dir)
    reads = reads or CampaignReads(campaign_dir)
    path = prediction_path(campaign_dir, pass_id)
    context = reads.context.of_dataset(dataset)
    verdict = reads.reader.verdict(path, context.protocol, context.expected, context.routine, context.queries,
                                   context.references)
    if verdict is None:
        return missing_verdict(path.name, context.protocol, context.expected).to_json()
    if finished is not None:
        reads.compare_with_reference(path, finished, verdict, dataset)
    return verdict.to_json()

