"""reward.core.config: typed settings, every problem reported at once."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reward.core.config import parse


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
