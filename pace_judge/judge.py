"""Judge a folder of images on one quality dimension with PACE.

    python pace_judge/judge.py protocol=FILE images=DIR out=DIR model.path=PATH
    python pace_judge/judge.py dimension="tactile satisfaction" images=DIR out=DIR model.path=PATH memory=DIR

Writes OUT/scores.jsonl (image, score, alpha1, alpha2, sub-dimension scores, per-probe option probabilities) and
logs a table. A protocol that cannot be built (e.g. a model that cannot write one) ends with a clear message and
exit status 2.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from pace_judge.run import PaceUserError, run_judge

logger = logging.getLogger("pace_judge.judge")


@hydra.main(config_path="../configs", config_name="pace", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run_judge(cfg)
    except PaceUserError as err:
        logger.error("%s", err)
        sys.exit(2)


if __name__ == "__main__":
    main()
