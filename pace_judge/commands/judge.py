"""What ``pace_judge/judge.py`` does: judge a folder of images on one dimension with PACE."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING
from PIL import Image
from tqdm.auto import tqdm

from pace_judge.config import PaceConfig, validate
from pace_judge.pace import PaceReward
from reward.core.config import BATCH, PIXELS, parse, resume_mode
from reward.core.errors import UserError
from reward.core.outputs import may_change_keys, prepare_output
from reward.core.summary import log_summary
from reward.data.files import append_jsonl, atomic_write_json, atomic_write_jsonl, json_safe, read_records
from reward.data.images import DEFAULT_MAX_PIXELS as DEFAULT_DECODE_PIXELS
from reward.data.images import load_image

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
JUDGE_KEYS = ("images", "out", "images_per_call", "skip_bad", "max_decode_pixels", "resume", "overwrite")
SCORES = "scores.jsonl"


@dataclass
class JudgeSettings(PaceConfig):
    """Settings of ``pace_judge/judge.py``: the ``pace`` reward's (:class:`pace_judge.config.PaceConfig`: the model,
    its loading knobs and PACE's pixel budget at the top level), plus the folder to judge. Keys marked ``may_change``
    may differ when a run is resumed: they do not change the scores already written."""

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
        metadata={
            "help": ("decode guard: larger images are refused unread (the model's visual-token budget is max_pixels)"),
            "may_change": True,
            "range": PIXELS,
        },
    )
    resume: str = field(
        default="never",
        metadata={
            "help": "auto: continue the same run in out= (images already in scores.jsonl are skipped) | never",
            "may_change": True,
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "move an existing out= folder aside (OUT.old-<time>) and start anew", "may_change": True},
    )


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


def pace_config(config: dict[str, Any]) -> PaceConfig:
    """The ``pace`` reward's settings within the judge's."""
    return parse(PaceConfig, {k: v for k, v in config.items() if k not in JUDGE_KEYS}, where="")


def decode(path: Path, max_decode_pixels: int | None) -> Image.Image:
    """``path`` decoded, after its header's size is checked against the judge's own decode guard."""
    try:
        with Image.open(path) as im:
            w, h = im.size
    except Image.DecompressionBombError as err:  # above twice PIL's own limit: refused on opening
        raise PaceUserError(f"{path}: {err} It was not decoded; resize it, or skip_bad=true to skip it.") from None
    except (OSError, ValueError):
        w = h = 0  # not an image: load_image says so
    if max_decode_pixels is not None and w * h > max_decode_pixels:
        raise PaceUserError(
            f"{path}: image is {w}x{h} = {w * h:,} pixels, above max_decode_pixels={max_decode_pixels:,}; it was "
            "not decoded. Pass a larger max_decode_pixels=N (the decode guard; max_pixels is the model's "
            "visual-token budget), or skip_bad=true to skip it."
        )
    return load_image(path, max_pixels=None)


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'image':<32}{'score':>8}{'alpha1':>9}{'alpha2':>9}"]

    def num(v: Any, width: int) -> str:
        return f"{v:>{width}.3f}" if isinstance(v, int | float) else f"{'n/a':>{width}}"

    for r in rows:
        lines.append(f"{r['image'][:31]:<32}{num(r['score'], 8)}{num(r['alpha1'], 9)}{num(r['alpha2'], 9)}")
    return "\n".join(lines)


def _record_failures(out: Path, err: Any) -> str:
    """Write the agents' failed answers (with their raw text) to ``out/agent_failures.json``; the message to show."""
    path = atomic_write_json(out / "agent_failures.json", json_safe(err.failures))
    return (
        f"{err}\nThe agents' unusable answers are in {path}; rerun with another out= folder, or overwrite=true to "
        "move this attempt aside."
    )


def _check_same_scale(done: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path) -> None:
    """Scores on another scale or from another protocol never join the rows already in ``path``."""
    if not done or not rows:
        return
    key = ("scale", "protocol_id")
    before, now = {k: done[0].get(k) for k in key}, {k: rows[0].get(k) for k in key}
    if before != now:
        raise PaceUserError(
            f"{path} holds scores on {before['scale']!r} (protocol {before['protocol_id']}); this run scores on "
            f"{now['scale']!r} (protocol {now['protocol_id']}): one scores file never mixes them. Pass overwrite=true "
            "to move the old run aside, or another out= folder."
        )


def _remove_if_empty(out: Path) -> None:
    """Remove ``out`` when it holds only what this run created and nothing was scored (run.json, empty scores)."""
    names = {p.name for p in out.iterdir()}
    if names <= {"run.json", SCORES} and not read_records(out / SCORES):
        for name in names:
            (out / name).unlink()
        out.rmdir()


