#!/usr/bin/env python3
"""Memory exercise: estimate the memory of one forward pass, then observe it, then compare (M3, M4).

Run it next to nothing else (Python >= 3.10, torch, transformers)::

    python memoire.py --tiny                                   # a small BERT built from a config, CPU
    python memoire.py --model ./my-hf-model --batch-size 8 --max-length 256 --precision bf16
    python memoire.py --tiny --device cuda --json

It first checks the environment (Python, torch, the device asked for, the driver, transformers) and stops
with one line and exit code 2 when it cannot run. Then, for one model, batch size, max length and precision:

1. the *estimate*, written down before anything runs: weights + activations of one forward at
   batch x max length + an allocator margin (+ on CPU the runtime overhead, measured once, see below);
2. the *observation*: one forward at exactly that shape (every sequence padded to max length), with the
   peak read from the counter that fits the device (CUDA: ``max_memory_allocated`` and
   ``max_memory_reserved``, two separate counters never summed; CPU: the process peak RSS, ``VmHWM``,
   reset through ``/proc/self/clear_refs`` where the kernel allows it);
3. the comparison: observed - estimated, and the counter's scope, so that it is clear what is compared.

What is compared with what. On CUDA the counters count tensors held by PyTorch's caching allocator only:
no CUDA context, no host memory, so the estimate has no runtime term. On CPU the peak RSS is the whole
process: the interpreter, torch's and transformers' libraries, whatever else was loaded, the weights and
the activations. The estimate therefore adds a *runtime overhead*: the resident memory of a process that
imported torch + transformers and loaded nothing, measured once and labelled as such.

This file is also the implementation that ``iteralab.evidence.memory`` imports, so the kit and the library compute
the estimate the same way. It does not import ``iteralab``; torch and transformers are imported only after
the environment check.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

if sys.version_info < (3, 10):  # pragma: no cover - said once, before anything that would fail
    sys.exit("error: cannot run: memoire.py needs Python 3.10 or newer, this is " + platform.python_version())

PRECISIONS = ("fp32", "bf16", "fp16", "int8-dynamic")
#: Bytes of one stored floating-point value at each precision (int8-dynamic keeps everything but the
#: quantized Linear weights in float32).
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "fp16": 2, "int8-dynamic": 4}
#: Bytes of one activation value (dynamic int8 computes in float32 between its int8 matmuls).
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8-dynamic": 4}
#: fbgemm's packed int8 Linear keeps one int32 column offset per output row beside the int8 values.
INT8_ROW_OFFSET_BYTES = 4
DEFAULT_MARGIN = 0.2
TINY_CONFIG = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "intermediate_size": 256, "max_position_embeddings": 512}
NO_RUNTIME = "none: the CUDA counters count tensors only (no CUDA context, no host memory)"
MIB = 1024 * 1024
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


class MemoryKitError(ValueError):
    """A mistake the user can fix (bad shape, unknown precision, missing config field): one line, exit 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message

    def one_line(self) -> str:
        return f"{self.message}; hint: {self.hint}" if self.hint else self.message


class EnvironmentRefused(MemoryKitError):
    """The environment cannot run the exercise (Python, torch, device, driver, transformers)."""


# ------------------------------------------------------------------------------------------ estimate


@dataclass(frozen=True)
class MemoryEstimate:
    """Every term of the estimate in bytes, the total, and the assumptions in words.

    ``total_bytes = weights_bytes + activations_bytes + margin_bytes + runtime_overhead_bytes`` and
    ``activations_bytes = hidden_states_bytes + attention_scores_bytes + ffn_intermediate_bytes + inputs_bytes``.
    """

    precision: str | None
    batch_size: int
    seq_len: int
    activation_bytes: int
    weights_bytes: int
    hidden_states_bytes: int
    attention_scores_bytes: int
    ffn_intermediate_bytes: int
    inputs_bytes: int
    activations_bytes: int
    allocator_margin: float
    margin_bytes: int
    runtime_overhead_bytes: int
    runtime_overhead_label: str
    total_bytes: int
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    def terms(self) -> dict[str, int]:
        """The terms that add up to ``total_bytes`` (activations split into their parts)."""
        return {"weights_bytes": self.weights_bytes, "hidden_states_bytes": self.hidden_states_bytes,
                "attention_scores_bytes": self.attention_scores_bytes,
                "ffn_intermediate_bytes": self.ffn_intermediate_bytes, "inputs_bytes": self.inputs_bytes,
                "activations_bytes": self.activations_bytes, "margin_bytes": self.margin_bytes,
                "runtime_overhead_bytes": self.runtime_overhead_bytes, "total_bytes": self.total_bytes}

    @property
    def assumptions_text(self) -> str:
        return "\n".join(self.assumptions)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["assumptions"] = list(self.assumptions)
        return data


