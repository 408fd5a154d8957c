"""ROCm compatibility-matrix lookup (C4): parsing of every shipped layout, and the verdicts of ``rocm_check``."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from iteralab.errors import IteraError
from iteralab.models.rocm import (
    LISTED,
    NO_ENTRY,
    NOT_LISTED,
    SNAPSHOT_DIR,
    SNAPSHOTS,
    RocmCheckError,
    Snapshot,
    cell_items,
    load_snapshots,
    observed_rocm_verdict,
    os_name_from_release,
    parse_rst,
    rocm_check,
    rocm_from_hip,
)

H600 = "compatibility-matrix-historical-6.0.csv"
H642 = "compatibility-matrix-historical-6.0@6.4.2.csv"
H711 = "compatibility-matrix-historical-6.0@7.1.1.csv"
H720 = "compatibility-matrix-historical-6.0@7.2.0.csv"
RST = "compatibility-matrix@7.2.0.rst"
OS = "Operating systems & kernels"
ARCH = "Architecture"
GPU = "GPU / LLVM target"


def snap(file: str) -> Snapshot:
    return next(s for s in load_snapshots() if s.file == file)


def cell(file: str, label: str, index: int, version: str) -> str | None:
    """The ``index``-th row carrying ``label`` (a multi-row block such as the OS list), cell of ``version``."""
    return [r.cells.get(version) for r in snap(file).rows_of(label=label)][index]


# Cells read by hand from the shipped files: (file, row label, row index inside that label's block, ROCm
# version, cell text). 71 cells in all (13, 18, 19, 10 and 11 per snapshot), each covering OS, architecture
# (Architecture and/or GPU / LLVM target) and framework rows. "" is an empty cell, None a cell the row lacks.
HAND_READ: list[tuple[str, str, int, str, str | None]] = [
    # historical CSV, 13 columns (6.3.3 … 6.0.0): per-cell MI300 / OS footnotes
    (H600, OS, 0, "6.2.4", "Ubuntu 24.04.1, 24.04"),
    (H600, OS, 1, "6.0.0", "Ubuntu 22.04.4, 22.04.3, 22.04.2"),
    (H600, OS, 7, "6.1.2", "Oracle Linux 8.9 [#mi300x-past-60]_"),
    (H600, OS, 7, "6.0.0", ""),
    (H600, OS, 8, "6.3.3", "Debian 12 [#single-node-past-60]_"),
    (H600, OS, 9, "6.3.2", "Azure Linux 3.0 [#mi300x-past-60]_"),
    (H600, ARCH, 0, "6.0.0", "CDNA3"),
    (H600, GPU, 2, "6.2.0", "gfx942 [#mi300_620-past-60]_"),
    (H600, GPU, 2, "6.1.2", "gfx942 [#mi300_612-past-60]_"),
    (H600, "PyTorch", 0, "6.3.0", "2.4, 2.3, 2.2, 2.1, 2.0, 1.13"),
    (H600, "TensorFlow", 0, "6.2.0", "2.16.1, 2.15.1, 2.14.1"),
    (H600, "JAX", 0, "6.3.3", "0.4.31"),
    (H600, "ONNX Runtime", 0, "6.0.2", "1.14.1"),
    # historical CSV at 6.4.2, 17 columns: RDNA4 rows, five short framework rows
    (H642, OS, 1, "6.1.5", "Ubuntu 22.04.5, 22.04.4, 22.04.3"),
    (H642, OS, 3, "6.4.1", "RHEL 9.6, 9.5, 9.4"),
    (H642, OS, 5, "6.4.2", "SLES 15 SP7, SP6"),
    (H642, OS, 7, "6.4.0", "Oracle Linux 9, 8 [#mi300x-past-60]_"),
    (H642, OS, 9, "6.3.3", "Azure Linux 3.0 [#mi300x-past-60]_"),
    (H642, ARCH, 3, "6.4.2", "RDNA4"),
    (H642, ARCH, 3, "6.4.0", ""),
    (H642, GPU, 0, "6.4.2", "gfx1201 [#RDNA-OS-past-60]_"),
    (H642, GPU, 2, "6.4.2", "gfx1101 [#RDNA-OS-past-60]_ [#7700XT-OS-past-60]_"),
    (H642, GPU, 2, "6.4.1", "gfx1101 [#RDNA-OS-past-60]_"),
    (H642, "PyTorch", 0, "6.4.0", "2.6, 2.5, 2.4, 2.3"),
    (H642, "DGL", 0, "6.4.0", "2.4.0"),
    (H642, "DGL", 0, "6.0.2", "N/A"),
    (H642, "DGL", 0, "6.0.0", None),
    (H642, "Taichi", 0, "6.3.2", "1.8.0b1"),
    (H642, "verl", 0, "6.2.0", "0.3.0.post0"),
    (H642, "Stanford Megatron-LM", 0, "6.3.0", "85f95ae"),
    (H642, "ONNX Runtime", 0, "6.4.2", "1.2"),
    # historical CSV at 7.1.1, 22 columns: merged 7.0.1/7.0.0, CDNA4 / gfx950, DRIVER & USER SPACE
    (H711, OS, 3, "7.1.1", "RHEL 10.1, 10.0, 9.7, 9.6, 9.4"),
    (H711, OS, 3, "7.0.1", "RHEL 9.6, 9.4"),
    (H711, OS, 3, "7.0.0", "RHEL 9.6, 9.4"),
    (H711, OS, 8, "7.1.0", "Debian 13, 12"),
    (H711, OS, 9, "7.1.1", ""),
    (H711, OS, 9, "7.0.2", "Azure Linux 3.0"),
    (H711, OS, 10, "7.0.0", "Rocky Linux 9"),
    (H711, OS, 10, "6.4.3", ""),
    (H711, ARCH, 0, "7.0.1", "CDNA4"),
    (H711, GPU, 0, "7.0.0", "gfx950"),
    (H711, GPU, 6, "6.2.0", "gfx942"),
    (H711, "PyTorch", 0, "7.1.1", "2.9, 2.8, 2.7"),
    (H711, "PyTorch", 0, "7.0.0", "2.7, 2.6, 2.5"),
    (H711, "TensorFlow", 0, "7.0.2", "2.19.1, 2.18.1, 2.17.1 [#tf-mi350-past-60]_"),
    (H711, "llama.cpp", 0, "7.0.1", "b6652"),
    (H711, "FlashInfer", 0, "6.4.1", "v0.2.5"),
    (H711, "Ray", 0, "7.0.0", "2.51.1"),
    (H711, "Ray", 0, "6.4.1", "2.48.0.post0"),
    (H711, "AMD GPU Driver", 0, "6.4.3", "6.4.x, 6.3.x, 6.2.x, 6.1.x"),
    # historical CSV at 7.2.0, 23 columns: three-part PyTorch versions in the 7.2.0 column only
    (H720, OS, 0, "7.2.0", "Ubuntu 24.04.3"),
    (H720, OS, 9, "7.2.0", ""),
    (H720, OS, 9, "7.0.2", "Azure Linux 3.0"),
    (H720, ARCH, 0, "6.4.3", ""),
    (H720, GPU, 0, "7.2.0", "gfx950"),
    (H720, "PyTorch", 0, "7.2.0", "2.9.1, 2.8.0, 2.7.1"),
    (H720, "PyTorch", 0, "7.1.1", "2.9, 2.8, 2.7"),
    (H720, "JAX", 0, "7.2.0", "0.8.0"),
    (H720, "TensorFlow", 0, "7.1.0", "2.20.0, 2.19.1, 2.18.1"),
    (H720, "DGL", 0, "7.0.1", "2.4.0"),
    # RST page, 3 columns (7.2.0, 7.1.1, 6.4.0): |br| in the driver cells, footnotes without -past-60
    (RST, OS, 2, "7.1.1", "RHEL 10.1, 10.0, 9.7, 9.6, 9.4"),
    (RST, OS, 7, "6.4.0", "Azure Linux 3.0"),
    (RST, OS, 8, "7.2.0", "Rocky Linux 9"),
    (RST, OS, 8, "6.4.0", ""),
    (RST, ARCH, 0, "7.1.1", "CDNA4"),
    (RST, ARCH, 0, "6.4.0", ""),
    (RST, GPU, 0, "7.2.0", "gfx950"),
    (RST, "PyTorch", 0, "6.4.0", "2.6, 2.5, 2.4, 2.3"),
    (RST, "PyTorch", 0, "7.2.0", "2.9.1, 2.8.0, 2.7.1"),
    (RST, "llama.cpp", 0, "6.4.0", "b5997"),
    (RST, "AMD GPU Driver", 0, "7.1.1",
     "30.20.1, 30.20.0 [#mi325x_KVM]_,\n30.10.2, 30.10.1 [#driver_patch]_,\n30.10, 6.4.x"),
]


def test_hand_read_table_size_and_coverage() -> None:
    assert len(HAND_READ) == 71
    for info in SNAPSHOTS:
        rows = [r for r in HAND_READ if r[0] == info.file]
        labels = {r[1] for r in rows}
        assert len(rows) >= 4 and OS in labels and labels & {ARCH, GPU} and "PyTorch" in labels, info.file


@pytest.mark.parametrize(("file", "label", "index", "version", "expected"), HAND_READ)
def test_parsed_cell_matches_hand_read(file: str, label: str, index: int, version: str, expected: str | None) -> None:
    assert cell(file, label, index, version) == expected


def test_shipped_snapshots_are_byte_identical_to_the_readme_checksums() -> None:
    readme = (SNAPSHOT_DIR / "README.md").read_text(encoding="utf-8")
    sums = dict((name, digest) for name, digest in re.findall(r"^- `([^`]+)` ([0-9a-f]{64})", readme, re.M))
    assert set(sums) == {i.file for i in SNAPSHOTS}
    for name, digest in sums.items():
        assert hashlib.sha256((SNAPSHOT_DIR / name).read_bytes()).hexdigest() == digest
    assert "MIT License" in (SNAPSHOT_DIR / "LICENSE").read_text(encoding="utf-8")


def test_columns_of_every_layout() -> None:
    assert [s.file for s in load_snapshots()] == [H720, RST, H711, H642, H600]
    assert [s.layout for s in load_snapshots()] == ["csv", "rst", "csv", "csv", "csv"]
    assert snap(H600).columns[0] == "6.3.3" and snap(H600).columns[-1] == "6.0.0" and len(snap(H600).columns) == 13
    assert "6.1.5" not in snap(H600).versions and "6.1.5" in snap(H642).versions  # header " 6.1.5" stripped
    assert len(snap(H642).columns) == 17 and snap(H642).columns[0] == "6.4.2"
    assert len(snap(H711).columns) == 22 and len(snap(H711).versions) == 23
    assert len(snap(H720).columns) == 23 and snap(H720).columns[0] == "7.2.0"
    assert snap(RST).columns == ("7.2.0", "7.1.1", "6.4.0") == snap(RST).versions
    assert snap(RST).date == "2026-01-21" and snap(H642).date == "2025-08-01"


def test_merged_header_expands_to_both_releases() -> None:
    h711 = snap(H711)
    assert "7.0.1/7.0.0" in h711.columns and "7.0.1/7.0.0" not in h711.versions
    assert h711.versions[3:6] == ("7.0.1", "7.0.0", "6.4.3")
    assert h711.header_for("7.0.0") == h711.header_for("7.0.1") == "7.0.1/7.0.0"
    check = rocm_check(os_name=None, arch="gfx950", rocm="7.0", framework="llama.cpp=b6652")
    assert check.snapshot == H720 and check.rocm_column == "7.0.0"
    assert [(f.verdict, f.header, f.cell) for f in check.facts] == [
        (LISTED, "7.0.1/7.0.0", "gfx950"), (LISTED, "7.0.1/7.0.0", "b6652")]
    assert "ROCm 7.0.0 column '7.0.1/7.0.0': \"gfx950\"" in check.lines()[0]
    assert rocm_check(os_name=None, arch=None, rocm="7.0.1", framework="llama=b6652").facts[0].cell == "b6652"


def test_newest_snapshot_wins_where_snapshots_disagree() -> None:
    # Ray 2.51.1 is in the 7.0.1/7.0.0 column of the 7.1.1 snapshot, and N/A there in the 7.2.0 one.
    newest = rocm_check(os_name=None, arch=None, rocm="7.0.0", framework="ray=2.51.1").facts[0]
    assert (newest.verdict, newest.snapshot, newest.cell) == (NOT_LISTED, H720, "N/A")
    older = rocm_check(os_name=None, arch=None, rocm="7.0.0", framework="ray=2.51.1", snapshot=H711).facts[0]
    assert (older.verdict, older.snapshot, older.snapshot_date, older.cell) == (LISTED, H711, "2026-01-08", "2.51.1")


def test_sections_and_labels_including_the_renamed_driver_section() -> None:
    assert [(r.section, r.label) for r in snap(H600).rows_of("driver")] == [
        ("KMD & USER SPACE", "Tested user space versions")]
    assert [(r.section, r.label) for r in snap(H642).rows_of("driver")] == [("KMD & USER SPACE", "KMD versions")]
    assert [(r.section, r.label) for r in snap(H711).rows_of("driver")] == [("DRIVER & USER SPACE", "AMD GPU Driver")]
    assert {r.section for r in snap(H711).rows_of("framework")} == {"FRAMEWORK SUPPORT"}
    assert [r.label for r in snap(H711).rows_of("framework")] == [
        "PyTorch", "TensorFlow", "JAX", "verl", "Stanford Megatron-LM", "DGL", "Megablocks", "Ray", "llama.cpp",
        "FlashInfer", "ONNX Runtime"]
    assert "Taichi" in {r.label for r in snap(H642).rows_of("framework")}
    assert "Taichi" not in {r.label for r in snap(H711).rows_of("framework")}
    assert len(snap(H600).rows_of("os")) == 10 and len(snap(H711).rows_of("os")) == 11
    assert len(snap(RST).rows_of("os")) == 9  # no Ubuntu 20.04 / CentOS rows on the current page
    assert [r.label for r in snap(H600).rows_of("gpu")] == [GPU] * 5
    assert not any(".. _" in c for s in load_snapshots() for r in s.rows for c in r.cells.values())


def test_footnote_markers_kept_on_cells_and_labels() -> None:
    assert snap(H711).rows_of("os")[0].label_footnotes == ("[#os-compatibility-past-60]_",)
    assert snap(H711).rows_of("gpu")[0].label_footnotes == ("[#gpu-compatibility-past-60]_",)
    assert snap(H711).rows_of(label="verl")[0].label_footnotes == ("[#verl_compat-past-60]_",)
    assert snap(H642).rows_of(label="verl")[0].label_footnotes == ("[#verl_compat]_",)
    assert snap(RST).rows_of(label="llama.cpp")[0].label_footnotes == ("[#llama-cpp_compat]_",)
    check = rocm_check(os_name="Oracle Linux 8.9", arch="gfx942", rocm="6.2.0", framework=None, snapshot=H600)
    assert [(f.verdict, f.cell, f.footnotes) for f in check.facts] == [
        (LISTED, "Oracle Linux 8.9 [#mi300x-past-60]_", ("[#mi300x-past-60]_",)),
        (LISTED, "gfx942 [#mi300_620-past-60]_", ("[#mi300_620-past-60]_",))]
    assert "[#mi300_620-past-60]_" in check.lines()[1]


def test_footnotes_of_the_newest_snapshot_and_of_older_ones() -> None:
    arch = rocm_check(os_name=None, arch="gfx942", rocm="6.2.0", framework=None).facts[0]
    assert arch.snapshot == H720 and arch.cell == "gfx942"
    assert arch.footnotes == ("[#gpu-compatibility-past-60]_",)
    assert arch.other_footnotes == (f"[#mi300_620-past-60]_ ({H642})", f"[#mi300_620-past-60]_ ({H600})")
    tf = rocm_check(os_name=None, arch=None, rocm="7.0.2", framework="tensorflow=2.17.1").facts[0]
    assert tf.verdict == LISTED and tf.footnotes == ("[#tf-mi350-past-60]_",)
    assert dict(tf.footnote_text)["[#tf-mi350-past-60]_"].startswith("TensorFlow 2.17.1 is not supported on AMD")
    assert "not supported on AMD Instinct MI350" in rocm_check(
        os_name=None, arch=None, rocm="7.0.2", framework="tensorflow=2.17.1").lines()[0]
    dgl_note = "DGL is supported only on ROCm 7.0.0, ROCm 6.4.3 and ROCm 6.4.0."
    assert snap(RST).footnote_text["[#dgl_compat]_"] == dgl_note
    assert snap(H720).footnote_text == snap(RST).footnote_text  # same commit
    assert snap(H711).footnote_text == {} and snap(H600).footnote_text == {}


def test_br_in_rst_cells_is_a_line_and_list_separator() -> None:
    driver = snap(RST).rows_of(label="AMD GPU Driver")[0].cells["7.2.0"]
    assert "|br|" not in driver and driver.count("\n") == 2
    assert cell_items(driver) == ["30.30.0", "30.20.1", "30.20.0", "30.10.2", "30.10.1", "30.10", "6.4.x"]
    assert cell_items("2.5|br|2.4") == ["2.5", "2.4"] == cell_items("2.5 |br| 2.4")
    assert cell_items("2.4, 2.3, 2.2") == ["2.4", "2.3", "2.2"]
    assert not any("|br|" in c for r in snap(RST).rows for c in r.cells.values())


def test_rst_parser_reads_only_the_inline_table() -> None:
    text = (
        ".. |br| raw:: html\n\n   <br/>\n\n"
        "  .. csv-table::\n      :header: \"ROCm Version\", \"9.1.0\", \"9.0.0\"\n      :stub-columns: 1\n\n"
        "      :doc:`PyTorch <x>` [#pt]_,\"2.9|br|2.8\",2.7\n      ,,\n\n"
        ".. csv-table::\n   :file: other.csv\n\n.. [#pt] Note on PyTorch.\n"
    )
    parsed = parse_rst(text, file="t.rst", date="2030-01-01")
    assert parsed.versions == ("9.1.0", "9.0.0")
    assert [(r.label, r.label_footnotes, dict(r.cells)) for r in parsed.rows] == [
        ("PyTorch", ("[#pt]_",), {"9.1.0": "2.9\n2.8", "9.0.0": "2.7"})]
    assert parsed.footnote_text == {"[#pt]_": "Note on PyTorch."}
    with pytest.raises(RocmCheckError):
        parse_rst(".. csv-table::\n   :file: other.csv\n", file="t.rst", date="2030-01-01")


def test_short_rows_leave_no_cell_and_give_no_snapshot_entry() -> None:
    dgl = snap(H642).rows_of(label="DGL")[0]
    assert "6.0.2" in dgl.cells and "6.0.0" not in dgl.cells
    fact = rocm_check(os_name=None, arch=None, rocm="6.0.0", framework="dgl=2.4.0", snapshot=H642).facts[0]
    assert (fact.verdict, fact.cell, fact.snapshot) == (NO_ENTRY, None, H642)
    assert "no cell" in fact.detail


def test_arch_suffix_is_stripped() -> None:
    fact = rocm_check(os_name=None, arch="gfx942:sramecc+:xnack-", rocm="6.2.0", framework=None).facts[0]
    assert (fact.verdict, fact.key, fact.asked, fact.cell) == (LISTED, "gfx942", "gfx942:sramecc+:xnack-", "gfx942")
    assert fact.line().startswith("arch: gfx942:sramecc+:xnack- (gfx942) — listed (")
    gfx90a = rocm_check(os_name=None, arch="gfx90a:xnack-", rocm="6.0.0", framework=None).facts[0]
    assert gfx90a.verdict == LISTED
    cdna = rocm_check(os_name=None, arch="cdna4", rocm="7.0.0", framework=None).facts[0]
    assert (cdna.verdict, cdna.key, cdna.cell) == (LISTED, "CDNA4", "CDNA4")
    rdna4 = rocm_check(os_name=None, arch="gfx1201", rocm="6.3.3", framework=None).facts[0]
    assert rdna4.verdict == NOT_LISTED and "gfx1201" not in (rdna4.cell or "") and "gfx942" in (rdna4.cell or "")


@pytest.mark.parametrize(("hip", "rocm"), [
    ("6.2.41133-dd7f95766", "6.2"),  # torch.version.hip of a ROCm 6.2 wheel; HIP row: 6.2.0
    ("6.2.41134", "6.2"),  # shared by ROCm 6.2.1, 6.2.2 and 6.2.4
    ("6.1.32830", "6.0"),  # the matrix lists this HIP version under ROCm 6.0.0
    ("6.0.32830-d62f6a171", "6.0"),  # not in any HIP row: HIP major.minor
    ("7.1.52802", "7.1"),
    ("6.4.43484", "6.4"),
])
def test_hip_to_rocm_mapping(hip: str, rocm: str) -> None:
    assert rocm_from_hip(hip) == rocm


def test_hip_version_given_as_rocm_is_refused_and_mapped_version_uses_x_y_0_column() -> None:
    with pytest.raises(RocmCheckError, match="looks like a HIP version") as err:
        rocm_check(os_name="Ubuntu 22.04", arch=None, rocm="6.2.41133", framework=None)
    assert err.value.hint and "rocm_from_hip" in err.value.hint
    check = rocm_check(os_name="Ubuntu 22.04", arch=None, rocm=rocm_from_hip("6.2.41133-dd7f95766"), framework=None)
    assert (check.rocm, check.rocm_column, check.facts[0].cell) == ("6.2", "6.2.0", "Ubuntu 22.04.5, 22.04.4")


@pytest.mark.parametrize(("framework", "rocm", "verdict", "cell_text"), [
    ("pytorch=2.9.1", "7.1.1", LISTED, "2.9, 2.8, 2.7"),  # 2.9.1 listed by a cell that says 2.9
    ("torch==2.9.1+rocm7.1", "7.1.1", LISTED, "2.9, 2.8, 2.7"),
    ("pytorch=2.9.1", "7.2.0", LISTED, "2.9.1, 2.8.0, 2.7.1"),
    ("pytorch=2.9.0", "7.2.0", NOT_LISTED, "2.9.1, 2.8.0, 2.7.1"),
    ("pytorch=2.6.0", "7.1.1", NOT_LISTED, "2.9, 2.8, 2.7"),
    ("pytorch=2.3.1", "6.2", LISTED, "2.3, 2.2, 2.1, 2.0, 1.13"),
    ("pytorch=2.4.1", "6.2.4", NOT_LISTED, "2.3, 2.2, 2.1, 2.0, 1.13"),
    ("pytorch=1.13.1", "6.0.0", LISTED, "2.1, 2.0, 1.13"),
    ("tensorflow=2.17", "6.3.0", LISTED, "2.17.0, 2.16.2, 2.15.1"),
    ("verl=0.3.0.post0", "6.2.0", LISTED, "0.3.0.post0"),
    ("verl=0.3.0", "6.2.0", NOT_LISTED, "0.3.0.post0"),
    ("verl=0.6.0", "7.2.0", NOT_LISTED, "N/A"),
    ("llama.cpp=b6652", "7.0.0", LISTED, "b6652"),
    ("llama.cpp=b6356", "7.0.0", NOT_LISTED, "b6652"),
    ("megatron=85f95ae", "6.3.0", LISTED, "85f95ae"),
    ("flashinfer=0.2.5", "6.4.1", LISTED, "v0.2.5"),
    ("onnxruntime=1.23.2", "7.2.0", LISTED, "1.23.2"),
])
def test_framework_version_granularity(framework: str, rocm: str, verdict: str, cell_text: str) -> None:
    fact = rocm_check(os_name=None, arch=None, rocm=rocm, framework=framework).facts[0]
    assert (fact.verdict, fact.cell, fact.snapshot) == (verdict, cell_text, H720)


@pytest.mark.parametrize(("os_name", "rocm", "verdict", "cell_text"), [
    ("Ubuntu 22.04", "6.2.0", LISTED, "Ubuntu 22.04.5, 22.04.4"),
    ("Ubuntu 22.04.3", "6.2.0", NOT_LISTED, "Ubuntu 24.04; Ubuntu 22.04.5, 22.04.4"),
    ("Ubuntu 20.04", "6.2.0", NOT_LISTED, "Ubuntu 24.04; Ubuntu 22.04.5, 22.04.4"),
    ("Ubuntu 20.04.6", "6.1.2", LISTED, "Ubuntu 20.04.6, 20.04.5"),
    ("Red Hat Enterprise Linux 9.4 (Plow)", "6.2.0", LISTED, "RHEL 9.4, 9.3"),
    ("RHEL 10.1", "7.1.0", NOT_LISTED, "RHEL 10.0, 9.6, 9.4; RHEL 8.10"),
    ("SUSE Linux Enterprise Server 15 SP6", "6.2.0", LISTED, "SLES 15 SP6, SP5"),
    ("SLES 15.6", "7.2.0", NOT_LISTED, "SLES 15 SP7"),
    ("Oracle Linux Server 8.10", "7.0.0", LISTED, "Oracle Linux 9, 8"),
    ("Debian GNU/Linux 13 (trixie)", "7.1.0", LISTED, "Debian 13, 12"),
    ("Rocky Linux 9.5 (Blue Onyx)", "7.2.0", LISTED, "Rocky Linux 9"),
    ("Azure Linux 3.0", "7.2.0", NOT_LISTED, None),
    ("CentOS Linux 7 (Core)", "6.1.0", LISTED, "CentOS 7.9"),
])
def test_os_verdicts(os_name: str, rocm: str, verdict: str, cell_text: str | None) -> None:
    fact = rocm_check(os_name=os_name, arch=None, rocm=rocm, framework=None).facts[0]
    assert fact.verdict == verdict and fact.snapshot == H720
    if cell_text is not None:
        assert fact.cell == cell_text


def test_not_listed_os_names_what_the_column_lists() -> None:
    check = rocm_check(os_name="Fedora 40", arch="gfx942", rocm="7.2.0", framework=None)
    os_fact = check.facts[0]
    assert (os_fact.verdict, os_fact.detail) == (NOT_LISTED, "no Fedora in this column")
    assert os_fact.cell is not None and os_fact.cell.startswith("Ubuntu 24.04.3; Ubuntu 22.04.5; RHEL 10.1")
    assert check.facts[1].verdict == LISTED and check.exit_code == 1
    centos = rocm_check(os_name="CentOS 7.9", arch=None, rocm="6.2.0", framework=None).facts[0]
    assert (centos.verdict, centos.detail) == (NOT_LISTED, "no CentOS in this column")


@pytest.mark.parametrize("rocm", ["5.7.1", "6.1.3", "7.3", "8.0.0"])
def test_rocm_version_in_no_snapshot(rocm: str) -> None:
    check = rocm_check(os_name="Ubuntu 22.04", arch="gfx942", rocm=rocm, framework="pytorch=2.3")
    assert check.snapshot is None and check.exit_code == 1 and check.verdict == NO_ENTRY
    assert [f.verdict for f in check.facts] == [NO_ENTRY] * 3
    assert all(f.cell is None and "no shipped snapshot has a ROCm" in f.line() for f in check.facts)


def test_newest_snapshot_containing_the_version_is_used_and_named() -> None:
    assert rocm_check(os_name="Ubuntu 22.04", arch=None, rocm="6.0.0", framework=None).snapshot == H720
    assert rocm_check(os_name="Ubuntu 22.04", arch=None, rocm="6.4.0", framework=None).snapshot == H720
    via_page = rocm_check(os_name="Ubuntu 22.04", arch=None, rocm="6.4.0", framework=None, snapshot=RST)
    assert (via_page.snapshot, via_page.facts[0].verdict, via_page.facts[0].cell) == (RST, LISTED, "Ubuntu 22.04.5")
    no_col = rocm_check(os_name="Ubuntu 22.04", arch=None, rocm="6.1.5", framework=None, snapshot=H600).facts[0]
    assert (no_col.verdict, no_col.snapshot) == (NO_ENTRY, H600)
    taichi = rocm_check(os_name=None, arch=None, rocm="6.3.2", framework="taichi=1.8.0b1").facts[0]
    assert (taichi.verdict, taichi.snapshot, taichi.detail) == (NO_ENTRY, H720, "no Taichi row")
    old = rocm_check(os_name=None, arch=None, rocm="6.3.2", framework="taichi=1.8.0b1", snapshot=H642).facts[0]
    assert (old.verdict, old.cell, old.footnotes) == (LISTED, "1.8.0b1", ("[#taichi_compat]_",))
    ray_page = rocm_check(os_name=None, arch=None, rocm="7.2.0", framework="ray=2.51.1", snapshot=RST).facts[0]
    assert ray_page.verdict == NO_ENTRY


def test_lines_and_exit_codes() -> None:
    good = rocm_check(os_name="Ubuntu 22.04", arch="gfx942:sramecc+:xnack-", rocm="6.2.0", framework="pytorch=2.3.1")
    assert good.exit_code == 0 and good.verdict == LISTED
    assert good.lines()[0].startswith(
        f'os: Ubuntu 22.04 — listed ({H720}, 2026-01-21; ROCm 6.2.0 column: "Ubuntu 22.04.5, 22.04.4"; footnotes: '
        "[#os-compatibility-past-60]_ (Some operating systems are supported on specific GPUs.")
    assert good.lines()[2] == (
        f'framework: pytorch=2.3.1 (PyTorch 2.3.1) — listed ({H720}, 2026-01-21; ROCm 6.2.0 column: '
        '"2.3, 2.2, 2.1, 2.0, 1.13")')
    bad = rocm_check(os_name="Ubuntu 22.04", arch="gfx1201", rocm="6.2.0", framework=None)
    assert bad.exit_code == 1 and bad.verdict == NOT_LISTED
    assert {f.verdict for c in (good, bad) for f in c.facts} <= {LISTED, NOT_LISTED, NO_ENTRY}
    assert RocmCheckError.exit_code == 2 and issubclass(RocmCheckError, IteraError)


def test_to_dict_is_json_ready() -> None:
    data = rocm_check(os_name=None, arch=None, rocm="7.0.2", framework="tensorflow=2.17.1").to_dict()
    assert json.loads(json.dumps(data)) == data
    assert (data["snapshot"], data["snapshot_date"], data["rocm_column"], data["exit_code"]) == (
        H720, "2026-01-21", "7.0.2", 0)
    fact = data["facts"][0]
    assert (fact["fact"], fact["verdict"], fact["footnotes"]) == ("framework", LISTED, ["[#tf-mi350-past-60]_"])
    assert fact["cell"] == "2.19.1, 2.18.1, 2.17.1 [#tf-mi350-past-60]_"
    assert list(fact["footnote_text"]) == ["[#tf-mi350-past-60]_"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rocm": ""}, "ROCm version '' is not like 6.2.0"),
    ({"rocm": "six"}, "ROCm version 'six' is not like 6.2.0"),
    ({"rocm": "6"}, "ROCm version '6' is not like 6.2.0"),
    ({"rocm": "6.2", "os_name": ""}, "OS name is empty"),
    ({"rocm": "6.2", "os_name": "Ubuntu"}, "OS 'Ubuntu' has no version"),
    ({"rocm": "6.2", "arch": ""}, "GPU architecture '' is not an AMD LLVM target"),
    ({"rocm": "6.2", "arch": "sm_90"}, "GPU architecture 'sm_90' is not an AMD LLVM target"),
    ({"rocm": "6.2", "framework": "pytorch"}, "framework 'pytorch' is not like pytorch=2.3"),
    ({"rocm": "6.2", "framework": ""}, "framework '' is not like pytorch=2.3"),
    ({"rocm": "6.2", "framework": "caffe=1.0"}, "framework 'caffe' is not in any ROCm snapshot"),
    ({"rocm": "6.2", "framework": "pytorch=latest"}, "framework version 'latest' is not a version"),
    ({"rocm": "6.2"}, "nothing to check"),
    ({"rocm": "6.2", "os_name": "Ubuntu 22.04", "snapshot": "x.csv"}, "no ROCm snapshot named 'x.csv'"),
])
def test_bad_input_raises_one_line_error_with_hint(kwargs: dict[str, str], message: str) -> None:
    args = {"os_name": None, "arch": None, "framework": None, **kwargs}
    with pytest.raises(RocmCheckError) as err:
        rocm_check(**args)  # type: ignore[arg-type]
    assert str(err.value) == message and "\n" not in str(err.value)
    assert err.value.hint and "\n" not in err.value.hint


def test_unknown_framework_hint_lists_known_names() -> None:
    with pytest.raises(RocmCheckError) as err:
        rocm_check(os_name=None, arch=None, rocm="6.2", framework="caffe=1.0")
    assert err.value.hint is not None and "PyTorch" in err.value.hint and "Taichi" in err.value.hint


@pytest.mark.parametrize("hip", ["", "abc", "6.2", "6.2.x"])
def test_bad_hip_version(hip: str) -> None:
    with pytest.raises(RocmCheckError, match="is not like 6.2.41133"):
        rocm_from_hip(hip)


OS_RELEASE = 'NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\n'


def test_os_name_from_release() -> None:
    assert os_name_from_release(OS_RELEASE) == "Ubuntu 22.04.4 LTS"
    assert os_name_from_release('NAME="Rocky Linux"\nVERSION_ID="9.5"\n') == "Rocky Linux 9.5"
    assert os_name_from_release("Debian 12") == "Debian 12"


def test_observed_verdict_not_a_rocm_runtime() -> None:
    assert observed_rocm_verdict(None, None, "gfx942", OS_RELEASE) == {
        "verdict": "not applicable", "reason": "not a ROCm runtime"}


def test_observed_verdict_from_hip_arch_and_os_release() -> None:
    out = observed_rocm_verdict("6.2.41133-dd7f95766", None, "gfx90a:sramecc+:xnack-", OS_RELEASE)
    assert (out["verdict"], out["exit_code"], out["rocm"], out["rocm_column"]) == (LISTED, 0, "6.2", "6.2.0")
    assert (out["snapshot"], out["snapshot_date"], out["rocm_source"]) == (H720, "2026-01-21", "hip_version")
    assert [(f["fact"], f["key"], f["verdict"], f["cell"]) for f in out["facts"]] == [
        ("os", "Ubuntu 22.04.4", LISTED, "Ubuntu 22.04.5, 22.04.4"), ("arch", "gfx90a", LISTED, "gfx90a")]


def test_observed_verdict_prefers_the_rocm_release() -> None:
    out = observed_rocm_verdict("6.2.41134", "6.2.4-120", "gfx1201", None, framework="torch=2.3.0+rocm6.2.4")
    assert (out["rocm_column"], out["rocm_source"], out["verdict"], out["exit_code"]) == (
        "6.2.4", "rocm_version", NOT_LISTED, 1)
    assert [(f["fact"], f["verdict"]) for f in out["facts"]] == [("arch", NOT_LISTED), ("framework", LISTED)]
    nothing = observed_rocm_verdict("7.1.52802", None, None, None)
    assert (nothing["verdict"], nothing["rocm"]) == (NO_ENTRY, "7.1")
    with pytest.raises(RocmCheckError):
        observed_rocm_verdict("not-a-version", None, "gfx942", None)
