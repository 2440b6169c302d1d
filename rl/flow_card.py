"""The model card of the adapter ``rl/flow_grpo.py`` trained (``lora/README.md``, also the run folder's): base
pipeline, rewards and judge with their models (a local folder by its name, never its path), the held-out rewards before
and after, the sampling and objective settings, how to load it in diffusers, the command. From the run's settings
record and ``flow_grpo_result.json``, through :func:`training.shared.cards.model_card` with its own template
(``flow_card.md``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl.run_folder import reward_models
from training.shared.cards import model_card, public

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

TEMPLATE = Path(__file__).with_name("flow_card.md")
TAGS = ("flow-grpo", "lora", "diffusers", "perceptual-rewards")
PIPELINES = {"flux-fill": "FluxFillPipeline", "sd3": "StableDiffusion3Pipeline"}
CALLS = {
    "flux-fill": 'image = pipe(prompt="a reading nook", image=IMAGE, mask_image=MASK, guidance_scale={g}).images[0]',
    "sd3": 'image = pipe("a reading nook by a rainy window", guidance_scale={g}).images[0]',
}


def flow_card(record: Mapping[str, Any], result: Mapping[str, Any], *, command: str) -> ModelCard:
    """The card of the adapter of a run whose settings record is ``record`` and result ``result``.

    >>> record = {"generator": {"name": "sd3", "path": "stabilityai/stable-diffusion-3.5-medium", "guidance": 4.5,
    ...           "steps": 40}, "reward": {"name": "qbench"}, "more_rewards": [], "judge": None, "data": "p.jsonl",
    ...           "normalize_rewards": True, "seed": 1, "lora": {"r": 32, "alpha": 64},
    ...           "sample": {"steps": 10, "noise_level": 0.7, "window": 2, "window_range": [0, 5], "guidance": None},
    ...           "trainer": {"num_generations": 24, "epsilon": 1e-4, "advantage_clip": 5, "scale_rewards": "batch",
    ...           "beta": 0.04, "learning_rate": 3e-4, "weight_decay": 1e-4, "max_grad_norm": 1.0}}
    >>> result = {"global_step": 4, "max_steps": 4, "complete": True, "tasks": {"train": 9, "heldout": 2},
    ...           "batch": {"images_per_round": 48, "prompts_per_round": 2, "updates_per_round": 2, "per_device": 3},
    ...           "rewards": ["qbench"], "reward_weights": [1.0], "judge": None, "skipped_rows": 0,
    ...           "summary": {"heldout": {"qbench": {"first": 0.25, "last": 0.5, "steps": [0, 4]}}}}
    >>> card = flow_card(record, result, command="python rl/flow_grpo.py generator=sd3 reward=qbench")
    >>> card.data.base_model, "| qbench | training (weight 1) | 0.2500 | 0.5000 | +0.2500 |" in str(card)
    ('stabilityai/stable-diffusion-3.5-medium', True)
    """
    gen = record["generator"]
    heldout = (result.get("summary") or {}).get("heldout") or {}
    trained = reward_models([record["reward"], *record.get("more_rewards", [])])
    labels = list(result.get("rewards") or [name for name, _ in trained])
    weights = result.get("reward_weights") or [1.0] * len(labels)
    rows = [
        [lb, f"training (weight {w:g})", _models(m)] for lb, (_, m), w in zip(labels, trained, weights, strict=False)
    ]
    judge = result.get("judge")
    if judge and record.get("judge"):
        rows.append([judge, "held-out judge (not trained on)", _models(reward_models([record["judge"]])[0][1])])
    role = {row[0]: row[1] for row in rows}
    table = []
    for label, v in heldout.items():
        first, last = v.get("first"), v.get("last")
        change = "n/a" if first is None or last is None else f"{last - first:+.4f}"
        shown = ["n/a" if x is None else f"{x:.4f}" for x in (first, last)]
        table.append([label, role.get(label, "held out"), *shown, change])
    guidance = record["sample"].get("guidance")
    guidance = gen.get("guidance") if guidance is None else guidance
    return model_card(
        "generator",
        gen["path"],
        adapter=True,
        library="diffusers",
        pipeline_tag="image-to-image" if gen["name"] == "flux-fill" else "text-to-image",
        tags=[*TAGS, gen["name"]],
        sources=[record.get("data"), record.get("eval_data")],
        results=[(label, f"held-out {label}", v.get("last")) for label, v in heldout.items()],
        tested_on=record.get("eval_data") or record.get("data"),
        template=TEMPLATE,
        record=record,
        result=result,
        generator=gen["name"],
        rewards=rows,
        heldout=table,
        steps=next(iter(heldout.values()))["steps"] if heldout else None,
        eval_steps=gen.get("steps"),
        guidance=guidance,
        pipeline=PIPELINES[gen["name"]],
        call=CALLS[gen["name"]].format(g=gen.get("guidance")),
        command=command,
    )


def _models(models: Mapping[str, str]) -> str:
    """A reward's models as the card names them: a local folder by its name (:func:`public`), a Hub id as given."""
    return ", ".join(f"{k} `{public(p)}`" for k, p in models.items()) or "(built in)"
