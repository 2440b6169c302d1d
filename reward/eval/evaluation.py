"""Score every row of a ratings manifest with a reward and compare with the human MOS (the ``evaluate`` command, SFT's
final evaluation, Q-Bench A3). Each image is scored once, whatever the number of dimensions it is rated on; a reward
with dimensions is compared dimension by dimension (``compare="fused"``: its fused score against every row), one
without against every row. Rows left out are said with their reasons and counts. Its settings are read before
torch, SciPy and matplotlib load (a command checks them first): those load when rows are scored, measured, drawn."""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reward.core.errors import UserError
from reward.data import RatingRow, SkippedRow
from reward.data.files import atomic_write_json, atomic_write_jsonl, json_safe, safe_name

if TYPE_CHECKING:
    from reward.eval.parallel import ScoredImages
    from reward.rewards.base import Reward

logger = logging.getLogger(__name__)


class NothingScored(UserError):
    """Not one row of the manifest got a score (every image bad, or every scoring request failed)."""


@dataclass
class EvalSettings:
    batch_size: int = 16  # images per reward call
    skip_bad: bool = False  # skip (and count) rows whose image cannot be used instead of failing
    max_decode_pixels: int | None = 36_000_000  # decode guard: larger images are refused unread
    mos_range: tuple[float, float] = (1.0, 5.0)  # the MOS scale of the manifest
    tau_low: float | None = None  # HOR: MOS at or below this is "low quality" (None: 3 on 1-5, mapped to mos_range)
    tau_high: float | None = None  # HOR: predictions at or above this (mapped to the MOS scale) are "high" (None: 4)
    bootstrap: int = 0  # resamples for 95% confidence intervals of SRCC and HOR (0: none)
    seed: int = 0
    num_workers: int = 2  # DataLoader workers decoding images while the model scores (0: in the main process)
    image_root: str | None = None  # the folder relative image paths are read from (None: each manifest's own)
    allow_absolute_paths: bool = False  # manifests may name images by absolute path
    compare: str = "dimension"  # "dimension": a row against the reward's score of its dimension; "fused": its score

    def taus(self) -> tuple[float, float]:
        """HOR's thresholds on the MOS scale: the ones set, else PACE's 3 and 4 on a 1-5 scale mapped linearly onto
        ``mos_range`` (a 0-100 dataset: 50 and 75), so that HOR means the same on every dataset.

        >>> EvalSettings(mos_range=(0.0, 100.0)).taus(), EvalSettings(mos_range=(0.0, 100.0), tau_low=40).taus()
        ((50.0, 75.0), (40.0, 75.0))
        """
        from reward.eval.metrics import to_mos_scale

        mapped = to_mos_scale(np.array(HOR_TAUS), (1.0, 5.0), self.mos_range)
        return tuple(float(m if t is None else t) for m, t in zip(mapped, (self.tau_low, self.tau_high), strict=True))


HOR_TAUS = (3.0, 4.0)  # PACE's HOR thresholds on the 1-5 scale
COMPARE = ("dimension", "fused")  # EvalSettings.compare


def why_skipped(skipped: Sequence[SkippedRow], limit: int = 4) -> str:
    """The reasons rows were left out, with their counts, most frequent first, on one line.

    >>> why_skipped([SkippedRow(1, "no dimension 'q'"), SkippedRow(2, "no dimension 'q'"), SkippedRow(7, "bad image")])
    "2 rows: no dimension 'q'; line 7: bad image"
    """
    counts = Counter(s.reason for s in skipped)
    first = {s.reason: s.line for s in sorted(skipped, key=lambda s: -s.line)}  # the earliest line wins
    parts = [f"{n} rows: {r}" if n > 1 else f"line {first[r]}: {r}" for r, n in counts.most_common(limit)]
    rest = sum(n for _, n in counts.most_common()[limit:])
    return "; ".join(parts) + (f"; {rest} more rows for other reasons" if rest else "")


