"""Hydra as users know it: --cfg job|all prints the composed config, --help each key with its help, Hydra's other
flags refused with one message (never ignored), and trainer.* checked against trl's own config fields."""

from __future__ import annotations

import pytest

from pace_judge.commands.judge import JudgeSettings
from reward.commands.evaluate import EvaluateSettings
from reward.core.cli import main
from reward.core.errors import UserError
from rl.commands.grpo_settings import GrpoSettings
from training.commands.sft import SftSettings

EVALUATE = ["reward=qbench", "reward.model=Org/vlm", "data=d.jsonl", "out=o"]


def _never(cfg):
    raise AssertionError("the command must not run")


@pytest.mark.parametrize("flag", [["--cfg", "job"], ["--cfg=all"]])
def test_cfg_prints_the_composed_config_without_running(flag, capsys):
    assert main("evaluate", _never, argv=[*EVALUATE, *flag], schema=EvaluateSettings) is None
    out = capsys.readouterr().out
    assert "model: Org/vlm" in out and "out: o" in out and "batch_size: 16" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-m", "batch_size=1,2"], "sweeps (-m / --multirun) are not supported"),
        (["--multirun"], "sweeps (-m / --multirun) are not supported"),
        (["hydra.run.dir=/tmp/x"], "hydra.run.dir: Hydra's own settings (hydra.*) are not used"),
        (["--config-name", "other"], "--config-name: each command has one config, configs/evaluate.yaml,"),
        (["-cn=other"], "-cn: each command has one config"),
        (["--cfg", "hydra"], "--cfg hydra: use --cfg job"),
        (["--info"], "unknown option --info"),
    ],
)
def test_hydra_flags_the_commands_do_not_support_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main("evaluate", _never, argv=[*EVALUATE, *argv], schema=EvaluateSettings)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_help_shows_each_key_with_its_comment_once(capsys):
    main("sft", _never, argv=["--help"], schema=SftSettings)
    out = capsys.readouterr().out
    assert "  batch_size" not in out
    assert "seed: 42  # trl's seed, the training stream's and the manifest's shuffle" in out
    assert "  gradient_accumulation_steps: null  # null: derived from global_batch_size (32 on one process" in out
    assert "  global_batch_size: null  # ours, not trl's: the effective batch" in out  # trainer.*: its dict's lines
    assert "  freeze_vision: true  # SA-IQA freezes the ViT ..." in out
    main("judge", _never, argv=["--help"], schema=JudgeSettings)
    out = capsys.readouterr().out
    for knob in ("dtype", "device", "device_map", "attn_implementation", "min_pixels", "max_pixels"):
        assert f"\n{knob}:" in out and f"\n  {knob}:" not in out.split("calibration:")[0], knob
    assert "dtype: auto  # auto: bf16 on a GPU that supports it, fp32 elsewhere" in out
    calibration = out.split("\ncalibration:")[1].split("\nallow_absolute_paths:")[0]
    assert "\n  device: null  # null: cuda if available\n" in calibration  # not the next comment's "benchmark mode"
    assert "\n  dimension: null  # manifest rows of this dimension (default: the protocol's)\n" in calibration
    assert "\n  mos_range: null  # the benchmark's MOS scale [low, high], mapped onto 1-5" in calibration
    assert "\ncrops:  # zoom probes" in out and "\n  grid: [2, 2]  # rows x cols of crops" in out  # typed sections
    assert "\n  retries: 2  # re-asks of an agent" in out and "\n  top_logprobs: 20  # answer tokens listed" in out


def test_trainer_keys_are_checked_against_trl_fields_before_anything_is_written(tmp_path, capsys):
    from reward.core.config import parse
    from training.commands.sft import run as run_sft

    base = {"out": str(tmp_path / "o"), "model": {"path": "Org/vlm"}, "data": {"train": "synthetic"}}
    with pytest.raises(UserError) as err:
        parse(SftSettings, {**base, "trainer": {"max_steps": 2, "learning_rate": "fast", "lerning_rate": 1}})
    assert "trainer.learning_rate='fast': expected a float" in str(err.value)
    assert "unknown key trainer.lerning_rate (did you mean 'learning_rate'?)" in str(err.value)
    argv = [f"model.path={tmp_path}", "data.train=synthetic", "trainer.max_steps=2", f"out={tmp_path / 'o'}"]
    with pytest.raises(SystemExit) as exited:
        main("sft", run_sft, argv=[*argv, "trainer.learning_rate=fast"], schema=SftSettings)
    assert exited.value.code == 2 and "trainer.learning_rate='fast': expected a float" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing made: the corrected command starts clean
    s = parse(SftSettings, {**base, "trainer": {"max_steps": 2, "max_grad_norm": 0.5}})  # any SFTConfig field
    assert s.trainer["max_grad_norm"] == 0.5


