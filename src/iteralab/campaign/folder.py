"""One campaign folder: every path it holds, one ``open`` check, and typed readers of its records.

Every stage after the runner (table, stats, decision, memory, report, verify, rerun, the CLI) reads a folder
through :class:`CampaignFolder`, so the layout is written down once and "not a campaign folder" is one error.
The raw table is read into frozen :class:`RawRow` objects with real ``bool``/``int``/``float``/``None`` cells
(an empty cell is ``None``: a measurement that was not taken, never 0 or ``"false"``).

Layout::

    inputs/protocol.toml, inputs/protocol.toml.lock.json   the locked protocol, as run
    inputs/corpus.csv                                       the comparison corpus (id, text, label, stratum)
                                                            (+ a generation job's reference, and prompt.<name>
                                                            for each column its prompt names)
    inputs/tuning.csv                                       the tuning split, when the protocol declares one
    inputs/datasets/<name>.csv                              one copy per dataset, in place of inputs/corpus.csv,
                                                            when the protocol declares [[datasets]] (K6)
    inputs/catalog.csv                                      the package catalog the decision prices from
    inputs/routine/<module>.py                              the metric routine's module file, when the protocol
                                                            declares one (``lock.usercode.ROUTINE_DIR``)
    inputs/queries.csv                                      recall_at_k's queries file (``lock.usercode``)
    campaign.json                                           fingerprints, schedule, variants (written once)
    manifest.json                                           environment + model + corpus (C3)
    journal.jsonl                                           append-only, fsync'd events (the source of truth)
    predictions/<pass_id>.parquet                           one verified output set per pass (Parquet)
    predictions/<pass_id>.queries.parquet                   recall_at_k: the pass's query vectors
    raw_table.csv                                           regenerated from the journal and the files
    decision.json, decision.md                              the decision (``decide --out``, ``report``)
    decision-catalog.csv                                    the catalog that decision priced from, when it was
                                                            given with ``--catalog`` (its sha256 in decision.json)
    SHA256SUMS                                              the seal (``iteralab bundle seal``)
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from iteralab.campaign.campaignrecord import CampaignRecord, read_campaign
from iteralab.campaign.journal import JOURNAL_NAME, read_journal
from iteralab.campaign.manifest import Manifest, read_manifest
from iteralab.campaign.records import PHASES
from iteralab.common.digest import StringDigest, pairs_digest
from iteralab.errors import IteraError

CAMPAIGN = "campaign.json"
MANIFEST = "manifest.json"
TABLE = "raw_table.csv"
SUMS = "SHA256SUMS"
INPUTS = "inputs"
PROTOCOL = "inputs/protocol.toml"
LOCK = "inputs/protocol.toml.lock.json"
CORPUS = "inputs/corpus.csv"
TUNING = "inputs/tuning.csv"
CATALOG = "inputs/catalog.csv"
DECISION = "decision.json"
DECISION_CATALOG = "decision-catalog.csv"
DATASETS = "inputs/datasets"
PREDICTIONS = "predictions"


def corpus_copy(dataset: str | None = None) -> str:
    """The folder's copy of the corpus a pass reads: ``inputs/corpus.csv``, or its dataset's (K6)."""
    return f"{DATASETS}/{dataset}.csv" if dataset is not None else CORPUS

#: The status of a pass that a stop signal interrupted (SIGINT, SIGTERM, SIGHUP): the row stays in the raw table
#: (it was attempted), and no stage counts it (:meth:`CampaignFolder.counted_rows`).
INTERRUPTED = "interrupted"
COLUMNS = (
    "pass_id", "variant", "dataset", "series", "round", "position", "attempt", "seed", "status",
    "batch_size", "precision", "quantization", "bucketing", "padding", "resume", "compile", "device", "data_parallel",
    "engine", "protocol_name", "protocol_version", "protocol_sha256", "corpus_fingerprint", "order_hash",
    *PHASES, "docs_per_s",
    "expected_ids", "observed_ids", "ids_match", "duplicates", "missing", "extra", "format_ok", "coverage",
    "completed", "retries",
    "metric_name", "metric", "metric_ref", "metric_delta", "delta_low", "delta_high", "delta_units", "threshold_ok",
    "tolerance_ok", "subgroups_ok", "subgroup_metrics", "subgroup_deltas", "label_agreement", "max_abs_prob_diff", "reproduction_ok", "corpus_accepted",
    "excluded", "exclusion_reason",
    "cpu_peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "memory_scope",
    "shard_pass_s", "shard_time_imbalance", "shard_token_imbalance", "shard_memory",
    "manifest_diff", "prediction_file", "prediction_sha256", "error", "notes",
)


#: An embedding campaign's cosine columns (after ``max_abs_prob_diff``); a classification table has none.
COSINE_COLUMNS = ("min_cosine", "median_cosine", "cosine_at_quantile")


def with_cosines(columns: tuple[str, ...]) -> tuple[str, ...]:
    at = columns.index("max_abs_prob_diff") + 1
    return (*columns[:at], *COSINE_COLUMNS, *columns[at:])


#: A generation campaign's columns: generated tokens per second after ``docs_per_s``, and after
#: ``max_abs_prob_diff`` the mean generated tokens, the share ended on ``length`` and the share of texts identical
#: to the reference pass's; a classification table has none.
GENERATION_RATE_COLUMNS = ("tokens_per_s",)
GENERATION_COLUMNS = ("mean_tokens", "length_share", "identical_share")


def with_generation(columns: tuple[str, ...]) -> tuple[str, ...]:
    rate = columns.index("docs_per_s") + 1
    columns = (*columns[:rate], *GENERATION_RATE_COLUMNS, *columns[rate:])
    at = columns.index("max_abs_prob_diff") + 1
    return (*columns[:at], *GENERATION_COLUMNS, *columns[at:])


#: A scoring campaign's columns (after ``max_abs_prob_diff``): against the reference pass, the largest and the high
#: quantile of the absolute score differences, and the minimum and median over groups of Kendall's tau.
SCORE_COLUMNS = ("max_abs_score_diff", "score_diff_at_quantile", "min_kendall_tau", "median_kendall_tau")


def with_scores(columns: tuple[str, ...]) -> tuple[str, ...]:
    at = columns.index("max_abs_prob_diff") + 1
    return (*columns[:at], *SCORE_COLUMNS, *columns[at:])


def format_cell(value: Any) -> str:
    """How a value is written in the raw table (the one writer's rule; :func:`read_raw_rows` inverts it)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value).replace("\r", " ")


class NotACampaignFolder(IteraError):
    """The path is not a folder written by ``iteralab run`` (no campaign.json)."""


@dataclass(frozen=True)
class RawRow:
    """One row of ``raw_table.csv`` with typed cells; an empty cell is None."""

    pass_id: str
    variant: str
    #: The dataset of the pass (K6); empty (None) in a one-corpus campaign.
    dataset: str | None
    series: str | None
    round: int | None
    position: int | None
    attempt: int | None
    seed: int | None
    status: str
    batch_size: int | None
    precision: str | None
    quantization: str | None
    bucketing: bool | None
    padding: str | None
    resume: bool | None
    compile: bool | None
    device: str | None
    #: X3: worker processes of the pass, one per device (1: a single-device pass)
    data_parallel: int | None
    #: X4: "local" (a worker process of this machine) or "ray" (Ray Data actors)
    engine: str | None
    protocol_name: str | None
    protocol_version: int | None
    protocol_sha256: str | None
    corpus_fingerprint: str | None
    order_hash: str | None
    load_s: float | None
    compile_s: float | None
    warmup_s: float | None
    pass_s: float | None
    evaluation_s: float | None
    writing_s: float | None
    docs_per_s: float | None
    expected_ids: int | None
    observed_ids: int | None
    ids_match: bool | None
    duplicates: int | None
    missing: int | None
    extra: int | None
    format_ok: bool | None
    coverage: float | None
    completed: int | None
    retries: int | None
    metric_name: str | None
    metric: float | None
    metric_ref: float | None
    metric_delta: float | None
    #: the interval of ``metric_delta`` at the protocol's level (``campaign.kinds.interval``), and how many units
    #: (documents; a ranking metric's queries) its paired bootstrap resampled
    delta_low: float | None
    delta_high: float | None
    delta_units: int | None
    threshold_ok: bool | None
    tolerance_ok: bool | None
    subgroups_ok: bool | None
    #: each planned subgroup group's metric value, keyed ``<subgroup>:<group>``
    subgroup_metrics: dict[str, float | None] | None
    #: each gating group's difference interval with the reference pass's, [low, high]
    subgroup_deltas: dict[str, list[float]] | None
    label_agreement: float | None
    max_abs_prob_diff: float | None
    reproduction_ok: bool | None
    corpus_accepted: bool | None
    excluded: bool | None
    exclusion_reason: str | None
    cpu_peak_rss_bytes: int | None
    cuda_max_allocated_bytes: int | None
    cuda_max_reserved_bytes: int | None
    memory_scope: str | None
    #: data-parallel passes only: pass time per device, slowest/fastest shard time, largest/smallest shard token
    #: count, and each device's memory peaks (the memory columns above hold the largest per-device peak)
    shard_pass_s: dict[str, float] | None
    shard_time_imbalance: float | None
    shard_token_imbalance: float | None
    shard_memory: dict[str, dict[str, int | None]] | None
    manifest_diff: str | None
    prediction_file: str | None
    prediction_sha256: str | None
    error: str | None
    notes: str | None
    #: An embedding job's cosines with the reference pass (minimum, median, the declared lower quantile).
    min_cosine: float | None = None
    median_cosine: float | None = None
    cosine_at_quantile: float | None = None
    #: A generation job's generated tokens per second of the pass, mean generated tokens per document, share of
    #: outputs ended on ``length`` and share of texts identical to the reference pass's (None: not measured).
    tokens_per_s: float | None = None
    mean_tokens: float | None = None
    length_share: float | None = None
    identical_share: float | None = None
    #: A scoring job's scores against the reference pass: the largest and the high quantile of the absolute
    #: differences, and the minimum and median over groups of Kendall's tau.
    max_abs_score_diff: float | None = None
    score_diff_at_quantile: float | None = None
    min_kendall_tau: float | None = None
    median_kendall_tau: float | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RawRow:
        """The typed row of a raw-table row as the table builds it (``evidence.table.build_rows``: its cells
        already real values); a column it lacks reads None."""
        return cls(**{f.name: row.get(f.name) for f in fields(cls)})

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def accepted(self) -> bool:
        return self.corpus_accepted is True

    @property
    def interrupted(self) -> bool:
        return self.status == INTERRUPTED

    def cell(self, name: str) -> str:
        """The cell as the raw table shows it."""
        return format_cell(getattr(self, name))

    def phase(self, name: str) -> float | None:
        if name not in PHASES:
            raise KeyError(name)
        return getattr(self, name)


_KINDS: dict[str, str] = {}
for _f in fields(RawRow):
    _type = str(_f.type)
    _KINDS[_f.name] = ("bool" if _type.startswith("bool") else "int" if _type.startswith("int")
                       else "float" if _type.startswith("float") else "json" if _type.startswith("dict") else "str")
assert tuple(_KINDS) == (*COLUMNS, *COSINE_COLUMNS, *GENERATION_RATE_COLUMNS, *GENERATION_COLUMNS, *SCORE_COLUMNS), \
    "RawRow fields must follow the raw table's columns"


def _typed(kind: str, text: str, where: str) -> Any:
    if text == "":
        return None
    try:
        if kind == "bool":
            if text not in ("true", "false"):
                raise ValueError(f"{text!r} is not true/false")
            return text == "true"
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "json":
            return json.loads(text)
    except ValueError as exc:
        raise IteraError(f"{where}: cannot read the cell ({exc})",
                         hint="regenerate the table from the journal: iteralab table FOLDER") from None
    return text


def read_raw_rows(path: str | Path) -> tuple[RawRow, ...]:
    """Every row of a raw table as a typed :class:`RawRow` (columns checked against the known layout)."""
    path = Path(path)
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(header) not in (COLUMNS, with_cosines(COLUMNS), with_generation(COLUMNS),
                                                          with_scores(COLUMNS)):
            raise IteraError(f"{path}: not a raw table of this version (unexpected header)",
                             hint="regenerate it from the journal: iteralab table FOLDER")
        columns = tuple(header)
        rows = []
        for line, cells in enumerate(reader, start=2):
            if len(cells) != len(columns):
                raise IteraError(f"{path}, line {line}: {len(cells)} cells, expected {len(columns)}",
                                 hint="regenerate it from the journal: iteralab table FOLDER")
            typed = {name: _typed(_KINDS[name], cell, f"{path}, line {line}, column {name}")
                     for name, cell in zip(columns, cells)}
            rows.append(RawRow(**typed))
    return tuple(rows)


def read_corpus_batches(path: str | Path, columns: list[str], *, block_size: int = 1 << 22) -> Any:
    """Record batches (Arrow strings) of some columns of a corpus file, streamed: a campaign's corpus copy
    (``write_corpus``'s CSV, every cell quoted, texts may hold line breaks) or a Parquet corpus. The whole file
    is never held in Python objects; a column the file lacks is left out."""
    path = Path(path)
    if path.suffix == ".parquet":
        handle = pq.ParquetFile(path)
        present = [c for c in columns if c in handle.schema_arrow.names]
        return handle.iter_batches(columns=present)
    return _csv_batches(path, columns, block_size)


def _csv_batches(path: Path, columns: list[str], block_size: int) -> Any:
    """The CSV cut into pieces of about ``block_size`` bytes at record boundaries, each parsed by pyarrow when it
    is asked for. (pyarrow's own streaming reader reads the rest of the file ahead in the background: ~75 MB of
    resident memory for a million documents whose ids alone take 12.) A record boundary is a line feed after an
    even number of quote characters, which holds for ``csv.writer``'s output: a quote inside a field is doubled
    and a field holding a quote, comma or line break is quoted."""

    with open(path, encoding="utf-8", newline="") as fh:
        header = next(csv.reader(fh), [])
    wanted = [c for c in columns if c in header]
    options = dict(parse_options=pacsv.ParseOptions(newlines_in_values=True),
                   convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in header},
                                                        include_columns=wanted))
    pending = b""  # bytes after the last record boundary: they start outside any quoted field
    first = True
    with open(path, "rb") as raw:
        while True:
            block = raw.read(max(block_size, len(pending)))  # a record longer than a block: read twice as much
            data = pending + block
            cut = len(data)
            if block:
                cut = _last_record_end(data)
                if not cut:  # one record longer than the block: read more
                    pending = data
                    continue
            piece, pending = data[:cut], data[cut:]
            if first:  # the header line is the first record
                piece = piece[_first_record_end(piece):]
                first = False
            if piece.strip():
                # one parser block per piece: a record longer than pyarrow's default block is still one record
                read = pacsv.ReadOptions(column_names=header, use_threads=False, block_size=len(piece) + 1)
                yield from pacsv.read_csv(pa.py_buffer(piece), read_options=read, **options).to_batches()
            if not block:
                return


