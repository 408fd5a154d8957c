"""Independent verification of a campaign folder (D3): every verdict recomputed from the stored files alone.

``audit_campaign`` never runs a model and never imports torch. It reads what the folder holds and checks:

1. the hash list (``SHA256SUMS`` and its own hash, see ``bundle.py``): no file edited, deleted or added;
2. the protocol: ``inputs/protocol.toml`` still has the sha256 recorded in its lock file and in
   ``campaign.json`` (an edited threshold is a changed protocol), and it still parses;
3. the corpus: ``inputs/corpus.csv`` has the recorded sha256, fingerprint, order hash and size;
4. the schedule and variants in ``campaign.json`` are the ones the locked protocol implies, and the model files
   carried under ``inputs/model`` have the sha256 ``campaign.json`` records;
5. every prediction file has the sha256 the journal recorded for its pass, lists its ids in the corpus copy's
   order (whatever order the pass ran in: bucketed, on Ray), no unexplained prediction file exists, and each
   pass's recorded intrinsic verdict equals the one recomputed from its file;
6. the raw table regenerated in memory (``table.build_rows`` + ``render_csv``) equals the stored
   ``raw_table.csv`` cell by cell — nothing is ignored.

``iteralab verify`` then checks a stored ``decision.json`` against the decision the folder decides
(:mod:`iteralab.decision.audit`, a later stage of the pipeline).

Each difference is one line that names the file (and pass, row, column) at fault. A check that cannot run
because its input is damaged is itself a difference, never a silent pass.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow.compute as pc

from iteralab.campaign.folder import (
    CAMPAIGN, CORPUS, LOCK, MANIFEST, PREDICTIONS, PROTOCOL, TABLE, CampaignFolder, corpus_copy, corpus_digests)
from iteralab.campaign.campaignrecord import CampaignRecord, SourceRecord
from iteralab.campaign.journal import JOURNAL_NAME, read_journal
from iteralab.campaign.kinds.output import is_prediction_name, pass_of
from iteralab.campaign.verdict.evaluate import EvaluationContext, PredictionReader
from iteralab.common.files import sha256_file
from iteralab.errors import IteraError, VerificationError
from iteralab.evidence.bundle import SEAL_FILES, SUMS_NAME, check_seal
from iteralab.evidence.table import COLUMNS, build_rows, render_csv
from iteralab.lock.carry import CARRY_DIR
from iteralab.lock.datasets import combined_fingerprint, combined_order_hash
from iteralab.plan.protocol import load_protocol
from iteralab.plan.schedule import schedule_slots

AUDIT_SCHEMA = 1
#: Keys of a pass's intrinsic verdict (journal ``pass_evaluated``) that must be recomputed identically.
INTRINSIC_KEYS = ("expected_ids", "observed_ids", "unique_ids", "duplicates", "missing", "extra", "ids_match",
                  "format_ok", "n_format_problems", "coverage", "coverage_ok", "metric_name", "metric",
                  "threshold_ok", "subgroups", "subgroup_classes", "routine_error", "queries_error")


@dataclass(frozen=True)
class PassVerdict:
    """One pass's verdict as the audit recomputed it from the stored files (the audit record's ``verdicts``)."""

    pass_id: str
    variant: str
    status: str | None
    corpus_accepted: bool
    prediction_file: str | None
    #: K6: its dataset (None: the campaign's one corpus; then absent from the record)
    dataset: str | None = None

    def to_json(self) -> dict[str, str | bool | None]:
        return {"pass_id": self.pass_id, "variant": self.variant, "status": self.status,
                "corpus_accepted": self.corpus_accepted, "prediction_file": self.prediction_file,
                **({"dataset": self.dataset} if self.dataset is not None else {})}


@dataclass
class AuditReport:
    folder: Path
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    passes: int = 0
    accepted: int = 0
    files_hashed: int = 0
    seal_digest: str | None = None
    verdicts: list[PassVerdict] = field(default_factory=list)
    #: K6: per dataset, the passes and accepted passes recomputed from the stored files (empty for one corpus).
    datasets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary_line(self) -> str:
        per = "; per dataset (accepted of passes): " + ", ".join(
            f"{name} {d['accepted']} of {d['passes']}" for name, d in self.datasets.items()) if self.datasets else ""
        return f"verified: {self.passes} passes, {self.accepted} accepted, {self.files_hashed} files hashed{per}"

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": AUDIT_SCHEMA, "folder": str(self.folder), "ok": self.ok,
                "differences": list(self.differences), "notes": list(self.notes), "passes": self.passes,
                "accepted": self.accepted, "files_hashed": self.files_hashed, "seal_digest": self.seal_digest,
                "verdicts": [v.to_json() for v in self.verdicts],
                **({"datasets": self.datasets} if self.datasets else {})}

    def never_sealed(self) -> bool:
        """The only difference is a missing hash list: the folder was never sealed (nothing was changed)."""
        return len(self.differences) == 1 and self.differences[0].startswith(f"{SUMS_NAME}: missing")

    def raise_if_different(self) -> None:
        if self.never_sealed():
            raise VerificationError(
                f"{self.folder}: the folder was never sealed (no {SUMS_NAME}), so a changed file cannot be told "
                "from an original one",
                hint=f"seal it first: iteralab bundle seal {self.folder} — or check what is there without a seal: "
                     f"iteralab verify --unsealed {self.folder}",
            )
        if self.differences:
            raise VerificationError(
                f"{self.folder}: {len(self.differences)} difference(s); the evidence does not verify",
                hint="each line above names a file that no longer matches the evidence it should; restore the "
                     "original bundle (or unpack the archive again) — never re-seal a changed folder to hide it",
            )


class _Audit:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.report = AuditReport(folder)

    def diff(self, line: str) -> None:
        if line not in self.report.differences:
            self.report.differences.append(line)

    def note(self, line: str) -> None:
        if line not in self.report.notes:
            self.report.notes.append(line)

    def stage(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one check; a damaged input that stops it is reported as a difference, never skipped."""
        try:
            return fn(*args)
        except IteraError as exc:
            self.diff(f"{what}: {exc.message}")
        except Exception as exc:  # noqa: BLE001 - any failure to recompute is a failed verification
            self.diff(f"{what}: could not be checked from the stored files ({type(exc).__name__}: {exc})")
        return None

    def load_json(self, rel: str) -> Any:
        path = self.folder / rel
        if not path.is_file():
            self.diff(f"{rel}: missing")
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            self.diff(f"{rel}: not valid JSON ({exc})")
            return None


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def audit_campaign(folder: str | Path, *, require_seal: bool = True, expect_seal: str | None = None) -> AuditReport:
    """Check a campaign folder against its own evidence; see the module docstring for every check."""
    audit = _Audit(Path(folder))
    report = audit.report
    if require_seal or (audit.folder / SUMS_NAME).exists() or expect_seal:
        sealed = check_seal(audit.folder, expect_digest=expect_seal)
        report.files_hashed, report.seal_digest = sealed.files, sealed.digest
        for problem in sealed.problems:
            audit.diff(problem)
    else:
        audit.note(f"not sealed: no {SUMS_NAME}, so added or deleted files cannot be told apart "
                   "(seal it with 'iteralab bundle pack')")
    if not (audit.folder / CAMPAIGN).is_file():
        audit.diff(f"{CAMPAIGN}: missing")
        return report
    try:
        campaign = CampaignFolder(audit.folder).campaign
    except IteraError as exc:
        audit.diff(f"{CAMPAIGN}: not a campaign record ({exc})")
        return report
    protocol = audit.stage(PROTOCOL, _check_protocol, audit, campaign)
    if protocol is None:
        return report
    audit.stage(CORPUS, _check_corpus, audit, campaign, protocol)
    audit.stage(CAMPAIGN, _check_schedule, audit, campaign, protocol)
    audit.stage(CARRY_DIR, _check_carried, audit, campaign)

    # The corpus and every prediction file are read once and shared by the journal and the table checks.
    shared = audit.stage(CORPUS, lambda: (EvaluationContext.of(audit.folder), PredictionReader(protocol)))
    if shared is None:
        return report
    audit.stage(JOURNAL_NAME, _check_journal, audit, campaign, protocol, *shared)
    audit.stage(TABLE, _check_table, audit, *shared)
    return report


