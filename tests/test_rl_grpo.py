"""rl/grpo.py: config validation up front, the learning proof (tiny text policy, full fine-tuning, procedural
generator, scene-proxy reward), held-out rewards, plots, resume, every registered reward, a VLM policy."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image
from transformers import TrainerCallback

from conftest import tiny_reward_config
from reward import list_rewards
from reward.core.cli import compose
from reward.core.config import parse
from rl.commands.grpo import run as run_grpo
from rl.commands.grpo_settings import GrpoSettings
from rl.generators import build_generator
from rl.heldout import HELDOUT_SEED_STEP
from rl.inpaint_render import task_seed
from rl.inpaint_tasks import load_tasks, policy_view
from rl.study import pairs_of
from training.procedural.synthetic import write_inpainting_tasks

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FAST = [
    "trainer.learning_rate=5e-3",
    "trainer.beta=0",
    "trainer.max_completion_length=16",
    "trainer.save_steps=1000",
    "trainer.gradient_accumulation_steps=1",  # one micro-batch a step, not the paper's 32 completions
]


def _cfg(overrides: list[str]) -> GrpoSettings:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return parse(GrpoSettings, compose("grpo", overrides=overrides, schema=GrpoSettings))


class Watch(TrainerCallback):
    """Snapshots the trainable parameters when training starts and records every forward call's inputs."""

    def __init__(self) -> None:
        self.before: dict[str, torch.Tensor] = {}
        self.changed: list[str] = []
        self.forward_keys: list[set[str]] = []

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self.before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        dataset = getattr(train_dataloader, "dataset", None)
        first = dataset[0] if dataset is not None and len(dataset) else {}
        self.first_image = first.get("image") if isinstance(first, dict) else None

        def record(module, inputs, kw):
            self.forward_keys.append({k for k, v in kw.items() if v is not None})

        model.register_forward_pre_hook(record, with_kwargs=True)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        now = dict(model.named_parameters())
        self.changed = [n for n, p in self.before.items() if not torch.equal(p, now[n].detach())]


@pytest.fixture(scope="module")
def tiny_lm(tiny_lm_path) -> Path:
    return tiny_lm_path


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    return write_inpainting_tasks(tmp_path_factory.mktemp("tasks"), 40, size=64, seed=0, mask_fraction=0.8)


def test_config_problems_are_reported_together_before_anything_loads(tmp_path):
    bad = [
        f"out={tmp_path}",
        "data=none.jsonl",
        "policy.path=none",
        "reward=scene-proxy",
        "trainer.num_generations=3",
        "trainer.reward_weights=[1.0,2.0]",
        "prompt.template=no slot",
    ]
    with pytest.raises(ValueError, match=r"unknown key policy.pth \(did you mean 'path'\?\)"):
        run_grpo(_cfg([*bad, "+policy.pth=x"]))
    with pytest.raises(ValueError) as err:
        run_grpo(_cfg(bad))
    msg = str(err.value)
    assert "trainer.reward_weights has 2 weights for 1 rewards" in msg
    assert "trainer.num_generations=3 must divide the 32 completions a generation makes" in msg  # trl's, before trl
    assert "prompt.template must contain {prompt}" in msg


