"""Protocols that read a dataset declared in the protocol (the lock, datasets and protocol-reading tests share them): a
CSV corpus written by the test, its lock time, and the good rows."""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

from stats_campaigns import CALENDAR

from protocol_factory import VARIANTS, protocol_toml


LOCKED_AT = datetime(2026, 3, 20, 8, 0, tzinfo=timezone.utc)
GOOD = {
    "2026-10": [("o1", "a story about a bank", "plot"), ("o2", "good fun", "fresh"), ("o3", "boring", "rotten")],
    "2026-11": [("n1", "the story of a dog", "plot"), ("n2", "good acting", "fresh"), ("n3", "a mess", "rotten"),
                ("n4", "really good", "fresh")],
    "2026-12": [("d1", "story of two cities", "plot"), ("d2", "weak script", "rotten"), ("d3", "good, not great",
                                                                                        "fresh")],
}


def write_dataset_csv(path: Path, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"])
        w.writerows(rows)


def datasets_toml(names) -> str:
    return "".join(f'[[datasets]]\nname = "{n}"\npath = "{n}.csv"\n\n' for n in names)


def dataset_protocol(folder: Path, datasets: dict, *, passes: int = 2, tuning=None, calendar: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in datasets.items():
        write_dataset_csv(folder / f"{name}.csv", rows)
    text = protocol_toml(model='kind = "callable"\ncallable = "fake_models_datasets:batch_sensitive"',
                         threshold=0.9, reference="b1", passes=passes,
                         variants=VARIANTS + (CALENDAR if calendar else ""))
    tuning_line = ""
    if tuning is not None:
        write_dataset_csv(folder / "tuning.csv", tuning)
        tuning_line = 'tuning_path = "tuning.csv"\n'
    text = text.replace('[corpus]\npath = "corpus.csv"\n', datasets_toml(datasets) + "[corpus]\n" + tuning_line)
    path = folder / "protocol.toml"
    path.write_text(text, encoding="utf-8")
    return path
