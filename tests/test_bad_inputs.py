"""Bad and careless inputs, as a new user types them: each ends in one clear message and exit status 2 (no
traceback), a counted skip, or a correct result — never a crash, a silent wrong number or a lost file."""

from __future__ import annotations

import ast
import json
import logging
import re
import secrets
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import run_script as _run_script
from reward.commands.evaluate import EvaluateSettings
from reward.core.config import parse
from reward.data import ManifestError, load_inpainting, load_ratings
from rl.commands.best_of_n import BestOfNSettings
from rl.commands.flow_grpo_settings import FlowGrpoSettings
from rl.commands.grpo_settings import GrpoSettings
from rl.study import StudySettings, listen
from training.commands.sft import SftSettings

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reward", "training", "rl", "fusion", "pace_judge")


def _is_entry_point(path: Path) -> bool:
    """A module with a top-level ``if __name__ == "__main__":`` block."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            return True
    return False


def _entry_points() -> list[str]:
    scripts = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    # (reward/__main__.py dispatches to these by name: python -m reward COMMAND, tested in test_install.py)
    return [s for s in [*scripts, "demo.py"] if _is_entry_point(ROOT / s) and not s.endswith("__main__.py")]


# For every entry point: arguments naming an input that does not exist (None: the command reads no input file).
MISSING_INPUT = {
    "reward/evaluate.py": ["reward.model=/nope/model", "data=/nope/ratings.jsonl", "out={tmp}/out"],
    "reward/dataset_manifest.py": ["data=koniq10k:/nope/koniq", "out={tmp}/m.jsonl"],
    "reward/qbench_eval.py": ["task=a1", "model.path=/nope/model", "data=/nope/questions.json", "out={tmp}/out"],
    "training/sft.py": ["model.path=/nope/model", "data.train=/nope/ratings.jsonl", "out={tmp}/out"],
    "training/grpo_scorer.py": ["model.path=/nope/model", "data.train=/nope/ratings.jsonl", "out={tmp}/out"],
    "training/photos.py": ["brisque", "data=/nope/ratings.jsonl"],
    "training/mos.py": ["raw=/nope/raw.jsonl"],
    "training/synthetic.py": None,
    "training/perception_questions.py": None,
    "rl/grpo.py": ["policy.path=/nope/model", "data=/nope/tasks.jsonl", "out={tmp}/out", "reward=scene-proxy"],
    "rl/best_of_n.py": ["reward=scene-proxy", "data=/nope/tasks.jsonl", "out={tmp}/out"],
    "rl/flow_grpo.py": ["generator.path=/nope/flux", "data=/nope/tasks.jsonl", "out={tmp}/out", "reward=scene-proxy"],
    "rl/tasks.py": None,
    "rl/study.py": ["serve", "run=/nope/run", "study={tmp}/study"],
    "fusion/fit.py": ["pairs=/nope/pairs.jsonl", "scores=/nope/scores.jsonl", "out={tmp}/w.json"],
    "pace_judge/judge.py": ["protocol=/nope/protocol.json", "images={tmp}", "out={tmp}/out", "model=/nope/m"],
    "pace_judge/memory.py": ["import", "memory={tmp}/memory", "protocol=/nope/protocol.json"],
    "pace_judge/calibrate.py": ["protocol=/nope/protocol.json", "benchmark=/nope/calibration.jsonl"],
    "demo.py": None,
}


def _unknown_key(script: str) -> list[str]:
    """The script's subcommand (if it takes one), then a key no command has."""
    argv = MISSING_INPUT[script]
    return [*([argv[0]] if argv and "=" not in argv[0] else []), "colour=red"]


def test_every_entry_point_has_a_row_in_the_table():
    assert sorted(_entry_points()) == sorted(MISSING_INPUT), "add the new entry point to MISSING_INPUT"


@pytest.mark.parametrize("script", sorted(MISSING_INPUT))
def test_an_unknown_key_exits_2_with_one_message_naming_it(script, capsys):
    status, err = _run_script(script, _unknown_key(script), capsys)
    assert status == 2 and "Traceback" not in err
    lines = err.splitlines()  # one problem a line, every problem at once (a missing required key too)
    assert lines[0].startswith("error: ") and "unknown key colour" in err
    assert len(lines) == 1 or all(line.startswith("  - ") for line in lines[1:]), err


# a setting given keys below it, or a section given one value: the spelling that works, named (script, argv, line)
WRONG_SHAPE = [
    (
        "pace_judge/judge.py",
        ["protocol={tmp}/p.json", "images={tmp}", "out={tmp}/o", "model.path={tmp}/m"],
        "error: model.path={tmp}/m: model is one setting (a string), not a section with keys; write model={tmp}/m",
    ),
    (
        "training/sft.py",
        ["model={tmp}/m", "data.train={tmp}/r.jsonl", "out={tmp}/o"],
        "error: model={tmp}/m: model is a section (dtype, device, device_map, attn_implementation, min_pixels, "
        "max_pixels, path, freeze_vision, freeze_aligner), not one value; write model.path={tmp}/m",
    ),
    (
        "reward/evaluate.py",
        ["reward=qbench", "reward.model.path={tmp}/m", "data={tmp}/r.jsonl", "out={tmp}/o"],
        "error: reward.model.path={tmp}/m: reward.model is one setting (a string), not a section with keys; write "
        "reward.model={tmp}/m",
    ),
    (
        "rl/grpo.py",
        ["reward=scene-proxy", "policy={tmp}/p", "data={tmp}/t.jsonl", "out={tmp}/o"],
        "error: policy={tmp}/p: policy is a section (path, dtype, vision, freeze_vision, image), not one value; write "
        "policy.path={tmp}/p",
    ),
    (
        "reward/evaluate.py",
        ["reward={tmp}/scorer", "data={tmp}/r.jsonl", "out={tmp}/o"],
        "error: unknown reward={tmp}/scorer. Choose one of: chat-judge, pace, qbench, reasoning-iqa, sa-iqa, "
        "scene-proxy. A path goes on a key of the option: reward=NAME reward.KEY={tmp}/scorer (its keys: --help).",
    ),
    (
        "rl/best_of_n.py",
        ["reward=scene-proxy", "data.path={tmp}/t.jsonl", "out={tmp}/o"],
        "error: data.path={tmp}/t.jsonl: data is one setting (a string), not a section with keys; write "
        "data={tmp}/t.jsonl",
    ),
]


