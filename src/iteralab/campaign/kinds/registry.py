"""The kinds by name: :func:`kind_named` (a recorded name) and :func:`kind_of` (a protocol's ``[task] kind``)."""

from __future__ import annotations

from typing import Any

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.classification import CLASSIFICATION
from iteralab.campaign.kinds.embedding import EMBEDDING
from iteralab.campaign.kinds.generation import GENERATION
from iteralab.campaign.kinds.scoring import SCORING
from iteralab.errors import ProtocolError

#: Every kind, by the name ``[task] kind`` gives it.
KINDS: dict[str, JobKind] = {kind.name: kind for kind in (CLASSIFICATION, EMBEDDING, GENERATION, SCORING)}


def kind_named(name: str) -> JobKind:
    """The kind recorded under ``name`` (``campaign.json``, a pass spec)."""
    try:
        return KINDS[name]
    except KeyError:
        raise ProtocolError(f"unknown job kind {name!r}; hint: one of {', '.join(KINDS)}") from None


def kind_of(protocol: Any) -> JobKind:
    """The kind of a protocol (:class:`~iteralab.plan.protocol.Protocol`): its ``[task] kind``."""
    return kind_named(protocol.task.kind)


def kind_of_campaign(campaign: Any) -> JobKind:
    """The kind recorded in a campaign folder's ``campaign.json`` (:class:`~iteralab.campaign.campaignrecord.
    CampaignRecord`)."""
    return kind_named(campaign.kind)
