"""Tiny random diffusers pipelines of the real architectures, built offline (tests and the demo): the inpainting
pipelines the generators of ``rl/`` run (SD1.5, SDXL, FLUX Fill), the SD1.5 text-to-image pipeline PACE's
calibration runs and the Stable Diffusion 3 one Flow-GRPO trains. They share one CLIP tokenizer, text encoder, VAE and
UNet recipe.

>>> # make_tiny_inpaint_pipeline(tmp / "sd15", "sd15-inpaint")  -> a directory loadable with from_pretrained
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


# the UNet recipe SD1.5 and SDXL share (SDXL adds its text-time embedding and its own attention sizes)
_UNET = {
    "block_out_channels": (32, 64),
    "layers_per_block": 1,
    "sample_size": 32,
    "out_channels": 4,
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "UpBlock2D"),
    "norm_num_groups": 32,
}


def make_clip_tokenizer(out_dir: Path, max_length: int = 77):
    """A CLIP tokenizer over single byte characters (no merges), written to ``out_dir`` and loaded back."""
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    out_dir.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())  # the byte-level alphabet, in GPT-2's (and CLIP's) order
    vocab = {tok: i for i, tok in enumerate(chars + [c + "</w>" for c in chars])}
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (out_dir / "vocab.json").write_text(json.dumps(vocab))
    (out_dir / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(out_dir / "vocab.json"), str(out_dir / "merges.txt"), model_max_length=max_length)
    tok.save_pretrained(out_dir)
    return tok


def _clip_text(vocab_size: int, projection: bool = False):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
        projection_dim=32,
        bos_token_id=vocab_size - 2,
        eos_token_id=vocab_size - 1,
        pad_token_id=vocab_size - 1,
    )
    return CLIPTextModelWithProjection(cfg) if projection else CLIPTextModel(cfg)


def _vae(latent_channels: int = 4, **extra):
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(32, 64),
        in_channels=3,
        out_channels=3,
        latent_channels=latent_channels,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        norm_num_groups=32,
        sample_size=64,
        **extra,
    )


def _sd15(out: Path, inpaint: bool = True) -> None:
    """SD1.5's parts: the UNet takes 9 channels for inpainting (latents, mask, masked image), 4 for text-to-image."""
    import diffusers

    tok = make_clip_tokenizer(out / "tokenizer")
    unet = diffusers.UNet2DConditionModel(
        **_UNET, in_channels=9 if inpaint else 4, cross_attention_dim=32, attention_head_dim=4
    )
    scheduler = diffusers.DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipeline = diffusers.StableDiffusionInpaintPipeline if inpaint else diffusers.StableDiffusionPipeline
    parts = {"unet": unet, "vae": _vae(), "text_encoder": _clip_text(len(tok)), "tokenizer": tok}
    parts |= {"scheduler": scheduler, "safety_checker": None, "feature_extractor": None}
    pipeline(**parts, requires_safety_checker=False).save_pretrained(out)


def _sdxl(out: Path) -> None:
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLInpaintPipeline, UNet2DConditionModel

    tok = make_clip_tokenizer(out / "tokenizer")
    tok2 = make_clip_tokenizer(out / "tokenizer_2")
    unet = UNet2DConditionModel(
        **_UNET,
        in_channels=9,
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 1),
        projection_class_embeddings_input_dim=80,
        cross_attention_dim=64,
    )
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1, timestep_spacing="leading"
    )
    pipe = StableDiffusionXLInpaintPipeline(
        unet=unet,
        vae=_vae(),
        text_encoder=_clip_text(len(tok)),
        tokenizer=tok,
        text_encoder_2=_clip_text(len(tok2), projection=True),
        tokenizer_2=tok2,
        scheduler=scheduler,
        requires_aesthetics_score=False,
    )
    pipe.save_pretrained(out)


def _t5_tokenizer(out: Path):
    """A T5 fast tokenizer: a Unigram model over single characters plus T5's specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import T5TokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    chars = [chr(c) for c in range(32, 127)]
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)] + [(c, -2.0) for c in chars]
    tk = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    tok = T5TokenizerFast(
        tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", unk_token="<unk>", extra_ids=0, model_max_length=128
    )
    tok.save_pretrained(out)
    return tok


def _t5_encoder(vocab_size: int):
    """A T5 encoder of 2 layers, width 32 (FLUX's and SD3's third text encoder)."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=vocab_size,
        d_model=32,
        d_kv=8,
        d_ff=37,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    return T5EncoderModel(config)


def _flux(out: Path) -> None:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxFillPipeline, FluxTransformer2DModel

    tok = make_clip_tokenizer(out / "tokenizer")
    tok2 = _t5_tokenizer(out / "tokenizer_2")
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=24,
        out_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8],
    )
    t5 = _t5_encoder(len(tok2))
    vae = _vae(
        latent_channels=1, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035
    )
    pipe = FluxFillPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=_clip_text(len(tok)),
        tokenizer=tok,
        text_encoder_2=t5,
        tokenizer_2=tok2,
        transformer=transformer,
    )
    pipe.save_pretrained(out)


def _sd3(out: Path) -> None:
    """Stable Diffusion 3's parts (diffusers' own test sizes): an MMDiT of 1 joint block, two CLIP encoders with
    projections (their pooled outputs concatenated: 64) and a T5 encoder, a 4-channel VAE, the flow-matching scheduler
    with SD3's shift."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    tok, tok2 = make_clip_tokenizer(out / "tokenizer"), make_clip_tokenizer(out / "tokenizer_2")
    tok3 = _t5_tokenizer(out / "tokenizer_3")
    transformer = SD3Transformer2DModel(
        sample_size=32,
        patch_size=1,
        in_channels=4,
        num_layers=1,
        attention_head_dim=8,
        num_attention_heads=4,
        caption_projection_dim=32,
        joint_attention_dim=32,
        pooled_projection_dim=64,
        out_channels=4,
    )
    t5 = _t5_encoder(len(tok3))
    StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_vae(
            latent_channels=4,
            use_quant_conv=False,
            use_post_quant_conv=False,
            shift_factor=0.0609,
            scaling_factor=1.5035,
        ),
        text_encoder=_clip_text(len(tok), projection=True),
        tokenizer=tok,
        text_encoder_2=_clip_text(len(tok2), projection=True),
        tokenizer_2=tok2,
        text_encoder_3=t5,
        tokenizer_3=tok3,
    ).save_pretrained(out)


def make_tiny_inpaint_pipeline(out_dir: str | Path, kind: str = "sd15-inpaint", seed: int = 0) -> Path:
    """Build a tiny random inpainting pipeline of ``kind`` in ``out_dir`` (reused if present) and return it."""
    return _build(out_dir, kind, {"sd15-inpaint": _sd15, "sdxl-inpaint": _sdxl, "flux-fill": _flux}, seed)


def make_tiny_text_to_image(out_dir: str | Path, seed: int = 0, kind: str = "sd15") -> Path:
    """A tiny random text-to-image pipeline (reused if present): Stable Diffusion v1.5's architecture (``sd15``) or
    Stable Diffusion 3's (``sd3``, a flow-matching model)."""
    return _build(out_dir, kind, {"sd15": lambda out: _sd15(out, inpaint=False), "sd3": _sd3}, seed)


def _build(out_dir: str | Path, kind: str, builders: dict, seed: int) -> Path:
    if kind not in builders:
        raise ValueError(f"unknown tiny pipeline {kind!r}; choose one of {', '.join(builders)}")
    out = Path(out_dir)
    if (out / "model_index.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    builders[kind](out)
    logger.info("built tiny %s pipeline in %s", kind, out)
    return out
