"""rl.devices: each process of a launch resolves its rewards' and generator's device from its own local rank (never a
bare "cuda", which is GPU 0 in every process until the trainer moves it), with templates and lists for dedicated GPUs;
a multi-process device_map is refused. GPUs are faked: only device strings are checked here (the GPU check places
real models)."""

from __future__ import annotations

import logging

import pytest
import torch

from reward.integrations.reward_set import reward_has_device
from rl.devices import process_device, resolve_devices
from rl.diffusers_generator import DiffusersConfig, DiffusersGenerator


@pytest.fixture
def two_gpus_rank1(monkeypatch):
    """The second process of a 2-process launch on a machine with two GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")


def test_device_specs_resolve_per_process(two_gpus_rank1):
    assert process_device(None) == "cuda:1"
    assert process_device("auto") == process_device("cuda") == "cuda:1"  # a bare cuda is this process's GPU
    assert process_device("cuda:{local_rank}") == "cuda:1"
    assert process_device("cuda:{local_rank+4}", n_gpus=8) == "cuda:5"
    assert process_device(["cuda:6", "cuda:7"]) == "cuda:7"
    assert process_device("cpu") == "cpu" and process_device("cuda:7") == "cuda:7"
    with pytest.raises(ValueError, match=r"names 1 devices but this is process 1"):
        process_device(["cuda:6"], where="reward.device")
    assert process_device(None, rank=5, n_gpus=0) == "cpu"


def test_rewards_and_generators_get_the_process_device_and_device_map_is_refused(two_gpus_rank1, caplog):
    entries = [{"name": "qbench", "model": "m"}, "scene-proxy", {"name": "pkg.mod:factory"}]
    has_device = {"qbench": True, "scene-proxy": True}.get
    with caplog.at_level(logging.WARNING):
        resolved = resolve_devices(entries, schema_has_device=lambda n: bool(has_device(n)), where="reward")
        shared = resolve_devices([{"name": "qbench", "device": "cuda:0"}], schema_has_device=bool, where="reward")
    assert resolved[0] == {"name": "qbench", "model": "m", "device": "cuda:1"}
    assert resolved[1] == {"name": "scene-proxy", "device": "cuda:1"}
    assert resolved[2] == {"name": "pkg.mod:factory"}  # a custom reward's settings are its own business
    assert shared[0]["device"] == "cuda:0" and "all 2 processes of this machine load their own copy" in caplog.text
    with pytest.raises(ValueError, match=r"reward.device_map='auto' with 2 processes on this machine"):
        resolve_devices([{"name": "qbench", "device_map": "auto"}], schema_has_device=bool, where="reward")
    assert reward_has_device("qbench") and reward_has_device("sa-iqa") and reward_has_device("pace")


class _Pipe:
    """Just enough of a diffusers pipeline to see where the generator puts it."""

    def __init__(self) -> None:
        self.moved_to: str | None = None

    def to(self, device: str) -> _Pipe:
        self.moved_to = device
        return self

    def set_progress_bar_config(self, **kwargs) -> None:
        pass

    def __call__(self, prompt=None, image=None) -> None:  # the signature the generator reads
        pass


def test_a_diffusers_generator_without_a_device_goes_to_the_process_gpu(two_gpus_rank1):
    pipe = _Pipe()
    DiffusersGenerator(DiffusersConfig(name="sd15-inpaint", path="unused"), pipe=pipe)
    assert pipe.moved_to == "cuda:1"  # before: "cuda", i.e. GPU 0 until the trainer moved the process
    pipe = _Pipe()
    DiffusersGenerator(DiffusersConfig(name="sd15-inpaint", path="unused", device="cuda:{local_rank+2}"), pipe=pipe)
    assert pipe.moved_to == "cuda:3"
