"""The parts of a GRPO run around trl: the stall watchdog, the stale build-lock refusal, the DeepSpeed config kept
across whole-model loading, the step-time split measured through trl's public contracts, the one-line step log and
the closing summary."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from reward.core.errors import UserError
from rl.commands.grpo_settings import GrpoSettings
from rl.reward_guard import RewardGuard, step_split
from rl.summary import StepLine, summarize, summary_text
from training.shared.deepspeed import check_build_locks

ROOT = Path(__file__).resolve().parents[1]


def test_a_stalled_process_dumps_where_it_waits_and_exits_2():
    script = textwrap.dedent(
        """
        import threading
        from rl.watchdog import Watchdog

        def wait_for_the_other_process():
            threading.Event().wait()  # a collective whose peer never comes

        with Watchdog(0.3) as dog:
            dog.beat("building the trainer")
            wait_for_the_other_process()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "wait_for_the_other_process" in proc.stderr  # every thread's stack, the waiting one included
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("no progress for ") and "while building the trainer" in last and "stall_timeout_s" in last


def test_a_stale_extension_build_lock_is_refused_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    lock.touch()
    now = lock.stat().st_mtime
    check_build_locks(max_age_s=600, now=now + 60)  # a build in progress: waited for, not refused
    with pytest.raises(UserError, match=rf"{lock} is 30 minutes old.*rm {lock}"):
        check_build_locks(max_age_s=600, now=now + 1800)


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="no deepspeed")
def test_whole_model_loading_leaves_the_launchs_zero3_config_active():
    from transformers.integrations.deepspeed import (
        HfDeepSpeedConfig,
        is_deepspeed_zero3_enabled,
        set_hf_deepspeed_config,
        unset_hf_deepspeed_config,
    )

    from training.shared.deepspeed import zero3_init_off

    config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
    plugin = SimpleNamespace(set_deepspeed_weakref=lambda: set_hf_deepspeed_config(config))
    args = SimpleNamespace(deepspeed_plugin=plugin)  # trl's config before the trainer exists: the plugin's only
    set_hf_deepspeed_config(config)
    try:
        with zero3_init_off(args):
            assert not is_deepspeed_zero3_enabled()
        assert is_deepspeed_zero3_enabled()  # the policy and trl's reference model are built under zero.Init again
    finally:
        unset_hf_deepspeed_config()


def test_policy_sampling_is_timed_from_a_steps_start_to_the_renders_first_call(monkeypatch):
    import rl.reward_guard
    from reward.integrations.trl_rewards import RewardTally

    ticks = iter([0.0, 10.0, 20.0, 20.5])  # step 1 begins and ends; step 2 (no sampling) begins and ends
    monkeypatch.setattr(rl.reward_guard.time, "perf_counter", lambda: next(ticks))
    scoring = SimpleNamespace(render=SimpleNamespace(first_call=None), tally=RewardTally(), rewards=None)
    guard = RewardGuard(scoring)
    guard.on_step_begin(None, None, None)
    scoring.render.first_call = 3.0  # the render's first call of step 1 (a second one would not move it)
    guard.on_step_end(None, None, None)
    guard.on_step_begin(None, None, None)
    guard.on_step_end(None, None, None)
    assert guard.seconds == {"steps": 2, "sampled_steps": 1, "step": 10.5, "policy_generation": 3.0}
    split = step_split({**guard.seconds, "inpainting": 2.0, "reward": 1.0})
    assert split["per_step_s"] == {
        "policy_generation": 1.5,
        "inpainting": 1.0,
        "reward": 0.5,
        "update_and_rest": 2.25,
    }


LOG = [
    {"step": 1, "reward": 0.2, "reward_std": 0.1, "rewards/scene/mean": 0.2, "frac_reward_zero_std": 0.5, "kl": 0.0},
    {"step": 2, "reward": 0.4, "reward_std": 0.1, "rewards/scene/mean": 0.4, "frac_reward_zero_std": 0.3, "kl": 0.01},
    {"step": 2, "train_runtime": 9.0, "train_loss": 0.0},
]


def test_the_closing_summary_compares_first_and_last_steps_and_says_where_files_are():
    heldout = [{"step": 0, "scene": 0.1, "counts": {}}, {"step": 2, "scene": 0.3, "counts": {}}]
    summary = summarize(LOG, heldout, ["scene"])
    assert summary["train"]["scene"] == {"first": 0.2, "last": 0.4, "steps_each": 1}
    assert summary["heldout"]["scene"] == {"first": 0.1, "last": 0.3, "steps": [0, 2]}
    assert summary["frac_reward_zero_std"] == {"mean": pytest.approx(0.4), "first": 0.5, "last": 0.3}
    shares = {"policy_generation": 0.5, "inpainting": 0.25, "reward": 0.125, "update_and_rest": 0.125}
    result = {
        "complete": True,
        "global_step": 2,
        "max_steps": 2,
        "processes": [{}, {}],
        "timing": {"train_s": 9.0, "step_s": 4.5, "shares": shares},
        "summary": summary,
        "files": {"policy": "/run/policy", "result": "/run/grpo_result.json"},
    }
    text = summary_text(result)
    assert text.splitlines()[0] == "GRPO finished: 2 of 2 steps in 9 s (4.50 s per step, 2 process(es))"
    assert "training scene: 0.2000 -> 0.4000 (mean of the first vs the last 1 step(s))" in text
    assert "held-out scene: 0.1000 -> 0.3000 (step 0 -> 2)" in text
    assert "40% of steps' groups (first step 50%, last 30%)" in text
    assert "policy generation 50%, inpainting 25%, reward 12%, update and rest 12%" in text
    assert "result: /run/grpo_result.json" in text


