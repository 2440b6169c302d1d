"""training.shared: the resume check shared by training/sft.py and rl/grpo.py; reward.core.config: typed settings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from reward.core.config import parse
from training.shared import RUN_CONFIG, resume_checkpoint, save_run_config


@dataclass
class _Opt:
    lr: float = 1e-3


@dataclass
class _Top:
    out: str
    opt: _Opt = field(default_factory=_Opt)


def test_problems_of_every_section_are_reported_together():
    with pytest.raises(ValueError) as err:
        parse(_Top, {"opt": {"lrr": 1, "lr": "fast"}, "outt": "x"}, where="run")
    msg = str(err.value)
    assert "unknown key run.opt.lrr (did you mean 'lr'?)" in msg
    assert "run.opt.lr='fast': expected a float" in msg
    assert "unknown key run.outt" in msg and "missing required key run.out" in msg


def test_nested_settings_come_back_typed():
    top = parse(_Top, {"out": "o", "opt": {"lr": 0.1}}, where="run")
    assert top == _Top(out="o", opt=_Opt(lr=0.1))


def test_resume_continues_the_same_run_and_refuses_another(tmp_path):
    (tmp_path / "checkpoint-2").mkdir()
    assert resume_checkpoint(tmp_path, "auto", {"model": "m"}) == str(tmp_path / "checkpoint-2")  # no record yet
    save_run_config(tmp_path, {"model": "m", "lr": 0.1})
    assert json.loads((tmp_path / RUN_CONFIG).read_text()) == {"model": "m", "lr": 0.1}
    assert resume_checkpoint(tmp_path, "auto", {"model": "m", "lr": 0.1}) == str(tmp_path / "checkpoint-2")
    assert resume_checkpoint(tmp_path, "never", {"model": "other"}) is None
    with pytest.raises(ValueError, match=r"different config:\n  - lr: 0.1 -> 0.2\nUse a new output_dir"):
        resume_checkpoint(tmp_path, "auto", {"model": "m", "lr": 0.2})
