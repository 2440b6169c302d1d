"""Flow-GRPO's training loop (``rl/flow_grpo.py``), in rounds: every process samples its share of the round's groups
(:mod:`rl.flow_rollout`), the rewards score its images (several rewards normalised by their ``score_range`` and
summed with their weights; an image any reward failed on has no reward: counted, masked out of the advantages and
the loss, and a round whose images are all or too often unrewarded stops the run as GRPO's does), advantages come
from the gathered rewards of every process (:mod:`rl.flow_advantages`), and the round's images train
``generation_batch_size / global_batch_size`` optimizer steps (:mod:`rl.flow_update`).

Between rounds: held-out images of fixed seeds, as the pipeline makes them, scored by the training rewards and by the
judge (``heldout.jsonl``, and their images for ``sample_sheets.png``; the last evaluation also draws each held-out
task with the adapter off, for a blind study: ``heldout/NNNN-policy.png``, ``NNNN-base.png``, ``pairs.jsonl``), and
checkpoints (``checkpoint-N``: the adapter in diffusers' format, each process's optimizer state, ``trainer_state.json``
written last). Every process's randomness comes from the seed and the round, so a resumed run samples what the run
would have.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from reward.core.config import to_plain
from reward.core.errors import UserError
from reward.data.files import append_jsonl, atomic_write_json, atomic_write_jsonl, json_safe, read_records
from reward.integrations.reward_set import RewardSet, reward_has_device
from reward.integrations.trl_rewards import RewardTally
from rl.commands.flow_grpo_settings import FlowGrpoSettings
from rl.devices import placed_device, resolve_devices
from rl.flow_advantages import gathered_advantages, round_stats
from rl.flow_models import FlowGenerator, build_flow_generator
from rl.flow_rollout import Rollout, Sampling, sample_group_batch, seed_of
from rl.flow_settings import Layout
from rl.flow_update import Objective, adapter_off, run_update
from training.shared.deepspeed import uses_deepspeed

logger = logging.getLogger(__name__)

LORA_FILE = "pytorch_lora_weights.safetensors"  # diffusers' name (save_lora_weights / load_lora_weights)
STATE_FILE = "trainer_state.json"  # written last: a checkpoint without it is incomplete


def build_accelerator(settings: FlowGrpoSettings, accumulation: int) -> Any:
    """The launch's accelerator: ``accumulation`` backward passes per optimizer step (micro-batches x window steps),
    bf16 mixed precision where the GPU has it (``trainer.bf16``)."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    from training.shared.deepspeed import launcher_bf16

    bf16 = settings.trainer.bf16
    if bf16 is None:
        gpu = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        bf16 = launcher_bf16(gpu)
    accelerator = Accelerator(
        gradient_accumulation_steps=accumulation,
        mixed_precision="bf16" if bf16 else "no",
        # CPU processes: gloo (cpu=True drops a DeepSpeed launch, which runs on CPUs as it is)
        cpu=not torch.cuda.is_available() and not uses_deepspeed(None),
    )
    plugin: DeepSpeedPlugin | None = accelerator.state.deepspeed_plugin
    if plugin is not None:  # no dataloader to read it from
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = settings.trainer.per_device_train_batch_size
    return accelerator


def combined(scores: dict[str, Any], weights: list[float]) -> list[float | None]:
    """Each image's weighted sum of its rewards' values; ``None`` where any reward gave none."""
    labels = list(scores)
    n = len(scores[labels[0]].value)
    out: list[float | None] = []
    for i in range(n):
        values = [scores[label].value[i] for label in labels]
        out.append(
            None if any(v is None for v in values) else sum(w * v for w, v in zip(weights, values, strict=True))
        )
    return out


@contextlib.contextmanager
def _deepspeed_globals() -> Iterator[None]:
    """Under DeepSpeed, its ZeRO optimizer's state holds its loss scaler, its stage and its fragments' addresses: these
    classes are allowed to ``torch.load(weights_only=True)`` by name, nothing else."""
    if not uses_deepspeed(None):
        yield
        return
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    with torch.serialization.safe_globals([LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]):
        yield


