"""The protocol's lock file (P2): the content hash, the UTC time and the input fingerprints recorded before any
timed pass, one entry per protocol version, and the check that a protocol is locked and unchanged since.

A command reads the protocol file once (:func:`read_protocol_file`: its bytes, hashed and parsed, the paths it
declares resolved) and, for ``run`` and ``rerun``, checks it against its lock once (:func:`open_locked`); the
stages below take that one frozen object, never the file's path."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

from iteralab.common.files import write_json_atomic
from iteralab.errors import ProtocolError
from iteralab.plan.paths import resolve
from iteralab.plan.protocol import (LOCK_SUFFIX, SCHEMA_VERSION, Protocol, check_series, parse_protocol,
                                    read_protocol_bytes, read_protocol_text)


@dataclass(frozen=True)
class ProtocolFile:
    """A protocol file read once: its bytes (what is hashed, and what a campaign folder seals), their sha256, the
    parsed protocol and every path it declares, resolved once (:func:`iteralab.plan.paths.resolve`, stand-ins
    included). A declared path that cannot be resolved (a ``package:`` that is not installed) is refused when a
    stage asks for it (:meth:`where`), as before, not when the file is read."""

    path: Path
    raw: bytes
    sha256: str
    protocol: Protocol
    #: reference as written -> its path, or the refusal of that reference
    paths: Mapping[str, Path | ProtocolError]
    #: the protocol file's absolute path (relative references are relative to its folder)
    resolved: Path

    def where(self, reference: str | None) -> Path | None:
        """The resolved path of a reference the protocol declares (None for None)."""
        if reference is None:
            return None
        found = self.paths.get(reference)
        if found is None:  # not a declared path: resolved now (never the case for the stages' own references)
            return resolve(self.path, reference)
        if isinstance(found, ProtocolError):
            raise ProtocolError(found.message, hint=found.hint)
        return found

    @property
    def folder(self) -> Path:
        return self.resolved.parent

    @property
    def source(self) -> str:
        """The file as the user named it, for messages."""
        return str(self.path)


@dataclass(frozen=True)
class LockEntry:
    """One lock of a protocol version (P2), as the lock file holds it: the protocol's name, version and content
    hash, the UTC time of the lock, the protocol file's name, the schedule in words, and the input fingerprints
    (``inputs``: ``lock.lockrecords``'s form; None in an entry written before inputs were fingerprinted)."""

    name: str
    version: int
    sha256: str
    locked_at: str
    protocol_file: str | None = None
    schedule: str | None = None
    inputs: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, record: Any, where: object) -> LockEntry:
        names = cls.__dataclass_fields__
        if not isinstance(record, Mapping) or any(k not in record for k in ("name", "version", "sha256", "locked_at")):
            raise ProtocolError(f"{where}: not a protocol lock file (an entry without name, version, sha256 and "
                                "locked_at)", hint="restore it from your records")
        return cls(**{k: v for k, v in record.items() if k in names})

    def to_json(self) -> dict[str, object]:
        """The JSON form: the keys an entry holds (those of an older entry that lacks one stay absent)."""
        optional = {"protocol_file": self.protocol_file, "schedule": self.schedule, "inputs": self.inputs}
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "locked_at": self.locked_at,
                **{k: v for k, v in optional.items() if v is not None}}


@dataclass(frozen=True)
class LockedProtocol(ProtocolFile):
    """A :class:`ProtocolFile` whose content is locked: its lock entry (hash, time, input fingerprints). Never
    mutated by the stages it is handed to."""

    entry: LockEntry


def declared_references(protocol: Protocol) -> list[str]:
    """Every path the protocol declares: corpus, tuning split, datasets, model folder, head, catalog."""
    refs = [*(source.path for source in protocol.sources()), protocol.corpus.tuning_path,
            protocol.model.path, protocol.model.head, protocol.catalog.path]
    return list(dict.fromkeys(r for r in refs if r))


def read_protocol_file(protocol_path: str | os.PathLike[str]) -> ProtocolFile:
    """Read the protocol file once: its bytes hashed, parsed and checked as :func:`load_protocol` checks them, and
    its declared paths resolved."""
    path = Path(protocol_path)
    raw = read_protocol_bytes(path)
    protocol = parse_protocol(read_protocol_text(path, raw), source=str(path))
    paths: dict[str, Path | ProtocolError] = {}
    for ref in declared_references(protocol):
        try:
            found = resolve(path, ref)
        except ProtocolError as exc:
            paths[ref] = exc
        else:
            assert found is not None
            paths[ref] = found
    return ProtocolFile(path=path, raw=raw, sha256=hashlib.sha256(raw).hexdigest(), protocol=protocol,
                        paths=MappingProxyType(paths), resolved=path.resolve())


def as_protocol_file(protocol: str | os.PathLike[str] | ProtocolFile) -> ProtocolFile:
    """The protocol file as read once: given, or read now from its path."""
    return protocol if isinstance(protocol, ProtocolFile) else read_protocol_file(protocol)


def lock_path(protocol_path: str | os.PathLike[str]) -> Path:
    p = Path(protocol_path)
    return p.with_name(p.name + LOCK_SUFFIX)


