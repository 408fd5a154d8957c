"""Rules for the engines a pass can run on (X4), checked when a protocol is read and again against the cluster.

Ray Data runs its read tasks on the same CPUs as the actor pool: a read task asks for one whole CPU. An actor
layout that holds every CPU of the cluster leaves the reads waiting for a CPU that never comes, and Ray waits
its no-progress timeout before failing (measured: 2 actors × 1 CPU on a 2-CPU cluster hung). Such a layout is
refused before anything runs.
"""

from __future__ import annotations

#: CPUs one Ray Data read task asks for (Ray's default for read tasks).
READ_TASK_CPUS = 1.0


def layout_problem(actors: int, cpus_per_actor: float, cluster_cpus: float | None) -> str | None:
    """Why ``actors`` × ``cpus_per_actor`` cannot run on ``cluster_cpus`` CPUs (None: fits, or the cluster's
    CPUs are not known yet)."""
    if cluster_cpus is None:
        return None
    held = actors * cpus_per_actor
    if held + READ_TASK_CPUS > cluster_cpus:
        return (f"the Ray actor layout {actors} actor{'s' if actors != 1 else ''} × {cpus_per_actor:g} CPU "
                f"holds {held:g} of the cluster's {cluster_cpus:g} CPUs and leaves less than "
                f"{READ_TASK_CPUS:g} CPU for Ray Data's read tasks (the pass would hang); use fewer actors or "
                "fewer CPUs per actor (run.ray_actors, run.ray_cpus_per_actor)")
    return None
