"""A rerun's comparison with the campaign it repeats, as people read it: ``comparison.md`` (and the same record as
``comparison.json``), and the short summary ``rerun`` prints. Reads the comparison record
:func:`iteralab.evidence.rerun.compare_campaigns` built; writes nothing else."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.campaign.kinds.registry import kind_named
from iteralab.common.files import write_json_atomic, write_text_atomic

__all__ = ["CarriedInput", "carried_line", "render_comparison", "summary_lines", "write_comparison"]


@dataclass(frozen=True)
class CarriedInput:
    """A model input a rerun took from the files the bundle carries: the protocol key and the reference as written,
    why the carried copy stands in, the carried folder and how many of its files, and where it was staged (not
    part of ``comparison.json``'s ``rerun.model_inputs``)."""

    key: str
    reference: str
    why: str
    folder: str
    files: int
    staged: str | None = None

    def to_json(self) -> dict[str, str | int]:
        return {"key": self.key, "reference": self.reference, "why": self.why, "folder": self.folder,
                "files": self.files}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> CarriedInput:
        return cls(record["key"], record["reference"], record["why"], record["folder"], record["files"])


def carried_line(record: CarriedInput) -> str:
    return (f"{record.key}: {record.reference!r} {record.why}: using the copy the bundle carries "
            f"({record.folder}, {record.files} file(s) with their recorded sha256)")


def _value(value: Any, limit: int = 48) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f} s"


def summary_lines(c: dict[str, Any]) -> list[str]:
    """The short terminal summary of a comparison (the full one is :func:`render_comparison`)."""
    changes = [ch["key"] for ch in c["manifest_changes"] if not ch["bookkeeping"]]
    lines = [f"manifest fields changed: {len(changes)}" + (f" ({', '.join(changes[:6])}"
                                                          f"{', …' if len(changes) > 6 else ''})" if changes else "")]
    for name, v in c["variants"].items():
        ratio = "no ratio" if v["median_ratio"] is None else f"median pass ×{v['median_ratio']:.3f}"
        lines.append(f"{name}: {v['old_verdict']} -> {v['new_verdict']} "
                     f"({'same verdict' if v['same_verdict'] else 'VERDICT CHANGED'}); outputs {v['outputs']}; {ratio}")
    return lines


#: The kind a comparison written before the kind was recorded reads as.
UNRECORDED_KIND = "classification"


def render_comparison(c: dict[str, Any]) -> str:
    p = c["protocol"]
    words = kind_named(p.get("kind") or UNRECORDED_KIND).rerun_words  # its words, as the kind names its outputs
    bound = f" (bound {p['bound']})" if p["bound"] is not None else ""
    lines = [
        f"# Rerun comparison: {p['name']} version {p['version']}", "",
        f"- earlier campaign: `{c['source']['folder']}`" +
        (f" (seal digest `{c['source']['seal_digest']}`)" if c["source"].get("seal_digest") else ""),
        f"- rerun: `{c['rerun']['folder']}`",
        *(f"- {carried_line(CarriedInput.from_json(r))}" for r in c["rerun"].get("model_inputs") or []),
        f"- same locked protocol (sha256 `{c['rerun']['protocol_sha256'][:16]}…`), same corpus "
        f"(fingerprint `{c['corpus_fingerprint'][:16]}…`), same variants and schedule",
        f"- declared reproduction target: **{p['reproduction_target']}**{bound}",
        f"- verdicts: {'all the same' if c['same_verdicts'] else 'SOME DIFFER (see below)'}", "",
        "## Manifest fields that changed", "",
    ]
    if c["stack_changed"]:
        lines += ["The two runs did not use the same software/hardware stack: this comparison concerns the exact "
                  "configurations tested, listed below (C5).", ""]
    if not c["manifest_changes"]:
        lines.append("None.")
    else:
        lines += ["| field | earlier | rerun |", "|---|---|---|"]
        for ch in c["manifest_changes"]:
            note = " (where an input was read; always differs)" if ch["bookkeeping"] else ""
            lines.append(f"| `{ch['key']}`{note} | {_value(ch['old'])} | {_value(ch['new'])} |")
    lines += ["", "## Per variant", "",
              f"| variant | verdict earlier → rerun | same | outputs | target met | {words.first} | "
              f"{words.second} | median pass earlier → rerun | ratio |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, v in c["variants"].items():
        ratio = "—" if v["median_ratio"] is None else f"×{v['median_ratio']:.3f}"
        first = v.get(words.first_key)
        agree = "—" if first is None else f"{first:.4f}"
        diff = "—" if v["max_abs_prob_diff"] is None else f"{v['max_abs_prob_diff']:.3g}"
        lines.append(
            f"| {name} | {v['old_verdict']} ({v['old_accepted']}/{v['old_passes']}) → {v['new_verdict']} "
            f"({v['new_accepted']}/{v['new_passes']}) | {'yes' if v['same_verdict'] else 'NO'} | {v['outputs']} | "
            f"{'yes' if v['reproduction_target_met'] else 'NO'} | {agree} | {diff} | "
            f"{_seconds(v['old_median_pass_s'])} → {_seconds(v['new_median_pass_s'])} | {ratio} |")
    with_datasets = [(name, v) for name, v in c["variants"].items() if v.get("datasets")]
    if with_datasets:
        lines += ["", "## Per dataset (K6)", "", "| variant | dataset | verdict earlier → rerun | same | "
                  "median pass earlier → rerun |", "|---|---|---|---|---|"]
        for name, v in with_datasets:
            for dname, d in v["datasets"].items():
                lines.append(f"| {name} | {dname} | {d['old_verdict']} ({d['old_accepted']}/{d['old_passes']}) → "
                             f"{d['new_verdict']} ({d['new_accepted']}/{d['new_passes']}) | "
                             f"{'yes' if d['same_verdict'] else 'NO'} | {_seconds(d['old_median_pass_s'])} → "
                             f"{_seconds(d['new_median_pass_s'])} |")
        lines += ["", "A variant's median pass above is the median over rounds of its job time (the sum of the "
                      "round's dataset passes)."]
    lines += ["", "Outputs compare the prediction files of matching passes (same round and position): "
              f"*identical* = {words.identical}; *within bound* = {words.bound}; "
              "*acceptable only* = the outputs differ more, but the rerun pass still "
              "passes every pre-registered check; *not acceptable* = it does not. A pass-time ratio compares "
              "medians of the measured passes only; it says nothing about a different machine's load.", ""]
    return "\n".join(lines)


def write_comparison(folder: str | os.PathLike[str], comparison: dict[str, Any]) -> list[Path]:
    folder = Path(folder)
    write_json_atomic(folder / "comparison.json", comparison)
    write_text_atomic(folder / "comparison.md", render_comparison(comparison))
    return [folder / "comparison.md", folder / "comparison.json"]
