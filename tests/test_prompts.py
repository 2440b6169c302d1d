"""SA-IQA prompt types 1-4 and the response template, verbatim from the paper's App. B.1 (``wording="paper"``) and the
authors' released tools/prompt_configs.py (``wording="release"``, the default: the tag in types 2-4)."""

from __future__ import annotations

import pytest

from training.prompts import EXPERT_DEFINITIONS, GENERAL_DEFINITIONS, build_prompt, response_prefix

DIMENSIONS = ("layout", "harmony", "lighting", "distortion")


def test_type_4_is_the_default_and_matches_the_paper_word_for_word():
    assert build_prompt("layout", wording="paper") == (
        "Please evaluate the spatial aesthetic layout quality level of this image. The layout dimension describes "
        "the spatial distribution, positional relationships, and quantity of major elements within the space. "
        "Consider how the layout supports the overall visual order, maintains balance, and enhances the functional "
        "aesthetics of the image."
    )


@pytest.mark.parametrize(
    ("dimension", "prompt_type", "phrase"),
    [
        ("harmony", 4, "avoiding clashes or imbalances in style and color."),
        ("lighting", 4, "emphasizing both natural and artificial lighting scenarios."),
        ("distortion", 4, "soft furnishings (e.g., cabinets, carpets) or fixed structures (e.g., floors, walls)"),
        ("layout", 3, "contributes to the overall organization, structure, and balance of the image."),
        ("harmony", 3, "create a unified and pleasing appearance."),
        ("lighting", 3, "the sense of three-dimensionality."),
        ("distortion", 3, "the fidelity of background details."),
    ],
)
def test_detailed_types_carry_the_papers_definitions(dimension, prompt_type, phrase):
    prompt = build_prompt(dimension, prompt_type, wording="paper")
    assert build_prompt(dimension, prompt_type) == f"<{dimension}>{prompt}"  # the release tags types 3-4 too
    assert prompt.startswith(f"Please evaluate the spatial aesthetic {dimension} quality level of this image. ")
    assert prompt.endswith(".") and phrase in prompt


def test_concise_types_and_the_dimension_tag():
    assert build_prompt("lighting", 1) == "Please evaluate the spatial aesthetic lighting quality level of this image."
    assert build_prompt("lighting", 2) == (
        "<lighting>Please evaluate the spatial aesthetic lighting quality level of this image."
    )
    assert build_prompt("lighting", 1, wording="release") == build_prompt("lighting", 1, wording="paper")
    assert build_prompt("lighting", 2, wording="paper") == build_prompt("lighting", 2)
    with pytest.raises(ValueError, match="wording must be one of"):
        build_prompt("lighting", 4, wording="printed")
    assert build_prompt("any new dimension", 1).startswith("Please evaluate the spatial aesthetic any new dimension")


def test_response_prefix_stops_before_the_space_of_the_rating_word():
    prefix = response_prefix("distortion")
    assert prefix == "The spatial aesthetic distortion quality level of this image is"


def test_definitions_are_configurable_for_any_set_of_dimensions():
    defs = {"clutter": "The clutter dimension counts loose objects."}
    assert build_prompt("clutter", 4, defs).endswith(
        "quality level of this image. The clutter dimension counts loose objects."
    )
    assert set(GENERAL_DEFINITIONS) == set(EXPERT_DEFINITIONS) == set(DIMENSIONS)
    with pytest.raises(ValueError, match=r"no definition for dimension 'clutter'.*known: \['distortion'"):
        build_prompt("clutter", 3)


@pytest.mark.parametrize("bad", [0, 5, "4"])
def test_unknown_prompt_types_are_rejected(bad):
    with pytest.raises(ValueError, match="prompt_type"):
        build_prompt("layout", bad)


@pytest.mark.parametrize("bad", ["", "a\nb", "<x>", "{dimension}"])
def test_malformed_dimension_names_are_rejected(bad):
    with pytest.raises(ValueError, match="dimension"):
        build_prompt(bad, 1)
