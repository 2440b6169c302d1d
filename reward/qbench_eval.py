"""Q-Bench+ harness: A1 perception, A2 description, A3 assessment leaderboard.

    python reward/qbench_eval.py task=a1 model.path=PATH data=LLVISIONQA.json out=DIR
    python reward/qbench_eval.py task=a2 model.path=PATH data=LLDESCRIBE.json out=DIR a2.judge.base_url=URL
    python reward/qbench_eval.py task=a3 model.path=PATH data=[KONIQ.jsonl,SPAQ.jsonl] out=DIR a3.ensemble=true

See configs/qbench_eval.yaml for every option and reward/qbench_tasks.py for what each task writes.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from reward.commands.qbench_eval import run_qbench


@hydra.main(config_path="../configs", config_name="qbench_eval", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return run_qbench(cfg)


if __name__ == "__main__":
    main()
