"""The model card of a policy ``rl/grpo.py`` trained (``policy/README.md``), from the template the scorer's card
shares (:mod:`training.shared.cards`): base policy, rewards with their models, generator, tasks, the held-out reward
before and after training, how to use the policy, the command. All of it from the run's settings record (what
``run.json`` holds) and its result (``grpo_result.json``).

Example:
    >>> record = {"policy": {"path": "Qwen/Qwen2.5-0.5B-Instruct", "image": "masked"}, "data": "tasks.jsonl",
    ...           "reward": {"name": "qbench", "model": "/scorer"}, "more_rewards": [], "eval_rewards": [],
    ...           "generator": {"name": "procedural"}, "lora": {"enabled": False}, "eval_data": None,
    ...           "prompt": {"template": "Expand: {prompt}", "system": None}, "normalize_rewards": True,
    ...           "trainer": {"num_generations": 8, "learning_rate": 1e-6, "beta": 0.0, "loss_type": "grpo"}}
    >>> result = {"global_step": 10, "max_steps": 10, "complete": True, "tasks": {"train": 30, "heldout": 8},
    ...           "rewards": ["qbench"], "eval_rewards": ["qbench"], "skipped_rows": 0,
    ...           "summary": {"train": {}, "heldout": {"qbench": {"first": 0.25, "last": 0.5, "steps": [0, 10]}}}}
    >>> card = policy_card(record, result, command="python rl/grpo.py reward=qbench", vision=False, max_new_tokens=7)
    >>> card.data.base_model, "| qbench | training (weight 1) | 0.2500 | 0.5000 | +0.2500 |" in str(card)
    ('Qwen/Qwen2.5-0.5B-Instruct', True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rl.run_folder import reward_models
from training.shared.cards import model_card, public

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

__all__ = ["policy_card"]

TAGS = ("grpo", "trl", "prompt-expansion", "inpainting", "perceptual-rewards")


def policy_card(
    record: Mapping[str, Any], result: Mapping[str, Any], *, command: str, vision: bool, max_new_tokens: int
) -> ModelCard:
    """The card of the policy of a run whose settings record is ``record`` and result ``result``; ``vision``: the
    policy is a VLM shown the task image; ``max_new_tokens``: the completion length it was trained with."""
    summary = result.get("summary") or {}
    heldout = summary.get("heldout") or {}
    trained = reward_models([record["reward"], *record.get("more_rewards", [])])
    weights = (record.get("trainer") or {}).get("reward_weights") or [1.0] * len(trained)
    labels = list(result.get("rewards") or [name for name, _ in trained])
    extra = [label for label in result.get("eval_rewards") or [] if label not in labels]
    roles = [(lb, f"training (weight {w:g})", m) for lb, (_, m), w in zip(labels, trained, weights, strict=False)]
    held_only = zip(extra, reward_models(record.get("eval_rewards") or []), strict=False)
    roles += [(lb, "held-out only", m) for lb, (_, m) in held_only]
    role_of = {lb: role for lb, role, _ in roles}
    table = []
    for lb, v in heldout.items():  # before and after training and the change, to 4 decimals (n/a where missing)
        first, last = (v.get(k) if isinstance(v.get(k), float) else None for k in ("first", "last"))
        change = "n/a" if first is None or last is None else f"{last - first:+.4f}"
        table.append(
            [
                lb,
                role_of.get(lb, "held-out only"),
                *("n/a" if x is None else f"{x:.4f}" for x in (first, last)),
                change,
            ]
        )
    curves = dict(summary.get("train") or {})
    if len(curves) == 2:  # one reward: its curve is the total's
        curves.pop("reward", None)
    prompt = record.get("prompt") or {}
    user = (prompt.get("template") or "{prompt}").replace("{prompt}", "a reading nook by the window")
    system = [{"role": "system", "content": prompt["system"]}] if prompt.get("system") else []
    return model_card(
        "policy",
        record["policy"]["path"],
        adapter=bool((record.get("lora") or {}).get("enabled")),
        pipeline_tag="image-text-to-text" if vision else "text-generation",
        tags=TAGS,
        sources=[record.get("data"), record.get("eval_data")],
        results=[(label, f"held-out {label}", v.get("last")) for label, v in heldout.items()],
        tested_on=record.get("eval_data") or record.get("data"),
        record=record,
        result=result,
        rewards=[
            [lb, role, ", ".join(f"{k} `{public(p)}`" for k, p in m.items()) or "(built in)"] for lb, role, m in roles
        ],
        steps=next(iter(heldout.values()))["steps"] if heldout else None,
        heldout=table,
        curves=curves,
        vision=vision,
        user=repr(user),
        messages=json.dumps([*system, {"role": "user", "content": user}], ensure_ascii=False),
        max_new_tokens=max_new_tokens,
        command=command,
    )
