"""PACE protocols and dual-track scoring: the schema's errors, and every probability path on the tiny VLM checked
against values computed by hand from plain, one-probe-at-a-time log-probabilities."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from conftest import random_images
from pace_judge.commands.judge import JudgeSettings
from pace_judge.config import PaceConfig
from pace_judge.pace import PaceReward
from pace_judge.protocol import load_protocol, protocol_from_dict
from pace_judge.tracks import SYSTEM, final_score
from reward.commands.evaluate import EvaluateSettings
from reward.core.errors import UserError
from reward.vlm import OptionQuery

EDGES = "Are object edges crisp?\nA. Yes\nB. Somewhat\nC. No\nAnswer with A, B or C."
GRAIN = "Is there visible grain in flat regions?\nA. No\nB. Yes\nAnswer with A or B."  # lettered in score order
OUTLINES = "Are the outlines of small objects clearly defined?\nA. Yes\nB. Somewhat\nC. No\nAnswer with A, B or C."


def _plain(vlm, group, text, n):
    """log p of the first n letters for one question about one image group, without the shared prefix."""
    q = OptionQuery(text, tuple("ABCDE"[:n]), "")
    return vlm.option_logprobs([group], [q], system=SYSTEM, reuse_prefix=False).logprobs[0, 0, :n]


def _expected(vlm, image, text, scores):
    p = torch.softmax(_plain(vlm, [image], text, len(scores)), -1)
    return float((p * torch.tensor(scores)).sum())


def _crops(img):
    """The 2x2 crops at their native pixels (PACE asks zoom probes on crops; none is enlarged)."""
    w, h = img.size
    boxes = [(0, 0, w // 2, h // 2), (w // 2, 0, w, h // 2), (0, h // 2, w // 2, h), (w // 2, h // 2, w, h)]
    return [img.crop(b) for b in boxes]


def _hand_alpha1(vlm, img, combine, weights=(1.0, 1.0, 1.0)):
    """alpha1 by hand; uniform probe weights (eq. 6) unless ``weights`` (the protocol's are 1.0, 2.0, 0.5)."""
    whole = _expected(vlm, img, EDGES, [5, 3, 1])
    crops = [_expected(vlm, c, EDGES, [5, 3, 1]) for c in _crops(img)]
    edges = sum([whole, *crops]) / 5 if combine == "mean" else min([whole, *crops])
    grain = _expected(vlm, img, GRAIN, [4, 2])
    outlines = _expected(vlm, img, OUTLINES, [5, 3, 1])
    e = (weights[0] * edges + weights[1] * grain + weights[2] * outlines) / sum(weights)
    return (e - 1.0) / 4.0, {"edges": edges, "grain": grain, "outlines": outlines}


def test_track1_crops_track2_and_final_score_match_hand_computation(tiny_vlm, pace_protocol_path):
    folder = pace_protocol_path.parent
    high, low = Image.open(folder / "anchors/high.png").convert("RGB"), Image.open(folder / "anchors/low.png")
    images = random_images(3, seed=11, sizes=(56, 70))  # two sizes: crops and padding differ per image
    reward = PaceReward(PaceConfig(model="unused", protocol=str(pace_protocol_path)), backend=tiny_vlm)
    judged = reward.judge(images)
    rank_text = reward.scorer.rank.question
    assert "in terms of sharpness?" in rank_text and "E) Extremely similar to Image 2" in rank_text
    assert "4.6" not in rank_text and "1.4" not in rank_text  # purely comparative: the anchors' scores are not told
    for i, img in enumerate(images):
        a1, e = _hand_alpha1(tiny_vlm, img, "mean")
        ranks = torch.softmax(_plain(tiny_vlm, [high, low.convert("RGB"), img], rank_text, 5), -1)
        a2 = float((ranks * torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0])).sum())
        score = min(4.6, max(1.4, 1.4 + 3.2 * (0.5 * a1 + 0.5 * a2)))
        assert judged.alpha1[i].item() == pytest.approx(a1, abs=2e-5)
        assert judged.alpha2[i].item() == pytest.approx(a2, abs=2e-5)
        assert judged.scores[i].item() == pytest.approx(score, abs=1e-4)
        expl = judged.explanations[i]
        assert [p["expected"] for p in expl["probes"]] == pytest.approx(
            [e["edges"], e["grain"], e["outlines"]], abs=2e-5
        )
        assert len(expl["probes"][0]["crops"]) == 4 and "crops" not in expl["probes"][1]
        assert expl["sub_dimensions"]["edge crispness"] == pytest.approx((e["edges"] + e["outlines"]) / 2, abs=2e-5)
        assert sum(expl["probes"][1]["options"].values()) == pytest.approx(1.0, abs=1e-5)
        assert expl["track2_prompt"] == "comparative" and expl["scale"] == "anchors 1.4-4.6"


