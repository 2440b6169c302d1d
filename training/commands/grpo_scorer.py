"""``training/grpo_scorer.py``: GRPO on the scorer itself, as Q-Insight (arXiv:2503.22679) and VisualQuality-R1
(arXiv:2505.14460) train theirs: trl's ``GRPOTrainer`` with the VLM as the policy (its processor as the processing
class, the image column), rewarded by :mod:`training.scorer_rewards`.

``run`` reads set-up -> train -> report. The scorer folder it writes (``out/scorer``) is the SFT scorers' format
(:mod:`reward.rewards.scorer_folder`) with a ``reasoning`` entry: ``reward=reasoning-iqa reward.model=out/scorer``
scores with it by sampling or in one forward pass (:mod:`reward.rewards.reasoning_iqa`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import MISSING

from reward.core.config import BATCH, RESUME, SIDE, parse, resume_mode
from reward.core.errors import UserError
from reward.core.outputs import Output, check_output, may_change_keys
from reward.core.summary import log_summary
from reward.data.files import atomic_write_json
from reward.rewards.reasoning_iqa import PROMPTS, THINKS, scorer_meta, to_prompt_scale
from training.commands.sft import ModelSettings
from training.shared.batch import PlanSettings, trl_fields
from training.shared.deepspeed import launcher_bf16, save_gathered_weights_under_zero3
from training.shared.sizes import require_trained
from training.shared.trainable import LoraSettings, freeze_vision, load_for_training, lora_config, training_dtype
from training.shared.trl_fields import trainer_problems

logger = logging.getLogger(__name__)

REWARDS = ("score", "format", "degradation", "ranking")
TRAINER = {"num_generations": 8, "max_completion_length": 256, "beta": 0.04, "learning_rate": 1e-6}  # the recipes'


@dataclass
class ScorerDataSettings:
    train: str = field(
        default=MISSING,
        metadata={
            "help": '"synthetic" (procedural scenes, known quality) or a ratings source (manifest, NAME:FOLDER)'
        },
    )
    test: str | None = field(
        default=None, metadata={"help": "the same kinds (synthetic: a held-out seed), scored at the end"}
    )
    dimension: str | None = field(
        default=None, metadata={"help": "the rated dimension (synthetic: lighting, harmony, layout or distortion)"}
    )
    mos_range: list[float] | None = field(
        default=None, metadata={"help": "the data's MOS scale, mapped onto the prompt's 1-5; null: the source's own"}
    )
    rows: int = field(default=4096, metadata={"help": "synthetic: training images", "range": (1, 10**9)})
    test_rows: int = field(default=200, metadata={"help": "synthetic: test images", "range": (2, 10**7)})
    synthetic_size: int = field(default=64, metadata={"help": "synthetic: image side in pixels", "range": SIDE})


@dataclass
class GrpoScorerSettings:
    """Settings of ``training/grpo_scorer.py``; ``trainer.*`` are trl.GRPOConfig fields."""

    out: str = field(default=MISSING, metadata={"help": "checkpoints, scorer/, grpo_scorer_result.json"})
    model: ModelSettings = field(default_factory=ModelSettings)
    data: ScorerDataSettings = field(default_factory=ScorerDataSettings)
    prompt: str = field(default="visualquality-r1", metadata={"help": f"the released prompt: {', '.join(PROMPTS)}"})
    rewards: list[str] = field(
        default_factory=lambda: ["ranking", "format"], metadata={"help": f"trl reward functions of {REWARDS}"}
    )
    threshold: float = field(
        default=0.35, metadata={"help": "score reward: |score - MOS| below this on 1-5", "range": (0, 4, True)}
    )
    lora: LoraSettings = field(default_factory=LoraSettings)
    seed: int = field(default=42, metadata={"help": "data order, sampling, synthetic images"})
    resume: str = field(
        default="false", metadata={"help": "auto | true | false", "may_change": True, "choices": RESUME}
    )
    overwrite: bool = field(default=False, metadata={"help": "replace another run's out folder", "may_change": True})
    eval_batch_size: int = field(default=16, metadata={"help": "test images per forward", "range": BATCH})
    trainer: dict[str, Any] = field(default_factory=lambda: dict(TRAINER), metadata={"help": "trl.GRPOConfig fields"})
    plan: bool = field(default=False, metadata={"help": "print memory and time of the run, load nothing"})
    plan_for: PlanSettings = field(default_factory=PlanSettings)

    def __post_init__(self) -> None:
        problems = [f"rewards: {r!r} is none of {REWARDS}" for r in self.rewards if r not in REWARDS]
        problems += [f"prompt={self.prompt!r} is none of {list(PROMPTS)}"] if self.prompt not in PROMPTS else []
        problems += trainer_problems("GRPOConfig", trl_fields(self.trainer))
        if problems:
            raise UserError("; ".join(problems))


class Rows:
    """The training or test rows, each image read (or rendered) when asked for: ``image``, ``prompt``, ``mos`` on
    the prompt's 1-5 scale, ``image_id`` and, where the data names one, ``distortion``; :meth:`dataset` gives them to
    trl as a ``datasets.Dataset`` of indices whose transform makes each row when it is read."""

    def __init__(self, settings: GrpoScorerSettings, source: str, split: str) -> None:
        data, self.prompt, self.seed = settings.data, PROMPTS[settings.prompt], settings.seed
        self.synthetic, self.size = source == "synthetic", data.synthetic_size
        if self.synthetic:
            self.dim = data.dimension or "lighting"
            self.n, self.range = (data.rows if split == "train" else data.test_rows), mos_range(settings, source)
            self.seed += 0 if split == "train" else 1_000_003  # the test stream: another seed
            return
        from reward.data import load_ratings

        read = load_ratings(source, check_images=False, default_split=split)
        self.rows = [r for r in read.rows if data.dimension in (None, r.dimension)]
        self.n, self.range = len(self.rows), mos_range(settings, source)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from reward.data.images import load_image

        if self.synthetic:
            from training.procedural.synthetic import example_at

            ex = example_at(self.seed, i, self.size)
            image, mos, distortion = ex.image, ex.mos[self.dim], None
        else:
            row = self.rows[i]
            image, mos, distortion = load_image(row.image), row.mos, row.extra.get("distortion")
        return {
            "prompt": [{"role": "user", "content": self.prompt}],
            "image": image,
            "mos": to_prompt_scale(mos, self.range),
            "image_id": i,
            "distortion": distortion,
        }

    def dataset(self) -> Any:
        import datasets

        def rows(batch: dict[str, list[int]]) -> dict[str, list[Any]]:
            made = [self[i] for i in batch["image_id"]]
            return {key: [row[key] for row in made] for key in made[0]}

        table = datasets.Dataset.from_dict({"image_id": list(range(self.n))})
        table.set_transform(rows)
        return table


def mos_range(settings: GrpoScorerSettings, source: str) -> tuple[float, float]:
    """The MOS scale of ``source``: ``data.mos_range``, else the dataset's own (synthetic and manifests: 1-5)."""
    from reward.data.datasets.load import mos_range_of

    low, high = settings.data.mos_range or ((1.0, 5.0) if source == "synthetic" else mos_range_of(source))
    return float(low), float(high)