@pytest.mark.parametrize(("script", "argv", "line"), WRONG_SHAPE, ids=[" ".join(c[1]) for c in WRONG_SHAPE])
def test_a_setting_given_as_a_section_or_a_section_as_one_value_is_one_line_with_the_spelling_that_works(
    script, argv, line, tmp_path, capsys
):
    """PACE takes model=DIR where SFT takes model.path=DIR: either one on the other command says the other spelling
    (it answered "Cannot convert 'DictConfig' to string")."""
    status, err = _run_script(script, [a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert status == 2 and err.splitlines() == [line.replace("{tmp}", str(tmp_path))], err


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("rl/best_of_n.py", ["reward=qbench", "reward.model={tmp}/nope", "judge={{name: qbench, model: {tmp}/no}}"]),
        ("rl/grpo.py", ["reward=qbench", "reward.model={tmp}/nope", "policy.path={tmp}", "eval_rewards=[]"]),
    ],
)
def test_a_missing_reward_model_is_named_with_the_settings_before_anything_loads(script, argv, tmp_path, capsys):
    """A reward's or judge's model folder that is not there: named with the other settings' problems, at once (it was
    a ValueError traceback after the other models had loaded)."""
    GOOD.save(tmp_path / "a.png")
    GOOD.convert("L").save(tmp_path / "m.png")
    (tmp_path / "t.jsonl").write_text(json.dumps({"image": "a.png", "mask": "m.png", "prompt": "a room"}) + "\n")
    given = [a.replace("{tmp}", str(tmp_path)).replace("{{", "{").replace("}}", "}") for a in argv]
    status, err = _run_script(script, [*given, f"data={tmp_path}/t.jsonl", f"out={tmp_path}/out"], capsys)
    assert status == 2 and "Traceback" not in err, err
    assert f"reward.model={tmp_path}/nope: no such folder" in err, err
    assert "judge" not in script or f"judge.model={tmp_path}/no: no such folder" in err, err
    assert not (tmp_path / "out").exists()


