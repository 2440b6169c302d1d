"""The Flow-GRPO adapter's card names no folder of the machine it was made on: the base pipeline, the rewards' and the
judge's models, the data and the command's paths by their names; a Hub id as given."""

from __future__ import annotations

from rl.flow_card import flow_card


def test_the_flow_card_names_no_absolute_path_of_this_machine(tmp_path):
    local = tmp_path / "models"
    record = {
        "generator": {"name": "flux-fill", "path": str(local / "flux-fill-pipe"), "guidance": 30.0, "steps": 28},
        "reward": {"name": "sa-iqa", "model": str(local / "scorer")},
        "more_rewards": [{"name": "qbench", "model": "Org/qbench-vlm"}],
        "judge": {"name": "reasoning-iqa", "model": str(local / "judge")},
        "data": str(tmp_path / "tasks.jsonl"),
        "eval_data": None,
        "normalize_rewards": True,
        "seed": 1,
        "lora": {"r": 8, "alpha": 16},
        "sample": {"steps": 6, "noise_level": 0.9, "window": 2, "window_range": [0, 5], "guidance": None},
        "trainer": {
            "num_generations": 4,
            "epsilon": 1e-4,
            "advantage_clip": 5,
            "scale_rewards": "batch",
            "beta": 0,
            "learning_rate": 3e-4,
            "weight_decay": 1e-4,
            "max_grad_norm": 1.0,
        },
    }
    result = {
        "global_step": 2,
        "max_steps": 2,
        "complete": True,
        "tasks": {"train": 6, "heldout": 2},
        "batch": {"images_per_round": 8, "prompts_per_round": 2, "updates_per_round": 2, "per_device": 2},
        "rewards": ["sa-iqa", "qbench"],
        "reward_weights": [1.0, 0.5],
        "judge": "reasoning-iqa",
        "skipped_rows": 0,
        "output_dir": str(tmp_path / "run"),
        "summary": {"heldout": {"reasoning-iqa": {"first": 0.25, "last": 0.5, "steps": [0, 2]}}},
    }
    command = f"python rl/flow_grpo.py generator.path=flux-fill-pipe data=tasks.jsonl out={tmp_path.name}"
    card = str(flow_card(record, result, command=command))
    assert str(tmp_path) not in card, card  # before: "model `/tmp/.../scorer`" in the rewards' table
    assert "| sa-iqa | training (weight 1) | model `scorer` |" in card, card
    assert "| qbench | training (weight 0.5) | model `Org/qbench-vlm` |" in card, card  # a Hub id as given
    assert "| reasoning-iqa | held-out judge (not trained on) | model `judge` |" in card, card
    assert "flux-fill-pipe" in card and "`tasks.jsonl`" in card, card
