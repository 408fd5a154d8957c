"""Verification of output sets (P3, Q1–Q3), from the stored files only.

A pass yields a *verified corpus* when its prediction file holds exactly the expected ids (no duplicate,
none missing, none extra), every record has the declared format, coverage is complete, and the metric
(scikit-learn's) meets the threshold and stays within the tolerance of the reference variant — overall and
in each gating subgroup — and the declared reproduction target holds. Nothing here reads the runner's memory:
the expected ids and labels come from ``inputs/corpus.csv``, the rules from the locked ``inputs/protocol.toml``.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from iteralab.plan.protocol import Protocol, load_protocol

TOL = 1e-12


@dataclass(frozen=True)
class Expected:
    ids: tuple[str, ...]
    labels: dict[str, str]
    strata: dict[str, str]


def load_expected(campaign_dir: str | Path) -> Expected:
    path = Path(campaign_dir) / "inputs" / "corpus.csv"
    csv.field_size_limit(1 << 30)
    ids: list[str] = []
    labels: dict[str, str] = {}
    strata: dict[str, str] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            ids.append(row["id"])
            labels[row["id"]] = row["label"]
            if row.get("stratum"):
                strata[row["id"]] = row["stratum"]
    return Expected(tuple(ids), labels, strata)


def corpus_texts(campaign_dir: str | Path, wanted: set[str]) -> dict[str, str]:
    """The texts of the ``wanted`` ids only (streamed: the corpus is never held whole)."""
    csv.field_size_limit(1 << 30)
    out: dict[str, str] = {}
    with open(Path(campaign_dir) / "inputs" / "corpus.csv", encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["id"] in wanted:
                out[row["id"]] = row["text"]
    return out


def campaign_protocol(campaign_dir: str | Path) -> Protocol:
    return load_protocol(Path(campaign_dir) / "inputs" / "protocol.toml")


def read_predictions(path: Path, classes: tuple[str, ...], sum_tol: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Parse a prediction file; return (records that parsed, format problems with their line numbers)."""
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                problems.append(f"line {number}: not a JSON record")
                continue
            problem = _record_problem(rec, classes, sum_tol)
            if problem:
                problems.append(f"line {number}: {problem}")
            if isinstance(rec, dict) and isinstance(rec.get("id"), str):
                records.append(rec)
    return records, problems


def _record_problem(rec: Any, classes: tuple[str, ...], sum_tol: float) -> str | None:
    if not isinstance(rec, dict) or set(rec) != {"id", "label", "probs"}:
        return "record must have exactly the fields id, label, probs"
    if not isinstance(rec["id"], str) or not rec["id"]:
        return "id must be a non-empty string"
    if rec["label"] not in classes:
        return f"label {rec['label']!r} is not one of the classes"
    probs = rec["probs"]
    if not isinstance(probs, list) or len(probs) != len(classes):
        return f"probs must be a list of {len(classes)} numbers"
    if not all(isinstance(p, (int, float)) and math.isfinite(p) and -1e-6 <= p <= 1 + 1e-6 for p in probs):
        return "probs must be finite numbers in [0, 1]"
    if abs(sum(probs) - 1.0) > sum_tol:
        return f"probs sum to {sum(probs):.6f}, not 1"
    if classes[int(np.argmax(probs))] != rec["label"]:
        return "label is not the most probable class"
    return None


def metric_value(name: str, y_true: list[str], y_pred: list[str], classes: tuple[str, ...]) -> float | None:
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score

    if not y_true:
        return None
    if name == "accuracy":
        return float(accuracy_score(y_true, y_pred))
    if name == "macro_f1":
        return float(f1_score(y_true, y_pred, labels=list(classes), average="macro", zero_division=0))
    if name == "weighted_f1":
        return float(f1_score(y_true, y_pred, labels=list(classes), average="weighted", zero_division=0))
    if name == "balanced_accuracy":
        return float(balanced_accuracy_score(y_true, y_pred))
    raise ValueError(name)


def subgroup_metrics(protocol: Protocol, expected: Expected, predicted: dict[str, str]) -> dict[str, float | None]:
    """Metric per planned subgroup, keyed ``<subgroup>:<group>``.

    Length strata use the main metric inside the stratum; class groups use the recall of that class
    (the accuracy inside it), since a macro metric over a single true class is meaningless.
    """
    out: dict[str, float | None] = {}
    for sg in protocol.subgroups:
        key_of = expected.strata if sg.by == "stratum" else expected.labels
        groups = sorted(set(key_of.values()))
        for group in groups:
            ids = [i for i in expected.ids if key_of.get(i) == group and i in predicted]
            y_true = [expected.labels[i] for i in ids]
            y_pred = [predicted[i] for i in ids]
            name = protocol.metric.name if sg.by == "stratum" else "accuracy"
            out[f"{sg.name}:{group}"] = metric_value(name, y_true, y_pred, protocol.corpus.classes)
    return out