def test_uncalibrated_protocol_maps_track1_onto_its_own_option_bounds_and_min_combines_crops(
    tiny_vlm, pace_protocol_path, tmp_path
):
    raw = json.loads(pace_protocol_path.read_text())
    raw.pop("anchors")
    for probe in raw["probes"]:  # scores 2..4 only: S_min = 2, S_max = 4 (not the 1-5 scale)
        for o in probe["options"]:
            o["score"] = {5: 4, 3: 3, 1: 2}.get(o["score"], o["score"])
    (tmp_path / "p.json").write_text(json.dumps(raw))
    from pace_judge.tracks import CropConfig

    cfg = PaceConfig(
        model="unused", protocol=str(tmp_path / "p.json"), crops=CropConfig(combine="min"), probe_weights="agent"
    )
    judged = PaceReward(cfg, backend=tiny_vlm).judge(random_images(2, seed=3))
    for i, img in enumerate(random_images(2, seed=3)):
        whole = _expected(tiny_vlm, img, EDGES, [4, 3, 2])
        edges = min([whole] + [_expected(tiny_vlm, c, EDGES, [4, 3, 2]) for c in _crops(img)])
        e = (
            edges + 2.0 * _expected(tiny_vlm, img, GRAIN, [4, 2]) + 0.5 * _expected(tiny_vlm, img, OUTLINES, [4, 3, 2])
        ) / 3.5
        assert judged.alpha1[i].item() == pytest.approx((e - 2.0) / 2.0, abs=2e-5)
        assert judged.scores[i].item() == pytest.approx(e, abs=1e-4)  # 2 + 2 * alpha1 = E
        assert judged.alpha2 is None and judged.explanations[i]["calibrated"] is False


def test_final_score_weights_tracks_and_clamps_to_the_anchor_range():
    a1, a2 = torch.tensor([1.0, 0.0, 0.2]), torch.tensor([0.0, 0.0, 0.8])
    assert final_score(a1, a2, (0.5, 0.5), y_low=2.0, y_high=4.0).tolist() == pytest.approx([3.0, 2.0, 3.0])
    assert final_score(a1, a2, (0.75, 0.25), y_low=2.0, y_high=4.0).tolist() == pytest.approx([3.5, 2.0, 2.7])
    assert final_score(torch.tensor([1.3, -0.2]), None, (0.5, 0.5), y_low=1.0, y_high=5.0).tolist() == [5.0, 1.0]


def test_a_bad_protocol_names_every_bad_field_at_once():
    raw = {
        "schema": "pace-protocol/0",
        "dimension": "",
        "sub_dimensions": [{"name": "edges"}],
        "probes": [
            {
                "question": "Crisp?",
                "options": [{"text": "Yes", "score": 9}, {"text": "No"}],
                "sub_dimension": "colour",
                "weight": -1,
                "zoom": "yes",
            }
        ],
        "anchors": {"high": {"image": "h.png", "score": 2}, "low": {"image": "l.png", "score": 3}},
    }
    with pytest.raises(UserError) as err:
        protocol_from_dict(raw, source="p.json")
    msg = str(err.value)
    for expected in (
        "schema must be 'pace-protocol/1'",
        "dimension must be a non-empty string",
        "probes[0].options[0].score = 9.0 is outside the 1-5 scale",
        "probes[0].options[1].score must be a finite number",
        "probes[0].weight must be > 0",
        "probes[0].sub_dimension 'colour' is not one of the sub_dimensions ['edges']",
        "probes[0].zoom must be true or false",
        "anchors.high.score (2.0) must be above",
    ):
        assert expected in msg


