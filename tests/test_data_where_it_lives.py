"""Your own data where it lives: every command that reads a data file naming images takes ``image_root=DIR`` (a
manifest kept apart from its images, e.g. on a shared or read-only mount) and ``allow_absolute_paths=true`` (images
named by absolute path), spelled the same everywhere; a symlinked image folder is read through the link, while
'..' still cannot climb out of the images' folder."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from conftest import photo_mos, real_photos, run_cli
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.config import parse
from reward.data import load_ratings
from reward.data.manifest import ALLOW_ABSOLUTE_HELP, IMAGE_ROOT_HELP

COMMANDS = {  # every command that reads a data file naming images: its settings class
    "evaluate": "reward.commands.evaluate:EvaluateSettings",
    "sft": "training.commands.sft:SftSettings",
    "fit": "fusion.commands.fit:FusionSettings",
    "grpo": "rl.commands.grpo_settings:GrpoSettings",
    "best_of_n": "rl.commands.best_of_n:BestOfNSettings",
    "flow_grpo": "rl.commands.flow_grpo_settings:FlowGrpoSettings",
    "qbench_eval": "reward.commands.qbench_eval:QbenchEvalSettings",
    "calibrate": "pace_judge.commands.calibrate:CalibrateSettings",
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_reading_images_from_a_data_file_takes_the_same_two_settings(command):
    import dataclasses
    import importlib

    module, name = COMMANDS[command].split(":")
    fields = {f.name: f for f in dataclasses.fields(getattr(importlib.import_module(module), name))}
    assert fields["image_root"].default is None and fields["image_root"].metadata["help"] == IMAGE_ROOT_HELP
    assert fields["allow_absolute_paths"].default is False
    assert fields["allow_absolute_paths"].metadata["help"] == ALLOW_ABSOLUTE_HELP


@pytest.fixture
def shared_photos(tmp_path: Path) -> Path:
    """Real photos in a read-only folder, as on a shared mount."""
    folder = tmp_path / "mnt" / "photos"
    real_photos(folder, n=6, size=48)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    yield folder
    folder.chmod(0o755)


def _manifest(path: Path, names: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"image": n, "dimension": "quality", "mos": photo_mos(i)} for i, n in enumerate(names)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _evaluate(tmp_path: Path, model: Path, manifest: Path, out: str, *extra: str) -> int:
    argv = ["reward=qbench", f"reward.model={model}", f"data={manifest}", f"out={tmp_path / out}", "num_workers=0"]
    return run_cli("evaluate", run_evaluate, [*argv, *extra], schema=EvaluateSettings)


def test_evaluate_reads_a_manifest_kept_apart_from_its_images_absolute_paths_and_a_symlinked_folder(
    tmp_path, tiny_vlm_path, shared_photos, capsys
):
    names = sorted(p.name for p in shared_photos.iterdir())
    apart = _manifest(tmp_path / "manifests" / "ratings.jsonl", names)
    assert _evaluate(tmp_path, tiny_vlm_path, apart, "apart", f"image_root={shared_photos}") == 0
    scored = [json.loads(line) for line in (tmp_path / "apart" / "scores.jsonl").read_text().splitlines()]
    assert [r["image"] for r in scored] == names  # named relative to image_root, as in the manifest

    absolute = _manifest(tmp_path / "manifests" / "absolute.jsonl", [str(shared_photos / n) for n in names])
    assert _evaluate(tmp_path, tiny_vlm_path, absolute, "refused") == 2
    err = capsys.readouterr().err
    assert "is absolute" in err and "allow_absolute_paths=true" in err
    assert _evaluate(tmp_path, tiny_vlm_path, absolute, "absolute", "allow_absolute_paths=true") == 0

    linked = tmp_path / "project"
    linked.mkdir()
    (linked / "images").symlink_to(shared_photos, target_is_directory=True)
    through_link = _manifest(linked / "ratings.jsonl", [f"images/{n}" for n in names])
    assert _evaluate(tmp_path, tiny_vlm_path, through_link, "linked") == 0
    metrics = json.loads((tmp_path / "linked" / "metrics.json").read_text())
    assert metrics["quality"]["n"] == 6 and metrics["skipped"] == 0
    assert sorted(p.name for p in shared_photos.iterdir()) == names  # nothing was written beside the images

    escape = _manifest(linked / "escape.jsonl", [f"../mnt/photos/{n}" for n in names])
    assert _evaluate(tmp_path, tiny_vlm_path, escape, "escape") == 2
    assert "climbs out of the images' folder" in capsys.readouterr().err


def test_a_manifest_apart_from_its_images_is_refused_before_the_model_loads_naming_image_root(
    tmp_path, shared_photos, capsys, monkeypatch
):
    names = sorted(p.name for p in shared_photos.iterdir())
    apart = _manifest(tmp_path / "manifests" / "ratings.jsonl", names)

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the images were looked up")

    monkeypatch.setattr("reward.commands.evaluate.get_reward", no_model)
    assert _evaluate(tmp_path, tmp_path / "no-model", apart, "refused") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: data={apart}: none of its 6 image files is found")
    assert err.endswith("read from the data file's folder: name the folder that holds the images with image_root=DIR")


def test_the_absolute_path_refusal_names_the_way_out(tmp_path, shared_photos):
    manifest = _manifest(tmp_path / "m.jsonl", [str(shared_photos / "photo0.png")])
    with pytest.raises(ValueError, match=r"m\.jsonl:1: .*is absolute.*image_root=DIR.*allow_absolute_paths=true"):
        load_ratings(manifest)
    assert load_ratings(manifest, allow_absolute_paths=True).rows[0].image == (shared_photos / "photo0.png").resolve()


def test_sft_reads_training_rows_from_image_root_and_absolute_paths(tmp_path, tiny_vlm_path, shared_photos):
    from reward.core.cli import compose
    from training.commands.sft import SftSettings
    from training.commands.sft_setup import checked_inputs
    from training.sft_data import manifest_dataset

    names = sorted(p.name for p in shared_photos.iterdir())
    apart = _manifest(tmp_path / "manifests" / "ratings.jsonl", names)
    overrides = [f"model.path={tiny_vlm_path}", f"data.train={apart}", f"out={tmp_path / 'out'}"]
    settings = checked_inputs(
        parse(SftSettings, compose("sft", [*overrides, f"image_root={shared_photos}"], schema=SftSettings))
    )
    assert settings.image_root == str(shared_photos) and settings.prompt.dimensions == ["quality"]
    queries = {"quality": {"question": "Q?", "response_prefix": "It is"}}
    dataset, skipped = manifest_dataset(apart, queries, ["good", "bad"], image_root=shared_photos)
    assert len(dataset) == 6 and skipped == 0
    absolute = _manifest(tmp_path / "abs.jsonl", [str(shared_photos / n) for n in names])
    dataset, skipped = manifest_dataset(absolute, queries, ["good", "bad"], allow_absolute_paths=True)
    assert len(dataset) == 6 and skipped == 0


def test_fit_and_the_inpainting_tasks_read_images_from_image_root(tmp_path, shared_photos):
    from fusion.inputs import load_pair_data
    from rl.inpaint_tasks import load_tasks

    names = sorted(p.name for p in shared_photos.iterdir())
    folder = tmp_path / "manifests"
    folder.mkdir()
    pairs = [{"a": names[i], "b": names[i + 1], "label": "a"} for i in range(5)]
    (folder / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    scores = [{"image": n, "lighting": 5.0 - i} for i, n in enumerate(names)]
    (folder / "scores.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scores))
    data = load_pair_data(folder / "pairs.jsonl", folder / "scores.jsonl", image_root=shared_photos)
    assert data.n_pairs == 5 and (data.x_a[:, 0] - data.x_b[:, 0] == 1.0).all()

    tasks = [{"image": n, "mask": n, "prompt": "a sofa"} for n in names[:3]]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    loaded, skipped = load_tasks(folder / "tasks.jsonl", skip_bad=False, image_root=shared_photos)
    assert len(loaded) == 3 and not skipped
