"""Reruns like make, and mistakes refused before loading: a complete run rerun says "already complete" and exits 0;
a run that never started never blocks its corrected rerun; missing model paths are one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reward.commands.evaluate import EvaluateSettings
from reward.core.cli import main
from reward.core.errors import UserError
from reward.core.outputs import RunComplete, check_output, prepare_output
from rl.commands.grpo_settings import GrpoSettings
from training.commands.sft import SftSettings

ROOT = Path(__file__).resolve().parents[1]
RERUN = """
import json, runpy, sys
script, argv = json.loads(sys.argv[1])
sys.argv = [script, *argv]
runpy.run_path(script, run_name="__main__")
print(json.dumps([name for name in ("torch", "transformers", "trl", "peft", "accelerate") if name in sys.modules]))
"""


def test_the_identical_command_on_a_complete_run_is_already_complete(tmp_path):
    out = tmp_path / "run"
    prepare_output(out, "evaluate", {"model": "a", "resume": "never"}).finish()
    with pytest.raises(RunComplete, match=f"already complete: results in {out}"):
        check_output(out, "evaluate", {"model": "a", "resume": "auto"}, resume=True)
    with pytest.raises(UserError, match="holds another run"):
        check_output(out, "evaluate", {"model": "b", "resume": "never"})


def test_a_setting_whose_word_names_the_output_folder_is_no_input(tmp_path, monkeypatch):
    """out=grpo with trainer.loss_type=grpo: the word is the loss's, not a file read, so the rerun of the complete run
    is complete (the folder's own files once fingerprinted as an input changed between the runs); a real input inside
    the output folder is still refused."""
    monkeypatch.chdir(tmp_path)
    settings = {"out": "grpo", "trainer": {"loss_type": "grpo"}}
    prepare_output("grpo", "grpo", settings).finish()
    (tmp_path / "grpo" / "log.txt").write_text("the run's own output\n")
    with pytest.raises(RunComplete, match="already complete"):
        check_output("grpo", "grpo", settings, resume=True)
    (tmp_path / "grpo" / "tasks.jsonl").write_text("{}\n")
    with pytest.raises(UserError, match="tasks.jsonl"):
        check_output("grpo", "grpo", {**settings, "data": "grpo/tasks.jsonl"}, resume=True)


def test_an_unfinished_run_is_still_refused_or_resumed(tmp_path):
    out = tmp_path / "run"
    prepare_output(out, "evaluate", {"model": "a"})
    (out / "scores.jsonl").write_text("{}\n")  # it started, and stopped before its end
    with pytest.raises(UserError, match="holds this same run already"):
        check_output(out, "evaluate", {"model": "a"})
    assert check_output(out, "evaluate", {"model": "a"}, resume=True).resumed


def test_a_run_that_never_started_does_not_block_the_corrected_rerun(tmp_path):
    out = tmp_path / "run"
    prepare_output(out, "sft", {"trainer": {"learning_rate": "fast"}})  # failed after making the folder
    again = prepare_output(out, "sft", {"trainer": {"learning_rate": 1e-3}})
    assert not again.resumed and not again.replace and not list(tmp_path.glob("run.old-*"))
    assert again.identity["settings"]["trainer"]["learning_rate"] == 1e-3


def test_main_prints_already_complete_and_exits_0(tmp_path, capsys):
    def run(cfg):
        raise RunComplete(f"already complete: results in {tmp_path / 'o'} (overwrite=true runs it anew)")

    assert (
        main("evaluate", run, argv=["reward=qbench", "data=d", f"out={tmp_path / 'o'}"], schema=EvaluateSettings)
        is None
    )
    assert f"already complete: results in {tmp_path / 'o'}" in capsys.readouterr().out


def test_missing_model_paths_are_one_line_each_before_anything_loads(tmp_path, capsys):
    from training.commands.sft import run

    with pytest.raises(SystemExit) as exited:
        main(
            "sft",
            run,
            argv=["model.path=/missing", "data.train=/nope.jsonl", f"out={tmp_path / 'o'}"],
            schema=SftSettings,
        )
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err and "HFValidationError" not in err
    assert err.splitlines() == [
        "error: model.path=/missing: no such folder, and not a Hub id (ORG/NAME); pass a checkpoint folder or a "
        "Hub id",
        "data.train=/nope.jsonl: no such file or folder (a ratings manifest or a datasets folder)",
    ]
    assert not (tmp_path / "o").exists()


def test_missing_reward_and_generator_models_are_named():
    from pace_judge.config import PaceConfig, validate
    from reward import get_reward
    from reward.core.config import parse
    from rl.commands.best_of_n import BestOfNSettings

    with pytest.raises(UserError, match=r"^reward.model=/missing: no such folder, and not a Hub id"):
        get_reward("qbench", {"model": "/missing"})
    with pytest.raises(ValueError, match=r"model=/missing: no such folder"):
        validate(PaceConfig(model="/missing", protocol="p.json"))
    cfg = {"data": "t", "out": "o", "reward": {"name": "scene-proxy"}, "generator": {"name": "sd15-inpaint"}}
    with pytest.raises(UserError, match=r"generator.path=/missing: no such folder"):
        parse(BestOfNSettings, {**cfg, "generator": {"name": "sd15-inpaint", "path": "/missing"}})


def test_an_error_that_needs_no_model_comes_before_the_heavy_imports(tmp_path):
    """SFT's settings, paths and output folder are checked with torch, transformers, peft and trl not yet imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "from reward.core.cli import main\n"
        "from training.commands.sft import SftSettings, run\n"
        "try:\n"
        f"    argv = ['model.path=/missing', 'data.train=x', 'out={tmp_path / 'o'}']\n"
        "    main('sft', run, schema=SftSettings, argv=argv)\n"
        "except SystemExit as exit:\n"
        "    heavy = [m for m in ('torch', 'transformers', 'peft', 'trl', 'datasets') if m in sys.modules]\n"
        "    print('exit', exit.code, 'heavy', heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert "exit 2 heavy []" in done.stdout, done.stdout + done.stderr
    assert "model.path=/missing: no such folder" in done.stderr


def _sft_folder(cfg):
    from reward.core.config import parse
    from training.commands.sft_setup import check_output_folder

    output = check_output_folder(parse(SftSettings, cfg))
    output.create()
    return output


def _grpo_folder(cfg):

    from reward.core.config import parse
    from rl.commands.grpo_launch import check_output_folder

    s = parse(GrpoSettings, cfg)
    output = check_output_folder(s)
    output.create()
    return output


RESUMABLE = {  # command -> (its folder step, settings, a key that may change on resume, a key that may not)
    "sft": (
        _sft_folder,
        ["model.path=m", "data.train=synthetic", "trainer.max_steps=2", "out={out}"],
        ("trainer.max_steps=4", "data.test=t.jsonl", "eval_batch_size=2"),
        ("prompt.type=2", "prompt.type: 4 -> 2"),
    ),
    "grpo": (
        _grpo_folder,
        ["policy.path=p", "data=t.jsonl", "reward=scene-proxy", "out={out}"],
        ("trainer.max_steps=9", "eval.every=5", "reward.device=cpu", "plan_for.processes=4"),
        ("trainer.learning_rate=0.5", "trainer.learning_rate: 1e-06 -> 0.5"),
    ),
}
SCHEMAS = {"sft": SftSettings, "grpo": GrpoSettings}


@pytest.mark.parametrize("command", sorted(RESUMABLE))
def test_a_resumed_run_may_change_only_the_keys_marked_on_their_fields(command, tmp_path):
    """A key marked ``may_change`` (a field, an entry of ``trainer``, a key of the reward group) may differ when the
    run is resumed; any other refuses the folder, naming it (the evaluate and judge cases run in their own tests)."""
    from reward.core.cli import compose

    folder, argv, may, may_not = RESUMABLE[command]
    (tmp_path / "t.jsonl").write_text("")  # the data named is there (grpo checks it with its settings)
    argv = [
        a.replace("{out}", str(tmp_path / "run")).replace("data=t.jsonl", f"data={tmp_path}/t.jsonl") for a in argv
    ]
    assert folder(compose(command, argv, schema=SCHEMAS[command])).resumed is False
    (tmp_path / "run" / "log.txt").write_text("step 1\n")  # the run started
    resumed = folder(compose(command, [*argv, *may, "resume=auto"], schema=SCHEMAS[command]))
    assert resumed.resumed
    key, named = may_not
    with pytest.raises(UserError, match="holds another run") as refused:
        folder(compose(command, [*argv, key, "resume=auto"], schema=SCHEMAS[command]))
    assert named in str(refused.value) and "1 difference(s)" in str(refused.value)


def test_every_key_that_may_change_is_a_setting_of_its_command():
    """The ``may_change`` marks name keys that exist: a field, an entry the library's config accepts (``trainer``),
    or a key of one of the group's settings (``reward``, ``generator``)."""
    import dataclasses

    from trl import GRPOConfig, SFTConfig

    from conftest import group_options
    from pace_judge.commands.judge import JudgeSettings
    from reward.commands.evaluate import EvaluateSettings
    from reward.core.config import field_types
    from reward.core.outputs import may_change_keys

    library = {"sft": SFTConfig, "grpo": GRPOConfig}
    for command, schema in {**SCHEMAS, "evaluate": EvaluateSettings, "judge": JudgeSettings}.items():
        keys = may_change_keys(schema)
        assert "resume" in keys and "overwrite" in keys, command
        for key in keys:
            head, _, rest = key.partition(".")
            if head in group_options(schema):
                options = group_options(schema)[head]
                assert any(rest in {f.name for f in dataclasses.fields(o)} for o in options), key
            elif head == "trainer":
                assert rest in {f.name for f in dataclasses.fields(library[command])}, key
            else:
                node = schema
                for part in key.split("."):
                    assert part in field_types(node), key
                    node = field_types(node)[part]


@pytest.mark.slow
def test_an_unchanged_rerun_is_already_complete_before_any_model_library_is_imported(
    tiny_vlm_path, tiny_lm_path, tmp_path
):
    """The same command again on a complete run says so from the output folder alone: SFT loaded the processor
    (transformers) first, evaluate torch and accelerate, GRPO trl's config (trl, transformers, peft), 5 s and more at
    rest to say "already complete"."""
    from training.procedural.synthetic import write_inpainting_tasks

    ratings = ROOT / "reward" / "assets" / "samples" / "ratings.jsonl"
    tasks = write_inpainting_tasks(tmp_path / "tasks", 8, size=32, seed=0)
    runs = {
        "training/sft.py": [f"model.path={tiny_vlm_path}", f"data.train={ratings}", "out=sft"]
        + ["trainer.max_steps=1", "trainer.gradient_accumulation_steps=1", "trainer.per_device_train_batch_size=2"],
        "reward/evaluate.py": ["reward=qbench", f"reward.model={tiny_vlm_path}", f"data={ratings}", "out=eval"]
        + ["num_workers=0"],
        "rl/grpo.py": ["reward=scene-proxy", f"policy.path={tiny_lm_path}", "generator=procedural", f"data={tasks}"]
        + ["out=run-grpo", "trainer.max_steps=1", "trainer.max_completion_length=8", "eval.every=0"],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for script, argv in runs.items():
        first = subprocess.run(
            [sys.executable, str(ROOT / script), *argv], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert first.returncode == 0, first.stderr[-2000:]
        again = subprocess.run(
            [sys.executable, "-c", RERUN, json.dumps([str(ROOT / script), argv])],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert again.returncode == 0 and "already complete: results in" in again.stdout, again.stderr[-2000:]
        assert json.loads(again.stdout.splitlines()[-1]) == [], script
