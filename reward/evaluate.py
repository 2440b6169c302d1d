"""Score a ratings manifest with a reward and compare with the human MOS.

    python reward/evaluate.py reward=qbench reward.model=PATH data=MANIFEST out=DIR

Writes DIR/metrics.json ({dimension: {plcc, srcc, krcc, hor, n, ...}, "overall": ...}), DIR/scores.jsonl and a
scatter plot per dimension with the holistic-bias zone shaded; logs the table.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from reward.commands.evaluate import run_evaluate

logger = logging.getLogger("reward.evaluate")


@hydra.main(config_path="../configs", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return run_evaluate(cfg)


if __name__ == "__main__":
    main()
