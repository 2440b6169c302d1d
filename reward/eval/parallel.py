"""Score the distinct images of a manifest once each: data-parallel, decoded by DataLoader workers, written as it goes.

Under ``accelerate launch --num_processes N reward/evaluate.py ...`` the images still to score are split into N
contiguous shards; each process scores its shard and appends each batch's scores to its own file in the output
folder (process 0: ``scores.jsonl``, process r: ``scores.rank{r}.jsonl``), so a crash loses at most one batch.
The scores are gathered to every process at the end. ``resume=True`` reads those files first and scores only the
images that are missing. Image decoding runs in ``num_workers`` DataLoader workers, so the model does not wait on
PIL; so does the image processor when the reward offers one (``reward.image_preparer()``, see
:class:`reward.vlm.inputs.ImagePreparer`): the model then receives ready tensors. With a profile active
(:func:`reward.vlm.profile.profile_scoring`) the wait for the next batch is timed as "data loading".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from tqdm.auto import tqdm

from reward.data import ImageError, ImageRef, SkippedRow, load_image
from reward.data.files import append_jsonl, read_records
from reward.rewards.base import Reward
from reward.vlm.profile import section

logger = logging.getLogger(__name__)

SCORES = "scores.jsonl"


@dataclass
class ScoredImages:
    """``scores[key] = {"score": s, dim: s_dim, ...}`` for every image scored (now or before a resume)."""

    scores: dict[str, dict[str, float]]
    skipped: list[SkippedRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # processes, images_per_process, resumed


def process_state() -> Any:
    """accelerate's process state; on a machine without a GPU, processes started by ``accelerate launch
    --multi_gpu`` (torchrun) join a CPU (gloo) group instead of each running alone."""
    import os

    from accelerate import PartialState

    cpu = os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true") or not torch.cuda.is_available()
    return PartialState(cpu=cpu)


def part_file(out_dir: Path, rank: int) -> Path:
    return out_dir / (SCORES if rank == 0 else f"scores.rank{rank}.jsonl")


def read_partial(out_dir: Path) -> dict[str, dict[str, float]]:
    """Scores already written in ``out_dir`` (``scores.jsonl`` and every process's file); a torn last line of a
    crashed run is ignored."""
    done: dict[str, dict[str, float]] = {}
    for path in [out_dir / SCORES, *sorted(out_dir.glob("scores.rank*.jsonl"))]:
        for entry in read_records(path):
            if "image" in entry and "score" in entry:
                done[entry.pop("image")] = entry
    return done


class _Decode(torch.utils.data.Dataset):
    """``(key, image or None, line, error)`` per distinct image; runs in the DataLoader's workers."""

    def __init__(self, items: Sequence[tuple[str, ImageRef, int]], max_pixels: int | None) -> None:
        self.items, self.max_pixels = list(items), max_pixels

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[str, Image.Image | None, int, str | None]:
        key, ref, line = self.items[i]
        try:
            img = load_image(ref, max_pixels=self.max_pixels)
        except (ImageError, OSError, ValueError) as err:
            return key, None, line, str(err)
        return key, img, line, None


class _Collate:
    """A batch of decoded items, with their images run through the reward's image processor (``preparer``) in
    the same worker: one processor call per batch, its pixel values one tensor that each image views."""

    def __init__(self, preparer: Any = None) -> None:
        self.preparer = preparer

    def __call__(self, batch: list[tuple[str, Any, int, str | None]]) -> list[tuple[str, Any, int, str | None]]:
        if self.preparer is None:
            return batch
        good = [i for i, item in enumerate(batch) if item[1] is not None]
        try:
            prepared = self.preparer.many([[batch[i][1]] for i in good])
        except (ImageError, OSError, ValueError):  # one image refused: prepare one by one to name it
            return [self._one(item) for item in batch]
        out = list(batch)
        for i, p in zip(good, prepared, strict=True):
            key, _, line, _ = batch[i]
            out[i] = (key, p, line, None)
        return out

    def _one(self, item: tuple[str, Any, int, str | None]) -> tuple[str, Any, int, str | None]:
        key, img, line, err = item
        if img is None:
            return item
        try:
            return key, self.preparer([img]), line, None
        except (ImageError, OSError, ValueError) as error:
            return key, None, line, f"the image processor refused it: {error}"


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
    """Score each ``(key, image, line)`` once (keys distinct); see the module docstring.

    ``distributed``: split across the processes of ``accelerate launch`` and gather (every process must call).
    ``prepare_in_workers``: run the reward's image processor in the DataLoader workers when it offers one.
    """
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
        logger.info(
            "resume: %d of %d images already scored in %s; scoring %d",
            len(items) - len(todo),
            len(items),
            out,
            len(todo),
        )
    shard = todo
    if state is not None and n_proc > 1:
        with state.split_between_processes(todo) as mine:  # contiguous shards, the first ones one item longer
            shard = list(mine)
    offer = getattr(reward, "image_preparer", None)
    preparer = offer() if prepare_in_workers and callable(offer) else None
    mine, skipped = _score_shard(
        reward,
        shard,
        batch_size,
        num_workers,
        _Decode(shard, max_pixels),
        _Collate(preparer),
        skip_bad,
        source,
        part_file(out, rank) if out is not None else None,
        rank == 0,
    )
    if state and n_proc > 1:
        gathered = gather_object([(rank, mine, skipped)])
    else:
        gathered = [(rank, mine, skipped)]
    scores = dict(done)
    all_skipped: list[SkippedRow] = []
    counts = [0] * n_proc
    for r, part, skip in sorted(gathered, key=lambda g: g[0]):
        scores.update(part)
        all_skipped.extend(skip)
        counts[r] = len(part)
    meta = {"processes": n_proc, "images_per_process": counts, "resumed": len(items) - len(todo)}
    return ScoredImages(scores, sorted(all_skipped, key=lambda s: s.line), meta)


def _score_shard(
    reward: Reward,
    shard: list[tuple[str, ImageRef, int]],
    batch_size: int,
    num_workers: int,
    dataset: _Decode,
    collate: _Collate,
    skip_bad: bool,
    source: str,
    log_path: Path | None,
    main: bool,
) -> tuple[dict[str, dict[str, float]], list[SkippedRow]]:
    scores: dict[str, dict[str, float]] = {}
    skipped: list[SkippedRow] = []
    if not shard:
        return scores, skipped
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, collate_fn=collate
    )
    batches = iter(loader)
    with tqdm(total=len(shard), desc="scoring", unit="img", disable=not main) as bar:  # as best-of-n
        while True:
            with section("data loading"):
                batch = next(batches, None)
            if batch is None:
                break
            keys, images, lines = [], [], []
            for key, img, line, err in batch:
                if img is None:
                    if not skip_bad:
                        raise ImageError(f"{source}:{line}: {err} (skip_bad=true skips such rows)")
                    logger.warning("skipping line %d: %s", line, err)
                    skipped.append(SkippedRow(line, str(err)))
                    continue
                keys.append(key)
                images.append(img)
                lines.append(line)
            if images:
                result = reward.score(images)
                rows = []
                for i, key in enumerate(keys):
                    entry = {"score": float(result.scores[i])}
                    entry.update({d: float(v[i]) for d, v in result.dimensions.items()})
                    bad = [k for k, v in entry.items() if not math.isfinite(v)]
                    if bad:  # a failed score is counted, never written or averaged as NaN
                        logger.warning("line %d: the reward gave %s for %s; not scored", lines[i], bad, key)
                        skipped.append(SkippedRow(lines[i], f"the reward gave a non-finite {', '.join(bad)}"))
                        continue
                    scores[key] = entry
                    rows.append({"image": key, **entry})
                if log_path is not None:  # a crash loses at most this batch
                    append_jsonl(log_path, rows)
            bar.update(len(batch))
    return scores, skipped
