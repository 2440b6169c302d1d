"""Scorers named by a Hub repo id (resolved through the Hugging Face cache, offline) and pushed to a Hub."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from conftest import random_images
from reward import get_reward
from reward.core.config import parse
from reward.core.errors import MissingInputError
from training.commands.sft import SftSettings

SHA = "0123456789abcdef0123456789abcdef01234567"


def populated_cache(cache: Path, repo_id: str, folder: Path) -> Path:
    """``cache`` laid out as huggingface_hub writes it, holding ``folder`` as the snapshot of ``repo_id``."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / SHA
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SHA)
    return snapshot


@pytest.fixture
def offline_home(tmp_path, monkeypatch):
    """A fresh HF_HOME, offline: the hub client reads its cache from here."""
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home / "hub"


def test_a_scorer_hub_id_scores_offline_from_the_cache_as_its_folder_does(tiny_scorer_path, offline_home):
    populated_cache(offline_home, "example-org/tiny-scorer", tiny_scorer_path)
    images = random_images(3, seed=2)
    by_id = get_reward("sa-iqa", {"model": "example-org/tiny-scorer"}).score(images)
    by_folder = get_reward("sa-iqa", {"model": str(tiny_scorer_path)}).score(images)
    assert set(by_id.dimensions) == {"lighting", "harmony"}
    torch.testing.assert_close(by_id.scores, by_folder.scores)


def test_a_hub_id_missing_from_the_cache_offline_fails_in_one_line_naming_it(offline_home):
    with pytest.raises(MissingInputError) as err:
        get_reward("sa-iqa", {"model": "example-org/not-downloaded"})
    message = str(err.value)
    assert "\n" not in message and "reward.model=example-org/not-downloaded" in message
    assert "hf download example-org/not-downloaded" in message and "scorer folder" in message


def test_a_path_that_is_neither_a_folder_nor_a_hub_id_is_named(offline_home, tmp_path):
    with pytest.raises(MissingInputError, match=r"reward.model=.*/no/such/scorer: no such folder"):
        get_reward("sa-iqa", {"model": str(tmp_path / "no" / "such" / "scorer")})


def _sft_overrides(model: Path, ratings: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"model.path={model}",
        f"data.train={ratings}",
        f"data.test={ratings}",
        f"out={out}",
        "prompt.type=1",
        "prompt.dimensions=[lighting]",
        "trainer.max_steps=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        *extra,
    ]


def _sft_cfg(overrides: list[str]):
    from hydra import initialize_config_dir

    from reward.core.cli import compose

    configs = Path(__file__).resolve().parents[1] / "configs"
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        return compose("sft", overrides=overrides, schema=SftSettings)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["push_to_hub=true"], "push_to_hub=true needs hub_model_id=ORG/NAME"),
        (["push_to_hub=true", "hub_model_id=example-org/scorer"], "needs a Hugging Face token"),
        (["+trainer.push_to_hub=true"], "trainer.push_to_hub would push the whole output folder"),
    ],
)
def test_a_push_that_cannot_happen_is_refused_before_training(tmp_path, monkeypatch, extra, message):
    from huggingface_hub import constants

    from reward.core.errors import UserError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    with pytest.raises(UserError, match=message):  # said when the settings are read, before anything loads
        parse(SftSettings, _sft_cfg(_sft_overrides(tmp_path / "m", tmp_path / "r.jsonl", tmp_path / "out", *extra)))


@pytest.mark.slow
def test_push_to_hub_uploads_the_scorer_card_and_metadata_and_nothing_else(tiny_vlm_path, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from server_doubles import FakeHub

    from reward.testing.loopback import serve
    from training.commands.sft import run as run_sft
    from training.procedural.synthetic import write_benchmark

    bench = write_benchmark(tmp_path / "bench", 8, size=56, seed=5)
    out = tmp_path / "run"
    hub = FakeHub()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_loopback_token")
    with serve(hub.app()) as url:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        cfg = _sft_cfg(
            _sft_overrides(
                tiny_vlm_path, bench.ratings, out, "push_to_hub=true", "hub_model_id=example-org/tiny-scorer"
            )
        )
        result = run_sft(parse(SftSettings, cfg))
    pushed = hub.files["example-org/tiny-scorer"]
    local = {p.name: p.read_bytes() for p in (out / "scorer").iterdir() if p.is_file()}
    assert pushed == local  # every scorer file, byte for byte; no checkpoint, optimizer state or run file
    assert {"README.md", "sa_iqa.json", "model.safetensors", "config.json"} <= set(pushed)
    assert "[None]" not in pushed["README.md"].decode() and "| lighting |" in pushed["README.md"].decode()
    assert hub.repos == ["example-org/tiny-scorer"] and hub.tokens == {"hf_loopback_token"} and hub.validated == 1
    assert result["pushed"].endswith(f"/example-org/tiny-scorer/commit/{hub.commits[0]['oid']}")
