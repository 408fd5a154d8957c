"""A stored decision (``decision.json``, written by ``iteralab decide --out`` and ``iteralab report``) read back
into typed, frozen records: the one-line answer, its two halves (the configuration on each observed machine, the
rental), the protocol it was decided under, and each configuration's figures.

The decision itself is computed by :func:`iteralab.decision.rule.decide` (a :class:`~iteralab.decision.rule.Decision`);
this module only reads what was written, so that a notebook or an export sees the figures the folder holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import DECISION
from iteralab.errors import IteraError

__all__ = ["ConfigurationFigures", "MachineAnswer", "ProtocolIdentity", "RentalAnswer", "StoredDecision",
           "read_decision"]


class DecisionFileError(IteraError):
    """``decision.json`` is missing, not JSON, or lacks a key the typed record needs."""


@dataclass(frozen=True)
class ProtocolIdentity:
    """The locked protocol a decision was made under: its name, version and sha256."""

    name: str
    version: int
    sha256: str


@dataclass(frozen=True)
class MachineAnswer:
    """The configuration half of the decision on one observed machine (D1 without a price)."""

    hardware: str
    #: the variant chosen on this machine (None: none meets every condition)
    variant: str | None
    #: the variants the speed comparison cannot yet separate from the chosen one
    not_distinguished_from: tuple[str, ...]
    answer: str


@dataclass(frozen=True)
class RentalAnswer:
    """The rental half of the decision: what to rent, in one line."""

    #: the chosen configuration's key (None: nothing to rent)
    chosen: str | None
    answer: str
    mix_chosen: bool


@dataclass(frozen=True)
class ConfigurationFigures:
    """One configuration's figures as the decision recorded them."""

    key: str
    hardware: str
    variant: str
    feasible: bool
    candidate: bool
    #: the counted pass times, seconds, in the order the rounds ran
    times: tuple[float, ...]
    median_pass_s: float | None
    accepted_deliveries: int
    #: the committed package fee divided by the verified corpora (None: not priced, or no accepted result)
    cost_per_verified_corpus: Decimal | None
    currency: str | None


@dataclass(frozen=True)
class StoredDecision:
    """``decision.json`` as typed records."""

    path: Path
    schema_version: int
    #: the whole answer in one line
    line: str
    configuration: tuple[MachineAnswer, ...]
    rental: RentalAnswer
    chosen: str | None
    protocol: ProtocolIdentity
    corpus_fingerprint: str
    corpus_size: int
    configurations: tuple[ConfigurationFigures, ...]
    reasons: tuple[str, ...]
    uncertain: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def configuration_line(self) -> str:
        """The configuration half as one line: each observed machine's answer, joined by ``; ``."""
        return "; ".join(m.answer for m in self.configuration)

    def figures(self, variant: str) -> ConfigurationFigures:
        """The figures of ``variant`` (the first machine's, when several machines were merged)."""
        for c in self.configurations:
            if c.variant == variant:
                return c
        raise KeyError(variant)


def _decimal(text: Any) -> Decimal | None:
    if text is None:
        return None
    try:
        return Decimal(str(text))
    except InvalidOperation:
        return None


def _configuration(record: dict[str, Any]) -> ConfigurationFigures:
    pricing = record.get("pricing") or {}
    cost = pricing.get("cost_per_result") or {}
    return ConfigurationFigures(
        key=record["key"], hardware=record["hardware"], variant=record["variant"],
        feasible=bool(record["feasible"]), candidate=bool(record["candidate"]),
        times=tuple(float(t) for t in record["times"]), median_pass_s=record["median_pass_s"],
        accepted_deliveries=int(record["accepted_deliveries"]),
        cost_per_verified_corpus=_decimal(cost.get("per_result")), currency=cost.get("currency"))


def _machine(record: dict[str, Any]) -> MachineAnswer:
    return MachineAnswer(record["hardware"], record.get("variant"), tuple(record.get("not_distinguished_from") or ()),
                         record["answer"])


def read_decision(folder: str | Path) -> StoredDecision:
    """The decision stored in ``folder`` (a campaign folder or a ``--out`` folder), typed."""
    path = Path(folder) / DECISION
    if not path.is_file():
        raise DecisionFileError(f"{path}: no stored decision",
                                hint=f"write it: iteralab report {folder} (or iteralab decide {folder} --out DIR)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        protocol, rental, corpus = data["protocol"], data["rental"], data["corpus"]
        return StoredDecision(
            path=path, schema_version=int(data["schema_version"]), line=data["decision"],
            configuration=tuple(_machine(m) for m in data["configuration_per_machine"]),
            rental=RentalAnswer(rental.get("chosen"), rental["answer"], bool(rental.get("mix_chosen"))),
            chosen=data.get("chosen"),
            protocol=ProtocolIdentity(protocol["name"], int(protocol["version"]), protocol["sha256"]),
            corpus_fingerprint=corpus["fingerprint"], corpus_size=int(corpus["size"]),
            configurations=tuple(_configuration(c) for c in data["configurations"]),
            reasons=tuple(data.get("reasons") or ()), uncertain=tuple(data.get("uncertain") or ()),
            notes=tuple(data.get("notes") or ()))
    except ValueError as exc:
        raise DecisionFileError(f"{path}: not valid JSON ({exc})", hint="write it again: iteralab report") from None
    except (KeyError, TypeError) as exc:
        raise DecisionFileError(f"{path}: not a decision record (missing {exc})",
                                hint="write it again with this version: iteralab report") from None
