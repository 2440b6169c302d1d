"""What ``pace_judge/judge.py`` does: judge a folder of images on one dimension with PACE."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING
from tqdm.auto import tqdm

from pace_judge.agents import ProtocolBuildError
from pace_judge.config import PaceConfig, validate
from pace_judge.protocol import load_protocol
from reward.core.config import BATCH, PIXELS, overwrite_field, resume_field, resume_mode
from reward.core.errors import UserError
from reward.core.outputs import RUN_FILE, fingerprint, may_change_keys, prepare_output
from reward.core.summary import log_summary
from reward.data.files import append_jsonl, atomic_write_json, atomic_write_jsonl, json_safe, read_records
from reward.data.images import DEFAULT_MAX_PIXELS as DEFAULT_DECODE_PIXELS
from reward.data.images import load_image

if TYPE_CHECKING:  # torch: once the settings are checked
    from pace_judge.pace import PaceReward

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
SCORES = "scores.jsonl"


@dataclass
class JudgeSettings(PaceConfig):
    """Settings of ``pace_judge/judge.py``: the ``pace`` reward's (:class:`pace_judge.config.PaceConfig`) and the
    folder to judge. Keys marked ``may_change`` may differ when a run is resumed: they do not change the scores."""

    images: str = field(default=MISSING, metadata={"help": "folder of images (png, jpg, jpeg, webp, bmp, tif)"})
    out: str = field(default=MISSING, metadata={"help": "output folder (scores.jsonl, summary.json)"})
    images_per_call: int = field(
        default=8, metadata={"help": "images judged per batch", "may_change": True, "range": BATCH}
    )
    skip_bad: bool = field(
        default=False,
        metadata={"help": "true: skip unreadable images (logged) instead of failing", "may_change": True},
    )
    max_decode_pixels: int | None = field(
        default=DEFAULT_DECODE_PIXELS,
        metadata={"help": "decode guard: larger images are refused unread", "may_change": True, "range": PIXELS},
    )
    resume: str = resume_field(
        "auto: continue the run in out= (images in scores.jsonl skipped) | never", default="never"
    )
    overwrite: bool = overwrite_field("move an existing out= folder aside (OUT.old-<time>) and start anew")


def run(settings: JudgeSettings) -> list[dict[str, Any]]:
    """Score every image of ``images`` into ``out/scores.jsonl`` (and ``summary.json``); returns the rows. Everything
    checkable without a model is checked first; images already scored are skipped on ``resume=auto``."""
    output, files, done = set_up(settings)
    reward, rows, skipped = judge(settings, output, files, done)
    report(settings, output, reward, done + rows, skipped)
    return done + rows


def set_up(settings: JudgeSettings) -> tuple[Any, list[Path], list[dict[str, Any]]]:
    """Settings, protocol, images and the output folder checked (new, or this same run resumed) before any model:
    ``(output, image files, rows of a resumed run)``."""
    validate(settings)
    if settings.protocol:
        load_protocol(settings.protocol, allow_absolute_paths=settings.allow_absolute_paths)
    folder = Path(settings.images)
    if not folder.is_dir():
        raise UserError(f"images={folder} is not a folder; pass images=DIR (a folder of image files)")
    # hidden files are neither judged nor fingerprinted (reward.core.fingerprints skips them): what is read is known
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith("."))
    if not files:
        raise UserError(f"images={folder} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
    config = dataclasses.asdict(settings)
    output = prepare_output(
        settings.out,
        "pace_judge/judge",
        {k: v for k, v in config.items() if k not in ("out", "resume", "overwrite")},
        {"model": settings.model, "images": settings.images, "protocol": settings.protocol},
        resume=resume_mode(settings.resume),
        overwrite=settings.overwrite,
        may_change=may_change_keys(JudgeSettings),
        resume_hint="resume=auto",
    )
    done = read_records(output.path / SCORES) if output.resumed else []
    if output.resumed:
        atomic_write_jsonl(output.path / SCORES, done)  # a line torn by a crash is dropped before appending
    return output, files, done


def judge(
    settings: JudgeSettings, output: Any, files: list[Path], done: list[dict[str, Any]]
) -> tuple[PaceReward, list[dict[str, Any]], list[str]]:
    """The images not in ``done`` judged, each batch's rows appended to ``scores.jsonl``; a run that fails before its
    first score leaves no folder behind (it would refuse the rerun). Scores on another scale never join the rows."""
    out = output.path
    seen = {r.get("image") for r in done}
    todo = [f for f in files if f.name not in seen]
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    from pace_judge.pace import PaceReward

    try:
        try:
            reward = PaceReward(settings)
        except (FileNotFoundError, ValueError) as err:  # a model or protocol the user can fix
            raise UserError(str(err)) from None
        for start in tqdm(range(0, len(todo), settings.images_per_call), desc="judging", unit="batch", disable=None):
            names, images = [], []
            for path in todo[start : start + settings.images_per_call]:
                try:
                    images.append(load_image(path, max_pixels=settings.max_decode_pixels))
                    names.append(path.name)
                except (UserError, OSError, ValueError) as err:
                    said = str(err).replace("max_pixels", "max_decode_pixels")  # the judge's decode guard
                    if not settings.skip_bad:
                        hint = "max_pixels is the model's visual-token budget; skip_bad=true skips it"
                        raise UserError(f"{said} ({hint})") from None
                    logger.warning("skipping %s: %s", path, said)
                    skipped.append(path.name)
            if not images:
                continue
            batch = [
                json_safe({"image": n, **e}) for n, e in zip(names, reward.judge(images).explanations, strict=True)
            ]
            before = (done or rows or batch)[0]
            if any(before.get(k) != batch[0].get(k) for k in ("scale", "protocol_id")):
                raise UserError(
                    f"{out / SCORES} holds scores on {before['scale']!r} (protocol {before['protocol_id']}); this run "
                    f"scores on {batch[0]['scale']!r} (protocol {batch[0]['protocol_id']}): one scores file never "
                    "mixes them. Pass overwrite=true to move the old run aside, or another out= folder."
                )
            if settings.memory and not rows:  # the bank as this run left it (it stores what it builds): no new input
                output.identity["inputs"]["memory"] = fingerprint(settings.memory, exclude=[os.path.realpath(out)])
                atomic_write_json(out / RUN_FILE, output.identity)
            append_jsonl(out / SCORES, batch)
            rows.extend(batch)
    except ProtocolBuildError as err:
        path = atomic_write_json(out / "agent_failures.json", json_safe(err.failures))
        raise UserError(
            f"{err}\nThe agents' unusable answers are in {path}; rerun with another out= folder, or overwrite=true "
            "to move this attempt aside."
        ) from None
    except UserError:
        names = {p.name for p in out.iterdir()}
        if not output.resumed and names <= {"run.json", SCORES} and not read_records(out / SCORES):
            shutil.rmtree(out)  # it holds only what this run created, and nothing was scored
        raise
    return reward, rows, skipped


def report(
    settings: JudgeSettings, output: Any, reward: PaceReward, every: list[dict[str, Any]], skipped: list[str]
) -> None:
    """``summary.json``, the table and the closing summary; the run marked complete."""
    out = output.path
    if not (out / SCORES).exists():
        atomic_write_jsonl(out / SCORES, [])  # every image skipped: an empty scores file, not a missing one
    failed = [r["image"] for r in every if r.get("score") is None]
    if failed:
        logger.warning("%d image(s) got no score (null in %s): %s", len(failed), SCORES, failed[:5])
    counts = {"scored": len(every) - len(failed), "failed": len(failed), "skipped": len(skipped)}
    first = every[0] if every else {}
    summary = {"n": len(every), **counts, "route": reward.route, "scale": first.get("scale")}
    summary |= {"protocol_id": first.get("protocol_id"), "resumed": output.resumed, **output.provenance()}
    atomic_write_json(out / "summary.json", json_safe(summary))
    output.finish()

    def num(v: Any, width: int) -> str:
        return f"{v:>{width}.3f}" if isinstance(v, int | float) else f"{'n/a':>{width}}"

    table = [f"{'image':<32}{'score':>8}{'alpha1':>9}{'alpha2':>9}"]
    table += [f"{r['image'][:31]:<32}{num(r['score'], 8)}{num(r['alpha1'], 9)}{num(r['alpha2'], 9)}" for r in every]
    logger.info("PACE %s (%s)\n%s", reward.route.get("dimension", ""), reward.route.get("path", ""), "\n".join(table))
    logger.info("wrote %s", out / SCORES)
    files = {"scores": out / SCORES, "summary": out / "summary.json"}
    log_summary("pace judge", {"images": len(every), **counts}, files)
