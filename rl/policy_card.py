"""The model card of a policy ``rl/grpo.py`` trained (``policy/README.md``, and the run folder's ``README.md`` in
place of trl's template): the base policy, the rewards with their models, the generator, the tasks, the reward on the
held-out tasks before and after training, how to use the policy, and the command that made it.

Everything a card says about the settings comes from the run's settings record (what ``run.json`` holds) and the
result (``grpo_result.json``), so that nothing reaches a card that the run's record leaves out.

Example:
    >>> record = {"policy": {"path": "Qwen/Qwen2.5-0.5B-Instruct", "image": "masked"}, "data": "tasks.jsonl",
    ...           "reward": {"name": "qbench", "model": "/scorer"}, "more_rewards": [], "eval_rewards": [],
    ...           "generator": {"name": "procedural"}, "lora": {"enabled": False}, "eval_data": None,
    ...           "prompt": {"template": "Expand: {prompt}", "system": None}, "normalize_rewards": True,
    ...           "trainer": {"num_generations": 8, "learning_rate": 1e-6, "beta": 0.0, "loss_type": "grpo"}}
    >>> result = {"global_step": 10, "max_steps": 10, "complete": True, "tasks": {"train": 30, "heldout": 8},
    ...           "rewards": ["qbench"], "eval_rewards": ["qbench"], "skipped_rows": 0,
    ...           "summary": {"train": {}, "heldout": {"qbench": {"first": 0.25, "last": 0.5, "steps": [0, 10]}}}}
    >>> card = PolicyCard(record, result, command="python rl/grpo.py reward=qbench", vision=False, max_new_tokens=77)
    >>> text = render_card(card)
    >>> text.splitlines()[1], "| qbench | training (weight 1) | 0.2500 | 0.5000 | +0.2500 |" in text
    ('base_model: Qwen/Qwen2.5-0.5B-Instruct', True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl.run_folder import reward_models
from training.shared.cards import command_line, front_matter, how_it_was_made, launch_of, write_card_text

__all__ = ["TAGS", "PolicyCard", "default_record", "render_card", "write_cards"]

TAGS = ("grpo", "trl", "prompt-expansion", "inpainting", "perceptual-rewards")


@dataclass
class PolicyCard:
    """What a GRPO policy's card says: ``record`` is the run's settings record (``run.json``), ``result`` the
    contents of ``grpo_result.json``."""

    record: Mapping[str, Any]
    result: Mapping[str, Any]
    command: str
    vision: bool  # the policy is a VLM shown the task image
    max_new_tokens: int  # the completion length it was trained with


def _code(value: Any) -> str:
    return f"`{value}`"


def _models(models: Mapping[str, str]) -> str:
    return ", ".join(f"{key} {_code(path)}" for key, path in models.items()) or "(built in)"


def _rewards(card: PolicyCard) -> list[dict[str, Any]]:
    """One entry per reward: its label, role (training with its weight, or held-out only) and model files."""
    record, result = card.record, card.result
    train = reward_models([record["reward"], *record.get("more_rewards", [])])
    weights = (record.get("trainer") or {}).get("reward_weights") or [1.0] * len(train)
    labels = list(result.get("rewards") or [name for name, _ in train])
    rows = [
        {"label": label, "role": f"training (weight {w:g})", "models": models}
        for label, (_, models), w in zip(labels, train, weights, strict=False)
    ]
    held = reward_models(record.get("eval_rewards") or [])
    extra = [label for label in result.get("eval_rewards") or [] if label not in labels]
    rows += [
        {"label": label, "role": "held-out only", "models": models}
        for label, (_, models) in zip(extra, held, strict=False)
    ]
    return rows


def _heldout_table(card: PolicyCard, rewards: Sequence[Mapping[str, Any]]) -> list[str]:
    heldout = (card.result.get("summary") or {}).get("heldout") or {}
    if not heldout:
        return ["No held-out evaluation ran (`eval.every=0`): the policy was not scored on tasks it never trained on."]
    first = next(iter(heldout.values()))["steps"]
    roles = {r["label"]: r["role"] for r in rewards}
    scale = "on [0, 1], 1 = best (each reward normalised by its range)" if card.record.get("normalize_rewards") else ""
    rows = [
        f"Mean reward of the policy's greedy expansions of the {card.result['tasks']['heldout']} held-out tasks, "
        f"inpainted with one fixed seed per task, at step {first[0]} (before training) and step {first[1]}"
        + (f", {scale}" if scale else "")
        + ".",
        "",
        f"| reward | used for | step {first[0]} | step {first[1]} | change |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, values in heldout.items():
        before, after = values.get("first"), values.get("last")
        change = f"{after - before:+.4f}" if isinstance(before, float) and isinstance(after, float) else "n/a"
        cells = [f"{v:.4f}" if isinstance(v, float) else "n/a" for v in (before, after)]
        rows.append(f"| {label} | {roles.get(label, 'held-out only')} | {cells[0]} | {cells[1]} | {change} |")
    return rows


def _training_rewards(card: PolicyCard) -> list[str]:
    train = dict((card.result.get("summary") or {}).get("train") or {})
    if len(train) == 2:  # one reward: its curve is the total's
        train.pop("reward", None)
    return [
        f"- training {name}: {v['first']:.4f} over the first {v['steps_each']} step(s) -> {v['last']:.4f} over the "
        "last (the policy's sampled completions)"
        for name, v in train.items()
    ]


def _tasks(card: PolicyCard) -> list[str]:
    record, result = card.record, card.result
    counts = result.get("tasks") or {}
    held = (
        f"`{record['eval_data']}`"
        if record.get("eval_data")
        else "held out of the same data by whole scenes / source images"
    )
    skipped = result.get("skipped_rows") or 0
    return [
        f"- training tasks: `{record['data']}` ({counts.get('train', '?')} tasks"
        + (f"; {skipped} bad row(s) skipped" if skipped else "")
        + ")",
        f"- held-out tasks: {held} ({counts.get('heldout', 0)} tasks)",
    ]


def _use(card: PolicyCard) -> list[str]:
    prompt = card.record.get("prompt") or {}
    messages = [{"role": "system", "content": prompt["system"]}] if prompt.get("system") else []
    user = (prompt.get("template") or "{prompt}").replace("{prompt}", "a reading nook by the window")
    if card.vision:
        return [
            "A vision-language policy: give it the task image with the region to inpaint masked out "
            f"(`policy.image={card.record['policy'].get('image')}`) and this prompt, as in training.",
            "",
            "```python",
            "from transformers import pipeline",
            "",
            "from reward.vlm import load_processor  # the processor, also without torchvision",
            "",
            'policy = "THIS_FOLDER_OR_REPO_ID"',
            'expand = pipeline("image-text-to-text", model=policy, processor=load_processor(policy))',
            f"text = {user!r}",
            'messages = [{"role": "user", "content": [{"type": "image", "image": MASKED_IMAGE}, '
            '{"type": "text", "text": text}]}]',
            f'print(expand(text=messages, max_new_tokens={card.max_new_tokens})[0]["generated_text"][-1]["content"])',
            "```",
        ]
    messages.append({"role": "user", "content": user})
    return [
        "The policy expands a short inpainting prompt into the prompt the generator is given; it was trained on "
        "this chat turn:",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        'expand = pipeline("text-generation", model="THIS_FOLDER_OR_REPO_ID")',
        f"messages = {json.dumps(messages, ensure_ascii=False)}",
        f'print(expand(messages, max_new_tokens={card.max_new_tokens})[0]["generated_text"][-1]["content"])',
        "```",
    ]


def render_card(card: PolicyCard) -> str:
    """The card's Markdown (front matter and body)."""
    record, result = card.record, card.result
    policy = record["policy"]
    trainer = record.get("trainer") or {}
    adapter = bool((record.get("lora") or {}).get("enabled"))
    rewards = _rewards(card)
    generator = record.get("generator") or {}
    gen_model = generator.get("path")
    kind = "A LoRA adapter on" if adapter else "A fine-tune of"
    model = "a vision-language model shown the masked task image" if card.vision else "a text model"
    steps = f"{result['global_step']} of {result['max_steps']} steps" + ("" if result.get("complete") else ", stopped")
    reward_rows = ["| reward | used for | model |", "| --- | --- | --- |"]
    reward_rows += [f"| {r['label']} | {r['role']} | {_models(r['models'])} |" for r in rewards]
    body = [
        "# GRPO prompt-expansion policy",
        "",
        f"{kind} `{policy['path']}` ({model}) that expands inpainting prompts, trained with GRPO (trl, "
        f"`loss_type={trainer.get('loss_type')}`) for {steps} so that the images `{generator.get('name')}` "
        "inpaints from its prompts score higher on the reward(s) below (SA-IQA §4.4), with perceptual-rewards. "
        f"Base policy: `{policy['path']}`.",
        "",
        "## Rewards",
        "",
        *reward_rows,
        "",
        "## Generator",
        "",
        f"`{generator.get('name')}`" + (f" from `{gen_model}`" if gen_model else "") + ": it inpaints each "
        "expansion into its task's masked region; a task's completions share one seed per step.",
        "",
        "## Tasks",
        "",
        *_tasks(card),
        "",
        "## Held-out reward, before and after",
        "",
        *_heldout_table(card, rewards),
        "",
        *_training_rewards(card),
        "",
        "## Training",
        "",
        f"- group size {trainer.get('num_generations')}, {trainer.get('per_device_train_batch_size')} completions "
        f"per process and step, learning rate {trainer.get('learning_rate')}, KL beta {trainer.get('beta')}, "
        f"temperature {trainer.get('temperature')}, completions up to {card.max_new_tokens} tokens, seed "
        f"{record.get('seed')}",
        "",
        "## Use",
        "",
        *_use(card),
        "",
        *how_it_was_made(card.command),
    ]
    head = front_matter(
        policy["path"],
        "peft" if adapter else "transformers",
        "image-text-to-text" if card.vision else "text-generation",
        TAGS,
        (record.get("data"), record.get("eval_data")),
    )
    return head + "\n\n" + "\n".join(body)


