"""The typed verdict (``campaign.verdict.record.Verdict``): the journal's dict form read and written back key for
key, a judged verdict a new value (the pass's own one unchanged), and a cell no kind has refused."""

from __future__ import annotations

import json

import pytest

from campaign_factory import callable_campaign
from iteralab.campaign.journal import read_journal
from iteralab.campaign.kinds.classification import CLASSIFICATION
from iteralab.campaign.kinds.embedding import EMBEDDING
from iteralab.campaign.kinds.generation import GENERATION
from iteralab.campaign.verdict.judge import judge_campaign
from iteralab.campaign.verdict.record import Verdict
from iteralab.evidence.run import run_campaign
from iteralab.evidence.table import finished_passes


def test_the_journals_verdicts_read_back_key_for_key_and_judging_makes_new_ones(tmp_path):
    protocol = callable_campaign(tmp_path, subgroups='[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n')
    out = tmp_path / "out"
    run_campaign(protocol, out)
    state = read_journal(out / "journal.jsonl")
    intrinsic = {pid: record["intrinsic"] for pid, record in state.evaluated.items()}
    assert intrinsic
    for data in intrinsic.values():
        verdict = Verdict.from_json(data, CLASSIFICATION)
        assert json.dumps(verdict.to_json()) == json.dumps(data)  # same keys, same order, same values
        assert verdict.metric == data["metric"] and verdict.subgroups == data["subgroups"]
    own = {pid: Verdict.from_json(data, CLASSIFICATION) for pid, data in intrinsic.items()}
    judged = judge_campaign(out, finished_passes(state))
    for pid, verdict in judged.items():
        assert verdict.corpus_accepted is True and verdict.reasons == ()
        assert verdict.to_json()["reasons"] == [] and verdict.reference_pass is not None
        assert not own[pid].has("corpus_accepted")  # the pass's own verdict stays as it was
        assert verdict.with_cells(corpus_accepted=False).corpus_accepted is False
        assert verdict.corpus_accepted is True


def test_a_kinds_cells_are_its_own():
    data = {"expected_ids": 3, "metric": 0.5, "mean_tokens": 4.0, "identical_share": 1.0}
    verdict = Verdict.from_json(data, GENERATION)
    assert verdict.own.mean_tokens == 4.0 and verdict.cell("identical_share") == 1.0
    assert verdict.to_json() == data
    assert verdict.with_cells(tokens_ok=True).to_json() == {**data, "tokens_ok": True}
    with pytest.raises(KeyError, match="mean_tokens"):
        Verdict.from_json(data, CLASSIFICATION)
    with pytest.raises(KeyError, match="min_cosine"):
        verdict.with_cells(min_cosine=0.9)
    assert Verdict.from_json({"min_cosine": 0.99}, EMBEDDING).own.min_cosine == 0.99
