"""Quiet consoles: our own settings raise no deprecation warning; the library warnings we cannot fix are filtered in
one place (reward/core/cli.py), and nothing else is."""

from __future__ import annotations

import warnings

from rl.commands.grpo_settings import GrpoSettings


def test_grpo_settings_build_trl_config_without_a_deprecation_warning(tmp_path):
    from reward.core.cli import compose
    from reward.core.config import parse
    from rl.commands.grpo_launch import grpo_args

    (tmp_path / "t.jsonl").write_text("")  # (the settings check that the tasks file is there)
    cfg = compose(
        "grpo",
        ["reward=scene-proxy", "policy.path=Org/lm", f"data={tmp_path / 't.jsonl'}", f"out={tmp_path / 'o'}"],
    )
    s = parse(GrpoSettings, cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = grpo_args(s, tmp_path / "o")
    assert args.activation_checkpointing is True  # trl's GRPO default, now named by its current name
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]


def test_library_warnings_we_cannot_fix_are_filtered_once_and_others_still_show():
    from reward.core.cli import setup_logging

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        setup_logging()
        for name in ("gradient_checkpointing_enable", "is_gradient_checkpointing", "gradient_checkpointing"):
            warnings.warn(
                f"`{name}` is deprecated and will be removed in v6. Use `x` instead.", FutureWarning, stacklevel=1
            )
        warnings.warn("`something_else` is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["`something_else` is deprecated"]


def test_render_from_pipeline_draws_inside_trls_bar_without_the_pipelines_own(tmp_path, capfd):
    from diffusers import StableDiffusionPipeline

    from reward.integrations.renderers import render_from_pipeline
    from reward.testing.diffusion import make_tiny_text_to_image

    pipe = StableDiffusionPipeline.from_pretrained(make_tiny_text_to_image(tmp_path / "t2i"))
    pipe.set_progress_bar_config(desc="denoising")  # the user's own setting of the pipeline's bar
    draw = {"num_inference_steps": 2, "height": 64, "width": 64}
    capfd.readouterr()
    images = render_from_pipeline(pipe, **draw)(["p", "p"], ["a sunny room", "a dark room"])
    quiet = capfd.readouterr().err
    render_from_pipeline(pipe, progress_bar=True, **draw)(["p"], ["a sunny room"])
    shown = capfd.readouterr().err
    assert len(images) == 2 and all(im is not None for im in images)
    assert "denoising" in shown and "denoising" not in quiet  # the bar is drawn only when asked for
    assert pipe._progress_bar_config == {"desc": "denoising"}  # the pipeline's setting is left as it was
