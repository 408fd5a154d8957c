"""A sentence-transformers folder's own pooling and normalisation, read from its small JSON files without torch.

Such a folder lists its modules in ``modules.json`` (a Transformer, a Pooling, often a Normalize); the Pooling
module's ``config.json`` (``1_Pooling/config.json``) says how token states become one vector
(``pooling_mode_mean_tokens``, ``pooling_mode_cls_token`` …). The model's own vectors are those: an encoder
pooled otherwise gives another model's vectors, and every variant would share the mistake, so no tolerance against
the reference variant could catch it. ``lock`` therefore refuses an ``[embedding]`` table that contradicts the
folder (:func:`pooling_problem`), and a protocol that omits ``embedding.pooling`` takes the folder's
(:func:`resolved_pooling`). A folder without ``modules.json`` (a plain Hugging Face encoder) declares nothing:
the protocol's pooling (default mean) and normalisation stand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file
from iteralab.errors import ProtocolError, WorkloadError

__all__ = ["POOLINGS", "FolderPooling", "check_pooling", "folder_pooling", "pooling_hashes", "pooling_problem",
           "resolved_pooling"]

#: The poolings an encoder workload computes (``models.encoder``).
POOLINGS = ("mean", "cls")
#: A sentence-transformers Pooling config's modes, in the words of ``embedding.pooling`` where it has one.
_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
          "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_weightedmean_tokens": "weightedmean",
          "pooling_mode_lasttoken": "lasttoken"}


@dataclass(frozen=True)
class FolderPooling:
    """What a sentence-transformers folder declares: its pooling (``None`` when it lists no Pooling module; several
    modes joined by ``+``), whether it lists a Normalize module, and the files that say so (for messages)."""

    pooling: str | None
    normalize: bool
    pooling_file: Path | None
    modules_file: Path


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise WorkloadError(f"{path}: not a readable JSON file ({exc})",
                            hint="restore the model folder's sentence-transformers files") from None


def folder_pooling(folder: Path | None) -> FolderPooling | None:
    """The pooling and normalisation a sentence-transformers folder declares; None for another folder."""
    modules_file = folder / "modules.json" if folder is not None else None
    if modules_file is None or not modules_file.is_file():
        return None
    modules = _json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise WorkloadError(f"{modules_file}: not a sentence-transformers module list (a JSON array of objects)",
                            hint="restore the model folder's modules.json")
    kinds = [(str(m.get("type", "")).rsplit(".", 1)[-1], str(m.get("path", ""))) for m in modules]
    normalize = any(kind == "Normalize" for kind, _ in kinds)
    pooling_path = next((path for kind, path in kinds if kind == "Pooling"), None)
    if pooling_path is None:
        return FolderPooling(None, normalize, None, modules_file)
    config_file = modules_file.parent / pooling_path / "config.json"
    config = _json(config_file)
    if not isinstance(config, dict):
        raise WorkloadError(f"{config_file}: not a sentence-transformers Pooling config (a JSON object)",
                            hint="restore the model folder's Pooling config")
    declared = config.get("pooling_mode")  # a newer writer may name the mode directly
    modes = [str(declared)] if isinstance(declared, str) else [name for key, name in _MODES.items()
                                                              if config.get(key) is True]
    return FolderPooling("+".join(modes) or None, normalize, config_file, modules_file)


def pooling_hashes(folder: Path | None) -> dict[str, str]:
    """sha256 of the Pooling config a sentence-transformers folder declares, by its path in the folder
    (``1_Pooling/config.json``): a model file like the top-level ones (``modules.json`` among them), fingerprinted by
    ``lock``, carried with the evidence and staged by ``rerun``, since the pooling it names makes the vectors."""
    found = folder_pooling(folder)
    if found is None or found.pooling_file is None:
        return {}
    return {found.pooling_file.relative_to(found.modules_file.parent).as_posix(): sha256_file(found.pooling_file)}


def resolved_pooling(spec: Any, folder: Path | None) -> str:
    """The pooling an encoder runs with: ``embedding.pooling`` when the protocol writes it, else the folder's own
    when it is one the encoder computes, else the default (mean). ``lock`` has refused every contradiction."""
    if "pooling" in spec.model_fields_set:
        return str(spec.pooling)
    found = folder_pooling(folder)
    return found.pooling if found is not None and found.pooling in POOLINGS else str(spec.pooling)


def pooling_problem(spec: Any, folder: Path | None) -> str | None:
    """Where the protocol's ``[embedding]`` (``spec``) contradicts the folder's own pooling or normalisation, in
    one line naming both; None when they agree or the folder declares nothing."""
    found = folder_pooling(folder)
    if found is None:
        return None
    written = "pooling" in spec.model_fields_set
    if found.pooling is not None and found.pooling not in POOLINGS and not written:
        return (f"embedding.pooling is absent, so the model folder's own is taken, but {found.pooling_file} declares "
                f"{found.pooling} pooling, which the encoder does not compute ({' or '.join(POOLINGS)})")
    if found.pooling is not None and written and spec.pooling != found.pooling:
        return (f"embedding.pooling = {spec.pooling!r} contradicts the model folder: {found.pooling_file} declares "
                f"{found.pooling} pooling")
    if bool(spec.normalize) != found.normalize:
        said = f"embedding.normalize = {str(bool(spec.normalize)).lower()}"
        said += "" if "normalize" in spec.model_fields_set else " (the default)"
        lists = "lists a Normalize module (its vectors are L2-normalised)" if found.normalize else \
            "lists no Normalize module (its vectors are not L2-normalised)"
        return f"{said} contradicts the model folder: {found.modules_file} {lists}"
    return None


def check_pooling(spec: Any, model_kind: str, folder: Path | None, source: object) -> None:
    """``lock``: refuse, in one line naming the protocol file, an encoder's ``[embedding]`` (``spec``: None for a
    job without vectors) that contradicts its folder (:func:`pooling_problem`); any other job or model kind declares
    nothing to check. (A pass worker imports this module: it takes the protocol's parts, never the protocol's
    models.)"""
    if spec is None or model_kind != "encoder":
        return
    try:
        problem = pooling_problem(spec, folder)
    except WorkloadError as exc:
        raise ProtocolError(f"{source}: model.path: {exc.message}", hint=exc.hint) from None
    if problem:
        raise ProtocolError(f"{source}: {problem}",
                            hint="declare the folder's own pooling and normalisation (or leave embedding.pooling out "
                                 "to take the folder's); a locked protocol is amended by raising its version")
