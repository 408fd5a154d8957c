"""M1, one rule for every stage: a configuration is feasible only when every counted pass processed the whole
corpus (status ok, exactly the expected ids, completed == expected). Decision, memory table and report all
ask this module; they only word the answer differently.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass

from iteralab.campaign.folder import RawRow


@dataclass(frozen=True)
class PassProblem:
    """A counted pass that did not complete the corpus."""

    pass_id: str
    status: str
    completed: int | None
    expected: int
    ids_match: bool | None
    error: str | None

    def describe(self) -> str:
        """The decision note's wording."""
        if self.status == "ok":
            return f"pass {self.pass_id} did not deliver exactly the {self.expected} expected ids"
        done = f" after {self.completed} of {self.expected} documents" if self.completed else ""
        why = f": {self.error}" if self.error else ""
        if not why and self.status == "aborted":
            why = ": the process ended during the pass"
        return f"pass {self.pass_id} {self.status}{done}{why}"

    def detail(self) -> str:
        """The memory table's wording (counts and ids_match spelled out)."""
        if self.status == "aborted":
            return f"{self.pass_id}: aborted (the process ended during the pass)"
        error = f" ({self.error[:120]})" if self.error else ""
        ids = {True: "true", False: "false", None: "?"}[self.ids_match]
        return (f"{self.pass_id}: {self.status}, completed {self.completed if self.completed is not None else '?'} "
                f"of {self.expected} inputs, ids_match {ids}{error}")


@dataclass(frozen=True)
class Feasibility:
    counted: int
    expected: int
    problems: tuple[PassProblem, ...]

    @property
    def feasible(self) -> bool:
        return self.counted > 0 and not self.problems

    def failures(self) -> tuple[str, ...]:
        """Why not, in the decision note's words (empty when feasible)."""
        if self.counted == 0:
            return ("no counted pass: the corpus was never completed",)
        return tuple(p.describe() for p in self.problems)

    def reason(self) -> str:
        """One line for the memory table."""
        if self.counted == 0:
            return "no pass attempted (or all excluded): completion not shown"
        if self.problems:
            return "not every pass completed the corpus: " + "; ".join(p.detail() for p in self.problems)
        return f"all {self.counted} pass(es) completed the {self.expected} inputs (ids_match true)"


def feasibility(rows: Iterable[RawRow], expected: int, excluded: Container[str] = ()) -> Feasibility:
    """M1 over one variant's rows; a pass excluded (in the table or the journal) is not counted."""
    counted = [r for r in rows if not r.excluded and r.pass_id not in excluded]
    problems = []
    for r in counted:
        size = r.expected_ids if r.dataset is not None and r.expected_ids is not None else expected  # K6: its dataset
        if r.status != "ok" or r.ids_match is not True or r.completed != size:
            problems.append(PassProblem(r.pass_id, r.status, r.completed, size, r.ids_match, r.error))
    return Feasibility(len(counted), expected, tuple(problems))