def _no_dimension(wanted: Sequence[str], has: Sequence[str]) -> str:
    names = ", ".join(repr(d) for d in wanted)
    return f"the scorer has no dimension {names} (it has {', '.join(has)}); compare its fused score with compare=fused"


def check_dimensions(rows: Sequence[RatingRow], known: Sequence[str] | None) -> None:
    """:class:`NothingScored` when a reward of the dimensions ``known`` (compared dimension by dimension) has none of
    the dimensions ``rows`` are rated on, before any image is scored (``evaluate``: before the reward loads)."""
    if known and rows and not any(row.dimension in known for row in rows):
        lacking = _no_dimension(sorted({row.dimension for row in rows}), known)
        raise NothingScored(f"no row could be scored: {len(rows)} rows: {lacking}")


@dataclass
class EvalResult:
    metrics: dict[str, dict[str, Any]]
    scores: list[dict[str, Any]]  # one row per image: image, score, each dimension's score
    predictions: dict[str, tuple[np.ndarray, np.ndarray]]  # dimension -> (prediction, mos)
    skipped: list[SkippedRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # processes, images_per_process, resumed


def score_rating_rows(reward: Reward, rows: Sequence[RatingRow], settings: EvalSettings, **where: Any) -> ScoredImages:
    """Each distinct image of ``rows`` scored once, by its ``key``; ``where``: as :func:`.parallel.score_images`'s."""
    from reward.eval.parallel import score_images

    unique: dict[str, RatingRow] = {}
    for row in rows:
        unique.setdefault(row.key, row)
    items = [(k, r.image, r.line) for k, r in unique.items()]
    batching = {"batch_size": settings.batch_size, "num_workers": settings.num_workers, "skip_bad": settings.skip_bad}
    return score_images(reward, items, max_pixels=settings.max_decode_pixels, **batching, **where)


def evaluate_rows(
    reward: Reward,
    rows: Sequence[RatingRow],
    settings: EvalSettings,
    *,
    score_range: tuple[float, float],
    **where: Any,
) -> EvalResult:
    """``rows`` scored (``where``: as :func:`score_rating_rows`) and PLCC/SRCC/KRCC/HOR per dimension and overall.

    A reward with dimensions is compared only with the rows of its own dimensions (the others are skipped and
    counted, never compared with the fused score). Rows left out are one warning of reasons with counts; when none
    is left, :class:`NothingScored` gives them (before any image is scored when the reward lacks every row's
    dimension)."""
    if settings.compare not in COMPARE:
        raise UserError(f"compare={settings.compare!r}: use one of {', '.join(COMPARE)}")
    dims = getattr(reward, "dimensions", None)
    judged = (getattr(reward, "route", None) or {}).get(
        "dimension"
    )  # a judge of one dimension (a protocol's) names it
    dims = list(dims) if isinstance(dims, list | tuple) else [judged] if judged else []
    known = dims if settings.compare == "dimension" else []  # none of the rows' dimensions: said before scoring
    check_dimensions(rows, known)
    done = score_rating_rows(reward, rows, settings, **where)
    scored, skipped = done.scores, list(done.skipped)
    skipped_lines = {s.line for s in skipped}
    by_dim: dict[str, tuple[list[float], list[float]]] = {}
    for row in rows:
        if row.key not in scored:
            if row.line not in skipped_lines:  # another row of the same image was the bad one
                skipped.append(SkippedRow(row.line, f"image {row.key} could not be scored"))
            continue
        entry = scored[row.key]
        has = known or [d for d in entry if d != "score" and settings.compare == "dimension"]
        if has and row.dimension not in has:  # a reward of other dimensions: skipped, never compared with its score
            skipped.append(SkippedRow(row.line, _no_dimension([row.dimension], has)))
            continue
        pred = entry.get(row.dimension, entry["score"]) if has else entry["score"]
        preds, moses = by_dim.setdefault(row.dimension, ([], []))
        preds.append(pred)
        moses.append(row.mos)
    if not by_dim:
        raise NothingScored(f"no row could be scored: {why_skipped(skipped)}")
    if skipped:
        logger.warning("%d of %d rows not compared: %s", len(skipped), len(rows), why_skipped(skipped))
    predictions = {d: (np.asarray(p, float), np.asarray(m, float)) for d, (p, m) in by_dim.items()}
    metrics = {d: _metrics(p, m, settings, score_range) for d, (p, m) in sorted(predictions.items())}
    every = (np.concatenate([v[i] for v in predictions.values()]) for i in (0, 1))
    metrics["overall"] = _metrics(*every, settings, score_range)
    order = dict.fromkeys(r.key for r in rows)  # manifest order, whatever the split
    scores = [{"image": k, **scored[k]} for k in order if k in scored]
    return EvalResult(metrics, scores, predictions, sorted(skipped, key=lambda s: s.line), done.meta)


def _metrics(p: np.ndarray, m: np.ndarray, s: EvalSettings, score_range: tuple[float, float]) -> dict[str, Any]:
    from reward.eval.metrics import bootstrap_ci, hor, srcc, summarize

    tau_low, tau_high = s.taus()
    hor_kwargs = {"tau_low": tau_low, "tau_high": tau_high, "pred_range": score_range, "mos_range": s.mos_range}
    out: dict[str, Any] = summarize(p, m, **hor_kwargs)
    out.update(mos_range=list(s.mos_range), hor_thresholds=[tau_low, tau_high])  # the scale HOR was computed on
    if s.bootstrap > 0 and len(p) > 2:
        out["srcc_ci"] = list(bootstrap_ci(srcc, p, m, n=s.bootstrap, seed=s.seed))
        out["hor_ci"] = list(bootstrap_ci(functools.partial(hor, **hor_kwargs), p, m, n=s.bootstrap, seed=s.seed))
    return json_safe(out)


def write_results(
    out_dir: str | Path, result: EvalResult, settings: EvalSettings, score_range: tuple[float, float], title: str
) -> dict[str, Path]:
    """``metrics.json``, ``scores.jsonl`` and one scatter plot per dimension in ``out_dir``."""
    from reward.eval.metrics import to_mos_scale
    from reward.eval.parallel import SCORES
    from reward.eval.plots import scatter_vs_mos

    out = Path(out_dir)
    metrics = {**result.metrics, "skipped": len(result.skipped), **({"meta": result.meta} if result.meta else {})}
    paths = {"metrics": atomic_write_json(out / "metrics.json", metrics)}
    paths["scores"] = atomic_write_jsonl(out / SCORES, result.scores)  # complete: replaces the partial files
    for part in out.glob("scores.rank*.jsonl"):
        part.unlink()
    if result.skipped:
        paths["skipped"] = atomic_write_jsonl(out / "skipped.jsonl", [vars(s) for s in result.skipped])
    taus, mos_range = settings.taus(), settings.mos_range
    for dim, (pred, mos) in result.predictions.items():
        path, mapped = out / f"scatter_{safe_name(dim)}.png", to_mos_scale(pred, score_range, mos_range)
        hor_value = result.metrics[dim].get("hor") or None
        paths[f"plot_{dim}"] = scatter_vs_mos(mapped, mos, path, f"{title}: {dim}", taus, mos_range, hor_value)
    return paths


def format_table(metrics: dict[str, dict[str, Any]]) -> str:
    """A fixed-width table of the per-dimension metrics; its ``overall`` row (footnoted) pools every dimension."""
    cols = ["plcc", "plcc_logistic", "srcc", "krcc", "hor", "n"]
    cells = [
        [
            dim + "*" * (dim == "overall"),
            *("n/a" if m.get(c) is None else f"{m[c]:d}" if c == "n" else f"{m[c]:.4f}" for c in cols),
        ]
        for dim, m in metrics.items()
        if isinstance(m, dict)
    ]
    table = [f"{row[0]:<14}" + "".join(f"{c:>14}" for c in row[1:]) for row in [["dimension", *cols], *cells]]
    if "overall" in metrics:
        table.append("* overall: every dimension's rows pooled into one set (the paper's pooled test set), not a mean")
    return "\n".join(table)
