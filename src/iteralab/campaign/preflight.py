"""Preflight: what can be known before the first timed pass is checked before it, not discovered as failed
passes. Reads the locked protocol and loads the workload once (fp32, in this process); writes nothing.

- A user mistake (classes in another order than the model's or head's labels, a model or head file that
  cannot be loaded, a device name that is not one) raises :class:`~iteralab.errors.WorkloadError`: one
  line, nothing run, nothing journaled.
- A variant this machine cannot run (a GPU device on a machine without one, a precision the device does not
  support) is *reported*: ``run`` refuses unless told to keep such variants, which are then recorded as
  failed rows "not runnable on this machine: …" (R8) and make ``run`` end with a non-zero exit.

A callable model is also called on one warm-up batch before the first pass, once the corpus copy exists and in a
pass's own process (``campaign.runner``'s first-batch check): calling the user's code here would load its model
in the runner's process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iteralab.campaign.engines.shards import worker_layout
from iteralab.campaign.kinds.registry import kind_of
from iteralab.errors import WorkloadError
from iteralab.kit.memoire import precision_refusal
from iteralab.models import factory
from iteralab.models.factory import WorkloadSpec
from iteralab.models.device import resolve_device
from iteralab.plan.lockfile import ProtocolFile
from iteralab.plan.protocol import Protocol


@dataclass(frozen=True)
class Preflight:
    #: variant name -> why this machine cannot run it
    unrunnable: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        return "; ".join(f"{name}: not runnable on this machine: {why}" for name, why in self.unrunnable.items())


def _variant_problem(protocol: Protocol, variant: object) -> str | None:
    device_name = getattr(variant, "device", None) or protocol.run.device
    workers = getattr(variant, "data_parallel", 1)
    if workers > 1 and str(device_name).strip().lower() != "cpu":  # X3: enough cards, or not runnable here

        try:
            worker_layout(device_name, workers)
        except WorkloadError as exc:
            return exc.message
    if protocol.model.kind == "callable" and str(device_name).strip().lower() in ("auto", "cpu"):
        return None  # the callable owns its device and precision: nothing to check, and no torch import here
    try:
        device = resolve_device(device_name)
    except WorkloadError as exc:
        if "sees no GPU" in exc.message or "does not exist" in exc.message:
            return exc.message
        raise  # not a device name at all: a user mistake
    if protocol.model.kind == "callable":
        return None  # the callable owns its precision and device
    refused = precision_refusal(getattr(variant, "precision", "fp32"), str(device))
    return f"precision {refused[0]}" if refused else None


def preflight(protocol_file: ProtocolFile) -> Preflight:
    """Load the workload once and check every variant against this machine (see the module docstring)."""

    protocol = protocol_file.protocol
    model = protocol.model
    kind = kind_of(protocol)
    record = {"kind": model.kind, "path": protocol_file.where(model.path), "head": protocol_file.where(model.head),
              "callable": model.callable, "max_length": model.max_length, "truncation": model.truncation,
              "trust_remote_code": model.trust_remote_code,
              **kind.model_record(protocol, protocol_file.where(model.path))}
    factory.load_workload(WorkloadSpec.of(record, {"precision": "fp32"}, protocol.corpus.classes, "cpu",
                                          kind.workload_options(record)))
    unrunnable = {}
    for variant in protocol.variants:
        problem = _variant_problem(protocol, variant)
        if problem:
            unrunnable[variant.name] = problem
    return Preflight(unrunnable)
