"""The protocol's lock file (P2): the content hash, the UTC time and the input fingerprints recorded before any
timed pass, one entry per protocol version, and the check that a protocol is locked and unchanged since."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from iteralab.common.files import write_json_atomic
from iteralab.errors import ProtocolError
from iteralab.plan.protocol import LOCK_SUFFIX, SCHEMA_VERSION, Protocol, check_series, load_protocol


def content_hash(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def lock_path(protocol_path: str | os.PathLike[str]) -> Path:
    p = Path(protocol_path)
    return p.with_name(p.name + LOCK_SUFFIX)


def _read_lock(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"schema_version": SCHEMA_VERSION, "locks": []}
    except (OSError, ValueError) as exc:
        raise ProtocolError(f"{path}: unreadable lock file ({exc})", hint="restore it from your records") from None
    if not isinstance(data, dict) or not isinstance(data.get("locks"), list):
        raise ProtocolError(f"{path}: not a protocol lock file", hint="restore it from your records")
    return data


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


def lock(protocol_path: str | os.PathLike[str], *, now: datetime | None = None, allow_large: bool = False,
         inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record the protocol's content hash, a UTC timestamp and the fingerprints of its ``inputs`` (P2).

    Locking the same content again returns the existing entry. Changed content under an already-locked
    version is refused: an amendment is a new version with its own lock (the old entries stay). The input
    fingerprints are computed (and the inputs checked) by :func:`iteralab.campaign.inputs.lock`, which is
    the lock every command uses.
    """
    path = Path(protocol_path)
    protocol = load_protocol(path)
    check_series(protocol, str(path))
    check_schedule_size(protocol, str(path), allow_large)
    digest = content_hash(path)
    lpath = lock_path(path)
    record = _read_lock(lpath)
    for entry in record["locks"]:
        if entry["sha256"] == digest:
            return entry
        if entry["version"] == protocol.version:
            raise ProtocolError(
                f"{path}: version {protocol.version} was locked at {entry['locked_at']} with different content",
                hint="an amended protocol is a new version: raise 'version' and lock again",
            )
    entry = {
        "name": protocol.name,
        "version": protocol.version,
        "sha256": digest,
        "locked_at": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        "protocol_file": path.name,
        "schedule": schedule_line(protocol),
    }
    if inputs is not None:
        entry["inputs"] = inputs
    record["locks"].append(entry)
    write_json_atomic(lpath, record)
    return entry


def check_locked(protocol_path: str | os.PathLike[str]) -> tuple[Protocol, dict[str, Any]]:
    """Return the protocol and its lock entry, or refuse an unlocked / changed-after-lock protocol (P2)."""
    path = Path(protocol_path)
    protocol = load_protocol(path)
    digest = content_hash(path)
    record = _read_lock(lock_path(path))
    for entry in record["locks"]:
        if entry["sha256"] == digest:
            return protocol, entry
    for entry in record["locks"]:
        if entry["version"] == protocol.version:
            raise ProtocolError(
                f"{path}: changed after it was locked (version {protocol.version}, locked at {entry['locked_at']})",
                hint="restore the locked content, or raise 'version' and lock the amendment as a new protocol",
            )
    raise ProtocolError(f"{path}: protocol is not locked", hint=f"run: iteralab lock {path}")


__all__ = ["MAX_SCHEDULED_PASSES", "check_locked", "check_schedule_size", "content_hash", "lock", "lock_path",
           "schedule_line", "scheduled_passes"]
