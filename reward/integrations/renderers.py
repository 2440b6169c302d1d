"""Ready ``render(prompts, completions, **columns)`` functions for :func:`reward.trl_reward_func`.

- :func:`images_from_column`: the images are already in a dataset column (a VLM policy that describes or critiques
  them; trl passes the column's value of each completion's row).
- :func:`render_from_pipeline`: a diffusers text-to-image or inpainting pipeline draws each completion (the
  completion is the prompt; for inpainting the task image and mask come from dataset columns). One seed per prompt
  and step, shared by the completions of one prompt, so a group's images differ only by their completions
  (common random numbers).

Example:
    >>> render = images_from_column("image")
    >>> render(["p"], ["c"], image=["IMG"])
    ['IMG']
"""

from __future__ import annotations

import contextlib
import logging
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["images_from_column", "render_from_pipeline"]

TRL_EXTRAS = ("trainer_state", "log_extra", "log_metric", "environments", "completion_ids")  # not dataset columns


def _column(columns: dict[str, Any], name: str, n: int) -> list[Any]:
    if name not in columns:
        raise KeyError(
            f"no dataset column {name!r} reached the reward function; its columns are "
            f"{sorted(set(columns) - set(TRL_EXTRAS))} (trl passes the dataset's columns when "
            "GRPOConfig.remove_unused_columns is False, its default)"
        )
    values = list(columns[name])
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
    return values


def images_from_column(column: str = "image", index: int = 0) -> Callable[..., list[Any]]:
    """A render that returns each completion's image from the dataset column ``column``; a list of images (trl's
    ``images`` column) gives its image at ``index``. ``None`` entries, and lists without an image at ``index`` (an
    empty list), are ``None`` (no score, counted).

    >>> images_from_column("images")(["p", "q"], ["c", "d"], images=[[], ["IMG"]])
    [None, 'IMG']
    """

    def render(prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> list[Any]:
        values = _column(columns, column, len(completions))
        return [
            (v[index] if -len(v) <= index < len(v) else None) if isinstance(v, list | tuple) else v for v in values
        ]

    render.__name__ = f"images_from_column({column!r})"
    return render


@contextlib.contextmanager
def _bar_off(pipe: Any, *, keep: bool) -> Iterator[None]:
    """The diffusers pipeline's progress bar off for the calls inside (``keep``: left as it is); its own setting
    (``set_progress_bar_config``) back afterwards."""
    configure = getattr(pipe, "set_progress_bar_config", None)
    if keep or configure is None:
        yield
        return
    before = dict(getattr(pipe, "_progress_bar_config", None) or {})
    configure(**{**before, "disable": True})
    try:
        yield
    finally:
        configure(**before)


def render_from_pipeline(
    pipe: Any,
    *,
    image_column: str | None = None,
    mask_column: str | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    progress_bar: bool = False,
    **pipe_kwargs: Any,
) -> Callable[..., list[Any]]:
    """A render that draws each completion with a diffusers pipeline: ``pipe(prompt=completions, ...).images``.

    Inpainting: ``image_column`` and ``mask_column`` name the dataset columns passed as ``image`` and ``mask_image``.
    ``pipe_kwargs`` go to every call (``num_inference_steps``, ``height``, ``guidance_scale``...). Completions are
    drawn ``batch_size`` at a time (default: all at once), each with a generator seeded by ``seed``, its prompt's text
    and trl's step. A batch the pipeline fails on is retried one by one; a completion that still fails is ``None``.
    The pipeline's own progress bar is off while it draws (trl's bar is the one to watch; ``progress_bar=True``
    keeps it); the pipeline's setting is restored after each call.
    """
    import torch

    def seed_of(prompt: str, step: int) -> int:
        return (seed + zlib.crc32(prompt.encode()) + 1_000_003 * step) % 2**63

    def call(prompts: list[str], seeds: list[int], extra: dict[str, list[Any]]) -> list[Any]:
        generators = [torch.Generator("cpu").manual_seed(s) for s in seeds]
        with _bar_off(pipe, keep=progress_bar):
            return list(pipe(prompt=prompts, generator=generators, **extra, **pipe_kwargs).images)

    def render(prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> list[Any]:
        n = len(completions)
        state = columns.get("trainer_state")
        step = int(getattr(state, "global_step", 0) or 0)
        seeds = [seed_of(p, step) for p in prompts]
        extra_columns = {}
        if image_column:
            extra_columns["image"] = _column(columns, image_column, n)
        if mask_column:
            extra_columns["mask_image"] = _column(columns, mask_column, n)
        out: list[Any] = []
        size = batch_size or max(n, 1)
        for start in range(0, n, size):
            part = slice(start, start + size)
            texts, part_seeds = list(completions[part]), seeds[part]
            extra = {k: v[part] for k, v in extra_columns.items()}
            try:
                out.extend(call(texts, part_seeds, extra))
            except Exception as err:  # noqa: BLE001 - retried one by one, failures become None
                logger.warning("the pipeline failed on a batch of %d (%s); drawing one by one", len(texts), err)
                for j, text in enumerate(texts):
                    try:
                        out.extend(call([text], [part_seeds[j]], {k: [v[j]] for k, v in extra.items()}))
                    except Exception as one:  # noqa: BLE001 - this completion gets no image, hence no score
                        logger.warning("the pipeline failed on %r: %s", text[:80], one)
                        out.append(None)
        return out

    return render
