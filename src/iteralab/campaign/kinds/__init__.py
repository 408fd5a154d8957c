"""The kinds of job on one seam: each kind (classification, embedding, generation) is one :class:`JobKind`
object, in a folder of its own that holds everything the kind owns (its prediction file, its pass sink, its
verdict part, its raw-table columns and quality series).

Reads: the locked protocol's ``[task] kind`` (once, :func:`~iteralab.campaign.kinds.registry.kind_of`) or the
kind recorded in ``campaign.json``. Writes: the kind's prediction files (``<kind>/output.py``).

The kinds sit in ``campaign/`` above the folder layer and below the engines and the verdict: an engine, the
verdict, the runner, ``evidence/`` and ``decision/`` ask the kind object what to do, and never compare a kind's
name themselves.
"""
