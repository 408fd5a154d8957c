"""The engine registry: the runner picks a pass's engine by name from the variant's fields, and a run's registry
holds the local and data-parallel engines always, Ray only when the run started it."""

from __future__ import annotations

from types import SimpleNamespace

from iteralab.campaign.engines import local, registry
from iteralab.campaign.records import PassResult, PassSpec


def _variant(engine: str = "local", data_parallel: int = 1) -> SimpleNamespace:
    return SimpleNamespace(engine=engine, data_parallel=data_parallel)


def test_a_variant_names_its_engine():
    assert registry.engine_name(_variant()) == "local"
    assert registry.engine_name(_variant(data_parallel=2)) == "parallel"
    assert registry.engine_name(_variant(engine="ray")) == "ray"
    assert registry.engine_name(_variant(engine="ray", data_parallel=2)) == "ray"  # Ray first, as before (the protocol refuses the pair)
    assert {registry.engine_name(_variant(e, d)) for e in ("local", "ray") for d in (1, 2)} == set(registry.NAMES)


def test_a_run_registers_ray_only_when_it_started_it(monkeypatch):
    seen = []

    def run_in_worker(spec, templates=None):
        seen.append((spec.pass_id, templates))
        return {"pass_id": spec.pass_id, "status": "ok"}

    monkeypatch.setattr(local, "run_in_worker", run_in_worker)
    ray = SimpleNamespace(run_pass=lambda spec: PassResult(spec.pass_id, "failed", error="on ray"))
    spec = PassSpec("p1", variant={}, model={}, classes=(), corpus_path="", prediction_dir="", warmup={})

    plain = registry.engines("process", "the templates")
    assert set(plain) == {"local", "parallel"}
    result = plain["local"](spec)  # every engine's result reaches the runner typed
    assert isinstance(result, PassResult) and result.ok and result.pass_id == "p1"
    assert seen == [("p1", "the templates")]
    with_ray = registry.engines("process", None, ray, prepare=lambda s: s.with_changes(pass_id="p2"))
    assert set(with_ray) == set(registry.NAMES)
    assert with_ray["ray"](spec).error == "on ray"
    assert with_ray["local"](spec).pass_id == "p2"  # the runner's last word on a local pass's spec