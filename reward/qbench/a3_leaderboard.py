"""Q-Bench A3 assessment leaderboard (Table VI of Q-Bench+): a reward over several IQA datasets -> SRCC/PLCC per
dataset and their mean. ``reward=qbench`` keeps each image's good/poor log-probabilities and scores them as the
released notebook does (:mod:`reward.qbench.a3_released`); with ``ensemble=True`` the six words of Table VIII are read
in one forward pass, every synonym variant eq. 2 on a subset of them.

A dataset is a ratings manifest, a dataset by name, or an A3 JSON file as released (``a3_iqa_databases/jsons/*.json``:
``[{"img_path": NAME, "gt_score": "3.83"}, ...]``), each image read relative to the JSON's folder, else found by its
file name anywhere below it, rated on the dimension ``quality``.

Example:
    >>> [name for name, _, _ in VARIANTS][:3]
    ['good-poor', 'fine-bad', 'high-low']
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from reward.core.errors import MissingInputError
from reward.data import ManifestResult, RatingRow, load_ratings
from reward.data.datasets import check_source
from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import number
from reward.data.manifest import ManifestError, image_paths, resolve_image_path
from reward.eval.evaluation import EvalSettings, score_rating_rows
from reward.eval.metrics import plcc, srcc
from reward.qbench.a1_questions import load_rows, markdown_table
from reward.qbench.a3_released import RELEASED_WORDS, released_cell
from reward.rewards.base import RewardOutput
from reward.rewards.scoring import synonym_ensemble
from reward.vlm import OptionQuery

logger = logging.getLogger(__name__)

A3_EXAMPLE = '[{"img_path": "00001.jpg", "gt_score": "48.86"}, ...]'

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
    """``reward=qbench`` whose ``dimensions`` are the Table VIII variants, all from one read of the six words."""

    def __init__(self, reward: Any) -> None:
        self.vlm, self.cfg = reward.vlm, reward.cfg
        self.query = OptionQuery(self.cfg.prompt, ENSEMBLE_WORDS, self.cfg.response_prefix)
        self.vlm.candidate_ids(self.query, self.cfg.system)  # multi-token words fail now

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str] | None = None) -> RewardOutput:
        logp = self.vlm.option_logprobs([[im] for im in images], [self.query], system=self.cfg.system).logprobs[:, 0]

        def cols(words: tuple[str, ...]) -> torch.Tensor:
            return logp[:, [ENSEMBLE_WORDS.index(w) for w in words]]

        # equal set sizes: log-probs give the same result as logits
        dims = {name: synonym_ensemble(cols(pos), cols(neg), self.cfg.temperature) for name, pos, neg in VARIANTS}
        return RewardOutput(scores=dims["good-poor"], dimensions=dims)


RAW_KEYS = ("logit_good", "logit_poor")  # per-image log-probabilities kept by GoodPoorLogits (not table rows)


class GoodPoorLogits:
    """``reward=qbench`` with the words good / poor: scores at ``temperature`` (eq. 1, the released notebook's form)
    and each image's two log-probabilities as the dimensions ``logit_good`` / ``logit_poor`` (the released files'
    fields; a log-probability differs from the logit by a constant per image, which the two-word softmax cancels)."""

    def __init__(self, reward: Any, temperature: float) -> None:
        self.reward, self.temperature = reward, temperature

    def image_preparer(self) -> Any:
        return self.reward.image_preparer()

    def score(self, images: Sequence[Any], prompts: Sequence[str] | None = None) -> RewardOutput:
        from reward.vlm.inputs import as_groups

        r = self.reward
        out = r.vlm.option_logprobs(as_groups(images), [r.query], system=r.cfg.system)
        logp = out.logprobs[:, 0].double()
        if out.failed is not None:
            logp = logp.masked_fill(out.failed[:, 0][:, None], float("nan"))
        g, p = logp[:, 0], logp[:, 1]
        scores = torch.exp(g / self.temperature) / (torch.exp(g / self.temperature) + torch.exp(p / self.temperature))
        return RewardOutput(scores=scores, dimensions={"logit_good": g, "logit_poor": p})


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
    """``{"datasets": {name: {variant: {srcc, plcc, n}}}, "mean": {variant: {srcc, plcc}}, "skipped": {...}}``, a row
    ``score`` and one per dimension the reward scores (:class:`SynonymTable`: the six of Table VIII)."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    skipped: dict[str, int] = {}
    per_image: dict[str, list[dict[str, Any]]] = {}
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
        done = score_rating_rows(reward, manifest.rows, settings, source=manifest.source)
        scored, bad = done.scores, done.skipped
        skipped[name] = len(manifest.skipped) + len(bad)
        rows = [r for r in manifest.rows if r.key in scored]
        mos = np.asarray([r.mos for r in rows], float)
        first = scored[rows[0].key]  # "score" (fused) first, then any per-dimension scores
        variants = [k for k in first if k != "score"] if isinstance(reward, SynonymTable) else list(first)
        table[name] = {}
        if isinstance(reward, GoodPoorLogits):  # the released protocol: the same cell as a released model's
            objs = [{"img_path": r.key, "gt_score": r.mos, **{k: scored[r.key][k] for k in RAW_KEYS}} for r in rows]
            per_image[name] = objs
            table[name]["score"] = released_cell(objs, name, reward.temperature)
            variants = []
        for v in variants:
            pred = np.asarray([scored[r.key][v] for r in rows], float)
            table[name][v] = {"srcc": srcc(pred, mos), "plcc": plcc(pred, mos), "n": len(rows)}
        logger.info("%s: %d images scored, %d skipped", name, len(rows), skipped[name])
    result: dict[str, Any] = {"datasets": table, "mean": _means(table), "skipped": skipped}
    if per_image:
        result["per_image"] = per_image  # the released files' objects, per dataset (written, not kept in the JSON)
    return result


