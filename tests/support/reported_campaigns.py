"""A finished campaign folder as ``iteralab report`` leaves it (the hand-built campaign of ``stats_campaigns``, its
statistics, decision and report written), sealed or not: what the Python API and the MLflow export read."""

from __future__ import annotations

from pathlib import Path

from iteralab.decision.report import finalize
from iteralab.evidence.bundle import seal
from stats_campaigns import build_campaign


def reported_campaign(folder: Path, *, sealed: bool = True) -> Path:
    """``folder`` written (it must not exist): five variants on one RTX 4090, three rounds, one failed pass, then
    ``report`` (decision.json, decision.md, report.html, stats), then the seal unless ``sealed`` is False."""
    build_campaign(folder, hardware="rtx4090")
    finalize([folder])
    if sealed:
        seal(folder)
    return folder
