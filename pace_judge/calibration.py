"""PACE's one-time calibration (§4.4): two rated anchor images for a protocol, from a diffusers text-to-image pipeline
and a person's 1-5 scores (generative mode) or from a labelled calibration split on any MOS scale (benchmark mode:
its MOS mapped linearly onto 1-5, the test split's metrics reported on the dataset's own scale)."""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from pace_judge.protocol import Anchor, Protocol
from reward.core.config import SIDE
from reward.core.errors import UserError
from reward.data.files import atomic_write_with
from reward.data.images import image_identity, load_image, to_rgb
from reward.data.manifest import image_root_field

logger = logging.getLogger(__name__)


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
    """Where a protocol's two anchors come from: a labelled calibration split (``benchmark``) or candidates rendered
    by ``pipeline`` and rated by a person; ``calibration.*`` of the ``pace`` reward too."""

    # generative mode
    pipeline: str | None = field(
        default=None, metadata={"help": "diffusers text-to-image checkpoint (e.g. Stable Diffusion v1.5)"}
    )
    out: str | None = field(
        default=None, metadata={"help": "candidates and contact sheet (default: PROTOCOL_DIR/calibration)"}
    )
    candidates: int = field(
        default=4, metadata={"help": "images rendered: half from positive prompts, half negative", "range": (2, 1000)}
    )
    scores: list[float] | None = field(
        default=None, metadata={"help": "1-5 per candidate, e.g. scores=1,3,4,5; null: asked", "range": (1, 5)}
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
            "help": "the benchmark's MOS scale [low, high], mapped onto 1-5; default: a dataset read by name "
            "brings its own (agiqa3k 0-5, spaq 0-100 ...), a manifest 1-5"
        },
    )

    def problems(self, where: str = "") -> list[str]:
        key, found = f"{where}." if where else "", []
        if self.scores is not None and len(self.scores) != self.candidates:
            found.append(
                f"{key}scores={list(self.scores)}: give exactly {self.candidates} scores, each from 1 to 5 (one per "
                f"candidate; {key}candidates={self.candidates})"
            )
        if self.mos_range is not None and (len(self.mos_range) != 2 or not self.mos_range[1] > self.mos_range[0]):
            found.append(f"{key}mos_range={list(self.mos_range)}: give [LOW, HIGH], HIGH above LOW, e.g. [0,100]")
        return found


def calibrate(cfg: CalibrationSource, protocol: Protocol, folder: Path, backend: Any = None) -> Protocol:
    """Give ``protocol`` its two anchors (saved in ``folder/anchors``), by benchmark or generative mode (``backend``:
    the Generator agent's model); the record goes to its provenance."""
    if cfg.benchmark:
        protocol.provenance["calibration"] = calibrate_benchmark(cfg, protocol, folder)
    else:
        protocol.provenance["calibration"] = calibrate_generative(cfg, protocol, folder, backend)
    return protocol


def ask_scores(n: int, sheet: Path) -> list[float]:
    """Ask a person for one 1-5 score per candidate on the terminal."""
    if not sys.stdin.isatty():
        raise UserError(f"no terminal to ask on: look at {sheet} and pass scores=s1,...,s{n} (1-5 each)")
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


