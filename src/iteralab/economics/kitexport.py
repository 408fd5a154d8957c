"""The downloadable kit (K7, K8): copy the package's own ``kit/`` files, byte for byte, into a folder.

The kit holds no measured comparison and no observed saving: it is the protocol template, the raw-table
template, the package calculator (the same code the library imports), the memory exercise, instructions and
a licence. ``KIT_FILES`` is the declared list; the test suite fails when one of them is not shipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from iteralab.errors import IteraError
from iteralab.common.files import write_bytes_atomic

#: Every file of the kit, in the order the README presents them.
KIT_FILES = (
    "README.md",
    "INSTRUCTIONS.md",
    "LICENSE",
    "protocole-qualite.toml",
    "tableau-brut.csv",
    "calcul_forfaits.py",
    "tarifs-forfaits.csv",
    "memoire.py",
    "memoire.ipynb",
)


class KitError(IteraError):
    """The kit cannot be exported as asked."""


@dataclass(frozen=True)
class KitExport:
    folder: Path
    written: tuple[str, ...]
    missing: tuple[str, ...]


def kit_source(name: str) -> resources.abc.Traversable:
    """The shipped kit file ``name`` inside the installed package (it may be absent: see ``missing``)."""
    return resources.files("iteralab").joinpath("kit").joinpath(name)


def missing_files() -> tuple[str, ...]:
    return tuple(name for name in KIT_FILES if not kit_source(name).is_file())


def export_kit(folder: str | os.PathLike[str], *, force: bool = False) -> KitExport:
    """Write every shipped kit file into ``folder``; refuse a non-empty folder unless ``force``.

    With ``force`` only the kit's own files are replaced; anything else in the folder is left alone.
    Returns what was written and which declared files this installation does not ship.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise KitError(f"{folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise KitError(f"{folder}: folder is not empty", hint="choose an empty folder, or pass --force to replace "
                                                              "the kit files in it")
    folder.mkdir(parents=True, exist_ok=True)
    written, missing = [], []
    for name in KIT_FILES:
        source = kit_source(name)
        if not source.is_file():
            missing.append(name)
            continue
        write_bytes_atomic(folder / name, source.read_bytes())
        if name.endswith(".py"):
            os.chmod(folder / name, 0o755)
        else:
            os.chmod(folder / name, 0o644)
        written.append(name)
    return KitExport(folder, tuple(written), tuple(missing))
