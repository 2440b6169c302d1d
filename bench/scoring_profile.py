"""Where a scoring loop's time goes, part by part (PARTS), on one timeline: :func:`profile_scoring` times the
scoring code's host steps by wrapping the functions that do them where they are called (the library carries no
marker), hooks the model's parts, synchronises a GPU at every boundary, and what falls between parts is "other",
so the rows sum to the total. Bench and tests only (``python bench/NAME.py`` imports it by its bare name).

Example:
    >>> import time
    >>> prof = ScoringProfile()
    >>> with prof.active():
    ...     with section("tokenizer"):
    ...         time.sleep(0.01)
    >>> [name for name, _ in prof.parts()], prof.total >= prof.seconds["tokenizer"] >= 0.01
    (['tokenizer', 'other'], True)
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import torch

import reward.eval.parallel
import reward.vlm.inputs
import reward.vlm.model
import reward.vlm.prefix

# the parts of a scoring loop, in the order of one batch
PARTS = (
    "data loading",
    "image processor",
    "tokenizer",
    "transfer",
    "embeddings + rope index",
    "vision tower",
    "language model",
    "answer head",
)
_ACTIVE: list[ScoringProfile] = []


class ScoringProfile:
    """Seconds per part of the scoring loop on one timeline (see the module docstring)."""

    def __init__(self, sync: bool = False) -> None:
        self.sync = sync  # synchronize the GPU at every boundary (set by profile_scoring on CUDA)
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)  # e.g. tokens, padding tokens, batches
        self.total = 0.0
        self._current: str | None = None
        self._since = 0.0

    def _now(self) -> float:
        if self.sync and torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def switch(self, part: str | None) -> None:
        """End the running part (if any) and start ``part`` (``None``: none runs until the next switch)."""
        now = self._now()
        if self._current is not None:
            self.seconds[self._current] += now - self._since
        self._current, self._since = part, now

    def count(self, name: str, n: int) -> None:
        self.counts[name] += int(n)

    @contextmanager
    def active(self) -> Iterator[ScoringProfile]:
        """Make this the profile that :func:`section` marks; adds the block's wall time to ``total``."""
        _ACTIVE.append(self)
        start = self._now()
        try:
            yield self
        finally:
            self.switch(None)
            self.total += self._now() - start
            _ACTIVE.remove(self)

    def parts(self) -> list[tuple[str, float]]:
        """``(part, seconds)`` for every part seen, in loop order, then "other" (the total minus the parts)."""
        known = [(p, self.seconds[p]) for p in PARTS if p in self.seconds]
        extra = [(p, s) for p, s in self.seconds.items() if p not in PARTS]
        rows = known + extra
        return [*rows, ("other", max(self.total - sum(s for _, s in rows), 0.0))]

    def padding_share(self) -> float | None:
        """Padding tokens / all tokens of the batches the model read (None before any)."""
        total = self.counts.get("tokens", 0)
        return self.counts.get("padding tokens", 0) / total if total else None

    def table(self, title: str = "scoring profile") -> str:
        """A fixed-width table: part, seconds, share of the total."""
        lines = [f"{title:<26}{'seconds':>10}{'share':>9}"]
        for name, s in self.parts():
            lines.append(f"{name:<26}{s:>10.4f}{s / self.total if self.total else 0:>9.1%}")
        lines.append(f"{'total (wall)':<26}{self.total:>10.4f}{1:>9.0%}")
        pad = self.padding_share()
        if pad is not None:
            lines.append(f"{'padding share of tokens':<26}{'':>10}{pad:>9.1%}")
        return "\n".join(lines)


@contextmanager
def section(part: str) -> Iterator[ScoringProfile | None]:
    """Time the block as ``part`` of the active profile and yield it (``None`` when none is active: nothing timed); a
    section within another is carved out of it (the outer part resumes after it)."""
    prof = _ACTIVE[-1] if _ACTIVE else None
    if prof is None:
        yield None
        return
    outer = prof._current
    prof.switch(part)
    try:
        yield prof
    finally:
        prof.switch(outer)


