"""``verify``'s last check: a stored decision is the one its folder decides (D3).

Reads ``decision.json`` and what the folder holds (the raw table, the protocol, the catalog the decision priced
from: ``decision-catalog.csv``, whose sha256 decision.json records, else ``inputs/catalog.csv``); recomputes the
decision with the options it records (rental id, projection, lots) and adds one difference line to the
:class:`~iteralab.evidence.verify.AuditReport` where the two differ, naming the keys. Where the folder was read
from (its path, a catalog's path, the words naming where the catalog was read) is not compared: a folder moved or
unpacked elsewhere decides the same way. No model is run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import DECISION
from iteralab.decision.note import decision_json
from iteralab.decision.rule import decide
from iteralab.errors import IteraError
from iteralab.evidence.verify import AuditReport, audit_campaign

__all__ = ["audit_with_decision", "check_decision"]

#: Keys of decision.json that say where a file was read, not what was decided (compared nowhere).
_WHERE_KEYS = frozenset({"folder", "path"})


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


def _view(value: Any, folder: str) -> Any:
    """decision.json without where it was read from: ``folder``/``path`` keys dropped, the campaign folder as
    written in a sentence replaced by a mark, so the same decision read from a moved folder compares equal."""
    if isinstance(value, dict):
        return {k: _view(v, folder) for k, v in value.items() if k not in _WHERE_KEYS}
    if isinstance(value, list):
        return [_view(v, folder) for v in value]
    if isinstance(value, str) and folder:
        return re.sub(rf"(?<![\w/.-]){re.escape(folder)}(?![\w.-])", "<campaign folder>", value)
    return value


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
    campaigns = stored.get("campaigns") or []
    if len(campaigns) != 1:
        report.notes.append(f"{DECISION}: decided from {len(campaigns)} campaign folders; verify recomputes a "
                            "decision of this folder alone, so it was not recomputed (run 'iteralab decide' on the "
                            "same folders)")
        return
    decision = decide([folder], rental_id=stored.get("rental_id"), project=bool(stored.get("project")),
                      lots=int(stored.get("lots") or 1), partial=True)
    fresh = json.loads(decision_json(decision))
    recorded = (stored.get("catalog") or {}).get("sha256")
    held = decision.catalog_sha256
    if recorded is None:
        report.notes.append(f"{DECISION}: records no catalog sha256 (written before decisions sealed their "
                            "catalog); compared with the decision priced from the folder's catalog")
    elif recorded != held:
        report.differences.append(
            f"{DECISION}: priced from a catalog with sha256 {recorded[:12]}…, which the folder does not hold (it "
            f"prices from {decision.catalog_source.split(' ', 1)[0]}, sha256 {str(held)[:12]}…)")
    old = _view(stored, str(campaigns[0].get("folder") or ""))
    new = _view(fresh, str(folder))
    for view in (old, new):
        view.get("catalog", {}).pop("source", None)  # where the catalog was read, in words
        view.get("catalog", {}).pop("sha256", None)  # compared above, in its own line
    keys = _differing(old, new)
    if keys:
        report.differences.append(
            f"{DECISION}: differs from the decision recomputed from the folder's files at "
            f"{', '.join(keys[:6])}{', …' if len(keys) > 6 else ''} (stored {_short(stored.get('decision'))}, "
            f"recomputed {_short(fresh.get('decision'))})")
