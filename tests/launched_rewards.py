"""Run by ``tests/test_grpo_scorer_processes.py`` under ``accelerate launch --multi_gpu --num_processes 2`` (gloo):
the GRPO scorer's ranking reward of each ``ranking_scope`` (``training.commands.grpo_scorer.reward_functions``),
each process calling it on its own half of one global batch with the keyword arguments trl passes; and the
command's check of each process's share under a launch of one image per process. Each process writes what it got
to ``OUT/rewards-RANK.json``.

    accelerate launch --multi_gpu --num_processes 2 tests/launched_rewards.py BATCH.json OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from accelerate import PartialState

from reward.core.cli import compose, end_launched_process
from reward.core.config import parse
from reward.core.errors import UserError
from training.commands.grpo_scorer import GrpoScorerSettings, check_ranking_share, reward_functions


def settings(scope: str, *more: str) -> GrpoScorerSettings:
    argv = ["out=unused", "model.path=unused", "data.train=synthetic", "rewards=[ranking]", f"ranking_scope={scope}"]
    return parse(GrpoScorerSettings, compose("grpo_scorer", [*argv, *more], schema=GrpoScorerSettings))


def share_refusal(scope: str) -> str | None:
    """The refusal (or ``None``) of a launch of 6 answers of one image per process, as the issue measured it."""
    from trl import GRPOConfig

    config = GRPOConfig(
        output_dir="unused", per_device_train_batch_size=6, num_generations=6, use_cpu=True, report_to="none"
    )
    try:
        check_ranking_share(settings(scope), config)
    except UserError as err:
        return str(err)
    return None


def main(batch_file: str, out: str) -> None:
    state = PartialState(cpu=True)  # as trl's GRPOConfig(use_cpu=True) makes it: gloo between the CPU processes
    batch = json.loads(Path(batch_file).read_text())
    n = len(batch["completions"]) // state.num_processes
    mine = {key: values[state.process_index * n : (state.process_index + 1) * n] for key, values in batch.items()}
    trl_passes = {"prompts": ["q"] * n, "completion_ids": [[1]] * n, "trainer_state": None, "image": [None] * n}
    got: dict[str, object] = {}
    for scope in ("step", "process"):
        (ranking,) = reward_functions(settings(scope))
        got[scope] = ranking(**mine, **trl_passes)
        got[f"refused_{scope}"] = share_refusal(scope)
    Path(out, f"rewards-{state.process_index}.json").write_text(json.dumps(got))


if __name__ == "__main__":
    main(*sys.argv[1:])
    end_launched_process()