def add_released(
    result: dict[str, Any] | None, models: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]], temperature: float
) -> dict[str, Any]:
    """The released models (``{model: {dataset: objects}}``, :func:`reward.qbench.a3_released.read_released`) as rows
    beside the rows of ``result`` (``None``: the released rows alone). A row's mean is over the datasets it has;
    ``mean_of`` names them."""
    result = {"datasets": {}, "mean": {}, "skipped": {}} if result is None else result
    table: dict[str, dict[str, dict[str, float]]] = result["datasets"]
    for model, datasets in models.items():
        words = RELEASED_WORDS.get(model, ("good", "poor"))
        for dataset, objs in datasets.items():
            table.setdefault(dataset, {})[model] = released_cell(objs, dataset, temperature, words)
    result["mean"] = _means(table)
    result["mean_of"] = {v: [d for d in table if v in table[d]] for v in result["mean"]}
    return result


def _means(table: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Each row's mean SRCC and PLCC over the datasets it has, the rows in order of first appearance."""
    rows = dict.fromkeys(v for cells in table.values() for v in cells)
    return {
        v: {m: float(np.mean([t[v][m] for t in table.values() if v in t])) for m in ("srcc", "plcc")} for v in rows
    }


def _ratings(path: str, settings: EvalSettings) -> ManifestResult:
    """One dataset of the leaderboard: an A3 JSON file (:func:`load_a3_json`), a ratings manifest, or a dataset by
    name (its whole folder, split ``all`` unless named; only its MOS, ``quality``, is compared)."""
    if isinstance(path, str | Path) and str(path).lower().endswith(".json") and Path(path).is_file():
        return load_a3_json(path, skip_bad=settings.skip_bad)
    manifest = load_ratings(
        path,
        skip_bad=settings.skip_bad,
        check_images=False,
        max_pixels=settings.max_decode_pixels,
        **image_paths(settings),
    )
    if manifest.info.get("dimensions"):
        main = manifest.info["dimensions"][0]
        manifest.rows = [r for r in manifest.rows if r.dimension == main]
    return manifest


def load_a3_json(path: str | Path, *, skip_bad: bool = False) -> ManifestResult[RatingRow]:
    """The rows of an A3 JSON file (see the module); a bad row fails naming ``file:line``, or with ``skip_bad`` is
    skipped and counted. Images are found (not decoded) now."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"A3 file {str(path)!r} does not exist; pass a Q-Bench A3 JSON list like {A3_EXAMPLE}")
    finder = Finder(path.resolve().parent)

    def parse(item: dict, folder: Path, where: str, line: int) -> RatingRow:
        rel = item.get("img_path", item.get("image"))
        if not isinstance(rel, str) or not rel.strip():
            raise ManifestError(f"{where}: no 'img_path' (or 'image'); rows look like {A3_EXAMPLE}.")
        rel = rel.strip()
        resolve_image_path(folder, rel, where=where)  # no absolute path, no climbing out
        try:
            found = finder.image(rel)
        except LookupError as err:
            raise ManifestError(f"{where}: {err}; keep one copy below {folder}") from None
        if found is None:
            raise ManifestError(
                f"{where}: image {rel!r} not found at {folder / rel} nor by its file name anywhere below {folder}; "
                "put the JSON in (or above) the dataset's image folder"
            )
        key, mos = Path(os.path.normpath(found)).as_posix(), number(item.get("gt_score"), where, "'gt_score'")
        return RatingRow(folder / found, "quality", mos, line, where=where, key=key)

    rows, skipped = load_rows(path, parse, skip_bad=skip_bad)
    return ManifestResult(rows, skipped, str(path), {"format": "Q-Bench A3 JSON", "file": str(path)})


def format_leaderboard(result: Mapping[str, Any], title: str) -> str:
    """Markdown: rows are variants (one row without the ensemble), columns the datasets and their mean, cells
    ``SRCC/PLCC`` as in the paper's tables."""
    names = list(result["datasets"])

    def cell(m: Mapping[str, float] | None) -> str:
        return "-" if m is None else "/".join("n/a" if m[k] != m[k] else f"{m[k]:.3f}" for k in ("srcc", "plcc"))

    rows = [[v, *(cell(result["datasets"][d].get(v)) for d in names), cell(m)] for v, m in result["mean"].items()]
    return "\n".join([f"### {title}", "", *markdown_table(["variant", *names, "mean"], rows)]) + "\n"