def evaluate_file(pred_path: Path, protocol: Protocol, expected: Expected) -> dict[str, Any]:
    """Checks of one prediction file on its own: ids, format, coverage, metric vs threshold, subgroups."""
    classes = protocol.corpus.classes
    verdict: dict[str, Any] = {"expected_ids": len(expected.ids)}
    if not pred_path.exists():
        verdict.update(observed_ids=None, ids_match=False, format_ok=False, coverage=0.0, coverage_ok=False,
                       metric_name=protocol.metric.name, metric=None, threshold_ok=False, subgroups={},
                       problems=[f"prediction file {pred_path.name} is missing"])
        return verdict
    records, problems = read_predictions(pred_path, classes, protocol.checks.probability_sum_tolerance)
    seen: dict[str, int] = {}
    for rec in records:
        seen[rec["id"]] = seen.get(rec["id"], 0) + 1
    expected_set = set(expected.ids)
    duplicates = sorted(i for i, n in seen.items() if n > 1)
    missing = sorted(expected_set - set(seen))
    extra = sorted(set(seen) - expected_set)
    predicted = {rec["id"]: rec["label"] for rec in records if rec["id"] in expected_set}
    covered = len(expected_set & set(seen))
    verdict.update(
        observed_ids=len(records) + sum(1 for p in problems if "not a JSON record" in p),
        unique_ids=len(seen), duplicates=len(duplicates), missing=len(missing), extra=len(extra),
        ids_match=not duplicates and not missing and not extra and len(records) == len(expected.ids),
        format_ok=not problems, format_problems=problems[:5], n_format_problems=len(problems),
        coverage=covered / len(expected.ids) if expected.ids else 0.0,
    )
    verdict["coverage_ok"] = verdict["coverage"] + TOL >= protocol.checks.coverage
    y_true = [expected.labels[i] for i in expected.ids if i in predicted]
    y_pred = [predicted[i] for i in expected.ids if i in predicted]
    verdict["metric_name"] = protocol.metric.name
    verdict["metric"] = metric_value(protocol.metric.name, y_true, y_pred, classes)
    verdict["threshold_ok"] = verdict["metric"] is not None and verdict["metric"] + TOL >= protocol.metric.threshold
    verdict["subgroups"] = subgroup_metrics(protocol, expected, predicted)
    verdict["examples"] = {"duplicates": duplicates[:3], "missing": missing[:3], "extra": extra[:3]}
    return verdict


def evaluate_pass(campaign_dir: str | Path, pass_id: str) -> dict[str, Any]:
    campaign_dir = Path(campaign_dir)
    protocol = campaign_protocol(campaign_dir)
    expected = load_expected(campaign_dir)
    return evaluate_file(campaign_dir / "predictions" / f"{pass_id}.jsonl", protocol, expected)


