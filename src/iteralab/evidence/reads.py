"""A campaign folder's evidence, read once: the campaign record, the manifest, the locked protocol, the raw
table's counted rows, the exclusions (``pass_excluded`` events of the journal, the source of truth) and the
hardware the runtime reported. Statistics, the decision and the report all start from an :class:`Evidence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.campaign.campaignrecord import CampaignRecord
from iteralab.campaign.folder import CampaignFolder, RawRow
from iteralab.campaign.manifest import Manifest
from iteralab.evidence.table import write_raw_table
from iteralab.plan.protocol import Protocol, load_protocol


@dataclass(frozen=True)
class Hardware:
    """What the runtime reported (manifest device inventory), never what the configuration asked for."""

    backend: str
    gpus: tuple[str, ...]
    cpu: str | None
    cpu_cores: int | None = None
    cpu_flags: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        if not self.gpus:
            if not self.cpu:
                return "CPU only"
            extra = f", {self.cpu_cores} logical cores" if self.cpu_cores else ""
            if self.cpu_flags is not None:
                extra += f", flags: {' '.join(self.cpu_flags) or 'none of avx2/avx512/amx'}"
            return f"CPU only ({self.cpu}{extra})"
        names = sorted(set(self.gpus))
        return ", ".join(f"{self.gpus.count(n)}x {n}" if self.gpus.count(n) > 1 else n for n in names)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "gpus": list(self.gpus), "cpu": self.cpu, "cpu_cores": self.cpu_cores,
                "label": self.label}


@dataclass(frozen=True)
class Evidence:
    """The stored files of one campaign folder, read once."""

    folder: Path
    campaign: CampaignRecord
    manifest: Manifest | None
    protocol: Protocol
    rows: tuple[RawRow, ...]
    exclusions: dict[str, str]
    hardware: Hardware
    #: Scheduled (round, position) slots without a finished pass: the campaign is incomplete when > 0.
    not_attempted: int = 0
    #: Every row of the raw table in its order, the attempts a stop signal interrupted included (``rows`` leaves
    #: them out: they count for nothing, but they are shown wherever the attempts are listed).
    table: tuple[RawRow, ...] = ()
    #: The interrupted attempts whose slot has not finished since (among the ``not_attempted`` slots).
    pending_interrupted: tuple[str, ...] = ()

    @property
    def corpus_size(self) -> int:
        return self.campaign.corpus.size

    @property
    def fingerprint(self) -> str:
        return self.campaign.corpus.fingerprint

    def scheduled(self, variant: str) -> int:
        """Scheduled job rounds of a variant: its passes, one per (round, seed), each covering every corpus source
        (K6: with several datasets, one pass per dataset in each)."""
        slots = [s for s in self.campaign.slots if s["variant"] == variant]
        return len({(s["round"], s.get("seed")) for s in slots})

    @property
    def scheduled_total(self) -> int:
        return len(self.campaign.slots)

    @property
    def interrupted(self) -> tuple[RawRow, ...]:
        """The attempts a stop signal interrupted (not a failure, counted for nothing; their slot runs again)."""
        return tuple(r for r in self.table if r.interrupted)

    def incomplete_line(self) -> str | None:
        """'campaign incomplete: N of M scheduled passes not attempted — resume …' (and how many of those were
        attempted and interrupted, by id), or None when complete."""
        if not self.not_attempted:
            return None
        stopped = len(self.pending_interrupted)
        what = "not attempted" if not stopped else (
            f"not attempted and {stopped} interrupted ({', '.join(self.pending_interrupted)}: stopped by a signal, "
            "counted for nothing; the slot runs again)")
        return (f"campaign incomplete: {self.not_attempted - stopped} of {self.scheduled_total} scheduled passes "
                f"{what} — resume with `iteralab run PROTOCOL --out {self.folder}`")


def _hardware(manifest: Manifest | None, journal_devices: list[dict[str, Any]]) -> Hardware:
    inventory = None
    if manifest:
        env = manifest.environment
        inventory = env.get("device_inventory") or env.get("devices")
    if not inventory and journal_devices:
        inventory = journal_devices[0]
    if not inventory:
        return Hardware("unknown", (), None)
    gpus = tuple(str(g.get("name")) for g in inventory.get("gpus") or [] if g.get("name"))
    cpu = (inventory.get("cpu") or {}).get("model")
    cores = (inventory.get("cpu") or {}).get("logical_cores")
    flags = (inventory.get("cpu") or {}).get("relevant_flags")
    return Hardware(str(inventory.get("backend") or ("cuda" if gpus else "cpu")), gpus, cpu,
                    int(cores) if isinstance(cores, int) else None,
                    tuple(flags) if isinstance(flags, list) else None)


def load_evidence(campaign_dir: str | Path) -> Evidence:
    """Read a campaign folder once (campaign.json, manifest.json, journal, protocol, raw table)."""
    folder = CampaignFolder.open(campaign_dir)
    campaign = folder.campaign
    if not folder.table_path.is_file():  # derived from the journal: regenerated, never asked for
        write_raw_table(folder.path)
    table = folder.raw_rows()
    rows = tuple(r for r in table if not r.interrupted)  # what CampaignFolder.counted_rows gives, read once
    state = folder.journal()
    done = state.done_slots()
    slots = campaign.slots
    not_attempted = sum(1 for s in slots if (s["round"], s["position"]) not in done)
    pending = tuple(r.pass_id for r in table if r.interrupted and (r.round, r.position) not in done)
    exclusions = {r.pass_id: r.exclusion_reason or "" for r in rows if r.excluded}
    exclusions.update({pid: str(e.get("reason") or "") for pid, e in state.exclusions.items()})
    devices = [f["environment_summary"]["devices"] for f in state.finished.values()
               if (f.get("environment_summary") or {}).get("devices")]
    manifest = folder.manifest
    protocol = load_protocol(folder.protocol_path)
    return Evidence(folder.path, campaign, manifest, protocol, rows, exclusions, _hardware(manifest, devices),
                    not_attempted, table, pending)


__all__ = ["Evidence", "Hardware", "load_evidence"]
