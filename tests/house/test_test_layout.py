"""The tests mirror the house: a reader finds the tests of ``src/iteralab/<stage>/`` under ``tests/<stage>/``.

- every test module (``test_*.py``) sits in a folder of ``tests/`` that names a folder of the package
  (``tests/campaign/engines/`` for ``src/iteralab/campaign/engines/``), or in ``house/`` (the repository as a whole:
  layout, docs, benches, the device check) or ``cli/`` (the command line);
- what the tests share (fakes, factories, routines, golden data) lives in ``tests/support/``, on ``sys.path`` from
  ``tests/conftest.py``; no other module sits in a test folder, and ``conftest.py`` only at the root of ``tests/``;
- no test module imports another test module: a helper two modules share is a support module's public name;
- two test modules never share a base name, and no test folder is a package (``__init__.py``): pytest imports each
  module by its base name, its folder put first on ``sys.path``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PKG = TESTS.parent / "src" / "iteralab"
SUPPORT = TESTS / "support"
#: Test folders that name no folder of the package.
OUTSIDE = ("house", "cli")


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _test_modules() -> list[Path]:
    return [p for p in _python_files() if p.name.startswith("test_")]


def test_every_test_module_sits_in_the_folder_of_a_stage():
    misplaced = []
    for path in _test_modules():
        folder = path.parent.relative_to(TESTS)
        if folder.parts[:1] == ("support",) or not folder.parts:
            misplaced.append(str(path.relative_to(TESTS)))
        elif folder.parts[0] not in OUTSIDE and not (PKG / folder).is_dir():
            misplaced.append(str(path.relative_to(TESTS)))
        elif folder.parts[0] in OUTSIDE and len(folder.parts) > 1:
            misplaced.append(str(path.relative_to(TESTS)))
    assert not misplaced, f"put these under tests/<stage>/, tests/house/ or tests/cli/: {misplaced}"


def test_support_modules_only_in_the_support_folder():
    stray = [str(p.relative_to(TESTS)) for p in _python_files()
             if not p.name.startswith("test_") and p.parent != SUPPORT and p != TESTS / "conftest.py"]
    assert not stray, f"move these into tests/support/: {stray}"
    assert not list(SUPPORT.rglob("test_*.py")), "a test module in tests/support/ would be collected as a test"


def test_no_test_folder_is_a_package_and_no_base_name_repeats():
    assert not [p for p in _python_files() if p.name == "__init__.py"]
    names = [p.name for p in _test_modules()]
    assert len(names) == len(set(names)), sorted(n for n in set(names) if names.count(n) > 1)
    support = {p.stem for p in SUPPORT.glob("*.py")}
    assert not support & {Path(n).stem for n in names}


def test_no_module_of_the_tests_imports_a_test_module():
    offenders = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            offenders += [f"{path.relative_to(TESTS)}:{node.lineno} {m}" for m in modules
                          if m.split(".")[0].startswith("test_")]
    assert not offenders, f"import these helpers from a module of tests/support/ instead: {offenders}"
