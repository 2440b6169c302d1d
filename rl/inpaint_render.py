"""GRPO's render for the public trl adapter (:class:`reward.integrations.trl_rewards.TrlRewards`: one render per
batch shared by every reward): each completion inpainted into its task with one generator seed per task and step
(:func:`task_seed`; common random numbers: a group's completions differ only in their prompts), truncated to the
generator's limit. It logs ``inpaint/empty|truncated|failed`` and ``time/inpaint_s`` with trl's ``log_metric``, and
once the batch is scored saves its first images to ``samples/`` (``samples.jsonl``).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from reward.data.files import append_jsonl, json_safe
from reward.integrations.reward_set import ScoreResult
from reward.integrations.trl_rewards import Rendered
from rl.generators import inpaint_each
from rl.inpaint_tasks import Task

if TYPE_CHECKING:
    from rl.generators import Generator


def task_seed(seed: int, task_key: str, step: int) -> int:
    """The generator seed of a task (its content :attr:`~rl.inpaint_tasks.Task.key`) at a step: shared by the task's
    group, new every step."""
    return zlib.crc32(f"{seed}:{task_key}:{step}".encode()) & 0x7FFFFFFF


class InpaintingRender:
    """Inpaint each completion into its task (a render for :class:`~reward.integrations.trl_rewards.TrlRewards`);
    ``inpaint_s`` adds up the seconds spent inpainting in this process; ``first_call``: when a call came first since it
    was last reset (by :class:`rl.reward_guard.RewardGuard`, timing a step)."""

    def __init__(
        self,
        generator: Generator,
        tasks: Mapping[str, Task],
        *,
        seed: int = 0,
        samples_dir: str | Path | None = None,
        samples_per_step: int = 4,
        write_samples: bool = True,
    ) -> None:
        self.generator, self.tasks, self.seed = generator, dict(tasks), seed
        self.samples_dir = Path(samples_dir) if samples_dir and write_samples else None
        self.samples_per_step = samples_per_step
        self.inpaint_s = 0.0
        self.first_call: float | None = None

    def draw(
        self, texts: Sequence[str], task_ids: Sequence[str], step: int
    ) -> tuple[list[Image.Image | None], list[str], dict[str, int]]:
        """Inpaint each text into its task (truncated to the generator's limit); the images (``None`` = failed),
        the prompts used, and counts of empty, truncated and failed items."""
        unknown = sorted({t for t in task_ids if t not in self.tasks})
        if unknown:
            raise ValueError(f"unknown task ids {unknown[:3]}: the dataset and the reward's tasks differ")
        used, cut = self.generator.truncate([t.strip() for t in texts])
        tasks = [self.tasks[t] for t in task_ids]
        results, errors = inpaint_each(
            self.generator,
            [t.image for t in tasks],
            [t.mask for t in tasks],
            used,
            n=1,
            seed=[task_seed(self.seed, t.key, step) for t in tasks],
        )
        images = [None if r is None else r[0] for r in results]
        counts = {"empty": sum(1 for t in used if not t), "truncated": sum(cut), "failed": len(errors)}
        return images, used, counts

    def __call__(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        *,
        task_id: Sequence[str],
        trainer_state: Any = None,
        log_metric: Any = None,
        log_extra: Any = None,
        **columns: Any,
    ) -> Rendered:
        step = int(getattr(trainer_state, "global_step", 0))
        start = time.perf_counter()
        self.first_call = start if self.first_call is None else self.first_call
        images, used, counts = self.draw(completions, task_id, step)
        self.inpaint_s += time.perf_counter() - start
        if log_metric is not None:
            for name, value in counts.items():
                log_metric(f"inpaint/{name}", float(value))
            log_metric("time/inpaint_s", self.inpaint_s)

        def when_scored(scores: dict[str, ScoreResult]) -> None:
            """The batch's first images in ``samples/`` (main process) with the first reward's value, labelled by the
            update these completions train, the console's "step N/M" (trl draws them at N - 1)."""
            paths: list[str | None] = [None] * len(images)
            if self.samples_dir is not None:
                self.samples_dir.mkdir(parents=True, exist_ok=True)
                first = next(iter(scores.values()))
                for k, image in enumerate(images[: self.samples_per_step]):
                    if image is not None:
                        paths[k] = str(self.samples_dir / f"step{step + 1:06d}_{k}.png")
                        image.save(paths[k])
                rows = [
                    {"step": step + 1, "k": k, "path": p, "prompt": used[k], "reward": first.value[k]}
                    for k, p in enumerate(paths)
                    if p is not None
                ]
                append_jsonl(self.samples_dir / "samples.jsonl", json_safe(rows))
            if log_extra is not None:
                log_extra("expanded_prompt", list(used))
                log_extra("sample_image", paths)

        return Rendered(images, texts=used, when_scored=when_scored)
