"""Seeded, leak-free splits for datasets without an official one: drawn over groups (the reference image of
synthetic distortions, AGIQA-3K's prompt, else the image), sorted, shuffled with ``numpy.random.default_rng(seed)``
and cut 70/10/20, so the same seed gives the same split in every command and no scene is on both sides.

Example:
    >>> split = seeded_split([f"I{i:02d}" for i in range(1, 82)])  # KADID-10k's 81 references
    >>> [sum(v == part for v in split.values()) for part in ("train", "val", "test")]
    [57, 8, 16]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["DEFAULT_SEED", "FRACTIONS", "PARTS", "part_sizes", "seeded_split"]

DEFAULT_SEED = 0
PARTS = ("train", "val", "test")
FRACTIONS = (0.7, 0.1, 0.2)


def part_sizes(n: int, fractions: Sequence[float] = FRACTIONS) -> list[int]:
    """How many of ``n`` groups each part gets: rounded shares, every positive share at least one when ``n``
    allows, the first part taking the rest.

    >>> part_sizes(5), part_sizes(2), part_sizes(1), part_sizes(20, (0.95, 0.05, 0.0))
    ([3, 1, 1], [1, 0, 1], [1, 0, 0], [19, 1, 0])
    """
    if n <= 0:
        return [0] * len(fractions)
    sizes = [0] + [math.floor(f * n + 0.5) for f in fractions[1:]]
    positive = [i for i, f in enumerate(fractions) if f > 0]
    for i in reversed(positive[1:]):  # the test part first, then val, each at least one group
        if sizes[i] == 0 and n - sum(sizes) > 1:
            sizes[i] = 1
    while sum(sizes) >= n and any(sizes[1:]):  # the first part keeps at least one group
        j = max(range(1, len(sizes)), key=lambda k: sizes[k])
        sizes[j] -= 1
    sizes[0] = n - sum(sizes)
    return sizes


def seeded_split(
    groups: Iterable[str],
    seed: int = DEFAULT_SEED,
    fractions: Sequence[float] = FRACTIONS,
    parts: Sequence[str] = PARTS,
) -> dict[str, str]:
    """Each distinct group's part: the sorted groups shuffled by ``seed`` and cut by ``fractions``."""
    distinct = sorted(set(groups))
    order = np.random.default_rng(seed).permutation(len(distinct))
    out: dict[str, str] = {}
    start = 0
    for part, size in zip(parts, part_sizes(len(distinct), fractions), strict=True):
        for i in order[start : start + size]:
            out[distinct[int(i)]] = part
        start += size
    return out
