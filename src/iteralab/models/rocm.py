"""ROCm compatibility-matrix lookup (requirement C4).

Says whether AMD's ROCm compatibility matrix, as shipped in ``rocm_snapshots/``, *lists* an OS, a GPU architecture
or a framework version for a ROCm release: exactly ``listed``, ``not listed`` or ``no snapshot entry``, naming the
snapshot file and its date; never "supported". Layouts read:
- historical CSV (``compatibility-matrix-historical-6.0*.csv``, 13, 17 or 22/23 columns): transposed table under
  ``ROCm Version,<versions>``; a merged header ``7.0.1/7.0.0`` stands for both releases; a blank first cell
  continues the label above; upper-case rows without values (``FRAMEWORK SUPPORT``) open a section; rows may be
  shorter than the header, and a missing cell is "no snapshot entry".
- RST page (``compatibility-matrix@*.rst``): the inline ``csv-table`` with ``:header:`` (the ``:file:`` one is the
  historical CSV); ``|br|`` in a cell is a line break, stored as a newline; ``.. [#name]`` footnotes are kept.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iteralab.errors import IteraError

LISTED, NOT_LISTED, NO_ENTRY = "listed", "not listed", "no snapshot entry"
SNAPSHOT_DIR = Path(__file__).with_name("rocm_snapshots")


class RocmCheckError(IteraError):
    """A ROCm compatibility question cannot be asked as given (bad version, unknown framework, …)."""
    exit_code = 2


@dataclass(frozen=True)
class SnapshotInfo:
    """One shipped snapshot: file name, date, ROCm/ROCm commit (in full in ``rocm_snapshots/SNAPSHOTS.md``)."""
    file: str
    date: str
    commit: str


# Newest first. Same date: the historical CSV before the RST page of the same commit; its columns agree with
# the page's and it keeps the framework rows (verl, Ray, …) the page drops.
SNAPSHOTS: tuple[SnapshotInfo, ...] = (
    SnapshotInfo("compatibility-matrix-historical-6.0@7.2.0.csv", "2026-01-21", "decd7e712cb2"),
    SnapshotInfo("compatibility-matrix@7.2.0.rst", "2026-01-21", "decd7e712cb2"),
    SnapshotInfo("compatibility-matrix-historical-6.0@7.1.1.csv", "2026-01-08", "773f5de407e4"),
    SnapshotInfo("compatibility-matrix-historical-6.0@6.4.2.csv", "2025-08-01", "3837fe8440af"),
    SnapshotInfo("compatibility-matrix-historical-6.0.csv", "2025-03-21", "e396b4898f45"),
)

_FOOTNOTE = re.compile(r"\[#[^\]\s]+\]_")
_ROLE = re.compile(r":(?:doc|ref):`([^`<]*?)\s*(?:<[^>]*>)?`")
_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_")
_ANCHOR = re.compile(r"\.\. _[^:]+:")
_FOOTNOTE_DEF = re.compile(r"^\s*\.\. \[#([^\]\s]+)\]\s+(.*)$")
_TOP_KINDS = (("operating systems", "os"), ("architecture", "architecture"), ("gpu / llvm target", "gpu"))
_SECTION_KINDS = {"FRAMEWORK SUPPORT": "framework", "KMD & USER SPACE": "driver", "DRIVER & USER SPACE": "driver"}


@dataclass(frozen=True)
class Row:
    """One table row: section, canonical kind, label and the cell text per ROCm version."""
    section: str  # as published ("FRAMEWORK SUPPORT", "DRIVER & USER SPACE"); rows above the first title: label
    kind: str  # "os", "architecture", "gpu", "framework", "driver", else the section title in lower case
    label: str  # RST markup removed: "PyTorch", "Operating systems & kernels"
    label_footnotes: tuple[str, ...]
    cells: Mapping[str, str]  # ROCm version -> cell text (footnote markers kept, |br| -> newline)


@dataclass(frozen=True)
class Snapshot:
    """A parsed snapshot: published headers, the ROCm versions they expand to, and rows."""
    file: str
    date: str
    layout: str  # "csv" or "rst"
    columns: tuple[str, ...]  # headers as published, e.g. "7.0.1/7.0.0"
    versions: tuple[str, ...]  # headers expanded, e.g. "7.0.1", "7.0.0"
    rows: tuple[Row, ...]
    footnote_text: Mapping[str, str] = field(default_factory=dict)  # "[#name]_" -> definition

    def header_for(self, version: str) -> str | None:
        """The published header whose column holds ``version``."""
        return next((c for c in self.columns if version in _expand(c)), None)

    def rows_of(self, kind: str | None = None, label: str | None = None) -> tuple[Row, ...]:
        """Rows of one kind and/or one label (exact)."""
        return tuple(r for r in self.rows if kind in (None, r.kind) and label in (None, r.label))


def _expand(header: str) -> list[str]:
    return [v.strip() for v in header.split("/") if v.strip()]


def _label(raw: str) -> tuple[str, tuple[str, ...]]:
    text = _LINK.sub(r"\1", _ROLE.sub(r"\1", _FOOTNOTE.sub("", raw)))
    return " ".join(text.split()), tuple(_FOOTNOTE.findall(raw))


def cell_items(cell: str) -> list[str]:
    """The items a cell lists (``,`` and ``|br|``/newline separate them), footnote markers removed."""
    parts = (_FOOTNOTE.sub("", p).strip() for p in re.split(r"[,\n]|\|br\|", cell))
    return [p for p in parts if p]


def _build(file: str, date: str, layout: str, header: list[str], records: list[list[str]]) -> Snapshot:
    columns = tuple(h.strip() for h in header[1:])
    rows: list[Row] = []
    section = kind = label = ""
    label_notes: tuple[str, ...] = ()
    in_top = True
    for record in records:
        name, notes = _label(record[0] if record else "")
        cells = [c.strip() for c in record[1:]]
        if not any(c and not _ANCHOR.fullmatch(c) for c in cells):
            if name:  # a section title such as "FRAMEWORK SUPPORT"
                section, kind, label, in_top = name, _SECTION_KINDS.get(name, name.lower()), "", False
            continue
        if name:
            label, label_notes = name, notes
            top = next((k for p, k in _TOP_KINDS if name.lower().startswith(p)), None) if in_top else None
            section, kind = (name, top) if top else (section, kind)
        if label:
            pairs = zip(columns, cells, strict=False)  # a short row leaves the last columns without a cell
            values = {v: re.sub(r"\s*\|br\|\s*", "\n", text) for col, text in pairs for v in _expand(col)}
            rows.append(Row(section, kind, label, label_notes, values))
    return Snapshot(file, date, layout, columns, tuple(v for c in columns for v in _expand(c)), tuple(rows))


def parse_csv(text: str, *, file: str, date: str) -> Snapshot:
    """Parse a historical compatibility-matrix CSV (any of its published layouts)."""
    records = list(csv.reader(io.StringIO(text)))
    if not records or not records[0] or records[0][0].strip() != "ROCm Version":
        raise RocmCheckError(f"{file}: first row is not 'ROCm Version,<versions>'", hint="ship the file unmodified")
    return _build(file, date, "csv", records[0], records[1:])


def parse_rst(text: str, *, file: str, date: str) -> Snapshot:
    """Parse the RST page: its inline ``csv-table`` (the one with ``:header:``) and footnote definitions."""
    lines = text.splitlines()
    notes = {f"[#{m.group(1)}]_": " ".join(m.group(2).split()) for m in map(_FOOTNOTE_DEF.match, lines) if m}
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)\.\. csv-table::", line)
        if not m:
            continue
        options: dict[str, str] = {}
        body: list[str] = []
        in_options = True
        for cur in lines[i + 1 :]:
            stripped = cur.strip()
            if stripped and len(cur) - len(cur.lstrip()) <= len(m.group(1)):
                break
            if not stripped:
                in_options = False
            elif in_options and stripped.startswith(":"):
                key, _, value = stripped[1:].partition(":")
                options[key] = value.strip()
            else:
                body.append(stripped)
        if "header" in options and "file" not in options and body:
            header = next(csv.reader([options["header"]], skipinitialspace=True))
            return dataclasses.replace(_build(file, date, "rst", header, list(csv.reader(body))), footnote_text=notes)
    raise RocmCheckError(f"{file}: no inline csv-table with a :header: option", hint="ship the file unmodified")


@functools.lru_cache(maxsize=1)
def load_snapshots() -> tuple[Snapshot, ...]:
    """Every shipped snapshot, newest first (order of ``SNAPSHOTS``)."""
    parsed: list[Snapshot] = []
    for info in SNAPSHOTS:
        path = SNAPSHOT_DIR / info.file
        if not path.is_file():
            raise RocmCheckError(f"ROCm snapshot {info.file} missing from {SNAPSHOT_DIR}", hint="reinstall iteralab")
        parse = parse_rst if info.file.endswith(".rst") else parse_csv
        parsed.append(parse(path.read_text(encoding="utf-8"), file=info.file, date=info.date))
    commit_of = {i.file: i.commit for i in SNAPSHOTS}
    shared: dict[str, dict[str, str]] = {}
    for snap in parsed:  # footnotes defined on the RST page also explain the CSV of the same commit
        shared.setdefault(commit_of[snap.file], {}).update(snap.footnote_text)
    return tuple(dataclasses.replace(s, footnote_text=shared[commit_of[s.file]]) for s in parsed)


def _parse_rocm(rocm: str) -> str:
    text = (rocm or "").strip()
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+~][\w.+~-]*)?", text)
    if not m:
        raise RocmCheckError(f"ROCm version {rocm!r} is not like 6.2.0", hint="give a release such as 6.2.0 or 6.2")
    if m.group(3) and int(m.group(3)) >= 1000:
        raise RocmCheckError(f"{rocm!r} looks like a HIP version, not a ROCm release",
                             hint=f"use rocm_from_hip({text!r}) or the release in /opt/rocm/.info/version")
    return f"{m.group(1)}.{m.group(2)}.{m.group(3) or 0}"


def rocm_from_hip(hip: str) -> str:
    """Map a HIP version (``torch.version.hip``, e.g. ``6.2.41133-dd7f95766``) to a ROCm ``major.minor``.

    HIP is ``<major>.<minor>.<build>``; the build does not give the ROCm patch release (the matrix's HIP row shows
    6.2.41134 for ROCm 6.2.1, 6.2.2 and 6.2.4), so only ``major.minor`` is returned, which ``rocm_check`` reads as
    the ``major.minor.0`` column. If the exact version is in a shipped HIP row, the ROCm columns holding it give
    the answer (the matrix lists HIP 6.1.32830 for ROCm 6.0.0: ``6.0``); else HIP 6.2.41133 -> ROCm ``6.2``.
    """
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)(?:[-+~][\w.+~-]*)?\s*", hip or "")
    if not m:
        raise RocmCheckError(f"HIP version {hip!r} is not like 6.2.41133",
                             hint="pass torch.version.hip, e.g. '6.2.41133-dd7f95766'")
    key = ".".join(m.groups())
    for snap in load_snapshots():
        hits = (v for row in snap.rows_of(label="HIP") for v, c in row.cells.items() if c == key)
        series = {".".join(v.split(".")[:2]) for v in hits}
        if len(series) == 1:
            return series.pop()
    return f"{m.group(1)}.{m.group(2)}"


def _split_version(text: str) -> tuple[tuple[int, ...], str] | None:
    m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(.*)", text.strip(), re.IGNORECASE)
    return (tuple(int(p) for p in m.group(1).split(".")), m.group(2).lower()) if m else None


def _prefix(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _version_match(asked: str, item: str) -> bool:
    """Match on the components both give (2.9.1 ~ 2.9, 2.9 ~ 2.9.1); a suffix on the item must agree."""
    if asked.lower().lstrip("v") == item.lower().lstrip("v"):
        return True
    a, b = _split_version(asked), _split_version(item)
    if a is None or b is None or len(a[0]) < 2 or len(b[0]) < 2:
        return False
    return _prefix(a[0], b[0]) and (not b[1] or a[1] == b[1])


_OS_FAMILIES = (("ubuntu", "Ubuntu"), ("red hat", "RHEL"), ("redhat", "RHEL"), ("rhel", "RHEL"), ("sles", "SLES"),
                ("suse linux enterprise", "SLES"), ("oracle", "Oracle Linux"), ("debian", "Debian"),
                ("azure linux", "Azure Linux"), ("rocky", "Rocky Linux"), ("centos", "CentOS"))


def _os_family(text: str) -> str:
    low = text.lower()
    found = next((fam for needle, fam in _OS_FAMILIES if needle in low), None)
    return found or re.split(r"\d", _FOOTNOTE.sub("", text), maxsplit=1)[0].strip()


def _os_versions(cell: str) -> list[tuple[int, ...]]:
    """Versions in an OS cell: ``"SLES 15 SP6, SP5"`` -> (15, 6), (15, 5); ``"RHEL 9.5, 9.4"`` -> (9, 5), (9, 4)."""
    text = _FOOTNOTE.sub("", cell)
    start = re.search(r"\d", text)
    out: list[tuple[int, ...]] = []
    major: int | None = None
    for item in text[start.start():].split(",") if start else []:
        sp = re.fullmatch(r"\s*(?:(\d+)\s*)?SP\s*(\d+)\s*", item, re.IGNORECASE)
        if sp:
            major = int(sp.group(1)) if sp.group(1) else major
            out += [(major, int(sp.group(2)))] if major is not None else []
        elif re.fullmatch(r"\s*\d+(?:\.\d+)*\s*", item):
            out.append(tuple(int(p) for p in item.split(".")))
            major = out[-1][0]
    return out


def os_name_from_release(os_release: str) -> str:
    """An OS name from ``/etc/os-release`` text (PRETTY_NAME, else NAME + VERSION_ID) or a plain name."""
    if "=" not in os_release:
        return os_release.strip()
    pairs = (line.split("=", 1) for line in os_release.splitlines() if "=" in line)
    values = {k.strip(): v.strip().strip("\"'") for k, v in pairs}
    return values.get("PRETTY_NAME") or f"{values.get('NAME', '')} {values.get('VERSION_ID', '')}".strip()


_Outcome = tuple[str, str | None, tuple[str, ...], str]  # verdict, cell, footnotes, detail


@dataclass(frozen=True)
class _Query:
    fact: str
    asked: str
    key: str  # what is looked up, e.g. "gfx942" for "gfx942:sramecc+:xnack-"
    evaluate: Callable[[Snapshot, str], _Outcome]


def _notes(cell: str | None, label_notes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((_FOOTNOTE.findall(cell) if cell else []) + list(label_notes)))


def _block(snap: Snapshot, kind: str, column: str) -> tuple[tuple[Row, ...], list[str]] | None:
    """Rows of a multi-row block and their non-empty cells in ``column``; None when the column has no cell."""
    rows = snap.rows_of(kind)
    if all(r.cells.get(column) is None for r in rows):
        return None
    return rows, [c for c in (r.cells.get(column) for r in rows) if c]


def _os_query(os_name: str) -> _Query:
    text = os_name.strip()
    if not text:
        raise RocmCheckError("OS name is empty", hint="give a name and version such as 'Ubuntu 22.04'")
    family = _os_family(text)
    m = re.search(r"(\d+(?:\.\d+)*)(?:\s*-?\s*SP\s*(\d+))?", text, re.IGNORECASE)
    if not m:
        raise RocmCheckError(f"OS {os_name!r} has no version", hint="give a name and version such as 'Ubuntu 22.04'")
    version = tuple(int(p) for p in m.group(1).split(".")) + ((int(m.group(2)),) if m.group(2) else ())
    shown = f"{version[0]} SP{version[1]}" if family == "SLES" and len(version) > 1 else m.group(1)

    def evaluate(snap: Snapshot, column: str) -> _Outcome:
        block = _block(snap, "os", column)
        if block is None:
            return NO_ENTRY, None, (), "no OS rows for this column"
        rows, cells = block
        same = [c for c in cells if _os_family(c) == family]
        for cell in same:
            if any(_prefix(version, v) for v in _os_versions(cell)):
                return LISTED, cell, _notes(cell, rows[0].label_footnotes), ""
        detail = "" if same else f"no {family} in this column"
        return NOT_LISTED, "; ".join(same or cells), _notes(None, rows[0].label_footnotes), detail

    return _Query("os", os_name, f"{family} {shown}", evaluate)


def _arch_query(arch: str) -> _Query:
    base = (arch or "").strip().split(":", 1)[0].strip().lower()
    kind = "gpu" if re.fullmatch(r"gfx[0-9a-f]{3,4}", base) else "architecture"
    if kind == "architecture" and not re.fullmatch(r"[cr]dna\d*", base):
        raise RocmCheckError(f"GPU architecture {arch!r} is not an AMD LLVM target",
                             hint="give a target such as gfx942 (suffixes like :sramecc+:xnack- are fine) or CDNA3")

    def evaluate(snap: Snapshot, column: str) -> _Outcome:
        block = _block(snap, kind, column)
        if block is None:
            return NO_ENTRY, None, (), f"no {kind} rows for this column"
        rows, cells = block
        for cell in cells:
            if _FOOTNOTE.sub("", cell).strip().lower() == base:
                return LISTED, cell, _notes(cell, rows[0].label_footnotes), ""
        return NOT_LISTED, "; ".join(cells), _notes(None, rows[0].label_footnotes), ""

    return _Query("arch", arch, base if kind == "gpu" else base.upper(), evaluate)


_ALIASES = {"torch": "pytorch", "tf": "tensorflow", "onnx": "onnxruntime", "megatron": "stanfordmegatronlm",
            "megatronlm": "stanfordmegatronlm", "llama": "llamacpp"}


def _norm(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return _ALIASES.get(key, key)


def _framework_query(framework: str) -> _Query:
    m = re.fullmatch(r"\s*([A-Za-z][\w. -]*?)\s*==?\s*(\S+)\s*", framework or "")
    if not m:
        raise RocmCheckError(f"framework {framework!r} is not like pytorch=2.3", hint="give name=version: torch=2.3.1")
    name, version = _norm(m.group(1)), m.group(2).split("+", 1)[0]
    known = {_norm(r.label): r.label for s in load_snapshots() for r in s.rows_of("framework")}
    if name not in known:
        raise RocmCheckError(f"framework {m.group(1)!r} is not in any ROCm snapshot",
                             hint="known: " + ", ".join(sorted(set(known.values()), key=str.lower)))
    if not re.fullmatch(r"[A-Za-z0-9][\w.+-]*", version) or not re.search(r"\d", version):
        raise RocmCheckError(f"framework version {m.group(2)!r} is not a version", hint="e.g. pytorch=2.3.1")

    def evaluate(snap: Snapshot, column: str) -> _Outcome:
        row = next((r for r in snap.rows_of("framework") if _norm(r.label) == name), None)
        if row is None:
            return NO_ENTRY, None, (), f"no {known[name]} row"
        cell = row.cells.get(column)
        if cell is None:
            return NO_ENTRY, None, row.label_footnotes, f"the {row.label} row has no cell for this column"
        hit = any(_version_match(version, item) for item in cell_items(cell) if item.upper() != "N/A")
        return (LISTED if hit else NOT_LISTED), cell, _notes(cell, row.label_footnotes), ""

    return _Query("framework", framework, f"{known[name]} {version}", evaluate)


@dataclass(frozen=True)
class Fact:
    """The verdict on one fact (os / arch / framework) in one snapshot column."""
    fact: str
    asked: str
    key: str  # what was looked up, e.g. "gfx942" for "gfx942:sramecc+:xnack-"
    verdict: str  # LISTED, NOT_LISTED or NO_ENTRY
    snapshot: str | None
    snapshot_date: str | None
    rocm_column: str
    header: str | None  # published header of that column, e.g. "7.0.1/7.0.0"
    cell: str | None  # matched cell; OS/arch "not listed": the column's cells of that block joined by "; "
    footnotes: tuple[str, ...]  # markers on the cell and on the row label
    footnote_text: tuple[tuple[str, str], ...]  # (marker, definition) where the snapshot defines it
    other_footnotes: tuple[str, ...] = ()  # "marker (file)": markers other snapshots put on the same listed entry
    detail: str = ""

    def line(self) -> str:
        """One human line, e.g. ``os: Ubuntu 22.04 — listed (file, date; ROCm 6.2.0 column: "…")``."""
        asked = self.asked if self.asked.strip() == self.key else f"{self.asked.strip()} ({self.key})"
        if self.snapshot is None:
            return f"{self.fact}: {asked} — {self.verdict} ({self.detail})"
        merged = f" '{self.header}'" if self.header not in (None, self.rocm_column) else ""
        col = f"ROCm {self.rocm_column} column{merged}"
        where = f'{col}: "{" ".join(self.cell.split())}"' if self.cell is not None else f"{col}: {self.detail}"
        texts = dict(self.footnote_text)
        notes = [f"{m} ({texts[m]})" if m in texts else m for m in self.footnotes]
        tail = (f"; footnotes: {', '.join(notes)}" if notes else "") + (
            f"; other snapshots: {', '.join(self.other_footnotes)}" if self.other_footnotes else "")
        return f"{self.fact}: {asked} — {self.verdict} ({self.snapshot}, {self.snapshot_date}; {where}{tail})"


@dataclass(frozen=True)
class RocmCheck:
    """Verdicts for one ROCm release; ``exit_code`` is 0 only when every fact is listed."""
    rocm: str
    rocm_column: str
    snapshot: str | None
    snapshot_date: str | None
    facts: tuple[Fact, ...]

    @property
    def exit_code(self) -> int:
        return 0 if self.facts and all(f.verdict == LISTED for f in self.facts) else 1

    @property
    def verdict(self) -> str:
        """Overall: listed if every fact is, else not listed if any is, else no snapshot entry."""
        verdicts = {f.verdict for f in self.facts}
        return LISTED if verdicts == {LISTED} else NOT_LISTED if NOT_LISTED in verdicts else NO_ENTRY

    def lines(self) -> list[str]:
        return [f.line() for f in self.facts]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        facts = [dict(dataclasses.asdict(f), footnotes=list(f.footnotes), footnote_text=dict(f.footnote_text),
                      other_footnotes=list(f.other_footnotes)) for f in self.facts]
        return {"rocm": self.rocm, "rocm_column": self.rocm_column, "snapshot": self.snapshot,
                "snapshot_date": self.snapshot_date, "verdict": self.verdict, "exit_code": self.exit_code,
                "facts": facts}


def rocm_check(*, os_name: str | None, arch: str | None, rocm: str, framework: str | None,
               snapshot: str | None = None) -> RocmCheck:
    """Look up each given fact in the newest snapshot with a column for ``rocm`` (or in the named ``snapshot``).

    ``rocm`` is matched at the snapshot's granularity (``6.2`` is the ``6.2.0`` column, ``7.0`` the ``7.0.0`` half
    of ``7.0.1/7.0.0``); OS and framework (``name=version``) versions on the components both give (``22.04`` ~
    ``22.04.5``, ``2.9.1`` ~ ``2.9``). ``gfx942:sramecc+:xnack-`` is looked up as ``gfx942``, ``CDNA3`` in the
    Architecture rows.
    """
    column = _parse_rocm(rocm)
    asked = ((_os_query, os_name), (_arch_query, arch), (_framework_query, framework))
    queries = [make(value) for make, value in asked if value is not None]
    if not queries:
        raise RocmCheckError("nothing to check", hint="give an OS, a GPU architecture or a framework (pytorch=2.3)")
    snaps = load_snapshots()
    if snapshot is not None:
        names = [s.file for s in snaps]
        if snapshot not in names:
            raise RocmCheckError(f"no ROCm snapshot named {snapshot!r}", hint="one of: " + ", ".join(names))
        snaps = snaps[names.index(snapshot):]
    candidates = [s for s in snaps if column in s.versions]
    chosen = candidates[0] if candidates and (snapshot is None or candidates[0] is snaps[0]) else None
    facts = []
    for q in queries:
        if chosen is None:
            named = snapshot is not None
            detail = "this snapshot has no such column" if named else f"no shipped snapshot has a ROCm {column} column"
            facts.append(Fact(q.fact, q.asked, q.key, NO_ENTRY, snaps[0].file if named else None,
                              snaps[0].date if named else None, column, None, None, (), (), (), detail))
            continue
        verdict, cell, notes, detail = q.evaluate(chosen, column)
        other: list[str] = []
        for old in candidates[1:] if verdict == LISTED else []:
            old_verdict, _, old_notes, _ = q.evaluate(old, column)
            other += [f"{m} ({old.file})" for m in old_notes if m not in notes and old_verdict == LISTED]
        texts = tuple((m, chosen.footnote_text[m]) for m in notes if m in chosen.footnote_text)
        facts.append(Fact(q.fact, q.asked, q.key, verdict, chosen.file, chosen.date, column,
                          chosen.header_for(column), cell, notes, texts, tuple(dict.fromkeys(other)), detail))
    shown = chosen or (snaps[0] if snapshot is not None else None)
    return RocmCheck(rocm, column, shown.file if shown else None, shown.date if shown else None, tuple(facts))


def observed_rocm_verdict(hip_version: str | None, rocm_version: str | None, gcn_arch: str | None,
                          os_release: str | None, framework: str | None = None) -> dict[str, Any]:
    """The verdicts for what a campaign observed, as a JSON-ready dict (``RocmCheck.to_dict`` plus its inputs).

    ``hip_version`` is ``torch.version.hip`` (None, a CUDA or CPU build: "not applicable"); ``rocm_version`` (from
    ``/opt/rocm/.info/version``) wins over ``rocm_from_hip(hip_version)``; ``gcn_arch`` is ``gcnArchName``;
    ``os_release`` is ``/etc/os-release`` text or an OS name. Values that cannot be read raise RocmCheckError.
    """
    if hip_version is None:
        return {"verdict": "not applicable", "reason": "not a ROCm runtime"}
    from_rocm = bool(rocm_version and rocm_version.strip())
    rocm = rocm_version.strip() if rocm_version and from_rocm else rocm_from_hip(hip_version)
    os_name = os_name_from_release(os_release) if os_release and os_release.strip() else None
    arch = gcn_arch if gcn_arch and gcn_arch.strip() else None
    base = {"hip_version": hip_version, "rocm_source": "rocm_version" if from_rocm else "hip_version"}
    if os_name is None and arch is None and framework is None:
        return {"verdict": NO_ENTRY, "reason": "no OS, GPU architecture or framework observed", "rocm": rocm, **base}
    return {**rocm_check(os_name=os_name, arch=arch, rocm=rocm, framework=framework).to_dict(), **base}