# ------------------------------------------------------------------------------------------------- checks


def _check_protocol(audit: _Audit, campaign: CampaignRecord) -> Any:
    path = audit.folder / PROTOCOL
    recorded = campaign.protocol
    label = f"protocol {recorded.name!r} version {recorded.version}"
    if not path.is_file():
        audit.diff(f"{PROTOCOL}: missing ({label})")
        return None
    digest = sha256_file(path)
    lock = audit.load_json(LOCK)
    entries = lock.get("locks") if isinstance(lock, dict) else None
    if lock is not None and not isinstance(entries, list):
        audit.diff(f"{LOCK}: not a protocol lock file")
        entries = None
    if entries is not None:
        if not any(isinstance(e, dict) and e.get("sha256") == digest for e in entries):
            locked = next((e for e in entries if isinstance(e, dict) and e.get("sha256") == recorded.sha256),
                          None)
            when = f" at {locked.get('locked_at')}" if locked else ""
            audit.diff(f"{PROTOCOL}: {label} changed after it was locked (lock sha256 "
                       f"{recorded.sha256[:12]}…{when}, file now {digest[:12]}…): a threshold or "
                       "another pre-registered rule was edited")
        if not any(isinstance(e, dict) and e.get("sha256") == recorded.sha256 for e in entries):
            audit.diff(f"{LOCK}: has no lock for the sha256 that campaign.json records for {label}")
    if recorded.sha256 != digest:
        audit.diff(f"campaign.json: records {label} with sha256 {recorded.sha256[:12]}…, "
                   f"but {PROTOCOL} has {digest[:12]}…")
    protocol = load_protocol(path)
    if (protocol.name, protocol.version) != (recorded.name, recorded.version):
        audit.diff(f"{PROTOCOL}: names protocol {protocol.name!r} version {protocol.version}, "
                   f"campaign.json records {label}")
    return protocol


