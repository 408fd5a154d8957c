"""The lock's check of the final corpus size against the size the tolerance needs.

The figure needs the disagreement of the reference and a candidate variant on the tuning split, which only a run of
the model gives; ``lock`` runs no model, so it reads what ``iteralab threshold`` recorded beside the protocol
(:func:`iteralab.plan.samplesize.record_path`) and recomputes the size with the locked tolerance, confidence and
power. Without a record the size is not known and nothing is said; a record measured on another tuning split or
metric is said to be stale, not used.
"""

from __future__ import annotations

from collections.abc import Mapping

from iteralab.common.files import sha256_file
from iteralab.plan.lockfile import ProtocolFile
from iteralab.plan.samplesize import DEFAULT_CONFIDENCE, SizeRecord, record_path

__all__ = ["size_warning"]


def size_warning(protocol_file: ProtocolFile, inputs: Mapping[str, object]) -> str | None:
    """One line when the locked final corpus is smaller than the size the tolerance needs (or when threshold's
    record no longer fits the protocol); None when it is large enough or the size is not known."""
    path, protocol = protocol_file.path, protocol_file.protocol
    where = record_path(path)
    record = SizeRecord.read(where) if where.is_file() else None
    if record is None or not record.candidates:
        return None
    metric = protocol.metric
    tuning = protocol_file.where(protocol.corpus.tuning_path) if protocol.corpus.tuning_path else None
    if record.metric != metric.label or tuning is None or not tuning.is_file() \
            or sha256_file(tuning) != record.tuning_sha256:
        return (f"{path}: {where.name} was measured for another metric or tuning split: the corpus size the "
                f"tolerance needs is not known (run iteralab threshold {path.name} again)")
    tolerance = metric.allowed_drop(record.reference_value)
    confidence = DEFAULT_CONFIDENCE if metric.confidence is None else metric.confidence
    found = record.largest(tolerance, confidence, metric.power)
    assert found is not None
    worst, needed = found
    queries, datasets = inputs.get("queries"), inputs.get("datasets")
    if worst.unit == "queries":
        have = int(queries.get("queries") or 0) if isinstance(queries, Mapping) else 0
    else:  # the lock's record of each corpus source (every dataset, or the one corpus) gives its size
        sources = list(datasets.values()) if isinstance(datasets, Mapping) and datasets else [inputs.get("corpus")]
        have = sum(int(r.get("size") or 0) for r in sources if isinstance(r, Mapping))
    if needed is not None and have >= needed:
        return None
    need = (f"{needed} {worst.unit}" if needed is not None else
            f"more than any size ({worst.variant}'s tuning difference {worst.difference:+.4f} is not within it)")
    return (f"{path}: the final corpus has {have} {worst.unit}; tolerance {tolerance:g} at {confidence:g} confidence "
            f"and power {metric.power:g} needs {need} ({worst.variant} against {metric.reference_variant}, "
            f"{where.name})")
