"""The fusion weights file: what the ``fit`` command writes and what ``reward=sa-iqa`` reads from a scorer directory.

It lives in ``reward`` because both sides of that contract use it (``fusion`` may import ``reward``, not the
reverse).

Format (JSON)::

    {"dimensions": ["layout", "harmony", ...], "weights": [...], "ci_low": [...] | null, "ci_high": [...] | null,
     "meta": {"n_pairs": 750, "tie_model": "davidson", "l2": 0.0001, "heldout_accuracy": 0.71, "date": ..., ...}}

The fused score is ``S = Σ_j weights[j] · score[dimensions[j]]`` (SA-IQA eq. 3); :meth:`FusionWeights.fuse`
computes it for numpy arrays or torch tensors.

>>> import os, tempfile
>>> import numpy as np
>>> fw = FusionWeights(dimensions=("layout", "lighting"), weights=(0.75, 0.25))
>>> fw.fuse({"layout": np.array([4.0, 2.0]), "lighting": np.array([2.0, 2.0])}).tolist()
[3.5, 2.0]
>>> with tempfile.TemporaryDirectory() as d:
...     _ = save_weights(os.path.join(d, WEIGHTS_FILENAME), fw)
...     load_weights(d) == fw  # a scorer directory works as well as the file itself
True
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reward.core.errors import MissingInputError, UserError
from reward.data.files import atomic_write_json, json_safe
from reward.rewards.scorer_folder import WEIGHTS_FILENAME

_KEYS = ("dimensions", "weights", "ci_low", "ci_high", "meta")
_EXAMPLE = '{"dimensions": ["layout", "lighting"], "weights": [0.8, 0.4], "ci_low": null, "ci_high": null, "meta": {}}'


class FusionWeightsError(UserError):
    """A fusion weights file that cannot be used: not JSON, malformed, or weights the fused reward cannot divide by;
    the message names the file and the fix (a command prints it alone and exits with status 2)."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _problems(data: object) -> list[str]:
    """Every problem with a decoded weights file, so one error can report them all."""
    if not isinstance(data, dict):
        return [f"the top level must be a JSON object, got {type(data).__name__}"]
    found = []
    missing = [k for k in ("dimensions", "weights") if k not in data]
    if missing:
        found.append(f"missing key(s) {missing}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        found.append(f"unknown key(s) {unknown} (allowed: {list(_KEYS)})")
    dims = data.get("dimensions")
    if "dimensions" in data:
        if not isinstance(dims, list) or not dims or not all(isinstance(x, str) and x.strip() for x in dims):
            found.append(f"'dimensions' must be a non-empty list of non-empty strings, got {dims!r}")
            dims = None
        elif len(set(dims)) != len(dims):
            found.append(f"'dimensions' has duplicates: {dims}")
    for key in ("weights", "ci_low", "ci_high"):
        value = data.get(key)
        if value is None and key != "weights":
            continue
        if key not in data:
            continue
        if not isinstance(value, list) or not all(_is_number(v) for v in value):
            found.append(f"{key!r} must be a list of finite numbers, got {value!r}")
        elif isinstance(dims, list) and len(value) != len(dims):
            found.append(f"{key!r} has {len(value)} entries for {len(dims)} dimensions")
    low, high = data.get("ci_low"), data.get("ci_high")
    if (low is None) != (high is None):
        found.append("'ci_low' and 'ci_high' must both be lists or both be null")
    elif isinstance(low, list) and isinstance(high, list) and len(low) == len(high):
        if any(_is_number(lo) and _is_number(hi) and lo > hi for lo, hi in zip(low, high, strict=True)):
            found.append("some 'ci_low' entries are above their 'ci_high'")
    if not isinstance(data.get("meta", {}), dict):
        found.append(f"'meta' must be a JSON object, got {type(data['meta']).__name__}")
    return found


@dataclass(frozen=True)
class FusionWeights:
    """Fusion weights for named dimensions, optional bootstrap intervals, and free-form metadata."""

    dimensions: tuple[str, ...]
    weights: tuple[float, ...]
    ci_low: tuple[float, ...] | None = None
    ci_high: tuple[float, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def as_floats(name: str, values: Any) -> tuple[float, ...] | None:
            if values is None:
                return None
            try:
                return tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
            except (TypeError, ValueError) as err:
                raise ValueError(f"Invalid fusion weights: {name!r} must be numbers, got {values!r}.") from err

        object.__setattr__(self, "dimensions", tuple(self.dimensions))
        for name in ("weights", "ci_low", "ci_high"):
            object.__setattr__(self, name, as_floats(name, getattr(self, name)))
        found = _problems(self.to_dict())
        if found:
            raise ValueError("Invalid fusion weights: " + "; ".join(found) + ".")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (lists, not tuples)."""
        return {
            "dimensions": list(self.dimensions),
            "weights": list(self.weights),
            "ci_low": None if self.ci_low is None else list(self.ci_low),
            "ci_high": None if self.ci_high is None else list(self.ci_high),
            "meta": dict(self.meta),
        }

    def fuse(self, dimension_scores: Mapping[str, Any]) -> Any:
        """Fused scores ``Σ_j w_j · dimension_scores[dimensions[j]]`` of per-dimension scores (same-shape numpy
        arrays, torch tensors, lists or numbers).

        Returns a torch tensor (on the first tensor's device, floating dtype, differentiable) when any input is a
        tensor, else a float numpy array. Extra dimensions in ``dimension_scores`` are ignored; missing ones raise.

        >>> fw = FusionWeights(dimensions=("layout", "lighting"), weights=(2.0, -1.0))
        >>> fw.fuse({"lighting": [1.0, 3.0], "layout": [1.0, 1.0], "mos": [5.0, 5.0]}).tolist()
        [1.0, -1.0]
        """
        missing = [d for d in self.dimensions if d not in dimension_scores]
        if missing:
            raise ValueError(
                f"Cannot fuse: no scores for dimension(s) {missing}; the fusion weights were fitted on "
                f"{list(self.dimensions)} and the scores have {sorted(dimension_scores)}. Score every weighted "
                "dimension, or refit the weights on the dimensions you have (perceptual-rewards fit dimensions=[...])."
            )
        values = [dimension_scores[d] for d in self.dimensions]
        torch = sys.modules.get("torch")  # a tensor can only exist if torch was imported; never import it here
        tensors = [v for v in values if torch is not None and isinstance(v, torch.Tensor)]
        if tensors:
            ref = tensors[0]
            dtype = ref.dtype if ref.is_floating_point() else torch.get_default_dtype()
            columns = [torch.as_tensor(v, dtype=dtype, device=ref.device) for v in values]
        else:
            columns = [np.asarray(v) for v in values]
            columns = [c if c.dtype.kind == "f" else c.astype(np.float64) for c in columns]
        shapes = {tuple(c.shape) for c in columns}
        if len(shapes) != 1:
            found = {d: tuple(c.shape) for d, c in zip(self.dimensions, columns, strict=True)}
            raise ValueError(f"Cannot fuse: dimension scores have different shapes {found}; give one score per image.")
        total = columns[0] * self.weights[0]
        for w, column in zip(self.weights[1:], columns[1:], strict=True):
            total = total + column * w
        return total


def save_weights(path: str | os.PathLike, weights: FusionWeights) -> Path:
    """Write ``weights`` as JSON to ``path`` atomically (:func:`reward.data.files.atomic_write_json`).

    Parent folders are created; numpy scalars in ``meta`` become plain numbers and non-finite ones ``null``.
    Returns the path written.
    """
    data = weights.to_dict()
    data["meta"] = json_safe(data["meta"])
    return atomic_write_json(path, data)


def load_weights(path: str | os.PathLike) -> FusionWeights:
    """Read and validate a weights file (or ``DIR/fusion_weights.json`` when ``path`` is a directory).

    Raises ``FileNotFoundError`` when it is missing and :class:`FusionWeightsError` (a ``ValueError``) listing every
    problem otherwise.
    """
    path = Path(path)
    if path.is_dir():
        path = path / WEIGHTS_FILENAME
    if not path.is_file():
        raise MissingInputError(
            f"Fusion weights file {str(path)!r} does not exist. Fit one with `perceptual-rewards fit "
            f"pairs=PAIRS.jsonl scores=SCORES.jsonl out={path}` (or put {WEIGHTS_FILENAME} in the scorer directory)."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        where = f"{path}:{err.lineno}" if isinstance(err, json.JSONDecodeError) else str(path)
        what = f"{err.msg} at column {err.colno}" if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
        raise FusionWeightsError(
            f"{where}: not valid JSON ({what}); a fusion weights file looks "
            f"like {_EXAMPLE}. Refit it with perceptual-rewards fit or fix the JSON."
        ) from err
    found = _problems(data)
    if found:
        raise FusionWeightsError(
            f"{path}: invalid fusion weights file: " + "; ".join(found) + f". Expected e.g. {_EXAMPLE}."
        )
    return FusionWeights(
        dimensions=tuple(data["dimensions"]),
        weights=tuple(data["weights"]),
        ci_low=data.get("ci_low"),
        ci_high=data.get("ci_high"),
        meta=data.get("meta", {}),
    )
