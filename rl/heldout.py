"""Held-out rewards during GRPO: every K steps the policy expands the held-out tasks' prompts (greedy), the generator
inpaints them with a fixed seed per task, and the training rewards plus rewards the policy is *not* trained on
(``eval_rewards``) score them: a training reward that climbs while the others stay flat is reward hacking.

Collective (ZeRO-3 gathers the weights to generate): every process generates every prompt, inpaints and scores its
share; the main process appends the row to ``heldout.jsonl``. The last evaluation also saves each task's image beside
its base prompt's, same seed, for a blind study: ``heldout/NNNN-policy.png``, ``NNNN-base.png``, ``pairs.jsonl``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from reward.data.files import append_jsonl, atomic_write_jsonl, json_safe, read_records
from reward.integrations.reward_set import RewardSet
from rl.inpaint_render import InpaintingRender
from rl.inpaint_tasks import Task

logger = logging.getLogger(__name__)

HELDOUT_SEED_STEP = -1  # the generator seed of a held-out task does not change between evaluations


class HeldOutEval(TrainerCallback):
    """Score the policy on held-out tasks every ``every`` steps (and before the first step), on every process."""

    def __init__(
        self,
        tasks: Sequence[Task],
        build_messages: Callable[[Task], list[dict[str, Any]]],
        render: InpaintingRender,
        rewards: RewardSet,
        *,
        every: int,
        max_new_tokens: int,
        history: Path,
        view: Callable[[Task], Any] | None = None,
    ) -> None:
        self.tasks, self.build_messages, self.render, self.rewards = list(tasks), build_messages, render, rewards
        self.every, self.max_new_tokens, self.history, self.view = every, max_new_tokens, history, view
        self.trainer: Any = None  # set after the trainer exists (for the wrapped model and the accelerator)
        self.seconds = 0.0
        self.done = {int(row["step"]) for row in read_records(history) if "step" in row}  # steps a resumed run has

    def _texts(self) -> list[str]:
        """Greedy completions of every held-out prompt on every process (one generate call each, as ZeRO-3's synced
        generation needs), the whole weights gathered once under ZeRO-3 (trl's default for its own generation)."""
        from trl.models.utils import unwrap_model_for_generation

        trainer, processor = self.trainer, self.trainer.processing_class
        messages = [self.build_messages(t) for t in self.tasks]
        tokenizer = getattr(processor, "tokenizer", processor)
        tokenizer.padding_side = "left"  # generation continues every row from its last prompt token
        if self.view is not None:  # a VLM policy: one image per prompt
            texts = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
            images = [[self.view(t)] for t in self.tasks]
            inputs = processor(text=texts, images=images, return_tensors="pt", padding=True)
        else:
            template = {"add_generation_prompt": True, "tokenize": True, "padding": True, "return_dict": True}
            inputs = tokenizer.apply_chat_template(messages, return_tensors="pt", **template)
        wrapped = getattr(trainer, "model_wrapped", None) or trainer.model
        checkpointing = getattr(trainer.args, "gradient_checkpointing_kwargs", None)
        with unwrap_model_for_generation(
            wrapped, trainer.accelerator, gather_deepspeed3_params=True, gradient_checkpointing_kwargs=checkpointing
        ) as model:
            inputs = {k: v.to(next(model.parameters()).device) if hasattr(v, "to") else v for k, v in inputs.items()}
            was_training = model.training
            model.eval()
            with torch.no_grad():
                out = model.generate(
                    **inputs, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
            model.train(was_training)
        return tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    def evaluate(self, step: int, final: bool = False) -> dict[str, Any] | None:
        """The held-out row of ``step`` (on the main process; ``None`` on the others); the ``final`` one also saves
        the images of the policy's and of the base prompts. Collective."""
        from accelerate.utils import gather_object

        start = time.perf_counter()
        acc = self.trainer.accelerator
        texts = self._texts()
        mine = list(range(len(self.tasks)))[acc.process_index :: acc.num_processes]
        local: list[tuple[int, str, dict[str, float | None], bool]] = []
        if mine:
            images, used, _ = self.render.draw(
                [texts[i] for i in mine], [self.tasks[i].id for i in mine], HELDOUT_SEED_STEP
            )
            scores = self.rewards.score(images, used)
            if final:  # this process's share: the policy's image and the base prompt's, drawn with the same seed
                tasks = [self.tasks[i] for i in mine]
                base, _, _ = self.render.draw([t.prompt for t in tasks], [t.id for t in tasks], HELDOUT_SEED_STEP)
                (self.history.parent / "heldout").mkdir(exist_ok=True)
                for i, policy, plain in zip(mine, images, base, strict=True):
                    if policy is not None and plain is not None:
                        policy.save(self.history.parent / "heldout" / f"{i:04d}-policy.png")
                        plain.save(self.history.parent / "heldout" / f"{i:04d}-base.png")
            for k, i in enumerate(mine):
                local.append((i, used[k], {label: res.value[k] for label, res in scores.items()}, images[k] is None))
        rows = sorted(gather_object(local) if acc.num_processes > 1 else local, key=lambda r: r[0])
        self.done.add(step)
        self.seconds += time.perf_counter() - start
        if not acc.is_main_process:
            return None
        row: dict[str, Any] = {
            "step": step,
            "counts": {"empty": sum(1 for r in rows if not r[1]), "failed": sum(1 for r in rows if r[3])},
            "example": rows[0][1] if rows else "",
        }
        for label in self.rewards.labels:
            ok = [r[2][label] for r in rows if r[2].get(label) is not None]
            row[label] = sum(ok) / len(ok) if ok else None
        append_jsonl(self.history, [json_safe(row)])
        if final:
            pairs = [
                {"index": r[0], "task": self.tasks[r[0]].id, "prompt": self.tasks[r[0]].prompt, "expanded": r[1]}
                for r in rows
            ]
            atomic_write_jsonl(self.history.parent / "heldout" / "pairs.jsonl", json_safe(pairs))
        logger.info("held-out rewards at step %d: %s", step, {k: row[k] for k in self.rewards.labels})
        return row

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Before the first step (as ``on_train_begin`` too), every ``every`` steps and after the last one."""
        step = state.global_step
        if self.trainer is not None and step not in self.done:
            if step == 0 or step % self.every == 0 or step == state.max_steps:
                self.evaluate(step, final=step == state.max_steps)

    on_train_begin = on_step_end


def truncate_records(out: Path, step: int, extra: Sequence[str] = ()) -> dict[str, int]:
    """Back to the checkpoint a run resumes from (after ``step`` updates): held-out rows, sample rows and their images
    of later steps are dropped (samples are labelled by the update they train), so no step appears twice; ``extra``:
    more JSONL files of ``out`` with a ``step`` in each row. Returns how many rows each file lost."""
    dropped = {}
    files = [("heldout", out / "heldout.jsonl"), ("samples", out / "samples" / "samples.jsonl")]
    for name, records in [*files, *((Path(f).stem, out / f) for f in extra)]:
        rows = read_records(records)
        keep = [r for r in rows if int(r.get("step", 0)) <= step]
        dropped[name] = len(rows) - len(keep)
        if dropped[name]:
            kept = {r.get("path") for r in keep}
            for image in {r.get("path") for r in rows} - kept - {None}:  # sample images
                Path(image).unlink(missing_ok=True)
            atomic_write_jsonl(records, keep)
    if any(dropped.values()):
        logger.warning("resuming after step %d: dropped rows of later steps %s", step, dropped)
    return dropped
