"""The factory of the model under test: builds the declared kind of :class:`~iteralab.models.base.Workload`.

It sits apart from ``base`` because it imports the subclasses (``hf``, ``head``, ``callable``, ``generation``) that
import ``base``; each subclass is imported when its kind is asked for, so a callable workload never loads torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from iteralab.errors import WorkloadError
from iteralab.models.base import KINDS, Settings, Workload, check_settings, model_folder
from iteralab.models.callable import CallableWorkload, check_callable_settings
from iteralab.models.device import resolve_device
from iteralab.models.embedding import load_callable_embedding
from iteralab.models.generation import GenerationSettings, check_generation, load_callable_generator
from iteralab.models.lazy import torch  # imported on first use: a callable workload never loads it

def load_workload(kind: str, *, path: str | Path | None = None, head: str | Path | None = None,
                  callable_ref: str | None = None, classes: Sequence[str] | None = None, precision: str = "fp32",
                  device: str | torch.device = "cpu", max_length: int = 256, truncation: bool = True,
                  padding: str = "longest", compile: bool = False, trust_remote_code: bool = False,
                  task: str = "classification", pooling: str = "mean", normalize: bool = True,
                  generation: GenerationSettings | None = None) -> Workload:
    """Build the declared workload. Every refusal is a :class:`WorkloadError` naming the field. ``task``
    "embedding": an ``encoder`` folder pooled by ``pooling`` (normalised when ``normalize``) or a callable
    returning vectors (:mod:`iteralab.models.embedding`); "generation": an ``hf_causal_lm`` or ``hf_seq2seq``
    folder or a callable generator, run as ``generation`` declares (its ``prompt_max_length`` and
    ``allow_truncation`` replace ``max_length`` and ``truncation``; :mod:`iteralab.models.generation`)."""
    if kind not in KINDS:
        raise WorkloadError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if task not in TASK_MODEL_KINDS:
        raise WorkloadError(f"task: {task!r} is not one of {', '.join(TASK_MODEL_KINDS)}")
    if kind not in TASK_MODEL_KINDS[task]:
        raise WorkloadError(f"kind: {kind!r} does not give what a {task} job needs",
                            hint=f"a {task} job's model kind is one of {', '.join(TASK_MODEL_KINDS[task])}")
    request = Request(path, head, callable_ref, classes, precision, device, max_length, bool(truncation), padding,
                      bool(compile), bool(trust_remote_code), pooling, normalize, generation)
    return TASK_MODELS[task][kind](kind, request)


@dataclass(frozen=True)
class Request:
    """:func:`load_workload`'s keywords, handed to the builder of the declared task and model kind."""

    path: str | Path | None
    head: str | Path | None
    callable_ref: str | None
    classes: Sequence[str] | None
    precision: str
    device: str | torch.device
    max_length: int
    truncation: bool
    padding: str
    compile: bool
    trust_remote_code: bool
    pooling: str
    normalize: bool
    generation: GenerationSettings | None


def _folder(kind: str, request: Request) -> tuple[Path, Settings]:
    """A model folder's kind: the checked settings, then the folder (refused in one line when unusable)."""
    settings = Settings(precision=request.precision, device=resolve_device(request.device),
                        max_length=request.max_length, truncation=request.truncation, padding=request.padding,
                        compile=request.compile, trust_remote_code=request.trust_remote_code)
    check_settings(settings)
    return model_folder(request.path, kind), settings


def _callable_classifier(kind: str, request: Request) -> Workload:
    callable_ref = check_callable_settings(request.callable_ref, request.precision, request.compile)
    if request.classes is None:
        raise WorkloadError("classes: required for a callable workload (the order of its probability columns)")
    return CallableWorkload(callable_ref, request.classes, Path(request.path) if request.path is not None else None)


def _hf_classifier(kind: str, request: Request) -> Workload:
    folder, settings = _folder(kind, request)
    from iteralab.models.hf import HFClassifierWorkload

    return HFClassifierWorkload(folder, settings, request.classes)


def _encoder_head(kind: str, request: Request) -> Workload:
    folder, settings = _folder(kind, request)
    if request.head is None:
        raise WorkloadError("head: required for kind 'encoder_head' (a safetensors head file)",
                            hint="train one with train_linear_head and save_head")
    from iteralab.models.head import EncoderHeadWorkload

    return EncoderHeadWorkload(folder, settings, Path(request.head), request.classes)


def _callable_embedding(kind: str, request: Request) -> Workload:
    return load_callable_embedding(request.callable_ref, request.path, request.precision, request.compile)


def _encoder(kind: str, request: Request) -> Workload:
    folder, settings = _folder(kind, request)
    from iteralab.models.encoder import EncoderWorkload

    return EncoderWorkload(folder, settings, request.pooling, request.normalize)


def _callable_generator(kind: str, request: Request) -> Workload:
    check_generation(request.generation)
    return load_callable_generator(request.callable_ref, request.path, request.precision, request.compile,
                                   request.generation)


def _generator(kind: str, request: Request) -> Workload:
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


#: Per task (``[task] kind``), the model kinds that give what it needs and the builder of each: a new task is a
#: new row.
TASK_MODELS: dict[str, dict[str, Callable[[str, Request], Workload]]] = {
    "classification": {"hf_classifier": _hf_classifier, "encoder_head": _encoder_head,
                       "callable": _callable_classifier},
    "embedding": {"encoder": _encoder, "callable": _callable_embedding},
    "generation": {"hf_causal_lm": _generator, "hf_seq2seq": _generator, "callable": _callable_generator},
}
#: The model kinds that give what each task needs.
TASK_MODEL_KINDS = {task: tuple(builders) for task, builders in TASK_MODELS.items()}
