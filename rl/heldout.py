"""Held-out rewards during GRPO: every K steps the policy expands the prompts of held-out tasks (greedy), the
generator inpaints them with a fixed seed per task, and the training rewards plus rewards the policy is *not* trained
on (``eval_rewards``) score them. A training reward that climbs while the others stay flat is reward hacking.

Rows go to ``output_dir/heldout.jsonl`` (appended, so a resumed run continues the curve).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from reward.data.files import append_jsonl, json_safe, read_records
from rl.inpaint_tasks import Task
from rl.rewards import InpaintingRewards, RewardSet

logger = logging.getLogger(__name__)

HELDOUT_SEED_STEP = -1  # the generator seed of a held-out task does not change between evaluations


def policy_generate(
    model: Any,
    processing_class: Any,
    messages: Sequence[list[dict[str, Any]]],
    images: Sequence[Any] | None,
    max_new_tokens: int,
) -> list[str]:
    """Greedy completions of chat prompts (text policy, or a VLM with one image per prompt)."""
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    tokenizer.padding_side = "left"  # generation continues every row from its last prompt token
    if images is not None:
        texts = [processing_class.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
        inputs = processing_class(text=texts, images=[[im] for im in images], return_tensors="pt", padding=True)
    else:
        inputs = tokenizer.apply_chat_template(
            list(messages),
            add_generation_prompt=True,
            tokenize=True,
            return_tensors="pt",
            padding=True,
            return_dict=True,
        )
    device = next(model.parameters()).device
    inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    if was_training:
        model.train()
    return tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


class HeldOutEval(TrainerCallback):
    """Score the policy on held-out tasks every ``every`` steps (and before the first step)."""

    def __init__(
        self,
        tasks: Sequence[Task],
        build_messages: Callable[[Task], list[dict[str, Any]]],
        adapter: InpaintingRewards,
        rewards: RewardSet,
        *,
        every: int,
        max_new_tokens: int,
        history: Path,
        vision: bool,
    ) -> None:
        self.tasks, self.build_messages, self.adapter, self.rewards = list(tasks), build_messages, adapter, rewards
        self.every, self.max_new_tokens, self.history, self.vision = every, max_new_tokens, history, vision
        self.trainer: Any = None  # set after the trainer exists (for the unwrapped model and processor)
        self.done = self._steps_done()

    def _steps_done(self) -> set[int]:
        if not self.history.is_file():
            return set()
        return {int(row["step"]) for row in read_records(self.history) if "step" in row}

    def evaluate(self, model: Any, processing_class: Any, step: int) -> dict[str, Any]:
        messages = [self.build_messages(t) for t in self.tasks]
        images = [t.image for t in self.tasks] if self.vision else None
        texts = policy_generate(model, processing_class, messages, images, self.max_new_tokens)
        generated, used, counts = self.adapter.generate(texts, [t.id for t in self.tasks], HELDOUT_SEED_STEP)
        scores = self.rewards.score(generated, used)
        row: dict[str, Any] = {"step": step, "counts": counts, "example": used[0] if used else ""}
        for label, res in scores.items():
            ok = [v for v in res.value if v is not None]
            row[label] = sum(ok) / len(ok) if ok else None
        append_jsonl(self.history, [json_safe(row)])
        self.done.add(step)
        logger.info("held-out rewards at step %d: %s", step, {k: row[k] for k in scores})
        return row

    def _maybe(self, state: Any) -> None:
        step = state.global_step
        if self.trainer is None or step in self.done or not state.is_world_process_zero:
            return
        if step == 0 or step % self.every == 0 or step == state.max_steps:
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            self.evaluate(model, self.trainer.processing_class, step)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._maybe(state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._maybe(state)


def read_history(path: Path) -> list[dict[str, Any]]:
    return read_records(path)