def _last_record_end(data: bytes) -> int:
    """Just past the last line feed of ``data`` that follows an even number of quote characters (a record
    boundary of ``csv.writer``'s output), 0 when there is none. Counted with ``bytes.count`` from the end, line
    feed by line feed: no array per byte of the block."""
    quotes_before = data.count(b'"')  # before ``end``
    end = len(data)
    pos = data.rfind(b"\n")
    while pos >= 0:
        quotes_before -= data.count(b'"', pos, end)
        if quotes_before % 2 == 0:
            return pos + 1
        end = pos
        pos = data.rfind(b"\n", 0, pos)
    return 0


def _first_record_end(data: bytes) -> int:
    inside = False
    for i, byte in enumerate(data):
        if byte == 34:
            inside = not inside
        elif byte == 10 and not inside:
            return i + 1
    return len(data)


@dataclass(frozen=True)
class CorpusDigests:
    """What campaign.json records of the corpus copy, recomputed from the file by streaming."""

    size: int
    fingerprint: str
    order_hash: str
    duplicate_ids: int
    labels_outside: int


def corpus_digests(path: str | Path, classes: list[str] | tuple[str, ...]) -> CorpusDigests:
    """The corpus fingerprint (its (id, text) pairs in id order), order hash (its ids in file order) and size of a
    corpus file, as :mod:`iteralab.common.digest` defines them, computed from the Arrow columns: nothing per
    record in Python. Also counts what would make the copy an invalid corpus (repeated ids, labels that are no
    class)."""

    streamed = _ascending_digests(path, classes)
    if streamed is not None:
        return streamed
    table = pa.Table.from_batches(list(read_corpus_batches(path, ["id", "text", "label"])))
    ids, texts = table.column("id").combine_chunks(), table.column("text").combine_chunks()
    order = StringDigest()
    order.update(ids)
    sorted_rows = pc.sort_indices(pa.table({"id": ids, "text": texts}), sort_keys=[("id", "ascending"),
                                                                                      ("text", "ascending")])
    fingerprint = pairs_digest(ids.take(sorted_rows), texts.take(sorted_rows))
    labels = table.column("label") if "label" in table.column_names else pa.chunked_array([], pa.string())
    outside = len(labels) - pc.sum(pc.is_in(labels, value_set=_label_set(classes))).as_py() if len(labels) else 0
    return CorpusDigests(len(ids), fingerprint, order.hexdigest(), len(ids) - pc.count_distinct(ids).as_py(),
                         int(outside or 0))