def _check_copy(audit: _Audit, relative: str, recorded: SourceRecord, protocol: Any) -> None:
    """One corpus copy (the corpus, or one dataset of a several-dataset campaign) against its record."""

    path = audit.folder / relative
    if not path.is_file():
        audit.diff(f"{relative}: missing")
        return
    if sha256_file(path) != recorded.file_sha256:
        audit.diff(f"{relative}: sha256 differs from campaign.json (a text, id or reference label was edited)")
    corpus = corpus_digests(path, protocol.corpus.classes)
    if corpus.duplicate_ids or corpus.labels_outside:
        audit.diff(f"{relative}: not a valid corpus ({corpus.duplicate_ids} repeated ids, {corpus.labels_outside} "
                   "labels that are not classes of the protocol)")
    for key, value in (("fingerprint", corpus.fingerprint), ("order_hash", corpus.order_hash),
                       ("size", corpus.size)):
        if getattr(recorded, key) != value:
            audit.diff(f"{relative}: {key} recomputed as {str(value)[:16]}, campaign.json records "
                       f"{str(getattr(recorded, key))[:16]}")


def _check_corpus(audit: _Audit, campaign: CampaignRecord, protocol: Any) -> None:
    """Every corpus copy against its record (the one corpus, or each dataset), and, K6, the combined record
    against the datasets'."""
    recorded = campaign.corpus
    sources = campaign.sources()
    if [name for name, _ in sources] != [s.name for s in protocol.sources()]:
        audit.diff("campaign.json: the datasets differ from the locked protocol's")
    for name, record in sources:
        _check_copy(audit, corpus_copy(name), record, protocol)
    records = [record for name, record in sources if name is not None]
    if records and (recorded.fingerprint != combined_fingerprint([r.fingerprint for r in records]) or
                    recorded.order_hash != combined_order_hash([r.order_hash for r in records]) or
                    recorded.size != sum(r.size for r in records)):
        audit.diff("campaign.json: the combined corpus record does not match its datasets")
    try:
        manifest = CampaignFolder(audit.folder).manifest
    except IteraError as exc:
        audit.diff(f"{MANIFEST}: {exc}")
        return
    if manifest is not None:
        for key in ("fingerprint", "order_hash"):
            if manifest.corpus.get(key) != getattr(recorded, key):
                audit.diff(f"manifest.json: corpus {key} differs from campaign.json")


