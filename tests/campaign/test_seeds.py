"""A campaign with several seeds (Q3: ``[reproduction] seeds = [0, 1]``), end to end: lock, run with a callable
whose outputs follow the pass's seed, raw table, verdicts, statistics, verify.

The callable (``fake_models.seeded_noise_classifier``) draws its noise from NumPy's generator, which the harness
seeds with the pass's seed: the same seed gives the same probabilities in every variant, seed 1 other ones
than seed 0 (the labels never change). Under the "identical" reproduction target every pass is then accepted
only if each seed is judged against its own reference pass: seeds kept apart.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from campaign_factory import callable_campaign
from iteralab.cli import main
from iteralab.evidence.reads import load_evidence
from iteralab.evidence.stats import campaign_stats, seed_reference_rows
from iteralab.evidence.table import read_raw_table

SEEDS = 'target = "identical"\nseeds = [0, 1]'
#: Two rounds (Williams order b1 b4, then b4 b1); in each round every variant under seed 0, then under seed 1.
PASS_IDS = ["r01-p01-b1-s0-a1", "r01-p02-b4-s0-a1", "r01-p03-b1-s1-a1", "r01-p04-b4-s1-a1",
            "r02-p01-b4-s0-a1", "r02-p02-b1-s0-a1", "r02-p03-b4-s1-a1", "r02-p04-b1-s1-a1"]


def _probs(out, row) -> np.ndarray:
    return np.asarray(pq.read_table(out / row["prediction_file"]).column("probs").to_pylist())


def test_two_seeds_run_apart_end_to_end(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, fn="fake_models:seeded_noise_classifier", passes=2, reproduction=SEEDS,
                                 locked=False)
    assert main(["lock", str(protocol)]) == 0
    assert "2 variants × 2 passes × 2 seeds = 8 measured passes" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["run", str(protocol), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passes_total"] == 8

    # every seed has its own slots and pass ids, recorded in the schedule, the journal, the manifest and the table
    campaign = json.loads((out / "campaign.json").read_text())
    assert [(s["round"], s["position"], s["variant"], s["seed"]) for s in campaign["schedule"]["slots"]] == \
        [(int(p[1:3]), int(p[5:7]), p.split("-")[2], int(p.split("-")[3][1:])) for p in PASS_IDS]
    assert json.loads((out / "manifest.json").read_text())["seeds"] == [0, 1]
    rows = read_raw_table(out / "raw_table.csv")
    assert [r["pass_id"] for r in rows] == PASS_IDS
    assert [r["seed"] for r in rows] == [p.split("-")[3][1:] for p in PASS_IDS]

    # the seed reaches the model: same seed, same probabilities in both variants; another seed, other ones
    by_id = {r["pass_id"]: r for r in rows}
    seed0, seed1 = _probs(out, by_id["r01-p02-b4-s0-a1"]), _probs(out, by_id["r01-p04-b4-s1-a1"])
    for pid in PASS_IDS:
        assert np.array_equal(_probs(out, by_id[pid]), seed0 if "-s0-" in pid else seed1), pid
    assert np.abs(seed0 - seed1).max() > 1e-3

    # Q3 kept apart: each seed's passes compared with that seed's reference pass (the first b4 pass of the seed)
    for r in rows:
        assert (r["status"], r["ids_match"], r["label_agreement"], r["max_abs_prob_diff"]) == \
            ("ok", "true", "1.000000", "0.000000"), r["pass_id"]
        assert (r["reproduction_ok"], r["corpus_accepted"]) == ("true", "true"), (r["pass_id"], r["notes"])
    evidence = load_evidence(out)
    assert {k: r.pass_id for k, r in seed_reference_rows(evidence).items()} == \
        {(None, 0): "r01-p02-b4-s0-a1", (None, 1): "r01-p04-b4-s1-a1"}

    # statistics: per variant, its passes of both seeds, each seed's in its own rounds; quality holds for all
    stats = campaign_stats(evidence)
    seed_of = {r.pass_id: r.seed for r in evidence.rows}
    for variant in ("b1", "b4"):
        passes = stats.times(variant).passes
        assert [p.pass_id for p in passes] == [p for p in PASS_IDS if p.split("-")[2] == variant]
        assert sorted(seed_of[p.pass_id] for p in passes) == [0, 0, 1, 1]
        quality = stats.quality_of(variant)
        assert (quality.completed, quality.accepted, quality.reproduction_ok, quality.max_abs_prob_diff) == \
            (4, 4, True, 0.0)
        assert quality.meets_quality
    assert main(["stats", str(out)]) == 0
    assert "seeds 0, 1" in capsys.readouterr().out
    assert main(["verify", str(out), "--unsealed"]) == 0