@pytest.mark.slow
def test_grpo_raises_the_scene_reward_holds_out_a_second_reward_and_resumes(tiny_lm, tasks, tmp_path, request, capsys):
    out = tmp_path / "run"
    qbench = tiny_reward_config("qbench", request)["model"]
    base = [
        f"policy.path={tiny_lm}",
        f"data={tasks}",
        f"out={out}",
        "reward=scene-proxy",
        "trainer.num_generations=8",
        "trainer.per_device_train_batch_size=16",
        "eval.every=20",
        "eval_tasks=6",
        f"eval_rewards=[{{name: qbench, model: '{qbench}'}}]",
        *FAST,
    ]
    result = run_grpo(_cfg([*base, "trainer.max_steps=40", "trainer.save_steps=40"]))
    means = np.array([m for _, m, _ in result["train_curve"]["scene-proxy"]])
    first, last = means[:10], means[-10:]
    assert last.mean() > first.mean() + 0.05, (first.mean(), last.mean())  # measured: ~0.42 -> ~0.58
    heldout = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    assert [r["step"] for r in heldout] == [0, 20, 40]
    assert all(0 <= r["qbench"] <= 1 and 0 <= r["scene-proxy"] <= 1 for r in heldout)
    for name in ("reward_curve.png", "samples_first_last.png", "policy/config.json", "grpo_result.json"):
        assert (out / name).exists(), name
    shares = result["timing"]["shares"]
    assert all(0 < shares[k] < 1 for k in ("policy_generation", "inpainting", "reward", "update_and_rest"))
    # the first/last sample grid is labelled with the steps the console prints ("step 1/40" ... "step 40/40")
    samples = [json.loads(line) for line in (out / "samples" / "samples.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in samples}) == [s for s, _, _ in result["train_curve"]["scene-proxy"]]
    assert min(r["step"] for r in samples) == 1 and max(r["step"] for r in samples) == 40
    _check_the_policy_card(out, result, heldout, tiny_lm=tiny_lm, tasks=tasks, qbench=qbench, capsys=capsys)
    resumed = run_grpo(_cfg([*base, "trainer.max_steps=42"]))  # resume=auto from checkpoint-40
    assert resumed["global_step"] == 42 and resumed["resumed"]
    with pytest.raises(
        ValueError, match=r"holds another run \(1 difference\(s\)\):\n  - reward.weights.lighting: 0.2 -> 1.0"
    ):
        run_grpo(_cfg([*base, "trainer.max_steps=44", "+reward.weights={lighting: 1.0}"]))


def _check_the_policy_card(out: Path, result: dict, heldout: list, *, tiny_lm, tasks, qbench, capsys) -> None:
    """The policy's card (not trl's template): base policy, rewards with their models, generator, tasks, the held-out
    reward before and after, a snippet that runs on the saved policy, and a command that makes the same settings."""
    import shlex

    from rl.run_folder import settings_record
    from training.shared.cards import public

    card = (out / "policy" / "README.md").read_text()
    assert card == (out / "README.md").read_text() and "huggingface.co/None" not in card
    assert result["model_card"] == str(out / "policy" / "README.md")
    # a card is made to be pushed: the local policy, reward model and tasks by their names, no folder of this machine
    assert f"A fine-tune of the local Qwen2ForCausalLM checkpoint `{Path(tiny_lm).name}` (a text model)" in card
    assert "library_name: transformers" in card and str(out.parent) not in card and str(tiny_lm) not in card
    assert "| scene-proxy | training (weight 1) | (built in) |" in card
    assert f"| qbench | held-out only | model `{Path(qbench).name}` |" in card
    assert (
        "`procedural`" in card
        and f"- training tasks: `{Path(tasks).name}` (" in card
        and f"({result['tasks']['heldout']} tasks)" in card
    )
    for label in ("scene-proxy", "qbench"):
        before, after = heldout[0][label], heldout[-1][label]
        assert f"| {before:.4f} | {after:.4f} | {after - before:+.4f} |" in card, label
    assert "| step 0 | step 40 | change |" in card
    snippet = re.search(r"## Use\n.*?```python\n(.*?)```", card, re.S).group(1)
    exec(snippet.replace("THIS_FOLDER_OR_REPO_ID", str(out / "policy")), {})  # the saved policy expands a prompt
    assert capsys.readouterr().out.strip()
    command = re.search(r"## How it was made\n\n```bash\n(.*)\n```", card).group(1)
    launch, script, *overrides = shlex.split(command)
    assert (launch, script) == ("python", "rl/grpo.py") and overrides[0] == "reward=scene-proxy"
    record = json.loads((out / "run.json").read_text())["settings"]
    here = out.parent / "card-command"  # where the command's files, named by their names, are
    here.mkdir()
    for path in (tiny_lm, tasks, qbench):
        (here / Path(path).name).symlink_to(path)
    with contextlib.chdir(here):
        made = settings_record(_cfg(overrides))
    assert public(made) == public(record)  # the command makes this run (its files by their names)


@pytest.mark.slow
@pytest.mark.parametrize("name", list_rewards())
def test_every_registered_reward_trains_a_step(name, tiny_lm, tasks, tmp_path, request):
    cfg = tiny_reward_config(name, request)
    flat = {f"{k}.{k2}": v2 for k, v in cfg.items() if isinstance(v, dict) for k2, v2 in v.items()}  # server.base_url
    overrides = [
        f"reward.{k}={v}" for k, v in (flat | {k: v for k, v in cfg.items() if not isinstance(v, dict)}).items()
    ]
    cfg = _cfg(
        [
            f"policy.path={tiny_lm}",
            f"data={tasks}",
            f"out={tmp_path}",
            f"reward={name}",
            *overrides,
            "trainer.max_steps=2",
            "trainer.num_generations=4",
            "trainer.per_device_train_batch_size=8",
            "trainer.temperature=1.5",  # prompts of a group differ in level words, so their rewards differ
            "eval.every=0",
            *FAST,
        ]
    )
    watch = Watch()
    result = run_grpo(cfg, callbacks=[watch])
    assert result["global_step"] == 2 and result["rewards"] == [name]
    assert result["train_curve"][name] and 0 <= result["train_curve"][name][0][1] <= 1
    assert watch.before and watch.changed, "the policy's trainable parameters did not move"


@pytest.mark.slow
def test_a_vlm_policy_sees_the_task_image_and_trains_with_lora(tiny_vlm_path, tasks, tmp_path):
    cfg = _cfg(
        [
            f"policy.path={tiny_vlm_path}",
            f"data={tasks}",
            f"out={tmp_path}",
            "reward=scene-proxy",
            "lora.enabled=true",
            "trainer.max_steps=1",
            "trainer.num_generations=4",
            "trainer.per_device_train_batch_size=8",
            "trainer.temperature=1.5",  # prompts of a group differ in level words, so their rewards differ
            "eval.every=1",
            "eval_tasks=2",
            *FAST,
        ]
    )
    watch = Watch()
    result = run_grpo(cfg, callbacks=[watch])
    assert result["global_step"] == 1
    assert any("pixel_values" in keys and "image_grid_thw" in keys for keys in watch.forward_keys)  # sees the image
    # ... the masked image, as the inpainting model gets it: the region to invent is grey, the rest is the task's
    task = load_tasks(tasks)[0][0]
    shown = np.asarray(watch.first_image, dtype=float)
    inside = np.asarray(task.mask) >= 128
    original = np.asarray(task.image, dtype=float)
    assert (shown[inside] == 128).all() and np.array_equal(shown[~inside], original[~inside])
    assert watch.changed and all("lora_" in n for n in watch.changed)  # the adapter moved, nothing else
    assert (tmp_path / "policy" / "adapter_config.json").exists()
    assert len((tmp_path / "heldout.jsonl").read_text().splitlines()) == 2
    # the last held-out evaluation saved each task's image beside its base prompt's, drawn with the same seed
    command, pairs = pairs_of(tmp_path)
    heldout = {t.id: t for t in load_tasks(tasks)[0]}
    assert command == "grpo" and len(pairs) == 2
    for pair in pairs:
        task = heldout[pair["task"]]
        seed = task_seed(42, task.key, HELDOUT_SEED_STEP)  # seed=42: the default
        base = build_generator({"name": "procedural"}).inpaint([task.image], [task.mask], [task.prompt], seed=[seed])
        assert np.array_equal(np.asarray(base[0][0]), np.asarray(Image.open(pair["baseline"])))
    card = (tmp_path / "policy" / "README.md").read_text()  # the adapter's card, not peft's template
    local = f"the local Qwen2VLForConditionalGeneration checkpoint `{Path(tiny_vlm_path).name}`"
    assert "library_name: peft" in card and f"A LoRA adapter on {local} (a vision-language model" in card
    snippet = re.search(r"## Use\n.*?```python\n(.*?)```", card, re.S).group(1)
    masked = policy_view(task, "masked")
    exec(snippet.replace("THIS_FOLDER_OR_REPO_ID", str(tmp_path / "policy")), {"MASKED_IMAGE": masked})


def _settings(tmp_path, tasks, *extra: str):
    base = [f"policy.path={tmp_path}", f"data={tasks}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    return _cfg([*base, *extra])


def test_the_policy_loads_by_the_training_precision_rule(tiny_lm, tasks, tmp_path):
    """Full fine-tuning without DeepSpeed keeps fp32 master weights under the trainer's bf16 autocast (pure-bf16
    AdamW at lr 1e-6 rounds ~98% of updates away); LoRA and DeepSpeed load bf16 -- the rule SFT uses."""
    from types import SimpleNamespace

    from rl.policy import load_policy

    gpu_args = SimpleNamespace(bf16=True, deepspeed=None, deepspeed_plugin=None)  # what a bf16 GPU's GRPOConfig says
    s = _settings(tmp_path, tasks, f"policy.path={tiny_lm}")
    assert next(load_policy(s.policy, s.lora, False, gpu_args)[0].parameters()).dtype == torch.float32
    s_lora = _settings(tmp_path, tasks, f"policy.path={tiny_lm}", "lora.enabled=true")
    assert next(load_policy(s_lora.policy, s_lora.lora, False, gpu_args)[0].parameters()).dtype == torch.bfloat16
    ds_args = SimpleNamespace(bf16=True, deepspeed=None, deepspeed_plugin=object())
    assert next(load_policy(s.policy, s.lora, False, ds_args)[0].parameters()).dtype == torch.bfloat16


def test_max_completion_length_follows_the_generator_text_budget(tmp_path, tasks):
    from rl.commands.grpo_launch import grpo_args

    flux = _settings(tmp_path, tasks, "generator=flux-fill", "generator.path=x")
    assert grpo_args(flux, tmp_path).max_completion_length == 512  # T5 reads 512 tokens
    sd15 = _settings(tmp_path, tasks, "generator=sd15-inpaint", "generator.path=x")
    assert grpo_args(sd15, tmp_path).max_completion_length == 77  # CLIP
    fixed = _settings(tmp_path, tasks, "trainer.max_completion_length=40")
    assert grpo_args(fixed, tmp_path).max_completion_length == 40


def _shared_image_manifest(root: Path) -> Path:
    """12 tasks on 6 images (two masks each: lines 1-2, 3-4, ..., 7-8, then image 4 on lines 9 and 14, image 5 on
    15-16) and, on lines 10-13, 4 tasks of one scene on 3 other images."""
    source = write_inpainting_tasks(root / "src", 10, size=32, seed=5)
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    out = []
    for r in rows[:6]:
        out += [dict(r), {**r, "mask": rows[9]["mask"], "prompt": r["prompt"] + " again"}]
    out[-3:-3] = [{**rows[6 + k % 3], "scene": "kitchen-7"} for k in range(4)]  # one scene, three images
    path = root / "src" / "shared.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


def test_held_out_tasks_never_share_an_image_or_a_scene_with_training_tasks(tmp_path):
    from rl.inpaint_tasks import task_split

    manifest = _shared_image_manifest(tmp_path)
    for n in (1, 2, 3, 5, 6):
        train, heldout, _ = task_split(_settings(tmp_path, manifest, f"eval_tasks={n}"), True)
        assert len(heldout) >= n and len(train) + len(heldout) == 16
        assert not {t.group for t in train} & {t.group for t in heldout}, n  # the manifest's tail would straddle
    train, heldout, _ = task_split(_settings(tmp_path, manifest, "eval_tasks=3"), True)
    # the tail's 3 tasks (lines 14-16) would leave line 9, image 4's other task, in training: it is held out too
    assert [t.id.rsplit(":", 1)[1] for t in heldout] == ["9", "14", "15", "16"]
    groups = [t.group for t in load_tasks(manifest)[0]]
    assert groups[9:13] == ["scene:kitchen-7"] * 4 and groups[0] == groups[1] != groups[2] and groups[8] == groups[13]
    with pytest.raises(ValueError, match=r"eval_data=.* shares 7 scene\(s\) / source image\(s\) with data="):
        task_split(_settings(tmp_path, manifest, f"eval_data={manifest}"), True)


def test_too_few_tasks_for_one_step_are_refused_before_anything_loads(tmp_path, tiny_lm):
    small = write_inpainting_tasks(tmp_path / "small", 6, size=32)
    args = [f"policy.path={tiny_lm}", f"data={small}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    args += ["eval.every=0", "trainer.num_generations=2", "trainer.per_device_train_batch_size=16"]
    args += ["trainer.gradient_accumulation_steps=1"]
    with pytest.raises(ValueError, match=r"6 training tasks cannot fill one GRPO step: a step takes 8 prompts \(1 "):
        run_grpo(_cfg(args))
    assert not (tmp_path / "run").exists()  # nothing written either


def test_more_eval_tasks_than_the_data_holds_is_one_line_with_the_settings_before_trl(tmp_path, tiny_lm, monkeypatch):
    import rl.commands.grpo_launch as grpo_launch

    monkeypatch.setattr(grpo_launch, "grpo_args", lambda *a: pytest.fail("trl's config was built"))
    small = write_inpainting_tasks(tmp_path / "small", 6, size=32)
    args = [f"policy.path={tiny_lm}", f"data={small}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    with pytest.raises(ValueError) as err:
        run_grpo(_cfg([*args, "eval_tasks=8"]))
    assert str(err.value) == (
        f"eval_tasks=8: data={small} holds 6 tasks, too few to hold out that many and train on the rest (at most 3); "
        "lower eval_tasks, give eval_data=TASKS.jsonl, or eval.every=0"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_run_that_ends_short_of_max_steps_fails_with_the_reason(tmp_path, tiny_lm, monkeypatch, capsys):
    import rl.commands.grpo as grpo
    from conftest import run_cli

    monkeypatch.setattr(grpo, "check_fills_a_step", lambda *a: 8)  # as before the check: trl then trains 0 steps
    small = write_inpainting_tasks(tmp_path / "small", 6, size=32)
    argv = [f"policy.path={tiny_lm}", f"data={small}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    argv += ["eval.every=0", "trainer.num_generations=2", "trainer.per_device_train_batch_size=16", *FAST]
    assert run_cli("grpo", grpo.run, [*argv, "trainer.max_steps=3"], schema=GrpoSettings) == 2
    assert "error: GRPO trained 0 steps (trainer.max_steps=3" in capsys.readouterr().err
    assert not (tmp_path / "run" / "policy").exists()  # nothing exported from no step, and never said complete
    assert not (tmp_path / "run" / "grpo_result.json").exists()


@pytest.mark.slow
def test_resume_never_refuses_overwrite_moves_aside_and_a_resume_drops_abandoned_rows(tiny_lm, tasks, tmp_path):
    out = tmp_path / "run"
    base = [
        f"policy.path={tiny_lm}",
        f"data={tasks}",
        f"out={out}",
        "reward=scene-proxy",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=4",
        "eval.every=1",
        "eval_tasks=2",
        "samples_per_step=2",
        *FAST,
    ]
    first = run_grpo(_cfg([*base, "trainer.max_steps=2", "trainer.save_steps=2"]))
    assert first["provenance"]["inputs"]["data"]["bytes"] == tasks.stat().st_size  # the data it learned from
    # a kill between checkpoints: the run went on to steps 3-4 (their rows are written), checkpoint-4 never was
    with (out / "heldout.jsonl").open("a") as f:
        f.writelines(json.dumps({"step": k, "scene-proxy": 9.0, "abandoned": True}) + "\n" for k in (3, 4))
    with (out / "samples" / "samples.jsonl").open("a") as f:
        for k in (3, 4):  # samples are labelled by the step they train, as the console counts steps
            path = str(out / "samples" / f"step{k:06d}_0.png")
            row = {"step": k, "k": 0, "path": path, "prompt": "x", "reward": 9.0, "abandoned": True}
            f.write(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"holds this same run already"):
        run_grpo(_cfg([*base, "trainer.max_steps=4", "resume=never"]))
    resumed = run_grpo(_cfg([*base, "trainer.max_steps=4", "trainer.save_steps=2"]))  # resume=auto
    assert resumed["global_step"] == 4 and resumed["resumed"]
    heldout = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (out / "samples" / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in heldout] == [0, 1, 2, 3, 4] and not any("abandoned" in r for r in heldout)
    assert sorted((r["step"], r["k"]) for r in samples) == [(s, k) for s in range(1, 5) for k in range(2)]
    assert not any("abandoned" in r for r in samples)
    fresh = run_grpo(_cfg([*base, "trainer.max_steps=1", "resume=never", "overwrite=true"]))
    assert fresh["global_step"] == 1 and not fresh["resumed"]
    (old,) = tmp_path.glob("run.old-*")  # the earlier run, moved aside whole: nothing deleted
    assert (old / "checkpoint-4").is_dir() and (old / "checkpoint-2").is_dir()


@pytest.mark.slow
def test_the_stage1_recipe_trl_sft_lora_then_grpo_from_the_adapter_folder(tiny_lm, tasks, tmp_path):
    """The README's stage-1 recipe: ``trl sft --use_peft`` on (short prompt -> detailed prompt) chats writes a LoRA
    adapter folder; GRPO given ``policy.path=`` that folder starts from the fine-tuned expander (the adapter merged
    into its base in fp32), not from the base."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rl.policy import is_vlm, load_policy

    data = tmp_path / "expansions"
    data.mkdir()
    objects = ["a sofa", "a lamp", "a rug", "a plant"]
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Expand this inpainting prompt: {obj}"},
                {"role": "assistant", "content": f"{obj} in warm light, harmonious colours, minimal layout"},
            ]
        }
        for obj in objects * 8
    ]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stage1 = tmp_path / "stage1"
    trl = [str(Path(sys.executable).parent / "trl"), "sft", "--model_name_or_path", str(tiny_lm)]
    trl += ["--dataset_name", str(data), "--output_dir", str(stage1), "--use_peft", "--lora_r", "8"]
    trl += ["--lora_alpha", "16", "--lora_target_modules", "all-linear", "--max_steps", "20", "--use_cpu"]
    trl += ["--per_device_train_batch_size", "8", "--learning_rate", "5e-3", "--report_to", "none", "--seed", "0"]
    done = subprocess.run(trl, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (stage1 / "adapter_config.json").is_file() and not (stage1 / "config.json").exists()

    s = _settings(tmp_path, tasks, f"policy.path={stage1}")
    assert is_vlm(str(stage1), "auto") is False  # read from the adapter's base
    cpu = SimpleNamespace(bf16=False, deepspeed=None, deepspeed_plugin=None)
    policy, tokenizer = load_policy(s.policy, s.lora, False, cpu)
    ids = tokenizer("Expand this inpainting prompt: a rug", return_tensors="pt").input_ids
    base = AutoModelForCausalLM.from_pretrained(tiny_lm, dtype=torch.float32)
    with torch.no_grad():
        plain = base(ids).logits
        unmerged = PeftModel.from_pretrained(base, str(stage1)).eval()(ids).logits  # the adapter as trained
        merged = policy.eval()(ids).logits
    assert (merged - unmerged).abs().max() < 1e-4 < (merged - plain).abs().max()

    out = tmp_path / "run"
    argv = [f"policy.path={stage1}", f"data={tasks}", f"out={out}", "reward=scene-proxy", "eval.every=0"]
    group = ["trainer.num_generations=2", "trainer.per_device_train_batch_size=4", "trainer.max_steps=2"]
    result = run_grpo(_cfg([*argv, *group, *FAST]))  # (without max_steps: the command's 500)
    assert result["global_step"] == 2 and result["complete"] and (out / "policy" / "config.json").is_file()
