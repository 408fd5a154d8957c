"""The campaign record (``campaign.json``): what ``iteralab run`` fixed when it prepared a campaign folder.

One reader (:func:`read_campaign`) and one writer (:func:`write_campaign`); every stage holds the typed
:class:`CampaignRecord` (``CampaignFolder.campaign``), never the JSON object. The JSON form on disk is the one
written before these records existed, plus the job kind (``kind``, written once from the protocol's ``[task]
kind``); a folder written before the kind was recorded reads it from its protocol copy's ``[task] kind``, and as
``classification`` (the protocol's default) when that copy has none. Light (the standard library, ``common`` and
``errors``; no pydantic), so that a pass worker that imports the folder layer loads nothing more.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from iteralab.common.files import write_json_atomic
from iteralab.errors import IteraError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CAMPAIGN_SCHEMA = 1
#: The kind of a protocol without ``[task] kind`` (``plan.task.TaskSpec``'s default).
DEFAULT_KIND = "classification"


class CampaignRecordError(IteraError):
    """campaign.json cannot be read as a campaign record (a damaged or foreign file)."""


def _refused(where: object, problem: str) -> CampaignRecordError:
    return CampaignRecordError(f"{where}: {problem}", hint="restore the file from the evidence bundle")


def _take(record: Any, cls: type, where: object, *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of ``record`` that are fields of ``cls``; a missing required field is refused by name."""
    if not isinstance(record, Mapping):
        raise _refused(where, f"expected an object, got {type(record).__name__}")
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in record and n not in optional]
    if missing:
        raise _refused(where, f"missing field(s) {', '.join(missing)}")
    return {n: record[n] for n in names if n in record}


@dataclass(frozen=True)
class ProtocolStamp:
    """Which locked protocol a campaign ran: name, version, sha256 of its bytes, lock time, its file as run."""

    name: str
    version: int
    sha256: str
    locked_at: str | None = None
    source: str | None = None

    def identity(self) -> dict[str, object]:
        """The stamp a decision and the statistics quote (without the source path)."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "locked_at": self.locked_at}

    def to_json(self) -> dict[str, object]:
        return {**self.identity(), "source": self.source}


@dataclass(frozen=True)
class SourceRecord:
    """One corpus source as the folder holds it: the one corpus, one dataset (K6, ``name``), or the datasets
    together (the campaign's ``corpus`` record, ``datasets`` naming them, no file of its own)."""

    fingerprint: str
    order_hash: str
    size: int
    id_origin: str | None = None
    file: str | None = None
    file_sha256: str | None = None
    strata: Mapping[str, int] = field(default_factory=dict)
    name: str | None = None
    datasets: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, record: Any, where: object) -> SourceRecord:
        given = _take(record, cls, where, optional=("id_origin", "file", "file_sha256", "strata", "name",
                                                      "datasets"))
        if given.get("datasets") is not None:
            given["datasets"] = tuple(given["datasets"])
        return cls(**{**given, "strata": dict(given.get("strata") or {})})

    def to_json(self) -> dict[str, object]:
        head = {"name": self.name} if self.name is not None else {}
        tail = {"datasets": list(self.datasets)} if self.datasets is not None else {}
        return {**head, "fingerprint": self.fingerprint, "order_hash": self.order_hash, "size": self.size,
                "id_origin": self.id_origin, "file": self.file, "file_sha256": self.file_sha256,
                "strata": dict(self.strata), **tail}


#: The model record's keys every kind shares; the others are the kind's own (``embedding``, ``generation``).
_MODEL_KEYS = ("kind", "path", "head", "callable", "max_length", "truncation", "trust_remote_code", "files")


@dataclass(frozen=True)
class ModelRecord:
    """The model a campaign ran: as the protocol declared it, its carried files (D3) and its kind's own record
    (``job``: how an embedding job's vectors or a generation job's texts are made; empty for a classifier)."""

    kind: str
    path: str | None = None
    head: str | None = None
    callable: str | None = None
    max_length: int | None = None
    truncation: object = None
    trust_remote_code: bool = False
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    job: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, record: Any, where: object) -> ModelRecord:
        if not isinstance(record, Mapping) or "kind" not in record:
            raise _refused(where, "the model record names no kind")
        own = {k: record[k] for k in _MODEL_KEYS if k in record}
        return cls(**{**own, "files": dict(own.get("files") or {})},
                   job={k: v for k, v in record.items() if k not in _MODEL_KEYS})

    def to_json(self) -> dict[str, object]:
        """The JSON form (also what a pass spec carries as its ``model``)."""
        return {**{k: getattr(self, k) for k in _MODEL_KEYS}, "files": dict(self.files), **self.job}


