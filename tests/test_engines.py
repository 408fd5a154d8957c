"""The engine registry: the runner picks a pass's engine by name from the variant's fields, and a run's registry
holds the local and data-parallel engines always, Ray only when the run started it."""

from __future__ import annotations

from types import SimpleNamespace

from iteralab.campaign.engines import registry
from iteralab.campaign.engines.parallel import run_data_parallel


def _variant(engine: str = "local", data_parallel: int = 1) -> SimpleNamespace:
    return SimpleNamespace(engine=engine, data_parallel=data_parallel)


def test_a_variant_names_its_engine():
    assert registry.engine_name(_variant()) == "local"
    assert registry.engine_name(_variant(data_parallel=2)) == "parallel"
    assert registry.engine_name(_variant(engine="ray")) == "ray"
    assert registry.engine_name(_variant(engine="ray", data_parallel=2)) == "ray"  # Ray first, as before (the protocol refuses the pair)
    assert {registry.engine_name(_variant(e, d)) for e in ("local", "ray") for d in (1, 2)} == set(registry.NAMES)


def test_a_run_registers_ray_only_when_it_started_it():
    def local(spec):
        return {"pass_id": spec}

    def ray(spec):
        return {"ray": spec}

    plain = registry.engines(local)
    assert plain == {"local": local, "parallel": run_data_parallel}
    with_ray = registry.engines(local, ray)
    assert set(with_ray) == set(registry.NAMES) and with_ray["ray"] is ray
    assert with_ray["local"]("p1") == {"pass_id": "p1"}
