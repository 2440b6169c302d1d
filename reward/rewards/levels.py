"""The answer words the scoring rules read (:mod:`reward.rewards.scoring`), without torch: settings name them as
defaults, and settings are read before any heavy import. Also SA-IQA's definitions of its four dimensions, the text
of its prompt types 3 and 4 (App. B.1, ``training/prompts.py``) and of its App. B.2 prompts (``reward=chat-judge``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

LEVEL_WORDS: tuple[str, ...] = ("excellent", "good", "fair", "poor", "bad")  # rating words, best first
LEVEL_VALUES: tuple[float, ...] = (5.0, 4.0, 3.0, 2.0, 1.0)  # score of each rating word
QBENCH_POSITIVE_WORDS: tuple[str, ...] = ("good", "high", "fine")  # Q-Bench+ synonym set P
QBENCH_NEGATIVE_WORDS: tuple[str, ...] = ("poor", "low", "bad")  # Q-Bench+ synonym set N

GENERAL_DEFINITIONS: Mapping[str, str] = MappingProxyType(  # type 3
    {
        "layout": "The layout dimension describes the spatial distribution and positional relationships of major "
        "elements within a composition. Assess how the layout contributes to the overall organization, structure, "
        "and balance of the image.",
        "harmony": "The harmony dimension emphasizes stylistic consistency, color matching, and overall visual "
        "coordination. Consider how well the elements come together to create a unified and pleasing appearance.",
        "lighting": "The lighting dimension focuses on the interaction between light and shadow, including the "
        "quality of lighting effects and the sense of three-dimensionality. Assess how lighting enhances or affects "
        "the depth and overall atmosphere of an image.",
        "distortion": "The distortion dimension describes the degree of distortion in shapes or the fidelity of "
        "background details. Assess how the distortion impacts the perceived realism and visual quality of the "
        "image.",
    }
)

EXPERT_DEFINITIONS: Mapping[str, str] = MappingProxyType(  # type 4
    {
        "layout": "The layout dimension describes the spatial distribution, positional relationships, and quantity "
        "of major elements within the space. Consider how the layout supports the overall visual order, maintains "
        "balance, and enhances the functional aesthetics of the image.",
        "harmony": "The harmony dimension focuses on stylistic consistency, color coordination, and overall visual "
        "cohesion. Examine how well the combination of elements creates a balanced and visually pleasant "
        "composition, avoiding clashes or imbalances in style and color.",
        "lighting": "The lighting dimension examines the quality of light effects, shadow interactions, and the "
        "realism of light sources. Assess how well lighting contributes to the overall depth, mood, and "
        "authenticity of the image, emphasizing both natural and artificial lighting scenarios.",
        "distortion": "The distortion dimension assesses whether soft furnishings (e.g., cabinets, carpets) or fixed "
        "structures (e.g., floors, walls) appear deformed or misaligned. Additionally, evaluate the realism and "
        "material accuracy of textures, and judge whether any distortion negatively impacts the overall aesthetic "
        "quality of the image.",
    }
)


def dimension_words(key: str) -> str:
    """A dimension's key as the words a prompt or a message to a model says (``colour_cast`` -> ``colour cast``); the
    key itself stays in files (manifests, ``sa_iqa.json``, scores, protocols).

    >>> dimension_words("colour_cast"), dimension_words("lighting"), dimension_words("tactile satisfaction")
    ('colour cast', 'lighting', 'tactile satisfaction')
    """
    return " ".join(str(key).replace("_", " ").split())
