"""Fit Bradley–Terry fusion weights for dimension scores (SA-IQA §3.2.2) and write them as JSON + a bar chart.

    python fusion/fit.py pairs=PAIRS.jsonl scores=SCORES.jsonl out=WEIGHTS.json
    python fusion/fit.py pairs=PAIRS.jsonl reward=sa-iqa reward.path=SCORER_DIR out=SCORER_DIR/fusion_weights.json

Every setting, with its default and a one-line comment, is in configs/fusion.yaml; the work is done by
:func:`fusion.cli.run_fit`, which tests call directly.
"""

from __future__ import annotations

import os

# The fit's BLAS calls are tiny (L-BFGS-B's own algebra; the big products use einsum), so BLAS threads only add
# overhead, badly so on a busy machine. Must be set before numpy/scipy load OpenBLAS; an explicit value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from fusion.cli import run_fit  # noqa: E402


@hydra.main(config_path="../configs", config_name="fusion", version_base="1.3")
def main(cfg: DictConfig) -> Path:
    """Hydra entry point; returns the path of the weights file written."""
    run_fit(cfg)
    return Path(cfg.out)


if __name__ == "__main__":
    main()
