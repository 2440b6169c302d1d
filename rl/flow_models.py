"""The flow-matching generators Flow-GRPO trains (``rl/flow_grpo.py``), each a diffusers pipeline used through its own
parts (prompt encoding, latent packing, timesteps, VAE) around one velocity function that sampling and training share:

- ``flux-fill``: FLUX.1 Fill on inpainting tasks (``{"image", "mask", "prompt"}`` rows; the generator Best-of-N and
  GRPO run, :class:`rl.diffusers_generator.DiffusersGenerator`, so its settings and loading are theirs). FLUX's
  guidance is an input of the transformer (guidance distillation): one forward per step.
- ``sd3``: Stable Diffusion 3.5 text to image (``{"prompt"}`` rows), Flow-GRPO's main model, with the classifier-free
  guidance the paper samples and trains with (``v = v_uncond + w (v_text - v_uncond)``, the negative prompt ``""``).

The transformer gets a LoRA adapter as diffusers' own LoRA training adds it (``transformer.add_adapter``, peft); the
adapter switched off is the frozen reference model. Sizes: an inpainting task is worked at its image size scaled down
to a maximum side and rounded to the pipeline's multiple, then the image is scaled back and the original pixels kept
outside the mask (as the pipeline's users get it); a prompt at ``generator.size`` squared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from reward.core.config import parse
from reward.vlm.loading import resolve_dtype
from rl.devices import process_device
from rl.diffusers_generator import DiffusersConfig, DiffusersGenerator, work_size
from rl.flow_settings import FLUX_TARGETS, SD3_TARGETS, PromptTask, Sd3Config
from rl.inpaint_tasks import Task

Conditions = dict[str, torch.Tensor]  # per-item tensors (first dimension: the items), shared by a sampled batch


def select(cond: Conditions, rows: Sequence[int] | slice) -> Conditions:
    """The items ``rows`` of every tensor of ``cond``."""
    index = rows if isinstance(rows, slice) else torch.as_tensor(list(rows), dtype=torch.long)
    return {k: v[index] if v.ndim and len(v) else v for k, v in cond.items()}


class FlowGenerator:
    """What Flow-GRPO needs of a flow-matching pipeline: conditions of tasks, their first latents, the sigma
    schedule, the velocity (guidance included), the decoded images, and held-out images as the pipeline makes them."""

    name: str
    pipe: Any
    device: str
    targets: tuple[str, ...]

    @property
    def transformer(self) -> Any:
        return self.pipe.transformer

    @property
    def dtype(self) -> torch.dtype:
        return self.pipe.transformer.dtype

    def size_of(self, task: Any, max_side: int) -> tuple[int, int]:
        """The (width, height) ``task`` is sampled at during training, its longer side at most ``max_side``."""
        raise NotImplementedError

    def encode(self, tasks: Sequence[Any], size: tuple[int, int], generators: Sequence[torch.Generator]) -> Conditions:
        """Per-item conditions of ``tasks`` at ``size`` (``generators``: one per item, for what the pipeline samples
        while encoding)."""
        raise NotImplementedError

    def noise(self, generators: Sequence[torch.Generator], size: tuple[int, int]) -> torch.Tensor:
        raise NotImplementedError

    def sigmas(self, steps: int, size: tuple[int, int]) -> torch.Tensor:
        raise NotImplementedError

    def velocity(
        self,
        model: Any,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditions,
        guidance: float,
        size: tuple[int, int],
    ) -> torch.Tensor:
        """The velocity ``model`` (the transformer, or its DDP wrapper) predicts at ``sigma`` (one per item), with
        the guidance the generator samples with."""
        raise NotImplementedError

    def decode(self, latents: torch.Tensor, tasks: Sequence[Any], size: tuple[int, int]) -> list[Image.Image]:
        raise NotImplementedError

    def generate(self, tasks: Sequence[Any], seeds: Sequence[int]) -> list[Image.Image]:
        """Held-out images as the pipeline itself makes them (its own sampler, the generator's steps and guidance),
        one per task with its seed."""
        raise NotImplementedError

    def _timesteps(self, steps: int, **kwargs: Any) -> torch.Tensor:
        """The scheduler's sigmas for ``steps`` steps (``retrieve_timesteps``, as the pipeline sets them), float32."""
        from diffusers.pipelines.flux.pipeline_flux import retrieve_timesteps

        retrieve_timesteps(self.pipe.scheduler, steps, self.device, **kwargs)
        return self.pipe.scheduler.sigmas.float().cpu()


class FluxFillFlow(FlowGenerator):
    """FLUX.1 Fill: latents packed into 2x2 patches beside the masked image's latents and the mask."""

    targets = FLUX_TARGETS

    def __init__(self, cfg: DiffusersConfig | dict[str, Any], pipe: Any = None) -> None:
        self.base = DiffusersGenerator(
            cfg, pipe=pipe
        )  # Best-of-N's generator: its loading, prompts and held-out images
        self.cfg, self.name, self.pipe, self.device = self.base.cfg, "flux-fill", self.base.pipe, self.base.device
        self.scale = self.pipe.vae_scale_factor

    def size_of(self, task: Task, max_side: int) -> tuple[int, int]:
        return work_size(task.image.size, max_side, max(self.cfg.size_multiple, 2 * self.scale))

    def encode(
        self, tasks: Sequence[Task], size: tuple[int, int], generators: Sequence[torch.Generator]
    ) -> Conditions:
        pipe, (w, h) = self.pipe, size
        texts, _ = self.base.truncate([t.prompt for t in tasks])
        embeds, pooled, _ = pipe.encode_prompt(
            prompt=self.base.clip_prompts(texts),
            prompt_2=texts,
            device=self.device,
            max_sequence_length=self.cfg.max_sequence_length,
        )
        image = pipe.image_processor.preprocess([t.image.resize(size, Image.Resampling.BICUBIC) for t in tasks], h, w)
        mask = pipe.mask_processor.preprocess([t.mask.resize(size, Image.Resampling.NEAREST) for t in tasks], h, w)
        masked = (image.float() * (1 - mask)).to(self.device, self.dtype)
        mask_latents, masked_latents = pipe.prepare_mask_latents(
            mask,
            masked,
            len(tasks),
            pipe.vae.config.latent_channels,
            1,
            h,
            w,
            self.dtype,
            self.device,
            list(generators),
        )
        return {
            "embeds": embeds.to(self.dtype),
            "pooled": pooled.to(self.dtype),
            "masked": torch.cat((masked_latents, mask_latents), dim=-1),
        }

    def noise(self, generators: Sequence[torch.Generator], size: tuple[int, int]) -> torch.Tensor:
        from diffusers.utils.torch_utils import randn_tensor

        w, h = (2 * (side // (self.scale * 2)) for side in size)
        channels = self.pipe.vae.config.latent_channels
        noise = randn_tensor((len(generators), channels, h, w), generator=list(generators), device=self.device)
        return self.pipe._pack_latents(noise.to(self.dtype), len(generators), channels, h, w)

    def sigmas(self, steps: int, size: tuple[int, int]) -> torch.Tensor:
        import numpy as np
        from diffusers.pipelines.flux.pipeline_flux import calculate_shift

        config = self.pipe.scheduler.config
        tokens = (size[1] // self.scale // 2) * (size[0] // self.scale // 2)
        mu = calculate_shift(
            tokens,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        return self._timesteps(steps, sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)

    def velocity(
        self,
        model: Any,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditions,
        guidance: float,
        size: tuple[int, int],
    ) -> torch.Tensor:
        n, dtype = len(latents), self.dtype
        w, h = (side // (self.scale * 2) for side in size)  # the packed 2x2 patches' grid
        ids = self.pipe._prepare_latent_image_ids(n, h, w, latents.device, dtype)
        embedded = self.transformer.config.guidance_embeds
        return model(
            hidden_states=torch.cat((latents.to(dtype), cond["masked"]), dim=2),
            timestep=sigma.to(latents.device, dtype),
            guidance=torch.full((n,), guidance, device=latents.device, dtype=torch.float32) if embedded else None,
            pooled_projections=cond["pooled"],
            encoder_hidden_states=cond["embeds"],
            txt_ids=torch.zeros(cond["embeds"].shape[1], 3, device=latents.device, dtype=dtype),
            img_ids=ids,
            return_dict=False,
        )[0]

    def decode(self, latents: torch.Tensor, tasks: Sequence[Task], size: tuple[int, int]) -> list[Image.Image]:
        pipe = self.pipe
        unpacked = pipe._unpack_latents(latents.to(self.dtype), size[1], size[0], self.scale)
        unpacked = unpacked / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
        with torch.no_grad():
            decoded = pipe.vae.decode(unpacked.to(pipe.vae.dtype), return_dict=False)[0]
        out = []
        for task, image in zip(tasks, pipe.image_processor.postprocess(decoded, output_type="pil"), strict=True):
            image = image.convert("RGB").resize(task.image.size, Image.Resampling.BICUBIC)
            if self.cfg.paste_back:  # the original pixels outside the mask, as the generator gives them
                image = pipe.image_processor.apply_overlay(task.mask.convert("L"), task.image, image).convert("RGB")
            out.append(image)
        return out

    def generate(self, tasks: Sequence[Task], seeds: Sequence[int]) -> list[Image.Image]:
        prompts, _ = self.base.truncate([t.prompt for t in tasks])
        images, masks = [t.image for t in tasks], [t.mask for t in tasks]
        return [c[0] for c in self.base.inpaint(images, masks, prompts, n=1, seed=list(seeds))]


class Sd3Flow(FlowGenerator):
    """Stable Diffusion 3.5: unpacked latents, three text encoders, classifier-free guidance (two forwards in one
    batch: unconditional, then conditional)."""

    targets = SD3_TARGETS

    def __init__(self, cfg: Sd3Config | dict[str, Any], pipe: Any = None) -> None:
        from diffusers import StableDiffusion3Pipeline

        self.cfg = cfg = cfg if isinstance(cfg, Sd3Config) else parse(Sd3Config, cfg, where="generator")
        self.name = "sd3"
        self.device = process_device(cfg.device, where="generator.device")
        if pipe is None:
            dtype = resolve_dtype(cfg.dtype, torch.device(self.device))
            pipe = StableDiffusion3Pipeline.from_pretrained(cfg.path, dtype=dtype)
        self.pipe = pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)

    def size_of(self, task: PromptTask, max_side: int) -> tuple[int, int]:
        side = min(self.cfg.size, max_side) // (self.pipe.vae_scale_factor * 2) * self.pipe.vae_scale_factor * 2
        return side, side

    def encode(
        self, tasks: Sequence[PromptTask], size: tuple[int, int], generators: Sequence[torch.Generator]
    ) -> Conditions:
        embeds, negative, pooled, negative_pooled = self.pipe.encode_prompt(
            prompt=[t.prompt for t in tasks],
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=True,
            negative_prompt=[self.cfg.negative_prompt] * len(tasks),
            max_sequence_length=self.cfg.max_sequence_length,
        )
        return {"embeds": embeds, "pooled": pooled, "negative": negative, "negative_pooled": negative_pooled}

    def noise(self, generators: Sequence[torch.Generator], size: tuple[int, int]) -> torch.Tensor:
        from diffusers.utils.torch_utils import randn_tensor

        scale, channels = self.pipe.vae_scale_factor, self.transformer.config.in_channels
        shape = (len(generators), channels, size[1] // scale, size[0] // scale)
        return randn_tensor(shape, generator=list(generators), device=self.device).to(self.dtype)

    def sigmas(self, steps: int, size: tuple[int, int]) -> torch.Tensor:
        return self._timesteps(steps)

    def velocity(
        self,
        model: Any,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditions,
        guidance: float,
        size: tuple[int, int],
    ) -> torch.Tensor:
        guided = guidance > 1  # the pipeline's do_classifier_free_guidance
        both = torch.cat([latents, latents]) if guided else latents
        timestep = (sigma * self.pipe.scheduler.config.num_train_timesteps).to(latents.device)
        out = model(
            hidden_states=both.to(self.dtype),
            timestep=torch.cat([timestep, timestep]) if guided else timestep,
            encoder_hidden_states=torch.cat([cond["negative"], cond["embeds"]]) if guided else cond["embeds"],
            pooled_projections=torch.cat([cond["negative_pooled"], cond["pooled"]]) if guided else cond["pooled"],
            return_dict=False,
        )[0]
        if not guided:
            return out
        uncond, text = out.chunk(2)
        return uncond + guidance * (text - uncond)

    def decode(self, latents: torch.Tensor, tasks: Sequence[PromptTask], size: tuple[int, int]) -> list[Image.Image]:
        vae = self.pipe.vae
        latents = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        with torch.no_grad():
            decoded = vae.decode(latents, return_dict=False)[0]
        return [im.convert("RGB") for im in self.pipe.image_processor.postprocess(decoded, output_type="pil")]

    def generate(self, tasks: Sequence[PromptTask], seeds: Sequence[int]) -> list[Image.Image]:
        out: list[Image.Image] = []
        cfg = self.cfg
        for start in range(0, len(tasks), cfg.batch_size):
            chunk = list(zip(tasks, seeds, strict=True))[start : start + cfg.batch_size]
            result = self.pipe(
                prompt=[t.prompt for t, _ in chunk],
                negative_prompt=[cfg.negative_prompt] * len(chunk),
                height=cfg.size,
                width=cfg.size,
                num_inference_steps=cfg.steps,
                guidance_scale=cfg.guidance,
                max_sequence_length=cfg.max_sequence_length,
                generator=[torch.Generator("cpu").manual_seed(s) for _, s in chunk],
            ).images
            out.extend(im.convert("RGB") for im in result)
        return out


def build_flow_generator(cfg: Any) -> FlowGenerator:
    """The Flow-GRPO generator of ``cfg`` (a parsed :class:`DiffusersConfig` or :class:`Sd3Config`)."""
    return Sd3Flow(cfg) if isinstance(cfg, Sd3Config) else FluxFillFlow(cfg)
