"""The kit calculator: worked examples, golden outputs, exact error lines, standalone run (K2–K4, K8)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iteralab.kit import calcul_forfaits as kit

KIT_DIR = Path(kit.__file__).parent
GOLDEN = (Path(__file__).resolve().parents[1] / "support") / "golden" / "kit"
UPDATE = os.environ.get("ITERALAB_UPDATE_GOLDEN") == "1"
HEADER = ",".join(kit.COLUMNS)


def run_kit(argv, capsys):
    code = kit.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; set ITERALAB_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------- shipped catalog


def test_shipped_catalog_is_the_known_snapshot_and_nothing_more():
    catalog = kit.load_catalog()
    assert catalog.date.isoformat() == "2026-09-24"
    assert catalog.currency == "USD"
    rows = sorted((e.gpu_id, e.gpu_name, e.cards_per_lot, e.package_days, e.price_per_lot) for e in catalog.entries)
    assert rows == [
        ("b200", "NVIDIA B200", 2, 7, kit.Decimal("2071.00")),
        ("rtx-4090", "NVIDIA GeForce RTX 4090", 1, 7, kit.Decimal("110.00")),
    ]


# ------------------------------------------------------------------------------------- worked examples


def test_rtx_4090_two_lots_is_220_usd_for_two_gpus(capsys):
    code, out, err = run_kit(["--gpu", "rtx-4090", "--days", "7", "--lots", "2"], capsys)
    assert (code, err) == (0, "")
    assert "package price: 220.00 USD for 2 GPUs (2 lots x 110.00 USD)" in out.splitlines()
    assert "cost per verified result" not in out


def test_one_b200_lot_is_2071_usd_for_two_cards(capsys):
    code, out, _ = run_kit(["--gpu", "b200", "--days", "7", "--lots", "1"], capsys)
    assert code == 0
    assert "package price: 2071.00 USD for 2 GPUs (1 lot x 2071.00 USD)" in out.splitlines()


def test_amounts_have_no_thousands_separator(capsys):
    code, out, _ = run_kit(["--gpu", "b200", "--days", "7", "--lots", "10"], capsys)
    assert code == 0
    assert "package price: 20710.00 USD for 20 GPUs (10 lots x 2071.00 USD)" in out.splitlines()


def test_zero_accepted_results_is_undefined_and_the_spend_remains(capsys):
    code, out, _ = run_kit(["--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--accepted-results", "0"], capsys)
    assert code == 0
    assert out.splitlines()[-1] == (
        "cost per verified result: undefined: 0 accepted results; the committed spend of 220.00 USD remains"
    )


def test_window_of_96_hours_exceeds_3_days_and_fits_7(capsys):
    code, out, _ = run_kit(["--gpu", "rtx-4090", "--hours", "96"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert "  3 days (72 h): does not cover the window, not in catalog" in lines
    assert "  7 days (168 h): covers the window, 110.00 USD" in lines
    assert "  30 days (720 h): covers the window, not in catalog" in lines


GOLDEN_CASES = {
    "rtx4090_7d_2lots": ["--gpu", "rtx-4090", "--days", "7", "--lots", "2"],
    "b200_7d_1lot": ["--gpu", "b200", "--days", "7", "--lots", "1"],
    "rtx4090_7d_2lots_0results": ["--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--accepted-results", "0"],
    "rtx4090_7d_2lots_3results": ["--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--accepted-results", "3"],
    "rtx4090_96h": ["--gpu", "rtx-4090", "--hours", "96"],
    "b200_200h_2lots_extra_periods": ["--gpu", "b200", "--hours", "200", "--lots", "2"],
    "b200_paris_spring_window": [
        "--gpu", "b200", "--days", "7", "--start", "2026-03-26T09:00", "--end", "2026-03-30T09:00",
        "--tz", "Europe/Paris", "--label", "observed",
    ],
    "b200_ambiguous_end": [
        "--gpu", "b200", "--start", "2026-10-22T09:00", "--end", "2026-10-25T02:30", "--tz", "Europe/Paris",
    ],
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_output_matches_golden(name, capsys):
    code, out, err = run_kit(GOLDEN_CASES[name], capsys)
    assert (code, err) == (0, "")
    check_golden(name, out)


def test_json_output(capsys):
    code, out, _ = run_kit(["--gpu", "b200", "--days", "7", "--accepted-results", "2", "--hours", "96", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["budget"]["total"] == "2071.00"
    assert data["budget"]["cards"] == 2
    assert data["cost_per_result"]["per_result"] == "1035.50"
    assert data["catalog"] == {"path": "tarifs-forfaits.csv", "version": "1", "date": "2026-09-24", "currency": "USD"}
    assert [(p["package_days"], p["covers"], p["price_per_lot"]) for p in data["window"]["packages"]] == [
        (3, False, None), (7, True, "2071.00"), (30, True, None)
    ]
    assert data["window"]["label"] == "planned"


def test_json_zero_results_has_no_number(capsys):
    code, out, _ = run_kit(["--gpu", "b200", "--days", "7", "--accepted-results", "0", "--json"], capsys)
    cost = json.loads(out)["cost_per_result"]
    assert cost["per_result"] is None
    assert cost["statement"].startswith("undefined")


# -------------------------------------------------------------------------------- exact error lines

ERROR_CASES = [
    (
        ["--gpu", "h100", "--days", "7"],
        "error: unknown GPU 'h100' in catalog tarifs-forfaits.csv; known GPUs: b200, rtx-4090; "
        "hint: pass one of the known GPU ids, or --catalog with your own price list",
    ),
    (
        ["--gpu", "b200", "--days", "3"],
        "error: no 3-day package for 'b200' in catalog tarifs-forfaits.csv; available days: 7; "
        "hint: prices that are not in the catalog are never invented",
    ),
    (
        ["--gpu", "rtx-4090", "--days", "30", "--lots", "2"],
        "error: no 30-day package for 'rtx-4090' in catalog tarifs-forfaits.csv; available days: 7; "
        "hint: prices that are not in the catalog are never invented",
    ),
    (["--gpu", "b200", "--days", "7", "--lots", "0"], "error: --lots must be a whole number of at least 1, got '0'; hint: see --help"),
    (["--gpu", "b200", "--days", "7", "--lots", "-3"], "error: --lots must be a whole number of at least 1, got '-3'; hint: see --help"),
    (["--gpu", "b200", "--days", "7", "--lots", "1.5"], "error: --lots must be a whole number of at least 1, got '1.5'; hint: see --help"),
    (
        ["--gpu", "b200", "--days", "7", "--accepted-results", "2.5"],
        "error: --accepted-results must be a whole number of at least 0, got '2.5'; hint: see --help",
    ),
    (
        ["--gpu", "b200", "--days", "7", "--accepted-results", "-1"],
        "error: --accepted-results must be a whole number of at least 0, got '-1'; hint: see --help",
    ),
    (
        ["--gpu", "b200", "--days", "7", "--accepted-results", "two"],
        "error: --accepted-results must be a whole number of at least 0, got 'two'; hint: see --help",
    ),
    (["--gpu", "b200", "--days", "seven"], "error: --days must be a whole number of at least 1, got 'seven'; hint: see --help"),
    (
        ["--gpu", "b200", "--start", "2026-03-27T09:00", "--end", "2026-03-23T09:00", "--tz", "Europe/Paris"],
        "error: end 2026-03-23T09:00:00+01:00 is not after start 2026-03-27T09:00:00+01:00; "
        "hint: swap them or fix the dates",
    ),
    (
        ["--gpu", "b200", "--start", "2026-03-23T09:00", "--end", "2026-03-27T09:00", "--tz", "Mars/Olympus"],
        "error: unknown time zone 'Mars/Olympus'; hint: use an IANA zone name such as Europe/Paris or America/New_York",
    ),
    (
        ["--gpu", "b200", "--start", "2026-03-29T02:30", "--end", "2026-03-30T09:00", "--tz", "Europe/Paris"],
        "error: start 2026-03-29T02:30:00 does not exist in Europe/Paris (clocks go forward then); "
        "hint: pick a time outside the skipped hour",
    ),
    (
        ["--gpu", "b200", "--start", "23/03/2026", "--end", "2026-03-30T09:00", "--tz", "UTC"],
        "error: start '23/03/2026' is not an ISO date-time; hint: write it as YYYY-MM-DDTHH:MM",
    ),
    (
        ["--gpu", "b200", "--start", "2026-03-23T09:00+01:00", "--end", "2026-03-30T09:00", "--tz", "UTC"],
        "error: start 2026-03-23T09:00+01:00 carries its own UTC offset; "
        "hint: give the local wall-clock time and the zone separately",
    ),
    (
        ["--gpu", "b200", "--start", "2026-03-23T09:00", "--end", "2026-03-30T09:00"],
        "error: --start, --end and --tz go together; hint: e.g. --start 2026-03-23T09:00 --end ... --tz UTC",
    ),
    (["--gpu", "b200", "--hours", "0"], "error: window hours '0' must be a positive number; hint: e.g. --hours 96"),
    (["--gpu", "b200", "--hours", "lots"], "error: window hours 'lots' is not a number; hint: e.g. --hours 96"),
    (
        ["--gpu", "b200", "--hours", "96", "--label", "guessed"],
        "error: window label 'guessed' is not one of planned, projected, observed; hint: e.g. planned",
    ),
    (
        ["--gpu", "b200"],
        "error: nothing to compute; hint: give --days for a package price, or a window (--hours, or --start/--end/--tz)",
    ),
    (
        ["--gpu", "b200", "--hours", "96", "--accepted-results", "1"],
        "error: --accepted-results needs --days; hint: the cost per result divides a package price",
    ),
    (["--days", "7"], "error: the following arguments are required: --gpu; hint: see --help"),
    (["--gpu", "b200", "--days", "7", "--weeks", "1"], "error: unrecognized arguments: --weeks 1; hint: see --help"),
]


@pytest.mark.parametrize("argv,line", ERROR_CASES, ids=[" ".join(a) for a, _ in ERROR_CASES])
def test_bad_input_is_one_exact_line_and_exit_2(argv, line, capsys):
    code, out, err = run_kit(argv, capsys)
    assert code == 2
    assert out == ""
    assert err == line + "\n"


# --------------------------------------------------------------------------------- malformed catalogs

GOOD_ROW = "1,2026-09-24,rtx-4090,NVIDIA GeForce RTX 4090,1,7,110.00,USD"

CATALOG_CASES = [
    ("", "error: {f}: empty file; hint: the first line names the columns: " + HEADER),
    (
        "catalog_version,catalog_date,gpu_id,gpu_name,cards_per_lot,package_days,currency\n1,2026-09-24,a,A,1,7,USD\n",
        "error: {f} line 1: missing column price_per_lot; hint: the columns are: " + HEADER,
    ),
    (HEADER + "\n", "error: {f}: no price rows after the header; hint: add one row per GPU and package length"),
    (
        HEADER + "\n" + GOOD_ROW + "\n1,2026-09-24,b200,NVIDIA B200,2,7,-5,USD\n",
        "error: {f} line 3, field price_per_lot: '-5' is negative; hint: a price per lot is 0 or more",
    ),
    (
        HEADER + "\n" + GOOD_ROW + '\n1,2026-09-24,b200,NVIDIA B200,2,7,"2,071.00",USD\n',
        "error: {f} line 3, field price_per_lot: '2,071.00' is not a number; hint: write the price of one lot "
        "with a dot and at most two decimals, no thousands separator",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,7,abc,USD\n",
        "error: {f} line 2, field price_per_lot: 'abc' is not a number; hint: write the price of one lot "
        "with a dot and at most two decimals, no thousands separator",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,7,NaN,USD\n",
        "error: {f} line 2, field price_per_lot: 'NaN' is not a finite number; hint: write the price of one lot "
        "with a dot and at most two decimals, no thousands separator",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,7,2071.005,USD\n",
        "error: {f} line 2, field price_per_lot: '2071.005' has more than two decimals; hint: write the price of "
        "one lot with a dot and at most two decimals, no thousands separator",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,0,7,2071.00,USD\n",
        "error: {f} line 2, field cards_per_lot: '0' is not a positive whole number; hint: write cards_per_lot as 1, 2, 3 ...",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,7.5,2071.00,USD\n",
        "error: {f} line 2, field package_days: '7.5' is not a positive whole number; hint: write package_days as 1, 2, 3 ...",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,-7,2071.00,USD\n",
        "error: {f} line 2, field package_days: '-7' is not a positive whole number; hint: write package_days as 1, 2, 3 ...",
    ),
    (
        HEADER + "\n" + GOOD_ROW + "\n" + GOOD_ROW.replace("110.00", "99.00") + "\n",
        "error: {f} line 3: duplicate entry for gpu_id 'rtx-4090' and package_days 7 (first on line 2); "
        "hint: keep one price per GPU and package length",
    ),
    (
        HEADER + "\n" + GOOD_ROW + "\n1,2026-09-24,b200,NVIDIA B200,2,7,1900.00,EUR\n",
        "error: {f} line 3, field currency: 'EUR' differs from 'USD' on line 2; "
        "hint: one catalog file holds one snapshot (one version, one date) in one currency",
    ),
    (
        HEADER + "\n" + GOOD_ROW + "\n2,2026-09-24,b200,NVIDIA B200,2,7,2071.00,USD\n",
        "error: {f} line 3, field catalog_version: '2' differs from '1' on line 2; "
        "hint: one catalog file holds one snapshot (one version, one date) in one currency",
    ),
    (
        HEADER + "\n" + GOOD_ROW + "\n1,2026-10-01,b200,NVIDIA B200,2,7,2071.00,USD\n",
        "error: {f} line 3, field catalog_date: '2026-10-01' differs from '2026-09-24' on line 2; "
        "hint: one catalog file holds one snapshot (one version, one date) in one currency",
    ),
    (
        HEADER + "\n1,24/09/2026,b200,NVIDIA B200,2,7,2071.00,USD\n",
        "error: {f} line 2, field catalog_date: '24/09/2026' is not a date; hint: write it as YYYY-MM-DD",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,7,2071.00\n",
        "error: {f} line 2: 7 fields where the header has 8; hint: one value per column, commas only between values",
    ),
    (
        HEADER + "\n1,2026-09-24,b200,NVIDIA B200,2,7,2071.00,usd\n",
        "error: {f} line 2, field currency: 'usd' is not a currency code; hint: use ISO 4217, e.g. USD",
    ),
    (
        HEADER + "\n1,2026-09-24,,NVIDIA B200,2,7,2071.00,USD\n",
        "error: {f} line 2, field gpu_id: '' is empty; hint: fill in gpu_id",
    ),
    (  # a record whose quoted name spans lines is named by the line where it starts (as the corpus readers do)
        HEADER + '\n1,2026-09-24,rtx-4090,"NVIDIA GeForce\nRTX 4090",1,7,110.00,USD\n'
        '1,2026-09-24,b200,"NVIDIA\nB200",2,7,2071.00,usd\n',
        "error: {f} line 4, field currency: 'usd' is not a currency code; hint: use ISO 4217, e.g. USD",
    ),
]


@pytest.mark.parametrize("content,line", CATALOG_CASES)
def test_malformed_catalog_is_refused_with_file_line_and_field(content, line, tmp_path, capsys):
    path = tmp_path / "tarifs.csv"
    path.write_text(content, encoding="utf-8")
    code, out, err = run_kit(["--gpu", "b200", "--days", "7", "--catalog", str(path)], capsys)
    assert code == 2
    assert out == ""
    assert err == line.format(f=path) + "\n"


def test_missing_and_unreadable_catalog_files(tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    code, _, err = run_kit(["--gpu", "b200", "--days", "7", "--catalog", str(missing)], capsys)
    assert (code, err) == (2, f"error: {missing}: catalog file not found; hint: check the --catalog path\n")
    code, _, err = run_kit(["--gpu", "b200", "--days", "7", "--catalog", str(tmp_path)], capsys)
    assert code == 2
    assert err.startswith(f"error: {tmp_path}: cannot read the catalog (") and err.count("\n") == 1
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    code, _, err = run_kit(["--gpu", "b200", "--days", "7", "--catalog", str(binary)], capsys)
    assert code == 2 and err.startswith(f"error: {binary}: not UTF-8 text") and err.count("\n") == 1


def test_users_own_catalog_with_extra_lengths(tmp_path, capsys):
    path = tmp_path / "mine.csv"
    path.write_text(
        HEADER + "\n"
        "2026-10,2026-10-01,h100,NVIDIA H100,8,3,900.00,EUR\n"
        "2026-10,2026-10-01,h100,NVIDIA H100,8,14,3500.50,EUR\n",
        encoding="utf-8",
    )
    code, out, _ = run_kit(["--gpu", "h100", "--days", "14", "--lots", "3", "--catalog", str(path)], capsys)
    assert code == 0
    assert "package price: 10501.50 EUR for 24 GPUs (3 lots x 3500.50 EUR)" in out
    code, out, _ = run_kit(["--gpu", "h100", "--hours", "100", "--catalog", str(path)], capsys)
    assert out.splitlines()[4:] == [
        "  3 days (72 h): does not cover the window, 900.00 EUR",
        "  7 days (168 h): covers the window, not in catalog",
        "  14 days (336 h): covers the window, 3500.50 EUR",
        "  30 days (720 h): covers the window, not in catalog",
    ]


# ---------------------------------------------------------------------------------- standalone (K3, K8)


def test_kit_imports_only_the_standard_library():
    tree = ast.parse((KIT_DIR / "calcul_forfaits.py").read_text(encoding="utf-8"))
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules - {"__future__"} <= set(sys.stdlib_module_names)


def test_kit_folder_has_no_init():
    assert not (KIT_DIR / "__init__.py").exists()


def test_library_uses_the_kit_implementation():
    from iteralab.economics import pricing, window

    assert pricing.load_catalog is kit.load_catalog
    assert pricing.package_budget is kit.package_budget
    assert pricing.cost_per_result is kit.cost_per_result
    assert window.elapsed is kit.elapsed
    assert window.quote_window is kit.quote_window


def test_standalone_run_in_an_empty_folder(tmp_path):
    for name in ("calcul_forfaits.py", "tarifs-forfaits.csv"):
        shutil.copy(KIT_DIR / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}

    def standalone(*args: str) -> subprocess.CompletedProcess:
        # -I: no user site, no PYTHONPATH, no cwd on sys.path; -S: no site-packages, so iteralab is out of reach.
        return subprocess.run(
            [sys.executable, "-I", "-S", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    probe = standalone("-c", "import importlib.util as u; print(u.find_spec('iteralab') is None)")
    assert probe.stdout.strip() == "True", probe.stderr
    done = standalone("calcul_forfaits.py", "--gpu", "rtx-4090", "--days", "7", "--lots", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (GOLDEN / "rtx4090_7d_2lots.txt").read_text(encoding="utf-8")
    done = standalone("calcul_forfaits.py", "--gpu", "b200", "--days", "7", "--lots", "1")
    assert "package price: 2071.00 USD for 2 GPUs (1 lot x 2071.00 USD)" in done.stdout.splitlines()
    done = standalone("calcul_forfaits.py", "--gpu", "b200", "--days", "7", "--lots", "0")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "error: --lots must be a whole number of at least 1, got '0'; hint: see --help\n"
    zones = standalone("-c", "import zoneinfo; zoneinfo.ZoneInfo('Europe/Paris')")
    if zones.returncode == 0:  # the system time-zone database is present
        done = standalone(
            "calcul_forfaits.py", "--gpu", "b200", "--start", "2026-03-23T09:00", "--end", "2026-03-27T09:00",
            "--tz", "Europe/Paris",
        )
        assert "window (planned): 96 h" in done.stdout.splitlines(), done.stderr


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as stop:
        kit.main(["--help"])
    assert stop.value.code == 0
    assert "--accepted-results" in capsys.readouterr().out