def read_probabilities(path: Path) -> dict[str, tuple[str, list[float]]]:
    """id -> (label, probabilities) for every record of a prediction file that parses."""
    out: dict[str, tuple[str, list[float]]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
                out[rec["id"]] = (rec["label"], [float(p) for p in rec["probs"]])
            except (ValueError, KeyError, TypeError):
                continue
    return out


def compare_outputs(ra: dict[str, tuple[str, list[float]]], rb: dict[str, tuple[str, list[float]]]) -> dict[str, Any]:
    """Label agreement and largest absolute probability difference over the ids both output sets hold."""
    common = sorted(set(ra) & set(rb))
    result: dict[str, Any] = {"ids_a": len(ra), "ids_b": len(rb), "common_ids": len(common),
                              "same_ids": set(ra) == set(rb), "label_agreement": None, "max_abs_prob_diff": None}
    if common:
        result["label_agreement"] = sum(ra[i][0] == rb[i][0] for i in common) / len(common)
        result["max_abs_prob_diff"] = max(
            (abs(x - y) for i in common for x, y in zip(ra[i][1], rb[i][1])), default=0.0)
        if any(len(ra[i][1]) != len(rb[i][1]) for i in common):
            result["max_abs_prob_diff"] = None
    result["identical"] = bool(result["same_ids"] and common and result["label_agreement"] == 1.0
                               and result["max_abs_prob_diff"] == 0.0)
    return result


def compare_predictions(a: Path, b: Path) -> dict[str, Any]:
    """:func:`compare_outputs` of two prediction files."""
    return compare_outputs(read_probabilities(a), read_probabilities(b))


def judge_campaign(campaign_dir: str | Path, passes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Full verdict of each finished pass, including the comparisons with the reference variant.

    ``passes`` are the finished passes in journal order, each with ``pass_id``, ``variant``, ``status`` and
    ``prediction_file``/``prediction_sha256`` as recorded. A file whose hash differs from the recorded one is
    not counted.
    """
    from iteralab.common.files import sha256_file

    campaign_dir = Path(campaign_dir)
    protocol = campaign_protocol(campaign_dir)
    expected = load_expected(campaign_dir)
    verdicts: dict[str, dict[str, Any]] = {}
    for p in passes:
        path = campaign_dir / (p.get("prediction_file") or f"predictions/{p['pass_id']}.jsonl")
        v = evaluate_file(path, protocol, expected)
        v["hash_ok"] = path.exists() and p.get("prediction_sha256") == sha256_file(path)
        if path.exists() and not v["hash_ok"]:
            v.setdefault("problems", []).append("prediction file does not match its recorded sha256")
        v["complete"] = p.get("status") == "ok" and v["ids_match"] and v["format_ok"] and v["hash_ok"]
        verdicts[p["pass_id"]] = v
    ref_name = protocol.metric.reference_variant
    ref_pass = next((p["pass_id"] for p in passes if p["variant"] == ref_name and verdicts[p["pass_id"]]["complete"]),
                    None)
    ref_v = verdicts.get(ref_pass) if ref_pass else None
    ref_probs = read_probabilities(campaign_dir / f"predictions/{ref_pass}.jsonl") if ref_pass else {}
    gating = {sg.name: sg for sg in protocol.subgroups if sg.gating}
    for p in passes:
        v = verdicts[p["pass_id"]]
        v["reference_pass"] = ref_pass
        reasons: list[str] = []
        if p.get("status") != "ok":
            reasons.append(f"pass {p.get('status', 'failed')}")
        for key, label in (("ids_match", "ids do not match"), ("format_ok", "format"), ("hash_ok", "hash"),
                           ("coverage_ok", "coverage"), ("threshold_ok", "below threshold")):
            if not v.get(key):
                reasons.append(label)
        if ref_v is None:
            v["metric_ref"] = None
            v["tolerance_ok"] = False
            reasons.append(f"no complete pass of reference variant {ref_name!r}")
        else:
            v["metric_ref"] = ref_v["metric"]
            v["metric_delta"] = None if v["metric"] is None else v["metric"] - ref_v["metric"]
            v["tolerance_ok"] = v["metric"] is not None and ref_v["metric"] - v["metric"] <= protocol.metric.tolerance + TOL
            if not v["tolerance_ok"]:
                reasons.append("outside tolerance")
        sub_ok = True
        for name in gating:
            if not any(key.split(":", 1)[0] == name for key in v["subgroups"]):
                sub_ok = False
                reasons.append(f"gating subgroup {name!r} has no groups to evaluate (empty column?)")
        for key, value in v["subgroups"].items():
            sg = gating.get(key.split(":", 1)[0])
            if sg is None:
                continue
            ref_value = ref_v["subgroups"].get(key) if ref_v else None
            tol = sg.tolerance if sg.tolerance is not None else protocol.metric.tolerance
            if value is None or (sg.threshold is not None and value + TOL < sg.threshold) or \
                    (ref_value is not None and ref_value - value > tol + TOL) or ref_v is None:
                sub_ok = False
                reasons.append(f"subgroup {key}")
        v["subgroups_ok"] = sub_ok
        _reproduction(v, protocol, campaign_dir / (p.get("prediction_file") or ""), ref_probs)
        if not v["reproduction_ok"]:
            reasons.append(f"reproduction target '{protocol.reproduction.target}'")
        v["corpus_accepted"] = not reasons
        v["reasons"] = reasons
    return verdicts


def _reproduction(v: dict[str, Any], protocol: Protocol, path: Path, ref_probs: dict[str, Any]) -> None:
    target = protocol.reproduction.target
    v["label_agreement"] = None
    v["max_abs_prob_diff"] = None
    if ref_probs and path.is_file():
        same = compare_outputs(read_probabilities(path), ref_probs)
        v["label_agreement"] = same["label_agreement"]
        v["max_abs_prob_diff"] = same["max_abs_prob_diff"]
    if target == "identical":
        v["reproduction_ok"] = v["label_agreement"] == 1.0 and v["max_abs_prob_diff"] == 0.0
    elif target == "bounded":
        v["reproduction_ok"] = v["max_abs_prob_diff"] is not None and \
            v["max_abs_prob_diff"] <= (protocol.reproduction.bound or 0) + TOL
    else:
        v["reproduction_ok"] = True
