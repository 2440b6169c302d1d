"""Failure is never reported as success: a GRPO run whose rewards fail stops with exit 2 and ``complete: false``, a
Best-of-N run with no scored task exits 2 naming the counts, served failures are counted under ``server_failed`` (per
reason), and a reward's user error is not swallowed as an item failure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image
from server_doubles import serve_scripted

from reward import RewardOutput, images_from_column
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.integrations.reward_set import NamedReward, RewardSet
from reward.integrations.trl_rewards import TrlRewards
from rl.commands.best_of_n import BestOfNSettings
from rl.commands.best_of_n import run as run_best_of_n
from rl.commands.grpo import run as run_grpo
from rl.commands.grpo_settings import GrpoSettings
from rl.generators import build_generator
from rl.inpaint_render import InpaintingRender
from rl.inpaint_tasks import load_tasks
from training.procedural.synthetic import write_inpainting_tasks

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
OPTIONS = [" good", " poor"]
FAST_SERVER = ["reward.server.max_retries=0"]  # the client's own retries are tested in test_reward_server.py


def _served(url: str) -> list[str]:
    return ["reward=qbench", "reward.backend=openai", "reward.model=null", f"+reward.server.base_urls=[{url}]"]


@pytest.fixture(scope="module")
def tiny_lm(tiny_lm_path) -> Path:
    return tiny_lm_path


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    return write_inpainting_tasks(tmp_path_factory.mktemp("tasks"), 12, size=32, seed=0, mask_fraction=0.8)


def _grpo(tiny_lm: Path, tasks: Path, out: Path, url: str, extra: list[str] = ()) -> dict:
    overrides = [
        f"policy.path={tiny_lm}",
        f"data={tasks}",
        f"out={out}",
        *_served(url),
        "reward.server.model=tiny",
        *FAST_SERVER,
        "generator=procedural",
        "trainer.max_steps=2",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "trainer.max_completion_length=8",
        "trainer.save_steps=1000",
        "eval.every=0",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return run_grpo(parse(GrpoSettings, compose("grpo", overrides=overrides, schema=GrpoSettings)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "extra", "named"),
    [("http_500", [], "http_500 4"), ("html", [], "not_json 4")],
)
def test_grpo_whose_every_reward_fails_stops_at_the_first_step_and_is_not_complete(
    fault, extra, named, tiny_lm, tasks, tmp_path
):
    with serve_scripted(OPTIONS, fault=fault) as url, pytest.raises(UserError) as err:
        _grpo(tiny_lm, tasks, tmp_path / "run", url, extra)
    msg = str(err.value)
    assert "training stopped at step 1: 4 of 4 completions got no usable reward (no usable reward at all)" in msg
    assert "reward qbench failed on 4" in msg and re.search(named, msg) and "\n" not in msg
    result = json.loads((tmp_path / "run" / "grpo_result.json").read_text())
    assert result["complete"] is False and result["global_step"] == 1  # before: complete true, 2 steps of loss 0
    assert result["reward_failures"]["steps_without_reward"] == 1 and result["reward_failures"]["failure"] in msg
    assert result["reward_failures"]["servers"]["qbench"]["answers"] == 0  # not one answer scored


@pytest.mark.slow
def test_grpo_tolerates_failed_rewards_up_to_max_reward_failures(tiny_lm, tasks, tmp_path):
    with serve_scripted(OPTIONS, fault="html", fault_every=2) as url:  # half the answers malformed
        result = _grpo(tiny_lm, tasks, tmp_path / "default", url)  # the default: a step with some reward goes on
        assert result["complete"] is True and result["reward_failures"]["unusable"] == 4  # 2 of 4, twice
        with pytest.raises(UserError, match=r"2 of 4 completions got no usable reward \(more than max_reward_fa"):
            _grpo(tiny_lm, tasks, tmp_path / "strict", url, ["max_reward_failures=0.25"])
    assert json.loads((tmp_path / "strict" / "grpo_result.json").read_text())["complete"] is False
    with pytest.raises(UserError, match=r"max_reward_failures=1.5: must be between 0 and 1"):
        _grpo(tiny_lm, tasks, tmp_path / "bad", "http://127.0.0.1:9/v1", ["max_reward_failures=1.5"])


def test_best_of_n_whose_every_reward_fails_exits_2_naming_the_counts(tasks, tmp_path):
    with serve_scripted(OPTIONS, fault="not_json") as url:
        overrides = [*_served(url), "reward.server.model=tiny", *FAST_SERVER, "generator=procedural"]
        overrides += [f"data={tasks}", f"out={tmp_path / 'bon'}", "n=2", "limit=3", "sheets=false"]
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            cfg = parse(BestOfNSettings, compose("best_of_n", overrides=overrides, schema=BestOfNSettings))
        with pytest.raises(UserError) as err:  # before: rc 0 with tasks_scored 0
            run_best_of_n(cfg)
    summary = json.loads((tmp_path / "bon" / "summary.json").read_text())
    assert summary["tasks_scored"] == 0 and summary["servers"]["qbench"]["failed_reasons"] == {"not_json": 6}
    assert str(err.value) == (
        "no task could be scored: 6 of 6 candidates failed to score and 0 tasks failed to generate; "
        "reward qbench failed on 6 (its servers: 6 of 6 items failed (not_json 6))"
    )


def test_served_failures_are_logged_as_server_failed_with_their_reasons(tasks):
    task_list = load_tasks(tasks)[0][:2]
    with serve_scripted(OPTIONS, fault="no_choices", fault_every=2) as url:
        server = {"base_urls": [url], "model": "tiny", "max_retries": 0, "concurrency": 1}
        rewards = RewardSet([{"name": "qbench", "backend": "openai", "server": server}], normalize=False)
        render = InpaintingRender(build_generator({"name": "procedural"}), {t.id: t for t in task_list})
        scoring = TrlRewards(rewards, render)
        logged: dict[str, float] = {}
        ids = [t.id for t in task_list] * 2
        scores = scoring.evaluate(["p"] * 4, ["a room"] * 4, task_id=ids, log_metric=logged.__setitem__)
    assert scores["qbench"].failed == 2  # two malformed answers: failed items, never an exception
    assert logged["qbench/failed"] == 2 and logged["qbench/server_failed"] == 2  # before: 2 and 0
    assert logged["qbench/server_failed/no_choices"] == 2
    assert scoring.tally.as_dict() == {
        "completions": 4,
        "unusable": 2,
        "render_failed": 0,
        "failed": {"qbench": 2},
    }


class Raising:
    """A reward that raises ``error`` on the image at ``bad`` (pixel value 9)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def score(self, images, prompts=None) -> RewardOutput:
        if any(im.getpixel((0, 0))[0] == 9 for im in images):
            raise self.error
        return RewardOutput(scores=torch.ones(len(images)))


def test_a_bad_image_is_isolated_but_a_user_error_is_not_swallowed():
    images = [Image.new("RGB", (4, 4), (v, v, v)) for v in (1, 9, 3)]
    bad_image = RewardSet([NamedReward("qbench", "qbench", Raising(ValueError("aspect ratio")), True, (0, 1))])
    assert bad_image.score(images)["qbench"].raw == [1.0, None, 1.0]
    refused = RewardSet(
        [NamedReward("qbench", "qbench", Raising(UserError("reward.model: no such folder")), True, (0, 1))]
    )
    with pytest.raises(UserError):  # caught, it would be retried item by item and counted as qbench/failed
        refused.score(images)
    with pytest.raises(UserError):  # trl's own trainer, or ours: the error stops training
        TrlRewards(refused, images_from_column("image")).evaluate(["p"] * 3, ["c"] * 3, image=images)
