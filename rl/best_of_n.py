"""Best-of-N reranking of inpainted candidates with any registered reward.

    python rl/best_of_n.py reward=sa-iqa reward.path=SCORER generator=NAME data=TASKS.jsonl n=4 out=DIR

``judge=NAME`` (or ``'judge={name: qbench, model: PATH}'``) adds the win rate of the chosen over a random candidate
judged by a second reward. Writes ``DIR/chosen/``, ``DIR/scores.jsonl``, ``DIR/sheets/`` and ``DIR/summary.json``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from rl.bon import run_best_of_n


@hydra.main(config_path="../configs", config_name="best_of_n", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return run_best_of_n(cfg)


if __name__ == "__main__":
    main()
