"""What ``pace_judge/judge.py`` does: judge a folder of images on one dimension with PACE."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING
from tqdm.auto import tqdm

from pace_judge.config import PaceConfig
from pace_judge.pace import PaceReward
from reward.core.config import parse, store_schema
from reward.core.errors import ConfigError, UserError
from reward.data.files import atomic_write_json, atomic_write_jsonl
from reward.data.images import load_image
from reward.vlm.loading import LOADING_KEYS, ModelLoading

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
JUDGE_KEYS = ("images", "out", "images_per_call", "skip_bad")


@dataclass
class JudgeModel(ModelLoading):
    """The local VLM (backend=local); loading knobs from :class:`reward.vlm.ModelLoading`."""

    path: str | None = None  # VLM checkpoint directory
    batch_size: int = 32  # (image group, probe) queries per forward pass


@dataclass
class JudgeSettings(PaceConfig):
    """Settings of ``pace_judge/judge.py``: the ``pace`` reward's (:class:`pace_judge.pace.PaceConfig`) with the
    model as a section, plus the folder to judge."""

    images: str = MISSING  # folder of images (png, jpg, jpeg, webp, bmp, tif)
    out: str = MISSING  # output folder (scores.jsonl)
    model: JudgeModel = field(default_factory=JudgeModel)
    images_per_call: int = 8  # images judged per batch
    skip_bad: bool = False  # true: skip unreadable images (logged) instead of failing


store_schema("judge_schema", JudgeSettings)


class PaceUserError(UserError):
    """A problem the user can fix (bad config, unbuildable protocol); reported without a traceback."""


def list_images(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise PaceUserError(f"images={folder} is not a folder; pass images=DIR (a folder of image files)")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise PaceUserError(f"images={folder} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
    return files


def pace_config(c: dict[str, Any]) -> PaceConfig:
    defaults = ModelLoading()
    stray = [k for k in LOADING_KEYS if k in c and c[k] != getattr(defaults, k)]
    if stray:
        raise ConfigError(f"the judge's model knobs are under model.: set {', '.join(f'model.{k}' for k in stray)}")
    values = {k: v for k, v in c.items() if k not in JUDGE_KEYS}
    model = values.get("model")
    if isinstance(model, dict) and not model.get("path"):
        values["model"] = None  # e.g. backend=openai: no local checkpoint
    return parse(PaceConfig, values, where="")


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'image':<32}{'score':>8}{'alpha1':>9}{'alpha2':>9}"]
    for r in rows:
        a2 = "n/a" if r["alpha2"] is None else f"{r['alpha2']:.3f}"
        lines.append(f"{r['image'][:31]:<32}{r['score']:>8.3f}{r['alpha1']:>9.3f}{a2:>9}")
    return "\n".join(lines)


def _record_failures(out: Path, err: Any) -> str:
    """Write the agents' failed answers (with their raw text) to ``out/agent_failures.json``; the message to show."""
    path = atomic_write_json(out / "agent_failures.json", err.failures)
    return f"{err}\nThe agents' unusable answers are in {path}."


def run(cfg: Any) -> list[dict[str, Any]]:
    """Score every image of ``images`` and write ``out/scores.jsonl``; returns its rows."""
    from pace_judge.agents import ProtocolBuildError
    from pace_judge.protocol import ProtocolError

    c = dataclasses.asdict(parse(JudgeSettings, cfg, where=""))
    files = list_images(c["images"])
    out = Path(c["out"])
    try:
        reward = PaceReward(pace_config(c))
    except ProtocolBuildError as err:
        raise PaceUserError(_record_failures(out, err)) from None
    except (ProtocolError, FileNotFoundError, ValueError) as err:
        raise PaceUserError(str(err)) from None
    rows: list[dict[str, Any]] = []
    per_call = max(1, int(c.get("images_per_call", 8)))
    bar = tqdm(total=len(files), desc="judging", unit="img", disable=None)
    for start in range(0, len(files), per_call):
        names, images = [], []
        for path in files[start : start + per_call]:
            try:
                images.append(load_image(path))
                names.append(path.name)
            except (OSError, ValueError) as err:
                if not c.get("skip_bad"):
                    raise PaceUserError(f"{path}: {err} (skip_bad=true skips unreadable images)") from None
                logger.warning("skipping %s: %s", path, err)
        if images:
            try:
                judged = reward.judge(images)
            except ProtocolBuildError as err:
                raise PaceUserError(_record_failures(out, err)) from None
            rows.extend({"image": n, **e} for n, e in zip(names, judged.explanations, strict=True))
        bar.update(len(files[start : start + per_call]))
    bar.close()
    path = atomic_write_jsonl(out / "scores.jsonl", rows)
    logger.info(
        "PACE %s (%s)\n%s", reward.route.get("dimension", ""), reward.route.get("path", ""), format_table(rows)
    )
    logger.info("wrote %s", path)
    return rows