def test_grpo_trainer_keys_are_checked_against_grpo_config():
    from reward.core.cli import compose
    from reward.core.config import parse

    cfg = compose("grpo", ["reward=scene-proxy", "policy.path=Org/lm", "data=t.jsonl", "out=o", "trainer.beta=strong"])
    with pytest.raises(UserError, match=r"trainer.beta='strong': expected a float"):
        parse(GrpoSettings, cfg)
    cfg = compose("grpo", ["reward=scene-proxy", "policy.path=Org/lm", "data=t.jsonl", "out=o", "trainer.bta=0.1"])
    with pytest.raises(UserError, match=r"unknown key trainer.bta \(did you mean 'beta'\?\)"):
        parse(GrpoSettings, cfg)


def _entry_schemas() -> dict[str, type]:
    """Every entry script's settings dataclass, read from its ``main(CONFIG, run, schema=NAME)`` call."""
    import ast
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = {}
    for path in [root / "demo.py", *(p for d in PACKAGES for p in sorted((root / d).rglob("*.py")))]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "main":
                name = next((k.value.id for k in node.keywords if k.arg == "schema"), None)
                if name is None:
                    continue
                module = next(
                    (
                        i.module
                        for i in ast.walk(tree)
                        if isinstance(i, ast.ImportFrom) and name in [a.name for a in i.names]
                    ),
                    ".".join(path.relative_to(root).with_suffix("").parts),
                )
                found[str(path.relative_to(root))] = getattr(importlib.import_module(module), name)
    return found


PACKAGES = ("reward", "training", "rl", "fusion", "pace_judge")


def test_every_setting_keeps_its_help_in_its_field_not_in_a_comment():
    """Every settings dataclass of every command (nested sections and the reward and generator groups' included)
    declares its fields' help in ``field(metadata={"help": ...})``: no field line ends in a comment, which --help
    would not show (python /work/wt/codemod_help.py FILE converts one)."""
    import ast
    import dataclasses
    import inspect
    import io
    import textwrap
    import tokenize

    from conftest import settings_classes

    schemas = _entry_schemas()
    assert len(schemas) >= 16, sorted(schemas)
    todo = settings_classes(schemas.values())
    todo += [b for cls in todo for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)]
    seen: set[type] = set()
    commented = []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        lines, start = inspect.getsourcelines(cls)
        text = textwrap.dedent("".join(lines))
        comments = {
            t.start[0]: t.string
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.COMMENT and "noqa" not in t.string
        }
        body = ast.parse(text).body[0].body  # type: ignore[attr-defined]
        for stmt in body:
            end = stmt.end_lineno
            if isinstance(stmt, ast.AnnAssign) and "ClassVar" not in ast.unparse(stmt.annotation) and end in comments:
                commented.append(f"{cls.__module__}.{cls.__qualname__}:{start + end - 1}: {comments[end]}")
    assert len(seen) > 40 and not commented, "\n".join(commented)


@pytest.mark.parametrize(
    ("typed", "read"),
    [
        ("Describe, in detail: {prompt}", "Describe, in detail: {prompt}"),  # braces and a comma: quoted for Hydra
        ("it's {prompt}", "it's {prompt}"),
        ("C:\\styles\\x {prompt}", "C:\\styles\\x {prompt}"),  # backslashes kept as typed
        ("costs \\${5} {prompt}", "costs ${5} {prompt}"),  # \${ is OmegaConf's literal ${
    ],
)
def test_a_value_is_read_as_typed_whatever_hydras_grammar_makes_of_it(typed, read):
    from reward.core.cli import compose
    from reward.core.config import to_plain

    assert to_plain(compose("grpo", [f"prompt.template={typed}"]))["prompt"]["template"] == read


def test_an_interpolation_that_names_no_setting_is_one_message_naming_the_key():
    from reward.core.cli import compose
    from reward.core.config import to_plain

    with pytest.raises(UserError, match=r"prompt\.template: Interpolation key 'x' not found; .* \\\$\{\.\.\.\}"):
        to_plain(compose("grpo", ["prompt.template=a ${x} {prompt}"]))