def _label_set(classes: list[str] | tuple[str, ...]) -> pa.Array:
    """The labels a corpus copy may hold: the classes, or only empty cells for a corpus without labels (an
    embedding job's ``corpus.classes = []``)."""
    return pa.array(list(classes) or [""], pa.string())


#: Bytes of the corpus copy parsed at a time by the streamed digests (a piece's parsing temporaries are a few
#: times its size).
DIGEST_BLOCK = 1 << 20


def _ascending_digests(path: str | Path, classes: list[str] | tuple[str, ...]) -> CorpusDigests | None:
    """:func:`corpus_digests` in one streamed read when the ids strictly ascend through the file (then the file
    order is the sorted order and no id repeats): nothing per record is held. None as soon as they do not (the
    caller then sorts the whole file)."""

    order, fingerprint = StringDigest(), StringDigest()
    value_set = _label_set(classes)
    size = outside = 0
    last: str | None = None
    for batch in read_corpus_batches(path, ["id", "text", "label"], block_size=DIGEST_BLOCK):
        names = batch.schema.names
        if "id" not in names or "text" not in names:
            return None
        column = batch.column(names.index("id"))
        n = len(column)
        if column.null_count or (n > 1 and not pc.all(pc.greater(column.slice(1), column.slice(0, n - 1))).as_py()):
            return None  # strictly ascending (UTF-8 byte order is code point order, as Python compares str)
        if n and last is not None and not last < column[0].as_py():
            return None
        order.update(column)
        fingerprint.update_pairs(column, batch.column(names.index("text")))
        if "label" in names and n:
            outside += n - (pc.sum(pc.is_in(batch.column(names.index("label")), value_set=value_set)).as_py() or 0)
        size += n
        last = column[n - 1].as_py() if n else last
    return CorpusDigests(size, fingerprint.hexdigest(), order.hexdigest(), 0, int(outside))