def test_mos_into_a_folder_beside_its_images_is_one_line_and_writes_nothing(tmp_path, capsys):
    """The MOS manifest must sit where its image paths still lead: out= elsewhere was a ValueError traceback, after
    an empty out folder had been made."""
    (tmp_path / "raw" / "img").mkdir(parents=True)
    GOOD.save(tmp_path / "raw" / "img" / "a.png")
    rows = [
        {"image": "img/a.png", "dimension": "quality", "annotator": f"r{i}", "rating": 3 + i % 2} for i in range(4)
    ]
    (tmp_path / "raw" / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [f"raw={tmp_path}/raw/raw.jsonl", f"out={tmp_path}/elsewhere"]
    status, err = _run_script("training/mos.py", argv, capsys)
    assert status == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"is outside the output folder out={tmp_path}/elsewhere" in err and f"(out={tmp_path}/raw)" in err, err
    assert not (tmp_path / "elsewhere").exists()


# the model libraries, seconds to import each: none is needed to check a command's settings
MODEL_LIBRARIES = ("torch", "transformers", "trl", "diffusers", "peft", "deepspeed", "matplotlib")
# the config groups' options, whose settings are checked too: each reward, a diffusers generator, Q-Bench's A3
CHOSEN = [
    *(["reward/evaluate.py", [f"reward={name}", "colour=red"]] for name in ("qbench", "sa-iqa", "chat-judge")),
    *(["reward/evaluate.py", [f"reward={name}", "colour=red"]] for name in ("reasoning-iqa", "pace", "scene-proxy")),
    ["rl/grpo.py", ["reward=sa-iqa", "generator=flux-fill", "colour=red"]],
    ["rl/best_of_n.py", ["reward=pace", "generator=sd15-inpaint", "colour=red"]],
    ["reward/qbench_eval.py", ["task=a3", "reward=qbench", "colour=red"]],
]
REFUSE_ALL = """
import json, runpy, sys
runs, libraries = json.loads(sys.argv[1])
for script, argv in runs:
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        assert exit_.code == 2, (script, exit_.code)
    else:
        raise AssertionError(f"{script} ran with an unknown key")
    loaded = [name for name in libraries if name in sys.modules]
    assert not loaded, (script, loaded)
"""


def test_an_unknown_key_is_refused_before_any_model_library_is_imported():
    """A mistyped key is answered in about a second: no command imports a model library (torch included) before its
    settings are checked, whichever reward or generator is chosen (best_of_n took 8 s to refuse one, importing
    transformers for a callback it never uses; evaluate imported torch, SciPy and matplotlib to refuse one)."""
    runs = [[str(ROOT / script), _unknown_key(script)] for script in sorted(MISSING_INPUT)]
    runs += [[str(ROOT / script), argv] for script, argv in CHOSEN]
    cmd = [sys.executable, "-c", REFUSE_ALL, json.dumps([runs, MODEL_LIBRARIES])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("unknown key colour") == len(runs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--colour", "red"], "unrecognized arguments: --colour red"),
        (["--repeats", "0"], "--repeats 0: give 1 or more"),
        (["--base", "/nope"], "--base /nope: no checkout of this project"),
    ],
)
def test_the_answer_speed_bench_refuses_bad_arguments_in_one_line_before_running_anything(argv, message, tmp_path):
    """bench/answer_speed.py: a bad argument is one line naming it, exit 2, before any command is run or timed."""
    cmd = [sys.executable, "-c", REFUSE_BENCH, str(ROOT / "bench/answer_speed.py"), *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == "" and not list(tmp_path.iterdir())  # nothing measured, nothing written


REFUSE_BENCH = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    assert not [m for m in ("torch", "transformers") if m in sys.modules]
"""


@pytest.mark.parametrize("script", sorted(s for s, a in MISSING_INPUT.items() if a))
def test_a_missing_input_exits_2_with_one_message_naming_the_file(script, tmp_path, capsys):
    GOOD.save(tmp_path / "an_image.png")  # a folder of images where one is wanted
    argv = [a.replace("{tmp}", str(tmp_path)) for a in MISSING_INPUT[script]]
    status, err = _run_script(script, argv, capsys)
    assert status == 2 and "Traceback" not in err, err
    assert "/nope/" in err, err  # the file is named


@pytest.mark.slow
def test_under_accelerate_launch_the_message_is_printed_once(tmp_path):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    cmd += [str(ROOT / "reward/evaluate.py"), "colour=red", "data=x", f"out={tmp_path / 'run'}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0
    assert (done.stdout + done.stderr).count("error: unknown key colour") == 1  # not once per process, not lost


# ------------------------------------------------------------------------------------------ GRPO on the scorer

# settings and data training/grpo_scorer.py refuses before any model loads (model.path names none: a command that
# tried to load it would say so instead); {data}: a good manifest of two rows rated on 'quality'
GRPO_SCORER_REFUSED = {
    "no reward": (["rewards=[]"], "rewards=[]: name at least one of ['score', 'format', 'degradation', 'ranking']"),
    "mos_range of one number": (["data.mos_range=[5]"], "data.mos_range=[5.0]: give [low, high] with low < high"),
    "mos_range with equal ends": (["data.mos_range=[3,3]"], "data.mos_range=[3.0, 3.0]: give [low, high]"),
    "a dimension not in the data": (["data.dimension=sharpness"], "data.dimension='sharpness': no row of data.train"),
    "a synthetic dimension that is none": (["data.train=synthetic", "data.dimension=glare"], "the synthetic scenes"),
    "a bad row": (["data.train={bad}"], "bad.jsonl:2: 'image' image 'img/missing.png' not found"),
    "a MOS outside the scale": (["data.mos_range=[1,3.5]"], "ratings.jsonl:2: mos 4 is outside mos_range (1.0, 3.5)"),
    "two dimensions": (["data.train={two}"], "rows rated on 2 dimensions ['quality', 'sharpness']"),
    "fewer rows than a step": (["trainer.per_device_train_batch_size=18"], "2 rows of 'quality', fewer than the 3"),
    "one image to rank": (["trainer.per_device_train_batch_size=6"], "a step holds 1 image(s) of 6 answers"),
}


@pytest.mark.parametrize("case", sorted(GRPO_SCORER_REFUSED))
def test_grpo_scorer_refuses_bad_settings_and_data_in_one_line_before_loading(case, tmp_path, capsys):
    given, message = GRPO_SCORER_REFUSED[case]
    good = [_row("good.png", 3.0), _row("good.png", 4.0)]
    _ratings(tmp_path, good, {"good.png": GOOD})
    files = {
        "{data}": tmp_path / "ratings.jsonl",
        "{bad}": tmp_path / "bad.jsonl",
        "{two}": tmp_path / "two.jsonl",
    }
    for name, rows in (
        ("bad", [good[0], _row("missing.png")]),
        ("two", [*good, {**good[0], "dimension": "sharpness"}]),
    ):
        files[f"{{{name}}}"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = {"model.path": "/nope/model", "data.train": "{data}", "out": f"{tmp_path}/out"}
    settings |= dict(a.split("=", 1) for a in given)
    argv = [f"{key}={files.get(value, value)}" for key, value in settings.items()]
    status, err = _run_script("training/grpo_scorer.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert message in err and "/nope/model" not in err, err
    assert not (tmp_path / "out").exists()  # nothing written
    if case == "a bad row":
        assert "data.skip_bad=true" in err, err  # the way to skip it, named


def _reasoning_folder(folder: Path, change) -> Path:
    from reward.rewards.reasoning_iqa import scorer_meta
    from reward.rewards.scorer_folder import FORMAT

    meta = {"format": FORMAT, **scorer_meta("q-insight")}
    change(meta)
    folder.mkdir()
    (folder / "sa_iqa.json").write_text(json.dumps(meta))
    return folder


# a GRPO-trained scorer folder whose sa_iqa.json is incomplete (no weights beside it: a reward that got as far as
# loading would say that instead)
REASONING_FOLDERS = {
    "no prompt": (lambda m: m["reasoning"].pop("prompt"), "reasoning.prompt is null, not a non-empty string"),
    "an unknown prompt": (lambda m: m["reasoning"].update(prompt="r2"), "reasoning.prompt 'r2' is none of"),
    "no answer prefix": (lambda m: m["reasoning"].update(answer_prefix=7), "reasoning.answer_prefix is 7"),
    "a reversed mos_range": (lambda m: m["reasoning"].update(mos_range=[5, 1]), "reasoning.mos_range is [5, 1]"),
    "a mos_range of text": (lambda m: m["reasoning"].update(mos_range=["1", 5]), "not [low, high] with low < high"),
    "a system turn of a list": (lambda m: m["reasoning"].update(system=["x"]), 'reasoning.system is ["x"]'),
    "reasoning not an object": (lambda m: m.update(reasoning="q-insight"), "reasoning is 'q-insight', not an object"),
    "no quality query": (
        lambda m: m.update(queries={"sharpness": m["queries"]["quality"]}),
        "queries holds ['sharpness'], not the 'quality' query",
    ),
}


@pytest.mark.parametrize("case", sorted(REASONING_FOLDERS))
def test_an_incomplete_reasoning_scorer_folder_is_refused_naming_its_file(case, tmp_path, capsys):
    change, message = REASONING_FOLDERS[case]
    scorer = _reasoning_folder(tmp_path / "scorer", change)
    manifest = _ratings(tmp_path / "data", [_row("good.png")], {"good.png": GOOD})
    argv = ["reward=reasoning-iqa", f"reward.model={scorer}", f"data={manifest}", f"out={tmp_path}/out"]
    status, err = _run_script("reward/evaluate.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{scorer}/sa_iqa.json" in err and message in err and "training/grpo_scorer.py" in err, err


# ------------------------------------------------------------------------------------------ manifests


def _ratings(folder: Path, rows: list, images: dict[str, Image.Image | bytes] | None = None) -> Path:
    (folder / "img").mkdir(parents=True, exist_ok=True)
    for name, content in (images or {}).items():
        path = folder / "img" / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            content.save(path)
    path = folder / "ratings.jsonl"
    path.write_bytes(b"".join(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode() for r in rows))
    return path


def _row(image: str, mos: float = 3.0) -> dict:
    return {"image": f"img/{image}", "dimension": "quality", "mos": mos}


GOOD = Image.fromarray(np.full((8, 8, 3), 120, np.uint8))

BAD_ROWS = {
    "corrupt PNG": (_row("corrupt.png"), {"corrupt.png": b"\x89PNG\r\n\x1a\n garbage"}, "cannot read the image"),
    "empty image file": (_row("empty.png"), {"empty.png": b""}, "cannot read the image"),
    "path climbing out": ({**_row("x"), "image": "../../etc/passwd"}, {}, "climbs out of the images' folder"),
    "absolute path": ({**_row("x"), "image": "/etc/passwd"}, {}, "is absolute"),
    "NaN MOS": (b'{"image": "img/good.png", "dimension": "quality", "mos": NaN}\n', {}, "must be a finite number"),
    "MOS out of range": (_row("good.png", 7.5), {}, "outside mos_range"),
    "missing image": (_row("missing.png"), {}, "not found"),
    "broken JSON": (b'{"image": "img/good.png", "dimension": \n', {}, "invalid JSON"),
    "not UTF-8": (b'{"image": "img/caf\xe9.png", "dimension": "quality", "mos": 3}\n', {}, "not UTF-8"),
    "missing field": ({"image": "img/good.png", "mos": 3}, {}, "missing field(s) 'dimension'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_row_is_named_by_file_and_line_or_skipped_and_counted(case, tmp_path):
    row, images, message = BAD_ROWS[case]
    manifest = _ratings(tmp_path, [_row("good.png"), row, _row("good.png", 4.0)], {"good.png": GOOD, **images})
    with pytest.raises(ManifestError, match=f"ratings.jsonl:2: .*{message}".replace("(", r"\(").replace(")", r"\)")):
        load_ratings(manifest, mos_range=(1, 5))
    result = load_ratings(manifest, mos_range=(1, 5), skip_bad=True)
    assert [r.line for r in result.rows] == [1, 3] and [s.line for s in result.skipped] == [2]


@pytest.mark.parametrize("mode", ["I;16", "RGBA", "P", "L", "CMYK"])
def test_unusual_image_modes_are_read_as_rgb(mode, tmp_path):
    image = GOOD.convert("RGBA" if mode == "RGBA" else "L").convert(mode) if mode != "I;16" else None
    if image is None:
        image = Image.fromarray(np.full((8, 8), 40000, np.uint16))
    manifest = _ratings(tmp_path, [_row("odd.png" if mode != "CMYK" else "odd.jpg")], {})
    image.save(tmp_path / "img" / ("odd.png" if mode != "CMYK" else "odd.jpg"))
    (row,) = load_ratings(manifest).rows
    from reward.data import load_image

    loaded = load_image(row.image)
    assert loaded.mode == "RGB" and loaded.size == (8, 8)


def test_an_empty_manifest_and_an_all_bad_manifest_are_refused_even_with_skip_bad(tmp_path):
    empty = _ratings(tmp_path / "e", [b"\n"])
    with pytest.raises(ManifestError, match="empty manifest"):
        load_ratings(empty, skip_bad=True)
    bad = _ratings(tmp_path / "b", [_row("missing.png"), _row("gone.png")])
    with pytest.raises(ManifestError, match="all 2 rows are bad"):
        load_ratings(bad, skip_bad=True)


def test_a_tasks_manifest_with_a_non_utf8_line_names_it_even_with_skip_bad(tmp_path):
    GOOD.save(tmp_path / "a.png")
    GOOD.convert("L").save(tmp_path / "m.png")
    good = json.dumps({"image": "a.png", "mask": "m.png", "prompt": "a room"}).encode()
    (tmp_path / "tasks.jsonl").write_bytes(
        good + b"\n" + b'{"image": "a.png", "mask": "m.png", "prompt": "caf\xe9"}\n'
    )
    with pytest.raises(ManifestError, match=r"tasks.jsonl:2: not UTF-8"):
        load_inpainting(tmp_path / "tasks.jsonl")
    result = load_inpainting(tmp_path / "tasks.jsonl", skip_bad=True)
    assert len(result.rows) == 1 and result.skipped[0].line == 2 and "not UTF-8" in result.skipped[0].reason


# ------------------------------------------------------------------------------------------ Q-Bench+ files


@pytest.mark.parametrize("task", ["a1", "a2"])
@pytest.mark.parametrize("target", ["/etc/passwd", "{tmp}/elsewhere/real.png"])
def test_a_question_file_naming_an_absolute_path_is_refused_unless_allowed(task, target, tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    GOOD.save(tmp_path / "elsewhere" / "real.png")
    image = target.replace("{tmp}", str(tmp_path))
    row = {"img_path": image, "question": "Is it blurry?", "candidates": ["Yes", "No"], "correct_ans": "No"}
    if task == "a2":
        row = {"img_path": image, "golden_description": "A sharp grey square."}
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "questions.json").write_text(json.dumps([row]))
    argv = [f"task={task}", f"data={tmp_path}/q/questions.json", "model.path=/nope/model", f"out={tmp_path}/out"]
    status, err = _run_script("reward/qbench_eval.py", argv, capsys)
    assert status == 2 and "Traceback" not in err, err
    assert "questions.json:1" in err and "is absolute" in err and "allow_absolute_paths=true" in err, err
    assert not (tmp_path / "out").exists()  # refused before anything was written
    status, err = _run_script("reward/qbench_eval.py", [*argv, "allow_absolute_paths=true"], capsys)
    assert status == 2 and "Traceback" not in err, err
    if image == "/etc/passwd":  # allowed, but not an image: named as such
        assert "is unusable" in err or "cannot read the image" in err, err
    else:  # the question file is accepted: the missing model is the next problem
        assert "/nope/model" in err and "is absolute" not in err, err


def test_log_lines_follow_stdout_and_never_reach_a_closed_stream(monkeypatch, capfd):
    """A command run in-process (a notebook, a test) under redirected stdout must not leave the log bound to it."""
    import io
    import logging

    from reward.core.cli import setup_logging

    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_perceptual_rewards", False)]
    for h in ours:
        root.removeHandler(h)
    try:
        captured = io.StringIO()
        monkeypatch.setattr(sys, "stdout", captured)
        setup_logging()
        logging.getLogger("probe").info("while redirected")
        assert "while redirected" in captured.getvalue()
        monkeypatch.undo()
        captured.close()
        logging.getLogger("probe").info("after the redirection")
        out, err = capfd.readouterr()
        assert "Logging error" not in err and "after the redirection" in out
    finally:
        for h in [h for h in root.handlers if getattr(h, "_perceptual_rewards", False)]:
            root.removeHandler(h)
        for h in ours:
            root.addHandler(h)


# ------------------------------------------------------------------------------------------ the study's files


def _rewrite(run: Path, **change) -> None:
    """The run's second row (scores.jsonl, or heldout/pairs.jsonl) with ``change``; a value of None drops the key."""
    table = run / "scores.jsonl" if (run / "scores.jsonl").exists() else run / "heldout" / "pairs.jsonl"
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    rows[1] = {k: v for k, v in {**rows[1], **change}.items() if v is not None}
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _link_out(run: Path, name: str) -> None:
    (run / name).unlink()
    (run / name).symlink_to(run.parent / "outside.png")


# a run's files, broken: case -> (its command, how, what the one line says after the file and line)
STUDY_RUNS = {
    "a file by absolute path": ("best_of_n", lambda r: _rewrite(r, file=str(r.parent / "outside.png")), "is absolute"),
    "a file climbing out": ("best_of_n", lambda r: _rewrite(r, file="../../outside.png"), "climbs out"),
    "a file that is a number": ("best_of_n", lambda r: _rewrite(r, file=3), "must be a non-empty string"),
    "a pick linked out of the run": ("best_of_n", lambda r: _link_out(r, "random/t1.png"), "outside the run"),
    "a pick that is no PNG": ("best_of_n", lambda r: (r / "chosen/t1.png").write_text("key=1"), "is not a PNG"),
    "a row without prompt": ("best_of_n", lambda r: _rewrite(r, prompt=None), "'prompt' must be a text, got nothing"),
    "a line that is not JSON": ("best_of_n", lambda r: _rewrite(r, task=[]), "'task' must be a text, got list"),
    "a held-out index that is a string": ("grpo", lambda r: _rewrite(r, index="0001"), "'index' must be an integer"),
    "a held-out index that is a bool": ("grpo", lambda r: _rewrite(r, index=True), "'index' must be an integer"),
    "a held-out image linked out": ("grpo", lambda r: _link_out(r, "heldout/0001-base.png"), "outside the run"),
    "a held-out row without task": ("grpo", lambda r: _rewrite(r, task=None), "'task' must be a text"),
}


@pytest.mark.parametrize("case", sorted(STUDY_RUNS))
def test_a_run_naming_anything_outside_it_or_lacking_a_field_is_refused_naming_file_and_line(case, tmp_path, capsys):
    from test_study import write_run

    command, breaks, message = STUDY_RUNS[case]
    run = write_run(tmp_path, command)
    GOOD.save(tmp_path / "outside.png")
    breaks(run)
    status, err = _run_script("rl/study.py", ["serve", f"run={run}", f"study={tmp_path / 'study'}", "port=0"], capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert re.search(r"(scores|pairs)\.jsonl:2: ", err) and message in err, err
    assert not (tmp_path / "study").exists()  # refused before anything was written, let alone served


_PAIRS = [{"pair": k, "left": "method", "prompt": "p"} for k in range(2)]
_RECORD = {"command": "best_of_n", "run": "RUN", "method": "the reward's pick", "baseline": "a random pick"}
# a study's files, broken: case -> (file -> content (bytes as they are, else JSON; JSONL for answers), the line)
STUDY_FILES = {
    "study.json without pairs": ({"study.json": _RECORD}, "study.json: 'pairs' must be a list"),
    "study.json pairs not a list": ({"study.json": {**_RECORD, "pairs": "0-1"}}, "study.json: 'pairs' must be a list"),
    "a pair of neither side": (
        {"study.json": {**_RECORD, "pairs": [_PAIRS[0], {**_PAIRS[1], "left": "both"}]}},
        "study.json: pairs[1]: 'left' must be 'method' or 'baseline'",
    ),
    "a pair out of order": ({"study.json": {**_RECORD, "pairs": _PAIRS[::-1]}}, "study.json: pairs[0] must be an"),
    "study.json without command": ({"study.json": {"pairs": _PAIRS}}, "study.json: 'command' must be a text"),
    "study.json nested too deep": ({"study.json": b"[" * 100_000}, "study.json: not usable JSON (nested too deeply)"),
    "an answer to a pair the study has not": ([{"pair": 7}], "alice.jsonl:2: 'pair' must be one of the study's"),
    "an answer's pair a string": ([{"pair": "1"}], "alice.jsonl:2: 'pair' must be one of the study's pairs"),
    "a choice of none": ([{"choice": "same"}], "alice.jsonl:2: 'choice' must be one of left, comparable, right"),
    "an answer without rater": ([{"rater": None}], "alice.jsonl:2: 'rater' must be a name"),
    "an answer that is a list": ([[1]], "alice.jsonl:2: an answer is an object"),
}


def _write_study(study: Path, files) -> None:
    """The study's files replaced: ``files`` a mapping (study.json's content), or the second answer of alice's."""
    if isinstance(files, dict):
        for name, content in files.items():
            (study / name).write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
        return
    good = {"rater": "alice", "pair": 0, "choice": "left"}
    second = (
        files[0]
        if not isinstance(files[0], dict)
        else {k: v for k, v in {**good, **files[0]}.items() if v is not None}
    )
    (study / "answers").mkdir(exist_ok=True)
    (study / "answers" / "alice.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(second) + "\n")


@pytest.mark.parametrize("command", ["report", "serve"])
@pytest.mark.parametrize("case", sorted(STUDY_FILES))
def test_a_bad_study_file_is_refused_by_report_and_serve_naming_file_and_line(case, command, tmp_path, capsys):
    from test_study import write_run

    run, study = write_run(tmp_path), tmp_path / "study"
    listen(StudySettings(study=str(study), run=str(run), port=0)).server_close()  # a study as serve makes it
    files, message = STUDY_FILES[case]
    _write_study(study, files)
    before = {p: p.read_bytes() for p in study.rglob("*") if p.is_file()}
    argv = [command, f"study={study}", *([f"run={run}", "port=0"] if command == "serve" else [])]
    status, err = _run_script("rl/study.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert message in err, err
    assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file()} == before  # nothing written


# ------------------------------------------------------------------------------------------ secrets


# a key pasted where the name of its environment variable belongs: command -> its settings, the key's setting
PASTED_KEYS = {
    "reward/evaluate.py": (
        ["reward=chat-judge", "reward.server.base_url=http://127.0.0.1:9/v1", "data={tmp}/r.jsonl", "out={tmp}/out"],
        "reward.server.api_key_env",
    ),
    "reward/qbench_eval.py": (
        [
            "task=a2",
            "model.path=/nope/m",
            "data={tmp}/d.json",
            "a2.judge.base_url=http://127.0.0.1:9/v1",
            "out={tmp}/out",
        ],
        "a2.judge.api_key_env",
    ),
    "pace_judge/judge.py": (
        [
            "protocol={tmp}/p.json",
            "images={tmp}",
            "out={tmp}/out",
            "backend=openai",
            "server.base_url=http://127.0.0.1:9/v1",
        ],
        "server.api_key_env",
    ),
}


@pytest.mark.parametrize("key", ["sk-proj-{hex}", "{hex}"])  # no variable's name; a name no variable has here
@pytest.mark.parametrize("script", sorted(PASTED_KEYS))
def test_a_key_given_for_its_variables_name_is_refused_in_one_line_never_shown(script, key, tmp_path, capsys):
    key = key.format(hex=secrets.token_hex(16))
    argv, setting = PASTED_KEYS[script]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    status, err = _run_script(script, [*argv, f"{setting}={key}"], capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"{setting}: names no environment variable set here" in err and key not in err, err
    assert not (tmp_path / "out").exists()  # refused before anything was written


# ------------------------------------------------------------------------------------------ output folders


def _sft_prepare(cfg) -> None:
    from reward.core.config import parse
    from training.commands.sft_setup import check_output_folder

    check_output_folder(parse(SftSettings, cfg)).create()


def _grpo_prepare(cfg) -> None:
    from rl.commands.grpo_launch import check_output_folder

    check_output_folder(parse(GrpoSettings, cfg)).create()


def _best_of_n_prepare(cfg) -> None:
    from rl.commands.best_of_n import prepare

    prepare(parse(BestOfNSettings, cfg))


def _flow_grpo_prepare(cfg) -> None:
    from rl.commands.flow_grpo import prepare

    s = parse(FlowGrpoSettings, cfg)
    prepare(s, Path(s.out))


# config -> (its command module, settings of a run into {out}, what decides the folder, the key naming the folder)
SCHEMAS = {"sft": SftSettings, "grpo": GrpoSettings, "best_of_n": BestOfNSettings, "flow_grpo": FlowGrpoSettings}
REUSED_FOLDER = {
    "sft": (
        "training.commands.sft",
        ["model.path=m", "data.train=synthetic", "trainer.max_steps=2", "out={out}", "resume=never"],
        _sft_prepare,
        "out",
    ),
    "grpo": (
        "rl.commands.grpo",
        ["policy.path=p", "data=t.jsonl", "reward=scene-proxy", "out={out}", "resume=never"],
        _grpo_prepare,
        "out",
    ),
    "best_of_n": (
        "rl.commands.best_of_n",
        ["reward=scene-proxy", "data=t.jsonl", "out={out}"],
        _best_of_n_prepare,
        "out",
    ),
    "flow_grpo": (
        "rl.commands.flow_grpo",
        ["generator.path=g", "data=t.jsonl", "reward=scene-proxy", "out={out}", "resume=never"],
        _flow_grpo_prepare,
        "out",
    ),
}


@pytest.mark.parametrize("config", sorted(REUSED_FOLDER))
def test_a_reused_folder_is_refused_with_ways_out_that_the_command_accepts(config, tmp_path):
    """The refusal's advice (another folder, resume, overwrite=true) names only settings the command has, with values
    it accepts: a user following it must not meet 'unknown key' or an invalid value next."""
    import re

    from reward.core.cli import compose
    from reward.core.errors import UserError

    _, argv, prepare, out_key = REUSED_FOLDER[config]
    schema = SCHEMAS[config]
    (tmp_path / "t.jsonl").write_text("")  # the tasks named (grpo checks that its data exists with the settings)
    argv = [a.replace("{out}", str(tmp_path / "run")).replace("=t.jsonl", f"={tmp_path}/t.jsonl") for a in argv]
    prepare(compose(config, [*argv, "overwrite=true"], schema=schema))  # the first run makes the folder
    (tmp_path / "run" / "log.txt").write_text("step 1\n")  # and starts (a run that never started is replaced)
    with pytest.raises(UserError) as refused:
        prepare(
            compose(config, argv, schema=schema)
        )  # the same run again (overwrite= is no part of what a run is), not resumed
    message = str(refused.value)
    assert "holds this same run already" in message, message
    assert f"another {out_key}=" in message, message
    for key, value in re.findall(r"\b([a-z_][a-z_.]*)=(\S*)", message):
        if key != out_key:
            advice = f"{key}={value.rstrip(',.;')}"
            parse(schema, compose(config, [*(a for a in argv if not a.startswith(f"{key}=")), advice]))


# ------------------------------------------------------------------------------------------ output paths

# For every entry point: a command line whose output path is {value} (with overwrite=true where the command has it:
# an empty or "." output moved the current folder aside).
OUTPUT_PATH = {
    "reward/evaluate.py": ["reward=qbench", "reward.model=m", "data=d.jsonl", "out={value}", "overwrite=true"],
    "reward/dataset_manifest.py": ["data=koniq10k:k", "out={value}", "overwrite=true"],
    "reward/qbench_eval.py": ["task=a1", "model.path=m", "data=q.json", "out={value}", "overwrite=true"],
    "training/sft.py": ["model.path=m", "data.train=d.jsonl", "out={value}", "overwrite=true"],
    "training/grpo_scorer.py": ["model.path=m", "data.train=d.jsonl", "out={value}", "overwrite=true"],
    "training/photos.py": ["heldout", "out={value}"],
    "training/mos.py": ["raw=r.jsonl", "out={value}"],
    "training/synthetic.py": ["out={value}"],
    "training/perception_questions.py": ["out={value}"],
    "rl/grpo.py": ["policy.path=p", "data=t.jsonl", "reward=scene-proxy", "out={value}", "overwrite=true"],
    "rl/flow_grpo.py": ["generator.path=g", "data=t.jsonl", "reward=scene-proxy", "out={value}", "overwrite=true"],
    "rl/best_of_n.py": ["reward=scene-proxy", "data=t.jsonl", "out={value}", "overwrite=true"],
    "rl/tasks.py": ["out={value}"],
    "rl/study.py": ["serve", "run=r", "study={value}", "overwrite=true"],
    "fusion/fit.py": ["pairs=p.jsonl", "scores=s.jsonl", "out={value}", "overwrite=true"],
    "pace_judge/judge.py": ["protocol=p.json", "images=i", "model=m", "out={value}", "overwrite=true"],
    "pace_judge/memory.py": ["import", "memory={value}", "protocol=p.json"],
    "pace_judge/calibrate.py": ["protocol=p.json", "benchmark=b.jsonl", "output={value}"],
    "demo.py": ["out={value}", "overwrite=true"],
}
PATH_PROBLEMS = {"": "is empty", "./": "is the current folder", "x/..": "is the current folder", "a" * 260: "too long"}


def test_every_entry_point_has_an_output_path_row():
    assert sorted(OUTPUT_PATH) == sorted(MISSING_INPUT), "add the new entry point to OUTPUT_PATH"


@pytest.mark.parametrize("value", sorted(PATH_PROBLEMS), ids=["empty", "dot-slash", "a" * 8 + "...", "x-dotdot"])
@pytest.mark.parametrize("script", sorted(OUTPUT_PATH))
def test_an_output_path_that_is_empty_the_current_folder_or_too_long_is_refused(
    script, value, tmp_path, monkeypatch, capsys
):
    """An unset shell variable (out=), ./ or x/.. must never make a command write into the current folder, nor move it
    aside with overwrite=true; a name the file system cannot take is one line too, not an OSError traceback."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "my-notes.txt").write_text("mine")
    monkeypatch.chdir(here)
    argv = [a.replace("{value}", value) for a in OUTPUT_PATH[script]]
    status, err = _run_script(script, argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    key = next(a.split("=")[0] for a in OUTPUT_PATH[script] if "{value}" in a)
    assert err.startswith(f"error: {key}=") and PATH_PROBLEMS[value] in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # nothing moved aside
    assert sorted(p.name for p in here.iterdir()) == ["my-notes.txt"]  # nothing written


def test_the_current_folder_by_its_absolute_path_or_a_folder_above_it_is_no_output_folder(tmp_path, monkeypatch):
    from reward.core.config import output_problem

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert "is the current folder" in output_problem(str(here))
    assert "is the current folder" in output_problem(f"{tmp_path}/./here/")
    assert "a folder holding the current one" in output_problem(str(tmp_path))
    assert output_problem(str(here / "runs")) is None and output_problem(str(tmp_path / "there")) is None


@pytest.mark.parametrize("script", ["training/synthetic.py", "rl/tasks.py", "training/perception_questions.py"])
def test_an_output_path_the_file_system_refuses_is_one_line_naming_it(script, tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a folder")
    argv = [f"out={tmp_path}/a-file/sub", *([] if "questions" in script else ["n=2"])]
    status, err = _run_script(script, argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"{tmp_path}/a-file/sub" in err and "a part of the path is a file" in err, err


# ------------------------------------------------------------------------------------------ dataset files

# an SA-BENCH annotation file's third line made bad: what each does, and whether skip_bad=true can skip it
SA_BENCH_BAD = {
    "fewer cells than the header": (lambda line: line.rsplit(",", 3)[0], "5 cells, the header has 8", True),
    "not UTF-8": (lambda line: line.replace("flux", "fl\udce9x"), "not UTF-8", True),
    "a cell over the csv field limit": (lambda line: line + ',"' + "x" * 200_000 + '"', "field larger", False),
}


def _bad_sa_bench(folder: Path, case: str) -> Path:
    import iqa_fixtures as fx

    fx.sa_bench(folder)
    path = folder / "annotations" / "layout_6k_train.csv"
    lines = path.read_text().splitlines()
    lines[2] = SA_BENCH_BAD[case][0](lines[2])
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("case", sorted(SA_BENCH_BAD))
def test_a_bad_sa_bench_line_is_one_message_naming_the_file_and_line(case, tmp_path, capsys):
    _bad_sa_bench(tmp_path / "sa", case)
    argv = [f"data=sa-bench:{tmp_path}/sa", f"out={tmp_path}/m.jsonl"]
    status, err = _run_script("reward/dataset_manifest.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "layout_6k_train.csv:3: " in err and SA_BENCH_BAD[case][1] in err, err
    if SA_BENCH_BAD[case][2]:  # a bad row: skipped and counted on request
        result = load_ratings(f"sa-bench:{tmp_path}/sa:train:layout", skip_bad=True)
        assert [s.line for s in result.skipped] == [3] and len(result.rows) == 3


def test_the_other_dataset_files_name_a_line_that_is_not_utf8_or_short(tmp_path):
    import iqa_fixtures as fx

    fx.kadid(tmp_path / "kadid")
    dmos = tmp_path / "kadid" / "dmos.csv"
    dmos.write_bytes(dmos.read_bytes().replace(b"\n", b"\nI99_01_01.png\n", 1))  # a row of one cell on line 2
    with pytest.raises(ManifestError, match=r"dmos\.csv:2: 1 cells, the header has 4"):
        load_ratings(f"kadid10k:{tmp_path}/kadid")
    fx.tid2013(tmp_path / "tid")
    names = next((tmp_path / "tid").rglob("mos_with_names.txt"))
    names.write_bytes(names.read_bytes().replace(b".bmp", b"\xe9.bmp", 1))
    with pytest.raises(ManifestError, match=r"mos_with_names\.txt:1: not UTF-8"):
        load_ratings(f"tid2013:{tmp_path}/tid")
    from training.procedural.photos import calibration_from_kadid

    with pytest.raises(ManifestError, match=r"dmos\.csv:2: 1 cells"):
        calibration_from_kadid(dmos)


# ------------------------------------------------------------------------------------------ skip_bad


def test_every_command_refuses_a_bad_row_by_default():
    """One default for every command that reads rows: a bad row is refused (naming the fix), never skipped unasked."""
    from fusion.commands.fit import FusionSettings
    from pace_judge.commands.judge import JudgeSettings
    from reward.commands.evaluate import EvaluateSettings
    from reward.commands.qbench_eval import QbenchEvalSettings
    from training.mos import MosSettings

    schemas = (EvaluateSettings, FusionSettings, BestOfNSettings, GrpoSettings, FlowGrpoSettings, JudgeSettings)
    for schema in (*schemas, QbenchEvalSettings, MosSettings):
        assert {f.name: f.default for f in __import__("dataclasses").fields(schema)}["skip_bad"] is False, schema
    assert SftSettings.__dataclass_fields__["data"].default_factory().skip_bad is False


def test_sft_refuses_a_bad_row_naming_the_line_and_data_skip_bad(tmp_path, tiny_vlm_path, monkeypatch, capsys):
    manifest = _ratings(tmp_path, [_row("good.png"), _row("missing.png"), _row("good.png", 4.0)], {"good.png": GOOD})
    monkeypatch.setattr(
        "training.commands.sft_setup.load_for_training", lambda *a, **k: pytest.fail("the model loaded")
    )
    argv = [f"model.path={tiny_vlm_path}", f"data.train={manifest}", "trainer.max_steps=1", f"out={tmp_path}/out"]
    status, err = _run_script("training/sft.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "ratings.jsonl:2: 'image' image 'img/missing.png' not found" in err and "data.skip_bad=true" in err, err


def test_evaluate_finds_a_missing_image_before_the_model_loads(tmp_path, monkeypatch, capsys):
    manifest = _ratings(tmp_path, [_row("good.png"), _row("good.png", 4.0), _row("missing.png")], {"good.png": GOOD})
    monkeypatch.setattr("reward.commands.evaluate.get_reward", lambda *a, **k: pytest.fail("the model loaded"))
    argv = ["reward=qbench", "reward.model=m", f"data={manifest}", f"out={tmp_path}/out"]
    status, err = _run_script("reward/evaluate.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "ratings.jsonl:3: 'image' image" in err and "not found" in err and "skip_bad=true" in err, err


def test_evaluate_skips_and_counts_bad_rows_and_the_count_adds_up(tmp_path, tiny_vlm_path, caplog):
    from reward.commands.evaluate import run as run_evaluate

    rows = [_row(f"{i}.png", 1.0 + i % 5) for i in range(6)] + [_row("missing.png"), _row("good.png", 9.0)]
    shades = {f"{i}.png": Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)) for i in range(6)}
    manifest = _ratings(tmp_path, rows, shades | {"good.png": GOOD})
    cfg = {"reward": {"name": "qbench", "model": str(tiny_vlm_path)}, "data": str(manifest), "skip_bad": True}
    with caplog.at_level(logging.INFO):
        result = run_evaluate(
            parse(EvaluateSettings, {**cfg, "out": str(tmp_path / "out"), "bootstrap": 0, "mos_range": [1, 5]})
        )
    assert result["skipped"] == 2 and result["quality"]["n"] == 6  # 8 rows: 6 scored, 2 skipped
    said = [r.getMessage() for r in caplog.records if "rows, " in r.getMessage()]
    assert any("(8 rows, 2 skipped" in line for line in said), said


def test_best_of_n_refuses_a_task_whose_image_is_missing_naming_skip_bad(tmp_path, capsys):
    GOOD.save(tmp_path / "a.png")
    GOOD.convert("L").save(tmp_path / "m.png")
    rows = [{"image": name, "mask": "m.png", "prompt": "a room"} for name in ("a.png", "b.png")]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["reward=scene-proxy", "generator=procedural", f"data={tmp_path}/tasks.jsonl", f"out={tmp_path}/out"]
    status, err = _run_script("rl/best_of_n.py", argv, capsys)
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "tasks.jsonl:2" in err and "skip_bad=true" in err, err


# ------------------------------------------------------------------------------------------ Flow-GRPO


def _flow_tasks(folder: Path, image: str = "a.png") -> Path:
    GOOD.save(folder / "a.png")
    GOOD.convert("L").save(folder / "m.png")
    (folder / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    (folder / "tasks.jsonl").write_text(json.dumps({"image": image, "mask": "m.png", "prompt": "a room"}) + "\n")
    return folder / "tasks.jsonl"


FLOW_GRPO_BAD = {  # arguments (beside a good generator, reward, data and out) -> what the one line says
    "misspelt key": (["sample.nosie_level=0.5"], "unknown key sample.nosie_level (did you mean 'noise_level'?)"),
    "bad image file": (["data={corrupt}"], "tasks.jsonl:1: "),
    "empty out=": (["out="], "out= is empty: name the output folder"),
    "a path out of its folder": (["data={climbing}"], "climbs out of the images' folder"),
    "not a flow model": (["generator=sd15-inpaint", "generator.path={pipe}"], "Flow-GRPO trains generator=flux-fill"),
    "the judge is the reward": (["judge=scene-proxy"], "judge= is a training reward"),
    "a window outside its steps": (["sample.window=7"], "sample.window=7 steps do not fit"),
}


@pytest.mark.parametrize("case", sorted(FLOW_GRPO_BAD))
def test_flow_grpo_bad_inputs_are_one_line_and_exit_2_before_any_model_loads(case, tmp_path, capsys, monkeypatch):
    from conftest import run_cli
    from rl.commands.flow_grpo import run

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("rl.flow_rounds.FlowRounds.build", no_model)
    good = _flow_tasks(tmp_path)
    (tmp_path / "c").mkdir()
    corrupt = _flow_tasks(tmp_path / "c", "corrupt.png")
    (tmp_path / "up").mkdir()
    climbing = _flow_tasks(tmp_path / "up", "../../etc/passwd")
    extra, said = FLOW_GRPO_BAD[case]
    fill = {"{corrupt}": str(corrupt), "{climbing}": str(climbing), "{pipe}": str(tmp_path)}
    extra = [next((a.replace(k, v) for k, v in fill.items() if k in a), a) for a in extra]
    base = {"generator.path": str(tmp_path), "reward": "scene-proxy", "data": str(good), "out": str(tmp_path / "o")}
    base["eval.every"] = "0"  # one task: none held out
    keys = {a.split("=")[0] for a in extra}
    argv = [f"{k}={v}" for k, v in base.items() if k not in keys] + extra
    assert run_cli("flow_grpo", run, argv, schema=FlowGrpoSettings) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert said in err, err
    assert not (tmp_path / "o").exists()


REFUSE_ONE = """
import json, runpy, sys
script, argv, libraries = json.loads(sys.argv[1])
sys.argv = [script, *argv]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exit_:
    assert exit_.code == 2, exit_.code
else:
    raise AssertionError("it ran")
loaded = [name for name in libraries if name in sys.modules]
assert not loaded, loaded
"""


@pytest.mark.parametrize("case", ["too few rows", "one scene"])
def test_flow_grpo_refuses_too_few_tasks_to_hold_out_before_torch_loads(case, tmp_path):
    """Held-out tasks the data cannot spare are refused before torch or any model library is imported: too few rows
    with the settings' other problems (here a generator folder that is not there), and a split by whole scene that
    leaves no training task before the launch starts."""
    tasks = _flow_tasks(tmp_path)
    argv = ["reward=scene-proxy", f"data={tasks}", f"out={tmp_path / 'o'}"]
    if case == "too few rows":  # one task for the 8 held out by default
        argv.append(f"generator.path={tmp_path / 'no-such-pipeline'}")
        said = [f"eval_tasks=8: data={tasks} holds 1 tasks, too few", "generator.path="]
    else:  # two rows of one scene: holding one out holds out both
        row = {"image": "a.png", "mask": "m.png", "prompt": "a room", "scene": "s1"}
        tasks.write_text(json.dumps(row) + "\n" + json.dumps({**row, "prompt": "a hall"}) + "\n")
        argv += [f"generator.path={tmp_path}", "eval_tasks=1"]
        said = ["holding out 1 tasks by whole scene / source image leaves no training task"]
    cmd = [sys.executable, "-c", REFUSE_ONE, json.dumps([str(ROOT / "rl/flow_grpo.py"), argv, MODEL_LIBRARIES])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(s in done.stderr for s in said) and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


def test_flow_grpo_reports_every_settings_problem_at_once(tmp_path, capsys):
    from conftest import run_cli
    from rl.commands.flow_grpo import run

    argv = [
        f"generator.path={tmp_path}",
        "reward=scene-proxy",
        "data=t.jsonl",
        f"out={tmp_path}/o",
        "trainer.num_generations=5",
        "trainer.reward_weights=[1,2]",
        "sample.window_range=[3,1]",
    ]
    assert run_cli("flow_grpo", run, argv, schema=FlowGrpoSettings) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid settings:") and "Traceback" not in err, err
    for said in (
        "generation_batch_size=1152 is not a multiple of num_generations=5",
        "reward_weights has 2 weights for 1 rewards",
        "sample.window_range=[3, 1]",
    ):
        assert said in err, err


def test_a_prompts_manifest_names_its_bad_rows_by_file_and_line_or_skips_and_counts_them(tmp_path):
    """Flow-GRPO's text-to-image tasks: an empty prompt, a row without one and broken JSON, each named."""
    from reward.data import load_prompts

    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'{"prompt": "a reading nook"}\n{"prompt": "  "}\n{"text": "a hall"}\n{"prompt": \n')
    for line, said in ((2, "'prompt' must be a non-empty string"), (3, "missing field(s) 'prompt'"), (4, "JSON")):
        rows = [b'{"prompt": "a reading nook"}\n', path.read_bytes().splitlines(keepends=True)[line - 1]]
        single = tmp_path / f"p{line}.jsonl"
        single.write_bytes(b"".join(rows))
        with pytest.raises(ManifestError, match=rf"p{line}.jsonl:2: .*{re.escape(said)}"):
            load_prompts(single)
    result = load_prompts(path, skip_bad=True)
    assert [r.prompt for r in result.rows] == ["a reading nook"] and [s.line for s in result.skipped] == [2, 3, 4]
