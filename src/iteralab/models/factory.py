"""The factory of the model under test: builds the declared kind of :class:`~iteralab.models.base.Workload`.

It sits apart from ``base`` because it imports the subclasses (``hf``, ``head``, ``callable``) that import
``base``; each subclass is imported when its kind is asked for, so a callable workload never loads torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from iteralab.errors import WorkloadError
from iteralab.models.base import KINDS, Settings, Workload, check_settings, model_folder
from iteralab.models.callable import CallableWorkload
from iteralab.models.device import resolve_device
from iteralab.models.embedding import load_callable_embedding
from iteralab.models.lazy import torch  # imported on first use: a callable workload never loads it


def load_workload(kind: str, *, path: str | Path | None = None, head: str | Path | None = None,
                  callable_ref: str | None = None, classes: Sequence[str] | None = None, precision: str = "fp32",
                  device: str | torch.device = "cpu", max_length: int = 256, truncation: bool = True,
                  padding: str = "longest", compile: bool = False, trust_remote_code: bool = False,
                  task: str = "classification", pooling: str = "mean", normalize: bool = True) -> Workload:
    """Build the declared workload. Every refusal is a :class:`WorkloadError` naming the field. ``task``
    "embedding": an ``encoder`` folder pooled by ``pooling`` (normalised when ``normalize``) or a callable
    returning vectors (:mod:`iteralab.models.embedding`)."""
    if kind not in KINDS:
        raise WorkloadError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if (kind == "encoder") != (task == "embedding") and kind != "callable":
        raise WorkloadError(f"kind: {kind!r} does not give what a {task} job needs",
                            hint="an embedding job's model is an 'encoder' folder or a 'callable'")
    if task == "embedding" and kind == "callable":
        return load_callable_embedding(callable_ref, path, precision, bool(compile))
    if kind == "callable":
        if callable_ref is None:
            raise WorkloadError("callable: required for kind 'callable' ('package.module:function')")
        if classes is None:
            raise WorkloadError("classes: required for a callable workload (the order of its probability columns)")
        if precision != "fp32" or compile:
            raise WorkloadError(f"precision/compile: {precision!r}/{compile} cannot be applied to a callable",
                                hint="the callable owns its model; declare precision 'fp32' and compile false")

        return CallableWorkload(callable_ref, classes, Path(path) if path is not None else None)
    settings = Settings(precision=precision, device=resolve_device(device), max_length=max_length,
                        truncation=bool(truncation), padding=padding, compile=bool(compile),
                        trust_remote_code=bool(trust_remote_code))
    check_settings(settings)
    folder = model_folder(path, kind)
    if kind == "encoder":
        from iteralab.models.encoder import EncoderWorkload

        return EncoderWorkload(folder, settings, pooling, normalize)
    if kind == "hf_classifier":
        from iteralab.models.hf import HFClassifierWorkload

        return HFClassifierWorkload(folder, settings, classes)
    if head is None:
        raise WorkloadError("head: required for kind 'encoder_head' (a safetensors head file)",
                            hint="train one with train_linear_head and save_head")
    from iteralab.models.head import EncoderHeadWorkload

    return EncoderHeadWorkload(folder, settings, Path(head), classes)
