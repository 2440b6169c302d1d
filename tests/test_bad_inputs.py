"""Bad and careless inputs, as a new user types them: each ends in one clear message and exit status 2 (no
traceback), a counted skip, or a correct result — never a crash, a silent wrong number or a lost file."""

from __future__ import annotations

import ast
import json
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from reward.data import ManifestError, load_inpainting, load_ratings
from rl.commands.best_of_n import BestOfNSettings
from rl.commands.grpo import GrpoSettings
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
    "rl/tasks.py": None,
    "rl/study.py": ["serve", "run=/nope/run", "study={tmp}/study"],
    "fusion/fit.py": ["pairs=/nope/pairs.jsonl", "scores=/nope/scores.jsonl", "out={tmp}/w.json"],
    "pace_judge/judge.py": ["protocol=/nope/protocol.json", "images={tmp}", "out={tmp}/out", "model=/nope/m"],
    "pace_judge/memory.py": ["import", "memory={tmp}/memory", "protocol=/nope/protocol.json"],
    "pace_judge/calibrate.py": ["protocol=/nope/protocol.json", "benchmark=/nope/calibration.jsonl"],
    "demo.py": None,
}


def _run_script(script: str, argv: list[str], capsys) -> tuple[int, str]:
    """Run an entry script in this process as ``python SCRIPT ARGV`` would; its exit status and stderr."""
    old = sys.argv
    sys.argv = [script, *argv]
    try:
        runpy.run_path(str(ROOT / script), run_name="__main__")
        status = 0
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    finally:
        sys.argv = old
    return status, capsys.readouterr().err


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


# the model libraries, seconds to import each: none is needed to check a command's settings
MODEL_LIBRARIES = ("transformers", "trl", "diffusers", "peft", "deepspeed")
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
    """A mistyped key is answered in about a second: no command imports a model library before its settings are
    checked (best_of_n took 8 s to refuse one, importing transformers for a callback it never uses)."""
    runs = [[str(ROOT / script), _unknown_key(script)] for script in sorted(MISSING_INPUT)]
    cmd = [sys.executable, "-c", REFUSE_ALL, json.dumps([runs, MODEL_LIBRARIES])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("unknown key colour") == len(runs)


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
    cmd += [str(ROOT / "reward/evaluate.py"), "colour=red", "data=x", f"out={tmp_path}"]
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


# ------------------------------------------------------------------------------------------ output folders


def _sft_prepare(cfg) -> None:
    from training.commands.sft import check_output_folder, parse_settings

    check_output_folder(parse_settings(cfg)).create()


def _grpo_prepare(cfg) -> None:
    from rl.commands.grpo import parse_settings, prepare

    s = parse_settings(cfg)
    prepare(s, Path(s.out))


def _best_of_n_prepare(cfg) -> None:
    from rl.commands.best_of_n import parse_settings, prepare

    prepare(parse_settings(cfg))


# config -> (its command module, settings of a run into {out}, what decides the folder, the key naming the folder)
SCHEMAS = {"sft": SftSettings, "grpo": GrpoSettings, "best_of_n": BestOfNSettings}
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
}


@pytest.mark.parametrize("config", sorted(REUSED_FOLDER))
def test_a_reused_folder_is_refused_with_ways_out_that_the_command_accepts(config, tmp_path):
    """The refusal's advice (another folder, resume, overwrite=true) names only settings the command has, with values
    it accepts: a user following it must not meet 'unknown key' or an invalid value next."""
    import importlib
    import re

    from reward.core.cli import compose
    from reward.core.errors import UserError

    module, argv, prepare, out_key = REUSED_FOLDER[config]
    command = importlib.import_module(module)
    parse_settings, schema = command.parse_settings, SCHEMAS[config]
    argv = [a.replace("{out}", str(tmp_path / "run")) for a in argv]
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
            parse_settings(compose(config, [*(a for a in argv if not a.startswith(f"{key}=")), advice], schema=schema))
