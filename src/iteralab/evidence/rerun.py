"""Rerun (D3, C5, Q3): repeat the experimental question of an earlier campaign exactly, then compare.

The rerun uses the earlier campaign's own evidence: the locked ``inputs/protocol.toml`` with its lock file
(byte for byte, so the lock still holds), its ``inputs/corpus.csv`` (whose fingerprint must equal the one in
``campaign.json``), and therefore the same variants, series and rotated schedule. Only the machine, the
software stack or the model files behind the protocol's model reference may differ — which is the point.

Paths in a protocol resolve relative to the protocol file, so the protocol copy is placed in a staging folder
next to the new campaign (``.<NEW>.rerun-inputs``), nested as deep as its ``..`` references need:

* the corpus (and the tuning data, when the protocol declares it) is written where ``corpus.path`` points, in
  the declared format and column names, rebuilt from the earlier ``inputs/corpus.csv``; the new campaign's
  ``inputs/corpus.csv`` must come out byte-identical, or the rerun stops before any pass;
* a relative model or head path becomes links to the files the bundle carries under ``inputs/model`` (the
  locked files themselves) when it holds all of them — the head, config and tokenizer always travel, the
  weights when packed with ``--include-weights`` —, else a link to the path recorded in the earlier
  ``campaign.json``; ``package:NAME/...`` references and absolute paths resolve on this machine as written,
  and where they find nothing, the carried files stand in for them (``plan.protocol.stand_ins``: the locked
  text is unchanged) when the bundle holds all of them. Each use of the carried copy is said in one line and
  recorded in ``comparison.json`` (``rerun.model_inputs``). What cannot be found is named file by file, with
  its sha256.

The earlier folder must verify first (``audit.py``): a comparison against tampered evidence means nothing.
After the runner finishes, ``comparison.md`` and ``comparison.json`` are written in the new folder: the
manifest fields that changed, and per variant whether its verdict is the same, whether its outputs are
identical / within the declared bound / only acceptable, and how its median pass time moved.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import posixpath
import shutil
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.campaign.campaignrecord import CampaignRecord
from iteralab.campaign.folder import (
    CAMPAIGN, LOCK, PROTOCOL, TUNING, CampaignFolder, RawRow, corpus_copy)
from iteralab.campaign.manifest import manifest_differences
from iteralab.campaign.runner import prepare
from iteralab.campaign.kinds.verdictpart import FileComparison
from iteralab.campaign.verdict.judge import compare_predictions
from iteralab.evidence.comparison import CarriedInput, carried_line, write_comparison
from iteralab.errors import ProtocolError, RunError
from iteralab.evidence.run import run_campaign
from iteralab.evidence.table import build_rows
from iteralab.evidence.verify import audit_campaign
from iteralab.lock.carry import CARRY_DIR, carried_path, describe_missing
from iteralab.lock.modules import carried_modules, module_spec
from iteralab.lock.usercode import QUERIES
from iteralab.plan.corpus import detect_format
from iteralab.plan.lockfile import open_locked
from iteralab.plan.paths import PACKAGE_PREFIX, resolve, stand_ins
from iteralab.plan.protocol import Protocol, load_protocol
from iteralab.plan.scan import scan_corpus
from iteralab.plan.prompting import copy_column
from iteralab.plan.task import prompt_columns, reference_column

COMPARISON_SCHEMA = 1
#: Output classes of a pair of matching passes, from the closest to the farthest.
OUTCOMES = ("identical", "within bound", "acceptable only", "not acceptable", "not comparable")
#: Manifest keys that always differ between two campaigns and say nothing about the stack: where the protocol
#: copy and the model were read (the model's identity is its files' sha256, ``file_hashes``).
BOOKKEEPING = ("extra.protocol.source", "extra.model_spec.path", "extra.model_spec.head", "workload.model_path")


@dataclass(frozen=True)
class Staged:
    """What :func:`stage_inputs` wrote: the protocol copy, the stand-ins for model references this machine
    lacks (reference as written -> the carried files' folder or file), and one record per model input taken
    from the files the bundle carries."""

    protocol: Path
    stand_ins: dict[str, Path] = field(default_factory=dict)
    model_inputs: list[CarriedInput] = field(default_factory=list)
    #: a callable's module this machine lacks -> the copy the bundle carries (``lock.usercode.carried_modules``)
    modules: dict[str, Path] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One line per model input taken from the bundle's carried copy."""
        return [carried_line(record) for record in self.model_inputs]


def staging_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.rerun-inputs"


def _is_relative(ref: str | None) -> bool:
    return bool(ref) and not ref.startswith(PACKAGE_PREFIX) and not Path(ref).expanduser().is_absolute()


def _ups(ref: str) -> int:
    parts = posixpath.normpath(Path(ref).as_posix()).split("/")
    return next((i for i, p in enumerate(parts) if p != ".."), len(parts))


# --------------------------------------------------------------------------------------------- staging


def _write_declared_corpus(source_csv: Path, target: Path, protocol: Protocol, id_origin: str) -> None:
    """Rebuild the corpus file the protocol declares (format, compression, column names) from the bundle copy."""

    spec = protocol.corpus
    with open(source_csv, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    columns: list[tuple[str, str]] = []
    if id_origin == "data":
        columns.append((spec.id_column, "id"))
    columns += [(spec.text_column, "text"), (spec.label_column, "label")]
    if spec.stratum_column and any(r.get("stratum") for r in rows):
        columns.append((spec.stratum_column, "stratum"))
    if reference := reference_column(protocol):  # the reference answers the copy kept
        columns.append((reference, "reference"))
    columns += [(name, copy_column(name)) for name in prompt_columns(protocol)]  # the cells a prompt names
    records = [{name: r.get(key) or "" for name, key in columns} for r in rows]
    fmt, compression = detect_format(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(pa.table({name: [r[name] for r in records] for name, _ in columns}), target)
        return
    if fmt == "csv":
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([name for name, _ in columns])
        writer.writerows([[r[name] for name, _ in columns] for r in records])
        data = buffer.getvalue().encode("utf-8")
    else:
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(compression or "")
    if opener is None:
        target.write_bytes(data)
    else:
        with opener(target, "wb") as fh:
            fh.write(data)


def _place(target: Path, staged_protocol: Path, what: str) -> Path:
    target = Path(os.path.normpath(target))
    if target == staged_protocol.parent or target in staged_protocol.parents or target.exists():
        raise RunError(f"{what}: its path would overlap another staged input ({target})",
                       hint="give the model and corpus paths in the protocol distinct places")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def stage_inputs(source: Path, campaign: CampaignRecord, protocol: Protocol, staging: Path,
                 tuning: Path | None = None) -> Staged:
    """Write the protocol copy, its lock and the inputs it references under ``staging``."""
    spec, model = protocol.corpus, protocol.model
    refs = [r for r in (spec.tuning_path, model.path, model.head, protocol.metric.queries,
                        *(s.path for s in protocol.sources())) if _is_relative(r)]
    depth = max((_ups(r) for r in refs), default=0)
    if staging.exists():
        shutil.rmtree(staging)
    proto_dir = staging.joinpath(*(["p"] * depth))
    proto_dir.mkdir(parents=True)
    staged = proto_dir / Path(PROTOCOL).name
    shutil.copyfile(source / PROTOCOL, staged)
    shutil.copyfile(source / LOCK, proto_dir / Path(LOCK).name)
    records = dict(campaign.sources())
    for corpus in protocol.sources():  # each corpus (K6: each dataset) rebuilt from its own copy
        if _is_relative(corpus.path):
            key = "corpus.path" if corpus.name is None else f"datasets {corpus.name!r} path"
            _write_declared_corpus(source / corpus_copy(corpus.name), _place(resolve(staged, corpus.path), staged, key),
                                   protocol, getattr(records.get(corpus.name), "id_origin", None) or "data")
    if _is_relative(protocol.metric.queries):  # recall_at_k: the locked queries, from the earlier folder's copy
        shutil.copyfile(source / QUERIES, _place(resolve(staged, protocol.metric.queries), staged, "metric.queries"))
    copied = source / TUNING
    if spec.tuning_path and tuning is None and copied.is_file() and _is_relative(spec.tuning_path):
        _write_declared_corpus(copied, _place(resolve(staged, spec.tuning_path), staged, "corpus.tuning_path"),
                               protocol, (campaign.tuning or {}).get("id_origin", "data"))
    elif spec.tuning_path:
        original = tuning or (copied if copied.is_file() else resolve(Path(campaign.protocol.source or ""),
                                                                      spec.tuning_path))
        if original is None or not Path(original).is_file():
            raise RunError(f"corpus.tuning_path: the tuning data {spec.tuning_path!r} is not part of the bundle and "
                           f"is not found at {original}",
                           hint="give the tuning file with --tuning (its disjointness is checked again)")
        if _is_relative(spec.tuning_path):
            shutil.copyfile(original, _place(resolve(staged, spec.tuning_path), staged, "corpus.tuning_path"))
    result = Staged(staged)
    for key in ("path", "head"):
        ref = getattr(model, key)
        if ref:
            record = _stage_model_input(source, campaign, key, ref, staged, staging)
            if record is not None:
                result.model_inputs.append(record)
                if not _is_relative(ref):
                    result.stand_ins[ref] = Path(str(record.staged))
    if model.callable:
        record = _stage_callable(source, campaign, model.callable, result.modules)
        if record is not None:
            result.model_inputs.append(record)
    return result


def _stage_callable(source: Path, campaign: CampaignRecord, ref: str,
                    modules: dict[str, Path]) -> CarriedInput | None:
    """A callable whose module this machine cannot find is imported from the module file the bundle carries
    (checked against its recorded sha256), as ``verify`` imports a carried metric routine. Returns the record of
    that use; None when the module is found here (it is used as written)."""
    module = ref.partition(":")[0]
    if module_spec(module) is not None:
        return None
    files = campaign.model.files
    wanted = {n: r for n, r in files.items() if n.startswith("callable/")}
    carried = [p for p in (carried_path(source, n, r) for n, r in wanted.items()) if p is not None]
    if not carried:
        shown = "; ".join(describe_missing(n, r) for n, r in wanted.items())
        raise RunError(f"model.callable: module {module!r} is not on this machine, and {source} does not carry its "
                       f"file" + (f" with the recorded hash ({shown})" if shown else ""),
                       hint="install the module's package or put its folder on PYTHONPATH, or rerun from the "
                            "bundle the campaign was packed into")
    modules[module] = carried[0].resolve()
    return CarriedInput("model.callable", ref, "is not on this machine", f"{CARRY_DIR}/callable", 1,
                        str(carried[0]))


def _model_input_files(campaign: CampaignRecord, key: str) -> dict[str, dict[str, Any]]:
    """The recorded files behind ``model.path`` (the folder's files) or ``model.head`` (the head file)."""
    files = campaign.model.files
    if key == "head":
        return {n: r for n, r in files.items() if n.startswith("head/")}
    return {n: r for n, r in files.items() if not n.startswith(("head/", "callable/"))}


def _lacking(source: Path, wanted: dict[str, dict[str, Any]]) -> list[str]:
    return [name for name, record in wanted.items() if carried_path(source, name, record) is None]


def _missing_text(wanted: dict[str, dict[str, Any]], lacking: list[str]) -> str:
    if not wanted or not lacking:
        return ""
    shown = "; ".join(describe_missing(n, wanted[n]) for n in lacking[:3]) + (" …" if len(lacking) > 3 else "")
    return f"; the bundle carries {len(wanted) - len(lacking)} of its {len(wanted)} files and lacks {shown}"


def _link_carried(source: Path, key: str, wanted: dict[str, dict[str, Any]], target: Path) -> None:
    """``target`` becomes what ``model.<key>`` names, made of links to the carried files: the head file itself,
    or a folder holding each recorded file of the model folder under its own name."""

    carried = source.resolve() / CARRY_DIR
    if key == "head":
        os.symlink(carried / next(iter(wanted)), target)
        return
    target.mkdir()
    for name in wanted:
        link = target / name.removeprefix("tokenizer/")
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(carried / name, link)


def _stage_model_input(source: Path, campaign: CampaignRecord, key: str, ref: str, staged: Path,
                       staging: Path) -> CarriedInput | None:
    """Make ``model.<key>`` resolve from the staged protocol: the carried copy (the locked files themselves)
    when the bundle holds all of them, else the path the earlier campaign recorded, else refuse naming each
    missing file and its hash. A ``package:`` or absolute reference resolves on this machine as written; where
    it finds nothing, the carried copy stands in for it. Returns the record of a use of the carried copy."""

    wanted = _model_input_files(campaign, key)
    lacking = _lacking(source, wanted)
    complete = bool(wanted) and not lacking
    hint = ("copy the files with those hashes to this machine, or pack the earlier campaign with "
            "'iteralab bundle pack --include-weights'")
    if not _is_relative(ref):
        try:
            found = resolve(staged, ref)
        except ProtocolError:  # a package: reference whose package is not installed here
            found = None
        if found is not None and found.exists():
            return None
        if not complete:
            where = found if found is not None else "its package is not installed"
            raise RunError(f"model.{key}: {ref!r} is not found on this machine ({where})"
                           + _missing_text(wanted, lacking), hint=hint)
        name = next(iter(wanted)).removeprefix("head/") if key == "head" else "model"
        target = _place(staging / f".carried-{key}" / name, staged, f"model.{key}")
        _link_carried(source, key, wanted, target)
        return CarriedInput(f"model.{key}", ref, "is not on this machine", CARRY_DIR, len(wanted), str(target))
    target = _place(resolve(staged, ref), staged, f"model.{key}")
    if complete:
        _link_carried(source, key, wanted, target)
        return CarriedInput(f"model.{key}", ref, "is relative to the original protocol file", CARRY_DIR, len(wanted),
                            str(target))
    recorded = getattr(campaign.model, key)
    if recorded and Path(recorded).exists():
        os.symlink(Path(recorded).resolve(), target)
        return None
    raise RunError(f"model.{key}: {ref!r} is relative to the original protocol file, and the model it named "
                   f"({recorded}) is not on this machine" + _missing_text(wanted, lacking), hint=hint)


def _same_question(old_record: CampaignRecord, new_record: CampaignRecord) -> list[str]:
    old, new = old_record.to_json(), new_record.to_json()
    checks = [("protocol sha256", old["protocol"]["sha256"], new["protocol"]["sha256"])]
    for key in ("fingerprint", "order_hash", "size", "file_sha256"):
        checks.append((f"corpus {key}", old["corpus"].get(key), new["corpus"].get(key)))
    for key in ("schedule", "variants", "series", "datasets", "routine", "queries"):
        checks.append((key, old.get(key), new.get(key)))
    return [name for name, a, b in checks if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True)]


# ----------------------------------------------------------------------------------------------- rerun


def rerun(source: str | os.PathLike[str], out: str | os.PathLike[str], *, isolation: str | None = None,
          progress: Any = None, tuning: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Repeat the earlier campaign ``source`` into the new folder ``out`` and write the comparison there."""

    source, out = Path(source), Path(out)
    CampaignFolder.open(source)
    src, dst = source.resolve(), out.resolve()
    if dst == src or src in dst.parents or dst in src.parents:
        raise RunError(f"{out}: the rerun folder must be outside the earlier campaign {source}",
                       hint="choose a new --out folder")
    report = audit_campaign(source, require_seal=False)
    if not report.ok:
        raise RunError(f"{source}: the earlier campaign does not verify ({report.differences[0]}"
                       + (f"; and {len(report.differences) - 1} more" if len(report.differences) > 1 else "") + ")",
                       hint=f"run: iteralab verify {source}")
    campaign = CampaignFolder(source).campaign
    protocol = load_protocol(source / PROTOCOL)
    for name, record in campaign.sources():
        relative = corpus_copy(name)
        if scan_corpus(source / relative, classes=list(protocol.corpus.classes),
                       require_labels=bool(protocol.corpus.classes)).fingerprint != record.fingerprint:
            raise RunError(f"{source}/{relative}: fingerprint differs from campaign.json")
    if out.exists() and any(out.iterdir()):
        if not (out / CAMPAIGN).is_file() or CampaignFolder(out).campaign.protocol.sha256 != campaign.protocol.sha256:
            raise RunError(f"{out}: exists and is not an earlier rerun of this campaign",
                           hint="choose a new --out folder (an interrupted rerun into it would be resumed)")
    staging = staging_folder(out)
    try:  # the staged inputs never outlive the command, whether it succeeds, fails or is stopped
        staged = stage_inputs(source, campaign, protocol, staging, Path(tuning) if tuning else None)
        if progress is not None:
            for line in staged.lines():
                progress("note", {"text": line})
        with stand_ins(staged.protocol, staged.stand_ins), carried_modules(staged.modules):
            locked = open_locked(staged.protocol)  # read once, its model references resolved to the stand-ins
            new_campaign = prepare(locked, out, rerun=True, earlier=source)
            differing = _same_question(campaign, new_campaign)
            if differing:
                raise RunError(f"{out}: the rerun would not repeat the same question: {', '.join(differing)} differ "
                               "from the earlier campaign", hint="nothing was run; see the two campaign.json files")
            summary = run_campaign(locked, out, progress=progress, isolation=isolation, rerun=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    comparison = compare_campaigns(source, out)
    comparison["source"]["seal_digest"] = report.seal_digest
    comparison["rerun"]["model_inputs"] = [r.to_json() for r in staged.model_inputs]
    paths = write_comparison(out, comparison)
    return {**summary, "comparison": comparison, "comparison_files": [str(p) for p in paths]}


# ------------------------------------------------------------------------------------------ comparison


def _final_attempts(rows: list[RawRow]) -> dict[tuple[int | None, int | None], RawRow]:
    """Per scheduled slot, the last attempt that finished (success or recorded failure)."""
    slots: dict[tuple[int | None, int | None], RawRow] = {}
    for row in rows:  # (round, position) is unique across datasets too: one slot per (variant, dataset, round)
        if row.status not in ("aborted", "interrupted"):
            slots[(row.round, row.position)] = row
    return slots


def _verdict(rows: list[RawRow]) -> str:
    if not rows:
        return "no finished pass"
    accepted = sum(r.accepted for r in rows)
    return "accepted" if accepted == len(rows) else "not accepted" if accepted == 0 else "mixed"


def _median_time(rows: list[RawRow]) -> float | None:
    """Median measured pass; with several datasets (K6), median over rounds of the job time (the sum of a
    round's dataset passes, counted only when every dataset's pass of that round was), never pooled passes."""
    good = [r for r in rows if r.ok and not r.excluded and r.pass_s]
    if any(r.dataset for r in rows):
        names = {r.dataset for r in rows}
        rounds: dict[tuple[Any, Any], dict[Any, float]] = {}
        for r in good:
            rounds.setdefault((r.round, r.seed), {})[r.dataset] = r.pass_s
        times = [sum(t.values()) for t in rounds.values() if set(t) == names]
    else:
        times = [r.pass_s for r in good]
    return statistics.median(times) if times else None


def _outcome(pair: FileComparison | None, new_accepted: bool, bound: float | None) -> str:
    if pair is None or not pair.common_ids:
        return "not comparable"
    if pair.identical:
        return "identical"
    if bound is not None and pair.same_ids and pair.max_abs_prob_diff is not None \
            and pair.max_abs_prob_diff <= bound:
        return "within bound"
    return "acceptable only" if new_accepted else "not acceptable"


def compare_campaigns(old: str | os.PathLike[str], new: str | os.PathLike[str]) -> dict[str, Any]:
    """Compare two campaigns of the same locked protocol from their stored files (rows are recomputed)."""

    old, new = Path(old), Path(new)
    protocol = load_protocol(new / PROTOCOL)
    old_campaign, new_campaign = CampaignFolder(old).campaign, CampaignFolder(new).campaign
    manifests = [CampaignFolder(d).manifest for d in (old, new)]  # None: absent
    if None in manifests:
        changes = [{"key": "manifest.json", "old": "present" if manifests[0] else "absent",
                    "new": "present" if manifests[1] else "absent", "bookkeeping": False}]
    else:
        changes = [{"key": k, "old": a, "new": b, "bookkeeping": k in BOOKKEEPING}
                   for k, a, b in manifest_differences(manifests[0].to_json(), manifests[1].to_json())]
    old_rows, new_rows = [RawRow.of(r) for r in build_rows(old)], [RawRow.of(r) for r in build_rows(new)]
    old_slots, new_slots = _final_attempts(old_rows), _final_attempts(new_rows)
    target = protocol.reproduction.target
    bound = protocol.reproduction.bound
    variants = {variant.name: _variant_comparison(variant.name, old, new, old_slots, new_slots, protocol,
                                                  [d.name for d in new_campaign.datasets])
                for variant in protocol.variants}
    stack_changed = [c["key"] for c in changes if not c["bookkeeping"]]
    return {
        "schema_version": COMPARISON_SCHEMA,
        "source": {"folder": str(old), "protocol_sha256": old_campaign.protocol.sha256, "seal_digest": None},
        "rerun": {"folder": str(new), "protocol_sha256": new_campaign.protocol.sha256},
        "protocol": {"name": protocol.name, "version": protocol.version, "reproduction_target": target,
                     "bound": bound, "kind": protocol.task.kind},
        "corpus_fingerprint": new_campaign.corpus.fingerprint,
        "manifest_changes": changes,
        "stack_changed": bool(stack_changed),
        "same_verdicts": all(v.verdicts.same_verdict and all(d.same_verdict for d in v.datasets.values())
                             for v in variants.values()),
        "variants": {name: v.to_json() for name, v in variants.items()},
    }


def _variant_comparison(variant: str, old: Path, new: Path, old_slots: dict[tuple[int | None, int | None], RawRow],
                        new_slots: dict[tuple[int | None, int | None], RawRow], protocol: Protocol,
                        datasets: list[str]) -> VariantComparison:
    """One variant's passes in the two campaigns: each pair of matching passes' outputs compared, the verdicts."""
    o_rows = [r for k, r in sorted(old_slots.items()) if r.variant == variant]
    n_rows = [r for k, r in sorted(new_slots.items()) if r.variant == variant]
    pairs = []
    for key, n_row in sorted(new_slots.items()):
        if n_row.variant != variant:
            continue
        o_row = old_slots.get(key)
        pair = None
        if o_row and o_row.prediction_file and n_row.prediction_file \
                and (old / o_row.prediction_file).is_file() and (new / n_row.prediction_file).is_file():
            pair = compare_predictions(old / o_row.prediction_file, new / n_row.prediction_file, protocol)
        pairs.append(PassPair(key[0], key[1], o_row.pass_id if o_row else None, n_row.pass_id,
                              _outcome(pair, n_row.accepted, protocol.reproduction.bound),
                              pair))
    worst = max((OUTCOMES.index(p.outcome) for p in pairs), default=OUTCOMES.index("not comparable"))
    found = [p.comparison for p in pairs if p.comparison is not None]
    agreements = [c.label_agreement for c in found if c.label_agreement is not None]
    diffs = [c.max_abs_prob_diff for c in found if c.max_abs_prob_diff is not None]
    cosines = [c.lowest_cosine() for c in found if c.lowest_cosine() is not None]  # an embedding job's
    verdicts = VerdictChange.of(o_rows, n_rows)
    outputs = OUTCOMES[worst]
    met = {"identical": outputs == "identical",
           "bounded": outputs in ("identical", "within bound"),
           "acceptable": verdicts.new_verdict == "accepted"}[protocol.reproduction.target]
    return VariantComparison(
        verdicts, outputs, met, min(agreements) if agreements else None, max(diffs) if diffs else None,
        min(cosines) if cosines else None, tuple(pairs),
        {name: VerdictChange.of([r for r in o_rows if r.dataset == name],
                                [r for r in n_rows if r.dataset == name]) for name in datasets})


@dataclass(frozen=True)
class VerdictChange:
    """The verdicts of one variant's passes (or of one dataset's, K6) in the earlier campaign and in the rerun:
    each campaign's verdict, accepted and finished passes, median measured pass time."""

    old_verdict: str
    new_verdict: str
    old_accepted: int
    old_passes: int
    new_accepted: int
    new_passes: int
    old_median_pass_s: float | None
    new_median_pass_s: float | None

    @classmethod
    def of(cls, o_rows: list[RawRow], n_rows: list[RawRow]) -> VerdictChange:
        return cls(_verdict(o_rows), _verdict(n_rows), sum(r.accepted for r in o_rows),
                   len(o_rows), sum(r.accepted for r in n_rows), len(n_rows),
                   _median_time(o_rows), _median_time(n_rows))

    @property
    def same_verdict(self) -> bool:
        return self.old_verdict == self.new_verdict

    def to_json(self) -> dict[str, str | int | float | bool | None]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "same_verdict": self.same_verdict}


@dataclass(frozen=True)
class PassPair:
    """Two matching passes (same round and position) and how their outputs compare (None: not comparable)."""

    round: int
    position: int
    old_pass: str | None
    new_pass: str
    outcome: str
    comparison: FileComparison | None

    def to_json(self) -> dict[str, str | int | float | bool | None]:
        return {"round": self.round, "position": self.position, "old_pass": self.old_pass,
                "new_pass": self.new_pass, "outcome": self.outcome,
                **(self.comparison.to_json() if self.comparison is not None else {})}


@dataclass(frozen=True)
class VariantComparison:
    """One variant in the rerun against the earlier campaign: its verdicts, the worst outcome of its pairs of
    passes, whether the declared reproduction target is met, the extremes of its pairs' comparisons, its pairs and
    (K6) each dataset's verdicts."""

    verdicts: VerdictChange
    outputs: str
    reproduction_target_met: bool
    min_label_agreement: float | None
    max_abs_prob_diff: float | None
    min_cosine: float | None
    pairs: tuple[PassPair, ...]
    datasets: dict[str, VerdictChange]

    @property
    def median_ratio(self) -> float | None:
        old, new = self.verdicts.old_median_pass_s, self.verdicts.new_median_pass_s
        return new / old if old and new else None

    def to_json(self) -> dict[str, Any]:
        out = {**self.verdicts.to_json(), "outputs": self.outputs,
               "reproduction_target_met": self.reproduction_target_met,
               "min_label_agreement": self.min_label_agreement, "max_abs_prob_diff": self.max_abs_prob_diff,
               "min_cosine": self.min_cosine, "median_ratio": self.median_ratio,
               "pairs": [p.to_json() for p in self.pairs]}
        if self.datasets:  # K6: the per-dataset verdicts carried over
            out["datasets"] = {name: d.to_json() for name, d in self.datasets.items()}
        return out


__all__ = ["COMPARISON_SCHEMA", "OUTCOMES", "Staged", "compare_campaigns", "compare_predictions", "rerun",
           "stage_inputs"]
