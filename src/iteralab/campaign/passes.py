"""One measured pass (R2–R4, R7, R8, M2): load, warm-up, the synchronized measured pass, the prediction file.

``execute_pass`` is what a worker process runs (``python -m iteralab.campaign.passes SPEC RESULT``) and what the
runner calls directly in ``inprocess`` isolation. It never retries a failing batch with a smaller one unless
the variant is a declared *resume* variant, whose retries are counted.

The measured region covers reading the corpus file, tokenization, host→device transfers, inference and
materializing the probabilities on the host; the device is synchronized before the start and before the stop.
Nothing else (logging, hashing, writing) happens inside it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from iteralab.common.files import sha256_file, write_json_atomic, write_text_atomic



def _chunks(order: list[int], size: int) -> list[list[int]]:
    return [order[i : i + size] for i in range(0, len(order), size)]


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()
    return text[:500]


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ in ("OutOfMemoryError", "MemoryError") or "out of memory" in str(exc).lower()


class PassTimeout(Exception):
    """The measured pass ran past the protocol's pass time limit (``run.pass_timeout_s``)."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"exceeded the pass time limit of {limit:g} s")


class _Limit:
    """The pass time limit, read between batches from the pass's own clock (one reading per batch)."""

    def __init__(self, clock: Any, seconds: float | None) -> None:
        self.clock, self.seconds = clock, seconds
        self.start = clock.now() if seconds is not None else 0.0

    def check(self) -> None:
        if self.seconds is not None and self.clock.now() - self.start > self.seconds:
            raise PassTimeout(self.seconds)


class _Progress:
    """Inputs completed so far; read after a failure to report how far the pass got (R8)."""

    def __init__(self, n: int = 0) -> None:
        self.completed = 0
        self.retries = 0
        self.done = np.zeros(n, dtype=bool)


def _run_batches(workload: Any, texts: list[str], order: list[int], batch_size: int, resume: bool,
                 out: np.ndarray, progress: _Progress, limit: _Limit | None = None) -> None:
    for batch in _chunks(order, batch_size):
        _run_one(workload, texts, batch, resume, out, progress)
        if limit is not None:
            limit.check()


def _run_one(workload: Any, texts: list[str], batch: list[int], resume: bool, out: np.ndarray,
             progress: _Progress) -> None:
    try:
        probs = workload.infer(workload.tokenize([texts[i] for i in batch]))
    except Exception:
        if not resume or len(batch) == 1:
            raise
        # Declared resume variant only: the failing part is retried in halves, and every retry is counted.
        progress.retries += 1
        half = len(batch) // 2
        _run_one(workload, texts, batch[:half], resume, out, progress)
        _run_one(workload, texts, batch[half:], resume, out, progress)
        return
    out[batch] = probs
    progress.done[batch] = True
    progress.completed += len(batch)


