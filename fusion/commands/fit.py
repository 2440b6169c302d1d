"""What ``perceptual-rewards fit`` does: settings → pairs → fit → intervals → comparison → files.

>>> FusionSettings(pairs="p.jsonl", scores="s.jsonl").out
'fusion_weights.json'
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from omegaconf import MISSING

from fusion.bradley_terry import TIE_MODELS, BTFit, FitOptions, fit_bradley_terry, pairwise_accuracy
from fusion.inputs import PairData, load_pair_data, scored_by
from fusion.uncertainty import ComparisonRow, bootstrap_intervals, heldout_comparison
from reward.core.config import BATCH
from reward.core.errors import UserError
from reward.core.fingerprints import weights_fingerprint
from reward.core.outputs import RunComplete, check_output_file, differences, fingerprint, path_inputs
from reward.core.secrets import redact
from reward.core.summary import log_summary, text_table
from reward.data.files import json_safe
from reward.data.labels import LABEL_A, LABEL_TIE
from reward.data.manifest import allow_absolute_paths_field, image_paths, image_root_field
from reward.rewards.fusion_weights import FusionWeights, load_weights, save_weights
from reward.rewards.registry import reward_config

logger = logging.getLogger(__name__)


@dataclass
class FusionSettings:
    """Settings of ``perceptual-rewards fit`` (the schema of ``configs/fit.yaml``); every problem reported at once."""

    groups: ClassVar[dict] = {"reward": reward_config}

    pairs: str = field(
        default=MISSING,
        metadata={"help": 'JSONL rows {"a": image, "b": image, "label": "a"|"b"|"tie"}; paths relative to its folder'},
    )
    scores: str | None = field(
        default=None,
        metadata={"help": 'JSONL rows {"image": image, "<dimension>": score, ...}; paths relative to its folder'},
    )
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    scores_root: str | None = field(
        default=None,
        metadata={
            "help": "folder the scores' image paths are relative to; null: the evaluated data's folder for the "
            "scores.jsonl of an evaluate run (read from its run.json), else image_root, else the scores file's "
            "folder"
        },
    )
    reward: Any = field(
        default=None,
        metadata={"help": "or: reward=NAME, a reward with dimensions (e.g. sa-iqa) scores the images in the pairs"},
    )
    batch_size: int = field(
        default=8, metadata={"help": "images per Reward.score call (reward= only)", "range": BATCH}
    )
    dimensions: list[str] | None = field(
        default=None, metadata={"help": "dimensions to fuse, in order, e.g. [layout,harmony]; null = numeric keys"}
    )
    skip_bad: bool = field(
        default=False,
        metadata={"help": "skip and count bad rows (bad label, unscored image, missing dimension) instead of failing"},
    )
    tie_model: str = field(
        default="davidson",
        metadata={
            "help": "davidson (ours: ties get their own probability, nu fitted) | zero (eq. 2 literally: a tie "
            "is y = 0, a win of b, so the weights depend on which image of a tied pair is listed first; "
            "warned with the number of ties) | half (a tie is y = 0.5: eq. 2 averaged over both orders) | "
            "drop (ties left out)"
        },
    )
    l2: float = field(
        default=1e-4,
        metadata={"help": "L2 penalty l2/2*||w||^2 added to the mean negative log-likelihood; 0 = plain MLE"},
    )
    nonneg: bool = field(
        default=True,
        metadata={
            "help": "every weight >= 0 (ours): with divide_by_sum a weighted mean of the dimensions, so a written "
            "file is always usable; false: the free fit of eq. 2 (with divide_by_sum, refused when its weights sum "
            "to 0 or less)"
        },
    )
    divide_by_sum: bool = field(
        default=True,
        metadata={
            "help": "reward=sa-iqa divides the fused score by sum(w) (ours: the same ranking, kept on the dimensions' "
            "1-5 scale); false: eq. 3 as written, S = x.w (recorded in the file, applied by the reward)"
        },
    )
    max_abs_weight: float = field(
        default=100.0, metadata={"help": "box bound on each |w_j|, keeps perfectly separable data finite"}
    )
    bootstrap: int = field(
        default=200, metadata={"help": "resamples for the weights' intervals; 0 = none", "range": (0, 1_000_000)}
    )
    ci_level: float = field(default=0.95, metadata={"help": "confidence level of the bootstrap intervals"})
    holdout: float = field(
        default=0.2,
        metadata={"help": "fraction of pairs held out to compare with uniform and single-dimension weights; 0 = none"},
    )
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap and of the held-out split"})
    out: str = field(
        default="fusion_weights.json",
        metadata={
            "help": "weights JSON (a scorer directory reads fusion_weights.json); chart: *.png",
            "output": "file",
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "true: an existing out file (and its chart) is moved aside to NAME.old-<time>"},
    )
    plot: bool = field(
        default=True, metadata={"help": "write the bar chart of the weights with their intervals next to out"}
    )

    def __post_init__(self) -> None:
        if isinstance(self.reward, str):  # reward=NAME given as a bare name
            self.reward = {"name": self.reward}

    def problems(self) -> list[str]:
        found = []
        if (self.scores is None) == (self.reward is None):
            found.append("give exactly one of scores=SCORES.jsonl or reward=NAME (e.g. reward=sa-iqa)")
        if self.reward is not None and not (
            isinstance(self.reward, dict) and isinstance(self.reward.get("name"), str)
        ):
            found.append(
                f"reward={self.reward!r} must name a registered reward: reward=NAME selects configs/reward/NAME.yaml"
            )
        dims = self.dimensions
        checks = {
            "dimensions": (
                dims is None or bool(dims) and all(isinstance(d, str) for d in dims),
                "a non-empty list of names, e.g. dimensions=[layout,lighting]",
            ),
            "tie_model": (self.tie_model in TIE_MODELS, f"one of {list(TIE_MODELS)}"),
            "l2": (self.l2 >= 0, "a number >= 0"),
            "max_abs_weight": (self.max_abs_weight > 0, "a number > 0"),
            "bootstrap": (self.bootstrap == 0 or self.bootstrap >= 2, "0 (no intervals) or an int >= 2"),
            "ci_level": (0 < self.ci_level < 1, "a number in (0, 1), e.g. 0.95"),
            "holdout": (0 <= self.holdout < 1, "a fraction in [0, 1), e.g. 0.2"),
            "out": (self.out.endswith(".json"), "a path ending in .json"),
        }
        found += [f"{k}={getattr(self, k)!r} must be {want}" for k, (ok, want) in checks.items() if not ok]
        if found:  # the command to run, once after the list
            found[-1] += (
                ". Run e.g. `perceptual-rewards fit pairs=PAIRS.jsonl scores=SCORES.jsonl out=WEIGHTS.json` (every "
                "key: perceptual-rewards fit --help)."
            )
        return found


MIN_DECIDED_FOR_CI = 10  # fewer decided (non-tie) pairs: no bootstrap interval is reported, and the file says why


def run(settings: FusionSettings) -> FusionWeights:
    """Set up (the output file, the pairs and their scores), fit the weights with their intervals and held-out
    comparison, report (the tables, ``out`` as JSON and its ``.png`` bar chart)."""
    data, run_meta = set_up(settings)
    weights, comparison = fit_weights(settings, data, run_meta)
    return report(settings, data, weights, comparison)


def set_up(settings: FusionSettings) -> tuple[PairData, dict[str, Any]]:
    """The output file checked before any work (the same fit there already: :class:`RunComplete`), then the pairs
    matched with their dimension scores (read from ``scores=``, or scored by ``reward=``): ``(pairs, the reward that
    scored them, the run and the scorer they were fitted on)``."""
    reward_cfg = dict(settings.reward or {})
    reward_name = reward_cfg.pop("name", None)
    run = this_run(settings, reward_cfg)
    check_rerun(settings, run)
    check_output_file(settings.out, overwrite=settings.overwrite)
    data = load_pair_data(
        settings.pairs,
        settings.scores,
        reward=reward_name,
        reward_cfg=reward_cfg,
        dimensions=settings.dimensions,
        skip_bad=settings.skip_bad,
        batch_size=settings.batch_size,
        scores_root=settings.scores_root,
        **image_paths(settings),
    )
    return data, {"reward": reward_name, "run": run, "fitted_on": fitted_on(settings, reward_cfg)}


def this_run(settings: FusionSettings, reward_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What this fit is made of: its settings (``out``, ``overwrite`` aside) and its inputs by content (the weights
    file and its chart left out of a folder read, e.g. a scorer folder the file is written into)."""
    out = os.path.realpath(settings.out)
    exclude = [out, str(Path(out).with_suffix(".png"))]
    roots = [settings.scores_root] if settings.scores_root else []
    inputs = {"pairs": fingerprint(settings.pairs), "scores": fingerprint(settings.scores, roots=roots)}
    inputs |= {f"reward.{k}": fingerprint(v, exclude=exclude) for k, v in path_inputs(reward_cfg).items()}
    record = {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("out", "overwrite")}
    return {"command": "fit", "settings": json_safe(redact(record)), "inputs": inputs}


