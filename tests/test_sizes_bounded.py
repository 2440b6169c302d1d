"""Sizes and counts are checked before anything loads: zero, negative, NaN or absurd values of any command's settings
(its own, a group's chosen option's, ``trainer.*``) exit 2 with one message naming the key and its range, and nothing
is written; a training run that made no step exits non-zero and exports nothing."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
from test_hydra_cli import _entry_schemas

from conftest import run_cli, settings_classes
from reward.core.config import field_types, parse
from reward.core.errors import UserError

SAMPLES = Path(__file__).resolve().parents[1] / "reward" / "assets" / "samples"
RATINGS = str(SAMPLES / "ratings.jsonl")


def _command(script: str):
    """``(config name, run, schema)`` of an entry script."""
    import runpy

    entry = runpy.run_path(str(Path(__file__).resolve().parents[1] / script), run_name="entry")  # its main() unrun
    return Path(script).stem, entry["run"], _entry_schemas()[script]


# (script, arguments, the key the message must name); {vlm}: a tiny checkpoint, {out}: a fresh folder
CASES = [
    ("training/sft.py", ["trainer.gradient_accumulation_steps=-3"], "trainer.gradient_accumulation_steps=-3"),
    ("training/sft.py", ["trainer.num_train_epochs=0", "trainer.max_steps=-1"], "trainer.num_train_epochs=0"),
    ("training/sft.py", ["trainer.per_device_train_batch_size=0"], "trainer.per_device_train_batch_size=0"),
    ("training/sft.py", ["trainer.max_steps=0"], "trainer.max_steps=0"),
    ("training/sft.py", ["trainer.learning_rate=nan"], "trainer.learning_rate=nan"),
    ("training/sft.py", ["data.soft_std=-1"], "data.soft_std=-1.0"),
    ("training/sft.py", ["plan=true", "plan_for.rows=-5"], "plan_for.rows=-5"),
    ("training/sft.py", ["plan=true", "trainer.gradient_accumulation_steps=0"], "gradient_accumulation_steps=0"),
    ("rl/grpo.py", ["reward=scene-proxy", "trainer.num_generations=0"], "trainer.num_generations=0"),
    ("rl/grpo.py", ["reward=scene-proxy", "eval_tasks=-1"], "eval_tasks=-1"),
    ("rl/grpo.py", ["reward=scene-proxy", "generator.render_size=0"], "generator.render_size=0"),
    ("rl/best_of_n.py", ["reward=scene-proxy", "n=0"], "n=0"),
    ("rl/best_of_n.py", ["reward=scene-proxy", "limit=0"], "limit=0"),
    ("reward/evaluate.py", ["reward=sa-iqa", "reward.model={vlm}", "batch_size=0"], "batch_size=0"),
    ("reward/evaluate.py", ["reward=sa-iqa", "reward.model={vlm}", "reward.batch_size=-4"], "reward.batch_size=-4"),
    ("reward/evaluate.py", ["reward=pace", "reward.protocol=p.json", "reward.crops.grid=[1000,1000]"], "crops.grid="),
    ("reward/evaluate.py", ["reward=qbench", "reward.model={vlm}", "reward.server.timeout=nan"], "server.timeout=nan"),
    ("reward/evaluate.py", ["reward=scene-proxy", "bootstrap=-1"], "bootstrap=-1"),
    ("pace_judge/judge.py", ["images_per_call=0"], "images_per_call=0"),
    ("pace_judge/judge.py", ["agents.max_sub=100000"], "agents.max_sub=100000"),
    ("training/synthetic.py", ["n=0"], "n=0"),
    ("training/perception_questions.py", ["n=-2"], "n=-2"),
    ("rl/tasks.py", ["size=-4"], "size=-4"),
]
BASE = {
    "training/sft.py": ["model.path={vlm}", f"data.train={RATINGS}", "out={out}", "prompt.type=1"],
    "rl/grpo.py": ["policy.path={vlm}", "data=tasks.jsonl", "out={out}", "generator=procedural"],
    "rl/best_of_n.py": ["data=tasks.jsonl", "out={out}", "generator=procedural"],
    "reward/evaluate.py": [f"data={RATINGS}", "out={out}"],
    "pace_judge/judge.py": ["protocol=p.json", f"images={SAMPLES / 'images'}", "out={out}", "model={vlm}"],
    "training/synthetic.py": ["out={out}"],
    "training/perception_questions.py": ["out={out}"],
    "rl/tasks.py": ["out={out}"],
}


@pytest.mark.parametrize(("script", "args", "key"), CASES, ids=[f"{s}:{a[-1]}" for s, a, _ in CASES])
def test_an_out_of_range_size_exits_2_naming_the_key_and_writes_nothing(script, args, key, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [a.replace("{vlm}", str(tmp_path)).replace("{out}", str(out)) for a in [*args, *BASE[script]]]
    name, run, schema = _command(script)
    status = run_cli(name, run, argv, schema=schema)
    err = capsys.readouterr().err
    assert status == 2, err
    said = re.search(rf"{re.escape(key)}[^\n]*: (each value )?(must be|give -1)", err)
    assert err.startswith("error: ") and said, err
    assert not out.exists()


def _settings_classes() -> list[type]:
    return settings_classes(_entry_schemas().values())


def range_of(f: dataclasses.Field):
    return f.metadata.get("range")


SIZE_WORDS = re.compile(
    r"(^n$|batch|size|steps|tasks|workers|candidates|crops|pixels|rounds|retries|tokens|scenes|variants|annotators"
    r"|every|limit|per_call|grid|processes|machines|concurrency|timeout|top_logprobs|bootstrap|rows|^r$|_sub$)"
)


def _numeric(tp) -> bool:
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    inner = [typing.get_args(a)[0] if typing.get_args(a) else a for a in args]
    return any(t in (int, float) for t in inner) and all(t is not str for t in inner)


def test_every_size_or_count_setting_declares_its_range():
    undeclared = [
        f"{cls.__module__}.{cls.__qualname__}.{f.name}"
        for cls in _settings_classes()
        for f in dataclasses.fields(cls)
        if SIZE_WORDS.search(f.name) and _numeric(field_types(cls)[f.name]) and range_of(f) is None
    ]
    assert len(_settings_classes()) > 30
    assert not undeclared, f"give these fields metadata={{'range': (low, high)}}: {undeclared}"


def _below(bounds) -> float | None:
    low, high = bounds[:2]
    if low is not None:
        return low - 1
    return None if high is None else high + 1


def test_every_declared_range_is_enforced_when_settings_are_parsed():
    checked = 0
    for cls in _settings_classes():
        for f in dataclasses.fields(cls):
            bounds = range_of(f)
            if bounds is None or (bad := _below(bounds)) is None:
                continue
            value = [bad, bad] if typing.get_origin(field_types(cls)[f.name]) in (list, tuple) else bad
            if field_types(cls)[f.name] in (int, int | None) or "int" in str(field_types(cls)[f.name]):
                value = [int(v) for v in value] if isinstance(value, list) else int(value)
            with pytest.raises(UserError) as err:
                parse(cls, {f.name: value}, where="s")
            shown = [float(v) for v in value] if isinstance(value, list) else float(value)
            assert f"s.{f.name}={value!r}: " in str(err.value) or f"s.{f.name}={shown!r}: " in str(err.value)
            checked += 1
    assert checked > 60


def test_a_training_run_that_made_no_step_exits_2_and_exports_nothing(tmp_path, tiny_vlm_path, monkeypatch, capsys):
    """A 0-step run cannot be reached with settings that pass the checks above, so trl's ``train`` is made to make
    none (as a data stream that yields no batch would); the guard after training refuses to export a scorer."""
    import trl
    from transformers.trainer_utils import TrainOutput

    from training.commands.sft import SftSettings, run

    monkeypatch.setattr(trl.SFTTrainer, "train", lambda self, **kw: TrainOutput(0, 0.0, {}))
    out = tmp_path / "out"
    argv = [f"model.path={tiny_vlm_path}", f"data.train={RATINGS}", f"out={out}", "prompt.type=1"]
    argv += ["trainer.max_steps=1", "trainer.per_device_train_batch_size=2", "trainer.gradient_accumulation_steps=1"]
    status = run_cli("sft", run, argv, schema=SftSettings)
    captured = capsys.readouterr()
    assert status == 2
    assert "error: SFT trained 0 steps (trainer.max_steps=1, " in captured.err and "nothing was exported" in (
        captured.err
    )
    assert not (out / "scorer").exists() and not (out / "sft_result.json").exists()
    assert "done" not in captured.out.lower()