def _check_carried(audit: _Audit, campaign: CampaignRecord) -> None:
    """The model files the folder carries are the ones the campaign ran with (campaign.json ``model.files``);
    a file recorded as carried must be there; weights recorded by hash may be absent."""
    for name, record in sorted(campaign.model.files.items()):
        path = audit.folder / CARRY_DIR / name
        if not path.is_file():
            if record.get("carried"):
                audit.diff(f"{CARRY_DIR}/{name}: missing (campaign.json records it as carried)")
            continue
        if sha256_file(path) != record.get("sha256"):
            audit.diff(f"{CARRY_DIR}/{name}: sha256 differs from campaign.json (the model file was edited)")


def _check_schedule(audit: _Audit, campaign: CampaignRecord, protocol: Any) -> None:
    design, slots = schedule_slots(protocol)
    expected = {"design": design, "slots": [s.record() for s in slots]}
    if _normal(campaign.schedule) != _normal(expected):
        audit.diff("campaign.json: the schedule is not the one the locked protocol implies")
    if _normal(campaign.variants) != _normal([v.model_dump() for v in protocol.variants]):
        audit.diff("campaign.json: the variants differ from the locked protocol's")
    if _normal(campaign.series) != _normal([s.model_dump() for s in protocol.series]):
        audit.diff("campaign.json: the series differ from the locked protocol's")


def _inside(folder: Path, rel: Any) -> Path | None:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/") or "\\" in rel:
        return None
    return folder / rel


