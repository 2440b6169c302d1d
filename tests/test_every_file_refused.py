"""Every file the toolkit reads is refused in one line naming it (exit 2 through the command line), before any model
loads: a scorer's ``sa_iqa.json`` malformed in any way, a model folder's damaged JSON, an ``hf:`` folder of broken
JSON Lines or CSV, an image over twice PIL's limit in SFT data, a reward's Hub id absent from the cache offline, and
``reward=pace`` with neither protocol nor dimension."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from conftest import run_cli
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.errors import UserError
from reward.data import ManifestError, load_ratings
from reward.rewards.registry import get_reward
from reward.rewards.scorer_folder import ScorerFormatError, read_metadata

GOOD = {
    "format": "sa-iqa-scorer/1",
    "queries": {"lighting": {"question": "How is the lighting?", "response_prefix": "The lighting is"}},
    "level_words": ["excellent", "good", "fair", "poor", "bad"],
    "level_values": [5.0, 4.0, 3.0, 2.0, 1.0],
}

BAD_METADATA = [  # (what is changed, the words of the one-line message)
    ({"level_values": [5.0, 4.0, 3.0, 2.0]}, "level_values is [5.0, 4.0, 3.0, 2.0], not a list of 5 numbers"),
    ({"queries": {"lighting": {"response_prefix": "The lighting is"}}}, "queries.lighting.question is null"),
    ({"queries": {"lighting": {"question": "", "response_prefix": "P"}}}, "queries.lighting.question is ''"),
    ({"queries": {"lighting": {"question": "Q", "response_prefix": 3}}}, "queries.lighting.response_prefix is 3"),
    ({"queries": {"lighting": "How is the lighting?"}}, "queries.lighting is 'How is the lighting?', not an object"),
    ({"level_values": ["5", "4", "3", "2", "1"]}, "level_values[0] is '5', not a finite number"),
    ({"level_values": [5.0, 4.0, True, 2.0, 1.0]}, "level_values[2] is True, not a finite number"),
    ({"queries": {}}, "queries is {}, not an object of one query per dimension"),
    ({"queries": ["lighting"]}, 'queries is ["lighting"], not an object'),
    ({"level_words": None}, "level_words is null, not a list of 2 to 100 words"),
    ({"level_words": ["good"], "level_values": [5.0]}, 'level_words is ["good"], not a list of 2 to 100'),
    ({"level_words": ["good", "good", "fair", "poor", "bad"]}, "repeats a word"),
    ({"level_words": ["excellent", 4, "fair", "poor", "bad"]}, "level_words[1] is 4, not a word"),
    ({"base_model": 7}, "base_model is 7, not a model folder or Hub id"),
]


@pytest.mark.parametrize(("change", "said"), BAD_METADATA, ids=[s[:30] for _, s in BAD_METADATA])
def test_a_malformed_sa_iqa_json_is_refused_naming_the_file_and_the_key(tmp_path, change, said):
    (tmp_path / "sa_iqa.json").write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(ScorerFormatError) as err:
        read_metadata(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'sa_iqa.json'}: ") and said in message and "\n" not in message
    assert message.endswith("rewrite it with training/sft.py")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"format": "sa-iqa-scorer/1", "level_words": ["bon', "not JSON (Unterminated string"),
        (b'{"format": "sa-iqa-scorer/1", "queries": "\xff\xfe"}', "not UTF-8 text (byte 42)"),
        (json.dumps({**GOOD, "level_values": [5.0, 4.0, float("nan"), 2.0, 1.0]}).encode(), "level_values[2] is nan"),
        (b"[1, 2]", "not a JSON object"),
    ],
)
def test_an_sa_iqa_json_that_is_not_utf8_json_is_refused_in_one_line(tmp_path, body, said):
    (tmp_path / "sa_iqa.json").write_bytes(body)
    with pytest.raises(ScorerFormatError, match=re.escape(said)):
        read_metadata(tmp_path)


def test_evaluate_with_a_malformed_scorer_exits_2_in_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import reward.rewards.sa_iqa as sa_iqa

    monkeypatch.setattr(sa_iqa, "load_vlm", lambda *a, **k: pytest.fail("the model loaded before the check"))
    scorer = tmp_path / "scorer"
    scorer.mkdir()
    (scorer / "sa_iqa.json").write_text(json.dumps({**GOOD, "level_values": [5.0, 4.0, 3.0]}))
    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    (tmp_path / "m.jsonl").write_text('{"image": "a.png", "dimension": "lighting", "mos": 3.0}\n')
    argv = ["reward=sa-iqa", f"reward.model={scorer}", f"data={tmp_path / 'm.jsonl'}", f"out={tmp_path / 'o'}"]
    assert run_cli("evaluate", run_evaluate, argv, schema=EvaluateSettings) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sa_iqa.json: level_values is [5.0, 4.0, 3.0]" in err


def test_evaluate_with_a_scorer_of_other_dimensions_is_refused_from_sa_iqa_json_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    """The scorer's sa_iqa.json says its dimensions: data rated on none of them is refused at once (it was found after
    the model had loaded, 13 s later)."""
    import reward.rewards.sa_iqa as sa_iqa

    monkeypatch.setattr(sa_iqa, "load_vlm", lambda *a, **k: pytest.fail("the model loaded before the check"))
    scorer = tmp_path / "scorer"
    scorer.mkdir()
    (scorer / "sa_iqa.json").write_text(json.dumps(GOOD))
    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    (tmp_path / "m.jsonl").write_text('{"image": "a.png", "dimension": "colour_cast", "mos": 3.0}\n')
    argv = ["reward=sa-iqa", f"reward.model={scorer}", f"data={tmp_path / 'm.jsonl'}", f"out={tmp_path / 'o'}"]
    assert run_cli("evaluate", run_evaluate, argv, schema=EvaluateSettings) == 2
    has = ", ".join(GOOD["queries"])
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: no row could be scored: 1 rows: the scorer has no dimension 'colour_cast' (it has {has}); compare "
        "its fused score with compare=fused"
    ]
    assert not (tmp_path / "o").exists()


def test_a_model_folder_with_a_damaged_json_file_is_refused_naming_it(tmp_path):
    from reward.vlm.loading import adapter_base, load_vlm
    from training.shared.plan_models import model_shape

    (tmp_path / "config.json").write_text('{"model_type": "qwen2_vl",\n "hidden_size": }')
    with pytest.raises(UserError, match=r"config.json:2: not JSON \(Expecting value\); the model folder is damaged"):
        load_vlm(tmp_path)
    with pytest.raises(UserError, match=r"config.json:2: not JSON"):
        model_shape(str(tmp_path))
    (tmp_path / "adapter_config.json").write_bytes(b'{"base_model_name_or_path": "\xe9"}')
    with pytest.raises(UserError, match=r"adapter_config.json: not UTF-8 text \(byte 29\)"):
        adapter_base(tmp_path)


@pytest.mark.parametrize(
    ("name", "body", "said"),
    [
        ("train.jsonl", b'{"image": "a.png", "mos": 3}\n{"image": "b.png", "mos": \n', "train.jsonl:2: not JSON"),
        ("part.json", b'[{"image": "a.png",\n "mos": 3}, {"image"', "part.json:2: not JSON"),
        ("train.csv", b"image,mos\na.png,3\nb.png,4,extra,fields\n", "train.csv:3: 4 fields, the header has 2"),
        (
            "data.jsonl",
            b'{"image": "a.png", "mos": 3}\n\xff\xfe{"image": "b.png", "mos": 4}\n',
            "data.jsonl:2: not UTF-8",
        ),
    ],
)
def test_an_hf_folder_of_malformed_files_is_refused_naming_the_file_and_line(tmp_path, name, body, said):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / name).write_bytes(body)
    with pytest.raises(ManifestError) as err:
        load_ratings(f"hf:{tmp_path / 'd'}")
    assert said in str(err.value) and str(err.value).startswith(f"hf:{tmp_path / 'd'}: datasets cannot read ")


def test_an_image_past_pil_limit_in_an_hf_dataset_is_a_counted_bad_row_not_a_decompression_bomb(tmp_path):
    import datasets

    Image.new("1", (13500, 13500)).save(tmp_path / "big.png")  # 182 million pixels, 22 kB
    Image.new("RGB", (16, 16), (200, 30, 30)).save(tmp_path / "ok.png")
    table = {"image": [str(tmp_path / "big.png"), str(tmp_path / "ok.png")], "mos": [3.0, 4.0]}
    datasets.Dataset.from_dict(table).cast_column("image", datasets.Image()).save_to_disk(tmp_path / "d")
    result = load_ratings(f"hf:{tmp_path / 'd'}", skip_bad=True)
    assert [r.mos for r in result.rows] == [4.0] and len(result.skipped) == 1
    assert "row 1: " in result.skipped[0].reason and "decompression bomb" in result.skipped[0].reason
    with pytest.raises(ManifestError, match=r"row 1: .*decompression bomb"):
        load_ratings(f"hf:{tmp_path / 'd'}", skip_bad=False)


def test_a_reward_hub_id_not_in_the_cache_is_refused_offline_in_one_line(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UserError) as err:
        get_reward("qbench", {"model": "SomeOrg/not-downloaded-vlm"})
    message = str(err.value)
    assert message.startswith("reward.model=SomeOrg/not-downloaded-vlm: not a folder, and the Hub repo")
    assert "not in the Hugging Face cache" in message and "hf download SomeOrg/not-downloaded-vlm" in message


def test_reward_pace_with_neither_protocol_nor_dimension_is_refused_naming_the_keys():
    with pytest.raises(UserError) as err:
        get_reward("pace", {"model": "/nowhere"})
    assert "reward.protocol=FILE (used as is) or reward.dimension='...' (routed/built), got neither" in str(err.value)


def test_the_judge_refuses_an_image_past_pil_limit_in_one_line(tmp_path):
    from reward.data.images import load_image  # what the judge decodes with (no decode guard: max_decode_pixels=null)

    Image.new("1", (13500, 13500)).save(tmp_path / "big.png")
    with pytest.raises(UserError, match=r"big.png: PIL refused .*Image size \(182250000 pixels\) exceeds limit"):
        load_image(Path(tmp_path / "big.png"), max_pixels=None)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'[{"question": "Is it sharp?",\n "candidates": ["\xe9"]}]', r"q.json:2: not UTF-8 text \(byte 47\)"),
        (b'{"question": "\xe9"}\n{"question": "Is it sharp?", "candidates": ["yes"]}\n', r"q.json:1: .*UTF-8"),
    ],
)
def test_a_question_file_that_is_not_utf8_is_refused_naming_the_line(tmp_path, body, said):
    from reward.qbench.a1_questions import load_questions

    (tmp_path / "q.json").write_bytes(body)
    with pytest.raises(ManifestError, match=said):
        load_questions(tmp_path / "q.json")


def test_a_log_line_that_is_not_utf8_is_left_out_like_a_torn_line(tmp_path):
    from reward.data.files import read_records

    (tmp_path / "scores.jsonl").write_bytes(
        b'{"image": "a.png", "score": 3.5}\n{"image": "\xff"}\n{"image": "b.png"}\n'
    )
    assert [r["image"] for r in read_records(tmp_path / "scores.jsonl")] == ["a.png", "b.png"]
