"""Which kind of job a stage runs is asked of the kind object, never guessed: the seam that lets a kind be added.

Fast and import-free like ``test_layout.py``: every check parses the source with ``ast``. Outside
``src/iteralab/campaign/kinds/`` (where each kind lives in its own folder) a "which kind?" branch is one of:

- a comparison (``==``, ``!=``, ``in``, ``not in``) or a ``match`` case with a job kind's name as a literal
  (``protocol.task.kind == "embedding"``, ``kind in ("embedding", "generation")``);
- a call of a kind predicate: a function named ``is_embedding``, ``is_generation`` or ``is_<something>_campaign``;
- key sniffing: ``"<key>" in <row>`` (or ``not in``) for a key only one kind's verdict writes (``min_cosine``,
  ``identical_share`` …): the row's kind guessed from its columns;
- a kind's table kept aside to stand for the kind: ``reader.embedding is not None``, ``self.generation is None``
  (a protocol's own ``protocol.embedding``, checked against its kind by ``plan/task.py``, is a table, not a kind).

A stage at or above ``campaign.kinds`` asks :func:`iteralab.campaign.kinds.registry.kind_of` (or ``kind_named``)
and then the kind object; a stage below it (``plan``, ``models``, ``lock``, the campaign folder layer) holds one
table per stage keyed by the kind's name, looked up, not compared. Adding a kind is then a new folder under
``kinds/``, a registry line and rows in those tables.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


PKG = Path(__file__).resolve().parents[2] / "src" / "iteralab"
#: Where the kinds live: the only folder that may name a kind to decide what to do.
KINDS_FOLDER = PKG / "campaign" / "kinds"
#: The job kinds' names, as ``[task] kind`` spells them.
KIND_NAMES = frozenset({"classification", "embedding", "generation", "scoring"})
#: Raw-table and verdict keys that only one kind writes: their presence in a row tells the kind.
KIND_KEYS = frozenset({
    "min_cosine", "median_cosine", "cosine_at_quantile", "subgroup_cosine",  # embedding
    "mean_tokens", "length_share", "identical_share", "tokens_per_s", "exact_match", "rouge_l",  # generation
    "min_label_agreement",  # classification
    "max_abs_score_diff", "score_diff_at_quantile", "min_kendall_tau", "median_kendall_tau", "subgroup_tau",  # scoring
})
PREDICATES = frozenset({"is_embedding", "is_generation"})
#: The "which kind?" branches allowed outside the kinds' folder, by module, each with the reason it stays.
#: Stages below the kinds cannot import them and read a kind off a stored record instead.
ALLOWED: dict[str, str] = {}
#: The most branches allowed outside the kinds' folder, all of them in :data:`ALLOWED`.
MAX_BRANCHES = 3
#: Modules that must hold no branch at all (none allowed in ALLOWED either): the stages that ask the kind first.
CLEARED = (
    "plan/", "models/", "lock/", "commands/", "cli.py", "demo/",
    "evidence/memory.py", "evidence/rerun.py", "evidence/verify.py", "evidence/comparison.py", "evidence/run.py",
    "decision/examples.py", "decision/audit.py",
    "campaign/estimate.py", "campaign/corpuscopy.py", "campaign/manifest.py",
)


def _name_literal(node: ast.AST) -> bool:
    """A kind name written as a literal, alone or inside a tuple, list or set."""
    if isinstance(node, ast.Constant):
        return node.value in KIND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_name_literal(e) for e in node.elts)
    return False


def _called_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_predicate(name: str) -> bool:
    return name in PREDICATES or (name.startswith("is_") and name.endswith("_campaign"))


def _stands_for_kind(node: ast.Compare) -> bool:
    """``<holder>.embedding is None`` (or ``generation``, ``is not``) on anything but a protocol."""
    left = node.left
    if not (isinstance(left, ast.Attribute) and left.attr in KIND_NAMES and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Is, ast.IsNot))):
        return False
    holder = left.value
    name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else ""
    return not name.endswith("protocol")


def branches(tree: ast.AST) -> list[tuple[int, str]]:
    """Each "which kind?" branch of a module: its line and what it is."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            kind_ops = all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
            if kind_ops and any(_name_literal(o) for o in operands):
                found.append((node.lineno, "kind name compared"))
            elif any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and isinstance(node.left, ast.Constant) \
                    and node.left.value in KIND_KEYS:
                found.append((node.lineno, f"key {node.left.value!r} sniffed"))
            elif _stands_for_kind(node):
                found.append((node.lineno, f".{node.left.attr} taken for the kind"))
        elif isinstance(node, ast.match_case) and any(_name_literal(p.value) for p in ast.walk(node.pattern)
                                                      if isinstance(p, ast.MatchValue)):
            found.append((node.pattern.lineno, "kind name matched"))
        elif isinstance(node, ast.Call) and _is_predicate(_called_name(node)):
            found.append((node.lineno, f"{_called_name(node)}() called"))
    return sorted(found)


def seam_branches() -> dict[str, list[tuple[int, str]]]:
    """The branches of every module outside the kinds' folder (and the kit, which is not the package's code)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        if KINDS_FOLDER in path.parents or (PKG / "kit") in path.parents:
            continue
        found = branches(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if found:
            out[path.relative_to(PKG).as_posix()] = found
    return out


def _breakdown(found: dict[str, list[tuple[int, str]]]) -> str:
    return "\n".join(f"  {module}: {len(hits)} — " + ", ".join(f"line {line} {what}" for line, what in hits)
                     for module, hits in found.items())


def test_the_detector_sees_each_form():
    source = (
        'a = protocol.task.kind == "embedding"\n'
        'b = kind in ("generation", "embedding")\n'
        'c = is_embedding(model) or folder.is_generation_campaign(record)\n'
        'd = "min_cosine" in row\n'
        'match kind:\n'
        '    case "classification":\n'
        '        pass\n'
        'g = reader.embedding is not None or self.generation is None\n'
        'e = model.kind == "callable" or error_kind == "timeout" or "dataset" in row\n'
        'f = RULES["embedding"] if protocol.generation is None or run.protocol.embedding is not None else None\n'
    )
    assert [what for _, what in branches(ast.parse(source))] == [
        "kind name compared", "kind name compared", "is_embedding() called", "is_generation_campaign() called",
        "key 'min_cosine' sniffed", "kind name matched", ".embedding taken for the kind",
        ".generation taken for the kind"]


def test_the_modules_already_cleared_ask_the_kind():
    found = {m: hits for m, hits in seam_branches().items() if m.startswith(CLEARED)}
    assert not found, "a cleared module branches on the job kind again; ask the kind object (above " \
                      "campaign.kinds) or the stage's table of kinds (below):\n" + _breakdown(found)


def test_allowed_entries_are_real():
    found = seam_branches()
    assert not set(ALLOWED) - set(found), "an allowed module no longer branches on the kind: drop it from ALLOWED"


def test_at_most_a_few_kind_branches_outside_the_kinds():
    found = seam_branches()
    total = sum(len(hits) for hits in found.values())
    strays = {m: hits for m, hits in found.items() if m not in ALLOWED}
    assert total <= MAX_BRANCHES and not strays, \
        f"{total} 'which kind?' branches outside campaign/kinds/ (at most {MAX_BRANCHES}, in ALLOWED only):\n" + \
        _breakdown(found)
