"""Which engine runs a pass: one name per engine, one callable per name (a pass spec in, the pass's typed result
out), chosen from the variant's fields. Reads the protocol's variant; writes nothing. The runner reaches every
engine through this module: the engines of a run (:func:`engines`), Ray started for it (:func:`start_ray`), the
worker templates of process isolation (:func:`worker_templates`).

- ``ray``: the variant's ``engine = "ray"``, on the Ray cluster the runner started (:mod:`.raypass`);
- ``parallel``: ``data_parallel > 1``, one worker process per device (X3, :mod:`.parallel`);
- ``local``: one process on this machine, the runner's own or a worker of its own (:mod:`.local`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from iteralab.campaign.engines.local import local_engine
from iteralab.campaign.engines.parallel import run_data_parallel
from iteralab.campaign.engines.prefork import Templates, available
from iteralab.campaign.engines.raypass import RayEngine, require_ray
from iteralab.campaign.engines.rayrecords import RayCluster
from iteralab.campaign.records import PassResult, PassSpec
from iteralab.plan.protocol import Protocol, Variant

# RayCluster (Ray as a run started it: the journal's ``engine_started``, the manifest's ``ray``) is named here for
# the runner, which reaches the engines through this module only
__all__ = ["NAMES", "Engine", "RayCluster", "RayEngine", "check_engines", "engine_name", "engines", "start_ray",
           "worker_templates"]

#: One pass spec in, the pass's result out.
Engine = Callable[[PassSpec], PassResult]
NAMES = ("local", "parallel", "ray")


def engine_name(variant: Variant) -> str:
    """The engine a variant's passes run on: a Ray variant on Ray (whatever its ``data_parallel``), a data-parallel
    one on ``parallel``, any other on ``local``."""
    if variant.engine == "ray":
        return "ray"
    if variant.data_parallel > 1:
        return "parallel"
    return "local"


def _typed(engine: Callable[[PassSpec], dict[str, Any]]) -> Engine:
    """An engine whose result record (its JSON form, as a worker writes it) is read into a :class:`PassResult`."""
    return lambda spec: PassResult.from_json(engine(spec))


def engines(isolation: str, templates: Any = None, ray: RayEngine | None = None,
            prepare: Callable[[PassSpec], PassSpec] | None = None) -> dict[str, Engine]:
    """The engines of one run, by name. ``local`` runs each pass by the run's ``isolation`` (``process``: forked
    from ``templates`` where there are some; :func:`~iteralab.campaign.engines.local.local_engine`), its spec
    first through ``prepare`` (the runner's last word on it); ``ray`` is there only when the run started Ray
    (:func:`start_ray`)."""
    local = local_engine(isolation, templates)
    registry: dict[str, Engine] = {
        "local": local if prepare is None else (lambda spec: local(prepare(spec))),
        "parallel": _typed(run_data_parallel)}
    if ray is not None:
        registry["ray"] = ray.run_pass
    return registry


def check_engines(protocol: Protocol, source: str) -> None:
    """Before anything is written: what the protocol's engines need of this machine (Ray installed, and a local
    Ray's CPUs left for the reads; :func:`~iteralab.campaign.engines.raypass.require_ray`)."""
    require_ray(protocol, source)


def start_ray(protocol: Protocol, variants: list[str]) -> RayEngine | None:
    """Ray, started now (campaign start-up) when one of ``variants`` (the slots still to run) is a Ray variant."""
    return RayEngine.for_slots(protocol, variants)


def worker_templates(scratch: Path) -> Templates | None:
    """The worker templates of process isolation (:mod:`.prefork`), or None where forking is not available (each
    pass then starts a fresh interpreter)."""
    return Templates(scratch) if available() else None