def _model_parts(model: Any) -> list[tuple[Any, str]]:
    """``(module, part)`` for the vision tower and the language model of a Qwen-VL-like model."""
    inner = getattr(model, "model", None)
    found = []
    for attr, part in (("visual", "vision tower"), ("language_model", "language model")):
        mod = getattr(inner, attr, None) if inner is not None else None
        if isinstance(mod, torch.nn.Module):
            found.append((mod, part))
    return found


def _timed(part: str, function: Callable[..., Any], count: bool = False) -> Callable[..., Any]:
    """``function`` timed as ``part`` of the active profile (``count``: the tokens and padding tokens of the batch it
    returns, from its attention mask)."""

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with section(part) as prof:
            out = function(*args, **kwargs)
            if count and prof is not None:
                mask = out["attention_mask"]
                prof.count("tokens", mask.numel())
                prof.count("padding tokens", mask.numel() - int(mask.sum()))
            return out

    return timed


def _timed_loading(score_shard: Callable[..., Any]) -> Callable[..., Any]:
    """``reward.eval.parallel._score_shard`` with the wait for each batch of its loader timed as "data loading"."""

    class Timed:
        def __init__(self, loader: Iterable[Any]) -> None:
            self.loader = loader

        def __iter__(self) -> Iterator[Any]:
            batches = iter(self.loader)
            while True:
                with section("data loading"):
                    batch = next(batches, None)
                if batch is None:
                    return
                yield batch

    @functools.wraps(score_shard)
    def shard(reward: Any, loader: Any, *args: Any, **kwargs: Any) -> Any:
        return score_shard(reward, Timed(loader), *args, **kwargs)

    return shard


# (module, function, part) of the scoring loop's host steps, wrapped where the loop calls them
STEPS = (
    (reward.vlm.inputs.ImagePreparer, "many", "image processor"),
    (reward.vlm.model, "to_device", "transfer"),
    (reward.vlm.model, "gather_candidates", "answer head"),
    (reward.vlm.prefix, "token_ids", "tokenizer"),
    (reward.vlm.prefix, "pad", "tokenizer"),
    (reward.vlm.prefix, "image_inputs", "tokenizer"),
    (reward.vlm.prefix, "_prefix_positions", "tokenizer"),
    (reward.vlm.prefix, "repeat_cache", "tokenizer"),
    (reward.vlm.prefix, "to_device", "transfer"),
)


@contextmanager
def profile_scoring(model: Any, device: torch.device | None = None) -> Iterator[ScoringProfile]:
    """Profile everything scored within the block (see the module docstring); yields the :class:`ScoringProfile`.

    The model's forward is split with hooks: its start to the vision tower and the vision tower to the language
    model are "embeddings + rope index", after the language model comes the "answer head" (the output projection).
    """
    dev = device or next(model.parameters()).device
    prof = ScoringProfile(sync=dev.type == "cuda")
    handles = []

    def enter(part: str):
        def hook(*_: Any, **__: Any) -> None:
            prof.switch(part)

        return hook

    handles.append(model.register_forward_pre_hook(enter("embeddings + rope index")))
    for mod, part in _model_parts(model):
        handles.append(mod.register_forward_pre_hook(enter(part)))
        after = "answer head" if part == "language model" else "embeddings + rope index"
        handles.append(mod.register_forward_hook(enter(after)))
    handles.append(model.register_forward_hook(enter("answer head")))
    with ExitStack() as patches:
        for owner, name, part in STEPS:
            patches.enter_context(mock.patch.object(owner, name, _timed(part, getattr(owner, name))))
        encode = reward.vlm.model.encode
        patches.enter_context(mock.patch.object(reward.vlm.model, "encode", _timed("tokenizer", encode, count=True)))
        shard = reward.eval.parallel._score_shard
        patches.enter_context(mock.patch.object(reward.eval.parallel, "_score_shard", _timed_loading(shard)))
        try:
            with prof.active():
                yield prof
        finally:
            for h in handles:
                h.remove()
