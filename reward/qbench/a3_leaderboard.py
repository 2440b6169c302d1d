"""Q-Bench A3 assessment leaderboard: a reward over several IQA manifests -> SRCC/PLCC per dataset and their mean.

Like Table VI of Q-Bench+. With ``ensemble=True`` (reward ``qbench`` only) the synonym-ensemble variants of
Table VIII are computed from one forward pass: the six words good, high, fine, poor, low, bad are read together
at the answer position and every variant is eq. 2 on a subset of them.

Example:
    >>> [name for name, _, _ in VARIANTS][:3]
    ['good-poor', 'fine-bad', 'high-low']
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from reward.core.errors import MissingInputError
from reward.data import ManifestResult, load_ratings
from reward.data.datasets import check_source
from reward.eval.evaluation import EvalSettings, score_rating_rows
from reward.eval.metrics import plcc, srcc
from reward.eval.parallel import image_key
from reward.qbench.a3_data import is_a3_json, load_a3_json
from reward.rewards.base import RewardOutput
from reward.rewards.scoring import synonym_ensemble
from reward.vlm import VLM, OptionQuery

__all__ = ["VARIANTS", "SynonymTable", "dataset_names", "format_leaderboard", "leaderboard"]

logger = logging.getLogger(__name__)

# Table VIII: (name, positive words, negative words); the six words are read in one query.
VARIANTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("good-poor", ("good",), ("poor",)),
    ("fine-bad", ("fine",), ("bad",)),
    ("high-low", ("high",), ("low",)),
    ("good+high-poor+low", ("good", "high"), ("poor", "low")),
    ("good+fine-poor+bad", ("good", "fine"), ("poor", "bad")),
    ("good+high+fine-poor+low+bad", ("good", "high", "fine"), ("poor", "low", "bad")),
)
ENSEMBLE_WORDS: tuple[str, ...] = ("good", "high", "fine", "poor", "low", "bad")


class SynonymTable:
    """A reward whose ``dimensions`` are the Table VIII variants, all from one read of the six words."""

    def __init__(
        self, vlm: VLM, prompt: str, response_prefix: str, *, system: str | None = None, temperature: float = 1.0
    ) -> None:
        self.vlm, self.system, self.temperature = vlm, system, temperature
        self.query = OptionQuery(prompt, ENSEMBLE_WORDS, response_prefix)
        vlm.candidate_ids(self.query, system)  # multi-token words fail now

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str] | None = None) -> RewardOutput:
        logp = self.vlm.option_logprobs([[im] for im in images], [self.query], system=self.system).logprobs[:, 0]
        col = {w: i for i, w in enumerate(ENSEMBLE_WORDS)}
        dims: dict[str, torch.Tensor] = {}
        for name, pos, neg in VARIANTS:  # equal set sizes: log-probs give the same result as logits
            dims[name] = synonym_ensemble(
                logp[:, [col[w] for w in pos]], logp[:, [col[w] for w in neg]], self.temperature
            )
        return RewardOutput(scores=dims["good-poor"], dimensions=dims)


def dataset_names(data: Any) -> dict[str, str]:
    """``name -> manifest`` from a list of paths (named by file stem, or folder for ``*/ratings.jsonl``-like
    repeats), datasets by name (``spaq:/data/SPAQ``: named ``spaq``, or ``spaq:test`` with a split) or a mapping.

    >>> dataset_names(["runs/koniq.jsonl", "kadid10k:/tmp:test", "spaq:/tmp"])  # folders that exist
    {'koniq': 'runs/koniq.jsonl', 'kadid10k:test': 'kadid10k:/tmp:test', 'spaq': 'spaq:/tmp'}
    """
    if isinstance(data, str):
        data = [data]
    if isinstance(data, Mapping):
        return {str(k): str(v) for k, v in data.items()}
    if not isinstance(data, Sequence) or not data:
        raise ValueError("a3: data must be a list of ratings manifests, e.g. data=[koniq.jsonl,spaq.jsonl]")
    named = [check_source(str(p)) for p in data]  # a dataset's name and folder are checked before any model loads
    stems = [
        (src.name + (f":{src.split}" if src.split not in (None, "all") else "")) if src else Path(str(p)).stem
        for p, src in zip(data, named, strict=True)
    ]
    if len(set(stems)) < len(stems):
        stems = [f"{Path(str(p)).parent.name}/{Path(str(p)).stem}" for p in data]
    if len(set(stems)) < len(stems):
        raise ValueError(f"a3: manifests {list(data)} have the same names; pass a mapping data={{name: path}}")
    return dict(zip(stems, map(str, data), strict=True))


def leaderboard(reward: Any, datasets: Mapping[str, str], settings: EvalSettings) -> dict[str, Any]:
    """``{"datasets": {name: {variant: {srcc, plcc, n}}}, "mean": {variant: {srcc, plcc}}, "skipped": {...}}``.

    A reward gives the row ``score`` and one row per dimension it scores (e.g. sa-iqa's); :class:`SynonymTable`
    gives the six rows of Table VIII.
    """
    table: dict[str, dict[str, dict[str, float]]] = {}
    skipped: dict[str, int] = {}
    manifests = {name: _ratings(path, settings) for name, path in datasets.items()}
    if not settings.skip_bad:  # a missing image fails now, not after the other datasets were scored
        for m in manifests.values():
            for r in m.rows:
                if isinstance(r.image, Path) and not r.image.is_file():
                    raise MissingInputError(
                        f"{m.source}:{r.line}: image {r.image} not found; fix the path or pass "
                        "skip_bad=true to skip and count such rows"
                    )
    for name in datasets:
        manifest = manifests[name]
        base = manifest.base
        done = score_rating_rows(reward, manifest.rows, settings, base=base, source=manifest.source)
        scored, bad = done.scores, done.skipped
        skipped[name] = len(manifest.skipped) + len(bad)
        rows = [r for r in manifest.rows if image_key(r, base) in scored]
        mos = np.asarray([r.mos for r in rows], float)
        first = scored[image_key(rows[0], base)]  # "score" (fused) first, then any per-dimension scores
        variants = [k for k in first if k != "score"] if isinstance(reward, SynonymTable) else list(first)
        table[name] = {}
        for v in variants:
            pred = np.asarray([scored[image_key(r, base)][v] for r in rows], float)
            table[name][v] = {"srcc": srcc(pred, mos), "plcc": plcc(pred, mos), "n": len(rows)}
        logger.info("%s: %d images scored, %d skipped", name, len(rows), skipped[name])
    variants = list(next(iter(table.values())))
    mean = {v: {m: float(np.mean([table[d][v][m] for d in table])) for m in ("srcc", "plcc")} for v in variants}
    return {"datasets": table, "mean": mean, "skipped": skipped}


def _ratings(path: str, settings: EvalSettings) -> ManifestResult:
    """One dataset of the leaderboard: an A3 JSON file as released (:mod:`reward.qbench.a3_data`), a ratings
    manifest, or a dataset by name (its whole folder, split ``all`` unless named; only its MOS, ``quality``, is
    compared, not its other dimensions)."""
    if is_a3_json(path):
        return load_a3_json(path, skip_bad=settings.skip_bad)
    manifest = load_ratings(
        path, skip_bad=settings.skip_bad, check_images=False, max_pixels=settings.max_decode_pixels
    )
    if manifest.info.get("dimensions"):
        main = manifest.info["dimensions"][0]
        manifest.rows = [r for r in manifest.rows if r.dimension == main]
    return manifest


def format_leaderboard(result: Mapping[str, Any], title: str) -> str:
    """Markdown: rows are variants (one row without the ensemble), columns the datasets and their mean, cells
    ``SRCC/PLCC`` as in the paper's tables."""
    names = list(result["datasets"])
    variants = list(result["mean"])
    header = ["variant", *names, "mean"]
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(m: Mapping[str, float]) -> str:
        return "/".join("n/a" if m[k] != m[k] else f"{m[k]:.3f}" for k in ("srcc", "plcc"))

    for v in variants:
        row = [v] + [cell(result["datasets"][d][v]) for d in names] + [cell(result["mean"][v])]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