def test_protocol_files_report_json_position_and_missing_anchor_images(tmp_path, pace_protocol_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "pace-protocol/1",\n "dimension": }')
    with pytest.raises(UserError, match=r"bad.json:2:15: not valid JSON"):
        load_protocol(bad)
    moved = tmp_path / "moved.json"
    moved.write_text(pace_protocol_path.read_text())  # anchors are relative to the protocol's folder
    with pytest.raises(UserError, match=r"anchor images not found: anchors.high.image = \S*/anchors/high.png"):
        load_protocol(moved)
    p = load_protocol(pace_protocol_path)
    assert p.calibrated and p.anchor_path("high").is_file() and [q.zoom for q in p.probes] == [True, False, False]


def test_pace_config_errors_are_reported_together():
    with pytest.raises(ValueError) as err:
        PaceReward(PaceConfig(omega=[0.7, 0.7], theta=2.0, backend="grpc"))
    msg = str(err.value)
    assert "exactly one of protocol=FILE" in msg and "omega must be two non-negative weights summing to 1" in msg
    assert "theta=2.0: must be between -1 and 1" in msg and "backend='grpc': choose one of local, openai" in msg


def test_anchors_encoded_once_equal_the_plain_path_for_targets_of_different_sizes(tiny_vlm_path, tmp_path):
    import shutil

    from pace_judge.anchored import anchored_logprobs
    from pace_judge.tracks import rank_query
    from reward.vlm import load_vlm

    folder = tmp_path / "vlm"
    shutil.copytree(tiny_vlm_path, folder)  # a variable-resolution processor: targets get 4 to 12 image tokens
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["size"] = {"shortest_edge": 28 * 28 * 2, "longest_edge": 28 * 28 * 16}
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    vlm = load_vlm(folder, batch_size=2)  # 3 targets: two batches, the prefix rebuilt for each
    anchors = random_images(2, seed=1, sizes=(64,))
    sizes = [(56, 56), (90, 70), (60, 40)]
    targets = [img.resize(size) for img, size in zip(random_images(3, seed=2), sizes, strict=True)]
    q = rank_query("sharpness", 4.6, 1.4)
    got = anchored_logprobs(vlm, anchors, targets, q, system=SYSTEM).logprobs[:, 0]
    plain = vlm.option_logprobs([[*anchors, t] for t in targets], [q], system=SYSTEM, reuse_prefix=False)
    grids = [vlm.processor.image_processor(images=[t])["image_grid_thw"].prod().item() for t in targets]
    assert len(set(grids)) == 3  # three different image-token counts: the suffixes are padded
    assert torch.allclose(got, plain.logprobs[:, 0], atol=2e-5)


def test_crops_are_asked_only_the_zoom_probes_in_one_call(tiny_vlm, pace_protocol_path):
    class Counting:
        def __init__(self, vlm):
            self.vlm, self.calls = vlm, []

        def option_logprobs(self, images, queries, *, system=None):
            self.calls.append((len(images), tuple(q.question.splitlines()[0] for q in queries)))
            return self.vlm.option_logprobs(images, queries, system=system)

    backend = Counting(tiny_vlm)
    reward = PaceReward(PaceConfig(model="unused", protocol=str(pace_protocol_path)), backend=backend)
    zoom = [p.question for p in reward.scorer.protocol.probes if p.zoom]
    assert 0 < len(zoom) < len(reward.scorer.protocol.probes)  # the fixture mixes zoom and plain probes
    reward.judge(random_images(3, seed=2))
    whole, crops = backend.calls[:2]
    assert whole == (3, tuple(p.question for p in reward.scorer.protocol.probes))
    assert crops == (3 * 4, tuple(zoom))  # 2x2 crops of each image, the zoom probes only


