"""Quality levels of a procedural scene from the words of a prompt: the known law behind the ``procedural`` generator.

Every dimension starts at :data:`BASE_LEVEL`; each word of the prompt that starts with one of the dimension's
"better" stems raises it by one, each word that starts with a "worse" stem lowers it by one, clipped to 1..5.
So prompt choices change image quality in a known way: lighting words brighten the scene, clutter words crowd it.

>>> levels_from_prompt("A bright, tidy room with calm muted colours, crisp and sharp")
{'layout': 4, 'harmony': 5, 'lighting': 4, 'distortion': 5}
>>> levels_from_prompt("a dark cluttered messy room")
{'layout': 1, 'harmony': 3, 'lighting': 2, 'distortion': 3}
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from training.procedural.scenes import DIMENSIONS

BASE_LEVEL = 3

# dimension -> (stems that raise its level, stems that lower it); a word counts when it starts with a stem
PROMPT_WORDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "layout": (
        ("tidy", "minimal", "balanced", "spacious", "symmetr", "orderly", "uncluttered", "airy"),
        ("clutter", "messy", "crowded", "chaotic", "cramped", "piles", "jumbled"),
    ),
    "harmony": (
        ("calm", "muted", "neutral", "harmon", "matching", "cohesive", "soft", "pastel"),
        ("clash", "garish", "neon", "gaudy", "lurid", "loud"),
    ),
    "lighting": (
        ("bright", "light", "sunlit", "sunny", "warm", "glow", "daylight", "luminous", "lamp"),
        ("dark", "dimly", "dimmed", "gloom", "night", "shadowy", "murky"),
    ),
    "distortion": (
        ("sharp", "crisp", "detailed", "realistic", "clean", "photoreal", "pristine"),
        ("blur", "noisy", "warped", "grainy", "distort", "smudged", "glitch"),
    ),
}

_WORD = re.compile(r"[a-z]+")


def levels_from_prompt(
    prompt: str, words: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = PROMPT_WORDS
) -> dict[str, int]:
    """Levels 1..5 for the four dimensions from the prompt's words (see the module docstring)."""
    tokens = _WORD.findall(prompt.lower())
    levels = {}
    for dim in DIMENSIONS:
        better, worse = words.get(dim, ((), ()))
        up = sum(1 for t in tokens if t.startswith(better)) if better else 0
        down = sum(1 for t in tokens if t.startswith(worse)) if worse else 0
        levels[dim] = min(5, max(1, BASE_LEVEL + up - down))
    return levels
