"""The records of a Ray pass, typed (:mod:`iteralab.campaign.engines.raypass`): the cluster the runner started (the
journal's ``engine_started``, the manifest's ``ray``), what each actor of a pass is built with, and what an actor
reports back to the driver in the meta column of its batches (its start-up, its peak memory).

Reads and writes nothing on disk itself: :meth:`RayCluster.to_json` is the journal's form; an :class:`ActorMeta`
crosses from an actor to the driver as one JSON cell (:meth:`ActorMeta.to_cell`, :meth:`ActorMeta.from_cell`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from iteralab.campaign.records import PassSpec


@dataclass(frozen=True)
class RayLayout:
    """The actor pool a campaign's Ray passes use (the protocol's ``run.ray_*``)."""

    actors: int
    cpus_per_actor: float
    gpus_per_actor_of_a_gpu_variant: float
    threads_per_actor: int | None
    no_progress_timeout_s: float

    @classmethod
    def of(cls, run: Any) -> RayLayout:
        """The layout of the protocol's ``run`` table."""
        return cls(run.ray_actors, run.ray_cpus_per_actor, run.ray_gpus_per_actor, run.ray_threads_per_actor,
                   run.ray_no_progress_timeout_s)


@dataclass(frozen=True)
class RayCluster:
    """Ray as the runner started it or connected to it (campaign start-up, R2), as Ray reports the cluster."""

    init_s: float
    ray_version: str
    address: str
    nodes: int
    cpus: float
    gpus: float
    layout: RayLayout

    def to_json(self) -> dict[str, str | float | dict[str, float | None]]:
        """The journal's ``engine_started`` record (and the manifest's ``ray``)."""
        return {"engine": "ray", "init_s": self.init_s, "ray_version": self.ray_version, "address": self.address,
                "nodes": self.nodes, "cpus": self.cpus, "gpus": self.gpus, "layout": asdict(self.layout)}


@dataclass(frozen=True)
class ActorSpec:
    """What each actor of a pass is built with (Ray pickles it to the actor): the pass, torch's threads, the
    prediction file's path (what the kind's sink names its columns after), whether Ray assigns it a card."""

    pass_spec: PassSpec
    threads: int | None
    target: str
    gpu: bool


@dataclass(frozen=True)
class ActorRuntime:
    """What only the process running the model knows: torch's threads and determinism options as applied."""

    torch_threads: int
    interop: int
    determinism: dict[str, bool | str | None]


@dataclass(frozen=True)
class ActorStartup:
    """An actor's start-up (R2), timed in its constructor: wall-clock creation and ready times (compared with the
    driver's), its phases, the workload it loaded, and how it ran (threads, priority, the card Ray assigned)."""

    created_at: float | None = None
    ready_at: float | None = None
    runtime_s: float | None = None
    load_s: float | None = None
    compile_s: float | None = None
    warmup_s: float | None = None
    #: the last warm-up repetition: what a relative pass time limit projects from
    last_warmup_s: float | None = None
    threads: int | None = None
    nice: int | None = None
    omp_num_threads: str | None = None
    #: the model's own description and file hashes (``Workload.describe``, ``Workload.file_hashes``)
    workload: dict[str, Any] | None = None
    file_hashes: dict[str, str] | None = None
    runtime: ActorRuntime | None = None
    #: the card Ray assigned (Ray's ids and ``models.cards.card_identity``), on a GPU variant
    card: dict[str, Any] | None = None

    def entry(self, submitted: float) -> dict[str, float | str | dict[str, Any] | None]:
        """This actor's start-up as the result's ``startup.ray_actors`` records it (``start_s``: from the dataset's
        submission, ``submitted``, to the actor's creation)."""
        return {"start_s": (self.created_at or submitted) - submitted, "runtime_s": self.runtime_s,
                "load_s": self.load_s, "warmup_s": self.warmup_s, "compile_s": self.compile_s,
                "threads": self.threads, "nice": self.nice, "omp_num_threads": self.omp_num_threads,
                **({"card": self.card} if self.card else {})}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ActorStartup:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        runtime = values.get("runtime")
        if isinstance(runtime, dict):
            values["runtime"] = ActorRuntime(**runtime)
        return cls(**values)  # type: ignore[arg-type]  # the actor's own JSON form (:meth:`ActorMeta.to_cell`)


@dataclass(frozen=True)
class ActorMeta:
    """One batch's meta cell: the actor that returned it, its peak RSS so far, and, on its first batch, its
    start-up record."""

    actor: str
    rss: int | None
    startup: ActorStartup | None = None

    def to_cell(self) -> str:
        record: dict[str, object] = {"actor": self.actor, "rss": self.rss}
        if self.startup is not None:
            record["startup"] = asdict(self.startup)
        return json.dumps(record)

    @classmethod
    def from_cell(cls, cell: str) -> ActorMeta:
        data = json.loads(cell)
        startup = data.get("startup")
        return cls(str(data.get("actor")), data.get("rss"),
                   ActorStartup.from_json(startup) if isinstance(startup, dict) else None)


@dataclass
class ActorRecord:
    """What the driver learned of one actor over a pass: its start-up record and its largest peak RSS."""

    startup: ActorStartup | None = None
    rss: int | None = None
