"""Score the distinct images of a manifest once each: data-parallel, decoded by DataLoader workers, written as it goes.

Under ``accelerate launch --num_processes N`` the images still to score are split into N contiguous shards; each
process appends each batch's scores to its own file (``scores.jsonl``, ``scores.rank{r}.jsonl``), so a crash loses
at most one batch; ``resume=True`` scores only the images missing from them. The workers decode the images and run
the reward's image processor (``reward.image_preparer()``) when it offers one.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from reward.data import ImageError, ImageRef, SkippedRow, load_image
from reward.data.files import append_jsonl, read_records
from reward.rewards.base import Reward

logger = logging.getLogger(__name__)

SCORES = "scores.jsonl"
BAD_IMAGE = (ImageError, OSError, ValueError)


@dataclass
class ScoredImages:
    """``scores[key] = {"score": s, dim: s_dim, ...}`` for every image scored (now or before a resume)."""

    scores: dict[str, dict[str, float]]
    skipped: list[SkippedRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # processes, images_per_process, resumed


def process_state() -> Any:
    """accelerate's process state; without a GPU, processes started by ``accelerate launch --multi_gpu`` (torchrun)
    join a CPU (gloo) group instead of each running alone."""
    from accelerate import PartialState

    cpu = os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true") or not torch.cuda.is_available()
    return PartialState(cpu=cpu)


def read_partial(out_dir: Path) -> dict[str, dict[str, float]]:
    """Scores already written in ``out_dir`` (every process's file); a line torn by a crash is ignored."""
    done: dict[str, dict[str, float]] = {}
    for path in [out_dir / SCORES, *sorted(out_dir.glob("scores.rank*.jsonl"))]:
        for entry in read_records(path):
            if "image" in entry and "score" in entry:
                done[entry.pop("image")] = entry
    return done


def _decode(batch: list[tuple[str, ImageRef, int]], max_pixels: int | None, preparer: Any) -> list[tuple]:
    """In a DataLoader worker: ``(key, image or None, line, error)`` per item, the images decoded and then run through
    the reward's image processor (``preparer``) in one call, its pixel values one tensor that each image views."""
    out: list[tuple] = []
    for key, ref, line in batch:
        try:
            out.append((key, load_image(ref, max_pixels=max_pixels), line, None))
        except BAD_IMAGE as err:
            out.append((key, None, line, str(err)))
    good = [i for i, item in enumerate(out) if item[1] is not None]
    if preparer is None or not good:
        return out
    try:
        prepared = preparer.many([[out[i][1]] for i in good])
    except BAD_IMAGE:  # one image refused: prepare one by one to name it
        prepared = None
    for k, i in enumerate(good):
        key, img, line, _ = out[i]
        try:
            out[i] = (key, preparer([img]) if prepared is None else prepared[k], line, None)
        except BAD_IMAGE as error:
            out[i] = (key, None, line, f"the image processor refused it: {error}")
    return out


def score_images(
    reward: Reward,
    items: Sequence[tuple[str, ImageRef, int]],
    *,
    batch_size: int,
    num_workers: int = 0,
    max_pixels: int | None = None,
    skip_bad: bool = False,
    source: str = "manifest",
    out_dir: str | Path | None = None,
    resume: bool = False,
    distributed: bool = False,
    prepare_in_workers: bool = True,
) -> ScoredImages:
    """Score each ``(key, image, line)`` once (keys distinct); ``distributed``: split across the processes of
    ``accelerate launch`` and gathered (every process calls); ``prepare_in_workers``: the image processor in the
    DataLoader workers."""
    from accelerate.utils import gather_object

    state = process_state() if distributed else None
    n_proc, rank = (state.num_processes, state.process_index) if state else (1, 0)
    out = Path(out_dir) if out_dir is not None else None
    done = read_partial(out) if out is not None and resume else {}
    if state:
        state.wait_for_everyone()  # everyone has read the old files before anyone writes
    if out is not None and rank == 0 and not resume:
        for stale in [out / SCORES, *out.glob("scores.rank*.jsonl")]:
            stale.unlink(missing_ok=True)
    if state:
        state.wait_for_everyone()
    todo = [it for it in items if it[0] not in done]
    if done:
        already = len(items) - len(todo)
        logger.info("resume: %d of %d images already scored in %s; scoring %d", already, len(items), out, len(todo))
    shard = todo
    if state is not None and n_proc > 1:
        with state.split_between_processes(todo) as mine:  # contiguous shards, the first ones one item longer
            shard = list(mine)
    offer = getattr(reward, "image_preparer", None)
    preparer = offer() if prepare_in_workers and callable(offer) else None
    collate = functools.partial(_decode, max_pixels=max_pixels, preparer=preparer)
    loader = torch.utils.data.DataLoader(shard, batch_size=batch_size, num_workers=num_workers, collate_fn=collate)
    log = None if out is None else out / (SCORES if rank == 0 else f"scores.rank{rank}.jsonl")
    mine, skipped = _score_shard(reward, loader, len(shard), skip_bad, source, log, rank == 0) if shard else ({}, [])
    gathered = gather_object([(rank, mine, skipped)]) if state and n_proc > 1 else [(rank, mine, skipped)]
    scores, all_skipped, counts = dict(done), [], [0] * n_proc
    for r, part, skip in sorted(gathered, key=lambda g: g[0]):
        scores.update(part)
        all_skipped.extend(skip)
        counts[r] = len(part)
    meta = {"processes": n_proc, "images_per_process": counts, "resumed": len(items) - len(todo)}
    return ScoredImages(scores, sorted(all_skipped, key=lambda s: s.line), meta)


def _score_shard(
    reward: Reward, loader: Any, n: int, skip_bad: bool, source: str, log_path: Path | None, main: bool
) -> tuple[dict[str, dict[str, float]], list[SkippedRow]]:
    """Every batch of ``loader`` scored; a bad image fails (or is skipped), a non-finite score is counted, never
    written; each batch's scores appended to ``log_path``."""
    scores: dict[str, dict[str, float]] = {}
    skipped: list[SkippedRow] = []
    batches = iter(loader)
    with tqdm(total=n, desc="scoring", unit="img", disable=not main) as bar:  # as best-of-n
        while True:
            batch = next(batches, None)
            if batch is None:
                break
            for _, _, line, err in (item for item in batch if item[1] is None):
                if not skip_bad:
                    raise ImageError(f"{source}:{line}: {err} (skip_bad=true skips such rows)")
                logger.warning("skipping line %d: %s", line, err)
                skipped.append(SkippedRow(line, str(err)))
            good = [item for item in batch if item[1] is not None]
            result = reward.score([img for _, img, _, _ in good]) if good else None
            rows = []
            for i, (key, _, line, _) in enumerate(good):
                entry = {"score": float(result.scores[i])} | {d: float(v[i]) for d, v in result.dimensions.items()}
                bad = [k for k, v in entry.items() if not math.isfinite(v)]
                if bad:  # a failed score is counted, never written or averaged as NaN
                    logger.warning("line %d: the reward gave %s for %s; not scored", line, bad, key)
                    skipped.append(SkippedRow(line, f"the reward gave a non-finite {', '.join(bad)}"))
                    continue
                scores[key] = entry
                rows.append({"image": key, **entry})
            if good and log_path is not None:  # a crash loses at most this batch
                append_jsonl(log_path, rows)
            bar.update(len(batch))
    return scores, skipped
