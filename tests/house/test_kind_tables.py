"""Every stage declares the same kinds of job: the plan's rules, the model builders, the kinds' registry and the
protocol's ``[task] kind`` values name the same kinds, so a new kind is refused until each stage has its row."""

from __future__ import annotations

import typing

import pytest

from iteralab.campaign.kinds.registry import KINDS, kind_named
from iteralab.decision.examples import SHOWN
from iteralab.errors import ProtocolError
from iteralab.models.factory import TASK_MODEL_KINDS
from iteralab.plan.task import KIND_RULES, TASK_KINDS, TaskSpec, rules_named


def test_each_stage_names_the_same_kinds():
    declared = typing.get_args(TaskSpec.model_fields["kind"].annotation)
    assert tuple(KIND_RULES) == TASK_KINDS == declared
    assert set(TASK_MODEL_KINDS) == set(KIND_RULES) == set(KINDS)


def test_each_kind_is_one_of_the_shapes_the_plan_knows():
    """A kind renders prompts, makes vectors, or neither; never both (the plan's readers take one table each)."""
    assert [name for name, rules in KIND_RULES.items() if rules.prompts and rules.vectors] == []
    assert [name for name, rules in KIND_RULES.items() if rules.prompts] == ["generation"]
    assert [name for name, rules in KIND_RULES.items() if rules.vectors] == ["embedding"]


def test_a_kind_the_plan_does_not_know_is_refused_in_one_line():
    with pytest.raises(ProtocolError) as plan:
        rules_named("reranking")
    with pytest.raises(ProtocolError) as kinds:
        kind_named("reranking")
    assert plan.value.message == kinds.value.message == (
        "unknown job kind 'reranking'; hint: one of classification, embedding, generation, scoring")


def test_each_kind_says_how_its_results_are_shown():
    assert {kind.examples for kind in KINDS.values()} <= set(SHOWN)
    assert [name for name, kind in KINDS.items() if kind.kv_cache] == ["generation"]
    assert KINDS["embedding"].rerun_words.first_key == "min_cosine"