@dataclass(frozen=True)
class CampaignFolder:
    """A campaign folder written by ``iteralab run``; open it with :meth:`open`."""

    path: Path

    @classmethod
    def open(cls, path: str | Path, *, sealed_only_ok: bool = False) -> CampaignFolder:
        """The folder, checked: it must hold campaign.json (or, with ``sealed_only_ok``, at least a seal)."""
        folder = Path(path)
        if (folder / CAMPAIGN).is_file() or (sealed_only_ok and (folder / SUMS).is_file()):
            return cls(folder)
        what = "no campaign.json, no SHA256SUMS" if sealed_only_ok else "no campaign.json"
        if not folder.exists():
            what = "it does not exist"
        raise NotACampaignFolder(f"{folder}: not a campaign folder ({what})",
                                 hint="pass the folder given to 'iteralab run --out'")

    def file(self, relative: str) -> Path:
        return self.path / relative

    @property
    def table_path(self) -> Path:
        return self.path / TABLE

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL_NAME

    @property
    def protocol_path(self) -> Path:
        return self.path / PROTOCOL

    @property
    def corpus_path(self) -> Path:
        return self.path / CORPUS

    @property
    def catalog_path(self) -> Path | None:
        """The folder's copy of the catalog the protocol named (None: the shipped snapshot was declared)."""
        path = self.path / CATALOG
        return path if path.is_file() else None

    @property
    def decision_catalog_path(self) -> Path | None:
        """The copy of the catalog the stored decision priced from, given with ``--catalog`` (None: none)."""
        path = self.path / DECISION_CATALOG
        return path if path.is_file() else None

    @property
    def tuning_path(self) -> Path | None:
        path = self.path / TUNING
        return path if path.is_file() else None

    def prediction_path(self, relative: str) -> Path:
        return self.path / relative

    @cached_property
    def campaign(self) -> CampaignRecord:
        """campaign.json, typed (:mod:`iteralab.campaign.campaignrecord`); its ``kind`` names the job kind
        (``campaign.kinds.registry.kind_named``)."""
        record = read_campaign(self.path / CAMPAIGN, self.path / PROTOCOL)
        if record is None:
            raise NotACampaignFolder(f"{self.path}: not a campaign folder (no campaign.json)",
                                     hint="pass the folder given to 'iteralab run --out'")
        return record

    @cached_property
    def manifest(self) -> Manifest | None:
        """manifest.json, typed (None before the first successful pass wrote it)."""
        return read_manifest(self.path / MANIFEST)

    def journal(self) -> Any:
        """The journal's state, read now (it grows while a campaign runs)."""

        return read_journal(self.path / JOURNAL_NAME)

    def raw_rows(self) -> tuple[RawRow, ...]:
        """The typed raw table (``iteralab.evidence.table.write_raw_table`` regenerates it)."""
        if not self.table_path.is_file():
            raise IteraError(f"{self.path}: no {TABLE}", hint=f"regenerate it: iteralab table {self.path}")
        return read_raw_rows(self.table_path)

    def counted_rows(self) -> tuple[RawRow, ...]:
        """The rows the evidence stages count (statistics, feasibility, memory, decision): every attempted pass
        but those a stop signal interrupted, which say nothing about a configuration (their slot runs again)."""
        return tuple(r for r in self.raw_rows() if not r.interrupted)

    @property
    def corpus_size(self) -> int:
        return self.campaign.corpus.size

    @property
    def corpus_fingerprint(self) -> str:
        return self.campaign.corpus.fingerprint
