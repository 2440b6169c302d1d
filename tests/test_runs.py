"""reward.runs: the config-section parser and the resume check shared by training/sft.py and rl/grpo.py."""

from __future__ import annotations

import doctest
import json
from dataclasses import dataclass, field

import pytest

import reward.runs
from reward.runs import RUN_CONFIG, parse_sections, resume_checkpoint, save_run_config


@dataclass
class _Opt:
    lr: float = 1e-3


@dataclass
class _Top:
    out: str
    opt: _Opt = field(default_factory=_Opt)


def test_docstring_example_runs():
    result = doctest.testmod(reward.runs)
    assert result.attempted >= 2 and result.failed == 0


def test_problems_of_every_section_are_reported_together():
    with pytest.raises(ValueError) as err:
        parse_sections({"opt": {"lrr": 1}, "outt": "x"}, _Top, {"opt": _Opt}, where="run")
    msg = str(err.value)
    assert "unknown key opt.lrr (did you mean 'lr'?)" in msg
    assert "unknown key run.outt" in msg and "missing required key run.out" in msg


def test_resume_continues_the_same_run_and_refuses_another(tmp_path):
    (tmp_path / "checkpoint-2").mkdir()
    assert resume_checkpoint(tmp_path, "auto", {"model": "m"}) == str(tmp_path / "checkpoint-2")  # no record yet
    save_run_config(tmp_path, {"model": "m", "lr": 0.1})
    assert json.loads((tmp_path / RUN_CONFIG).read_text()) == {"model": "m", "lr": 0.1}
    assert resume_checkpoint(tmp_path, "auto", {"model": "m", "lr": 0.1}) == str(tmp_path / "checkpoint-2")
    assert resume_checkpoint(tmp_path, "never", {"model": "other"}) is None
    with pytest.raises(ValueError, match=r"different config:\n  - lr: 0.1 -> 0.2\nUse a new output_dir"):
        resume_checkpoint(tmp_path, "auto", {"model": "m", "lr": 0.2})
