"""A model folder that cannot give a vision-language model (a text-only model, no weights, a shard missing, a
truncated ``model.safetensors``) is one line naming the folder and exit status 2, found from its files before any
model or processor loads; SmolVLM's processor dependency comes with the package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from conftest import run_script
from reward.core.errors import UserError
from reward.vlm.hub import check_models, safetensors_problem


def _broken(source: Path, folder: Path, case: str) -> Path:
    """A copy of the model folder ``source`` with one thing wrong."""
    shutil.copytree(source, folder)
    weights = folder / "model.safetensors"
    if case == "no weights":
        weights.unlink()
    elif case == "truncated weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a download cut short
    elif case == "a shard missing":
        weights.rename(folder / "model-00001-of-00002.safetensors")
        shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
        index = {"metadata": {}, "weight_map": shards}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


CASES = {  # case -> what the one line says
    "no weights": "no model weights in it",
    "truncated weights": "model.safetensors is truncated",
    "a shard missing": "names model-00002-of-00002.safetensors, which the folder lacks",
    "text-only model": "a text-only model (qwen2: no vision tower)",
}


def _data(folder: Path) -> Path:
    folder.mkdir()
    rows = []
    for i in range(3):
        Image.new("RGB", (32, 32), (40 * i, 90, 160)).save(folder / f"{i}.png")
        rows.append({"image": f"{i}.png", "dimension": "quality", "mos": 1.0 + i})
    (folder / "ratings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "ratings.jsonl"


def _nothing_loads(monkeypatch) -> None:
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model or processor loaded before the folder was checked")

    for cls in ("AutoModelForImageTextToText", "AutoProcessor", "AutoTokenizer", "AutoConfig"):
        monkeypatch.setattr(getattr(transformers, cls), "from_pretrained", refuse)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["sft", "evaluate"])
def test_a_model_folder_that_cannot_load_is_one_line_naming_it_before_anything_loads(
    command, case, tmp_path, tiny_vlm_path, tiny_lm_path, monkeypatch, capsys
):
    source = tiny_lm_path if case == "text-only model" else tiny_vlm_path
    folder = _broken(source, tmp_path / "model", case if case != "text-only model" else "")
    data = _data(tmp_path / "data")
    _nothing_loads(monkeypatch)
    if command == "sft":
        argv = [f"model.path={folder}", f"data.train={data}", "trainer.max_steps=1", f"out={tmp_path}/out"]
        status, err = run_script("training/sft.py", argv, capsys)
        key = "model.path"
    else:
        argv = ["reward=qbench", f"reward.model={folder}", f"data={data}", f"out={tmp_path}/out"]
        status, err = run_script("reward/evaluate.py", argv, capsys)
        key = "reward.model"
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"{key}={folder}" in err and CASES[case] in err, err


def test_a_scorer_folder_with_a_truncated_model_is_refused_naming_it(tiny_scorer_path, tmp_path, monkeypatch):
    from reward.rewards.registry import get_reward

    scorer = _broken(tiny_scorer_path, tmp_path / "scorer", "truncated weights")
    _nothing_loads(monkeypatch)
    with pytest.raises(UserError, match=rf"reward.model={scorer}: model.safetensors is truncated: \d+ bytes of the"):
        get_reward("sa-iqa", {"model": str(scorer)})


def test_a_safetensors_file_is_judged_from_its_header(tiny_vlm_path, tmp_path):
    whole = tiny_vlm_path / "model.safetensors"
    assert safetensors_problem(whole) is None and check_models({"model.path": str(tiny_vlm_path)}) is None
    (tmp_path / "garbage.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    damaged = safetensors_problem(tmp_path / "garbage.safetensors")
    assert damaged == "has a damaged header (not the JSON safetensors writes)"
    (tmp_path / "tiny.safetensors").write_bytes(b"\x01")
    assert "is truncated or not a safetensors file" in safetensors_problem(tmp_path / "tiny.safetensors")


def test_smolvlm_needs_num2words_and_the_package_installs_it():
    from importlib.metadata import requires

    assert any(r.split(";")[0].startswith("num2words") and "extra" not in r for r in requires("perceptual-rewards"))
    import transformers.models.smolvlm.processing_smolvlm  # noqa: F401 - imports num2words