def render_candidates(
    cfg: CalibrationSource, positive: list[str], negative: list[str]
) -> tuple[list[Image.Image], list[str]]:
    """Half the candidates from positive prompts, half from negative ones, in one pipeline call."""
    import torch
    from diffusers import DiffusionPipeline

    from reward.vlm import resolve_device, resolve_dtype

    prompts = [positive[i % len(positive)] for i in range((cfg.candidates + 1) // 2)]
    prompts += [negative[i % len(negative)] for i in range(cfg.candidates // 2)]
    device = resolve_device(cfg.device)
    pipe = DiffusionPipeline.from_pretrained(cfg.pipeline, dtype=resolve_dtype(cfg.dtype, device)).to(device)
    pipe.set_progress_bar_config(disable=None)
    out = pipe(
        prompt=prompts,
        num_inference_steps=cfg.steps,
        guidance_scale=cfg.guidance,
        height=cfg.height,
        width=cfg.width,
        generator=torch.Generator(device="cpu").manual_seed(cfg.seed),
        output_type="pil",
    )
    return list(out.images), prompts


def set_anchors(
    protocol: Protocol, folder: Path, high: Image.Image, high_score: float, low: Image.Image, low_score: float
) -> Protocol:
    """Save the two anchor images in ``folder/anchors`` and record them (paths relative to ``folder``)."""
    if high_score <= low_score:
        raise UserError(
            f"the highest score ({high_score:g}) must be above the lowest ({low_score:g}): the "
            "anchors must differ on this dimension; rate the candidates differently"
        )
    for name, img in (("high", high), ("low", low)):
        atomic_write_with(folder / "anchors" / f"{name}.png", lambda tmp, im=img: to_rgb(im).save(tmp, format="PNG"))
    protocol.anchors = {"high": Anchor("anchors/high.png", high_score), "low": Anchor("anchors/low.png", low_score)}
    protocol.folder = folder
    return protocol


def calibrate_generative(
    cfg: CalibrationSource, protocol: Protocol, folder: Path, backend: Any = None
) -> dict[str, Any]:
    """The Generator agent's prompts (or ``cfg.prompts``) rendered, a contact sheet, a person's scores: the highest
    and lowest rated candidates become the anchors."""
    positive, negative = cfg.prompts.positive, cfg.prompts.negative
    if not (positive and negative):
        from pace_judge.agents import AgentConfig, Agents

        if backend is None:
            raise UserError(
                "the Generator agent needs a model: pass model.path=VLM_DIR (or prompts.positive=[...] "
                "prompts.negative=[...])"
            )
        agents = Agents(backend, getattr(cfg, "agents", None) or AgentConfig())
        positive, negative = agents.calibration_prompts(protocol, n=max(1, cfg.candidates // 2))
    images, prompts = render_candidates(cfg, list(positive), list(negative))
    out = Path(cfg.out or folder / "calibration")
    out.mkdir(parents=True, exist_ok=True)
    tile = 256
    contact = Image.new("RGB", (tile * len(images), tile + 24), "white")  # the candidates side by side, numbered
    for i, img in enumerate(images):
        img.save(out / f"candidate_{i + 1}.png")
        contact.paste(to_rgb(img).resize((tile, tile)), (i * tile, 24))
        ImageDraw.Draw(contact).text((i * tile + 6, 5), str(i + 1), fill="black")
    atomic_write_with(out / "contact_sheet.png", lambda tmp: contact.save(tmp, format="PNG"))
    logger.info("candidates and contact sheet in %s", out)
    sheet = out / "contact_sheet.png"
    scores = [float(s) for s in cfg.scores] if cfg.scores is not None else ask_scores(len(images), sheet)
    hi, lo = max(range(len(scores)), key=scores.__getitem__), min(range(len(scores)), key=scores.__getitem__)
    set_anchors(protocol, folder, images[hi], scores[hi], images[lo], scores[lo])
    record = {"mode": "generative", "pipeline": str(cfg.pipeline), "prompts": prompts, "scores": scores}
    return record | {"seed": cfg.seed, "high": hi + 1, "low": lo + 1}


def to_protocol_scale(mos: float, scale: tuple[float, float]) -> float:
    """A MOS on ``scale`` mapped linearly onto the protocol's 1-5.

    >>> to_protocol_scale(0.3, (0.0, 5.0)), to_protocol_scale(75.0, (0.0, 100.0))
    (1.24, 4.0)
    """
    low, high = scale
    return round(1.0 + 4.0 * (mos - low) / (high - low), 12)


def _rows(cfg: CalibrationSource, source: str, split: str, dim: str, least: int = 2) -> tuple[list[Any], Any]:
    """The rows of dimension ``dim`` (else of the only one) in ``source`` and the benchmark's scale: ``mos_range``, or
    a dataset read by name brings its own, or a manifest 1-5."""
    from reward.data import load_ratings
    from reward.data.datasets import mos_range_of

    scale = tuple(map(float, cfg.mos_range)) if cfg.mos_range is not None else mos_range_of(cfg.benchmark)
    ratings = load_ratings(
        source,
        check_images=False,
        default_split=split,
        image_root=cfg.image_root,
        allow_absolute_paths=bool(getattr(cfg, "allow_absolute_paths", False)),
    )
    dims = sorted({r.dimension for r in ratings.rows})
    rows = [r for r in ratings.rows if r.dimension == dim] or (ratings.rows if len(dims) == 1 else [])
    if len(rows) < least:
        raise UserError(
            f"{source}: fewer than {'two rows' if least == 2 else 'one row'} of dimension {dim!r} (it has "
            f"{dims}); pass dimension=NAME"
        )
    outside = [r for r in rows if not scale[0] - 1e-9 <= r.mos <= scale[1] + 1e-9]
    if outside:
        raise UserError(
            f"{source}: MOS {outside[0].mos:g} (line {outside[0].line}) is outside the scale "
            f"{scale[0]:g}-{scale[1]:g}; pass the dataset's scale as mos_range=[LOW,HIGH] (a dataset read by name "
            "brings its own)"
        )
    return rows, scale


def calibrate_benchmark(cfg: CalibrationSource, protocol: Protocol, folder: Path) -> dict[str, Any]:
    """Anchors: the calibration split's highest- and lowest-MOS images, their MOS mapped onto 1-5 (a test split must
    share no image with it, compared by content)."""
    dim = cfg.dimension or protocol.dimension
    rows, scale = _rows(cfg, cfg.benchmark, "train", dim)
    if cfg.test:
        calib = {image_identity(r.image) for r in rows}  # by content: spellings and file names never hide one
        overlap = [r for r in _rows(cfg, cfg.test, "test", dim, least=1)[0] if image_identity(r.image) in calib]
        if overlap:
            example = f"{overlap[0].key}, line {overlap[0].line} of the test split"
            raise UserError(
                f"the calibration split shares {len(overlap)} image(s) with the test split "
                f"{cfg.test} (e.g. {example}); the splits must be disjoint"
            )
    high, low = max(rows, key=lambda r: r.mos), min(rows, key=lambda r: r.mos)  # among ties: the first row
    ties = {which: sum(r.mos == a.mos for r in rows) for which, a in (("high", high), ("low", low))}
    for which, a in (("high", high), ("low", low)):
        if ties[which] > 1:
            said = "%s anchor: %s (line %s), the first in row order of %d rows tied at MOS %g"
            logger.info(said, which, a.key, a.line, ties[which], a.mos)
    high_score, low_score = to_protocol_scale(high.mos, scale), to_protocol_scale(low.mos, scale)
    set_anchors(protocol, folder, load_image(high.image), high_score, load_image(low.image), low_score)
    if scale != (1.0, 5.0):
        said = "MOS on %g-%g mapped onto 1-5: anchors %g -> %g and %g -> %g"
        logger.info(said, *scale, high.mos, high_score, low.mos, low_score)
    mapping = f"1 + 4 * (mos - {scale[0]:g}) / ({scale[1]:g} - {scale[0]:g})"
    record = {"mode": "benchmark", "manifest": str(cfg.benchmark), "dimension": dim, "high": high.key, "low": low.key}
    record |= {"rows": len(rows), "mos_range": list(scale), "mapping": mapping, "high_mos": float(high.mos)}
    return record | {"low_mos": float(low.mos), "ties": {**ties, "rule": "the first in row order"}}


def evaluate_test(protocol: Protocol, cfg: CalibrationSource, backend: Any, *, batch_size: int = 16) -> dict[str, Any]:
    """The calibrated protocol scored on the test split: SRCC, PLCC and HOR (PACE eq. 1) on the dataset's scale, the
    1-5 scores and HOR's thresholds 3 and 4 mapped back onto it."""
    import numpy as np

    from pace_judge.tracks import DualTrackScorer
    from reward.eval.metrics import hor, plcc, srcc

    rows, (low, high) = _rows(cfg, cfg.test, "test", cfg.dimension or protocol.dimension, least=1)
    judge = DualTrackScorer(protocol, backend)
    scores: list[float] = []
    for i in range(0, len(rows), batch_size):
        scores += judge.judge([load_image(r.image) for r in rows[i : i + batch_size]]).scores.tolist()
    pred = low + (high - low) * (np.asarray(scores, float) - 1.0) / 4.0
    mos = np.asarray([r.mos for r in rows], float)
    tau = (low + (high - low) * 2.0 / 4.0, low + (high - low) * 3.0 / 4.0)
    horr = hor(pred, mos, tau_low=tau[0], tau_high=tau[1], pred_range=(low, high), mos_range=(low, high))
    record = {"manifest": str(cfg.test), "n": len(rows), "scale": [low, high], "srcc": srcc(pred, mos)}
    return record | {"plcc": plcc(pred, mos), "hor": horr, "hor_thresholds": list(tau)}