def default_record(config_name: str, schema: type, record: Mapping[str, Any]) -> dict[str, Any]:
    """The command's settings with nothing given but the record's choice in each of the schema's config groups
    (``reward=NAME``): what a card's command line is written against (a choice that does not compose: the config's
    own; no config at all: none, so that the card's command names every setting rather than the run failing)."""
    from omegaconf import OmegaConf

    from reward.core.cli import compose
    from reward.core.errors import ConfigError

    groups = getattr(schema, "groups", {})
    chosen = [
        f"{g}={record[g]['name']}" for g in groups if isinstance(record.get(g), Mapping) and record[g].get("name")
    ]
    for overrides in (chosen, []):
        try:
            cfg = compose(config_name, overrides, schema=schema)
        except ConfigError:
            continue
        return OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)  # type: ignore[return-value]
    return {}  # no defaults to leave out: the command then names every setting


def write_cards(
    folders: Sequence[Path],
    record: Mapping[str, Any],
    result: Mapping[str, Any],
    *,
    schema: type,
    vision: bool,
    max_new_tokens: int,
) -> Path:
    """The policy's card, written to each of ``folders`` (the policy's first); returns the first card's path. Its
    command is ``rl/grpo.py`` with the settings of ``record`` that differ from their defaults, launched as this
    process was."""
    groups = tuple(getattr(schema, "groups", {}))
    command = command_line(
        "rl/grpo.py", record, default_record("grpo", schema, record), launch=launch_of("rl/grpo.py"), groups=groups
    )
    text = render_card(PolicyCard(record, result, command, vision=vision, max_new_tokens=max_new_tokens))
    paths = [write_card_text(folder, text) for folder in folders]
    return paths[0]
