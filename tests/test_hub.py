"""Scorers named by a Hub repo id (resolved through the Hugging Face cache, offline) and pushed to a Hub."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from conftest import random_images
from reward import get_reward
from reward.core.errors import MissingInputError

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
    by_id = get_reward("sa-iqa", {"path": "example-org/tiny-scorer"}).score(images)
    by_folder = get_reward("sa-iqa", {"path": str(tiny_scorer_path)}).score(images)
    assert set(by_id.dimensions) == {"lighting", "harmony"}
    torch.testing.assert_close(by_id.scores, by_folder.scores)


def test_a_hub_id_missing_from_the_cache_offline_fails_in_one_line_naming_it(offline_home):
    with pytest.raises(MissingInputError) as err:
        get_reward("sa-iqa", {"path": "example-org/not-downloaded"})
    message = str(err.value)
    assert "\n" not in message and "reward.path=example-org/not-downloaded" in message
    assert "hf download example-org/not-downloaded" in message and "scorer folder" in message


def test_a_path_that_is_neither_a_folder_nor_a_hub_id_is_named(offline_home, tmp_path):
    with pytest.raises(MissingInputError, match=r"reward.path=.*/no/such/scorer: no such folder"):
        get_reward("sa-iqa", {"path": str(tmp_path / "no" / "such" / "scorer")})
