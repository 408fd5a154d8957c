"""The checks every kind's prediction file shares (``campaign.kinds.output``) behave alike for each kind: a
repeated id, a missing or empty id, a missing file, a file of another format version, the expected ids shared by
the set, and the facet each kind object answers without being named."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.classification.output import write_predictions
from iteralab.campaign.kinds.embedding.output import VectorWriter
from iteralab.campaign.kinds.generation.output import TextWriter
from iteralab.campaign.kinds.scoring.output import ScoreWriter
from iteralab.campaign.kinds.output import FORMAT_KEY, FORMAT_VERSION, OutputSet
from iteralab.campaign.kinds.registry import KINDS
from iteralab.campaign.records import OUTPUT_KINDS

PROTOCOL = SimpleNamespace(corpus=SimpleNamespace(classes=["x", "y"]),
                           checks=SimpleNamespace(probability_sum_tolerance=1e-3),
                           embedding=SimpleNamespace(normalize=True, dim=2),
                           generation=SimpleNamespace(max_new_tokens=8, allow_empty=False))
IDS = ["a", "b", "c"]


def _probabilities(path: Path, n: int) -> None:
    write_predictions(path, pa.array(IDS[:n], pa.string()), PROTOCOL.corpus.classes,
                      np.tile(np.array([[0.75, 0.25]], np.float32), (n, 1)))


def _vectors(path: Path, n: int) -> None:
    writer = VectorWriter(path)
    writer.write(pa.array(IDS[:n], pa.string()), np.tile(np.array([[0.6, 0.8]], np.float32), (n, 1)))
    writer.close()


def _texts(path: Path, n: int) -> None:
    writer = TextWriter(path)
    writer.write(pa.array(IDS[:n], pa.string()), ["an answer"] * n, np.full(n, 3, np.int32), ["eos"] * n)
    writer.close()


def _scores(path: Path, n: int) -> None:
    writer = ScoreWriter(path)
    writer.write(pa.array(IDS[:n], pa.string()), np.linspace(0.1, 0.9, n, dtype=np.float32))
    writer.close()


#: A well-formed file of ``n`` rows (ids ``IDS[:n]``), written by each kind's own writer.
WRITERS = {"classification": _probabilities, "embedding": _vectors, "generation": _texts, "scoring": _scores}
PARAMS = [pytest.param(kind, id=name) for name, kind in KINDS.items()]


def _file(tmp_path: Path, kind: JobKind, ids: list | None = None, metadata: dict | None = None) -> Path:
    """A kind's file of three rows whose ids are ``ids``, its metadata updated with ``metadata``."""
    path = tmp_path / "p.parquet"
    WRITERS[kind.name](path, len(IDS))
    table = pq.read_table(path)
    if ids is not None:
        table = table.set_column(0, "id", pa.array(ids, pa.string()))
    if metadata is not None:
        table = table.replace_schema_metadata({**table.schema.metadata,
                                               **{k.encode(): v.encode() for k, v in metadata.items()}})
    pq.write_table(table, path)
    return path


def _row_columns(found: OutputSet) -> dict[str, int]:
    """The length of each of the kind's own per-row columns of a set."""
    base = {f.name for f in dataclasses.fields(OutputSet)}
    values = {f.name: getattr(found, f.name) for f in dataclasses.fields(found) if f.name not in base}
    return {name: len(value) for name, value in values.items() if hasattr(value, "__len__")}


def test_every_output_kind_has_a_kind_whose_file_names_its_columns(tmp_path):
    assert sorted(kind.output.output_kind for kind in KINDS.values()) == sorted(OUTPUT_KINDS)
    for kind in KINDS.values():
        path = tmp_path / f"{kind.name}.parquet"
        WRITERS[kind.name](path, 2)
        assert pq.read_schema(path).names == ["id", *kind.output.columns]
        assert pq.read_schema(path).metadata[FORMAT_KEY.encode()] == FORMAT_VERSION.encode()


@pytest.mark.parametrize("kind", PARAMS)
def test_a_well_formed_file_reads_alike_through_the_kind(tmp_path, kind):
    path = _file(tmp_path, kind)
    found = kind.read_output(path, PROTOCOL)
    assert found.format_ok and found.problems == () and found.records == 3 and found.ids.to_pylist() == IDS
    assert set(_row_columns(found).values()) == {3}
    digest, again = kind.output.read_with_sha256(path, PROTOCOL)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest() and again.ids.equals(found.ids)
    like = pa.array(IDS, pa.string())
    assert kind.read_output(path, PROTOCOL, like=like).ids is like  # the expected ids shared, not copied


@pytest.mark.parametrize("kind", PARAMS)
def test_a_repeated_id_is_coverage_not_format(tmp_path, kind):
    found = kind.read_output(_file(tmp_path, kind, ids=["a", "b", "a"]), PROTOCOL)
    assert found.format_ok and found.records == 3 and found.ids.to_pylist() == ["a", "b", "a"]
    match = found.coverage(pa.array(IDS, pa.string()))
    assert match.covered.tolist() == [True, True, False] and match.repeated.to_pylist() == ["a"]
    assert match.last.tolist() == [2, 1, -1] and len(match.extra_unique) == 0


@pytest.mark.parametrize("kind", PARAMS)
@pytest.mark.parametrize("ids", [["a", None, "c"], ["a", "", "c"]], ids=["null", "empty"])
def test_a_missing_or_empty_id_is_a_format_problem_of_its_row(tmp_path, kind, ids):
    found = kind.read_output(_file(tmp_path, kind, ids=ids), PROTOCOL)
    assert found.problems == ("row 2: id must be a non-empty string",) and found.problem_count == 1
    kept = [i for i in ids if i is not None]  # a record without an id is counted, not kept
    assert found.records == 3 and found.ids.to_pylist() == kept
    assert set(_row_columns(found).values()) == {len(kept)}
    assert found.coverage(pa.array(IDS, pa.string())).covered.tolist() == [True, ids[1] == "b", True]


@pytest.mark.parametrize("kind", PARAMS)
def test_a_missing_file_is_one_problem_not_an_exception(tmp_path, kind):
    found = kind.read_output(tmp_path / "absent.parquet", PROTOCOL)
    assert isinstance(found, OutputSet) and found.problem_count == 1 and found.records == 0
    assert found.problems[0].startswith("not a readable Parquet file (") and len(found.ids) == 0
    assert set(_row_columns(found).values()) <= {0}


@pytest.mark.parametrize("kind", PARAMS)
def test_another_format_version_is_refused_whole(tmp_path, kind):
    found = kind.read_output(_file(tmp_path, kind, metadata={FORMAT_KEY: "2"}), PROTOCOL)
    assert found.problem_count == 1 and found.records == 3 and len(found.ids) == 0
    assert found.problems[0].startswith("format version '2' (iteralab.predictions in the file's metadata)")
    assert set(_row_columns(found).values()) <= {0}


@pytest.mark.parametrize("kind", PARAMS)
def test_a_file_without_a_version_reads_as_this_version(tmp_path, kind):
    """A file written by another tool, without iteralab's metadata, is judged by its columns and rows."""
    path = _file(tmp_path, kind)
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata(None), path)
    assert kind.read_output(path, PROTOCOL).format_ok


def test_a_file_of_another_output_kind_is_named_before_its_columns(tmp_path):
    path = tmp_path / "v.parquet"
    _vectors(path, 2)
    found = KINDS["generation"].read_output(path, PROTOCOL)
    assert found.problems == ("the file holds embedding_vectors outputs, not generated_texts",)
    assert found.records == 2 and len(found.ids) == 0
