"""The batch a run trains with: per device x accumulation x processes, and ``trainer.global_batch_size`` (ours), from
which the accumulation is derived for the launch's processes. The defaults train with the sources' batch (SFT:
SA-IQA §4.1's 256; GRPO: App. D.3's 4 prompts x group 8) on one process or eight; plans for 8 processes are made
without launching them (``plan_for.processes``)."""

from __future__ import annotations

import logging

import pytest

from reward.core.cli import compose
from reward.core.errors import UserError
from rl.commands.grpo_settings import GrpoSettings
from training.commands.sft import SftSettings
from training.procedural.synthetic import write_inpainting_tasks

SFT_BASE = ["model.path=Qwen/Qwen2.5-VL-7B-Instruct", "data.train=synthetic", "out=unused", "trainer.max_steps=1"]


def _sft_plan(*extra: str):
    from reward.core.config import parse
    from training.commands.sft_plan import sft_plan

    return sft_plan(parse(SftSettings, compose("sft", [*SFT_BASE, *extra], schema=SftSettings)))


def _batch_line(plan) -> str:
    return next(line for line in plan.lines if line.startswith("effective batch"))


@pytest.mark.parametrize(("processes", "accumulation"), [(1, 32), (8, 4)])
def test_the_sft_defaults_train_with_sa_iqas_256_on_one_process_or_eight(processes: int, accumulation: int):
    plan = _sft_plan(f"plan_for.processes={processes}")
    assert (plan.launch.effective_batch, plan.launch.accumulation) == (256, accumulation)
    line = _batch_line(plan)
    assert line.startswith(f"effective batch 256 = 8 per device x {accumulation} accumulation x {processes} processes")
    assert "SA-IQA §4.1 trained with 256" in line


def test_a_global_batch_derives_the_accumulation_and_refuses_processes_that_do_not_divide_it():
    plan = _sft_plan("plan_for.processes=8", "trainer.global_batch_size=128")
    assert (plan.launch.effective_batch, plan.launch.accumulation) == (128, 2)
    assert "trainer.global_batch_size=128, the accumulation derived" in _batch_line(plan)
    with pytest.raises(UserError, match=r"trainer.global_batch_size=128 is not a multiple of .*=8 x 3 processes = 24"):
        _sft_plan("plan_for.processes=3", "trainer.global_batch_size=128")
    with pytest.raises(UserError, match=r"global_batch_size=256 \(SA-IQA §4.1\) is not a multiple of .* = 24"):
        _sft_plan("plan_for.processes=3")  # the default, said as the paper's
    with pytest.raises(UserError, match=r"global_batch_size=64 and trainer.gradient_accumulation_steps=4 disagree"):
        _sft_plan("plan_for.processes=1", "trainer.global_batch_size=64", "trainer.gradient_accumulation_steps=4")


def test_an_accumulation_given_as_a_number_is_used_as_given_and_said_beside_the_papers():
    plan = _sft_plan("plan_for.processes=8", "trainer.gradient_accumulation_steps=1")
    assert plan.launch.effective_batch == 64
    line = _batch_line(plan)
    assert "gradient_accumulation_steps=1 as given: the batch grows with the processes" in line
    assert "SA-IQA §4.1 trained with 256" in line


def test_the_run_passes_trl_the_derived_accumulation_never_our_key_and_prints_the_batch(caplog):
    from trl import SFTConfig

    from reward.core.config import parse
    from training.shared.launch import SFT_BATCH, trl_config

    settings = parse(SftSettings, compose("sft", SFT_BASE, schema=SftSettings))
    with caplog.at_level(logging.INFO, logger="training"):  # SFTConfig refuses unknown keys
        args = trl_config(SFTConfig, settings.trainer, out="unused", source=SFT_BATCH)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.world_size) == (8, 32, 1)
    assert not hasattr(args, "global_batch_size")
    assert "effective batch 256 = 8 per device x 32 accumulation x 1 processes" in caplog.text


@pytest.mark.parametrize(("processes", "accumulation"), [(1, 8), (8, 1)])
def test_the_grpo_defaults_train_with_the_papers_4_prompts_x_8_on_one_process_or_eight(
    tmp_path, processes: int, accumulation: int
):
    from hydra import initialize_config_dir

    from reward.core.cli import CONFIG_DIR
    from reward.core.config import parse
    from rl.commands.grpo_launch import launch
    from rl.commands.grpo_plan import grpo_plan

    tasks = write_inpainting_tasks(tmp_path / "tasks", 8, size=32, seed=0)
    overrides = [
        "policy.path=Qwen/Qwen2.5-VL-7B-Instruct",
        f"data={tasks}",
        f"out={tmp_path / 'run'}",
        "reward=scene-proxy",
        "plan=true",
        f"plan_for.processes={processes}",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        settings = parse(GrpoSettings, compose("grpo", overrides, schema=GrpoSettings))
    _, args = launch(settings)
    assert (args.gradient_accumulation_steps, args.generation_batch_size) == (8, 32)  # this launch: one process
    plan = grpo_plan(settings, args)
    assert (plan.launch.effective_batch, plan.launch.accumulation) == (32, accumulation)
    line = _batch_line(plan)
    assert line.startswith(f"effective batch 32 completions = 4 per device x {accumulation} accumulation")
    assert line.endswith("trained with 32): 4 prompts x group 8 per generation")


def test_a_grpo_run_prints_its_batch_at_start(tmp_path, caplog):
    """The batch line comes first, before the checks that refuse a run (here: 3 tasks for App. D.3's 4 prompts)."""
    from hydra import initialize_config_dir

    from reward.core.cli import CONFIG_DIR
    from reward.core.config import parse
    from rl.commands.grpo import run

    tasks = write_inpainting_tasks(tmp_path / "tasks", 3, size=32, seed=0)
    overrides = [f"policy.path={tmp_path}", f"data={tasks}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = parse(
            GrpoSettings, compose("grpo", [*overrides, "eval.every=0", "policy.vision=false"], schema=GrpoSettings)
        )
    with caplog.at_level(logging.INFO, logger="training"), pytest.raises(UserError, match="a step takes 4 prompts"):
        run(cfg)
    assert "effective batch 32 completions = 4 per device x 8 accumulation x 1 processes" in caplog.text
    assert "SA-IQA App. D.3 (4 prompts x group 8) trained with 32" in caplog.text
