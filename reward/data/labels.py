"""Preference-pair labels: ``"a"``, ``"b"`` (the preferred image) or ``"tie"``, as text or as integer codes.

The one parser of the pairs contract, used by the manifest reader, the metrics and the Bradley–Terry fit.

Example:
    >>> label_codes(["a", " B", "Tie"]).tolist()
    [0, 1, 2]
    >>> parse_label("draw") is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LABEL_A, LABEL_B, LABEL_TIE = 0, 1, 2
LABEL_NAMES: dict[str, int] = {"a": LABEL_A, "b": LABEL_B, "tie": LABEL_TIE}


def parse_label(value: Any) -> str | None:
    """``"a"``, ``"b"`` or ``"tie"`` from any case and surrounding spaces; ``None`` for anything else."""
    text = str(value).strip().lower()
    return text if text in LABEL_NAMES else None


def label_codes(labels: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Labels as int8 codes ``LABEL_A`` / ``LABEL_B`` / ``LABEL_TIE``; integer arrays are taken as codes already.

    Unknown labels raise ``ValueError`` naming the first one and its index.
    """
    arr = np.asarray(labels)
    if arr.dtype.kind in "iu":
        if arr.size and (arr.min() < 0 or arr.max() > LABEL_TIE):
            raise ValueError(f"Label codes must be {LABEL_A} (a), {LABEL_B} (b) or {LABEL_TIE} (tie); got {arr!r}.")
        return arr.astype(np.int8)
    codes = np.empty(arr.shape, dtype=np.int8)
    for i, label in enumerate(arr.tolist()):
        name = parse_label(label)
        if name is None:
            raise ValueError(f"Unknown pair label {label!r} at index {i}; use one of {sorted(LABEL_NAMES)}.")
        codes[i] = LABEL_NAMES[name]
    return codes
