"""Rules for the engines a pass can run on (X4), checked when a protocol is read and again against the cluster.

A Ray variant on a GPU (``device`` "cuda", "cuda:N", or "auto" on a cluster with GPUs) asks Ray for
``run.ray_gpus_per_actor`` GPUs per actor: Ray then reserves that share of a card for the actor alone and sets the
actor's visibility to the card it assigned. A zero-GPU actor would inherit the driver's visibility and share cards
with anything else Ray places there. A GPU variant on a cluster without GPUs is refused at ``lock`` and ``run``.

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


def gpu_share_problem(gpus_per_actor: float) -> str | None:
    """Ray gives an actor a fraction of one card, or whole cards: 1.5 GPUs is not a request Ray can meet."""
    if gpus_per_actor > 1 and gpus_per_actor != int(gpus_per_actor):
        return (f"run.ray_gpus_per_actor = {gpus_per_actor:g}: Ray gives an actor a fraction of one card or whole "
                "cards; use a value up to 1, or a whole number")
    return None


def ray_wants_gpu(device_name: str, cluster_gpus: float | None) -> bool:
    """Whether a Ray variant's actors run on GPUs: an explicit ``cuda`` device, or ``auto`` on a cluster with GPUs."""
    text = str(device_name).strip().lower()
    return text.startswith("cuda") or (text == "auto" and bool(cluster_gpus))


def ray_gpu_problem(variants: list[tuple[str, str]], resources: dict[str, float], where: str) -> str | None:
    """Why the GPU variants among ``variants`` (name, device) cannot run on a Ray cluster of ``resources`` (Ray's
    ``cluster_resources()``), naming what was found; None when none asks for a GPU or the cluster has GPUs."""
    gpus = float(resources.get("GPU", 0.0) or 0.0)
    wanting = [name for name, device in variants if str(device).strip().lower().startswith("cuda")]
    if not wanting or gpus > 0:
        return None
    return (f"variant {wanting[0]!r} runs on a GPU with engine \"ray\", but the Ray cluster ({where}) has no GPU: "
            f"it reports {float(resources.get('CPU', 0.0)):g} CPUs and {gpus:g} GPUs")
