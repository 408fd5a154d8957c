"""The user's Python modules a protocol names (a callable model's, the metric routine's): found without being run,
fingerprinted by ``lock``, carried into the campaign folder, and the routine imported from its carried copy. The
user's queries file of ``recall_at_k`` (``plan.queries.load_queries``) is fingerprinted and carried here too (its
sha256 and number of queries; every relevant id checked against the corpus), as :data:`QUERIES`.

Only the module file travels (as for a callable model): what it imports must be importable where it runs. The
routine's copy lives at :data:`ROUTINE_DIR` in the folder; ``campaign.json`` records it (``routine``: its
reference, the copy's path and sha256), so ``verify`` and ``rerun`` call the very file that was locked. A rerun on a
machine where a callable model's module cannot be found imports the copy its bundle carries the same way
(:func:`iteralab.lock.modules.carried_modules`: within the block, the module *is* that file, for the lock's check, the copy into the
new folder and every import of the callable, in the runner and in each pass worker, whose spec names it).
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Container
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file
from iteralab.errors import BundleError, CorpusError, ProtocolError, RoutineError
from iteralab.lock.modules import load_function, module_file, module_spec
from iteralab.plan.lockfile import ProtocolFile
from iteralab.plan.queries import load_queries, unknown_relevant

__all__ = ["QUERIES", "ROUTINE_DIR", "callable_module", "carry_queries", "carry_routine", "copy_checked",
           "queries_change", "queries_fingerprint", "routine_fingerprint", "top_level_names"]

#: Where a campaign folder keeps the metric routine's module file.
ROUTINE_DIR = "inputs/routine"


#: How a callable model is named in a protocol, as every hint about it shows it.
CALLABLE_FORM = "module:function (e.g. my_generator:generate, the module's name, a colon, the function's name)"


def callable_module(where: str | Path, ref: str, folder: Path) -> Path | None:
    """The source file of a callable model's module (None for a module without one, e.g. compiled), refused in
    one line naming ``model.callable`` when ``ref`` is not ``module:function``, when the module cannot be found,
    or when its source defines no ``function`` at its top level. The source is read, never run: importing a
    callable's module may load a model, and ``lock`` runs no user code for a callable (``run``'s preflight calls
    it). ``folder``: the protocol's folder, named in the hint about PYTHONPATH."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        head, dot, tail = ref.rpartition(".")
        guess = f" — did you mean {head + ':' + tail!r}?" if dot and head and tail and not sep else ""
        raise ProtocolError(f"{where}: model.callable: {ref!r} is not of the form module:function{guess}",
                            hint=f"write {CALLABLE_FORM}")
    spec = module_spec(module)
    if spec is None:
        raise ProtocolError(f"{where}: model.callable: module {module!r} cannot be found",
                            hint=f"the form is {CALLABLE_FORM}; the module must be importable: install its package, "
                                 f"or put its folder on PYTHONPATH (e.g. PYTHONPATH={folder})")
    path = Path(spec.origin) if spec.origin and Path(spec.origin).is_file() else None
    if path is None or path.suffix != ".py":
        return path
    name = attr.split(".")[0]
    defined = top_level_names(path)
    if defined is not None and name not in defined:
        functions = sorted(n for n in defined if not n.startswith("_") and n in _functions(path))
        shown = ", ".join(functions[:12]) + (" …" if len(functions) > 12 else "") if functions else "no function"
        raise ProtocolError(f"{where}: model.callable: module {module!r} ({path}) defines no {name!r} at its top "
                            f"level (its functions: {shown})",
                            hint=f"name a function the module defines: {CALLABLE_FORM}")
    return path


def _functions(path: Path) -> set[str]:
    """The functions and classes a module's source defines at its top level (what an error shows)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def top_level_names(path: Path) -> set[str] | None:
    """The names a module's source binds at its top level (functions, classes, assignments, imports); None when
    that cannot be told without running it (a star import, a module ``__getattr__``, a source that does not
    parse: the import at ``run`` says what is wrong)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return None
    names: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:  # the module's statements, and those nested in its if/try/with blocks, never a def's body
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        todo.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.Lambda))
    return None if "__getattr__" in names else names


def routine_fingerprint(protocol_file: ProtocolFile, *, load: bool = False) -> dict[str, str] | None:
    """The lock's record of the metric routine (its reference, module file name and sha256); None without one.
    ``load``: import it too (``lock`` refuses, in one line, a routine that cannot be imported)."""
    ref = protocol_file.protocol.metric.routine
    if ref is None:
        return None
    module = ref.partition(":")[0]
    path = module_file(module)
    if path is None:
        raise ProtocolError(f"{protocol_file.source}: metric.routine: module {module!r} cannot be found",
                            hint="the module must be importable: install its package, or put its folder on "
                                 f"PYTHONPATH (e.g. PYTHONPATH={protocol_file.folder})")
    if load:
        try:
            load_function(path, ref)
        except RoutineError as exc:
            raise ProtocolError(f"{protocol_file.source}: metric.routine: {exc.message}",
                                hint="fix the routine's module so that it imports, then lock again") from None
    return {"ref": ref, "file": path.name, "sha256": sha256_file(path)}


