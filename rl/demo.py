"""The ``rl/`` sections of ``make demo``: Best-of-N reranking and a short GRPO run, on procedural inpainting tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def judge_by_truth(rows: list[dict[str, Any]], level_jitter: float, by_prompt: bool = False) -> dict[str, Any]:
    """Best-of-N rows (``rl/best_of_n.py``'s ``scores.jsonl``) judged by the true quality of each ``procedural``
    candidate: the utility that generated the benchmark's preference pairs (``sum_d w_d level_d``, the default
    weights) of the levels it was painted at (known from its prompt and seed)."""
    from scipy.stats import binomtest

    from rl.generators import candidate_levels
    from training.procedural.synthetic import preference

    wins = ties = losses = 0
    chosen, rand, best = [], [], []
    for row in rows:
        if "chosen" not in row:
            continue
        levels = [candidate_levels(row["prompt"], c["seed"], level_jitter, by_prompt)[1] for c in row["candidates"]]
        utility = [preference(lv) for lv in levels]
        u_chosen, u_random = utility[row["chosen"]], utility[row["random"]]
        chosen.append(u_chosen)
        rand.append(u_random)
        best.append(max(utility))
        wins += u_chosen > u_random + 1e-9
        losses += u_chosen < u_random - 1e-9
        ties += abs(u_chosen - u_random) <= 1e-9
    decided = wins + losses
    return {
        "tasks": len(chosen),
        "wins": wins,
        "ties": ties,
        "losses": losses,
        "p_value": binomtest(wins, decided, 0.5).pvalue if decided else None,  # two-sided sign test
        "mean_chosen": sum(chosen) / len(chosen) if chosen else None,
        "mean_random": sum(rand) / len(rand) if rand else None,
        "mean_best": sum(best) / len(best) if best else None,
    }


def _best_of_n(out: Path, cfg: DictConfig, tasks: Path, name: str, reward: list[str]) -> tuple[str, dict[str, Any]]:
    from reward.core.cli import compose
    from rl.commands.best_of_n import BestOfNSettings
    from rl.commands.best_of_n import run as run_best_of_n

    # jitter_by_prompt: candidate j of each task moves on its own (else alike in every task: 4 patterns, not 40 tasks)
    overrides = [*reward, "generator.jitter_by_prompt=true", f"data={tasks}", f"out={out / name}"]
    overrides += [f"n={cfg.bon.n}", f"seed={cfg.seed}"]
    overrides.append("overwrite=true")  # a demo run again: the earlier one is moved aside
    c = compose("best_of_n", overrides, schema=BestOfNSettings)
    run_best_of_n(c)
    rows = [json.loads(line) for line in (out / name / "scores.jsonl").read_text().splitlines() if line.strip()]
    truth = judge_by_truth(rows, float(c.generator.level_jitter), bool(c.generator.jitter_by_prompt))
    return "python rl/best_of_n.py " + " ".join(overrides[:-1]), truth


def bon_section(out: Path, cfg: DictConfig, scorer: str | None, fusion: str | None) -> tuple[str, dict[str, Any]]:
    """Best-of-N with the fine-tuned SA-IQA scorer (fused) and with scene-proxy, judged by the candidates' true
    levels."""
    from training.procedural.synthetic import write_inpainting_tasks

    # 80% masks: the candidate's painted room covers most of the image, so its levels are what a reward can see
    tasks = write_inpainting_tasks(out / "rl_tasks", cfg.bon.tasks, size=64, seed=cfg.seed + 2, mask_fraction=0.8)
    pickers: list[tuple[str, str, list[str]]] = []
    if scorer:
        fused = [f"reward.fusion={fusion}"] if fusion else []
        what = "the fine-tuned SA-IQA scorer" + (
            ", fused with the weights of section 3 (its own scores)" if fusion else ""
        )
        pickers.append(("best_of_n", what, ["reward=sa-iqa", f"reward.model={scorer}", *fused]))
        true_fit = Path(fusion).with_name("true_levels_weights.json") if fusion else None
        if true_fit is not None and true_fit.is_file():  # the scorer alone: its dimensions fused the right way
            what = "the same scorer, fused with the weights fitted on the true levels (section 3)"
            reward = ["reward=sa-iqa", f"reward.model={scorer}", f"reward.fusion={true_fit}"]
            pickers.append(("best_of_n_true_weights", what, reward))
    pickers.append(("best_of_n_scene_proxy", "`scene-proxy` (hand-made image statistics)", ["reward=scene-proxy"]))
    lines, commands, data = [], [], {}
    for name, what, reward in pickers:
        command, t = _best_of_n(out, cfg, tasks, name, reward)
        data[name] = t
        lines.append(
            f"| {what} | {t['wins']} / {t['ties']} / {t['losses']} | {_fmt(t['p_value'])} | "
            f"{_fmt(t['mean_chosen'])} | {_fmt(t['mean_random'])} | {_fmt(t['mean_best'])} |"
        )
        commands.append(f"- `{command}`")
    text = (
        f"## 4. Best-of-{cfg.bon.n} reranking of inpainted candidates (`rl/best_of_n.py`)\n\n"
        f"{cfg.bon.tasks} procedural inpainting tasks (80% masks), {cfg.bon.n} candidates each from the `procedural` "
        "generator, which paints the prompt's quality levels, each moved one step up or down at random (drawn "
        "anew for every task and candidate): every "
        "candidate's true levels are known. The judge is that truth: the utility that generated the preference pairs "
        "of section 3 (0.4 layout + 0.3 harmony + 0.2 lighting + 0.1 distortion, on levels 1-5), for the reward's "
        "pick against a random pick of the same task (a tie when both are equally good, e.g. the same candidate). "
        "The p-value is a two-sided sign test of wins against losses. The best possible mean (an oracle's pick) "
        "bounds what any reward can reach here.\n\n"
        "| picked by | wins / ties / losses vs random | p | true utility: chosen | random | best possible |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(lines) + "\n\n" + "\n".join(commands) + "\n\n"
        "What it shows: whether a reward's pick beats chance by the truth the rewards never see; the SA-IQA rows "
        "separate the scorer from its fusion weights. What it does not: "
        "the candidates differ only by one-step level moves on procedural rooms, and the scorer is the tiny VLM of "
        "section 2; neither number is a claim about diffusion models or real scorers.\n\n"
        "![contact sheet](best_of_n/sheets/0000.png)\n"
    )
    short = {"best_of_n": "SA-IQA", "best_of_n_true_weights": "SA-IQA (true weights)"}
    counts = ", ".join(f"{short.get(k, 'scene-proxy')} {t['wins']}/{t['ties']}/{t['losses']}" for k, t in data.items())
    data["summary"] = f"Best-of-{cfg.bon.n} vs a random pick by true levels, wins/ties/losses: {counts}"
    return text, data


def grpo_section(out: Path, cfg: DictConfig, policy: Path) -> tuple[str, dict[str, Any]]:
    """A short GRPO run of the tiny text policy against scene-proxy (full fine-tuning, procedural generator)."""
    from reward.core.cli import compose
    from rl.commands.grpo import GrpoSettings
    from rl.commands.grpo import run as run_grpo
    from training.procedural.synthetic import write_inpainting_tasks

    tasks = write_inpainting_tasks(out / "grpo_tasks", 40, size=64, seed=cfg.seed + 3, mask_fraction=0.8)
    overrides = [
        "reward=scene-proxy",
        "generator=procedural",
        f"policy.path={policy}",
        f"data={tasks}",
        f"out={out / 'grpo'}",
        "resume=never",
        "overwrite=true",  # a demo run again: the earlier one is moved aside
        f"trainer.max_steps={cfg.grpo.steps}",
        "trainer.num_generations=8",
        "trainer.per_device_train_batch_size=16",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=5e-3",
        "trainer.beta=0",
        "trainer.max_completion_length=16",
        f"trainer.save_steps={cfg.grpo.steps}",
        f"eval.every={max(1, cfg.grpo.steps // 3)}",
        "eval_tasks=6",
        f"trainer.seed={cfg.seed}",
    ]
    r = run_grpo(compose("grpo", overrides, schema=GrpoSettings))
    means = [m for _, m, _ in r["train_curve"]["scene-proxy"]]
    k = max(1, min(10, len(means) // 3))
    first, last = sum(means[:k]) / k, sum(means[-k:]) / k
    t = r["timing"]["shares"]
    text = (
        "## 5. GRPO prompt expansion (`rl/grpo.py`)\n\n"
        f"`accelerate launch rl/grpo.py {' '.join(overrides)}`\n\n"
        f"A tiny random text policy (full fine-tuning) learns which words make the procedural inpainter paint better "
        f"rooms for `scene-proxy` in {cfg.grpo.steps} steps of 2 prompts x 8 completions: mean reward (normalised "
        f"to [0, 1]) of the first {k} steps {first:.3f}, of the last {k} steps {last:.3f}. Step time: "
        f"{100 * t['policy_generation']:.0f}% policy sampling, {100 * t['inpainting']:.0f}% inpainting, "
        f"{100 * t['reward']:.0f}% reward, {100 * t['update_and_rest']:.0f}% the update.\n\n"
        "What it shows: the GRPO loop (policy, generator, reward, update) raising the reward it is trained on. What "
        "it does not: `scene-proxy` is a hand-made image statistic and the reward being optimised, not an "
        "independent judge; a run this short is noisy (docs/grpo.md gives three seeds of 100 steps).\n\n"
        "![reward curve](grpo/reward_curve.png)\n\n![first vs last step](grpo/samples_first_last.png)\n"
    )
    summary = f"GRPO, {cfg.grpo.steps} steps: mean scene-proxy reward {first:.3f} -> {last:.3f}"
    return text, {"first": first, "last": last, "summary": summary}
