"""Which engine runs a pass: one name per engine, one callable per name (a pass spec in, the pass's result record
out), chosen from the variant's fields. Reads the protocol's variant; writes nothing.

- ``ray``: the variant's ``engine = "ray"``, on the Ray cluster the runner started (:mod:`.raypass`);
- ``parallel``: ``data_parallel > 1``, one worker process per device (X3, :mod:`.parallel`);
- ``local``: one process on this machine, the runner's own or a worker of its own (:mod:`.local`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iteralab.campaign.engines.parallel import run_data_parallel
from iteralab.campaign.records import PassSpec
from iteralab.plan.protocol import Variant

#: One pass spec in, the pass's result record (its JSON form) out.
Engine = Callable[[PassSpec], dict[str, Any]]
NAMES = ("local", "parallel", "ray")


def engine_name(variant: Variant) -> str:
    """The engine a variant's passes run on: a Ray variant on Ray (whatever its ``data_parallel``), a data-parallel
    one on ``parallel``, any other on ``local``."""
    if variant.engine == "ray":
        return "ray"
    if variant.data_parallel > 1:
        return "parallel"
    return "local"


def engines(local: Engine, ray: Engine | None = None) -> dict[str, Engine]:
    """The engines of one run, by name. ``local`` is the runner's (its isolation and worker templates fixed);
    ``ray`` is there only when the run started Ray, which it does when a slot still to run is a Ray variant."""

    registry: dict[str, Engine] = {"local": local, "parallel": run_data_parallel}
    if ray is not None:
        registry["ray"] = ray
    return registry
