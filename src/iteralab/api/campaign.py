"""A campaign folder opened from Python: :func:`open_campaign` gives a :class:`Campaign`, whose methods read the
folder's stored files through the same readers the command line uses (the campaign-folder layer, the verdict
stage, the statistics, each kind's prediction-file reader) and hand back Arrow tables and typed records.

Nothing here runs a model or writes to the folder.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.api.stored import StoredDecision, read_decision
from iteralab.campaign.campaignrecord import CampaignRecord
from iteralab.campaign.folder import CampaignFolder, RawRow
from iteralab.campaign.journal import read_journal
from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.output import OutputSet
from iteralab.campaign.kinds.registry import kind_of_campaign
from iteralab.campaign.manifest import Manifest
from iteralab.campaign.verdict.evaluate import campaign_protocol
from iteralab.campaign.verdict.judge import judge_campaign
from iteralab.campaign.verdict.record import Verdict
from iteralab.errors import IteraError
from iteralab.evidence.bundle import SealCheck, check_seal
from iteralab.evidence.stats import CampaignStats, campaign_stats
from iteralab.evidence.table import finished_passes
from iteralab.plan.protocol import Protocol

if TYPE_CHECKING:  # the optional extra iteralab[pandas]: never imported here at run time
    import pandas

__all__ = ["Campaign", "OutputFileError", "open_campaign", "raw_table_schema"]

#: How to install pandas, for :meth:`Campaign.dataframe`.
PANDAS_HINT = "install the extra: pip install 'iteralab[pandas]'"


class OutputFileError(IteraError):
    """A pass's prediction file is missing or fails its kind's format checks."""


def _arrow_type(annotation: str) -> pa.DataType:
    """The Arrow type of a :class:`~iteralab.campaign.folder.RawRow` field, from its annotation: a ``dict`` cell
    (subgroup metrics, shard figures) is kept as its JSON text."""
    if annotation.startswith("bool"):
        return pa.bool_()
    if annotation.startswith("int"):
        return pa.int64()
    if annotation.startswith("float"):
        return pa.float64()
    return pa.string()


def raw_table_schema() -> pa.Schema:
    """The Arrow schema of :meth:`Campaign.raw_table`: every column of ``raw_table.csv`` in its order, typed as
    the campaign-folder layer types it (``dict`` cells as JSON text)."""
    return pa.schema([pa.field(f.name, _arrow_type(str(f.type))) for f in fields(RawRow)])


def _cell(value: object) -> object:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else value


@dataclass(frozen=True)
class Campaign:
    """A campaign folder written by ``iteralab run`` (or an unpacked bundle), read from its stored files."""

    folder: CampaignFolder

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def record(self) -> CampaignRecord:
        """``campaign.json``, typed: the protocol's identity, the corpus, the model, the schedule, the variants."""
        return self.folder.campaign

    @property
    def manifest(self) -> Manifest | None:
        """``manifest.json``, typed (None before the first pass wrote it)."""
        return self.folder.manifest

    @property
    def kind(self) -> JobKind:
        """The kind of job (classification, embedding, generation …) as its object, asked, never named."""
        return kind_of_campaign(self.record)

    @cached_property
    def protocol(self) -> Protocol:
        """The folder's copy of the locked protocol (``inputs/protocol.toml``), parsed."""
        return campaign_protocol(self.path)

    def raw_rows(self) -> tuple[RawRow, ...]:
        """``raw_table.csv`` as typed rows, one per attempted pass."""
        return self.folder.raw_rows()

    def raw_table(self) -> pa.Table:
        """``raw_table.csv`` as an Arrow table (:func:`raw_table_schema`): one row per attempted pass, an empty
        cell null."""
        rows = self.raw_rows()
        schema = raw_table_schema()
        return pa.table({f.name: pa.array([_cell(getattr(r, f.name)) for r in rows], f.type) for f in schema},
                        schema=schema)

    def dataframe(self) -> pandas.DataFrame:
        """The raw table as a pandas ``DataFrame`` (pandas is an optional extra: ``iteralab[pandas]``)."""
        if importlib.util.find_spec("pandas") is None:
            raise IteraError("the raw table as a DataFrame needs pandas, which is not installed", hint=PANDAS_HINT)
        return self.raw_table().to_pandas()

    def stats(self) -> CampaignStats:
        """Per-variant pass times, the speed comparisons (T5) and the quality, as ``iteralab stats`` computes
        them from the folder's files."""
        return campaign_stats(self.path)

    def verdicts(self) -> dict[str, Verdict]:
        """Each finished pass's verdict (pass id → :class:`~iteralab.campaign.verdict.record.Verdict`), judged
        again from its stored prediction file and the reference pass, in journal order."""
        finished = finished_passes(read_journal(self.folder.journal_path))
        return judge_campaign(self.path, finished) if finished else {}

    def decision(self) -> StoredDecision:
        """The stored decision (``decision.json``, written by ``iteralab report`` or ``decide --out``), typed."""
        return read_decision(self.path)

    def seal(self) -> SealCheck:
        """The folder checked against its seal (``SHA256SUMS``): ``.ok``, or one problem line per difference."""
        return check_seal(self.path)

    def output_set(self, pass_id: str) -> OutputSet:
        """A pass's prediction file read and checked by its kind's own reader (the kind's ``OutputSet``)."""
        path = self._prediction(pass_id)
        found = self.kind.read_output(path, self.protocol)
        if not found.format_ok:
            raise OutputFileError(f"{path}: {found.problems[0]} ({found.problem_count} format problem(s))",
                                  hint=f"iteralab verify {self.path} names every difference")
        return found

    def outputs(self, pass_id: str) -> pa.Table:
        """A pass's outputs as an Arrow table in corpus order: ``id`` then the kind's own columns (labels and
        probabilities, vectors, texts, scores …), checked first by the kind's reader (:meth:`output_set`)."""
        self.output_set(pass_id)
        path = self._prediction(pass_id)
        return pq.read_table(path, columns=["id", *self.kind.output.columns])

    def _prediction(self, pass_id: str) -> Path:
        row = next((r for r in self.raw_rows() if r.pass_id == pass_id), None)
        if row is None:
            raise OutputFileError(f"{self.path}: no pass {pass_id!r} in its raw table",
                                  hint="pass a pass_id of raw_table.csv")
        if not row.prediction_file:
            raise OutputFileError(f"{self.path}: pass {pass_id} stored no prediction file ({row.status})",
                                  hint="pick a pass whose status is ok")
        path = self.folder.prediction_path(row.prediction_file)
        if not path.is_file():
            raise OutputFileError(f"{path}: missing", hint=f"iteralab verify {self.path} names every difference")
        return path


def open_campaign(path: str | Path) -> Campaign:
    """Open a campaign folder (one written by ``iteralab run --out``, or an unpacked bundle)."""
    return Campaign(CampaignFolder.open(path))