def _check_journal(audit: _Audit, campaign: CampaignRecord, protocol: Any, context: Any, reader: Any) -> None:
    folder = audit.folder
    if not (folder / JOURNAL_NAME).is_file():
        if any(is_prediction_name(p.name) for p in (folder / PREDICTIONS).glob("*")):
            audit.diff(f"{JOURNAL_NAME}: missing")
        else:
            audit.note(f"{JOURNAL_NAME}: absent: the campaign was prepared but no pass was attempted yet")
        return
    state = read_journal(folder / JOURNAL_NAME)
    for number in state.damaged_lines:
        audit.note(f"{JOURNAL_NAME} line {number}: unreadable (a write cut short by a kill); the event it held "
                   "is not counted")
    if state.campaign is None:
        audit.diff(f"{JOURNAL_NAME}: no campaign_started record")
    else:
        for key, recorded in (("protocol_sha256", campaign.protocol.sha256),
                              ("corpus_fingerprint", campaign.corpus.fingerprint)):
            if state.campaign.get(key) != recorded:
                audit.diff(f"{JOURNAL_NAME}: campaign_started {key} differs from campaign.json")
    slots = {(s["round"], s["position"]): (s["variant"], s.get("dataset")) for s in campaign.slots}
    referenced: set[str] = set()
    for pid in state.order:
        start = state.started[pid]
        if slots.get((start.get("round"), start.get("position"))) != (start.get("variant"), start.get("dataset")):
            audit.diff(f"{JOURNAL_NAME}: pass {pid} ({start.get('variant')}) is not a slot of the schedule")
        try:
            source = context.of_dataset(start.get("dataset"))  # K6: against its own dataset
            expected = source.expected
        except KeyError:
            audit.diff(f"{JOURNAL_NAME}: pass {pid} names dataset {start.get('dataset')!r}, not one of the campaign")
            continue
        fin = state.result(pid)
        if fin is None:
            continue
        rel = fin.output.file
        if rel is None:
            continue
        path = _inside(folder, rel)
        if path is None or not rel.startswith(f"{PREDICTIONS}/"):
            audit.diff(f"{JOURNAL_NAME}: pass {pid} names a prediction file outside predictions/: {rel!r}")
            continue
        referenced.add(rel)
        _check_queries_file(audit, folder, fin, pid, referenced)
        entry = reader.read(path, expected.ids)
        if entry is None:
            audit.diff(f"{rel}: missing (the journal records it for pass {pid})")
            continue
        if entry[0] != fin.output.sha256:
            audit.diff(f"{rel}: edited — sha256 differs from the journal's record for pass {pid}")
        disorder = order_problem(entry[1].ids, expected.ids)
        if disorder:
            audit.diff(f"{rel}: pass {pid}'s {disorder}; a prediction file lists its ids in its corpus copy's order")
        intrinsic = (state.evaluated.get(pid) or {}).get("intrinsic")
        if not isinstance(intrinsic, dict):
            # Killed between the end of the pass and its evaluation: its verdict is recomputed from the file
            # (below, in the table) and recorded when the campaign resumes.
            audit.note(f"{JOURNAL_NAME}: pass {pid} has no recorded evaluation yet (interrupted); its verdict "
                       "is recomputed from its stored file")
            continue
        own = reader.verdict(path, protocol, expected, context.routine, context.queries, source.references)
        recomputed = _normal(own.to_json() if own is not None else {})
        recorded = _normal(intrinsic)
        for key in INTRINSIC_KEYS:
            if key in recorded and recorded.get(key) != recomputed.get(key):
                audit.diff(f"{rel}: pass {pid}'s verdict field {key!r} recomputed as {recomputed.get(key)!r}, "
                           f"the journal recorded {recorded.get(key)!r}")
    pred_dir = folder / PREDICTIONS
    if pred_dir.is_dir():
        for path in sorted(p for p in pred_dir.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            if rel in referenced:
                continue
            stem = pass_of(path.name)
            if path.name.startswith(".tmp-"):
                audit.note(f"{rel}: temporary file of an interrupted write, not counted")
            elif stem in state.started and stem not in state.finished:
                how = "interrupted" if stem in state.interrupted else "aborted"
                audit.note(f"{rel}: written by {how} pass {stem}, not counted")
            else:
                audit.diff(f"{rel}: not written by any pass in the journal")


def order_problem(ids: Any, corpus_ids: Any) -> str | None:
    """Why a prediction file's ids (Arrow strings, file order) are not in the corpus copy's order, or None. Ids
    outside the corpus, missing or repeated next to each other are the verdict's matter (``ids_match``), not this."""
    if ids is corpus_ids or ids.equals(corpus_ids):
        return None
    positions = pc.fill_null(pc.index_in(ids, value_set=corpus_ids), -1).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(positions >= 0)
    known = positions[rows]
    back = np.flatnonzero(np.diff(known) < 0)
    if not len(back):
        return None
    i = int(back[0])
    row, before = int(rows[i + 1]), int(rows[i])
    return (f"ids are not in the corpus copy's order: row {row + 1} holds id {ids[row].as_py()!r} (corpus row "
            f"{int(known[i + 1]) + 1}) after id {ids[before].as_py()!r} (corpus row {int(known[i]) + 1}); "
            f"{len(back)} place(s) where the next row comes earlier in the corpus")


def _check_queries_file(audit: _Audit, folder: Path, fin: Any, pid: str, referenced: set[str]) -> None:
    """recall_at_k: the pass's query vector file has the sha256 the journal recorded for it."""
    rel = fin.extra.get("queries_file")
    if not rel:
        return
    path = _inside(folder, rel)
    if path is None or not rel.startswith(f"{PREDICTIONS}/"):
        audit.diff(f"{JOURNAL_NAME}: pass {pid} names a query vector file outside predictions/: {rel!r}")
        return
    referenced.add(rel)
    if not path.is_file():
        audit.diff(f"{rel}: missing (the journal records it for pass {pid})")
    elif sha256_file(path) != fin.extra.get("queries_sha256"):
        audit.diff(f"{rel}: edited — sha256 differs from the journal's record for pass {pid}")


def _check_table(audit: _Audit, context: Any, reader: Any) -> None:
    rows = build_rows(audit.folder, reader, context)
    audit.report.passes = len(rows)
    audit.report.accepted = sum(1 for r in rows if r.get("corpus_accepted") is True)
    audit.report.verdicts = [PassVerdict(r["pass_id"], r["variant"], r.get("status"), bool(r.get("corpus_accepted")),
                                         r.get("prediction_file"), r["dataset"]) for r in rows]
    for r in rows:
        if r["dataset"] is not None:  # K6: the per-dataset verdicts, recomputed
            counts = audit.report.datasets.setdefault(str(r["dataset"]), {"passes": 0, "accepted": 0})
            counts["passes"] += 1
            counts["accepted"] += r.get("corpus_accepted") is True
    fresh = render_csv(rows, reader.kind.table_columns)
    path = audit.folder / TABLE
    if not path.is_file():
        audit.diff(f"{TABLE}: missing")
        return
    stored_bytes = path.read_bytes()
    if stored_bytes == fresh.encode("utf-8"):
        return
    try:
        stored = list(csv.reader(io.StringIO(stored_bytes.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as exc:
        audit.diff(f"{TABLE}: unreadable ({exc})")
        return
    recomputed = list(csv.reader(io.StringIO(fresh, newline="")))
    before = len(audit.report.differences)
    header, fresh_header = (stored[0] if stored else []), recomputed[0]
    if header != fresh_header:
        audit.diff(f"{TABLE}: header differs from the raw-table columns (stored {len(header)} columns, "
                   f"expected {len(COLUMNS)}: {', '.join(sorted(set(header) ^ set(fresh_header))[:6]) or 'order'})")
    index = {name: i for i, name in enumerate(header)}
    for n, fresh_row in enumerate(recomputed[1:], start=1):
        pid = fresh_row[0]
        pred = rows[n - 1].get("prediction_file")
        where = f"{TABLE} row {n} (pass {pid}" + (f", {pred}" if pred else "") + ")"
        if n >= len(stored):
            audit.diff(f"{where}: missing from the stored table")
            continue
        stored_row = stored[n]
        for c, name in enumerate(fresh_header):
            value = stored_row[index[name]] if name in index and index[name] < len(stored_row) else None
            if value != fresh_row[c]:
                audit.diff(f"{where}: column {name!r} stored {_short(value)}, recomputed {_short(fresh_row[c])} "
                           "from the stored files")
        if len(stored_row) != len(header):
            audit.diff(f"{where}: has {len(stored_row)} cells for {len(header)} columns")
    for n in range(len(recomputed), len(stored)):
        audit.diff(f"{TABLE} row {n}: not produced by any pass in the journal "
                   f"(first cell {_short(stored[n][0] if stored[n] else '')})")
    if len(audit.report.differences) == before:
        audit.diff(f"{TABLE}: same cells but different bytes than the regenerated table (quoting or line endings)")


def _short(value: str | None, limit: int = 40) -> str:
    if value is None:
        return "(absent)"
    return repr(value if len(value) <= limit else value[:limit] + "…")


__all__ = ["AUDIT_SCHEMA", "AuditReport", "PassVerdict", "SEAL_FILES", "audit_campaign"]