@dataclass(frozen=True)
class CampaignRecord:
    """``campaign.json``: the protocol stamp, the job kind, the corpus (or datasets), the model, the schedule and
    the variants and series as locked, and the carried inputs' records (tuning split, catalog, routine, queries)."""

    kind: str
    protocol: ProtocolStamp
    corpus: SourceRecord
    model: ModelRecord
    schedule: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...]
    series: tuple[Mapping[str, Any], ...] = ()
    tuning: Mapping[str, Any] | None = None
    catalog: Mapping[str, Any] | None = None
    datasets: tuple[SourceRecord, ...] = ()
    routine: Mapping[str, Any] | None = None
    queries: Mapping[str, Any] | None = None
    schema_version: int = CAMPAIGN_SCHEMA

    @property
    def slots(self) -> tuple[Mapping[str, Any], ...]:
        """The schedule's slots, in run order (``plan.schedule.Slot.record()`` each)."""
        return tuple(self.schedule.get("slots") or ())

    def sources(self) -> tuple[tuple[str | None, SourceRecord], ...]:
        """Each corpus source with its record, in order: every dataset by name (K6), or the one corpus (named
        None). Its copy is ``campaign.folder.corpus_copy(name)``."""
        if self.datasets:
            return tuple((d.name, d) for d in self.datasets)
        return ((None, self.corpus),)

    def source(self, dataset: str | None) -> SourceRecord | None:
        """The record of one corpus source (None: the campaign has no such dataset)."""
        return dict(self.sources()).get(dataset)

    @classmethod
    def from_json(cls, record: Any, where: object, *, kind: str | None = None) -> CampaignRecord:
        """The record of a parsed campaign.json; ``kind``: the job kind of a folder written before it was
        recorded (the record's own wins)."""
        given = _take(record, cls, where, optional=("kind", "series", "tuning", "catalog", "datasets", "routine",
                                                      "queries", "schema_version"))
        if not isinstance(given.get("protocol"), Mapping):
            raise _refused(where, "the protocol stamp is not an object")
        return cls(**{
            **given, "kind": given.get("kind") or kind or DEFAULT_KIND,
            "protocol": ProtocolStamp(**_take(given["protocol"], ProtocolStamp, where,
                                              optional=("locked_at", "source"))),
            "corpus": SourceRecord.from_json(given["corpus"], where),
            "model": ModelRecord.from_json(given["model"], where),
            "variants": tuple(given["variants"]), "series": tuple(given.get("series") or ()),
            "datasets": tuple(SourceRecord.from_json(d, where) for d in given.get("datasets") or ())})

    def to_json(self) -> dict[str, object]:
        """The JSON form (keys sorted when written): the keys written before the kind was recorded, and
        ``kind``; the optional records only when the campaign has them."""
        record: dict[str, object] = {
            "schema_version": self.schema_version, "protocol": self.protocol.to_json(),
            "corpus": self.corpus.to_json(), "model": self.model.to_json(), "tuning": self.tuning,
            "catalog": self.catalog, "schedule": self.schedule, "variants": list(self.variants),
            "series": list(self.series), "kind": self.kind}
        if self.datasets:
            record["datasets"] = [d.to_json() for d in self.datasets]
        optional = {"routine": self.routine, "queries": self.queries}
        return {**record, **{k: v for k, v in optional.items() if v is not None}}


def recorded_kind(protocol_copy: Path) -> str:
    """The job kind of a folder written before campaign.json recorded it: its protocol copy's ``[task] kind``
    (read as TOML, without validating the protocol), the default when the copy or the key is absent."""
    if not protocol_copy.is_file():
        return DEFAULT_KIND
    try:
        task = tomllib.loads(protocol_copy.read_text(encoding="utf-8")).get("task") or {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _refused(protocol_copy, f"the protocol copy is not valid TOML ({exc})") from None
    return str(task.get("kind") or DEFAULT_KIND)


def read_campaign(path: Path, protocol_copy: Path) -> CampaignRecord | None:
    """The campaign record at ``path``, None when the file does not exist. ``protocol_copy``: the folder's copy
    of the protocol, read only for a record without its kind."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refused(path, f"the campaign record is not valid JSON ({exc})") from None
    if not isinstance(record, Mapping):
        raise _refused(path, "not a campaign record")
    kind = None if record.get("kind") else recorded_kind(protocol_copy)
    return CampaignRecord.from_json(record, path, kind=kind)


def write_campaign(path: Path, record: CampaignRecord) -> None:
    """Write campaign.json (atomically, sorted keys: ``common.files.write_json_atomic``)."""
    write_json_atomic(path, record.to_json())


__all__ = ["CAMPAIGN_SCHEMA", "DEFAULT_KIND", "CampaignRecord", "CampaignRecordError", "ModelRecord",
           "ProtocolStamp", "SourceRecord", "read_campaign", "recorded_kind", "write_campaign"]
