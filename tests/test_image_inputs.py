"""Every reward takes images as users hold them: PIL images, uint8 and float [0, 1] tensors (C x H x W or a batch),
numpy arrays (H x W x C, uint8 or float [0, 1], or a batch), one image not in a list; anything else is refused with
a message saying what was given and what is accepted."""

from __future__ import annotations

import numpy as np
import pytest
import skimage.data
import torch
from PIL import Image

from conftest import tiny_reward_config
from reward import get_reward, list_rewards
from reward.data.images import as_images


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    """A real photograph (scikit-image's astronaut), H x W x 3 uint8, reduced to keep scoring fast."""
    return np.array(Image.fromarray(skimage.data.astronaut()).resize((112, 112), Image.Resampling.BICUBIC))


def forms(photo: np.ndarray) -> dict[str, object]:
    chw = torch.from_numpy(photo).permute(2, 0, 1).contiguous()
    return {
        "PIL in a list": [Image.fromarray(photo)],
        "one PIL image": Image.fromarray(photo),
        "uint8 tensor C x H x W": chw,
        "float tensor C x H x W in [0, 1]": chw.float() / 255,
        "float16 tensor in [0, 1]": (chw.float() / 255).half(),
        "float tensor batch B x C x H x W": (chw.float() / 255)[None],
        "list of float tensors": [chw.float() / 255],
        "uint8 array H x W x C": photo,
        "float array H x W x C in [0, 1]": photo.astype(np.float32) / 255,
        "float array batch B x H x W x C": (photo.astype(np.float64) / 255)[None],
    }


@pytest.mark.parametrize("name", list_rewards())
def test_every_reward_scores_a_float_tensor_of_a_photo_as_the_photo_not_as_black(name, request, photo):
    reward = get_reward(name, tiny_reward_config(name, request))
    expected = float(reward.score([Image.fromarray(photo)]).scores[0])
    black = float(reward.score([Image.new("RGB", (112, 112))]).scores[0])
    assert abs(expected - black) > 1e-3, "the photo must score differently from a black image for this test to bite"
    tensor = torch.from_numpy(photo).permute(2, 0, 1).float() / 255  # torchvision's to_tensor, diffusers "pt"
    assert float(reward.score([tensor]).scores[0]) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("name", list_rewards())
def test_every_reward_scores_no_image_as_no_score(name, request):
    out = get_reward(name, tiny_reward_config(name, request)).score([])
    assert out.scores.shape == (0,) and all(v.shape == (0,) for v in (out.dimensions or {}).values())


def test_a_reward_scores_a_photo_the_same_in_every_form_users_hold_it(request, photo):
    reward = get_reward("qbench", tiny_reward_config("qbench", request))
    expected = float(reward.score([Image.fromarray(photo)]).scores[0])
    for form, images in forms(photo).items():
        scores = reward.score(images).scores
        assert scores.shape == (1,), form
        assert float(scores[0]) == pytest.approx(expected, abs=1e-4), form


def test_a_float_batch_gives_one_score_per_image(request, photo):
    reward = get_reward("qbench", tiny_reward_config("qbench", request))
    batch = torch.stack([torch.from_numpy(photo).permute(2, 0, 1).float() / 255, torch.zeros(3, 112, 112)])
    scores = reward.score(batch).scores
    singles = [float(reward.score([im]).scores[0]) for im in (Image.fromarray(photo), Image.new("RGB", (112, 112)))]
    assert scores.tolist() == pytest.approx(singles, abs=1e-4)


def test_float_pixels_become_the_nearest_uint8():
    pixels = np.array([[[0.0, 0.5, 1.0]]], dtype=np.float32)
    assert as_images(pixels)[0].getpixel((0, 0)) == (0, 128, 255)
    assert as_images(torch.tensor([0.0, 0.5, 1.0]).reshape(3, 1, 1))[0].getpixel((0, 0)) == (0, 128, 255)
    grey = as_images(np.full((2, 2), 1.0))[0]  # H x W: one grey channel
    assert grey.mode == "RGB" and grey.getpixel((0, 0)) == (255, 255, 255)


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (torch.full((3, 8, 8), 255.0), r"values in \[255, 255\]; float images must be in \[0, 1\]"),
        (torch.full((3, 8, 8), -1.0), r"values in \[-1, -1\]"),
        (np.full((8, 8, 3), 2.0), r"a numpy array of shape \(8, 8, 3\) and dtype float64 has values in \[2, 2\]"),
        (torch.zeros(4, 8, 8), r"has 4 channels where C x H x W \(channels first\) needs 1 or 3"),
        (torch.zeros(8, 8, 3), r"has 8 channels where C x H x W \(channels first\) needs 1 or 3"),
        (np.zeros((8, 8, 2), dtype=np.uint8), r"has 2 channels where H x W x C \(channels last\) needs 1 or 3"),
        (torch.zeros(8, 8), r"a torch tensor of shape \(8, 8\) and dtype torch.float32 has 2 dimensions"),
        (torch.zeros(1, 1, 3, 8, 8), r"has 5 dimensions"),
        (torch.zeros(3, 8, 8, dtype=torch.int64), r"dtype torch.int64: the dtype must be uint8 or float"),
        (torch.full((3, 8, 8), float("nan")), r"values in \[nan, nan\]"),
        ([torch.zeros(2, 3, 8, 8)], r"images\[0\] is a batch"),
        (b"photo.png", r"cannot score an object of type bytes"),
        ([1.5], r"images\[0\]: cannot score an object of type float"),
    ],
)
def test_anything_else_is_refused_saying_what_was_given_and_what_is_accepted(images, message):
    with pytest.raises((ValueError, TypeError), match=message) as err:
        as_images(images)
    assert "accepted: PIL images; torch tensors C x H x W or a batch B x C x H x W" in str(err.value)


def test_a_reward_refuses_a_bad_input_before_scoring(request):
    reward = get_reward("qbench", tiny_reward_config("qbench", request))
    with pytest.raises(ValueError, match=r"values in \[0, 255\]; float images must be in \[0, 1\]"):
        reward.score(torch.arange(256.0).reshape(1, 16, 16).expand(3, 16, 16))