def _judge_folder(
    settings: JudgeSettings, pace: PaceConfig, files: list[Path], out: Path, done: list[dict[str, Any]]
) -> tuple[PaceReward, list[dict[str, Any]], list[str]]:
    """Judge the images not in ``done``, appending each batch's rows to ``out/scores.jsonl``."""
    from pace_judge.agents import ProtocolBuildError
    from pace_judge.protocol import ProtocolError

    scores_path = out / SCORES
    seen = {r.get("image") for r in done}
    todo = [f for f in files if f.name not in seen]
    try:
        reward = PaceReward(pace)
    except ProtocolBuildError as err:
        raise PaceUserError(_record_failures(out, err)) from None
    except (ProtocolError, FileNotFoundError, ValueError) as err:
        raise PaceUserError(str(err)) from None
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    per_call = max(1, int(settings.images_per_call))
    bar = tqdm(total=len(todo), desc="judging", unit="img", disable=None)
    for start in range(0, len(todo), per_call):
        names, images = [], []
        for path in todo[start : start + per_call]:
            try:
                images.append(decode(path, settings.max_decode_pixels))
                names.append(path.name)
            except (OSError, ValueError) as err:
                if not settings.skip_bad:
                    if isinstance(err, PaceUserError):
                        raise
                    raise PaceUserError(f"{path}: {err} (skip_bad=true skips unreadable images)") from None
                logger.warning("skipping %s: %s", path, err)
                skipped.append(path.name)
        if images:
            try:
                judged = reward.judge(images)
            except ProtocolBuildError as err:
                raise PaceUserError(_record_failures(out, err)) from None
            batch = [json_safe({"image": n, **e}) for n, e in zip(names, judged.explanations, strict=True)]
            _check_same_scale(done or rows, batch, scores_path)
            append_jsonl(scores_path, batch)
            rows.extend(batch)
        bar.update(len(todo[start : start + per_call]))
    bar.close()
    return reward, rows, skipped


def run(cfg: Any) -> list[dict[str, Any]]:
    """Score every image of ``images`` and write ``out/scores.jsonl`` (and ``summary.json``); returns the rows.

    Everything that can be checked without a model is checked first (settings, images folder, protocol file, the
    output folder); images already scored are skipped on ``resume=auto``.
    """
    setup = set_up(parse(JudgeSettings, cfg, where=""))
    judged = judge(setup)
    report(setup, judged)
    return judged.every


@dataclasses.dataclass
class JudgeSetup:
    """What a judge run works on: its settings, the PACE config, the images and the output folder."""

    settings: JudgeSettings
    pace: Any  # pace_judge.config.PaceConfig
    files: list[Path]
    output: Any  # reward.core.outputs.Output
    done: list[dict[str, Any]]  # rows of a resumed run


@dataclasses.dataclass
class Judged:
    reward: Any  # the PACE reward, for its route
    every: list[dict[str, Any]]  # the resumed rows and this run's
    skipped: list[Any]


def set_up(settings: JudgeSettings) -> JudgeSetup:
    """Settings, protocol, images and the output folder checked (new, or this same run resumed) before any model."""
    from pace_judge.protocol import ProtocolError, load_protocol

    config = dataclasses.asdict(settings)
    pace = pace_config(config)
    try:
        validate(pace)
        if pace.protocol:
            load_protocol(pace.protocol, allow_absolute_paths=pace.allow_absolute_paths)
    except (ProtocolError, FileNotFoundError, ValueError) as err:
        raise PaceUserError(str(err)) from None
    files = list_images(settings.images)
    record = {k: v for k, v in config.items() if k not in ("out", "resume", "overwrite")}
    inputs = {"model": settings.model, "images": settings.images, "protocol": pace.protocol}
    output = prepare_output(
        settings.out,
        "pace_judge/judge",
        record,
        inputs,
        resume=resume_mode(settings.resume),
        overwrite=settings.overwrite,
        may_change=may_change_keys(JudgeSettings),
        resume_hint="resume=auto",
    )
    scores_path = output.path / SCORES
    done = read_records(scores_path) if output.resumed else []
    if output.resumed:
        atomic_write_jsonl(scores_path, done)  # a line torn by a crash is dropped before appending
    return JudgeSetup(settings, pace, files, output, done)


def judge(setup: JudgeSetup) -> Judged:
    """The images not yet scored, scored (a run that failed before its first score leaves no folder behind)."""
    out = setup.output.path
    try:
        reward, rows, skipped = _judge_folder(setup.settings, setup.pace, setup.files, out, setup.done)
    except UserError:
        if setup.output.state == "new":
            _remove_if_empty(out)  # a run that failed before its first score leaves no folder to refuse a rerun
        raise
    return Judged(reward, setup.done + rows, skipped)


def report(setup: JudgeSetup, judged: Judged) -> None:
    """``summary.json``, the table and the closing summary; the run marked complete."""
    output, every, reward = setup.output, judged.every, judged.reward
    out = output.path
    scores_path = out / SCORES
    if not scores_path.exists():
        atomic_write_jsonl(scores_path, [])  # every image skipped: an empty scores file, not a missing one
    failed = [r["image"] for r in every if r.get("score") is None]
    if failed:
        logger.warning("%d image(s) got no score (null in %s): %s", len(failed), SCORES, failed[:5])
    summary = {
        "n": len(every),
        "scored": len(every) - len(failed),
        "failed": len(failed),
        "skipped": len(judged.skipped),
        "route": reward.route,
        "scale": every[0].get("scale") if every else None,
        "protocol_id": every[0].get("protocol_id") if every else None,
        "resumed": output.resumed,
        **output.provenance(),
    }
    atomic_write_json(out / "summary.json", json_safe(summary))
    output.finish()
    logger.info(
        "PACE %s (%s)\n%s", reward.route.get("dimension", ""), reward.route.get("path", ""), format_table(every)
    )
    logger.info("wrote %s", scores_path)
    facts = {
        "images": len(every),
        "scored": len(every) - len(failed),
        "failed": len(failed),
        "skipped": len(judged.skipped),
    }
    log_summary("pace judge", facts, {"scores": scores_path, "summary": out / "summary.json"})
