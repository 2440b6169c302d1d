"""The settings and tasks of Flow-GRPO's generators (``rl/flow_grpo.py``) and a round's layout over the processes,
read without torch: a command's settings are checked before any model library loads. The generators themselves:
:mod:`rl.flow_models`.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.config import BATCH, SIDE, TOKENS
from rl.diffusers_generator import DiffusersConfig

# the LoRA target modules of flow_grpo's training scripts: scripts/train_flux.py (FLUX's double blocks' attention
# and feed-forward; the single blocks' attention) and scripts/train_sd3.py (SD3's joint attention)
FLUX_TARGETS = (
    "attn.to_k",
    "attn.to_q",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "ff.net.0.proj",
    "ff.net.2",
    "ff_context.net.0.proj",
    "ff_context.net.2",
)
SD3_TARGETS = (
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "attn.to_k",
    "attn.to_out.0",
    "attn.to_q",
    "attn.to_v",
)


FLOW_GENERATORS = "flux-fill (inpainting) | sd3 (text to image)"  # the generators Flow-GRPO trains


@dataclass
class FluxFillConfig(DiffusersConfig):
    """Settings of Flow-GRPO's ``generator=flux-fill``: the inpainting generators' settings, named as Flow-GRPO
    takes them."""

    name: str = field(default=MISSING, metadata={"help": FLOW_GENERATORS})


@dataclass
class Sd3Config:
    """Settings of ``generator=sd3`` (Flow-GRPO's text-to-image model)."""

    name: str = field(default="sd3", metadata={"help": FLOW_GENERATORS})
    path: str = field(default=MISSING, metadata={"help": "pipeline directory or Hub id (from_pretrained)"})
    device: str | None = field(
        default=None, metadata={"help": "null: this process's own GPU (cpu without one); cuda:N; a template; a list"}
    )
    dtype: str = field(
        default="auto",
        metadata={"help": "auto: bf16 on a GPU that supports it, fp32 elsewhere; or float32 / float16 / bfloat16"},
    )
    steps: int = field(default=40, metadata={"help": "num_inference_steps of held-out images", "range": (1, 10_000)})
    guidance: float = field(default=4.5, metadata={"help": "classifier-free guidance scale", "range": (0, None)})
    negative_prompt: str = field(default="", metadata={"help": "the unconditional prompt of the guidance"})
    size: int = field(default=512, metadata={"help": "images are size x size pixels", "range": SIDE})
    max_sequence_length: int = field(
        default=256, metadata={"help": "T5 tokens of the prompt (the pipeline's default)", "range": TOKENS}
    )
    batch_size: int = field(default=4, metadata={"help": "prompts per held-out pipeline call", "range": BATCH})


def flow_generator_config(name: str) -> type | None:
    """The settings dataclass of Flow-GRPO's generator ``name`` (its ``generator`` config group's option)."""
    return {"flux-fill": FluxFillConfig, "sd3": Sd3Config}.get(name)


@dataclass(frozen=True)
class PromptTask:
    """A text-to-image task: its prompt, a stable id (``source:line``) and its group (held out together: the row's
    ``scene``, else the prompt)."""

    id: str
    prompt: str
    group: str = ""

    @functools.cached_property
    def key(self) -> str:
        """The task known by its prompt (its seeds come from this)."""
        return hashlib.blake2b(self.prompt.encode(), digest_size=8).hexdigest()


def load_prompt_tasks(source: Any, **read: Any) -> tuple[list[PromptTask], list[Any]]:
    """The text-to-image tasks of a prompts manifest (``{"prompt"[, "scene"]}`` rows; bad rows named by file and
    line, skipped and counted with ``skip_bad``) and the skipped rows; ``read``: the reader's options (images are
    not read: ``max_pixels``, ``image_root`` and ``allow_absolute_paths`` are ignored)."""
    from reward.data import load_prompts

    result = load_prompts(source, skip_bad=read.get("skip_bad", False))
    tasks = [
        PromptTask(row.where, row.prompt, f"scene:{row.extra['scene']}" if row.extra.get("scene") else row.prompt)
        for row in result.rows
    ]
    return tasks, list(result.skipped)


@dataclass(frozen=True)
class Layout:
    """Which images of a round are this process's: ``prompts`` groups of ``group_size``, ``world`` processes, batches
    of ``per_device`` images of one group."""

    prompts: int
    group_size: int
    world: int
    per_device: int

    @property
    def items(self) -> int:
        return self.prompts * self.group_size

    @property
    def per_process(self) -> int:
        return self.items // self.world

    def problem(self) -> str | None:
        """Why these numbers make no layout (``None``: they do)."""
        if self.group_size % self.per_device:
            return (
                f"trainer.per_device_train_batch_size={self.per_device} must divide trainer.num_generations="
                f"{self.group_size} (a batch holds images of one group)"
            )
        if self.items % (self.world * self.per_device):
            return (
                f"a round's {self.prompts} prompts x {self.group_size} images = {self.items} must be a multiple of "
                f"{self.world} process(es) x trainer.per_device_train_batch_size={self.per_device}"
            )
        return None

    def batches(self, rank: int) -> list[list[int]]:
        """Process ``rank``'s batches: lists of item numbers, each of one group.

        >>> Layout(prompts=2, group_size=4, world=2, per_device=2).batches(1)
        [[4, 5], [6, 7]]
        """
        first = rank * self.per_process
        items = range(first, first + self.per_process)
        return [list(items[i : i + self.per_device]) for i in range(0, len(items), self.per_device)]