def check_rerun(settings: FusionSettings, run: dict[str, Any]) -> None:
    """``out`` already holding the weights of this same fit (settings and inputs by content): :class:`RunComplete`,
    as every command's identical rerun; of another fit: refused naming the differences, unless ``overwrite=true``."""
    out = Path(settings.out)
    if settings.overwrite or not out.is_file():
        return
    try:
        saved = load_weights(out).meta.get("run")
    except UserError:  # not a weights file: check_output_file refuses it
        return
    if not isinstance(saved, dict) or "settings" not in saved:
        return
    found = differences(saved, run)
    if not found:
        raise RunComplete(f"already complete: {out} holds this fit (overwrite=true fits it anew)")
    raise UserError(
        f"{out} exists already and holds another fit ({len(found)} difference(s): {'; '.join(found[:6])}); pass "
        "another out=, or overwrite=true to move it aside"
    )


def fitted_on(settings: FusionSettings, reward_cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The scorer whose dimension scores the weights are fitted on, with its weights by content (``reward=sa-iqa``
    checks it is the scorer it fuses): ``reward.model``, or the scorer an evaluate run's ``metrics.json`` beside
    ``scores=`` records; ``None`` when unknown (a scores file of another origin)."""
    model = reward_cfg.get("model")
    if isinstance(model, str) and model:
        digest = weights_fingerprint(model)
        return {"path": model, "weights": digest} if digest else None
    found = scored_by(settings.scores) if settings.scores else None
    if found is None:
        logger.info("%s: no record of the scorer that wrote it; the weights file cannot name one", settings.scores)
    return found


def fit_weights(
    settings: FusionSettings, data: PairData, run_meta: dict[str, Any]
) -> tuple[FusionWeights, list[ComparisonRow]]:
    """The Bradley-Terry fit, its bootstrap intervals (when enough pairs are decided) and the held-out comparison
    with uniform and single-dimension weights."""
    summary = f"{data.n_pairs} pairs ({data.n_ties} ties, {len(data.skipped)} bad rows skipped)"
    logger.info(
        "Fitting %s on %s, tie_model=%s, l2=%g.", list(data.dimensions), summary, settings.tie_model, settings.l2
    )
    options = FitOptions(settings.tie_model, settings.l2, settings.nonneg, settings.max_abs_weight)
    if data.n_pairs == data.n_ties:
        raise UserError(
            f"all {data.n_pairs} pairs are ties: a tie says nothing about which dimension matters, so no weights can "
            f"be estimated from {settings.pairs}; add pairs with a preferred image (label a or b)"
        )
    bt_fit = fit_bradley_terry(data.x_a, data.x_b, data.labels, dimensions=data.dimensions, options=options)
    check_usable(settings, data, bt_fit)
    pairs, decided, ci, note = (data.x_a, data.x_b, data.labels), data.n_pairs - data.n_ties, None, None
    if settings.bootstrap and decided < MIN_DECIDED_FOR_CI:
        note = (
            f"no confidence intervals: {decided} decided pair(s), fewer than the {MIN_DECIDED_FOR_CI} a bootstrap "
            "needs to say anything"
        )
        logger.warning("%s", note)
    elif settings.bootstrap:
        ci = bootstrap_intervals(
            *pairs, n_resamples=settings.bootstrap, level=settings.ci_level, seed=settings.seed, fit=bt_fit
        )
    rows = []
    if settings.holdout > 0 and data.n_pairs >= 2:
        split = {"fraction": settings.holdout, "seed": settings.seed}
        rows = heldout_comparison(*pairs, dimensions=data.dimensions, options=options, **split)
    elif settings.holdout > 0:
        logger.warning("Only %d pair(s): no held-out comparison.", data.n_pairs)
    # the data, the model, the held-out check, provenance (in this order in the file)
    meta = {"n_pairs": data.n_pairs, "n_ties": data.n_ties, "n_skipped": len(data.skipped)}
    model = ("tie_model", "nu", "l2", "nonneg", "divide_by_sum", "max_abs_weight")
    meta |= {k: bt_fit.nu if k == "nu" else getattr(settings, k) for k in model}
    meta["train_accuracy"] = pairwise_accuracy(bt_fit.score(data.x_a) - bt_fit.score(data.x_b), data.labels)
    meta["train_log_likelihood_per_pair"] = bt_fit.log_likelihood / data.n_pairs
    held = rows[0] if rows else None
    meta |= {"heldout_fraction": settings.holdout if rows else 0.0, "heldout_accuracy": held and held.accuracy}
    meta["heldout_log_likelihood_per_pair"] = held and held.log_likelihood
    meta["heldout_baselines"] = {
        r.name: {"accuracy": r.accuracy, "log_likelihood_per_pair": r.log_likelihood} for r in rows[1:]
    }
    meta |= {"bootstrap": settings.bootstrap, "ci_level": settings.ci_level if ci is not None else None}
    meta |= {"seed": settings.seed, "converged": bt_fit.converged, "warnings": list(bt_fit.warnings)}
    meta |= {"pairs": settings.pairs, "scores": settings.scores, "reward": run_meta["reward"]}
    meta |= {"date": datetime.now(UTC).isoformat(timespec="seconds"), "ci_note": note, "run": run_meta["run"]}
    meta["fitted_on"] = run_meta["fitted_on"]  # the scorer (and its weights' digest) whose scores these weights fuse
    low, high = (None, None) if ci is None else ci[:2]
    weights = FusionWeights(data.dimensions, bt_fit.weights, ci_low=low, ci_high=high, meta=meta)
    logger.info("Fusion weights (S = x·w), ν = %.4g:\n%s", bt_fit.nu, format_weights_table(weights))
    return weights, rows


def check_usable(settings: FusionSettings, data: PairData, bt_fit: BTFit) -> None:
    """Refuse, before anything is written, weights ``reward=sa-iqa`` could not use: when no dimension favours the
    preferred images (then the best non-negative fit is w = 0: no weighting beats the plain mean, whatever ``nonneg``),
    and free weights summing to 0 or less when the reward divides by their sum; warn about negative weights."""
    w = np.asarray(bt_fit.weights, dtype=np.float64)
    named = ", ".join(f"{d} {v:.4g}" for d, v in zip(data.dimensions, w, strict=True))
    decided = data.labels != LABEL_TIE  # each dimension's mean score lead of the preferred image (> 0: it predicts)
    lead = ((data.x_a - data.x_b)[decided] * np.where(data.labels[decided] == LABEL_A, 1.0, -1.0)[:, None]).mean(0)
    flat = not np.any(np.abs((data.x_a - data.x_b) @ w) > 1e-9)
    if flat or (w.sum() <= 0 and settings.divide_by_sum and not np.any(lead > 0)):
        leads = ", ".join(f"{d} {v:+.3g}" for d, v in zip(data.dimensions, lead, strict=True))
        raise UserError(
            f"no usable fusion weights: no dimension predicts these preferences better than the plain mean (each "
            f"dimension's mean lead of the preferred image over {int(decided.sum())} decided pairs: {leads}), so "
            "nothing was written and reward=sa-iqa keeps the plain mean of the dimensions (its fusion without a "
            f"weights file). Check the scores: that {settings.pairs} and they are of the same images, and how the "
            "scorer agrees with human ratings: perceptual-rewards evaluate reward=sa-iqa reward.model=SCORER "
            "data=RATINGS.jsonl out=DIR"
        )
    if w.sum() <= 0 and settings.divide_by_sum:
        raise UserError(
            f"the free fit's weights sum to {w.sum():.4g} ({named}): reward=sa-iqa divides the fused score by that "
            "sum and cannot use them, so nothing was written; fit with nonneg=true (the default: every weight >= 0) "
            "or use eq. 3 as written (divide_by_sum=false)"
        )
    if (w < 0).any() and settings.divide_by_sum:
        logger.warning(
            "negative fusion weights (%s): the fused score S = x.w / sum(w) may leave the dimensions' scale; "
            "nonneg=true (the default) keeps it a weighted mean",
            named,
        )


def report(
    settings: FusionSettings, data: PairData, weights: FusionWeights, comparison: list[ComparisonRow]
) -> FusionWeights:
    """The held-out table, ``out`` (the weights as JSON), its bar chart and the closing summary."""
    if comparison:
        cells = [[r.name, f"{r.accuracy:.3f}", f"{r.log_likelihood:.4f}"] for r in comparison]
        table = text_table(["fusion", "held-out acc", "held-out LL/pair"], cells, [False, True, True])
        logger.info("Held-out comparison (%d pairs, seed %d):\n%s", comparison[0].n_heldout, settings.seed, table)
    out = save_weights(settings.out, weights)
    plot = plot_weights(weights, out.with_suffix(".png")) if settings.plot else None
    log_summary(
        "fusion fit",
        {"pairs": data.n_pairs, "ties": data.n_ties, "dimensions": len(data.dimensions)},
        {"weights": out, "plot": plot},
    )
    return weights


def format_weights_table(weights: FusionWeights) -> str:
    """One line per dimension: weight, share (``w / sum(w)``, what ``reward=sa-iqa`` fuses with), bootstrap interval.

    >>> print(format_weights_table(FusionWeights(("layout", "lighting"), (0.6, 0.2), (0.4, 0.0), (1.1, 0.5))))
    dimension  weight  share  ci_low  ci_high
    ---------  ------  -----  ------  -------
    layout     0.6000  0.750  0.4000   1.1000
    lighting   0.2000  0.250  0.0000   0.5000
    """
    total, ci = sum(weights.weights), weights.ci_low is not None and weights.ci_high is not None
    header = ["dimension", "weight", "share"] + (["ci_low", "ci_high"] if ci else [])
    rows = [
        [name, f"{w:.4f}", f"{w / total:.3f}" if total > 0 else "n/a"]
        + ([f"{weights.ci_low[j]:.4f}", f"{weights.ci_high[j]:.4f}"] if ci else [])
        for j, (name, w) in enumerate(zip(weights.dimensions, weights.weights, strict=True))
    ]
    return text_table(header, rows, [False] + [True] * (len(header) - 1))


def plot_weights(weights: FusionWeights, path: str | Path, title: str = "Bradley–Terry fusion weights") -> Path:
    """Bar chart of the weights, their intervals as error bars, saved as PNG (atomically)."""
    from reward.eval.plots import new_figure, save_figure

    d = len(weights.dimensions)
    fig, ax = new_figure((max(4.0, 1.0 + 1.1 * d), 3.6), dpi=100)
    yerr = None
    if weights.ci_low is not None and weights.ci_high is not None:
        yerr = [
            [max(w - lo, 0.0) for w, lo in zip(weights.weights, weights.ci_low, strict=True)],
            [max(hi - w, 0.0) for w, hi in zip(weights.weights, weights.ci_high, strict=True)],
        ]
        level = weights.meta.get("ci_level")
        title += f" ({level:.0%} bootstrap CI)" if isinstance(level, float) else " (bootstrap CI)"
    ax.bar(range(d), weights.weights, yerr=yerr, capsize=5, color="#4c72b0", ecolor="#222222")
    ax.axhline(0.0, color="#555555", linewidth=0.8)
    ax.set_xticks(range(d), weights.dimensions, rotation=20 if d > 5 else 0)
    ax.set_ylabel("weight w")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