def parse_settings(cfg: Any) -> GrpoScorerSettings:
    return parse(GrpoScorerSettings, cfg, where="")


def run(cfg: Any, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Plan, or set up, train, report; returns the result (also ``out/grpo_scorer_result.json``)."""
    settings = parse_settings(cfg)
    if settings.plan:
        from training.commands.grpo_scorer_plan import grpo_scorer_plan
        from training.shared.plan import report_plan

        return report_plan(grpo_scorer_plan(settings))
    output = check_output(
        settings.out,
        "grpo_scorer",
        {k: v for k, v in asdict(settings).items() if k not in ("out", "plan", "plan_for")},
        {"model": settings.model.path, "data.train": settings.data.train},
        resume=resume_mode(settings.resume),
        overwrite=settings.overwrite,
        may_change=may_change_keys(GrpoScorerSettings),
        resume_hint="resume=auto",
    )
    trainer, train_s = train(settings, output, callbacks or [])
    result = report(settings, output, trainer, train_s)
    trainer.accelerator.end_training()  # the process groups destroyed (a launched process ends: cli.main)
    return result


def reward_functions(settings: GrpoScorerSettings) -> list[Any]:
    from training.scorer_rewards import degradation_reward, format_reward, ranking_reward, score_reward

    made = {
        "score": score_reward(settings.threshold),
        "format": format_reward(THINKS[settings.prompt]),
        "degradation": degradation_reward,
        "ranking": ranking_reward,
    }
    return [made[name] for name in settings.rewards]


def train(settings: GrpoScorerSettings, output: Output, callbacks: list[Any]) -> tuple[Any, float]:
    """trl's GRPOTrainer with the VLM as the policy on the training rows."""
    from reward.vlm.hub import check_models

    check_models({"model.path": settings.model.path})  # a missing model or data: said before torch and trl load
    rows = Rows(settings, settings.data.train, "train")

    import torch
    from trl import GRPOConfig, GRPOTrainer

    from reward.vlm import load_processor

    save_gathered_weights_under_zero3()  # the scorer is written from the gathered weights
    args = {"report_to": "none", "logging_steps": 1, "seed": settings.seed, "remove_unused_columns": False}
    args |= trl_fields(settings.trainer)
    if args.get("bf16") is None:
        args["bf16"] = launcher_bf16(bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()))
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    try:
        config = GRPOConfig(output_dir=settings.out, **args)
    except (TypeError, ValueError) as err:
        raise UserError(f"invalid trainer.* settings (trl.GRPOConfig): {err}") from None
    if config.distributed_state.is_main_process:
        output.create()
    processor = load_processor(
        settings.model.path, min_pixels=settings.model.min_pixels, max_pixels=settings.model.max_pixels
    )
    dtype = training_dtype(settings.model.dtype, lora=settings.lora.enabled, args=config)
    model = load_for_training(settings.model.path, dtype, settings.model.loading())
    if settings.model.freeze_vision or settings.model.freeze_aligner:
        freeze_vision(model, vision=settings.model.freeze_vision, aligner=settings.model.freeze_aligner)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_functions(settings),
        args=config,
        train_dataset=rows.dataset(),
        processing_class=processor,
        peft_config=lora_config(settings.lora) if settings.lora.enabled else None,
        callbacks=callbacks,
    )
    start = time.perf_counter()
    from training.shared.checkpoints import last_complete_checkpoint

    resume_from = last_complete_checkpoint(settings.out) if output.resumed else None
    step = trainer.train(resume_from_checkpoint=resume_from).global_step
    require_trained(step, "GRPO", settings.trainer)
    return trainer, time.perf_counter() - start