def step_line(logs, step, max_steps, scale=""):
    """What the console shows for one logged step (``None``: nothing)."""
    lines = []
    callback = StepLine()
    callback.scale, callback.training_bar = scale, SimpleNamespace(write=lines.append)
    state = SimpleNamespace(is_world_process_zero=True, global_step=step, max_steps=max_steps)
    callback.on_log(None, state, None, logs=logs)
    return lines[0] if lines else None


def test_a_step_is_one_console_line_and_trls_closing_dictionary_none():
    assert step_line(LOG[1], 2, 10) == "step 2/10  reward 0.4000 (std 0.1000)  zero-std groups 30%  kl 0.01"
    assert step_line(LOG[2], 2, 10) is None
    failed = {"reward": None, "reward_std": None, "frac_reward_zero_std": 1.0, "loss": 0.0}  # every reward failed
    assert step_line(failed, 3, 10) == "step 3/10  reward n/a  zero-std groups 100%  loss 0"


def test_the_console_reward_says_its_scale():
    from rl.commands.grpo_settings import reward_scale

    line = step_line(LOG[1], 2, 10, "normalised to [0, 1]")
    assert line == "step 2/10  reward 0.4000 (normalised to [0, 1]; std 0.1000)  zero-std groups 30%  kl 0.01"
    one = GrpoSettings(out="o", data="d", reward={"name": "qbench"})
    assert reward_scale(one) == "normalised to [0, 1]"  # the default: each reward mapped by its score_range
    weighted = GrpoSettings(out="o", data="d", more_rewards=[{"name": "x"}], trainer={"reward_weights": [1.0, 0.5]})
    assert reward_scale(weighted) == "normalised to [0, 1.5]"  # trl logs the weighted sum


def test_a_reference_sync_trl_cannot_do_is_refused_before_anything_loads(tmp_path):
    from hydra import initialize_config_dir

    from reward.core.cli import compose
    from reward.core.config import parse

    base = [
        f"out={tmp_path}",
        "data=t.jsonl",
        "policy.path=p",
        "reward=scene-proxy",
        "+trainer.sync_ref_model=true",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        lora = compose("grpo", overrides=[*base, "lora.enabled=true"])
        no_beta = compose("grpo", overrides=[*base, "trainer.beta=0"])
    with pytest.raises(UserError, match="sync_ref_model=true has no reference model to sync .with LoRA"):
        parse(GrpoSettings, lora)
    with pytest.raises(UserError, match=r"sync_ref_model=true has no reference model to sync \(beta is 0\)"):
        parse(GrpoSettings, no_beta)


def test_a_deepspeed_grpo_launch_refuses_a_stale_build_lock_before_deepspeed_starts(tmp_path, monkeypatch):
    from hydra import initialize_config_dir

    from reward.core.cli import compose
    from reward.core.config import parse
    from rl.commands.grpo_launch import launch

    lock = tmp_path / "ext" / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    os.utime(lock, (lock.stat().st_atime - 3600, lock.stat().st_mtime - 3600))  # left by a build an hour ago
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    (tmp_path / "t.jsonl").write_text("")  # the tasks are there: the launch's own problem is the one said
    base = [f"out={tmp_path / 'run'}", f"data={tmp_path / 't.jsonl'}", "policy.path=p", "reward=scene-proxy"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("grpo", overrides=base, schema=GrpoSettings)
    with pytest.raises(UserError, match=rf"{lock} is 60 minutes old.*rm {lock}"):
        launch(parse(GrpoSettings, cfg))


def test_what_an_installed_user_reads_names_no_file_of_a_clone(tmp_path, monkeypatch):
    """The policy card's command is the one run (the console script when installed); the plan, the settings' help
    and the commands' --help text point at nothing a wheel lacks (bench/, configs/ paths, python fusion/fit.py)."""
    import dataclasses

    from hydra import initialize_config_dir

    import rl.best_of_n
    import rl.grpo
    from reward.core.cli import CONFIG_DIR, compose
    from reward.core.config import parse
    from rl.commands.best_of_n import BestOfNSettings
    from rl.commands.grpo import card_command
    from rl.commands.grpo_launch import launch
    from rl.commands.grpo_plan import grpo_plan
    from training.procedural.synthetic import write_inpainting_tasks

    record = {"reward": {"name": "scene-proxy"}, "data": "t.jsonl", "out": "run"}
    monkeypatch.setattr("sys.argv", ["perceptual-rewards grpo", "reward=scene-proxy"])
    assert card_command(record).startswith("perceptual-rewards grpo reward=scene-proxy ")
    monkeypatch.setattr("sys.argv", ["rl/grpo.py", "reward=scene-proxy"])
    assert card_command(record).startswith("python rl/grpo.py reward=scene-proxy ")

    tasks = write_inpainting_tasks(tmp_path / "tasks", 8, size=32, seed=0)
    overrides = [
        "policy.path=Qwen/Qwen2.5-VL-7B-Instruct",
        f"data={tasks}",
        "out=o",
        "reward=scene-proxy",
        "plan=true",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        settings = parse(GrpoSettings, compose("grpo", overrides))
        plan = grpo_plan(settings, launch(settings)[1])
    helps = [f.metadata.get("help", "") for cls in (GrpoSettings, BestOfNSettings) for f in dataclasses.fields(cls)]
    for text in [*plan.lines, *helps, rl.grpo.__doc__, rl.best_of_n.__doc__]:
        assert not re.search(r"bench/|configs/|\.sh\b|fusion/fit\.py|rl/commands/", text), text
