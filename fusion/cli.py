"""What ``python fusion/fit.py`` does, callable from tests: settings → pairs → fit → intervals → comparison → files.

>>> FusionSettings.from_config({"pairs": "p.jsonl", "scores": "s.jsonl"}).out
'fusion_weights.json'
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fusion.bradley_terry import TIE_MODELS, BTFit, FitOptions, fit_bradley_terry
from fusion.inputs import PairData, load_pair_data
from fusion.report import format_comparison_table, format_weights_table, plot_weights
from fusion.uncertainty import BootstrapIntervals, ComparisonRow, bootstrap_intervals, heldout_comparison
from reward.rewards.fusion_weights import FusionWeights, save_weights

__all__ = ["FusionSettings", "run_fit"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FusionSettings:
    """Settings of ``fusion/fit.py``; the same keys, defaults and comments are in ``configs/fusion.yaml``.

    Inputs:
        pairs: JSONL of ``{"a", "b", "label"}`` rows (image paths relative to its folder).
        scores: JSONL of ``{"image", "<dimension>": score, ...}`` rows; or, instead:
        scores_root: the folder the scores file's image paths are relative to (default: its own folder).
        reward: the config of a reward with dimensions that scores the pairs' images: a mapping with its
            registered ``name`` and the settings ``get_reward`` gets (the ``reward`` config group:
            ``reward=sa-iqa reward.path=DIR``), or just a name,
        batch_size: images per ``Reward.score`` call.
        dimensions: the score columns to fuse, in order; ``None`` = every numeric non-metadata key.
        skip_bad: skip (and count) bad rows instead of stopping at the first.
    Model: tie_model, l2, nonneg, max_abs_weight (see :class:`fusion.bradley_terry.FitOptions`).
    Evaluation: bootstrap (resamples, 0 = no intervals), ci_level, holdout (fraction of pairs, 0 = none), seed.
    Output: out (the weights JSON), plot (a bar chart next to it, same name with ``.png``).
    """

    pairs: str
    scores: str | None = None
    scores_root: str | None = None
    reward: dict[str, Any] | None = None
    batch_size: int = 8
    dimensions: list[str] | None = None
    skip_bad: bool = False
    tie_model: str = "davidson"
    l2: float = 1e-4
    nonneg: bool = False
    max_abs_weight: float = 100.0
    bootstrap: int = 200
    ci_level: float = 0.95
    holdout: float = 0.2
    seed: int = 0
    out: str = "fusion_weights.json"
    plot: bool = True

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> FusionSettings:
        """Validate a config (a Hydra ``DictConfig`` or a plain mapping), reporting every problem at once."""
        if hasattr(cfg, "_metadata"):  # an OmegaConf node: plain containers, interpolations resolved
            from omegaconf import OmegaConf

            cfg = OmegaConf.to_container(cfg, resolve=True)
        values = {k: v for k, v in dict(cfg).items() if k != "hydra"}
        fields = {f.name for f in dataclasses.fields(cls)}
        problems = [f"unknown key {k!r}" for k in sorted(set(values) - fields)]
        values = {k: v for k, v in values.items() if k in fields}
        if values.get("pairs") in (None, "", "???"):
            problems.append("pairs=PAIRS.jsonl is required")
        if (values.get("scores") is None) == (values.get("reward") is None):
            problems.append("give exactly one of scores=SCORES.jsonl or reward=NAME (e.g. reward=sa-iqa)")
        reward = values.get("reward")
        if isinstance(reward, str):
            values["reward"] = reward = {"name": reward}
        if reward is not None and not (isinstance(reward, dict) and isinstance(reward.get("name"), str)):
            problems.append(
                f"reward={reward!r} must name a registered reward: reward=NAME selects configs/reward/NAME.yaml, "
                "which must hold name: NAME"
            )
        dims = values.get("dimensions")
        if dims is not None and (not isinstance(dims, list) or not dims or not all(isinstance(d, str) for d in dims)):
            problems.append(
                f"dimensions={dims!r} must be a non-empty list of names, e.g. dimensions=[layout,lighting]"
            )
        checks = [
            ("tie_model", lambda v: v in TIE_MODELS, f"one of {list(TIE_MODELS)}"),
            ("l2", lambda v: isinstance(v, int | float) and v >= 0, "a number >= 0"),
            ("max_abs_weight", lambda v: isinstance(v, int | float) and v > 0, "a number > 0"),
            ("bootstrap", lambda v: isinstance(v, int) and (v == 0 or v >= 2), "0 (no intervals) or an int >= 2"),
            ("ci_level", lambda v: isinstance(v, float) and 0 < v < 1, "a number in (0, 1), e.g. 0.95"),
            ("holdout", lambda v: isinstance(v, int | float) and 0 <= v < 1, "a fraction in [0, 1), e.g. 0.2"),
            ("batch_size", lambda v: isinstance(v, int) and v >= 1, "an int >= 1"),
            ("seed", lambda v: isinstance(v, int), "an int"),
            ("out", lambda v: isinstance(v, str) and v.endswith(".json"), "a path ending in .json"),
        ]
        for key, ok, expected in checks:
            if key in values and not ok(values[key]):
                problems.append(f"{key}={values[key]!r} must be {expected}")
        if problems:
            raise ValueError(
                "Invalid fusion config: " + "; ".join(problems) + ". See configs/fusion.yaml for every key; "
                "run e.g. `python fusion/fit.py pairs=PAIRS.jsonl scores=SCORES.jsonl out=WEIGHTS.json`."
            )
        return cls(**values)


def _meta(
    settings: FusionSettings,
    data: PairData,
    fit: BTFit,
    ci: BootstrapIntervals | None,
    rows: list[ComparisonRow],
    reward_name: str | None,
) -> dict[str, Any]:
    """The ``meta`` block of the weights file: the data, the model, the held-out check, provenance."""
    return {
        "n_pairs": data.n_pairs,
        "n_ties": data.n_ties,
        "n_skipped": len(data.skipped),
        "tie_model": settings.tie_model,
        "nu": fit.nu,
        "l2": settings.l2,
        "nonneg": settings.nonneg,
        "max_abs_weight": settings.max_abs_weight,
        "train_accuracy": fit.accuracy(data.x_a, data.x_b, data.labels),
        "train_log_likelihood_per_pair": fit.log_likelihood / data.n_pairs,
        "heldout_fraction": settings.holdout if rows else 0.0,
        "heldout_accuracy": rows[0].accuracy if rows else None,
        "heldout_log_likelihood_per_pair": rows[0].log_likelihood if rows else None,
        "heldout_baselines": {
            r.name: {"accuracy": r.accuracy, "log_likelihood_per_pair": r.log_likelihood} for r in rows[1:]
        },
        "bootstrap": settings.bootstrap,
        "ci_level": settings.ci_level if ci is not None else None,
        "seed": settings.seed,
        "converged": fit.converged,
        "warnings": list(fit.warnings),
        "pairs": settings.pairs,
        "scores": settings.scores,
        "reward": reward_name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def run_fit(cfg: Mapping[str, Any]) -> FusionWeights:
    """Fit fusion weights as configured, log the tables, write ``out`` (JSON) and its ``.png`` bar chart."""
    settings = FusionSettings.from_config(cfg)
    reward_cfg = dict(settings.reward or {})
    reward_name = reward_cfg.pop("name", None)
    data = load_pair_data(
        settings.pairs,
        settings.scores,
        reward=reward_name,
        reward_cfg=reward_cfg,
        dimensions=settings.dimensions,
        skip_bad=settings.skip_bad,
        batch_size=settings.batch_size,
        scores_root=settings.scores_root,
    )
    summary = f"{data.n_pairs} pairs ({data.n_ties} ties, {len(data.skipped)} bad rows skipped)"
    logger.info(
        "Fitting %s on %s, tie_model=%s, l2=%g.", list(data.dimensions), summary, settings.tie_model, settings.l2
    )
    options = FitOptions(settings.tie_model, settings.l2, settings.nonneg, settings.max_abs_weight)
    x_a, x_b, labels = data.x_a, data.x_b, data.labels
    fit = fit_bradley_terry(x_a, x_b, labels, dimensions=data.dimensions, options=options)
    ci = None
    if settings.bootstrap:
        ci = bootstrap_intervals(
            x_a, x_b, labels, n_resamples=settings.bootstrap, level=settings.ci_level, seed=settings.seed, fit=fit
        )
    rows = []
    if settings.holdout > 0 and data.n_pairs >= 2:
        rows = heldout_comparison(
            x_a,
            x_b,
            labels,
            dimensions=data.dimensions,
            options=options,
            fraction=settings.holdout,
            seed=settings.seed,
        )
    elif settings.holdout > 0:
        logger.warning("Only %d pair(s): no held-out comparison.", data.n_pairs)
    weights = FusionWeights(
        dimensions=data.dimensions,
        weights=fit.weights,
        ci_low=None if ci is None else ci.low,
        ci_high=None if ci is None else ci.high,
        meta=_meta(settings, data, fit, ci, rows, reward_name),
    )
    logger.info("Fusion weights (S = x·w), ν = %.4g:\n%s", fit.nu, format_weights_table(weights))
    if rows:
        table = format_comparison_table(rows)
        logger.info("Held-out comparison (%d pairs, seed %d):\n%s", rows[0].n_heldout, settings.seed, table)
    out = save_weights(settings.out, weights)
    logger.info("Wrote %s", out)
    if settings.plot:
        logger.info("Wrote %s", plot_weights(weights, out.with_suffix(".png")))
    return weights
