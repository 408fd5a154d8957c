"""``verify``'s last check: a stored decision is the one its folder decides (D3).

Reads ``decision.json`` and what the folder holds (the raw table, the protocol, the catalog the decision priced
from: ``decision-catalog.csv``, whose sha256 decision.json records, else ``inputs/catalog.csv``); recomputes the
decision with the options it records (rental id, projection, lots given or chosen by the rule) and adds one
difference line to the :class:`~iteralab.evidence.verify.AuditReport` where the two differ, naming the keys. A
decision of several machines' folders is recomputed from all of them: each other folder is found where
decision.json recorded it (as written, else beside this folder by its name) and its seal checked; one not found is
named in a note. Where a folder was read from (its path, a catalog's path, the words naming where the catalog was
read) is not compared: folders moved or unpacked elsewhere decide the same way. No model is run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import DECISION
from iteralab.evidence.bundle import SUMS_NAME, check_seal
from iteralab.decision.note import decision_json
from iteralab.decision.rule import decide
from iteralab.errors import IteraError
from iteralab.evidence.verify import AuditReport, audit_campaign

__all__ = ["audit_with_decision", "check_decision"]

#: Keys of decision.json that say where a file was read, not what was decided (compared nowhere).
_WHERE_KEYS = frozenset({"folder", "path"})
#: Keys a decision.json written before the rule planned lots, mixes and break-even rates does not hold: compared
#: only where the stored record holds them.
_LATER_KEYS = frozenset({"max_lots", "rental_plans", "mix_chosen", "lots_plan"})


def audit_with_decision(folder: str | Path, *, require_seal: bool = True,
                        expect_seal: str | None = None) -> AuditReport:
    """:func:`~iteralab.evidence.verify.audit_campaign`, then the stored decision against the recomputed one."""
    report = audit_campaign(folder, require_seal=require_seal, expect_seal=expect_seal)
    if (Path(folder) / DECISION).is_file():
        try:
            check_decision(Path(folder), report)
        except IteraError as exc:
            report.differences.append(f"{DECISION}: {exc.message}")
        except Exception as exc:  # noqa: BLE001 - a decision that cannot be recomputed is a failed verification
            report.differences.append(f"{DECISION}: could not be recomputed from the stored files "
                                      f"({type(exc).__name__}: {exc})")
    return report


def _view(value: Any, folders: list[str]) -> Any:
    """decision.json without where it was read from: ``folder``/``path`` keys dropped, each campaign folder as
    written in a sentence replaced by a mark, so the same decision read from moved folders compares equal."""
    if isinstance(value, dict):
        return {k: _view(v, folders) for k, v in value.items() if k not in _WHERE_KEYS}
    if isinstance(value, list):
        return [_view(v, folders) for v in value]
    if isinstance(value, str):
        for i, folder in sorted(enumerate(folders), key=lambda f: -len(f[1])):
            if folder:
                value = re.sub(rf"(?<![\w/.-]){re.escape(folder)}(?![\w.-])", f"<campaign folder {i + 1}>", value)
    return value


def _without_later(fresh: Any, stored: Any) -> tuple[Any, bool]:
    """``fresh`` without the keys of :data:`_LATER_KEYS` the stored record lacks at the same place, and whether any
    was dropped (a record written before they existed)."""
    if isinstance(fresh, dict) and isinstance(stored, dict):
        dropped = False
        out = {}
        for k, v in fresh.items():
            if k in _LATER_KEYS and k not in stored:
                dropped = True
                continue
            out[k], inner = _without_later(v, stored.get(k))
            dropped = dropped or inner
        return out, dropped
    if isinstance(fresh, list) and isinstance(stored, list) and len(fresh) == len(stored):
        pairs = [_without_later(a, b) for a, b in zip(fresh, stored)]
        return [p[0] for p in pairs], any(p[1] for p in pairs)
    return fresh, False


def _differing(a: Any, b: Any, where: str = "") -> list[str]:
    """The dotted keys at which two JSON values differ (lists of unequal length differ as a whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differing(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differing(x, y, f"{where}[{i}]")]
    return [] if a == b else [where.lstrip(".") or "(the whole record)"]


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _locate(recorded: str, folder: Path) -> Path | None:
    """A campaign folder named in decision.json: as written (absolute, or from the working folder), else beside
    ``folder`` by its name (folders moved or unpacked together); None when neither holds a campaign."""
    path = Path(recorded)
    for candidate in (path, folder.parent / path.name):
        if (candidate / "campaign.json").is_file():
            return candidate
    return None


def _folders(folder: Path, recorded: list[str], report: AuditReport) -> list[Path] | None:
    """The folders to recompute from, in the recorded order, ``folder`` among them; None (with a note) when one is
    not found. The seal of each other folder is checked (a difference where it is broken)."""
    this = folder.resolve()
    mine = next((i for i, r in enumerate(recorded) if Path(r).resolve() == this), None)
    if mine is None:
        mine = next((i for i, r in enumerate(recorded) if Path(r).name == folder.name), 0)
    paths: list[Path] = []
    for i, r in enumerate(recorded):
        found = folder if i == mine else _locate(r, folder)
        if found is None:
            report.notes.append(f"{DECISION}: decided from {len(recorded)} campaign folders; {r!r} was not found "
                                "(as written, nor beside this folder), so the decision was not recomputed (run "
                                "'iteralab verify' where every folder is, or 'iteralab decide' on the same folders)")
            return None
        if i != mine and (found / SUMS_NAME).is_file():
            report.differences += [f"{DECISION}: merged folder {r}: {p}" for p in check_seal(found).problems]
        paths.append(found)
    return paths


def check_decision(folder: Path, report: AuditReport) -> None:
    """Recompute the folder's stored decision and add each difference (or note) to ``report``."""
    try:
        stored = json.loads((folder / DECISION).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        report.differences.append(f"{DECISION}: not valid JSON ({exc})")
        return
    if not isinstance(stored, dict):
        report.differences.append(f"{DECISION}: not a decision record")
        return
    recorded = [str(c.get("folder") or "") for c in stored.get("campaigns") or []]
    folders = [folder] if len(recorded) <= 1 else _folders(folder, recorded, report)
    if folders is None:
        return
    lots = stored.get("lots", 1)  # absent: written when one lot was the default
    decision = decide(folders, rental_id=stored.get("rental_id"), project=bool(stored.get("project")),
                      lots=None if lots is None else int(lots), partial=True)
    fresh = json.loads(decision_json(decision))
    _compare(stored, fresh, recorded or [""], [str(f) for f in folders], decision, report)


def _compare(stored: dict, fresh: dict, recorded: list[str], folders: list[str], decision: Any,
             report: AuditReport) -> None:
    """Add the catalog line and the differing keys, where the folders' paths are not compared."""
    recorded_sha = (stored.get("catalog") or {}).get("sha256")
    held = decision.catalog_sha256
    if recorded_sha is None:
        report.notes.append(f"{DECISION}: records no catalog sha256 (written before decisions sealed their "
                            "catalog); compared with the decision priced from the folder's catalog")
    elif recorded_sha != held:
        report.differences.append(
            f"{DECISION}: priced from a catalog with sha256 {recorded_sha[:12]}…, which the folder does not hold (it "
            f"prices from {decision.catalog_source.split(' ', 1)[0]}, sha256 {str(held)[:12]}…)")
    fresh, dropped = _without_later(fresh, stored)
    if dropped:
        report.notes.append(f"{DECISION}: written before decisions planned lots, mixes of machines and break-even "
                            "rates: those parts were not compared")
    old = _view(stored, recorded)
    new = _view(fresh, folders)
    for view in (old, new):
        view.get("catalog", {}).pop("source", None)  # where the catalog was read, in words
        view.get("catalog", {}).pop("sha256", None)  # compared above, in its own line
    keys = _differing(old, new)
    if keys:
        report.differences.append(
            f"{DECISION}: differs from the decision recomputed from the folder's files at "
            f"{', '.join(keys[:6])}{', …' if len(keys) > 6 else ''} (stored {_short(stored.get('decision'))}, "
            f"recomputed {_short(fresh.get('decision'))})")