def test_anchored_track2_reads_fp32_answer_logits_from_a_bf16_model(tiny_vlm_path):
    from pace_judge.anchored import anchored_logprobs
    from pace_judge.tracks import rank_query
    from reward.vlm import load_vlm

    vlm = load_vlm(tiny_vlm_path, dtype="bfloat16", batch_size=4)
    dtypes = []
    hook = vlm.model.register_forward_hook(lambda mod, args, out: dtypes.append(out.logits.dtype))
    q = rank_query("sharpness", 4.6, 1.4)
    got = anchored_logprobs(vlm, random_images(2, seed=1), random_images(3, seed=2), q, system=SYSTEM)
    hook.remove()
    assert dtypes[-1] == torch.float32  # the suffix pass: the answer head ran in fp32, as in reward.vlm
    assert got.logprobs.dtype == torch.float32 and torch.isfinite(got.logprobs).all()


def test_crops_keep_their_native_pixels_and_cost_fewer_tokens_than_the_whole_image(tiny_vlm25_path, tmp_path):
    import shutil

    from pace_doubles import write_example_protocol

    folder = tmp_path / "vlm"
    shutil.copytree(tiny_vlm25_path, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["size"] = {"shortest_edge": 28 * 28, "longest_edge": 28 * 28 * 4}
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    protocol = write_example_protocol(tmp_path / "proto")
    budget = 28 * 28 * 16  # 16 visual tokens: a 112x112 image stays whole (4 x 4 tokens), not the checkpoint's 4
    reward = PaceReward(PaceConfig(model=str(folder), protocol=str(protocol), max_pixels=budget, min_pixels=28 * 28))
    processor = reward.backend.processor.image_processor
    assert processor.size["longest_edge"] == budget  # the budget reached the loaded processor
    groups = []
    ask = reward.backend.option_logprobs

    def spy(images, queries, *, system=None):
        groups.append([img.size for g in images for img in g])
        return ask(images, queries, system=system)

    reward.backend.option_logprobs = spy
    image = random_images(1, seed=3, sizes=(112,))[0]
    reward.judge([image])

    def tokens(size):
        return int(processor(images=[Image.new("RGB", size)])["image_grid_thw"].prod()) // 4

    whole, crops = groups[0], groups[1]
    assert whole == [(112, 112)] and crops == [(56, 56)] * 4  # native crops, not enlarged to 112x112
    assert tokens(whole[0]) == 16 and [tokens(c) for c in crops] == [4] * 4  # the four crops cost one image


def test_pace_configs_default_to_a_1024_token_budget():
    from reward.core.cli import compose

    assert PaceConfig().max_pixels == 802_816
    assert compose("judge", ["protocol=p", "model=m", "images=i", "out=o"], schema=JudgeSettings).max_pixels == 802_816
    assert (
        compose(
            "evaluate", ["reward=pace", "reward.model=m", "data=d", "out=o"], schema=EvaluateSettings
        ).reward.max_pixels
        == 802_816
    )


def test_the_reward_names_the_scale_of_its_scores(tiny_vlm, pace_protocol_path, tmp_path):
    calibrated = PaceReward(PaceConfig(model="x", protocol=str(pace_protocol_path)), backend=tiny_vlm)
    raw = json.loads(pace_protocol_path.read_text())
    raw.pop("anchors")
    (tmp_path / "p.json").write_text(json.dumps(raw))
    draft = PaceReward(PaceConfig(model="x", protocol=str(tmp_path / "p.json")), backend=tiny_vlm)
    scorers = [calibrated.scorer, draft.scorer]
    assert [s.scale for s in scorers] == ["anchors 1.4-4.6", "options 1-5 (uncalibrated)"]
    assert scorers[0].protocol_id != scorers[1].protocol_id
