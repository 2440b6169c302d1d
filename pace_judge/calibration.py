"""PACE's one-time calibration (§4.4): two rated anchor images for a protocol, from a diffusers text-to-image pipeline
and a person's 1-5 scores (generative mode) or from a labelled calibration split (benchmark mode); the command is
``pace_judge/calibrate.py`` (:mod:`pace_judge.commands.calibrate`).

Benchmark mode reads any dataset's scale: a dataset read by name brings its own (AGIQA-3K 0-5, SPAQ 0-100, ...), a
manifest takes ``mos_range=[LOW,HIGH]`` (default 1-5). The anchors' MOS are mapped linearly onto the protocol's 1-5
scale, ``1 + 4 (mos - LOW) / (HIGH - LOW)``, and the mapping is recorded in the protocol's provenance; the test
split's SRCC, PLCC and HOR are reported on the dataset's own scale (the scores mapped back, HOR's thresholds 3 and 4
of the 1-5 scale mapped onto it).
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from pace_judge.backends import Backend
from pace_judge.protocol import Anchor, Protocol
from reward.core.config import SIDE
from reward.core.errors import UserError
from reward.data.files import atomic_write_with
from reward.data.images import image_identity, load_image, to_rgb
from reward.data.manifest import image_root_field

logger = logging.getLogger(__name__)


class CalibrationError(UserError):
    """Calibration input the user can fix (scores, manifests, missing settings)."""


@dataclass
class PromptLists:
    positive: list[str] | None = field(
        default=None, metadata={"help": "text-to-image prompts for high-quality candidates"}
    )
    negative: list[str] | None = field(
        default=None, metadata={"help": "... and for low-quality ones (give both to skip the Generator agent)"}
    )


@dataclass
class CalibrationSource:
    """Where a protocol's two anchors come from: a labelled calibration split (``benchmark``) or rendered
    candidates rated by a person (``pipeline``). Used by ``pace_judge/calibrate.py`` and, as ``calibration.*``, by
    the ``pace`` reward to calibrate a protocol the memory bank routes to before storing or using it."""

    # generative mode
    pipeline: str | None = field(
        default=None, metadata={"help": "diffusers text-to-image checkpoint (e.g. Stable Diffusion v1.5)"}
    )
    out: str | None = field(
        default=None, metadata={"help": "candidates and contact sheet (default: PROTOCOL_DIR/calibration)"}
    )
    candidates: int = field(
        default=4,
        metadata={
            "help": "images rendered: half from positive prompts, half from negative ones",
            "range": (2, 1000),
        },
    )
    scores: list[float] | None = field(
        default=None,
        metadata={
            "help": "one 1-5 score per candidate, e.g. scores=1,3,4,5; null: asked on the terminal",
            "range": (1, 5),
        },
    )
    prompts: PromptLists = field(default_factory=PromptLists)
    steps: int = field(default=30, metadata={"help": "diffusion steps", "range": (1, 10_000)})
    guidance: float = field(default=7.5, metadata={"help": "classifier-free guidance scale", "range": (0, None)})
    height: int = field(default=512, metadata={"help": "image height in pixels", "range": SIDE})
    width: int = field(default=512, metadata={"help": "image width in pixels", "range": SIDE})
    seed: int = 0
    dtype: str = field(default="auto", metadata={"help": "pipeline dtype (auto: bf16 on GPU, fp32 on CPU)"})
    device: str | None = field(default=None, metadata={"help": "null: cuda if available"})
    # benchmark mode
    benchmark: str | None = field(
        default=None,
        metadata={"help": "calibration split's ratings manifest: highest- and lowest-MOS images are anchors"},
    )
    test: str | None = field(
        default=None, metadata={"help": "the test split's manifest: checked to be disjoint from the calibration split"}
    )
    image_root: str | None = image_root_field()
    dimension: str | None = field(
        default=None, metadata={"help": "manifest rows of this dimension (default: the protocol's)"}
    )
    mos_range: list[float] | None = field(
        default=None,
        metadata={
            "help": (
                "the benchmark's MOS scale [low, high], mapped onto 1-5; default: a dataset read by name "
                "brings its own (agiqa3k 0-5, spaq 0-100 ...), a manifest 1-5"
            )
        },
    )

    @property
    def configured(self) -> bool:
        return bool(self.benchmark or self.pipeline)


def calibrate(cfg: dict[str, Any], protocol: Protocol, folder: Path, backend: Backend | None = None) -> Protocol:
    """Give ``protocol`` its two anchors (saved in ``folder/anchors``) from ``cfg`` (a :class:`CalibrationSource`
    as a mapping): benchmark mode when ``benchmark`` is set, else generative; the record goes to its provenance."""
    mode = calibrate_benchmark if cfg.get("benchmark") else calibrate_generative
    protocol.provenance["calibration"] = mode(cfg, protocol, folder, backend)
    return protocol


def parse_scores(raw: Any, n: int) -> list[float]:
    """``"1,3,4,5"`` or a list: one 1-5 score per candidate."""
    items = [s for s in str(raw).replace(" ", "").strip("[]").split(",") if s] if not isinstance(raw, list) else raw
    try:
        scores = [float(s) for s in items]
    except ValueError:
        raise CalibrationError(f"scores={raw!r}: give {n} numbers from 1 to 5, e.g. scores=1,3,4,5") from None
    if len(scores) != n or not all(1.0 <= s <= 5.0 for s in scores):
        raise CalibrationError(f"scores={raw!r}: give exactly {n} scores, each from 1 to 5 (one per candidate)")
    return scores


def ask_scores(n: int, sheet: Path) -> list[float]:
    """Ask a person for one 1-5 score per candidate on the terminal."""
    if not sys.stdin.isatty():
        raise CalibrationError(f"no terminal to ask on: look at {sheet} and pass scores=s1,...,s{n} (1-5 each)")
    logger.info("Look at %s and rate each candidate from 1 (worst) to 5 (best) on this dimension.", sheet)
    scores = []
    for i in range(1, n + 1):
        question = f"score for candidate {i} (1-5): "
        while True:
            try:
                value = float(input(question).strip())
            except ValueError:
                value = math.nan
            if 1.0 <= value <= 5.0:
                scores.append(value)
                break
            question = f"please type a number from 1 to 5 for candidate {i}: "
    return scores


def contact_sheet(images: list[Image.Image], labels: list[str], tile: int = 256) -> Image.Image:
    """The candidates side by side with their numbers, for rating."""
    sheet = Image.new("RGB", (tile * len(images), tile + 24), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (img, label) in enumerate(zip(images, labels, strict=True)):
        sheet.paste(to_rgb(img).resize((tile, tile)), (i * tile, 24))
        draw.text((i * tile + 6, 5), label, fill="black")
    return sheet


def render_candidates(
    cfg: dict[str, Any], positive: list[str], negative: list[str]
) -> tuple[list[Image.Image], list[str]]:
    """Half the candidates from positive prompts, half from negative ones, in one pipeline call."""
    import torch
    from diffusers import DiffusionPipeline

    from reward.vlm import resolve_device, resolve_dtype

    n = int(cfg["candidates"])
    prompts = [positive[i % len(positive)] for i in range((n + 1) // 2)]
    prompts += [negative[i % len(negative)] for i in range(n // 2)]
    device = resolve_device(cfg.get("device"))
    pipe = DiffusionPipeline.from_pretrained(cfg["pipeline"], dtype=resolve_dtype(cfg["dtype"], device))
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=None)
    generator = torch.Generator(device="cpu").manual_seed(int(cfg["seed"]))
    out = pipe(
        prompt=prompts,
        num_inference_steps=int(cfg["steps"]),
        guidance_scale=float(cfg["guidance"]),
        height=int(cfg["height"]),
        width=int(cfg["width"]),
        generator=generator,
        output_type="pil",
    )
    return list(out.images), prompts


def set_anchors(
    protocol: Protocol, folder: Path, high: Image.Image, high_score: float, low: Image.Image, low_score: float
) -> Protocol:
    """Save the two anchor images in ``folder/anchors`` and record them (paths relative to ``folder``)."""
    if high_score <= low_score:
        raise CalibrationError(
            f"the highest score ({high_score:g}) must be above the lowest ({low_score:g}): the "
            "anchors must differ on this dimension; rate the candidates differently"
        )
    (folder / "anchors").mkdir(parents=True, exist_ok=True)
    for name, img in (("high", high), ("low", low)):
        atomic_write_with(folder / "anchors" / f"{name}.png", lambda tmp, im=img: to_rgb(im).save(tmp, format="PNG"))
    protocol.anchors = {"high": Anchor("anchors/high.png", high_score), "low": Anchor("anchors/low.png", low_score)}
    protocol.folder = folder
    return protocol


def generator_prompts(
    cfg: dict[str, Any], protocol: Protocol, backend: Backend | None = None
) -> tuple[list[str], list[str]]:
    """``prompts.positive`` / ``prompts.negative`` when given, else the Generator agent's."""
    given = cfg.get("prompts") or {}
    if given.get("positive") and given.get("negative"):
        return list(given["positive"]), list(given["negative"])
    from pace_judge.agents import Agents, agent_config, load_prompts
    from pace_judge.backends import ModelConfig, make_backend
    from reward.core.config import parse

    if backend is None:
        model = cfg.get("model") or {}
        if cfg["backend"] == "local" and not model.get("path"):
            raise CalibrationError(
                "the Generator agent needs a model: pass model.path=VLM_DIR (or "
                "prompts.positive=[...] prompts.negative=[...])"
            )
        local = parse(ModelConfig, model, where="model") if model.get("path") else None
        backend = make_backend(cfg["backend"], local, cfg.get("server"))
    acfg = agent_config(cfg.get("agents"))
    agents = Agents(backend, acfg, load_prompts(acfg.prompts))
    return agents.calibration_prompts(protocol, n=max(1, int(cfg["candidates"]) // 2))


def calibrate_generative(
    cfg: dict[str, Any], protocol: Protocol, folder: Path, backend: Backend | None = None
) -> dict[str, Any]:
    if not cfg.get("pipeline"):
        raise CalibrationError(
            "generative calibration needs pipeline=DIR (a diffusers text-to-image checkpoint), "
            "or use benchmark=MANIFEST"
        )
    positive, negative = generator_prompts(cfg, protocol, backend)
    images, prompts = render_candidates(cfg, positive, negative)
    out = Path(cfg.get("out") or folder / "calibration")
    out.mkdir(parents=True, exist_ok=True)
    for i, img in enumerate(images, 1):
        img.save(out / f"candidate_{i}.png")
    sheet = out / "contact_sheet.png"
    grid = contact_sheet(images, [f"{i}" for i in range(1, len(images) + 1)])
    atomic_write_with(sheet, lambda tmp: grid.save(tmp, format="PNG"))
    logger.info("candidates and contact sheet in %s", out)
    if cfg.get("scores") is not None:
        scores = parse_scores(cfg["scores"], len(images))
    else:
        scores = ask_scores(len(images), sheet)
    hi = max(range(len(scores)), key=lambda i: scores[i])
    lo = min(range(len(scores)), key=lambda i: scores[i])
    set_anchors(protocol, folder, images[hi], scores[hi], images[lo], scores[lo])
    return {
        "mode": "generative",
        "pipeline": str(cfg["pipeline"]),
        "prompts": prompts,
        "scores": scores,
        "seed": cfg["seed"],
        "high": hi + 1,
        "low": lo + 1,
    }


def benchmark_scale(cfg: dict[str, Any]) -> tuple[float, float]:
    """The benchmark's MOS scale: ``mos_range`` if given, else the dataset's own (:func:`mos_range_of`), else 1-5."""
    from reward.data.datasets import mos_range_of

    raw = cfg.get("mos_range")
    if raw is None:
        return mos_range_of(cfg["benchmark"])
    try:
        low, high = (float(v) for v in raw)
    except (TypeError, ValueError):
        raise CalibrationError(f"mos_range={raw!r}: give [LOW, HIGH], e.g. mos_range=[0,100]") from None
    if not high > low:
        raise CalibrationError(f"mos_range={raw!r}: HIGH must be above LOW")
    return low, high


def to_protocol_scale(mos: float, scale: tuple[float, float]) -> float:
    """A MOS on ``scale`` mapped linearly onto the protocol's 1-5.

    >>> to_protocol_scale(0.3, (0.0, 5.0)), to_protocol_scale(75.0, (0.0, 100.0))
    (1.24, 4.0)
    """
    low, high = scale
    return round(1.0 + 4.0 * (mos - low) / (high - low), 12)


def _rows_of(
    source: str, dim: str, split: str, scale: tuple[float, float], least: int = 2, cfg: dict[str, Any] | None = None
) -> list[Any]:
    from reward.data import load_ratings

    cfg = cfg or {}
    ratings = load_ratings(  # NAME:FOLDER: its split
        source,
        check_images=False,
        default_split=split,
        image_root=cfg.get("image_root"),
        allow_absolute_paths=bool(cfg.get("allow_absolute_paths")),
    )
    dims = sorted({r.dimension for r in ratings.rows})
    rows = [r for r in ratings.rows if r.dimension == dim] or (ratings.rows if len(dims) == 1 else [])
    if len(rows) < least:
        raise CalibrationError(
            f"{source}: fewer than {'two rows' if least == 2 else 'one row'} of dimension {dim!r} (it has {dims}); "
            "pass dimension=NAME"
        )
    outside = [r for r in rows if not scale[0] - 1e-9 <= r.mos <= scale[1] + 1e-9]
    if outside:
        raise CalibrationError(
            f"{source}: MOS {outside[0].mos:g} (line {outside[0].line}) is outside the scale "
            f"{scale[0]:g}-{scale[1]:g}; pass the dataset's scale as mos_range=[LOW,HIGH] (a dataset read by name "
            "brings its own)"
        )
    return rows


def calibrate_benchmark(cfg: dict[str, Any], protocol: Protocol, folder: Path, backend: Any = None) -> dict[str, Any]:
    """Anchors: the calibration split's highest- and lowest-MOS images, their MOS mapped onto 1-5."""
    dim = cfg.get("dimension") or protocol.dimension
    scale = benchmark_scale(cfg)
    rows = _rows_of(cfg["benchmark"], dim, "train", scale, cfg=cfg)
    if cfg.get("test"):
        test = _rows_of(cfg["test"], dim, "test", scale, least=1, cfg=cfg)
        calib = {image_identity(r.image): r for r in rows}  # by content: spellings and file names never hide one
        overlap = [r for r in test if image_identity(r.image) in calib]
        if overlap:
            example = f"{overlap[0].key}, line {overlap[0].line} of the test split"
            raise CalibrationError(
                f"the calibration split shares {len(overlap)} image(s) with the test split "
                f"{cfg['test']} (e.g. {example}); the splits must be disjoint"
            )
    high = max(rows, key=lambda r: r.mos)
    low = min(rows, key=lambda r: r.mos)
    high_score, low_score = to_protocol_scale(high.mos, scale), to_protocol_scale(low.mos, scale)
    set_anchors(protocol, folder, load_image(high.image), high_score, load_image(low.image), low_score)
    if scale != (1.0, 5.0):
        logger.info(
            "MOS on %g-%g mapped onto 1-5: anchors %g -> %g and %g -> %g",
            *scale,
            high.mos,
            high_score,
            low.mos,
            low_score,
        )
    return {
        "mode": "benchmark",
        "manifest": str(cfg["benchmark"]),
        "dimension": dim,
        "high": high.key,
        "low": low.key,
        "rows": len(rows),
        "mos_range": list(scale),
        "mapping": f"1 + 4 * (mos - {scale[0]:g}) / ({scale[1]:g} - {scale[0]:g})",
        "high_mos": float(high.mos),
        "low_mos": float(low.mos),
    }


def evaluate_test(
    protocol: Protocol, cfg: dict[str, Any], backend: Backend, *, batch_size: int = 16, **scorer: Any
) -> dict[str, Any]:
    """The calibrated protocol scored on the test split: SRCC, PLCC and HOR (PACE eq. 1) on the dataset's scale.

    The scores (1-5, the anchors' mapped scale) are mapped back onto the dataset's; HOR's thresholds 3 and 4 of the
    1-5 scale are mapped the same way."""
    import numpy as np

    from pace_judge.scorer import DualTrackScorer
    from reward.eval.metrics import hor, plcc, srcc

    dim = cfg.get("dimension") or protocol.dimension
    scale = benchmark_scale(cfg)
    rows = _rows_of(cfg["test"], dim, "test", scale, least=1, cfg=cfg)
    judge = DualTrackScorer(protocol, backend, **scorer)
    scores: list[float] = []
    for i in range(0, len(rows), batch_size):
        scores += judge.judge([load_image(r.image) for r in rows[i : i + batch_size]]).scores.tolist()
    low, high = scale
    pred = low + (high - low) * (np.asarray(scores, float) - 1.0) / 4.0
    mos = np.asarray([r.mos for r in rows], float)
    tau = (low + (high - low) * 2.0 / 4.0, low + (high - low) * 3.0 / 4.0)
    return {
        "manifest": str(cfg["test"]),
        "n": len(rows),
        "scale": [low, high],
        "srcc": srcc(pred, mos),
        "plcc": plcc(pred, mos),
        "hor": hor(pred, mos, tau_low=tau[0], tau_high=tau[1], pred_range=scale, mos_range=scale),
        "hor_thresholds": list(tau),
    }
