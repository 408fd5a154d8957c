"""Paths written in a protocol: relative to the protocol file's folder, absolute, or ``package:NAME/sub/path``
inside an installed Python package; and a rerun's stand-ins for references that are not on this machine."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from iteralab.errors import ProtocolError

PACKAGE_PREFIX = "package:"
#: Stand-ins in force (:func:`stand_ins`): (protocol file, reference as written) -> the path used for it.
_STAND_INS: dict[tuple[Path, str], Path] = {}


@contextmanager
def stand_ins(protocol_path: str | os.PathLike[str], references: Mapping[str, Path]) -> Iterator[None]:
    """Within the block, :func:`resolve` gives ``references[ref]`` for these references of this protocol file
    only: a rerun's stand-in for a model whose absolute or ``package:`` path is not on this machine, while the
    locked protocol text stays byte for byte what was locked."""
    keys = {(Path(protocol_path).resolve(), ref): Path(path) for ref, path in references.items()}
    _STAND_INS.update(keys)
    try:
        yield
    finally:
        for key in keys:
            _STAND_INS.pop(key, None)


def resolve(protocol_path: str | os.PathLike[str], relative: str | None) -> Path | None:
    """Resolve a path written in the protocol: relative to the protocol file's folder, absolute, or
    ``package:NAME/sub/path`` inside an installed Python package (found without importing it), which keeps a
    protocol portable between machines. A :func:`stand_ins` entry for the reference comes first."""
    if relative is None:
        return None
    if _STAND_INS:
        stand_in = _STAND_INS.get((Path(protocol_path).resolve(), relative))
        if stand_in is not None:
            return stand_in
    if relative.startswith(PACKAGE_PREFIX):
        name, _, rest = relative[len(PACKAGE_PREFIX):].partition("/")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ProtocolError(f"{protocol_path}: package {name!r} named in {relative!r} is not installed",
                                hint=f"install it (pip install {name.replace('_', '-')})")
        return Path(list(spec.submodule_search_locations)[0]) / rest
    p = Path(relative).expanduser()
    return p if p.is_absolute() else (Path(protocol_path).resolve().parent / p)


__all__ = ["PACKAGE_PREFIX", "resolve", "stand_ins"]
