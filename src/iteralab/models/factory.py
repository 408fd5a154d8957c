"""The factory of the model under test: builds the declared kind of :class:`~iteralab.models.base.Workload`.

It sits apart from ``base`` because it imports the subclasses (``hf``, ``head``, ``callable``, ``generation``) that
import ``base``; each subclass is imported when its kind is asked for, so a callable workload never loads torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from iteralab.errors import WorkloadError
from iteralab.models.base import KINDS, Settings, Workload, check_settings, model_folder
from iteralab.models.callable import CallableWorkload, check_callable_settings
from iteralab.models.device import resolve_device
from iteralab.models.embedding import load_callable_embedding
from iteralab.models.generated import GenerationSettings, check_generation
from iteralab.models.generation import load_callable_generator
from iteralab.models.scoring import load_callable_scorer

@dataclass(frozen=True)
class WorkloadSpec:
    """Everything one load of the model under test needs: the declared model (``kind``, its files or callable,
    ``max_length``, ``truncation``, ``trust_remote_code``), the variant's settings (``precision``, ``padding``,
    ``compile``) on a ``device``, the classes (the order of a classifier's probability columns) and the job's task
    with its own options (an embedding job's ``pooling`` and ``normalize``, a generation job's ``generation``)."""

    kind: str
    path: str | Path | None = None
    head: str | Path | None = None
    callable_ref: str | None = None
    classes: tuple[str, ...] | None = None
    precision: str = "fp32"
    device: str = "cpu"
    max_length: int = 256
    truncation: bool = True
    padding: str = "longest"
    compile: bool = False
    trust_remote_code: bool = False
    task: str = "classification"
    pooling: str = "mean"
    normalize: bool = True
    generation: GenerationSettings | None = None
    #: a scoring job's cross-encoder: how its logits become a score (None: the folder's declared one, else the
    #: default of :func:`iteralab.models.pairs.resolved_activation`) and the positive class of several outputs
    activation: str | None = None
    positive_class: str | None = None

    @classmethod
    def of(cls, model: Mapping[str, Any], variant: Mapping[str, Any], classes: Sequence[str] | None, device: Any,
           options: Mapping[str, Any]) -> WorkloadSpec:
        """Built from a model record (``campaign.json``'s ``model``: kind, path, head, callable, max_length,
        truncation, trust_remote_code), a variant's settings (precision, padding, compile: the defaults where it
        names none), the device and the task's options (the job kind's ``workload_options``)."""
        return cls(model["kind"], path=model.get("path"), head=model.get("head"), callable_ref=model.get("callable"),
                   classes=None if classes is None else tuple(classes),
                   precision=variant.get("precision", "fp32"), device=str(device),
                   max_length=int(model["max_length"]), truncation=bool(model["truncation"]),
                   padding=variant.get("padding", "longest"), compile=bool(variant.get("compile", False)),
                   trust_remote_code=bool(model.get("trust_remote_code", False)), **options)

    def with_changes(self, **changes: Any) -> WorkloadSpec:
        return replace(self, **changes)


def load_workload(spec: WorkloadSpec) -> Workload:
    """Build the declared workload. Every refusal is a :class:`WorkloadError` naming the field. ``task``
    "embedding": an ``encoder`` folder pooled by ``pooling`` (normalised when ``normalize``) or a callable
    returning vectors (:mod:`iteralab.models.embedding`); "generation": an ``hf_causal_lm`` or ``hf_seq2seq``
    folder or a callable generator, run as ``generation`` declares (its ``prompt_max_length`` and
    ``allow_truncation`` replace ``max_length`` and ``truncation``; :mod:`iteralab.models.generation`)."""
    kind, task = spec.kind, spec.task
    if kind not in KINDS:
        raise WorkloadError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if task not in TASK_MODEL_KINDS:
        raise WorkloadError(f"task: {task!r} is not one of {', '.join(TASK_MODEL_KINDS)}")
    if kind not in TASK_MODEL_KINDS[task]:
        raise WorkloadError(f"kind: {kind!r} does not give what a {task} job needs",
                            hint=f"a {task} job's model kind is one of {', '.join(TASK_MODEL_KINDS[task])}")
    return TASK_MODELS[task][kind](kind, spec)


def _folder(kind: str, request: WorkloadSpec) -> tuple[Path, Settings]:
    """A model folder's kind: the checked settings, then the folder (refused in one line when unusable)."""
    settings = Settings(precision=request.precision, device=resolve_device(request.device),
                        max_length=request.max_length, truncation=request.truncation, padding=request.padding,
                        compile=request.compile, trust_remote_code=request.trust_remote_code)
    check_settings(settings)
    return model_folder(request.path, kind), settings


