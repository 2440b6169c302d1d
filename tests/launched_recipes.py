"""Run by ``tests/test_recipes.py`` under ``accelerate launch --multi_gpu --num_processes 2`` (gloo): the training
recipes of ``PLAN.json`` one after another in the same two processes, each by its command's ``run`` (the work of its
entry script), from the current folder (the recipes' relative ``datasets/`` and ``runs/``). For each recipe every
process writes the batch geometry its trainer ran with and every line its trainer logged to ``OUT/NAME-RANK.json``.

A command's run ends its accelerator (``end_training``: the process groups destroyed, as a launched process ends),
so the next run starts fresh ones on a port of its own; a command that runs in one process (``fit``) runs on the
main process while the other waits. Each run's trainer is kept until the processes end (``os._exit``, as a launched
command ends): freed while the other process was still in its run, a trainer's gloo group hung one of them. One
launch for all of them: each launch costs seconds of imports per process.

    accelerate launch --multi_gpu --num_processes 2 tests/launched_recipes.py PLAN.json OUT
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from reward.core.cli import compose, end_launched_process
from reward.core.config import parse

COMMANDS = {  # config name -> (module with run(), its settings class)
    "sft": ("training.commands.sft", "SftSettings"),
    "grpo": ("rl.commands.grpo", "GrpoSettings"),
    "grpo_scorer": ("training.commands.grpo_scorer", "GrpoScorerSettings"),
    "fit": ("fusion.commands.fit", "FusionSettings"),
}


KEPT: list[Any] = []  # every run's trainer, never freed before the process ends


class Seen(TrainerCallback):
    """What one process's trainer ran with (processes, per-device batch, accumulation, GRPO's group) and logged; its
    trainer kept in :data:`KEPT`."""

    def __init__(self) -> None:
        self.geometry: dict[str, Any] = {}
        self.logs: list[dict[str, Any]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from transformers import Trainer

        frame = inspect.currentframe()
        while frame is not None and not isinstance(frame.f_locals.get("self"), Trainer):
            frame = frame.f_back
        KEPT.append(frame and frame.f_locals["self"])
        self.geometry = {
            "processes": args.world_size,
            "per_device": args.per_device_train_batch_size,
            "accumulation": args.gradient_accumulation_steps,
            "num_generations": getattr(args, "num_generations", None),
        }

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        self.logs.append(dict(logs or {}))


def fresh_process_group(port: int) -> None:
    """The last run destroyed the process group: the next one makes its own through accelerate's state made anew,
    its rendezvous on ``port`` (the same on every process) served by the main process (the launcher's agent serves
    only the first)."""
    import torch.distributed as dist
    from accelerate.state import AcceleratorState, PartialState

    if PartialState._shared_state and not dist.is_initialized():
        AcceleratorState._reset_state(reset_partial_state=True)
        os.environ["MASTER_PORT"] = str(port)
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"


def main(plan_file: str, out: str) -> None:
    from accelerate import PartialState

    plan = json.loads(Path(plan_file).read_text())
    base_port = int(os.environ.get("MASTER_PORT", "29500"))
    for i, item in enumerate(plan):
        fresh_process_group(base_port + 1 + i)
        module, schema = COMMANDS[item["command"]]
        command = importlib.import_module(module)
        cfg = parse(getattr(command, schema), compose(item["command"], item["argv"], schema=getattr(command, schema)))
        seen, result = Seen(), None
        state = PartialState(cpu=True)
        if item["command"] == "fit":  # one process, as its users run it
            result = command.run(cfg) if state.is_main_process else None
            state.wait_for_everyone()
        else:
            result = command.run(cfg, callbacks=[seen])
        record = {"geometry": seen.geometry, "logs": seen.logs, "result": result}
        Path(out, f"{item['name']}-{state.process_index}.json").write_text(json.dumps(record, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:])
    end_launched_process()
