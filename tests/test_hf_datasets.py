"""``data=hf:NAME_OR_DIR[:SPLIT]``: Hugging Face ``datasets`` read wherever a ratings manifest is, columns named."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import MissingInputError
from reward.data import ManifestError, load_image, load_ratings
from reward.data.datasets import check_source
from reward.data.hf import parse_hf
from training.commands.sft import SftSettings

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SCHEMAS = {"evaluate": EvaluateSettings, "sft": SftSettings}


def _compose(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(name, overrides=overrides, schema=SCHEMAS[name])


def _images(n: int) -> list[Image.Image]:
    return [Image.fromarray(np.full((56, 56, 3), (25 * i) % 256, np.uint8)) for i in range(n)]


def _jsonl_twin(folder: Path, images: list[Image.Image], mos: list[float]) -> Path:
    """The same ratings as a JSONL manifest with PNG files."""
    (folder / "img").mkdir(parents=True)
    rows = []
    for i, (image, m) in enumerate(zip(images, mos, strict=True)):
        image.save(folder / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": m})
    path = folder / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_evaluate_reads_a_saved_dataset_through_named_columns_as_it_reads_the_same_manifest(tmp_path, tiny_vlm_path):
    images, mos = _images(8), [1 + 0.5 * i for i in range(8)]
    ds = datasets.Dataset.from_dict(
        {"picture": images, "score": mos, "aspect": ["lighting"] * 8, "note": ["x"] * 8},
        features=datasets.Features(
            picture=datasets.Image(),
            score=datasets.Value("float32"),
            aspect=datasets.Value("string"),
            note=datasets.Value("string"),
        ),
    )
    ds.save_to_disk(str(tmp_path / "saved"))
    twin = _jsonl_twin(tmp_path / "twin", images, mos)
    common = ["reward=qbench", f"reward.model={tiny_vlm_path}"]
    by_hf = run_evaluate(
        parse(
            EvaluateSettings,
            _compose(
                "evaluate",
                [
                    *common,
                    f"data=hf:{tmp_path / 'saved'}",
                    f"out={tmp_path / 'out-hf'}",
                    "data_columns.image=picture",
                    "data_columns.mos=score",
                    "data_columns.dimension=aspect",
                ],
            ),
        )
    )
    by_jsonl = run_evaluate(
        parse(EvaluateSettings, _compose("evaluate", [*common, f"data={twin}", f"out={tmp_path / 'out-jsonl'}"]))
    )
    assert by_hf["lighting"]["n"] == 8
    assert by_hf["lighting"]["srcc"] == pytest.approx(by_jsonl["lighting"]["srcc"], abs=1e-6)
    assert by_hf["lighting"]["plcc"] == pytest.approx(by_jsonl["lighting"]["plcc"], abs=1e-4)
    written = json.loads((tmp_path / "out-hf" / "metrics.json").read_text())
    assert written["meta"]["data"]["columns"] == {"image": "picture", "mos": "score", "dimension": "aspect"}


def _splits(tmp_path: Path) -> Path:
    """A DatasetDict (train 12, test 6) with the default column names and no dimension column."""

    def part(n: int, offset: int) -> datasets.Dataset:
        return datasets.Dataset.from_dict(
            {"image": _images(n), "mos": [1 + 4 * ((i + offset) % 5) / 4 for i in range(n)]},
            features=datasets.Features(image=datasets.Image(), mos=datasets.Value("float32")),
        )

    folder = tmp_path / "dict"
    datasets.DatasetDict(train=part(12, 0), test=part(6, 2)).save_to_disk(str(folder))
    return folder


def test_a_dataset_dict_gives_the_commands_default_split_or_the_one_named(tmp_path):
    folder = _splits(tmp_path)
    assert len(load_ratings(f"hf:{folder}", default_split="train")) == 12
    assert len(load_ratings(f"hf:{folder}", default_split="test")) == 6
    assert len(load_ratings(f"hf:{folder}")) == 18  # evaluation: all splits
    named = load_ratings(f"hf:{folder}:test", default_split="train")
    assert len(named) == 6 and {r.dimension for r in named} == {"quality"}  # no dimension column: quality
    assert named.info["split"] == "test"


def test_a_parquet_folder_is_read_with_load_dataset(tmp_path):
    ds = datasets.Dataset.from_dict(
        {"image": _images(4), "mos": [1.0, 2.0, 3.0, 4.0], "dimension": ["noise"] * 4},
        features=datasets.Features(
            image=datasets.Image(), mos=datasets.Value("float32"), dimension=datasets.Value("string")
        ),
    )
    (tmp_path / "pq").mkdir()
    ds.to_parquet(str(tmp_path / "pq" / "train.parquet"))
    rows = load_ratings(f"hf:{tmp_path / 'pq'}")
    assert [r.mos for r in rows] == [1.0, 2.0, 3.0, 4.0] and load_image(rows.rows[0].image).size == (56, 56)


def test_a_missing_column_or_split_or_folder_is_named_with_the_fix(tmp_path):
    folder = _splits(tmp_path)
    with pytest.raises(
        ManifestError, match=r"no column 'score' for the mos \(columns: image, mos\).*data_columns.mos"
    ):
        load_ratings(f"hf:{folder}:train", columns={"mos": "score"})
    with pytest.raises(ManifestError, match=r"no split 'validation'; it has train, test"):
        load_ratings(f"hf:{folder}:validation")
    with pytest.raises(MissingInputError, match=r"the folder .*/nowhere does not exist"):
        check_source(f"hf:{tmp_path / 'nowhere'}")
    assert parse_hf("hf:org/ratings:validation").split == "validation" and check_source("hf:org/ratings")


def test_splits_that_disagree_on_the_mos_type_are_named_in_one_line(tmp_path, capsys):
    def part(mos: list) -> datasets.Dataset:
        return datasets.Dataset.from_dict({"image": _images(len(mos)), "mos": mos})

    folder = tmp_path / "mixed"
    datasets.DatasetDict(train=part([1.0, 2.5]), test=part(["3.0", "4"])).save_to_disk(str(folder))
    with pytest.raises(ManifestError, match=r"disagree on the type of column\(s\) 'mos': train float64, test string"):
        load_ratings(f"hf:{folder}")
    assert [r.mos for r in load_ratings(f"hf:{folder}:train")] == [1.0, 2.5]  # one split is read as it is
    from conftest import run_cli

    capsys.readouterr()
    argv = ["reward=qbench", "reward.model=m", f"data=hf:{folder}", f"out={tmp_path}/out"]
    status, err = run_cli("evaluate", run_evaluate, argv, schema=EvaluateSettings), capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1 and f"hf:{folder}:train" in err, err


@pytest.mark.slow
def test_sft_trains_on_the_train_split_and_evaluates_on_the_test_split(tmp_path, tiny_vlm_path):
    from training.commands.sft import run as run_sft

    folder = _splits(tmp_path)
    out = tmp_path / "run"
    result = run_sft(
        parse(
            SftSettings,
            _compose(
                "sft",
                [
                    f"model.path={tiny_vlm_path}",
                    f"data.train=hf:{folder}",
                    f"data.test=hf:{folder}",
                    f"out={out}",
                    "prompt.type=1",
                    "prompt.dimensions=[quality]",
                    "trainer.max_steps=2",
                    "trainer.per_device_train_batch_size=4",
                    "trainer.gradient_accumulation_steps=1",
                    "eval_batch_size=8",
                ],
            ),
        )
    )
    assert result["skipped_train_rows"] == 0 and result["global_step"] == 2
    assert result["metrics"]["quality"]["n"] == 6  # the test split
    assert json.loads((out / "metrics.json").read_text())["meta"]["data"]["split"] == "test"
