"""Q-Bench's released A3 outputs (``leaderboards/IQA_outputs/MODEL/DATASET.json``: JSON objects back to back, each
``{"img_path", "gt_score", "logit_good", "logit_poor", ...}``), read and scored as the released notebook prints
Table VI of Q-Bench+: the softmax of the two logits at ``T = 100`` in the notebook's literal form (its rounding, hence
its order of near-ties; SRCC does not depend on ``T``, PLCC does), CGIQA-6K as the mean of its two blocks of 3,000,
``instructblip_t5`` read with "high" / "low". Our own A3 runs write the same files (:func:`write_released`).

    >>> objs = read_released_text('{"img_path": "a.jpg", "gt_score": 3.1, "logit_good": 2.0, "logit_poor": 1.0}'
    ...                           '{"img_path": "b.jpg", "gt_score": "1.2 ", "logit_good": 1.0, "logit_poor": 3.0}')
    >>> [o["img_path"] for o in objs], good_poor_scores(objs, 1.0).round(4).tolist()
    (['a.jpg', 'b.jpg'], [0.7311, 0.1192])
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reward.core.errors import MissingInputError, UserError
from reward.data.files import atomic_write_text

RELEASED_TEMPERATURE = 100.0  # the released notebook's softmax temperature
# datasets whose published cell is the mean over consecutive subsets of this many images (CGIQA-6K: game, movie)
RELEASED_SUBSETS: dict[str, int] = {"cgi": 3000}
# released models whose published row reads another pair of words than good/poor
RELEASED_WORDS: dict[str, tuple[str, str]] = {"instructblip_t5": ("high", "low")}
FIELDS = ("img_path", "gt_score", "logit_good", "logit_poor")


def read_released_text(text: str, where: str = "<text>") -> list[dict[str, Any]]:
    """The JSON objects of one file, written back to back (a JSON list is read too); each must have ``img_path``,
    ``gt_score`` (a number or a numeric string) and ``logit_good`` / ``logit_poor`` (numbers)."""
    decoder, objs, i, between = json.JSONDecoder(), [], 0, re.compile(r"[ \t\r\n,]*")
    while (i := between.match(text, i).end()) < len(text):
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as err:
            raise UserError(f"{where}: not JSON at character {err.pos}: {err.msg}") from None
        objs.extend(obj if isinstance(obj, list) else [obj])
    out = []
    for k, obj in enumerate(objs, 1):
        missing = [f for f in FIELDS if not isinstance(obj, dict) or f not in obj]
        if missing:
            raise UserError(f"{where}: object {k} has no {', '.join(missing)}; each needs {', '.join(FIELDS)}")
        try:
            row = {**obj, "gt_score": float(str(obj["gt_score"]).strip())}
            row["logit_good"], row["logit_poor"] = float(obj["logit_good"]), float(obj["logit_poor"])
        except (TypeError, ValueError):
            raise UserError(f"{where}: object {k}: gt_score and the logits must be numbers") from None
        out.append(row)
    if not out:
        raise UserError(f"{where}: no objects")
    return out


def read_released(folder: str | Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{model: {dataset: objects}}`` from ``folder/MODEL/DATASET.json`` (Q-Bench's ``IQA_outputs`` folder); names
    starting with ``.`` (notebook checkpoints) are skipped."""
    root = Path(folder)
    if not root.is_dir():
        raise MissingInputError(
            f"a3.released={str(folder)!r} is not a folder; pass Q-Bench's leaderboards/IQA_outputs folder "
            "(one folder per model holding DATASET.json files)"
        )
    models: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(p for p in model_dir.glob("*.json") if not p.name.startswith(".")):
            models.setdefault(model_dir.name, {})[path.stem] = read_released_text(path.read_text(), str(path))
    if not models:
        raise MissingInputError(f"a3.released={str(folder)!r} holds no MODEL/DATASET.json files")
    return models


def good_poor_scores(
    objs: Sequence[Mapping[str, Any]],
    temperature: float = RELEASED_TEMPERATURE,
    words: tuple[str, str] = ("good", "poor"),
) -> np.ndarray:
    """``exp(g / T) / (exp(g / T) + exp(p / T))`` per object, in float64 (``g``, ``p``: ``logit_WORD``)."""
    try:
        g = np.asarray([float(o[f"logit_{words[0]}"]) for o in objs]) / temperature
        p = np.asarray([float(o[f"logit_{words[1]}"]) for o in objs]) / temperature
    except KeyError as err:
        raise UserError(f"no {err.args[0]} in the released objects") from None
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(g) / (np.exp(g) + np.exp(p))


def released_cell(
    objs: Sequence[Mapping[str, Any]],
    dataset: str,
    temperature: float = RELEASED_TEMPERATURE,
    words: tuple[str, str] = ("good", "poor"),
) -> dict[str, float]:
    """``{srcc, plcc, n}`` of one model on one dataset, as the released notebook computes it (the blocks of
    :data:`RELEASED_SUBSETS` averaged)."""
    from reward.eval.metrics import plcc, srcc  # SciPy: when a cell is computed, not when qbench-eval starts

    size = RELEASED_SUBSETS.get(dataset)
    blocks = len(objs) // size if size else 0
    parts = [objs[k * size : (k + 1) * size] for k in range(blocks)] if blocks > 1 else [objs]
    cells = []
    for part in parts:
        pred, mos = good_poor_scores(part, temperature, words), np.asarray([o["gt_score"] for o in part], float)
        cells.append((srcc(pred, mos), plcc(pred, mos)))
    mean_srcc, mean_plcc = (float(np.mean(c)) for c in zip(*cells, strict=True))
    return {"srcc": mean_srcc, "plcc": mean_plcc, "n": len(objs)}


def write_released(path: str | Path, objs: Iterable[Mapping[str, Any]]) -> Path:
    """Write objects back to back, as Q-Bench released them (one file per model and dataset)."""
    return atomic_write_text(path, "".join(json.dumps({k: o[k] for k in FIELDS}) for o in objs))