class FlowRounds:
    """A Flow-GRPO run between its set-up and its report: the state of training (step, round) and its parts."""

    def __init__(
        self, settings: FlowGrpoSettings, accelerator: Any, train_tasks: list[Any], heldout: list[Any], out: Path
    ):
        self.settings, self.accelerator, self.out = settings, accelerator, out
        self.train_tasks, self.heldout = train_tasks, heldout
        t, s = settings.trainer, settings.sample
        self.layout = Layout(
            settings.round_images() // t.num_generations,
            t.num_generations,
            accelerator.num_processes,
            t.per_device_train_batch_size,
        )
        self.updates_per_round = settings.round_images() // settings.batch_mapping()["global_batch_size"]
        self.step, self.round, self.failure = 0, 0, None
        self.totals = {"completions": 0, "unusable": 0, "steps_without_reward": 0}
        self.seconds = {"sampling": 0.0, "reward": 0.0, "update": 0.0, "heldout": 0.0, "rounds": 0}
        self.weights = list(t.reward_weights or [1.0] * (1 + len(settings.more_rewards)))
        self.resumed_from: str | None = None
        self.total_rounds = math.ceil(t.max_steps / self.updates_per_round)
        self.last_reward = "n/a"  # the last round's mean reward, as the progress bar shows it
        self.gen: FlowGenerator
        self.rewards: RewardSet
        self.eval_set: RewardSet | None = None
        self.judge_label: str | None = None
        guidance = s.guidance if s.guidance is not None else to_plain(settings.generator).get("guidance", 1.0)
        self.sampling = Sampling(
            s.steps, s.window, tuple(s.window_range), s.noise_level, float(guidance), s.max_size, settings.seed
        )
        self.objective = Objective(
            t.epsilon, t.advantage_clip, t.beta, s.noise_level, float(guidance), t.max_grad_norm
        )

    # ------------------------------------------------------------------------------------------------ set-up

    @classmethod
    def build(
        cls, settings: FlowGrpoSettings, accelerator: Any, train_tasks: list, heldout: list, out: Path
    ) -> FlowRounds:
        """The rewards (and the judge beside them), the generator with its LoRA adapter, the optimizer, prepared."""
        rounds = cls(settings, accelerator, train_tasks, heldout, out)
        train_entries = resolve_devices(
            [settings.reward, *settings.more_rewards], schema_has_device=reward_has_device, where="reward"
        )
        rounds.rewards = RewardSet(train_entries, normalize=settings.normalize_rewards)
        if heldout:
            judge = resolve_devices(
                [settings.judge] if settings.judge else [], schema_has_device=reward_has_device, where="judge"
            )
            rounds.eval_set = RewardSet([*rounds.rewards.rewards, *judge], normalize=settings.normalize_rewards)
            rounds.judge_label = rounds.eval_set.labels[-1] if judge else None
        from rl.flow_settings import flow_generator_config

        (gen_cfg,) = resolve_devices([settings.generator], schema_has_device=lambda name: True, where="generator")
        from reward.core.config import parse

        rounds.gen = build_flow_generator(parse(flow_generator_config(gen_cfg["name"]), gen_cfg, where="generator"))
        rounds._add_adapter()
        return rounds

    def _add_adapter(self) -> None:
        """LoRA on the transformer (everything else frozen), its weights in float32, the optimizer; prepared."""
        from diffusers.training_utils import cast_training_params
        from peft import LoraConfig

        settings, gen = self.settings, self.gen
        for part in ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"):
            module = getattr(gen.pipe, part, None)
            if module is not None:
                module.requires_grad_(False)
        torch.manual_seed(settings.seed)  # the adapter's initial weights: the same on every process and resume
        lora = settings.lora
        gen.transformer.add_adapter(
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                init_lora_weights="gaussian",
                target_modules=list(lora.target_modules or gen.targets),
            )
        )
        cast_training_params(gen.transformer, dtype=torch.float32)
        if settings.trainer.activation_checkpointing:
            gen.transformer.enable_gradient_checkpointing()
        params = [p for p in gen.transformer.parameters() if p.requires_grad]
        t = settings.trainer
        optimizer = torch.optim.AdamW(
            params,
            lr=t.learning_rate,
            betas=(t.adam_beta1, t.adam_beta2),
            eps=t.adam_epsilon,
            weight_decay=t.weight_decay,
        )
        self.model, self.optimizer = self.accelerator.prepare(gen.transformer, optimizer)
        self.trainable = sum(p.numel() for p in params)

    # ------------------------------------------------------------------------------------------------ checkpoints

    def resume(self) -> None:
        """Continue from the last complete checkpoint (an incomplete one moved aside), or from the start; the records
        of later steps dropped."""
        from rl.heldout import truncate_records
        from rl.run_folder import on_main
        from training.shared.checkpoints import last_complete_checkpoint

        found = on_main(lambda: last_complete_checkpoint(self.out))
        if found is not None:
            folder = Path(found)
            state = json.loads((folder / STATE_FILE).read_text())
            self._load_adapter(folder)
            with _deepspeed_globals():
                saved = [torch.load(f, weights_only=True) for f in self._optimizer_files(folder, state)]
            self.optimizer.load_state_dict(saved if len(saved) > 1 or uses_deepspeed(None) else saved[0])
            self.step, self.round = int(state["global_step"]), int(state["round"])
            self.resumed_from = str(folder)
        if self.accelerator.is_main_process:
            truncate_records(self.out, self.step, extra=("rounds.jsonl", "items.jsonl"))
        logger.info("resuming the run in %s from %s", self.out, self.resumed_from or "its start (no checkpoint yet)")

    def _optimizer_files(self, folder: Path, state: dict[str, Any]) -> list[Path]:
        """The optimizer states to restore from checkpoint ``folder``: under DDP every process holds the same one (the
        first's is read, whatever the number of processes now); DeepSpeed's ZeRO optimizer reads every process's
        share (its ``load_state_dict`` takes the list), so the launch must have as many processes as the one that
        saved them."""
        acc = self.accelerator
        if not uses_deepspeed(None):
            return [folder / "optimizer-rank0.pt"]
        if int(state.get("processes", acc.num_processes)) != acc.num_processes:
            raise UserError(
                f"{folder} was saved by {state['processes']} DeepSpeed processes (each its share of the optimizer); "
                f"resume it with --num_processes {state['processes']}, or start anew with another out="
            )
        return [folder / f"optimizer-rank{rank}.pt" for rank in range(acc.num_processes)]

    def _load_adapter(self, folder: Path) -> None:
        from diffusers.utils import convert_unet_state_dict_to_peft
        from peft import set_peft_model_state_dict

        state = type(self.gen.pipe).lora_state_dict(str(folder))
        state = state[0] if isinstance(state, tuple) else state
        weights = {k.removeprefix("transformer."): v for k, v in state.items() if k.startswith("transformer.")}
        result = set_peft_model_state_dict(self.gen.transformer, convert_unet_state_dict_to_peft(weights), "default")
        if getattr(result, "unexpected_keys", None):
            raise UserError(f"{folder}: its adapter does not fit this generator ({result.unexpected_keys[:3]}...)")

    def save_adapter(self, folder: Path) -> None:
        """The adapter in diffusers' LoRA format (``pipe.load_lora_weights(folder)`` loads it); main process."""
        from peft.utils import get_peft_model_state_dict

        model = self.accelerator.unwrap_model(self.model)
        type(self.gen.pipe).save_lora_weights(  # with its config (alpha, targets), as diffusers' LoRA training saves
            str(folder),
            transformer_lora_layers=get_peft_model_state_dict(model),
            transformer_lora_adapter_metadata=model.peft_config["default"].to_dict(),
        )

    def save_checkpoint(self) -> None:
        """``checkpoint-STEP``: the adapter, every process's optimizer state, then ``trainer_state.json`` (collective);
        the oldest beyond ``trainer.save_total_limit`` removed."""
        acc = self.accelerator
        folder = self.out / f"checkpoint-{self.step}"
        if acc.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            self.save_adapter(folder)
        acc.wait_for_everyone()
        torch.save(self.optimizer.state_dict(), folder / f"optimizer-rank{acc.process_index}.pt")
        acc.wait_for_everyone()
        if acc.is_main_process:
            atomic_write_json(
                folder / STATE_FILE, {"global_step": self.step, "round": self.round, "processes": acc.num_processes}
            )
            limit = self.settings.trainer.save_total_limit
            found = sorted(self.out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
            for old in found[:-limit] if limit else []:
                shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()

    # ------------------------------------------------------------------------------------------------ rounds

    def train(self, watchdog: Any) -> None:
        """Rounds until ``trainer.max_steps`` (a held-out evaluation first and at every ``eval.every``), with a
        progress bar over the rounds on the main process (stderr) and a log line as each round starts and ends."""
        from tqdm.auto import tqdm

        bar = tqdm(
            total=self.total_rounds,
            initial=min(self.round, self.total_rounds),
            desc="flow-grpo",
            unit="round",
            disable=not self.accelerator.is_main_process,
        )
        with bar:
            self._rounds(watchdog, bar)

    def _rounds(self, watchdog: Any, bar: Any) -> None:
        t, every = self.settings.trainer, self.settings.eval.every
        if self.eval_set is not None and self.step == 0:
            self.evaluate(watchdog)
        while self.step < t.max_steps and self.failure is None:
            before = self.step
            self.one_round(watchdog)
            if self.failure is not None:
                break
            bar.update(1)
            bar.set_postfix(step=f"{self.step}/{t.max_steps}", reward=self.last_reward)
            if self.step // t.save_steps > before // t.save_steps and self.step < t.max_steps:
                watchdog.beat(f"saving checkpoint-{self.step}")
                self.save_checkpoint()
            if (
                self.eval_set is not None
                and every
                and self.step // every > before // every
                and self.step < t.max_steps
            ):
                self.evaluate(watchdog)
        if self.failure is None and self.step > 0:
            watchdog.beat(f"saving checkpoint-{self.step}")
            self.save_checkpoint()
            if self.eval_set is not None:
                self.evaluate(watchdog, final=True)

    def one_round(self, watchdog: Any) -> None:
        """Sample, score, compute the advantages, train ``updates_per_round`` optimizer steps; log the round."""
        acc, r = self.accelerator, self.round
        if acc.is_main_process:
            logger.info(
                "round %d/%d: sampling %d images (%d prompts x %d) over %d process(es)",
                *(r + 1, self.total_rounds, self.layout.items, self.layout.prompts, self.layout.group_size),
                acc.num_processes,
            )
        start = time.perf_counter()
        rollouts, encoded = [], {}
        self.model.eval()
        for batch in self.layout.batches(acc.process_index):
            group = batch[0] // self.layout.group_size
            watchdog.beat(f"sampling round {r}, group {group}")
            task = self._task(r, group)
            rollouts.append(sample_group_batch(self.gen, task, batch, group, r, self.sampling, encoded))
        sampled = time.perf_counter()
        rewards, scores, tally = self._score(rollouts)
        scored = time.perf_counter()
        from accelerate.utils import gather_object

        from rl.reward_guard import judge_tallies

        failure = judge_tallies(
            gather_object([tally.as_dict()]), self.rewards, self.settings.max_reward_failures, self.totals
        )
        if failure is not None:  # the step it would have made, as GRPO's guard counts it
            self.failure = f"training stopped at step {self.step + 1}: {failure}"
            logger.error("%s", self.failure)
            return
        mine = torch.tensor([math.nan if v is None else v for v in rewards], dtype=torch.float64, device=acc.device)
        groups = torch.tensor([k // self.layout.group_size for ro in rollouts for k in ro.items], device=acc.device)
        adv, usable, every_reward, every_group = gathered_advantages(
            mine,
            groups,
            acc.gather,
            rank=acc.process_index,
            world=acc.num_processes,
            scale=self.settings.trainer.scale_rewards,
        )
        stats = self._updates(rollouts, adv, usable, every_reward, watchdog)
        done = time.perf_counter()
        self.seconds["sampling"] += sampled - start
        self.seconds["reward"] += scored - sampled
        self.seconds["update"] += done - scored
        self.seconds["rounds"] += 1
        split = (sampled - start, scored - sampled, done - scored)
        self._log_round(rollouts, scores, adv, every_reward, every_group, stats, split)
        self.round += 1

    def _task(self, round_: int, group: int) -> Any:
        """The task of group ``group`` of round ``round_``: the training tasks in a seeded order, a new order each
        pass over them (flow_grpo's sampler: every prompt once per pass)."""
        n, index = len(self.train_tasks), round_ * self.layout.prompts + group
        order = torch.randperm(
            n, generator=torch.Generator().manual_seed(seed_of(self.settings.seed, "epoch", index // n))
        )
        return self.train_tasks[int(order[index % n])]

    def _score(self, rollouts: list[Rollout]) -> tuple[list[float | None], dict[str, Any], RewardTally]:
        """Every reward on this process's images; each image's combined reward (``None``: any reward failed)."""
        images = [im for ro in rollouts for im in ro.images]
        prompts = [self._task(self.round, ro.group).prompt for ro in rollouts for _ in ro.items]
        scores = self.rewards.score(images, prompts)
        tally = RewardTally()
        tally.add(scores)
        for ro in rollouts:
            ro.images = []
        return combined(scores, self.weights), scores, tally

    def _updates(
        self,
        rollouts: list[Rollout],
        adv: torch.Tensor,
        usable: torch.Tensor,
        every_reward: torch.Tensor,
        watchdog: Any,
    ) -> list[dict[str, float | None]]:
        """``num_iterations`` passes of ``updates_per_round`` optimizer steps over this process's batches."""
        per_batch = self.layout.per_device
        advs = [adv[i * per_batch : (i + 1) * per_batch] for i in range(len(rollouts))]
        oks = [usable[i * per_batch : (i + 1) * per_batch] for i in range(len(rollouts))]
        parts = self.updates_per_round
        size = len(rollouts) // parts
        world_usable = (~torch.isnan(every_reward)).reshape(self.accelerator.num_processes, -1)
        stats = []
        for _ in range(self.settings.trainer.num_iterations):
            for u in range(parts):
                chunk = slice(u * size, (u + 1) * size)
                items = slice(u * size * per_batch, (u + 1) * size * per_batch)
                total = int(world_usable[:, items].sum())
                if total == 0:  # every process agrees: no usable image in this update, no step
                    stats.append({})
                    continue
                watchdog.beat(f"update {self.step + 1}")
                stats.append(
                    run_update(
                        self.accelerator,
                        self.model,
                        self.optimizer,
                        self.gen,
                        rollouts[chunk],
                        advs[chunk],
                        oks[chunk],
                        total,
                        self.objective,
                    )
                )
        self.step += parts
        return stats

    def _log_round(
        self,
        rollouts: list[Rollout],
        scores: dict[str, Any],
        adv: torch.Tensor,
        every_reward: torch.Tensor,
        every_group: torch.Tensor,
        stats: list[dict],
        split: tuple[float, float, float],
    ) -> None:
        """``rounds.jsonl`` (one row per round: rewards, groups without spread, losses) and ``items.jsonl`` (each
        image's group, task, reward and the advantage it was trained with), from every process (collective)."""
        from accelerate.utils import gather_object

        acc = self.accelerator
        used = acc.gather(adv.to(acc.device).contiguous()).cpu()
        local = {label: [v for v in res.value if v is not None] for label, res in scores.items()}
        raw = {label: [v for v in res.raw if v is not None] for label, res in scores.items()}
        parts = gather_object(
            [{"value": local, "raw": raw, "tasks": [self._task(self.round, ro.group).id for ro in rollouts]}]
        )
        if not acc.is_main_process:
            return
        rs = round_stats(every_reward, every_group)
        row: dict[str, Any] = {
            "step": self.step,
            "round": self.round,
            "images": rs.items,
            "unusable": rs.unusable,
            "groups": rs.groups,
            "zero_spread_groups": rs.zero_spread,
        }
        ok = every_reward[~torch.isnan(every_reward)]
        row["reward"] = float(ok.mean()) if len(ok) else None
        self.last_reward = "n/a" if row["reward"] is None else f"{row['reward']:.4f}"
        row["reward_std"] = float(ok.std(unbiased=False)) if len(ok) else None
        for label in scores:
            values = [v for p in parts for v in p["value"][label]]
            raws = [v for p in parts for v in p["raw"][label]]
            row[f"rewards/{label}"] = sum(values) / len(values) if values else None
            row[f"rewards/{label}/raw"] = sum(raws) / len(raws) if raws else None
        for key in ("policy_loss", "kl", "ratio", "clip_fraction", "approx_kl"):
            got = [s[key] for s in stats if s.get(key) is not None]
            row[key] = sum(got) / len(got) if got else None
        append_jsonl(self.out / "rounds.jsonl", [json_safe(row)])
        size = self.layout.group_size
        items = [
            {
                "step": self.step,
                "round": self.round,
                "item": k,
                "group": int(every_group[k]),
                "task": self._task(self.round, k // size).id,
                "reward": None if math.isnan(float(every_reward[k])) else float(every_reward[k]),
                "advantage": float(used[k]),
            }
            for k in range(len(every_reward))
        ]
        append_jsonl(self.out / "items.jsonl", json_safe(items))
        logger.info(
            "round %d/%d, step %d/%d: reward %s (sampling %.1f s, reward %.1f s, update %.1f s), %d of %d groups "
            "without spread, %d unrewarded, policy loss %s",
            *(self.round + 1, self.total_rounds, self.step, self.settings.trainer.max_steps, self.last_reward),
            *split,
            rs.zero_spread,
            rs.groups,
            rs.unusable,
            "n/a" if row["policy_loss"] is None else f"{row['policy_loss']:.3g}",
        )

    # ------------------------------------------------------------------------------------------------ held out

    def evaluate(self, watchdog: Any, final: bool = False) -> None:
        """Held-out images (fixed seeds, the pipeline's own sampler) scored by the training rewards and the judge;
        every process its share; the main process appends the row (collective). ``final``: also each task with the
        adapter off, the pairs a blind study shows."""
        from accelerate.utils import gather_object

        acc, start = self.accelerator, time.perf_counter()
        done = {int(r["step"]) for r in read_records(self.out / "heldout.jsonl")}
        if self.step in done and not final:
            return
        watchdog.beat(f"held-out evaluation at step {self.step}")
        mine = list(range(len(self.heldout)))[acc.process_index :: acc.num_processes]
        tasks = [self.heldout[i] for i in mine]
        seeds = [seed_of(self.settings.seed, "heldout", t.key) for t in tasks]
        self.model.eval()
        local: list[tuple[int, dict[str, float | None]]] = []
        folder = self.out / "heldout"
        sheets = folder / "steps"
        sheets.mkdir(parents=True, exist_ok=True)
        if tasks:
            images = self.gen.generate(tasks, seeds)
            scores = self.eval_set.score(images, [t.prompt for t in tasks])
            for k, i in enumerate(mine):
                local.append((i, {label: res.value[k] for label, res in scores.items()}))
                if i < self.settings.eval.sheet_tasks:
                    images[k].save(sheets / f"step{self.step:06d}-{i:04d}.png")
                if final:
                    images[k].save(folder / f"{i:04d}-policy.png")
            if final:
                with adapter_off(self.gen.transformer):
                    for i, base in zip(mine, self.gen.generate(tasks, seeds), strict=True):
                        base.save(folder / f"{i:04d}-base.png")
        rows = sorted(gather_object(local) if acc.num_processes > 1 else local, key=lambda r: r[0])
        self.seconds["heldout"] += time.perf_counter() - start
        if not acc.is_main_process:
            return
        row: dict[str, Any] = {"step": self.step}
        for label in self.eval_set.labels:
            ok = [r[1][label] for r in rows if r[1].get(label) is not None]
            row[label] = sum(ok) / len(ok) if ok else None
        row["failed"] = sum(1 for r in rows if any(v is None for v in r[1].values()))
        if self.step not in done:
            append_jsonl(self.out / "heldout.jsonl", [json_safe(row)])
        if final:
            pairs = [{"index": i, "task": self.heldout[i].id, "prompt": self.heldout[i].prompt} for i, _ in rows]
            atomic_write_jsonl(folder / "pairs.jsonl", json_safe(pairs))
        logger.info("held-out at step %d: %s", self.step, {k: row[k] for k in self.eval_set.labels})

    # ------------------------------------------------------------------------------------------------ report

    def result(self, setup: Any) -> dict[str, Any]:
        """What the run did (every process's devices and seconds gathered: collective)."""
        from accelerate.utils import gather_object

        from rl.reward_guard import served_reports

        acc = self.accelerator
        rounds = max(self.seconds["rounds"], 1)
        mine = {
            "process": acc.process_index,
            "devices": {
                "transformer": placed_device(self.gen.transformer) or str(acc.device),
                **{f"reward:{r.label}": placed_device(r.reward) or "none" for r in self.rewards.rewards},
            },
            "seconds_per_step": {
                k: self.seconds[k] / rounds / self.updates_per_round for k in ("sampling", "reward", "update")
            },
            "heldout_s": self.seconds["heldout"],
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        }
        processes = gather_object([mine])
        settings = self.settings
        complete = self.failure is None and self.step >= settings.trainer.max_steps
        return {
            "global_step": self.step,
            "max_steps": settings.trainer.max_steps,
            "rounds": self.round,
            "complete": complete,
            "resumed_from": self.resumed_from,
            "skipped_rows": setup.n_bad,
            "tasks": {"train": len(self.train_tasks), "heldout": len(self.heldout)},
            "generator": to_plain(settings.generator).get("name"),
            "adapter": {"trainable_parameters": self.trainable, "r": settings.lora.r, "alpha": settings.lora.alpha},
            "batch": {
                "images_per_round": settings.round_images(),
                "group_size": self.layout.group_size,
                "prompts_per_round": self.layout.prompts,
                "updates_per_round": self.updates_per_round,
                "per_device": self.layout.per_device,
                "processes": acc.num_processes,
                "accumulation": acc.gradient_accumulation_steps,
            },
            "rewards": self.rewards.labels,
            "reward_weights": self.weights,
            "judge": self.judge_label,
            "reward_failures": {
                **self.totals,
                "max_reward_failures": settings.max_reward_failures,
                "failure": self.failure,
                "servers": served_reports(self.eval_set or self.rewards),
            },
            "provenance": setup.output.provenance(),
            "processes": processes,
            "timing": {
                "train_s": time.perf_counter() - setup.started,
                "per_step_s": {
                    k: sum(p["seconds_per_step"][k] for p in processes) / len(processes)
                    for k in ("sampling", "reward", "update")
                },
            },
            "settings": {"sample": asdict(settings.sample), "trainer": asdict(settings.trainer)},
        }

    def write_outputs(self, setup: Any, result: dict[str, Any], command: str) -> None:
        """Main process: ``lora/`` with its card, the plots, ``flow_grpo_result.json``, the closing summary."""
        from rl.flow_card import flow_card
        from rl.plots import image_grid, reward_curves
        from training.shared.cards import write_card

        out = self.out
        history = read_records(out / "heldout.jsonl")
        rows = read_records(out / "rounds.jsonl")
        curve = {
            label: [(r["step"], r[f"rewards/{label}"], 0.0) for r in rows if r.get(f"rewards/{label}") is not None]
            for label in self.rewards.labels
        }
        heldout = {
            label: [(r["step"], r[label]) for r in history if r.get(label) is not None]
            for label in (self.eval_set.labels if self.eval_set else [])
        }
        plots = {
            "reward_curve": str(reward_curves(curve, heldout, out / "reward_curve.png", title="Flow-GRPO rewards"))
        }
        steps = sorted({int(p.name[4:10]) for p in (out / "heldout" / "steps").glob("step*.png")})
        if steps:
            from PIL import Image

            grid = [
                [(Image.open(p), [p.stem[-4:]]) for p in sorted((out / "heldout" / "steps").glob(f"step{s:06d}-*"))]
                for s in steps
            ]
            plots["sample_sheets"] = str(
                image_grid(grid, out / "sample_sheets.png", row_titles=[f"step {s}" for s in steps])
            )
        result["plots"] = plots
        result["summary"] = {
            "train": {k: {"first": v[0][1], "last": v[-1][1]} for k, v in curve.items() if v},
            "heldout": {
                k: {"first": v[0][1], "last": v[-1][1], "steps": [v[0][0], v[-1][0]]} for k, v in heldout.items() if v
            },
        }
        lora = out / "lora"
        lora.mkdir(exist_ok=True)
        self.save_adapter(lora)
        card = flow_card(setup.output.identity["settings"], result, command=command)
        result["model_card"] = str(write_card(lora, card))
        write_card(out, card)
        result["files"] = {
            name: str(p)
            for name, p in {
                "adapter": lora / LORA_FILE,
                "model card": lora / "README.md",
                "rounds": out / "rounds.jsonl",
                "items": out / "items.jsonl",
                "held-out rewards": out / "heldout.jsonl",
                **{k.replace("_", " "): Path(v) for k, v in plots.items()},
                "result": out / "flow_grpo_result.json",
            }.items()
            if p.exists() or name == "result"
        }
        atomic_write_json(out / "flow_grpo_result.json", json_safe(result))
        logger.info("%s", summary_text(result))


def summary_text(result: dict[str, Any]) -> str:
    """The closing summary: steps, the training rewards first vs last round, held-out rewards and judge before vs
    after, the seconds of a step by phase."""
    t = result["timing"]["per_step_s"]
    lines = [
        f"Flow-GRPO {'finished' if result['complete'] else 'stopped'}: {result['global_step']} of "
        f"{result['max_steps']} steps in {result['rounds']} rounds; per step: sampling {t['sampling']:.2f} s, "
        f"reward {t['reward']:.2f} s, update {t['update']:.2f} s"
    ]
    for name, v in result["summary"]["train"].items():
        lines.append(f"  training {name}: {v['first']:.4f} -> {v['last']:.4f} (first vs last round)")
    for name, v in result["summary"]["heldout"].items():
        role = "judge" if name == result.get("judge") else "held-out"
        lines.append(f"  {role} {name}: {v['first']:.4f} -> {v['last']:.4f} (step {v['steps'][0]} -> {v['steps'][1]})")
    lines += [f"  {name}: {path}" for name, path in result.get("files", {}).items()]
    return "\n".join(lines)
