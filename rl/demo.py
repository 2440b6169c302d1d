"""The ``rl/`` sections of ``make demo``: Best-of-N reranking and a short GRPO run, on procedural inpainting tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

JUDGE = {
    "name": "scene-proxy",
    "weights": {"layout": 0.25, "harmony": 0.25, "lighting": 0.25, "distortion": 0.25},
    "size": 96,
}


def _compose(name: str, overrides: list[str]) -> DictConfig:
    from reward.core.cli import compose

    return compose(name, overrides)


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def bon_section(out: Path, cfg: DictConfig, scorer: str | None, fusion: str | None) -> str:
    """Best-of-N with the fine-tuned SA-IQA scorer (or scene-proxy without one), judged by scene-proxy."""
    from rl.commands.best_of_n import run as run_best_of_n
    from rl.inpaint_tasks import write_procedural_tasks

    tasks = write_procedural_tasks(out / "rl_tasks", cfg.bon.tasks, size=64, seed=cfg.seed + 2)
    if scorer:
        reward = ["reward=sa-iqa", f"reward.model={scorer}"] + ([f"reward.fusion={fusion}"] if fusion else [])
    else:
        reward = ["reward=scene-proxy"]
    judge = "judge={" + json.dumps(JUDGE).replace('"', "")[1:]
    overrides = [*reward, f"data={tasks}", f"out={out / 'best_of_n'}", f"n={cfg.bon.n}", judge, f"seed={cfg.seed}"]
    overrides.append("overwrite=true")  # a demo run again: the earlier one is moved aside
    s = run_best_of_n(_compose("best_of_n", overrides))
    command = "python rl/best_of_n.py " + " ".join(o if "judge" not in o else f"'{o}'" for o in overrides)
    return (
        f"## 4. Best-of-{cfg.bon.n} reranking of inpainted candidates (`rl/best_of_n.py`)\n\n`{command}`\n\n"
        f"{s['tasks']} procedural inpainting tasks, {cfg.bon.n} candidates each from the `procedural` generator, "
        f"picked by `{s['reward']}`, judged by `scene-proxy` with equal weights (a known target).\n\n"
        "| | value |\n|---|---|\n"
        f"| mean {s['reward']} of the chosen | {_fmt(s['mean_chosen'])} |\n"
        f"| mean {s['reward']} of a random pick | {_fmt(s['mean_random'])} |\n"
        f"| judge: chosen wins / ties / losses vs random | {s.get('judge_wins')} / {s.get('judge_ties')} / "
        f"{s.get('judge_losses')} |\n"
        f"| win rate (ties count as no win) | {_fmt(s.get('win_rate'))} |\n"
        f"| win rate over decided pairs | {_fmt(s.get('win_rate_decided'))} |\n\n"
        "![contact sheet](best_of_n/sheets/0000.png)\n"
    )


def grpo_section(out: Path, cfg: DictConfig, policy: Path) -> str:
    """A short GRPO run of the tiny text policy against scene-proxy (full fine-tuning, procedural generator)."""
    from rl.commands.grpo import run as run_grpo
    from rl.inpaint_tasks import write_procedural_tasks

    tasks = write_procedural_tasks(out / "grpo_tasks", 40, size=64, seed=cfg.seed + 3, mask_fraction=0.8)
    overrides = [
        "reward=scene-proxy",
        "generator=procedural",
        f"policy.path={policy}",
        f"data={tasks}",
        f"out={out / 'grpo'}",
        "resume=never",
        "overwrite=true",  # a demo run again: the earlier one is moved aside
        f"trainer.max_steps={cfg.grpo.steps}",
        "trainer.num_generations=8",
        "trainer.per_device_train_batch_size=16",
        "trainer.learning_rate=5e-3",
        "trainer.beta=0",
        "trainer.max_completion_length=16",
        f"trainer.save_steps={cfg.grpo.steps}",
        f"eval.every={max(1, cfg.grpo.steps // 3)}",
        "eval_tasks=6",
        f"trainer.seed={cfg.seed}",
    ]
    r = run_grpo(_compose("grpo", overrides))
    means = [m for _, m, _ in r["train_curve"]["scene-proxy"]]
    k = max(1, min(10, len(means) // 3))
    first, last = sum(means[:k]) / k, sum(means[-k:]) / k
    t = r["timing"]["shares"]
    return (
        "## 5. GRPO prompt expansion (`rl/grpo.py`)\n\n"
        f"`accelerate launch rl/grpo.py {' '.join(overrides)}`\n\n"
        f"A tiny random text policy (full fine-tuning) learns which words make the procedural inpainter paint better "
        f"rooms for `scene-proxy` in {cfg.grpo.steps} steps of 2 prompts x 8 completions: mean reward of the first "
        f"{k} steps {first:.3f}, of the last {k} steps {last:.3f}. Step time: "
        f"{100 * t['policy_generation']:.0f}% policy sampling, {100 * t['inpainting']:.0f}% inpainting, "
        f"{100 * t['reward']:.0f}% reward, {100 * t['update_and_rest']:.0f}% the update.\n\n"
        "![reward curve](grpo/reward_curve.png)\n\n![first vs last step](grpo/samples_first_last.png)\n"
    )
