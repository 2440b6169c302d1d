"""Benchmark: where a GRPO step's time goes (policy sampling, inpainting, reward, the update) and Best-of-N batching,
on tiny parts.

    python bench/rl_step_time.py [--steps 20] [--generator procedural|sd15-inpaint]

GRPO (``rl/grpo.py``'s library entry) on a tiny random text policy, 2 prompts x 8 completions a step, scene-proxy
reward; then Best-of-4 of 8 tasks as one batched call against 8 one-task calls (same seeds). Ratios within one run
only: these machines jitter up to 10x.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from common import arguments, best_times, logger

from reward.core.cli import compose
from reward.core.config import parse
from reward.testing import make_tiny_inpaint_pipeline, make_tiny_lm
from rl.commands.best_of_n import BestOfNSettings
from rl.commands.grpo import run as run_grpo
from rl.commands.grpo_settings import GrpoSettings
from rl.generators import build_generator
from rl.inpaint_tasks import load_tasks
from training.procedural.synthetic import write_inpainting_tasks


def main() -> None:
    args = arguments(
        __doc__,
        steps={"type": int, "default": 20},
        generator={"default": "procedural", "choices": ["procedural", "sd15-inpaint"]},
    )
    logging.getLogger().setLevel(logging.WARNING)  # the run's own lines; this script's stay
    logger.setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = write_inpainting_tasks(root / "tasks", 24, size=64, mask_fraction=0.8)
        gen = ["generator=procedural"]
        if args.generator == "sd15-inpaint":
            path = make_tiny_inpaint_pipeline(root / "sd15", "sd15-inpaint")
            gen = ["generator=sd15-inpaint", f"generator.path={path}", "generator.steps=4", "generator.dtype=float32"]
        overrides = [f"policy.path={make_tiny_lm(root / 'lm')}", f"data={tasks}", f"out={root / 'run'}"]
        overrides += ["reward=scene-proxy", *gen, f"trainer.max_steps={args.steps}", "trainer.num_generations=8"]
        overrides += ["trainer.per_device_train_batch_size=16", "trainer.gradient_accumulation_steps=1"]
        overrides += ["trainer.max_completion_length=16", "trainer.beta=0", "eval.every=0"]
        overrides.append(f"trainer.save_steps={args.steps}")
        shares = run_grpo(parse(GrpoSettings, compose("grpo", overrides, schema=GrpoSettings)))["timing"]["shares"]
        logger.info(
            "GRPO %d steps (%s): policy sampling %.1f%%, inpainting %.1f%%, reward %.1f%%, update and the rest %.1f%% "
            "of the step time",
            *(args.steps, args.generator, 100 * shares["policy_generation"], 100 * shares["inpainting"]),
            *(100 * shares["reward"], 100 * shares["update_and_rest"]),
        )
        bon = compose("best_of_n", [*gen, "data=x", "out=x", "reward=scene-proxy"], schema=BestOfNSettings)
        generator = build_generator(bon.generator)
        items = load_tasks(tasks)[0][:8]
        images, masks, prompts = [t.image for t in items], [t.mask for t in items], [t.prompt for t in items]
        one_by_one = [([im], [m], [p]) for im, m, p in zip(images, masks, prompts, strict=True)]
        (batched, _, _), (single, _, _) = best_times(
            [lambda: generator.inpaint(images, masks, prompts, n=4, seed=0)]
            + [lambda: [generator.inpaint(*task, n=4, seed=0) for task in one_by_one]],
            repeats=1,
        )
        logger.info("Best-of-4 on 8 tasks: one batched call is %.2fx faster than 8 one-task calls", single / batched)


if __name__ == "__main__":
    main()
