"""Quiet consoles: our own settings raise no deprecation warning; the library warnings we cannot fix are filtered in
one place (reward/core/cli.py), and nothing else is."""

from __future__ import annotations

import warnings

from rl.commands.grpo import GrpoSettings


def test_grpo_settings_build_trl_config_without_a_deprecation_warning(tmp_path):
    from reward.core.cli import compose
    from rl.commands.grpo import grpo_args, parse_settings

    cfg = compose(
        "grpo",
        ["reward=scene-proxy", "policy.path=Org/lm", "data=t.jsonl", f"out={tmp_path / 'o'}"],
        schema=GrpoSettings,
    )
    s = parse_settings(cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = grpo_args(s, tmp_path / "o")
    assert args.activation_checkpointing is True  # trl's GRPO default, now named by its current name
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]


def test_library_warnings_we_cannot_fix_are_filtered_once_and_others_still_show():
    from reward.core.cli import quiet_libraries

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_libraries()
        for name in ("gradient_checkpointing_enable", "is_gradient_checkpointing", "gradient_checkpointing"):
            warnings.warn(
                f"`{name}` is deprecated and will be removed in v6. Use `x` instead.", FutureWarning, stacklevel=1
            )
        warnings.warn("`something_else` is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["`something_else` is deprecated"]