def _whole(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MemoryKitError(f"{name}: {value!r} must be a whole number >= {minimum}")
    return value


def estimate_memory(*, parameter_count: int, bytes_per_param: float, hidden_size: int, num_layers: int,
                    num_heads: int, intermediate_size: int, batch_size: int, seq_len: int, activation_bytes: int,
                    allocator_margin: float = DEFAULT_MARGIN, runtime_overhead_bytes: int = 0,
                    runtime_overhead_label: str | None = None, quantized_params: int = 0,
                    weights_bytes: int | None = None, weights_note: str | None = None,
                    precision: str | None = None) -> MemoryEstimate:
    """Estimate the peak memory of one inference forward of a transformer encoder at ``batch x seq_len``.

    Weights: ``(parameter_count - quantized_params) x bytes_per_param + quantized_params x 1`` (int8 Linear
    weights), unless ``weights_bytes`` was counted from the model itself (:func:`count_weights`).

    Activations, with B = batch, S = seq_len, H = hidden, A = heads, I = FFN size, e = ``activation_bytes``.
    Inference keeps no activations for a backward pass: the layers run one after the other and only one
    layer's tensors are live at a time, so ``num_layers`` multiplies nothing here. Counted terms:

    - hidden states ``2 x B·S·H·e``: the layer's input, kept for the residual connection, and its output;
    - attention scores ``B·A·S·S·e``: one full score matrix (what eager attention materializes; fused
      SDPA/flash kernels may never hold it, which makes this term an upper bound);
    - FFN intermediate ``B·S·I·e``: the widest tensor of the feed-forward block;
    - inputs ``3 x B·S·8``: input ids, attention mask and token type ids as int64.

    Not counted: Q/K/V projections, the second copy a softmax or GELU makes, library workspaces. The
    allocator margin (``allocator_margin`` x (weights + activations)) stands for those and for the
    allocator's rounding and caching. ``runtime_overhead_bytes`` (CPU only) is added as measured, without
    margin: see :func:`runtime_overhead` and :func:`measure_runtime_overhead`.
    """
    parameter_count = _whole("parameter_count", parameter_count)
    hidden_size = _whole("hidden_size", hidden_size)
    num_layers = _whole("num_layers", num_layers)
    num_heads = _whole("num_heads", num_heads)
    intermediate_size = _whole("intermediate_size", intermediate_size)
    batch_size = _whole("batch_size", batch_size)
    seq_len = _whole("seq_len", seq_len)
    activation_bytes = _whole("activation_bytes", activation_bytes)
    quantized_params = _whole("quantized_params", quantized_params, 0)
    runtime_overhead_bytes = _whole("runtime_overhead_bytes", runtime_overhead_bytes, 0)
    if isinstance(bytes_per_param, bool) or not isinstance(bytes_per_param, (int, float)) or bytes_per_param <= 0:
        raise MemoryKitError(f"bytes_per_param: {bytes_per_param!r} must be a positive number")
    if isinstance(allocator_margin, bool) or not isinstance(allocator_margin, (int, float)) or allocator_margin < 0:
        raise MemoryKitError(f"allocator_margin: {allocator_margin!r} must be a number >= 0 (0.2 = 20 %)")
    if quantized_params > parameter_count:
        raise MemoryKitError(f"quantized_params: {quantized_params} exceeds parameter_count {parameter_count}")
    B, S, H, A, I, e = batch_size, seq_len, hidden_size, num_heads, intermediate_size, activation_bytes
    if weights_bytes is None:
        weights = round((parameter_count - quantized_params) * bytes_per_param + quantized_params)
        weights_note = weights_note or (
            f"weights: {parameter_count:,} parameters x {bytes_per_param:g} B"
            + (f", of which {quantized_params:,} quantized Linear weights at 1 B" if quantized_params else ""))
    else:
        weights = _whole("weights_bytes", weights_bytes, 0)
        weights_note = weights_note or "weights: counted from the model's parameters and buffers"
    hidden = 2 * B * S * H * e
    scores = B * A * S * S * e
    ffn = B * S * I * e
    inputs = 3 * B * S * 8
    activations = hidden + scores + ffn + inputs
    margin = round(allocator_margin * (weights + activations))
    if runtime_overhead_label is None:
        runtime_overhead_label = ("measured runtime overhead (given by the caller)" if runtime_overhead_bytes
                                  else "not included (0)")
    assumptions = (
        weights_note,
        "activations: one inference forward at batch x max length, the largest live set of one layer "
        f"({num_layers} layers run one after the other): hidden states 2·B·S·H, attention scores B·heads·S·S "
        "(upper bound: fused attention kernels may not materialize them), FFN intermediate B·S·I, at the "
        "precision's bytes per value; inputs 3·B·S int64",
        f"allocator margin: {allocator_margin:.0%} of weights + activations (Q/K/V, softmax/GELU copies, "
        "workspaces, allocator rounding and caching)",
        f"runtime overhead: {runtime_overhead_label}",
    )
    return MemoryEstimate(
        precision=precision, batch_size=B, seq_len=S, activation_bytes=e, weights_bytes=weights,
        hidden_states_bytes=hidden,
        attention_scores_bytes=scores, ffn_intermediate_bytes=ffn, inputs_bytes=inputs,
        activations_bytes=activations, allocator_margin=float(allocator_margin), margin_bytes=margin,
        runtime_overhead_bytes=runtime_overhead_bytes, runtime_overhead_label=runtime_overhead_label,
        total_bytes=weights + activations + margin + runtime_overhead_bytes, assumptions=assumptions)


# ------------------------------------------------------------------------------------------ weights


@dataclass(frozen=True)
class WeightCount:
    """The bytes a model holds (or will hold once loaded at ``precision``), by kind."""

    precision: str
    parameter_count: int
    quantized_params: int
    float_bytes: int
    buffer_bytes: int
    int8_bytes: int
    int8_side_bytes: int
    predicted: bool
    notes: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        return self.float_bytes + self.buffer_bytes + self.int8_bytes + self.int8_side_bytes

    def describe(self) -> str:
        parts = [f"{self.float_bytes:,} B float parameters", f"{self.buffer_bytes:,} B buffers"]
        if self.quantized_params:
            parts += [f"{self.int8_bytes:,} B int8 Linear weights ({self.quantized_params:,} at 1 B)",
                      f"{self.int8_side_bytes:,} B int8 side data (scales, zero points, column offsets, "
                      "float32 biases)"]
        how = "predicted for" if self.predicted else "as held at"
        return (f"weights: {self.parameter_count:,} parameters counted on the model's tensors, {how} "
                f"{self.precision}: " + ", ".join(parts))


def _dtype_size(tensor: Any, float_size: int | None) -> int:
    if float_size is not None and tensor.is_floating_point():
        return float_size
    return tensor.element_size()


def count_weights(model: Any, precision: str) -> WeightCount:
    """Bytes of the parameters and buffers ``model`` holds at ``precision``, tied weights counted once.

    A model already converted/quantized is counted as it is: dynamic int8 Linear modules are unpacked to
    read their int8 weight, scales and bias (the fbgemm packed buffer itself is not exposed: it is counted
    as 1 B per weight plus one int32 column offset per output row). A model not yet converted (e.g. built
    on the ``meta`` device from a config) is counted as it *will* be: floating tensors at the precision's
    size, and for ``int8-dynamic`` every ``nn.Linear`` weight at 1 B (per-tensor scale and zero point,
    column offsets, float32 bias).
    """
    import torch

    if precision not in PRECISIONS:
        raise MemoryKitError(f"precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    modules = list(model.modules())
    quantized_already = any(isinstance(m, DynamicLinear) for m in modules)
    predict_int8 = precision == "int8-dynamic" and not quantized_already
    float_dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    wanted = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
              "int8-dynamic": torch.float32}[precision]
    convert = bool(float_dtypes) and float_dtypes != {wanted}
    float_size = BYTES_PER_PARAM[precision] if convert else None
    seen: set[int] = set()
    count = quantized = float_bytes = buffer_bytes = int8_bytes = side_bytes = 0
    for module in modules:
        if isinstance(module, DynamicLinear):
            weight, bias = module.weight(), module.bias()
            rows = weight.shape[0]
            quantized += weight.numel()
            int8_bytes += weight.numel() * weight.element_size()
            if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
                side_bytes += weight.q_per_channel_scales().numel() * 8 + weight.q_per_channel_zero_points().numel() * 8
            else:
                side_bytes += 16  # one float64 scale + one int64 zero point
            side_bytes += rows * INT8_ROW_OFFSET_BYTES
            count += weight.numel()
            if bias is not None:
                side_bytes += bias.numel() * bias.element_size()
                count += bias.numel()
            continue
        if predict_int8 and isinstance(module, torch.nn.Linear):
            seen.add(id(module.weight))
            quantized += module.weight.numel()
            int8_bytes += module.weight.numel()
            side_bytes += 16 + module.weight.shape[0] * INT8_ROW_OFFSET_BYTES
            count += module.weight.numel()
            if module.bias is not None:
                seen.add(id(module.bias))
                side_bytes += module.bias.numel() * 4
                count += module.bias.numel()
        for param in module.parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            count += param.numel()
            float_bytes += param.numel() * _dtype_size(param, float_size)
        for buffer in module.buffers(recurse=False):
            if id(buffer) in seen:
                continue
            seen.add(id(buffer))
            buffer_bytes += buffer.numel() * _dtype_size(buffer, float_size)
    notes = []
    if quantized_already:
        notes.append("int8 Linear weights unpacked from the dynamic quantized modules; the packed fbgemm "
                     "buffer is counted as 1 B per weight + 4 B per output row")
    return WeightCount(precision=precision, parameter_count=count, quantized_params=quantized,
                       float_bytes=float_bytes, buffer_bytes=buffer_bytes, int8_bytes=int8_bytes,
                       int8_side_bytes=side_bytes, predicted=convert or predict_int8, notes=tuple(notes))


def config_dims(config: Any) -> dict[str, int]:
    """hidden size, layers, heads and FFN size from a Hugging Face config (BERT, DistilBERT and GPT names)."""
    names = {"hidden_size": ("hidden_size", "dim", "n_embd", "d_model"),
             "num_layers": ("num_hidden_layers", "n_layers", "n_layer", "num_layers"),
             "num_heads": ("num_attention_heads", "n_heads", "n_head", "num_heads"),
             "intermediate_size": ("intermediate_size", "hidden_dim", "n_inner", "ffn_dim", "d_ff")}
    dims: dict[str, int] = {}
    for key, candidates in names.items():
        for name in candidates:
            value = getattr(config, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                dims[key] = value
                break
        else:
            if key == "intermediate_size" and "hidden_size" in dims:
                dims[key] = 4 * dims["hidden_size"]  # GPT-2 convention when n_inner is None
                continue
            raise MemoryKitError(f"config: no {key} (looked for {', '.join(candidates)})",
                                 hint="the estimate needs a transformer encoder's config.json")
    return dims


def estimate_for_model(model: Any, *, precision: str, batch_size: int, seq_len: int,
                       margin: float = DEFAULT_MARGIN, runtime_overhead_bytes: int = 0,
                       runtime_overhead_label: str | None = None, extra_weight_bytes: int = 0,
                       extra_note: str | None = None) -> MemoryEstimate:
    """:func:`estimate_memory` with the weights counted from ``model`` (:func:`count_weights`) and the
    shape read from ``model.config``. ``extra_weight_bytes`` adds tensors held beside the model (a head)."""
    weights = count_weights(model, precision)
    dims = config_dims(model.config)
    note = weights.describe() + "".join(f"; {n}" for n in weights.notes) + (f"; {extra_note}" if extra_note else "")
    return estimate_memory(
        parameter_count=weights.parameter_count, bytes_per_param=BYTES_PER_PARAM[precision],
        batch_size=batch_size, seq_len=seq_len, activation_bytes=ACTIVATION_BYTES[precision],
        allocator_margin=margin, runtime_overhead_bytes=runtime_overhead_bytes,
        runtime_overhead_label=runtime_overhead_label, quantized_params=weights.quantized_params,
        weights_bytes=weights.total_bytes + extra_weight_bytes, weights_note=note, precision=precision, **dims)


# ------------------------------------------------------------------------------------------ counters


@dataclass(frozen=True)
class RuntimeOverhead:
    """Resident memory of the runtime alone (interpreter + libraries, nothing loaded), and how it was read."""

    bytes: int | None
    label: str
    reason: str | None = None


def _status_kib(*fields: str) -> dict[str, int]:
    try:
        text = _STATUS.read_text(encoding="ascii", errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in fields and rest.split():
            out[key] = int(rest.split()[0]) * 1024
    return out


def runtime_imports(model_type: str | None = "bert") -> tuple[str, ...]:
    """What a process imports before it loads a model: torch, transformers, its modeling code (lazily
    imported by transformers, a hundred MiB resident) and the architecture's module when it exists."""
    names = ["torch", "transformers", "transformers.modeling_utils"]
    if model_type:
        module = model_type.replace("-", "_")
        names.append(f"transformers.models.{module}.modeling_{module}")
    return tuple(names)


def _importable(names: Sequence[str]) -> list[str]:
    import importlib

    done = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        done.append(name)
    return done


def runtime_overhead(imports: Sequence[str] = runtime_imports()) -> RuntimeOverhead:
    """VmRSS of *this* process after importing ``imports``: call it before loading any model or data."""
    done = _importable(imports)
    extra = [name for name in ("ipykernel",) if name in sys.modules]
    rss = _status_kib("VmRSS").get("VmRSS")
    if rss is None:
        return RuntimeOverhead(None, "runtime overhead: not measured",
                               "no VmRSS in /proc/self/status on this platform")
    return RuntimeOverhead(rss, f"VmRSS of this process after importing {', '.join(done + extra)}, "
                                "before loading any model (interpreter + libraries), measured once")


_CHILD = """
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
for line in open('/proc/self/status'):
    if line.startswith('VmRSS:'):
        print(int(line.split()[1]) * 1024)
"""


def measure_runtime_overhead(imports: Sequence[str] = runtime_imports(),
                             python: str | None = None) -> RuntimeOverhead:
    """VmRSS of a fresh process that imported ``imports`` and loaded nothing (one subprocess, a few seconds)."""
    python = python or sys.executable
    if not _STATUS.exists():
        return RuntimeOverhead(None, "runtime overhead: not measured", "no /proc/self/status on this platform")
    proc = subprocess.run([python, "-c", _CHILD, *imports], capture_output=True, text=True, timeout=600)
    lines = proc.stdout.split()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return RuntimeOverhead(None, "runtime overhead: not measured", f"the measuring process failed: {tail}")
    return RuntimeOverhead(int(lines[-1]), f"VmRSS of a fresh process ({Path(python).name}) after importing "
                                           f"{', '.join(imports)}, nothing loaded, measured once on this machine")


def reset_peak(device: Any) -> str:
    """Start a peak window on ``device``; return the scope of the next :func:`read_peak`."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return f"torch.cuda max_memory_allocated / max_memory_reserved since reset, {device}"
    return reset_cpu_peak()


def reset_cpu_peak(read_status: Any = None, clear_refs: Path | None = None) -> str:
    """Reset the process high-water mark (VmHWM, by writing ``5`` to ``/proc/self/clear_refs``) and return the
    honest scope of the next reads. The library's CPU peak counter is this same function."""
    read = read_status or _status_kib
    before = read("VmHWM", "VmRSS") or {}
    if "VmHWM" not in before:
        return "process peak RSS: not available (no VmHWM in /proc/self/status)"
    try:
        with open(clear_refs or _CLEAR_REFS, "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError as exc:
        return f"process peak RSS (VmHWM) since process start (reset not permitted: {exc.strerror or exc})"
    after = read("VmHWM", "VmRSS") or {}
    # A kernel that accepted the write but ignored it keeps an old peak that is above the current RSS.
    if before["VmHWM"] > before.get("VmRSS", 0) and after.get("VmHWM") == before["VmHWM"]:
        return "process peak RSS (VmHWM) since process start (reset not honoured by this kernel)"
    return "process peak RSS (VmHWM) since reset"


def read_peak(device: Any, scope: str) -> dict[str, Any]:
    """The peak since :func:`reset_peak`: CUDA allocated and reserved as two keys (never summed), or CPU RSS."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return {"cuda_max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
                "cuda_max_reserved_bytes": int(torch.cuda.max_memory_reserved(device)), "scope": scope,
                "reason": None}
    peak = _status_kib("VmHWM").get("VmHWM")
    if peak is None:
        return {"cpu_peak_rss_bytes": None, "scope": scope, "reason": "no VmHWM on this platform"}
    return {"cpu_peak_rss_bytes": peak, "scope": scope, "reason": None}


# ------------------------------------------------------------------------------------------ environment


def check_environment(device: str = "cpu") -> dict[str, Any]:
    """Python, torch, the device, the driver, transformers: the facts, or :class:`EnvironmentRefused`."""
    facts: dict[str, Any] = {"python": platform.python_version()}
    if sys.version_info < (3, 10):
        raise EnvironmentRefused(f"Python {facts['python']} is too old", hint="use Python 3.10 or newer")
    try:
        import torch
    except (ImportError, OSError) as exc:
        raise EnvironmentRefused(f"torch is not importable ({exc})",
                                 hint="install PyTorch first: https://pytorch.org/get-started/locally/") from None
    facts.update(torch=torch.__version__, torch_cuda=torch.version.cuda, torch_hip=torch.version.hip)
    name = str(device).strip().lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        facts.update(device="cpu", device_name=platform.processor() or platform.machine(),
                     driver_version=None, driver_reason="CPU: no driver")
    elif name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise EnvironmentRefused(
                f"--device {device} asked, but this torch {torch.__version__} (CUDA build "
                f"{torch.version.cuda or 'none'}, HIP {torch.version.hip or 'none'}) sees no GPU",
                hint="run on a GPU machine with a CUDA/ROCm build of torch, or use --device cpu")
        suffix = name.partition(":")[2]
        index = torch.cuda.current_device() if name == "cuda" else (int(suffix) if suffix.isdigit() else -1)
        if not 0 <= index < torch.cuda.device_count():
            raise EnvironmentRefused(f"--device {device}: the runtime sees {torch.cuda.device_count()} GPU(s)")
        props = torch.cuda.get_device_properties(index)
        facts.update(device=f"cuda:{index}", device_name=props.name, total_memory_bytes=int(props.total_memory))
        facts.update(zip(("driver_version", "driver_reason"), _driver()))
    else:
        raise EnvironmentRefused(f"--device {device} is not a device", hint="use cpu, cuda, cuda:N or auto")
    try:
        import transformers
    except (ImportError, OSError) as exc:
        raise EnvironmentRefused(f"transformers is not importable ({exc})",
                                 hint="pip install transformers") from None
    facts["transformers"] = transformers.__version__
    return facts


def _driver() -> tuple[str | None, str | None]:
    import torch

    if torch.version.hip:
        return None, f"ROCm/HIP {torch.version.hip}: the driver version is not read (NVML is NVIDIA-only)"
    try:
        import pynvml
    except ImportError:
        return None, f"not read: nvidia-ml-py not installed (torch built for CUDA {torch.version.cuda})"
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        return None, f"not read: NVML error {exc}"
    return (version.decode() if isinstance(version, bytes) else str(version)), None


# AMD targets with bf16 matrix instructions (MI100, MI200, MI300, MI350, RDNA3, RDNA4); PyTorch reports bf16 as
# supported on every ROCm GPU, which would let older ones run it emulated.
ROCM_BF16_TARGETS = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")


def precision_refusal(precision: str, device: str) -> tuple[str, str] | None:
    """The one device-precision policy (the library applies this same function): ``(reason, hint)`` when
    ``precision`` cannot be measured honestly on ``device`` ("cpu", "cuda", "cuda:1" …), else None."""
    if precision not in PRECISIONS:
        return f"{precision!r} is not one of {', '.join(PRECISIONS)}", "choose one of the listed precisions"
    on_cpu = device.split(":")[0] == "cpu"
    if precision == "fp16" and on_cpu:
        return "fp16 is refused on CPU (half-precision matmul is emulated there)", "use bf16 or fp32 on CPU"
    if precision == "int8-dynamic" and not on_cpu:
        return (f"int8-dynamic runs on CPU only, not on {device}",
                "PyTorch's dynamic int8 kernels are CPU kernels; use fp16/bf16 on a GPU")
    if precision in ("bf16", "fp16") and not on_cpu:
        import torch

        if torch.version.hip:  # fp16: every target ROCm 6 builds for; bf16: the targets with bf16 matrix units
            arch = (getattr(torch.cuda.get_device_properties(device), "gcnArchName", "") or "").split(":")[0]
            if precision == "bf16" and not arch.startswith(ROCM_BF16_TARGETS):
                return (f"bf16 is not supported natively by {torch.cuda.get_device_name(device)} "
                        f"({arch or 'target unknown'}); bf16 matrix instructions start with "
                        f"{', '.join(ROCM_BF16_TARGETS[:2])} (MI100, MI200)", "use fp16 or fp32 on this GPU")
            return None
        major, minor = torch.cuda.get_device_capability(device)
        name = f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
        # No silent emulation: below these, PyTorch would emulate the type or fall back to slow paths.
        if precision == "bf16" and major < 8:
            return (f"bf16 is not supported natively by {name}; bf16 arithmetic needs compute capability 8.0",
                    "use fp16 or fp32 on this GPU")
        if precision == "fp16" and (major, minor) < (5, 3):
            return (f"fp16 is not supported natively by {name}; half arithmetic needs compute capability 5.3",
                    "use fp32 on this GPU")
    return None


def check_settings(precision: str, device: str, batch_size: int, max_length: int) -> None:
    """Refuse combinations that cannot run here (the policy of :func:`precision_refusal`)."""
    if precision not in PRECISIONS:
        raise EnvironmentRefused(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    _whole("--batch-size", batch_size)
    _whole("--max-length", max_length, 2)
    refused = precision_refusal(precision, device)
    if refused is not None:
        raise EnvironmentRefused(f"--precision {refused[0]}", hint=refused[1])


# ------------------------------------------------------------------------------------------ model + forward


def load_model(path: str | Path | None, *, precision: str, device: str) -> tuple[Any, str]:
    """A model in eval mode on ``device`` at ``precision``; ``path=None`` builds the tiny BERT (random weights)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
             "int8-dynamic": torch.float32}[precision]
    if path is None:
        torch.manual_seed(0)
        model = BertModel(BertConfig(**TINY_CONFIG)).to(dtype)
        what = "tiny BERT built from a config (random weights)"
    else:
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise EnvironmentRefused(f"--model {folder}: no config.json there", hint="give a local HF model folder")
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        archs = getattr(config, "architectures", None) or []
        auto = AutoModelForSequenceClassification if any("SequenceClassification" in a for a in archs) else AutoModel
        try:
            model = auto.from_pretrained(str(folder), local_files_only=True, use_safetensors=True, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise EnvironmentRefused(f"--model {folder}: cannot load ({str(exc).splitlines()[0]})",
                                     hint="the folder needs safetensors weights saved with save_pretrained") from None
        what = f"{folder} ({type(model).__name__})"
    if precision == "int8-dynamic":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch's deprecation notice for torch.ao.quantization
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    gc.collect()
    return model.to(device).eval(), what


def observe_forward(model: Any, *, batch_size: int, seq_len: int, device: Any, warmup: int = 1) -> dict[str, Any]:
    """One forward at ``batch x seq_len`` (random ids, no padding) after ``warmup`` untimed ones; the peak."""
    import torch

    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and seq_len > limit:
        raise EnvironmentRefused(f"--max-length {seq_len} exceeds the model's {limit} positions")
    generator = torch.Generator().manual_seed(0)
    vocab = int(getattr(model.config, "vocab_size", 1000))
    inputs = {"input_ids": torch.randint(0, vocab, (batch_size, seq_len), generator=generator),
              "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long)}
    if getattr(model.config, "type_vocab_size", 0):
        inputs["token_type_ids"] = torch.zeros(batch_size, seq_len, dtype=torch.long)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    with torch.inference_mode():
        for _ in range(warmup):
            model(**inputs)
        gc.collect()
        scope = reset_peak(device)
        model(**inputs)
        peak = read_peak(device, scope)
    peak["warmup_forwards"] = warmup
    return peak


def compare(estimate: MemoryEstimate, peak: dict[str, Any]) -> list[dict[str, Any]]:
    """Observed - estimated for each counter read (CUDA allocated and reserved stay separate rows)."""
    rows = []
    for key, counter in (("cpu_peak_rss_bytes", "process peak RSS"),
                         ("cuda_max_allocated_bytes", "cuda max_memory_allocated (tensors)"),
                         ("cuda_max_reserved_bytes", "cuda max_memory_reserved (allocator)")):
        if key not in peak:
            continue
        observed = peak[key]
        diff = None if observed is None else observed - estimate.total_bytes
        rows.append({"counter": counter, "key": key, "observed_bytes": observed,
                     "estimate_bytes": estimate.total_bytes, "difference_bytes": diff,
                     "difference_pct": None if diff is None else round(100.0 * diff / estimate.total_bytes, 1),
                     "scope": peak["scope"], "reason": peak.get("reason")})
    return rows


# ------------------------------------------------------------------------------------------ report


def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:,.1f} MiB"


def estimate_lines(estimate: MemoryEstimate) -> list[str]:
    e = estimate
    rows = [("weights", e.weights_bytes), ("activations", e.activations_bytes),
            ("  hidden states 2·B·S·H", e.hidden_states_bytes),
            ("  attention scores B·heads·S·S", e.attention_scores_bytes),
            ("  FFN intermediate B·S·I", e.ffn_intermediate_bytes), ("  inputs (int64 ids, masks)", e.inputs_bytes),
            (f"allocator margin {e.allocator_margin:.0%}", e.margin_bytes),
            ("runtime overhead", e.runtime_overhead_bytes), ("total", e.total_bytes)]
    lines = [f"  {name:<32} {mib(value):>14}" for name, value in rows]
    return lines + [f"  - {a}" for a in e.assumptions]


def render(result: dict[str, Any]) -> list[str]:
    env, est = result["environment"], result["estimate_obj"]
    lines = [f"environment: Python {env['python']} | torch {env['torch']} (CUDA build {env['torch_cuda'] or 'none'}, "
             f"HIP {env['torch_hip'] or 'none'}) | transformers {env['transformers']} | device {env['device']} "
             f"({env.get('device_name') or 'unknown'}) | driver {env['driver_version'] or env['driver_reason']}",
             f"model: {result['model']} | precision {est.precision} | batch {est.batch_size} x length {est.seq_len} "
             "(every sequence at max length)", "", "estimate (written before running):"]
    lines += estimate_lines(est)
    lines += ["", f"observation (one forward, after {result['peak']['warmup_forwards']} warm-up forward(s)):"]
    for row in result["comparison"]:
        pct = "" if row["difference_pct"] is None else f" ({row['difference_pct']:+.1f} %)"
        diff = "n/a" if row["difference_bytes"] is None else f"{row['difference_bytes'] / MIB:+,.1f} MiB"
        lines += [f"  {row['counter']}: observed {mib(row['observed_bytes'])}, estimated {mib(row['estimate_bytes'])}, "
                  f"difference (observed - estimated) {diff}{pct}", f"    scope: {row['scope']}"]
        if row["reason"]:
            lines.append(f"    not measured: {row['reason']}")
    if any(r["key"].startswith("cuda") for r in result["comparison"]):
        lines.append("  allocated and reserved are separate counters whose peaks can occur at different moments: "
                     "never add them")
    lines.append("note: a card's capacity says nothing about throughput, interconnect, or automatic distribution "
                 "over several GPUs")
    return lines


def model_type_of(path: str | None) -> str | None:
    """``model_type`` from a folder's config.json (read as JSON, nothing imported); ``bert`` for the tiny model."""
    if path is None:
        return "bert"
    try:
        value = json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, str) else None


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="Estimate, then observe, the memory of one forward pass.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="local Hugging Face model folder (safetensors)")
    which.add_argument("--tiny", action="store_true", help="build a small BERT from a config (runs anywhere)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="allocator margin (0.2 = 20 %%)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed forwards before the observed one")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    warmup = _whole("--warmup", args.warmup, 0)
    env = check_environment(args.device)
    check_settings(args.precision, env["device"], args.batch_size, args.max_length)
    import torch

    device = torch.device(env["device"])
    if device.type == "cuda":
        overhead = RuntimeOverhead(0, NO_RUNTIME)
    else:
        overhead = runtime_overhead(runtime_imports(model_type_of(args.model)))
    model, what = load_model(None if args.tiny else args.model, precision=args.precision, device=env["device"])
    estimate = estimate_for_model(model, precision=args.precision, batch_size=args.batch_size,
                                  seq_len=args.max_length, margin=args.margin,
                                  runtime_overhead_bytes=overhead.bytes or 0,
                                  runtime_overhead_label=overhead.label if overhead.bytes is not None
                                  else f"not measured ({overhead.reason}): 0 added, the comparison is incomplete")
    peak = observe_forward(model, batch_size=args.batch_size, seq_len=args.max_length, device=device,
                           warmup=warmup)
    result = {"environment": env, "model": what, "estimate_obj": estimate, "peak": peak,
              "comparison": compare(estimate, peak)}
    data = {"environment": env, "model": what, "estimate": estimate.to_dict(), "terms": estimate.terms(),
            "observed": peak, "comparison": result["comparison"]}
    return {"json": args.json, "data": data, "lines": render(result)}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        result = run(argv)
    except MemoryKitError as exc:
        print(f"error: cannot run: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    if result["json"]:
        print(json.dumps(result["data"], indent=2, sort_keys=True))
    else:
        print("\n".join(result["lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