def save_scorer(settings: GrpoScorerSettings, trainer: Any, folder: Path) -> dict[str, Any] | None:
    """The trained policy as a scorer folder (collective: ZeRO-3 gathers the weights; with LoRA, the adapter and its
    ``base_model``), its processor and ``sa_iqa.json`` with ``reasoning`` (main process; the others get ``None``)."""
    from reward.rewards.scorer_folder import write_metadata

    trainer.save_model(str(folder))
    if not trainer.accelerator.is_main_process:
        return None
    trainer.processing_class.save_pretrained(folder)
    record = {"trained_from": settings.model.path, "rewards": settings.rewards}
    record |= {"base_model": settings.model.path} if settings.lora.enabled else {}
    meta = scorer_meta(settings.prompt, mos_range(settings, settings.data.train), **record)
    write_metadata(folder, meta)
    return meta


def held_out_srcc(settings: GrpoScorerSettings, scorer: Path, mode: str) -> float | None:
    """SRCC of the saved scorer on ``data.test``, loaded as ``reward=reasoning-iqa`` loads it."""
    from reward.eval.metrics import srcc
    from reward.rewards.reasoning_iqa import build

    if not settings.data.test:
        return None
    rows = Rows(settings, settings.data.test, "test")
    reward = build({"model": str(scorer), "mode": mode, "batch_size": settings.eval_batch_size})
    items = [rows[i] for i in range(rows.n)]
    scores = reward.score([it["image"] for it in items]).scores.numpy()
    ok = np.isfinite(scores)
    return float(srcc(scores[ok], np.array([it["mos"] for it in items])[ok])) if ok.sum() > 2 else None


def report(settings: GrpoScorerSettings, output: Output, trainer: Any, train_s: float) -> dict[str, Any]:
    """The scorer folder and its card, the test SRCC, ``grpo_scorer_result.json`` and the closing summary."""
    from training.model_card import scorer_card
    from training.shared.cards import settings_command, write_card

    out = Path(settings.out)
    result: dict[str, Any] = {"global_step": trainer.state.global_step, "train_s": round(train_s, 1)}
    history = [h for h in trainer.state.log_history if "reward" in h]
    if history:
        result["reward_first"], result["reward_last"] = history[0]["reward"], history[-1]["reward"]
    scorer = out / "scorer"
    meta = save_scorer(settings, trainer, scorer)
    if meta is None:
        return result
    result["scorer"], result["test_srcc"] = str(scorer), held_out_srcc(settings, scorer, "expected")
    card = scorer_card(
        base_model=settings.model.path,
        dimensions={"quality": ""},
        level_words=meta["level_words"],
        level_values=meta["level_values"],
        train_data=settings.data.train,
        test_data=settings.data.test,
        command=settings_command("training/grpo_scorer.py", "grpo_scorer", GrpoScorerSettings, asdict(settings)),
        prompt_type=settings.prompt,
        metrics={"quality": {"srcc": result["test_srcc"]}} if result["test_srcc"] is not None else None,
        steps=result["global_step"],
        location=str(scorer),
        method=f"trained by GRPO on its own answers ({settings.prompt} prompt; rewards {', '.join(settings.rewards)})",
        reward_name="reasoning-iqa",
    )
    result["model_card"] = str(write_card(scorer, card))
    result["run"] = output.provenance()
    path = atomic_write_json(out / "grpo_scorer_result.json", result)
    output.finish()
    facts = {"steps": result["global_step"], "test SRCC": result["test_srcc"]}
    log_summary("grpo_scorer", facts, {"scorer": scorer, "model_card": result["model_card"], "result": path})
    return result