class MeasuredPass:
    """The work inside the measured region (R3): read the corpus file, order it (bucketing: by token length),
    tokenize, transfer, infer and materialize probabilities on the host. Its state stays readable after a
    failure, so the caller can report how many inputs were completed."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.order: list[int] = []
        self.probs = np.zeros((0, 0), dtype=np.float32)
        self.progress = _Progress()

    def run(self, workload: Any, corpus_path: str, corpus_kwargs: dict[str, Any], batch_size: int,
            bucketing: bool, resume: bool, n_classes: int, limit: _Limit | None = None) -> None:
        from iteralab.plan.corpus import load_corpus

        corpus = load_corpus(corpus_path, **corpus_kwargs)
        self.ids = list(corpus.ids)
        texts = list(corpus.texts)
        self.probs = np.zeros((len(texts), n_classes), dtype=np.float32)
        self.progress = _Progress(len(texts))
        if bucketing:
            lengths = workload.token_lengths(texts)
            self.order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
        else:
            self.order = list(range(len(texts)))
        _run_batches(workload, texts, self.order, batch_size, resume, self.probs, self.progress, limit)


def _prediction_lines(ids: list[str], classes: list[str], probs: np.ndarray, rows: list[int]) -> str:
    labels = probs.argmax(axis=1)
    lines = []
    for i in rows:
        lines.append(json.dumps({"id": ids[i], "label": classes[int(labels[i])],
                                 "probs": [round(float(x), 7) for x in probs[i]]}, ensure_ascii=False))
    return "\n".join(lines) + ("\n" if lines else "")


def execute_pass(spec: dict[str, Any], clock: Any = None) -> dict[str, Any]:
    """Run one pass described by ``spec`` (a JSON-able dict built by the runner); return its result record.

    Every phase is timed by :func:`iteralab.models.device.timed` (synchronize, read, body, synchronize, read)
    with one clock, injectable as ``clock`` (an object with ``now()``, default ``time.perf_counter``)."""
    from iteralab.models import device as dev
    from iteralab.plan.corpus import load_corpus
    from iteralab.models.base import load_workload

    clock = clock or dev.PERF_CLOCK
    variant = spec["variant"]
    phases: dict[str, float | None] = {k: None for k in ("load_s", "compile_s", "warmup_s", "pass_s", "writing_s")}
    notes: list[str] = []
    result: dict[str, Any] = {"pass_id": spec["pass_id"], "phases": phases, "notes": notes, "status": "failed",
                              "completed": 0, "expected": None, "error": None, "retries": 0,
                              "prediction_file": None, "prediction_sha256": None, "memory": None,
                              "workload": None, "file_hashes": None}
    seed = int(spec.get("seed", 0))
    try:
        import torch

        torch.manual_seed(seed)
        np.random.seed(seed % (2**32))
        if spec.get("deterministic"):
            torch.use_deterministic_algorithms(True, warn_only=True)
        device = dev.resolve_device(variant.get("device") or spec.get("device", "auto"))
        model = spec["model"]
        with dev.timed(device, clock) as loading:
            workload = load_workload(
                model["kind"], path=model.get("path"), head=model.get("head"), callable_ref=model.get("callable"),
                classes=spec["classes"], precision=variant["precision"], device=str(device),
                max_length=model["max_length"], truncation=model["truncation"], padding=variant["padding"],
                compile=variant["compile"], trust_remote_code=model["trust_remote_code"],
            )
        phases["load_s"] = loading.seconds
        result["workload"] = workload.describe()
        result["file_hashes"] = workload.file_hashes()
    except Exception as exc:  # a load failure is a failed pass row, with its error
        result["error"] = _error_text(exc)
        result["error_kind"] = "oom" if _is_oom(exc) else "load"
        notes.append(f"failed while loading: {result['error']}")
        return result

    measured_error: BaseException | None = None
    corpus_kwargs = dict(id_column="id", text_column="text", label_column="label", classes=spec["classes"])
    batch_size = int(variant["batch_size"])
    try:
        # Warm-up (R5): the first `inputs` texts of the corpus, `passes` times, with the variant's batch size.
        warm = spec["warmup"]
        if warm["inputs"] > 0 and warm["passes"] > 0:
            warm_texts = list(load_corpus(spec["corpus_path"], **corpus_kwargs).texts[: warm["inputs"]])
            for i in range(warm["passes"]):
                with dev.timed(device, clock) as warming:
                    for chunk in _chunks(list(range(len(warm_texts))), batch_size):
                        workload.infer(workload.tokenize([warm_texts[j] for j in chunk]))
                elapsed = warming.seconds
                if i == 0 and variant["compile"]:
                    phases["compile_s"] = elapsed  # first warm-up call compiles: recorded as compilation
                else:
                    phases["warmup_s"] = (phases["warmup_s"] or 0.0) + elapsed
        else:
            notes.append("warm-up: none (protocol declares 0 warm-up inputs or passes)")
        if not variant["compile"]:
            notes.append("compile_s: empty, the variant does not compile")
    except Exception as exc:
        result["error"] = _error_text(exc)
        result["error_kind"] = "oom" if _is_oom(exc) else "warmup"
        notes.append(f"failed during warm-up: {result['error']}")
        return result

    pass_run = MeasuredPass()
    gpu_scope = dev.GpuEvents(device)  # CUDA events, created outside the timed region; a labelled GPU scope
    machine_before = dev.load_snapshot()  # what else uses the machine: read outside the timed region
    dev.reset_peaks(device)
    try:
        with dev.timed(device, clock) as measured:
            limit = _Limit(clock, spec.get("pass_timeout_s"))
            gpu_scope.record_start()
            pass_run.run(workload, spec["corpus_path"], corpus_kwargs, batch_size, bool(variant["bucketing"]),
                         bool(variant["resume"]), len(spec["classes"]), limit)
            gpu_scope.record_stop()
        phases["pass_s"] = measured.seconds
    except Exception as exc:
        measured_error = exc
        try:
            dev.synchronize(device)
        except Exception:  # the device may be unusable after the error; the row keeps the first error
            pass
    ids, probs, order, progress = pass_run.ids, pass_run.probs, pass_run.order, pass_run.progress
    result["memory"] = dev.read_peaks(device)
    result["concurrent_load"] = dev.concurrent_load(machine_before, dev.load_snapshot(), phases["pass_s"])
    if device.type == "cuda":  # kept apart from `phases`: a GPU-side scope is never a pass time (R3)
        result["gpu_scope"] = gpu_scope.result()
    result["expected"] = len(ids)
    result["completed"] = progress.completed
    result["retries"] = progress.retries
    if progress.retries:
        notes.append(f"resume variant: {progress.retries} failing batch(es) retried in halves")
    if measured_error is not None:
        result["error"] = _error_text(measured_error)
        result["error_kind"] = ("oom" if _is_oom(measured_error) else
                                "timeout" if isinstance(measured_error, PassTimeout) else "pass")
        notes.append(f"failed after {progress.completed} of {len(ids)} inputs: {result['error']}; "
                     "no retry with a smaller batch")
        notes.append("pass_s: empty, the measured pass did not complete")

    # Writing (outside the measured region): only completed rows, in pass order, atomically, then hashed.
    t0 = clock.now()
    done_rows = [i for i in order if progress.done[i]]
    pred_dir = Path(spec["prediction_dir"])
    target = pred_dir / f"{spec['pass_id']}.jsonl"
    write_text_atomic(target, _prediction_lines(ids, list(spec["classes"]), probs, done_rows))
    result["prediction_file"] = f"predictions/{target.name}"
    result["prediction_sha256"] = sha256_file(target)
    phases["writing_s"] = clock.now() - t0
    result["order_hash"] = _order_hash([ids[i] for i in order]) if ids else None
    if measured_error is None:
        result["status"] = "ok"
    return result


def _order_hash(ids: list[str]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(ids, ensure_ascii=False).encode("utf-8")).hexdigest()


def worker_main(argv: list[str]) -> int:
    """``python -m iteralab.campaign.passes SPEC.json RESULT.json``: run one pass in a fresh process."""
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    try:
        from iteralab.campaign.manifest import environment_manifest

        environment = environment_manifest(Path(spec.get("workdir") or os.getcwd()))
    except Exception as exc:
        environment = {"error": _error_text(exc)}
    try:
        result = execute_pass(spec)
    except Exception as exc:  # unexpected: still leave a failure record behind
        result = {"pass_id": spec.get("pass_id"), "status": "failed", "error": _error_text(exc),
                  "error_kind": "internal", "notes": [traceback.format_exc(limit=3).replace("\n", " | ")]}
    result["environment"] = environment
    write_json_atomic(result_path, result)
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess in tests
    sys.exit(worker_main(sys.argv[1:]))
