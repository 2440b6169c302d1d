"""Rewards callable as people call pyiqa's and Q-Align's scorers, and by trl as they are (:class:`TrlCallable`)."""

from __future__ import annotations

from typing import Any

IMAGE_COLUMNS = ("image", "images")  # dataset columns a reward called by trl reads its images from


class TrlCallable:
    """Makes a reward callable as people call pyiqa's and Q-Align's scorers, and usable as it is in
    ``GRPOTrainer(reward_funcs=[reward])``.

    ``scorer(images)`` (anything :func:`reward.data.images.as_images` takes: PIL images, tensors, arrays, image paths)
    returns the images' scores, a float tensor [B] (``scorer.score(images)`` gives each dimension's too). Called by
    trl (``prompts=``, ``completions=``, columns) on a dataset with an ``image`` or ``images`` column (a VLM policy's
    own images), the call is that of ``reward.trl_reward_func(self, images_from_column(...))``, and ``__name__`` is
    the registered name, which trl logs. Without such a column the call raises a ``TypeError`` that says how to wrap
    the reward with a render."""

    @property
    def __name__(self) -> str:
        spec = getattr(self, "reward_spec", None)
        return str(getattr(spec, "name", type(self).__name__))

    def __call__(self, *args: Any, **columns: Any) -> Any:
        if "completions" not in columns and len(args) < 2:  # scorer(images), scorer(images=...): pyiqa's call
            if len(args) + len(columns) != 1 or (columns and "images" not in columns):
                raise TypeError(
                    f"{type(self).__name__} is called with images, scorer(images), or by trl with prompts= and "
                    f"completions=; got {len(args)} positional argument(s) and {sorted(columns)}"
                )
            scorer: Any = self
            return scorer.score(args[0] if args else columns["images"]).scores
        prompts, completions = args if len(args) == 2 else (columns.pop("prompts", None), columns.pop("completions"))
        column = next((c for c in IMAGE_COLUMNS if c in columns), None)
        if column is None:
            raise TypeError(
                f"{type(self).__name__} scores images, but trl called it with text completions and no 'image' or "
                "'images' column; wrap it with a render that makes each completion's image: "
                "reward_funcs=[reward.trl_reward_func(scorer, render)] (renderers: "
                "reward.render_from_pipeline(pipe), reward.images_from_column(NAME))"
            )
        from reward.integrations.renderers import images_from_column
        from reward.integrations.trl_rewards import trl_reward_func

        return trl_reward_func(self, images_from_column(column))(prompts, completions, **columns)
