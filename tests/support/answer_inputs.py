"""Inputs of the answer and economics tests: a user's catalogue of rental lots written as CSV, and a hand-built
campaign whose protocol declares a production job."""

from __future__ import annotations




HEADER = "catalog_version,catalog_date,gpu_id,gpu_name,cards_per_lot,package_days,price_per_lot,currency"


def write_catalog(tmp_path, rows: list[str], extra_columns: str = "") -> str:
    path = tmp_path / "user-catalog.csv"
    path.write_text("\n".join([HEADER + extra_columns, *rows]) + "\n", encoding="utf-8")
    return str(path)


def with_job(folder, documents):
    """The same hand-built campaign, its protocol declaring a production job."""
    path = folder / "inputs" / "protocol.toml"
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition("[corpus]")
    path.write_text(head + f"[job]\ndocuments = {documents}\n\n" + sep + rest, encoding="utf-8")
    return folder
