"""What ``rl/flow_grpo.py`` does: Flow-GRPO (Flow-GRPO: Training Flow Matching Models via Online RL, arXiv:2505.05470)
on a flow-matching generator's LoRA adapter, rewarded by any registered reward, with accelerate.

The settings and every check of them, before anything loads: :mod:`rl.commands.flow_grpo_settings`. ``run`` reads top
to bottom: :func:`set_up` (tasks, the output folder's verdict, rewards, the generator with its adapter, the optimizer,
a resumed run's checkpoint), :func:`train` (rounds of sampling, scoring and updates: :mod:`rl.flow_rounds`) and
:func:`report` (the adapter with its model card, plots, ``flow_grpo_result.json``). DDP and DeepSpeed ZeRO-1/2
launches; ZeRO-3 and FSDP are refused (sampling runs the whole transformer at every step of every round).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reward.console import PROG
from reward.core.config import resume_mode, to_plain
from reward.core.errors import UserError
from reward.core.outputs import Output, may_change_keys
from rl.commands.flow_grpo_settings import FLOW_GRPO_BATCH, FlowGrpoSettings
from rl.flow_settings import load_prompt_tasks
from rl.inpaint_tasks import load_tasks, task_split
from rl.run_folder import on_main, prepare_run_folder, run_inputs, settings_record
from training.shared.launch import launch_processes, resolve_batch

if TYPE_CHECKING:  # transformers (the watchdog's callback) and torch are imported when a run starts
    from rl.watchdog import Watchdog

logger = logging.getLogger(__name__)

Tasks = tuple[list[Any], list[Any], int]  # the training tasks, the held-out ones, the bad rows skipped


def prepare(settings: FlowGrpoSettings, out: Path, *, create: bool = True) -> Output | None:
    """The run's output folder (main process): new, the same run resumed (``resume=auto``), or refused; with
    ``create=False`` only a refusal is checked, before any model loads (:func:`rl.run_folder.prepare_run_folder`)."""
    inputs = run_inputs(
        {"data": settings.data, "eval_data": settings.eval_data},
        [
            ("reward{i}", [settings.reward, *settings.more_rewards]),
            ("judge", [settings.judge] if settings.judge else []),
        ],
        settings.generator,
    )
    return prepare_run_folder(
        out,
        "flow_grpo",
        settings_record(settings),
        inputs,
        create=create,
        overwrite=settings.overwrite,
        resume=resume_mode(settings.resume),
        may_change=may_change_keys(FlowGrpoSettings),
        resume_hint="resume=auto",
    )


def run(settings: FlowGrpoSettings) -> dict[str, Any]:
    """Set up, train, report; returns the result (also ``out/flow_grpo_result.json``)."""
    if settings.plan:
        from rl.commands.flow_grpo_plan import flow_grpo_plan
        from training.shared.plan import report_plan

        return report_plan(flow_grpo_plan(settings, FLOW_GRPO_BATCH))
    tasks = load_flow_tasks(settings)  # before torch loads: a split that leaves no training task is said at once
    from rl.watchdog import Watchdog  # transformers' callback

    with Watchdog(settings.stall_timeout_s) as watchdog:
        setup = set_up(settings, tasks, watchdog)
        train(setup, watchdog)
        watchdog.beat("writing the report")
        return report(setup)


def load_flow_tasks(settings: FlowGrpoSettings) -> Tasks:
    """Training and held-out tasks (inpainting tasks for ``flux-fill``, prompts for ``sd3``) and the bad rows'
    count, split as GRPO splits them (a split that leaves no training task refused here, before torch loads)."""
    load = load_prompt_tasks if to_plain(settings.generator).get("name") == "sd3" else load_tasks
    train, heldout, bad = task_split(settings, with_eval=settings.eval.every > 0, load=load)
    prompts = settings.round_images() // settings.trainer.num_generations
    logger.info(
        "%d training tasks, %d held out; %d prompts x %d images a round",
        *(len(train), len(heldout), prompts, settings.trainer.num_generations),
    )
    return train, heldout, bad


@dataclass
class Setup:
    """What :func:`set_up` builds for :func:`train` and :func:`report`."""

    settings: FlowGrpoSettings
    out: Path
    output: Output
    accelerator: Any
    train_tasks: list[Any]
    heldout: list[Any]
    n_bad: int
    rounds: Any  # rl.flow_rounds.FlowRounds
    started: float = field(default_factory=time.perf_counter)


def set_up(settings: FlowGrpoSettings, tasks: Tasks, watchdog: Watchdog) -> Setup:
    """The launch, the output folder's verdict (before any model loads), the rewards and judge, the generator with
    its adapter, the optimizer, and a resumed run's last complete checkpoint; ``tasks``: :func:`load_flow_tasks`'s."""
    out = Path(settings.out)
    train_tasks, heldout, n_bad = tasks
    from rl.flow_rounds import FlowRounds, build_accelerator  # torch, accelerate

    batch = resolve_batch(settings.batch_mapping(), launch_processes(), FLOW_GRPO_BATCH)
    # it sets up this launch's processes (gloo on CPUs), which every collective below uses
    accelerator = build_accelerator(settings, batch.accumulation * settings.sample.window)
    on_main(lambda: prepare(settings, out, create=False))  # a refused out folder fails here, before any model loads
    watchdog.beat("building the rewards, the judge and the generator")
    rounds = FlowRounds.build(settings, accelerator, train_tasks, heldout, out)
    output = on_main(lambda: prepare(settings, out))  # decided once, by the main process
    assert output is not None
    if output.resumed:
        watchdog.beat("restoring the last complete checkpoint")
        rounds.resume()
    accelerator.wait_for_everyone()
    return Setup(settings, out, output, accelerator, train_tasks, heldout, n_bad, rounds)


def train(setup: Setup, watchdog: Watchdog) -> None:
    """Rounds until ``trainer.max_steps`` optimizer steps, held-out evaluations and checkpoints between them."""
    setup.rounds.train(watchdog)


def report(setup: Setup) -> dict[str, Any]:
    """The adapter and its card, plots, ``flow_grpo_result.json`` and the closing summary (main process); a run
    stopped by failing rewards fails with the reason."""
    rounds, out = setup.rounds, setup.out
    result = rounds.result(setup)
    if setup.accelerator.is_main_process:
        rounds.write_outputs(setup, result, card_command(setup.output.identity["settings"]))
        if result["complete"]:
            setup.output.finish()
    setup.accelerator.wait_for_everyone()
    setup.accelerator.end_training()
    if rounds.failure is not None:
        raise UserError(
            f"{rounds.failure}. The run is incomplete (the adapter so far is in {out / 'lora'}; see "
            "flow_grpo_result.json); fix the reward, then resume"
        )
    return result


def card_command(record: dict[str, Any]) -> str:
    """The command that makes the run of settings ``record``, as it was run (installed: ``perceptual-rewards
    flow-grpo``; a clone: ``rl/flow_grpo.py``)."""
    from training.shared.cards import settings_command

    script = "-m reward flow-grpo" if sys.argv[0].startswith(PROG) else "rl/flow_grpo.py"
    return settings_command(script, "flow_grpo", FlowGrpoSettings, record).replace("python -m reward", PROG, 1)
