"""What every kind's prediction file shares: its name in the campaign's ``predictions/`` folder.

Each kind's own file (columns, writer, reader and checks) is the ``output`` module of the kind's folder:
``classification.output`` (labels and probabilities), ``embedding.output`` (vectors), ``generation.output``
(texts). Every one holds ``id`` first, one row per completed input, in corpus order.
"""

from __future__ import annotations

from pathlib import Path

from iteralab.campaign.folder import PREDICTIONS

SUFFIX = ".parquet"


def file_name(pass_id: str) -> str:
    return f"{pass_id}{SUFFIX}"


def is_prediction_name(name: str) -> bool:
    return name.endswith(SUFFIX)


def pass_of(name: str) -> str:
    """The pass id a prediction file name belongs to."""
    return name.removesuffix(SUFFIX)


def prediction_path(campaign_dir: Path, pass_id: str) -> Path:
    """Where a pass's file is: ``predictions/<pass_id>.parquet``."""
    return campaign_dir / PREDICTIONS / file_name(pass_id)