def copy_checked(source: Path, copy: Path, digest: str) -> None:
    """Copy ``source`` to ``copy`` and check the copy has the sha256 ``digest`` (checked against the lock)."""
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, copy)
    if sha256_file(copy) != digest:
        raise BundleError(f"{copy}: the copy of {source} differs from the file checked against the lock "
                          "(it changed while copied)", hint="run again once the file is no longer being written")


def carry_routine(locked: dict[str, str] | None, out: Path, earlier: Path | None = None) -> dict[str, str] | None:
    """Copy the routine's module file (``locked``: the lock's record of it) into ``out``'s :data:`ROUTINE_DIR` and
    return campaign.json's ``routine`` record; None without a routine. ``earlier``: the campaign folder a rerun
    repeats, whose carried copy is taken (so a rerun needs no importable module); else the module found here."""
    if locked is None:
        return None
    target = f"{ROUTINE_DIR}/{locked['file']}"
    if earlier is not None:
        source: Path | None = earlier / target
        if not source.is_file() or sha256_file(source) != locked["sha256"]:
            raise BundleError(f"{earlier}: {target} is missing or differs from the locked routine {locked['ref']} "
                              f"(sha256 {locked['sha256']})", hint=f"run: iteralab verify {earlier}")
    else:
        source = module_file(locked["ref"].partition(":")[0])
        assert source is not None, locked  # the input check found it with this hash just before
    copy_checked(source, out / target, locked["sha256"])
    return {"ref": locked["ref"], "file": target, "sha256": locked["sha256"]}


#: Where a campaign folder keeps its copy of the queries file.
QUERIES = "inputs/queries.csv"


def queries_fingerprint(protocol_file: ProtocolFile, corpus_ids: Container[str] | None) -> dict[str, Any] | None:
    """The lock's record of the queries file (file name, sha256, number of queries); None when the protocol
    declares none. The file is read and checked (one line naming file, line and field); ``corpus_ids``: the
    corpus's ids, which every relevant id must be one of (None: not checked)."""
    declared = protocol_file.protocol.metric.queries
    if not declared:
        return None
    path = protocol_file.where(declared)
    if path is None or not Path(path).is_file():
        raise ProtocolError(f"{protocol_file.source}: metric.queries: file {path} does not exist",
                            hint="give the queries file (query_id, text, relevant_ids) next to the protocol")
    try:
        queries = load_queries(path, **queries_columns(protocol_file.protocol.metric))
        if corpus_ids is not None:
            unknown_relevant(queries, corpus_ids, str(protocol_file.protocol.corpus.path))
    except CorpusError as exc:
        raise CorpusError(f"metric.queries: {exc.message}", hint=exc.hint) from None
    return {"file": Path(path).name, "sha256": sha256_file(path), "queries": len(queries)}


def queries_columns(metric: Any) -> dict[str, str]:
    """The keywords of :func:`load_queries` that name the queries file's id and text columns (``[metric]``)."""
    return {"id_column": metric.queries_id_column, "text_column": metric.queries_text_column}


def queries_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """The change of the queries file between two fingerprints, in words (None when the same)."""
    if (before or None) == (after or None):
        return None
    if not before or not after:
        return f"queries file: {'declared, none at the lock' if after else 'removed'}"
    return (f"queries file: {after.get('file')} changed (sha256 {str(before.get('sha256'))[:12]}… → "
            f"{str(after.get('sha256'))[:12]}…, {before.get('queries')} → {after.get('queries')} queries)")


def carry_queries(locked: dict[str, Any] | None, source: Path | None, out: Path,
                  columns: dict[str, str] | None = None) -> dict[str, Any] | None:
    """Copy the locked queries file (``source``: where the protocol's ``metric.queries`` points) to ``out``'s
    :data:`QUERIES`, checked against the lock's sha256; campaign.json's ``queries`` record (None without one),
    with the ``columns`` it is read by (:func:`queries_columns`; absent: the default names)."""
    if locked is None:
        return None
    if source is None or not source.is_file():
        raise BundleError(f"metric.queries: {source} is missing", hint="restore the locked queries file")
    copy_checked(source, out / QUERIES, locked["sha256"])
    record = {"file": QUERIES, "sha256": locked["sha256"], "queries": locked["queries"]}
    return {**record, "columns": dict(columns)} if columns else record