def _callable_classifier(kind: str, request: WorkloadSpec) -> Workload:
    callable_ref = check_callable_settings(request.callable_ref, request.precision, request.compile)
    if request.classes is None:
        raise WorkloadError("classes: required for a callable workload (the order of its probability columns)")
    return CallableWorkload(callable_ref, request.classes, Path(request.path) if request.path is not None else None)


def _hf_classifier(kind: str, request: WorkloadSpec) -> Workload:
    folder, settings = _folder(kind, request)
    from iteralab.models.hf import HFClassifierWorkload

    return HFClassifierWorkload(folder, settings, request.classes)


def _encoder_head(kind: str, request: WorkloadSpec) -> Workload:
    folder, settings = _folder(kind, request)
    if request.head is None:
        raise WorkloadError("head: required for kind 'encoder_head' (a safetensors head file)",
                            hint="train one with train_linear_head and save_head")
    from iteralab.models.head import EncoderHeadWorkload

    return EncoderHeadWorkload(folder, settings, Path(request.head), request.classes)


def _callable_embedding(kind: str, request: WorkloadSpec) -> Workload:
    return load_callable_embedding(request.callable_ref, request.path, request.precision, request.compile)


def _encoder(kind: str, request: WorkloadSpec) -> Workload:
    folder, settings = _folder(kind, request)
    from iteralab.models.encoder import EncoderWorkload

    return EncoderWorkload(folder, settings, request.pooling, request.normalize)


def _callable_generator(kind: str, request: WorkloadSpec) -> Workload:
    check_generation(request.generation)
    return load_callable_generator(request.callable_ref, request.path, request.precision, request.compile,
                                   request.generation)


def _generator(kind: str, request: WorkloadSpec) -> Workload:
    """A causal LM or encoder-decoder folder: the prompt's own length limit and truncation replace the model's."""
    generation = request.generation
    check_generation(generation)
    if request.padding != "longest":
        raise WorkloadError(f"padding: {request.padding!r}: a generation job pads each batch to its longest prompt",
                            hint="declare padding = 'longest'")
    folder, settings = _folder(kind, replace(request, max_length=generation.prompt_max_length,
                                             truncation=generation.allow_truncation))
    from iteralab.models.generation_hf import HFCausalLMWorkload, HFSeq2SeqWorkload

    return {"hf_causal_lm": HFCausalLMWorkload, "hf_seq2seq": HFSeq2SeqWorkload}[kind](folder, settings, generation)


def _callable_scorer(kind: str, request: WorkloadSpec) -> Workload:
    return load_callable_scorer(request.callable_ref, request.path, request.precision, request.compile)


def _cross_encoder(kind: str, request: WorkloadSpec) -> Workload:
    folder, settings = _folder(kind, request)
    from iteralab.models.crossencoder import HFCrossEncoderWorkload

    return HFCrossEncoderWorkload(folder, settings, request.activation, request.positive_class)


#: Per task (``[task] kind``), the model kinds that give what it needs and the builder of each: a new task is a
#: new row.
TASK_MODELS: dict[str, dict[str, Callable[[str, WorkloadSpec], Workload]]] = {
    "classification": {"hf_classifier": _hf_classifier, "encoder_head": _encoder_head,
                       "callable": _callable_classifier},
    "embedding": {"encoder": _encoder, "callable": _callable_embedding},
    "generation": {"hf_causal_lm": _generator, "hf_seq2seq": _generator, "callable": _callable_generator},
    "scoring": {"hf_cross_encoder": _cross_encoder, "callable": _callable_scorer},
}
#: The model kinds that give what each task needs.
TASK_MODEL_KINDS = {task: tuple(builders) for task, builders in TASK_MODELS.items()}
