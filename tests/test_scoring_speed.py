"""The scoring loop's faster path gives the scores of the path it replaced.

Images prepared apart from the text (DataLoader workers), batches grouped by visual token count, pinned copies and
the vision tower's packed attention in batched SDPA calls: each is compared with the unoptimised path and with a
plain forward pass per image, on images of different sizes (so that a wrong grouping, padding or reordering shows).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import next_token_logprobs
from reward.eval.parallel import score_images
from reward.rewards.qbench import QBenchConfig, QBenchReward
from reward.vlm import OptionQuery, load_vlm
from reward.vlm.inputs import device_preprocessing, fast_image_processor
from reward.vlm.vision_attention import batched_vision_attention, varlen_sdpa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the paths the default replaced: the bench's
from scoring_paths import ScoringSpeed, use_speed  # noqa: E402

WORDS = ("excellent", "good", "fair", "poor", "bad")
QUERIES = [
    OptionQuery(f"How would you rate the {d} of this image?", WORDS, "The quality level of this image is")
    for d in ("lighting", "layout", "harmony")
]
# distinct visual token counts, not in order: grouping reorders them
SIZES = [(224, 224), (56, 84), (168, 112), (28, 56), (224, 196), (112, 112), (84, 140)]


def _images(sizes=SIZES, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


@pytest.fixture(scope="module")
def vlm25(tiny_vlm25_path):
    """The tiny Qwen2.5-VL (windowed vision attention) with a pixel budget that keeps image sizes apart."""
    return load_vlm(tiny_vlm25_path, min_pixels=28 * 28, max_pixels=224 * 224, batch_size=6)


def test_fast_path_equals_the_unoptimised_path_and_a_plain_forward(vlm25):
    imgs = _images()
    groups = [[im] for im in imgs]
    oracle = torch.stack(
        [next_token_logprobs(vlm25, [im], QUERIES[0].question, QUERIES[0].response_prefix) for im in imgs]
    )
    ids = vlm25.candidate_ids(QUERIES[0])
    expected = oracle[:, ids]
    assert torch.cdist(expected, expected).fill_diagonal_(1).min() > 1e-3  # a reordering would show
    results = {}
    for name, speed in (("fast", ScoringSpeed()), ("unoptimised", ScoringSpeed.unoptimised())):
        use_speed(vlm25, speed)
        for reuse in (True, False):
            results[name, reuse] = vlm25.option_logprobs(groups, QUERIES, reuse_prefix=reuse).logprobs
        results[name, "one query"] = vlm25.option_logprobs(groups, QUERIES[:1]).logprobs
    use_speed(vlm25, ScoringSpeed())
    reference = results["unoptimised", False]
    for key, got in results.items():
        assert (got - reference[:, : got.shape[1]]).abs().max() < 1e-4, key
        assert (got[:, 0] - expected).abs().max() < 1e-4, key


def test_prepared_images_score_as_the_pil_images(vlm25):
    imgs = _images(seed=1)
    preparer = vlm25.image_preparer()
    prepared = [preparer([im]) for im in imgs]
    assert [p.size // (4 * 1176) for p in prepared] == [64, 6, 24, 2, 56, 16, 15]  # 2x2 patches a visual token
    pil = vlm25.option_logprobs([[im] for im in imgs], QUERIES, return_vocab=True)
    ready = vlm25.option_logprobs(prepared, QUERIES, return_vocab=True)
    assert (pil.logprobs - ready.logprobs).abs().max() < 1e-5
    assert (pil.vocab - ready.vocab).abs().max() < 1e-5  # the whole distribution, in input order


def test_batched_vision_attention_equals_one_call_per_window():
    torch.manual_seed(0)
    lengths = [5, 5, 3, 5, 0, 2, 3]  # equal lengths apart from each other, an empty segment
    cu = torch.tensor([0, *np.cumsum(lengths)])
    q, k, v = (torch.randn(1, 2, int(cu[-1]), 4) for _ in range(3))
    got, _ = varlen_sdpa(None, q, k, v, None, scaling=0.3, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    parts = [
        torch.nn.functional.scaled_dot_product_attention(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], scale=0.3)
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)
        if b > a
    ]
    assert torch.allclose(got, torch.cat(parts, dim=2).transpose(1, 2), atol=1e-6)
    whole = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3).transpose(1, 2)
    assert not torch.allclose(got, whole, atol=1e-3)  # segments really are kept apart


def test_vision_tower_batched_attention_equals_the_model_own(vlm25):
    imgs = _images()
    enc = vlm25.processor.image_processor(images=imgs, return_tensors="pt")
    visual = vlm25.model.model.visual
    with torch.no_grad():
        own = visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"]).pooler_output
        with batched_vision_attention(vlm25.model) as used:
            batched = visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"]).pooler_output
    assert used and visual.config._attn_implementation == "sdpa"  # set back after the block
    assert (own - batched).abs().max() < 1e-5


@pytest.mark.skipif(
    __import__("transformers.utils", fromlist=["x"]).is_torchvision_available(), reason="torchvision importable"
)
def test_without_torchvision_preprocess_device_falls_back_to_the_pil_processor(tiny_vlm_path, caplog):
    vlm = load_vlm(tiny_vlm_path, min_pixels=28 * 28, max_pixels=112 * 112, batch_size=4)
    image_processor = vlm.processor.image_processor
    assert image_processor.backend == "pil" and fast_image_processor(image_processor) is None
    assert "torchvision is not importable" in device_preprocessing(image_processor, torch.device("cuda"))
    imgs = [[im] for im in _images([(56, 56), (112, 84), (28, 84)])]
    host = vlm.option_logprobs(imgs, QUERIES[:1]).logprobs
    use_speed(vlm, ScoringSpeed(preprocess="device"))
    with caplog.at_level(logging.INFO, logger="reward.vlm.model"):
        fallback = vlm.option_logprobs(imgs, QUERIES[:1]).logprobs
        vlm.option_logprobs(imgs, QUERIES[:1])
    assert torch.equal(host, fallback)
    assert vlm.image_preparer() is not None  # the workers still get the (host) processor
    told = [r.message for r in caplog.records if "stays on the host" in r.message]
    assert len(told) == 1 and "not a GPU" in told[0]  # said once, with the reason


def test_scoring_speed_refuses_unknown_choices():
    with pytest.raises(ValueError, match="preprocess='gpu'"):
        ScoringSpeed(preprocess="gpu")
    with pytest.raises(ValueError, match="vision_attention='flash'"):
        ScoringSpeed(vision_attention="flash")


class _Recording(QBenchReward):
    """The qbench reward, remembering what ``score`` received."""

    received: list

    def score(self, images, prompts=None):
        self.received.extend(type(im).__name__ for im in images)
        return super().score(images, prompts)


def test_workers_prepare_the_images_and_the_scores_do_not_change(vlm25, tmp_path):
    imgs = _images(SIZES * 2)
    items = [(f"img{i}", im, i + 1) for i, im in enumerate(imgs)]
    reward = _Recording(QBenchConfig(model="unused"), vlm=vlm25)
    reward.received = []
    fast = score_images(reward, items, batch_size=5, num_workers=2)
    assert set(reward.received) == {"PreparedImages"}
    reward.received = []
    use_speed(vlm25, ScoringSpeed.unoptimised())
    try:
        old = score_images(reward, items, batch_size=5, num_workers=0, prepare_in_workers=False)
    finally:
        use_speed(vlm25, ScoringSpeed())
    assert set(reward.received) == {"Image"}
    diffs = [abs(fast.scores[k]["score"] - old.scores[k]["score"]) for k in old.scores]
    assert len(diffs) == len(imgs) and max(diffs) < 1e-5
    assert np.ptp([s["score"] for s in old.scores.values()]) > 1e-3


def test_an_image_the_processor_refuses_is_a_bad_row_named_by_its_line(vlm25):
    items = [("ok", _images([(56, 56)])[0], 3), ("thin", Image.new("RGB", (600, 2)), 7)]
    reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm25)
    done = score_images(reward, items, batch_size=2, skip_bad=True)
    assert list(done.scores) == ["ok"]
    assert done.skipped[0].line == 7 and "aspect ratio" in done.skipped[0].reason
    from reward.data import ImageError

    with pytest.raises(ImageError, match="manifest:7: .*aspect ratio"):
        score_images(reward, items, batch_size=2)


def test_an_image_processor_failing_on_the_device_falls_back_to_the_host_once(tiny_vlm_path, monkeypatch, caplog):
    """The GPU (torchvision) processor cannot run here; a stand-in that fails as it might there shows the fallback:
    the scores of the host path, one warning, no second try."""
    import reward.vlm.model as model_module

    vlm = load_vlm(tiny_vlm_path, min_pixels=28 * 28, max_pixels=112 * 112, batch_size=4)
    imgs = [[im] for im in _images([(56, 56), (112, 84)])]
    host = vlm.option_logprobs(imgs, QUERIES[:1]).logprobs
    calls = []

    def broken(images, **kwargs):
        calls.append(kwargs.get("device"))
        raise RuntimeError("CUDA error: no kernel image is available")

    broken.merge_size = 2
    monkeypatch.setattr(model_module, "device_preprocessing", lambda processor, device: None)
    vlm._fast = broken
    with caplog.at_level(logging.WARNING, logger="reward.vlm.model"):
        first = vlm.option_logprobs(imgs, QUERIES[:1]).logprobs
        second = vlm.option_logprobs(imgs, QUERIES[:1]).logprobs
    assert torch.equal(first, host) and torch.equal(second, host)
    assert len(calls) == 1 and "runs on the host from now on" in caplog.text
    assert vlm.image_preparer() is not None  # and the DataLoader workers get the host processor again
