"""rl/generators.py: the procedural law, per-candidate seeds, masks, truncation, per-item failures, diffusers."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from rl.generators import build_generator, inpaint_each, prepare_call
from rl.prompt_levels import levels_from_prompt
from training.procedural.scenes import proxy_scores


def _task(size: int = 64, box: tuple[int, int, int, int] = (8, 8, 56, 56)) -> tuple[Image.Image, Image.Image]:
    rng = np.random.default_rng(3)
    image = Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    mask = Image.new("L", (size, size), 0)
    mask.paste(255, box)
    return image, mask


def _diff(a: Image.Image, b: Image.Image) -> float:
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).max())


def test_prompt_words_move_levels_by_one_per_word_and_clip():
    assert levels_from_prompt("") == {"layout": 3, "harmony": 3, "lighting": 3, "distortion": 3}
    assert levels_from_prompt("Bright sunlit daylight, glowing lamp")["lighting"] == 5  # 3 + 5, clipped
    assert levels_from_prompt("dark gloomy room, but bright")["lighting"] == 2  # 3 - 2 + 1
    assert levels_from_prompt("cluttered messy crowded room")["layout"] == 1
    assert levels_from_prompt("dimension dimensions")["lighting"] == 3  # 'dim' alone is no stem


def test_procedural_candidates_reproduce_alone_and_keep_pixels_outside_the_mask():
    gen = build_generator({"name": "procedural"})
    image, mask = _task()
    images = [image, image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    out = gen.inpaint(images, [mask, mask], ["a bright room", "a dark room"], n=3, seed=[10, 20])
    assert [len(c) for c in out] == [3, 3]
    alone = gen.inpaint([images[1]], [mask], ["a dark room"], n=1, seed=22)[0][0]
    assert _diff(alone, out[1][2]) == 0.0
    assert _diff(out[0][0], out[0][1]) > 0  # another seed, another scene
    outside = np.asarray(mask) == 0
    assert (np.asarray(out[0][0])[outside] == np.asarray(image)[outside]).all()


def test_procedural_lighting_words_raise_the_lighting_statistic():
    gen = build_generator({"name": "procedural"})
    image, mask = _task(box=(0, 0, 64, 64))
    prompts = ["a room", "a bright sunlit warm room", "a dark gloomy night room"]
    out = gen.inpaint([image] * 3, [mask] * 3, prompts, n=4, seed=5)
    light = [np.mean([proxy_scores(im)["lighting"] for im in cands]) for cands in out]
    assert light[1] > light[0] > light[2]


def test_mask_of_another_size_is_resized_with_a_warning_or_refused():
    image, _ = _task()
    small = Image.new("L", (32, 32), 255)
    with pytest.warns(UserWarning, match=r"mask \(32, 32\) resized to its image's size \(64, 64\)"):
        _, (mask,), _ = prepare_call([image], [small], ["x"], 1, 0, "resize")
    assert mask.size == (64, 64)
    gen = build_generator({"name": "procedural", "mask_mismatch": "error"})
    with pytest.raises(ValueError, match=r"item 0: mask is \(32, 32\) but image is \(64, 64\).*mask_mismatch=resize"):
        gen.inpaint([image], [small], ["x"])


def test_long_prompts_are_truncated_to_the_limit_and_flagged():
    gen = build_generator({"name": "procedural", "max_prompt_tokens": 3})
    prompts, cut = gen.truncate(["one two three four", "one two"])
    assert prompts == ["one two three", "one two"] and cut == [True, False]


def test_a_failing_item_costs_only_itself():
    gen = build_generator({"name": "procedural"})
    image, mask = _task()
    tiny = Image.new("RGB", (4, 4))  # too small to render a scene into: a real generator error
    out, errors = inpaint_each(gen, [image, tiny, image], [mask, Image.new("L", (4, 4), 255), mask], ["a"] * 3, n=2)
    assert out[1] is None and out[0] is not None and out[2] is not None and len(out[2]) == 2
    assert len(errors) == 1 and errors[0].startswith("item 1:") and "at least 8 pixels" in errors[0]


def test_unknown_generator_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown generator 'procedual'\. Did you mean 'procedural'\?.*flux-fill"):
        build_generator({"name": "procedual"})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sd15-inpaint", "sdxl-inpaint", "flux-fill"])
def test_diffusers_candidates_are_batched_and_reproducible_one_by_one(kind, tiny_pipeline_path):
    path = tiny_pipeline_path(kind)
    extra = {"size_multiple": 16} if kind == "flux-fill" else {}
    gen = build_generator({"name": kind, "path": str(path), "steps": 2, "dtype": "float32", **extra})
    rng = np.random.default_rng(0)  # not square, masked region off-centre: the random VAE's latent noise shows
    image = Image.fromarray(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))
    mask = Image.new("L", (128, 96), 0)
    mask.paste(255, (20, 20, 100, 80))
    out = gen.inpaint([image, image], [mask, mask], ["a bright room", "a dark room"], n=4, seed=7)
    assert [len(c) for c in out] == [4, 4] and out[1][1].size == (128, 96)
    # the same candidate alone: equal up to the rounding of batched float math (1/255); another seed: far off
    for j in range(4):  # with num_images_per_prompt=4 instead, candidates 2 and 3 differed by 31/255 here
        assert _diff(gen.inpaint([image], [mask], ["a dark room"], n=1, seed=7 + j)[0][0], out[1][j]) <= 2.0
    assert _diff(out[1][0], out[1][1]) > 20
    outside = np.asarray(mask) == 0  # paste_back keeps the unmasked pixels
    assert (np.asarray(out[0][0])[outside] == np.asarray(image)[outside]).all()
    if kind == "sd15-inpaint":
        prompts, cut = gen.truncate(["word " * 100, "short"])
        assert cut == [True, False] and len(gen.pipe.tokenizer(prompts[0])["input_ids"]) <= 77


@pytest.mark.slow
def test_flux_fill_gives_t5_the_whole_expanded_prompt_as_written(tiny_pipeline_path):
    """FLUX Fill reads the prompt with T5 (up to max_sequence_length=512 tokens): the whole prompt goes there as
    prompt_2, in its own case; only CLIP's pooled vector reads the first 77 tokens (cut without a CLIP round trip,
    which lower-cased the text and cut it at 77 before T5 ever saw it)."""
    path = tiny_pipeline_path("flux-fill")
    gen = build_generator(
        {"name": "flux-fill", "path": str(path), "steps": 1, "dtype": "float32", "size_multiple": 16}
    )
    seen: list[dict] = []
    encode = gen.pipe.encode_prompt

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return encode(*args, **kwargs)

    gen.pipe.encode_prompt = spy
    text = "A Sunlit Scandinavian Living Room, with an OAK floor. " * 3  # ~160 characters: > 77 CLIP tokens here
    used, cut = gen.truncate([text.strip()])
    assert used == [text.strip()] and cut == [False]  # within T5's budget: nothing cut, case kept
    image, mask = _task(32, (4, 4, 28, 28))
    gen.inpaint([image], [mask], used, n=1, seed=0)
    assert seen[0]["prompt_2"] == [text.strip()] and seen[0]["max_sequence_length"] == 512
    clip_part = seen[0]["prompt"][0]
    assert text.startswith(clip_part) and len(gen.pipe.tokenizer(clip_part)["input_ids"]) <= 77  # CLIP's share
    long_text = "Oak " * 600
    (cut_text,), (was_cut,) = gen.truncate([long_text])
    assert was_cut and long_text.startswith(cut_text) and len(gen.pipe.tokenizer_2(cut_text)["input_ids"]) <= 512


def test_clip_truncation_keeps_the_prompt_as_written(tmp_path):
    from reward.testing.diffusion import make_clip_tokenizer
    from rl.diffusers_generator import cut_to_tokens

    tok = make_clip_tokenizer(tmp_path / "clip")  # one token per character here
    text, cut = cut_to_tokens(tok, "A Bright ROOM, Warm light", 10)
    assert cut and text == "A Bright ROO"  # a CLIP decode gave "a bright roo" (its lower-casing)
    assert cut_to_tokens(tok, "Short", 10) == ("Short", False)