def _read_lock(path: Path) -> tuple[dict[str, Any], list[LockEntry]]:
    """The lock file as stored (appended to, never rewritten entry by entry) and its entries, typed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"schema_version": SCHEMA_VERSION, "locks": []}, []
    except (OSError, ValueError) as exc:
        raise ProtocolError(f"{path}: unreadable lock file ({exc})", hint="restore it from your records") from None
    if not isinstance(data, dict) or not isinstance(data.get("locks"), list):
        raise ProtocolError(f"{path}: not a protocol lock file", hint="restore it from your records")
    return data, [LockEntry.from_json(entry, path) for entry in data["locks"]]


#: A schedule larger than this is refused by ``lock`` unless asked for explicitly (a typo such as
#: ``passes = 1000000`` must not commit a rental to years of passes).
MAX_SCHEDULED_PASSES = 10_000


def scheduled_passes(protocol: Protocol) -> int:
    """Measured passes the protocol commits to: variants × passes × seeds (× datasets, K6) (R6, Q3)."""
    return (len(protocol.variants) * protocol.run.passes * len(protocol.reproduction.seeds)
            * max(1, len(protocol.datasets)))


def schedule_line(protocol: Protocol) -> str:
    """The schedule in words, e.g. "5 variants × 5 passes = 25 measured passes, rotated"."""
    n, passes, seeds = len(protocol.variants), protocol.run.passes, len(protocol.reproduction.seeds)
    parts = [f"{n} variant{'s' if n != 1 else ''}", f"{passes} pass{'es' if passes != 1 else ''}"]
    if seeds > 1:
        parts.append(f"{seeds} seeds")
    if protocol.datasets:
        parts.append(f"{len(protocol.datasets)} dataset{'s' if len(protocol.datasets) != 1 else ''}")
    total = scheduled_passes(protocol)
    return f"{' × '.join(parts)} = {total:,} measured pass{'es' if total != 1 else ''}, rotated"


def check_schedule_size(protocol: Protocol, source: str, allow_large: bool) -> None:
    total = scheduled_passes(protocol)
    if total > MAX_SCHEDULED_PASSES and not allow_large:
        raise ProtocolError(
            f"{source}: {schedule_line(protocol)}: more than {MAX_SCHEDULED_PASSES:,} scheduled passes",
            hint="check run.passes and the variants; lock with --allow-large if this schedule is meant",
        )


def lock(protocol_file: str | os.PathLike[str] | ProtocolFile, *, now: datetime | None = None,
         allow_large: bool = False, inputs: dict[str, Any] | None = None) -> LockEntry:
    """Record the protocol's content hash, a UTC timestamp and the fingerprints of its ``inputs`` (P2).

    Locking the same content again returns the existing entry. Changed content under an already-locked
    version is refused: an amendment is a new version with its own lock (the old entries stay). The input
    fingerprints are computed (and the inputs checked) by :func:`iteralab.lock.inputs.lock`, which is
    the lock every command uses."""
    source = as_protocol_file(protocol_file)
    path, protocol = source.path, source.protocol
    check_series(protocol, str(path))
    check_schedule_size(protocol, str(path), allow_large)
    lpath = lock_path(path)
    record, entries = _read_lock(lpath)
    for entry in entries:
        if entry.sha256 == source.sha256:
            return entry
        if entry.version == protocol.version:
            raise ProtocolError(
                f"{path}: version {protocol.version} was locked at {entry.locked_at} with different content",
                hint="an amended protocol is a new version: raise 'version' and lock again",
            )
    entry = LockEntry(protocol.name, protocol.version, source.sha256,
                      (now or datetime.now(timezone.utc)).isoformat(timespec="seconds"), path.name,
                      schedule_line(protocol), inputs)
    record["locks"].append(entry.to_json())
    write_json_atomic(lpath, record)
    return LockEntry.from_json(json.loads(json.dumps(entry.to_json())), lpath)  # as open_locked reads it back


def open_locked(protocol: str | os.PathLike[str] | ProtocolFile) -> LockedProtocol:
    """The protocol read once with its lock entry, or a refusal of an unlocked / changed-after-lock protocol (P2)."""
    source = as_protocol_file(protocol)
    if isinstance(source, LockedProtocol):
        return source
    path, version = source.path, source.protocol.version
    _, entries = _read_lock(lock_path(path))
    for entry in entries:
        if entry.sha256 == source.sha256:
            return LockedProtocol(**{f: getattr(source, f) for f in _FILE_FIELDS}, entry=entry)
    for entry in entries:
        if entry.version == version:
            raise ProtocolError(
                f"{path}: changed after it was locked (version {version}, locked at {entry.locked_at})",
                hint="restore the locked content, or raise 'version' and lock the amendment as a new protocol",
            )
    raise ProtocolError(f"{path}: protocol is not locked", hint=f"run: iteralab lock {path}")


_FILE_FIELDS = ("path", "raw", "sha256", "protocol", "paths", "resolved")


def check_locked(protocol_path: str | os.PathLike[str]) -> tuple[Protocol, LockEntry]:
    """Return the protocol and its lock entry, or refuse an unlocked / changed-after-lock protocol (P2)."""
    locked = open_locked(protocol_path)
    return locked.protocol, locked.entry


__all__ = ["MAX_SCHEDULED_PASSES", "LockEntry", "LockedProtocol", "ProtocolFile", "as_protocol_file", "check_locked",
           "check_schedule_size", "declared_references", "lock", "lock_path", "open_locked",
           "read_protocol_file", "schedule_line", "scheduled_passes"]
