"""Ray runs the engine and interrupt tests share: the variants that run on a local Ray of their own, and the folder of
support modules its workers import."""

from __future__ import annotations

from pathlib import Path


TESTS = Path(__file__).resolve().parent
RAY_RUN = "ray_num_cpus = 2\nray_actors = 1\nray_cpus_per_actor = 1\nray_no_progress_timeout_s = 60\n"
RAY_ONLY = RAY_RUN + """
[[variants]]
name = "b4-ray"
batch_size = 4
engine = "ray"
"""
