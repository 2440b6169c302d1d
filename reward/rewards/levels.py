"""The answer words the scoring rules read (:mod:`reward.rewards.scoring`), without torch: settings name them as
defaults, and settings are read before any heavy import."""

from __future__ import annotations

LEVEL_WORDS: tuple[str, ...] = ("excellent", "good", "fair", "poor", "bad")  # rating words, best first
LEVEL_VALUES: tuple[float, ...] = (5.0, 4.0, 3.0, 2.0, 1.0)  # score of each rating word
QBENCH_POSITIVE_WORDS: tuple[str, ...] = ("good", "high", "fine")  # Q-Bench+ synonym set P
QBENCH_NEGATIVE_WORDS: tuple[str, ...] = ("poor", "low", "bad")  # Q-Bench+ synonym set N
