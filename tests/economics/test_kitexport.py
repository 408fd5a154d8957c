import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iteralab.cli import main
from iteralab.errors import ProtocolError
from iteralab.economics.kitexport import KIT_FILES, KitError, export_kit, kit_source, missing_files
from iteralab.plan.protocol import check_series, parse_protocol
from iteralab.plan.lockfile import lock
from iteralab.plan.schedule import schedule_slots
from iteralab.evidence.table import COLUMNS

KIT_DIR = Path(__file__).resolve().parents[2] / "src" / "iteralab" / "kit"
FILLED = {
    "PROTOCOL_NAME": '"reviews-batch-size"',
    "QUESTION": '"Which configuration classifies all 1,000 texts with macro-F1 >= 0.80 before the deadline, '
                'for the lowest committed budget?"',
    "CORPUS_PATH": '"final.csv"',
    "CLASSES": '["plot", "fresh", "rotten"]',
    "MODEL_PATH": '"package:some_model_package/model"',
    "METRIC": '"macro_f1"',
    "THRESHOLD": "0.80",
    "TOLERANCE": "0.01",
    "TIMEZONE": '"Europe/Paris"',
    "DEADLINE": '"2026-10-09T09:00"',
}
#: Cells of the raw-table template that are planned before any run; every other cell must stay empty.
PLANNED = {"pass_id", "variant", "series", "round", "position", "attempt", "seed", "batch_size", "precision",
           "data_parallel", "engine",
           "bucketing", "padding", "resume", "compile"}


def _filled_template() -> str:
    text = (KIT_DIR / "protocole-qualite.toml").read_text(encoding="utf-8")
    return re.sub(r"<<([A-Z_]+)>>", lambda m: FILLED[m.group(1)], text)


def test_every_declared_kit_file_is_shipped():
    assert missing_files() == (), f"declared in KIT_FILES but not shipped in src/iteralab/kit/: {missing_files()}"


def test_export_copies_the_shipped_files_byte_for_byte(tmp_path):
    result = export_kit(tmp_path / "kit")
    assert result.written == tuple(n for n in KIT_FILES if n not in result.missing)
    for name in result.written:
        exported = (tmp_path / "kit" / name).read_bytes()
        assert exported == kit_source(name).read_bytes() == (KIT_DIR / name).read_bytes(), name
    assert sorted(p.name for p in (tmp_path / "kit").iterdir()) == sorted(result.written)


def test_export_refuses_a_non_empty_folder_unless_forced(tmp_path, capsys):
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "mine.txt").write_text("keep me")
    with pytest.raises(KitError, match="not empty"):
        export_kit(folder)
    assert main(["kit", "export", str(folder)]) == 2
    assert "Error: " in capsys.readouterr().err
    (folder / "README.md").write_text("old")
    assert main(["kit", "export", str(folder), "--force"]) == 0
    assert f"kit written to {folder}" in capsys.readouterr().out
    assert (folder / "README.md").read_bytes() == (KIT_DIR / "README.md").read_bytes()
    assert (folder / "mine.txt").read_text() == "keep me"


def test_exported_calculator_runs_from_the_kit_folder(tmp_path):
    export_kit(tmp_path / "kit")
    proc = subprocess.run([sys.executable, "calcul_forfaits.py", "--gpu", "rtx-4090", "--days", "7", "--lots", "2"],
                          cwd=tmp_path / "kit", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "220.00 USD" in proc.stdout


def test_protocol_template_refuses_until_filled_then_parses_and_locks(tmp_path):
    text = (KIT_DIR / "protocole-qualite.toml").read_text(encoding="utf-8")
    assert set(re.findall(r"<<([A-Z_]+)>>", text)) == set(FILLED)
    with pytest.raises(ProtocolError, match="not valid TOML"):
        parse_protocol(text, "protocole-qualite.toml")
    protocol = parse_protocol(_filled_template(), "filled")
    check_series(protocol)
    assert protocol.metric.threshold == 0.80 and protocol.scenario == "offline"
    assert protocol.metric.reference_variant in [v.name for v in protocol.variants]
    path = tmp_path / "protocole-qualite.toml"
    path.write_text(_filled_template(), encoding="utf-8")
    assert lock(path).version == 1


def test_raw_table_template_has_the_table_columns_and_empty_performance_cells():
    with open(KIT_DIR / "tableau-brut.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == COLUMNS
    records = [dict(zip(rows[0], r)) for r in rows[1:]]
    for record in records:
        assert len(record) == len(COLUMNS)
        assert {k for k, v in record.items() if v} <= PLANNED, record["pass_id"]
    # the rows are the filled template protocol's rotated schedule, one attempt each
    _, slots = schedule_slots(parse_protocol(_filled_template(), "filled"))
    assert [(int(r["round"]), int(r["position"]), r["variant"]) for r in records] == \
        [(s.round, s.position, s.variant) for s in slots]


def test_kit_texts_say_what_the_kit_is_not_and_how_to_run_it():
    readme = (KIT_DIR / "README.md").read_text(encoding="utf-8").lower()
    assert "not a measured comparison" in readme and "not an observed saving" in readme
    instructions = (KIT_DIR / "INSTRUCTIONS.md").read_text(encoding="utf-8")
    assert "Python ≥ 3.10" in instructions
    for name in ("calcul_forfaits.py", "memoire.py", "memoire.ipynb", "protocole-qualite.toml", "tableau-brut.csv"):
        assert name in instructions
    assert "MIT License" in (KIT_DIR / "LICENSE").read_text(encoding="utf-8")
