"""Ray passes on GPUs: a GPU variant's actors ask Ray for ``run.ray_gpus_per_actor`` GPUs and run on the card Ray
assigned; a GPU variant on a Ray cluster without GPUs is refused at lock, naming what the cluster reported. Ray
itself is not started here: its cluster is a fake resources function, its Data API a recorder."""

from __future__ import annotations

import types

import pytest

from campaign_factory import callable_campaign
from fakecuda import FakeCuda, cards
from iteralab.campaign.engines.raypass import _RayPass
from iteralab.campaign.records import PassSpec
from iteralab.errors import ProtocolError
from iteralab.lock.inputs import lock
from iteralab.plan.protocol import parse_protocol
from protocol_factory import protocol_toml

RAY_VARIANTS = """
[[variants]]
name = "b4"
batch_size = 4
device = "{device}"

[[variants]]
name = "b4-ray"
batch_size = 4
engine = "ray"
device = "{device}"

[[series]]
name = "engine"
factor = "engine"
variants = ["b4", "b4-ray"]
"""


def _variants(device: str = "cuda", run: str = "") -> str:
    return run + RAY_VARIANTS.replace("{device}", device)


@pytest.mark.parametrize("value, ok", [("0.5", True), ("1", True), ("2", True), ("1.5", False), ("0", False)])
def test_gpus_per_actor_is_a_share_of_one_card_or_whole_cards(value, ok):
    text = protocol_toml(variants=_variants(run=f"ray_gpus_per_actor = {value}\n"))
    if ok:
        assert parse_protocol(text).run.ray_gpus_per_actor == float(value)
    else:
        with pytest.raises(ProtocolError, match="ray_gpus_per_actor"):
            parse_protocol(text)


def test_lock_refuses_a_gpu_variant_on_a_ray_cluster_without_gpus(tmp_path):
    path = callable_campaign(tmp_path, locked=False, variants=_variants(run='ray_address = "ray://head:10001"\n'))
    asked = []

    def cluster(run):
        asked.append(run.ray_address)
        return {"CPU": 16.0, "memory": 6.4e10}

    with pytest.raises(ProtocolError) as info:
        lock(path, cluster_resources=cluster)
    assert info.value.message == (f"{path}: variant 'b4-ray' runs on a GPU with engine \"ray\", but the Ray cluster "
                                  "(ray://head:10001) has no GPU: it reports 16 CPUs and 0 GPUs")
    assert asked == ["ray://head:10001"] and not (tmp_path / "protocol.toml.lock.json").exists()
    assert lock(path, cluster_resources=lambda run: {"CPU": 16.0, "GPU": 2.0}).sha256
    (tmp_path / "cpu").mkdir()
    cpu = callable_campaign(tmp_path / "cpu", locked=False, variants=_variants(device="cpu"))
    assert lock(cpu, cluster_resources=lambda run: pytest.fail("a CPU variant asks no cluster")).sha256


class _Dataset:
    def __init__(self, calls):
        self.calls = calls

    def repartition(self, **kwargs):
        return self

    def map_batches(self, fn, **kwargs):
        self.calls.append(kwargs)
        return self


@pytest.mark.parametrize("device, cluster_gpus, asked", [("cuda", 2.0, 0.5), ("auto", 2.0, 0.5), ("auto", 0.0, None),
                                                         ("cpu", 2.0, None)])
def test_the_actors_of_a_gpu_variant_ask_ray_for_their_gpus(tmp_path, device, cluster_gpus, asked):
    protocol = parse_protocol(protocol_toml(variants=_variants(device=device, run="ray_gpus_per_actor = 0.5\n")))
    calls: list[dict] = []
    ray_data = types.SimpleNamespace(read_csv=lambda *a, **k: _Dataset(calls), ActorPoolStrategy=lambda size: size)
    engine = types.SimpleNamespace(run=protocol.run, gpus=cluster_gpus, ray=None, started=None)
    spec = PassSpec(pass_id="p", variant=protocol.variant("b4-ray").model_dump(), model={"kind": "callable"},
                    classes=("plot", "fresh", "rotten"), corpus_path=str(tmp_path / "corpus.csv"),
                    prediction_dir=str(tmp_path), warmup={"inputs": 0, "passes": 0}, device=protocol.run.device)
    _RayPass(engine, spec)._dataset(ray_data, 12, [])
    (kwargs,) = calls
    assert kwargs.get("num_gpus") == asked
    assert kwargs["fn_constructor_kwargs"]["spec"].gpu is (asked is not None)


@pytest.mark.parametrize("ray_sets, assigned, index", [("3", ["3"], 0), (None, ["2"], 2), ("1,3", ["3"], 1)])
def test_an_actor_runs_on_the_card_ray_assigned(monkeypatch, ray_sets, assigned, index):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if ray_sets is not None:  # Ray shows the actor its own card(s); told not to, the actor sees every card
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ray_sets)
    from iteralab.campaign.engines.raypass import ray_assigned_device

    fake = FakeCuda(cards=cards(4)).install(monkeypatch)
    device = ray_assigned_device(assigned)
    assert (device.type, device.index) == ("cuda", index)
    assert fake.visible()[device.index] == int(assigned[0])
    with pytest.raises(RuntimeError, match="Ray assigned this actor no GPU"):
        ray_assigned_device([])
    with pytest.raises(RuntimeError, match="Ray assigned GPU 9, but this actor's torch sees"):
        ray_assigned_device(["9"])
