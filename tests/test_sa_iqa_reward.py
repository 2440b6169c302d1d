"""The sa-iqa reward on a scorer directory: expected value per dimension, shared prefix, fusion weights."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import random_images
from reward import get_reward
from reward.vlm import OptionQuery


@pytest.fixture
def scorer_dir(tiny_scorer_path):
    return tiny_scorer_path


def test_dimension_scores_are_expected_values_over_the_level_words(scorer_dir, tiny_vlm):
    images = random_images(3, seed=21)
    out = get_reward("sa-iqa", {"model": str(scorer_dir)}).score(images)
    assert set(out.dimensions) == {"lighting", "harmony"}
    meta = json.loads((scorer_dir / "sa_iqa.json").read_text())
    q = meta["queries"]["lighting"]
    query = OptionQuery(q["question"], ("excellent", "good", "fair", "poor", "bad"), q["response_prefix"])
    logp = tiny_vlm.option_logprobs([[im] for im in images], [query], reuse_prefix=False).logprobs[:, 0]
    p = torch.softmax(logp, -1)
    expected = p @ torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])
    assert torch.allclose(out.dimensions["lighting"], expected, atol=1e-4)
    assert ((out.scores >= 1) & (out.scores <= 5)).all()
    # no fusion weights: the fused score is the mean of the dimensions
    assert torch.allclose(out.scores, (out.dimensions["lighting"] + out.dimensions["harmony"]) / 2, atol=1e-6)


def test_shared_prefix_and_plain_scoring_agree(scorer_dir):
    images = random_images(4, seed=22)
    cached = get_reward("sa-iqa", {"model": str(scorer_dir)}).score(images)
    plain = get_reward("sa-iqa", {"model": str(scorer_dir), "reuse_prefix": False}).score(images)
    for d in cached.dimensions:
        assert torch.allclose(cached.dimensions[d], plain.dimensions[d], atol=1e-4)


def test_fusion_weights_from_the_directory_or_a_path(scorer_dir, tmp_path):
    images = random_images(2, seed=23)
    plain = get_reward("sa-iqa", {"model": str(scorer_dir)}).score(images)
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"dimensions": ["harmony", "lighting"], "weights": [1.0, 3.0]}))
    fused = get_reward("sa-iqa", {"model": str(scorer_dir), "fusion": str(weights)}).score(images)
    expected = (3.0 * plain.dimensions["lighting"] + 1.0 * plain.dimensions["harmony"]) / 4.0
    assert torch.allclose(fused.scores, expected, atol=1e-5)


def test_weights_missing_a_dimension_are_refused(scorer_dir, tmp_path):
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"dimensions": ["lighting"], "weights": [1.0]}))
    with pytest.raises(ValueError, match=r"no weight for dimension\(s\) \['harmony'\] \(it has \['lighting'\]\)"):
        get_reward("sa-iqa", {"model": str(scorer_dir), "fusion": str(weights)})


def test_a_directory_without_metadata_is_a_clear_error(tiny_vlm_path):
    with pytest.raises(FileNotFoundError, match="not an SA-IQA scorer directory: sa_iqa.json is missing"):
        get_reward("sa-iqa", {"model": str(tiny_vlm_path)})


def test_unknown_dimension_is_named(scorer_dir):
    with pytest.raises(ValueError, match=r"\['layout'\] not in the scorer .*; it has \['lighting', 'harmony'\]"):
        get_reward("sa-iqa", {"model": str(scorer_dir), "dimensions": ["layout"]})


def test_evaluation_skips_rows_of_dimensions_the_scorer_does_not_have(scorer_dir, tmp_path):
    from reward.data import load_ratings
    from reward.eval.evaluation import EvalSettings, evaluate_rows
    from training.procedural.synthetic import write_benchmark

    bench = write_benchmark(tmp_path / "b", 4, size=56, seed=1)  # rows for layout, harmony, lighting, distortion
    rows = load_ratings(bench.ratings).rows
    reward = get_reward("sa-iqa", {"model": str(scorer_dir)})  # lighting and harmony only
    result = evaluate_rows(reward, rows, EvalSettings(), score_range=(1.0, 5.0))
    assert set(result.predictions) == {"lighting", "harmony"}
    assert len(result.skipped) == 8 and "no dimension 'layout'" in " ".join(s.reason for s in result.skipped)


def test_saved_processor_names_the_real_processor_class(tiny_vlm, tmp_path):
    from reward.vlm import load_processor

    tiny_vlm.processor.save_pretrained(tmp_path / "out")  # built without torchvision: a stand-in class
    saved = json.loads((tmp_path / "out" / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2VLProcessor"  # the real class, loadable where torchvision exists
    again = load_processor(tmp_path / "out")
    assert again.tokenizer.padding_side == "left"
    assert again.image_processor.to_dict() == tiny_vlm.processor.image_processor.to_dict()
