"""The protocol's own evaluation routine (``[metric] routine``): what it is handed, and its value for a pass.

A routine is called with keyword arguments, on whole arrays in corpus order (never one document at a time)::

    def my_metric(*, ids: list[str], outputs: ClassificationOutputs, references: numpy.ndarray | None) -> float

An embedding job whose protocol names a queries file (``metric.queries``) also hands ``queries``, an
:class:`EmbeddedQueries` (the query ids, the pass's query vectors and each query's relevant ids)::

    def my_metric(*, ids, outputs, references, queries: EmbeddedQueries) -> float

``ids`` are the documents' ids; ``outputs`` is the pass's output for its kind of job (for a classification pass,
:class:`ClassificationOutputs`; for an embedding pass its vectors, one ``[n, d]`` float32 array:
``embedding.verdict``); ``references`` the reference labels (a str array) or None where the corpus has none. It is
called once for the whole corpus (the documents the pass covered) and once per group of each gating stratum
subgroup; class subgroups keep the recall of their class (an embedding job's: its kNN recall). It is imported from
the campaign folder's carried copy (:mod:`iteralab.lock.usercode`), so ``run``, ``verify`` and ``rerun`` call the
locked file. Whatever it raises, or a value that is no finite number, is one :class:`~iteralab.errors.RoutineError`
line: the pass's verdict fails with it, never the campaign.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from iteralab.common.files import sha256_file
from iteralab.errors import RoutineError, one_line
from iteralab.lock.modules import load_function

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["ClassificationOutputs", "EmbeddedQueries", "Routine", "RoutineValues", "load_routine", "routine_values"]


@dataclass(frozen=True)
class ClassificationOutputs:
    """A classification pass's outputs for the documents a routine is called on, in corpus order."""

    #: the predicted class name per document (a NumPy str array; "" where the prediction is no declared class)
    labels: np.ndarray
    #: the class probabilities, float32 ``[n, len(classes)]``, columns in the order of ``classes``
    probs: np.ndarray
    #: the protocol's classes (``corpus.classes``)
    classes: tuple[str, ...]


@dataclass(frozen=True)
class EmbeddedQueries:
    """An embedding job's queries as its routine receives them (``metric.queries``), in the file's order."""

    #: the queries' ids
    ids: list[str]
    #: their vectors, float32 ``[m, d]``, embedded by the pass with its own variant (as the documents')
    vectors: np.ndarray
    #: each query's relevant document ids (ids of the corpus, as ``ids`` of the documents)
    relevant: list[list[str]]
    #: each relevant id's grade, in the order of ``relevant`` (None: the file gives no grades, binary relevance)
    grades: list[list[float]] | None


@dataclass(frozen=True)
class Routine:
    """The routine of a campaign, imported from its carried copy; ``error`` says why it could not be (then every
    call fails with that line)."""

    ref: str
    fn: Callable[..., Any] | None
    error: str | None = None

    def __call__(self, ids: list[str], outputs: ClassificationOutputs | np.ndarray,
                 references: np.ndarray | None, queries: EmbeddedQueries | None = None) -> float:
        """The routine's value (a finite float), or a :class:`RoutineError` of one line; ``queries`` is handed
        only when given (an embedding job with ``metric.queries``)."""
        if self.fn is None:
            raise RoutineError(self.error or f"metric routine {self.ref} is not loaded")
        extra = {} if queries is None else {"queries": queries}
        try:
            value = self.fn(ids=ids, outputs=outputs, references=references, **extra)
        except Exception as exc:  # the user's code: what it raises fails this pass's verdict, in one line
            raise RoutineError(f"metric routine {self.ref} raised {one_line(exc)}") from None
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise RoutineError(f"metric routine {self.ref} returned {type(value).__name__}, expected one float")
        if not math.isfinite(float(value)):
            raise RoutineError(f"metric routine {self.ref} returned {float(value)}, not a finite number")
        return float(value)


def load_routine(folder: Path, protocol: Protocol, record: Mapping[str, Any] | None) -> Routine | None:
    """The protocol's routine from the folder's carried copy (``record``: campaign.json's ``routine``); None when
    the protocol declares none. A copy that is missing, differs from its recorded sha256 or cannot be imported
    gives a routine whose every call fails with that line."""
    ref = protocol.metric.routine
    if ref is None:
        return None
    if not record or record.get("ref") != ref:
        return Routine(ref, None, f"metric routine {ref}: campaign.json records no carried copy of it")
    path = folder / str(record.get("file"))
    if not path.is_file() or sha256_file(path) != record.get("sha256"):
        return Routine(ref, None, f"metric routine {ref}: the carried copy {record.get('file')} is missing or "
                                  "differs from its recorded sha256")
    try:
        return Routine(ref, load_function(path, ref))
    except RoutineError as exc:
        return Routine(ref, None, exc.message)


@dataclass(frozen=True)
class RoutineValues:
    """A pass's routine values: the whole corpus's, each gating stratum group's (``<subgroup>:<group>``), and the
    first error (its one line), with which the values it prevented are None."""

    metric: float | None
    groups: dict[str, float | None]
    error: str | None


def routine_values(routine: Routine, protocol: Protocol, ids: pa.Array, truth: np.ndarray, strata: np.ndarray,
                   stratum_names: tuple[str, ...], covered: np.ndarray, predicted: np.ndarray,
                   probs: np.ndarray) -> RoutineValues:
    """Call the routine on the covered documents, then on those of each group of each gating stratum subgroup.
    Arrays are per expected document in corpus order: ``truth`` and ``predicted`` class codes (-1: no class),
    ``strata`` codes into ``stratum_names``; ``probs`` holds the covered documents' probability rows."""
    classes = tuple(protocol.corpus.classes)
    names = np.asarray([*classes, ""])  # code -1 reads the last name: no class

    def call(rows: np.ndarray) -> float:
        mine = rows[covered]  # which of the covered documents
        return routine(ids.filter(pa.array(rows & covered)).to_pylist(),
                       ClassificationOutputs(names[predicted[rows & covered]], probs[mine], classes),
                       names[truth[rows & covered]])

    errors: list[str] = []

    def value(rows: np.ndarray) -> float | None:
        if not (rows & covered).any():
            return None
        try:
            return call(rows)
        except RoutineError as exc:
            errors.append(exc.message)
            return None

    metric = value(np.ones(len(truth), dtype=bool))
    groups: dict[str, float | None] = {}
    for sg in protocol.subgroups:
        if sg.by == "stratum" and sg.gating:
            for i, name in enumerate(stratum_names):
                groups[f"{sg.name}:{name}"] = value(strata == i)
    return RoutineValues(metric, groups, errors[0] if errors else None)
