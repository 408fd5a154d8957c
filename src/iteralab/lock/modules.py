"""A user's Python module found, imported from its file and, for a rerun, stood in for by the copy a bundle
carries: free of the protocol's models, so a pass worker imports it without pydantic (``engines.passes``). Reads
the module files; writes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from iteralab.errors import RoutineError, one_line

__all__ = ["carried_modules", "carried_now", "import_file", "load_function", "module_file", "module_spec"]


#: Within :func:`carried_modules`: module name -> the carried copy of its file that stands in for it.
_CARRIED: dict[str, Path] = {}


@contextlib.contextmanager
def carried_modules(files: Mapping[str, str | Path]) -> Iterator[None]:
    """Within the block, each module named in ``files`` is the file given (a rerun's carried copy of a callable's
    module that this machine lacks): the file is imported as a carried routine is (:func:`load_function`'s import)
    and found under the module's own name, by ``importlib.import_module`` and by :func:`module_spec` alike."""
    added = {name: Path(path) for name, path in files.items() if name not in _CARRIED}
    placed: list[str] = []
    try:
        for name, path in added.items():
            _CARRIED[name] = path
            if name not in sys.modules:
                sys.modules[name] = import_file(path, f"callable module {name}")
                placed.append(name)
        yield
    finally:
        for name in added:
            _CARRIED.pop(name, None)
        for name in placed:
            sys.modules.pop(name, None)


def carried_now() -> dict[str, str]:
    """The stand-ins in force, as JSON-able text (a pass spec hands them to its worker process)."""
    return {name: str(path) for name, path in sorted(_CARRIED.items())}


def module_spec(module: str) -> Any:
    """The import spec of ``module`` found on this interpreter's path without running it, or None."""
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def module_file(module: str) -> Path | None:
    """The source file of ``module`` (None when it cannot be found or is not a file)."""
    spec = module_spec(module)
    return Path(spec.origin) if spec is not None and spec.origin and Path(spec.origin).is_file() else None


def import_file(path: Path, what: str) -> ModuleType:
    """Import the module file at ``path`` under a private name of its own (once per file and content). Whatever
    the user's code raises becomes one :class:`RoutineError` line naming ``what``."""
    data = path.read_bytes()
    name = "iteralab_user_" + hashlib.sha256(str(path.resolve()).encode() + data).hexdigest()[:16]
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path  # a .py file always has a loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's module: what it raises is said in one line, never a traceback
            sys.modules.pop(name, None)
            raise RoutineError(f"{what} cannot be imported: {one_line(exc)}") from None
    return module


def load_function(path: Path, ref: str, what: str = "metric routine") -> Callable[..., Any]:
    """Import the module file at ``path`` under a private name of its own and return ``ref``'s function. Whatever
    the user's code raises becomes one :class:`RoutineError` line naming ``what`` and ``ref``."""
    attr = ref.partition(":")[2]
    module = import_file(path, f"{what} {ref}")
    fn = getattr(module, attr, None)
    if fn is None:
        raise RoutineError(f"{what} {ref} cannot be imported: module {path.name} has no {attr!r}")
    if not callable(fn):
        raise RoutineError(f"{what} {ref} cannot be imported: {attr!r} is a {type(fn).__name__}, not a function")
    return fn
