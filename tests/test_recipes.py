"""Recipes for the published rows (``configs/recipe/``) and ``plan=true``.

The plan's arithmetic is checked against hand computation and its one GPU measurement; its parameter counts against
real models; each recipe's cited values against the composed config; and every recipe runs end to end, in the order
a user runs them (later recipes read earlier outputs), on tiny models and dataset folders in the official layouts,
each training recipe on 2 processes at its own per-process geometry, overriding only the model paths, the step counts
and what a CPU cannot do (bf16, DataLoader workers).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import iqa_fixtures as fx
import pytest
import torch
import yaml

from conftest import run_cli
from fusion.commands.fit import FusionSettings
from pace_judge.commands.judge import JudgeSettings
from pace_judge.commands.memory import MemorySettings
from reward.core.cli import compose
from reward.core.config import parse
from rl.commands.flow_grpo_settings import FlowGrpoSettings
from rl.commands.grpo_settings import GrpoSettings
from rl.tasks import TasksSettings
from training.commands.grpo_scorer import GrpoScorerSettings
from training.commands.sft import SftSettings
from training.shared.launch import SFT_BATCH, resolve_batch
from training.shared.plan import GIB, Launch, PlanSettings, format_plan, model_part
from training.shared.plan_models import BUILTIN, ModelShape, model_shape

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "configs" / "recipe"
HYDRA_RECIPES = {  # recipe -> the command whose config it composes into
    "qalign-koniq": "sft",
    "deqa-koniq": "sft",
    "sa-iqa-bench": "sft",
    "sa-iqa-bench-fusion": "fit",
    "grpo-expansion": "grpo",
    "pace-fast": "judge",
    "tiny-real-photos": "sft",
    "tiny-real-photos-gpu": "sft",
    "q-insight-koniq": "grpo_scorer",
    "visualquality-r1-koniq": "grpo_scorer",
    "flow-grpo-flux-fill": "flow_grpo",
}
SCHEMAS = {
    "sft": SftSettings,
    "fit": FusionSettings,
    "grpo": GrpoSettings,
    "judge": JudgeSettings,
    "grpo_scorer": GrpoScorerSettings,
    "flow_grpo": FlowGrpoSettings,
}
CPU = ["trainer.bf16=false", "trainer.dataloader_num_workers=0"]


def test_every_recipe_file_is_known_and_starts_with_its_command():
    files = {p.stem for p in RECIPES.glob("*.yaml")}
    assert files == set(HYDRA_RECIPES) | {"grpo-expansion-stage1"}
    for path in RECIPES.glob("*.yaml"):
        lines = path.read_text().splitlines()
        command = next(ln for ln in lines if not ln.startswith("# @package"))
        assert command.startswith(("# accelerate launch", "# python", "# trl sft")), (path.name, command)
        assert path.stem in command, path.name


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


@pytest.mark.parametrize(
    "name",
    [
        "qalign-koniq",
        "deqa-koniq",
        "sa-iqa-bench",
        "sa-iqa-bench-fusion",
        "grpo-expansion",
        "q-insight-koniq",
        "visualquality-r1-koniq",
        "flow-grpo-flux-fill",
    ],
)
def test_each_published_recipe_cites_a_source_for_every_value_and_composes_to_it(name):
    text = (RECIPES / f"{name}.yaml").read_text()
    for line in text.splitlines():  # a value line names its source: [paper tag] or [ours]
        m = re.match(r"^\s*([a-z_]+):\s*(\S.*?)\s*(#.*)?$", line)
        if m and not m.group(2).startswith("#") and m.group(1) not in ("defaults",):
            assert m.group(3) and "[" in m.group(3) or line.strip().startswith(("bf16", "path:")), (name, line)
    cfg = compose(HYDRA_RECIPES[name], [f"+recipe={name}"], schema=SCHEMAS[HYDRA_RECIPES[name]])
    from omegaconf import OmegaConf

    composed = OmegaConf.to_container(cfg, resolve=True)
    for key, value in _leaves({k: v for k, v in yaml.safe_load(text).items() if k != "defaults"}):
        got = composed
        for part in key.split("."):
            got = got[part]
        assert got == value, (name, key, got, value)


def test_qalign_and_deqa_recipes_hold_the_authors_script_values():
    q = compose("sft", ["+recipe=qalign-koniq"], schema=SftSettings)
    assert (q.trainer.learning_rate, q.trainer.num_train_epochs, q.trainer.per_device_train_batch_size) == (2e-5, 3, 8)
    assert (q.model.freeze_vision, q.model.freeze_aligner, q.data.soft_targets) == (False, False, False)
    assert q.prompt.response_prefix == "The quality of the image is" and len(q.prompt.questions) == 9
    assert q.data.score == "mos_zscore" and q.data.level_range == [6.68487394958, 85.35625]  # Q-Align's files
    d = compose("sft", ["+recipe=deqa-koniq"], schema=SftSettings)
    assert (d.data.soft_targets, d.loss.kind) == ("deqa", "deqa")
    assert (d.loss.deqa_weight, d.loss.fidelity_weight) == (0.05, 1.0)  # DeQA's scripts/train.sh weights
    assert (d.trainer.per_device_train_batch_size, d.trainer.num_train_epochs) == (32, 6)  # 16 pairs, 3 epochs of A
    assert d.data.keep == q.data.keep and len(d.prompt.questions) == 10 and d.data.score == "mos"
    assert d.data.cross == q.data.cross and len(q.data.cross) == 4  # inherited from qalign-koniq
    s = compose("sft", ["+recipe=sa-iqa-bench"], schema=SftSettings)
    batches = [resolve_batch(s.trainer, n, SFT_BATCH) for n in (s.plan_for.processes, 1, 8)]
    assert [(b.per_device * b.accumulation * b.processes, b.accumulation) for b in batches] == [
        (256, 32),
        (256, 128),
        (256, 16),
    ]  # SA-IQA §4.1
    assert s.trainer.per_device_train_batch_size == 2 and s.prompt.type == 4 and not s.lora.enabled
    assert (s.prompt.wording, s.data.level_from) == ("release", "mos_int")  # the released prompts and targets


# --- the plan -----------------------------------------------------------------------------------------------------


def test_parameter_counts_from_a_config_equal_the_real_model(tiny_vlm25_path, tiny_vlm_path):
    from transformers import AutoModelForImageTextToText

    for path in (tiny_vlm_path, tiny_vlm25_path):
        shape = model_shape(str(path))
        model = AutoModelForImageTextToText.from_pretrained(path)
        assert shape.total == sum(p.numel() for p in model.parameters())
        vision = sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
        assert shape.vision_params + shape.aligner_params == vision > shape.aligner_params > 0


def test_the_built_in_table_gives_the_published_sizes():
    billions = {name: round(model_shape(name).total / 1e9, 2) for name in BUILTIN}
    assert billions["Qwen/Qwen2.5-VL-7B-Instruct"] == 8.29  # the model card's 8.29B
    assert billions["Qwen/Qwen2-VL-7B-Instruct"] == 8.29
    assert billions["Qwen/Qwen2.5-VL-72B-Instruct"] == 73.41
    assert model_shape("qwen2.5-vl-3b-instruct").name == "qwen2.5-vl-3b-instruct"  # the short name, any case
    with pytest.raises(KeyError):
        model_shape("no/such-model")


def test_a_lora_adapter_folder_is_planned_as_its_base(tmp_path):
    base = "Qwen/Qwen2.5-VL-7B-Instruct"
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    assert model_shape(str(tmp_path)).total == model_shape(base).total


def _shape(params: int) -> ModelShape:
    return ModelShape("m", "test", params, 0, 0, hidden=10, layers=2, vocab=100, intermediate=20)


@pytest.mark.parametrize(
    ("stage", "weights", "grads", "optim"),
    [  # 1000 parameters, all trained, bf16 weights (2 bytes), 4 processes; DeepSpeed's Adam: 12 bytes per parameter
        (0, 2000, 2000, 4000),  # no DeepSpeed: torch AdamW keeps two moments in the weights' dtype
        (1, 2000, 2000 + 4000 / 4, 12000 / 4),  # + the fp32 gradients the optimizer steps on, sharded
        (2, 2000, (2000 + 4000) / 4, 12000 / 4),  # DeepSpeed's estimate: 2P + 18P/N
        (3, 2000 / 4, (2000 + 2000) / 4, 12000 / 4),  # DeepSpeed's estimate: 18P/N (no largest layer here)
    ],
)
def test_zero_stages_shard_optimizer_then_gradients_then_weights(stage, weights, grads, optim):
    launch = Launch(per_device=1, accumulation=1, processes_per_machine=2, machines=2, zero_stage=stage)
    part = model_part(
        "m", _shape(1000), launch, weight_bytes=2, trainable=1000, tokens=0, visual_tokens=0, train_vision=False
    )
    assert (part.weights, part.gradients, part.optimizer, part.activations) == (weights, grads, optim, 0)


def test_activations_follow_tokens_hidden_layers_and_checkpointing():
    shape = _shape(1000)
    plain = model_part(
        "m", shape, Launch(3, 1), weight_bytes=2, trainable=0, tokens=7, visual_tokens=0, train_vision=False
    )
    assert plain.activations == 3 * (34 * 7 * 10 * 2 + 7 * 100 * 6)  # per sample: layers + fp32/bf16 logits
    saved = model_part(
        "m",
        shape,
        Launch(3, 1, activation_checkpointing=True),
        weight_bytes=2,
        trainable=0,
        tokens=7,
        visual_tokens=0,
        train_vision=False,
    )
    assert saved.activations == 3 * (2 * 7 * 10 * 2 + 34 * 7 * 10 + 7 * 100 * 6)


def test_the_plan_of_lora_sft_on_the_7b_config_is_within_10_percent_of_its_h200_measurement():
    """The bench's LoRA SFT of the Qwen2.5-VL-7B config (batch 4, 448 px, activation checkpointing): 17.2 GiB."""
    from training.commands.sft_plan import sft_plan

    s = parse(
        SftSettings,
        compose(
            "sft",
            [
                "model.path=Qwen/Qwen2.5-VL-7B-Instruct",
                "data.train=synthetic",
                "out=unused",
                "trainer.max_steps=4",
                "lora.enabled=true",
                "prompt.type=1",
                "trainer.per_device_train_batch_size=4",
                "trainer.gradient_accumulation_steps=1",
                "trainer.activation_checkpointing=true",
                "model.max_pixels=200704",
                "data.synthetic_size=448",  # the measured run's images (a plan reads the stream's size)
            ],
            schema=SftSettings,
        ),
    )
    plan = sft_plan(s)
    assert abs(plan.total_gib - 17.2) / 17.2 < 0.10, format_plan(plan)
    assert plan.fits and abs(plan.step_s - 1.01) < 0.2  # the measured configuration itself


def test_plan_true_prints_the_plan_in_seconds_without_any_weights(tmp_path):
    """The recipes' own commands, no model or dataset present (a fresh clone): exit 0 and the plan's lines."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    sft = [sys.executable, str(ROOT / "training/sft.py"), "+recipe=qalign-koniq", "plan=true"]
    done = subprocess.run(sft, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "effective batch 64 = 8 per device x 1 accumulation x 8 processes" in out
    assert "steps: 333 (3 epochs of 7046 rows)" in out and "ZeRO-3" in out and ": fits" in out
    assert not (tmp_path / "runs").exists()  # nothing created
    grpo = [sys.executable, str(ROOT / "rl/grpo.py"), "+recipe=grpo-expansion", "plan=true", "plan_for.processes=1"]
    done = subprocess.run(grpo, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "effective batch 32 completions = 4 per device x 8 accumulation x 1 processes" in done.stdout
    assert "4 prompts x group 8 per generation" in done.stdout  # App. D.3's batch 4, group 8, on one process too
    assert "reward sa-iqa" in done.stdout and "generator flux-fill" in done.stdout


def test_a_plan_that_does_not_fit_names_the_knobs_and_a_bad_plan_setting_is_refused(caplog):
    from training.commands.sft_plan import sft_plan

    base = ["model.path=Qwen/Qwen2.5-VL-72B-Instruct", "data.train=synthetic", "out=x", "trainer.max_steps=1"]
    plan = sft_plan(parse(SftSettings, compose("sft", base, schema=SftSettings)))
    text = format_plan(plan)
    assert not plan.fits and "does NOT fit" in text
    assert "lora.enabled=true" in text and "zero3.yaml" in text and "activation_checkpointing=true" in text
    with pytest.raises(Exception, match=r"plan_for.zero_stage=4: must be between 0 and 3"):
        parse(SftSettings, compose("sft", [*base, "plan_for.zero_stage=4"], schema=SftSettings))
    with pytest.raises(Exception, match=r"model.path=nowhere/model: plan=true needs the model's config.json"):
        sft_plan(parse(SftSettings, compose("sft", [*base, "model.path=nowhere/model"], schema=SftSettings)))


def test_plan_for_machines_multiplies_the_processes_of_every_sharding():
    from training.commands.sft_plan import sft_plan

    base = ["model.path=Qwen/Qwen2.5-VL-7B-Instruct", "data.train=synthetic", "out=x", "trainer.max_steps=1"]
    one = sft_plan(
        parse(
            SftSettings, compose("sft", [*base, "plan_for.processes=8", "plan_for.zero_stage=3"], schema=SftSettings)
        )
    )
    two = sft_plan(
        parse(
            SftSettings,
            compose(
                "sft",
                [*base, "plan_for.processes=8", "plan_for.zero_stage=3", "plan_for.machines=2"],
                schema=SftSettings,
            ),
        )
    )
    assert two.launch.processes == 16 and two.launch.effective_batch == one.launch.effective_batch == 256
    assert (one.launch.accumulation, two.launch.accumulation) == (4, 2)  # derived for the processes
    gathered = model_shape("Qwen/Qwen2.5-VL-7B-Instruct").largest_layer * 2  # ZeRO-3: the largest layer, whole
    assert two.parts[0].weights - gathered == pytest.approx((one.parts[0].weights - gathered) / 2)
    assert f"{PlanSettings().gpu_memory_gib:.0f} GiB per GPU" in format_plan(two)
    assert one.total_gib * GIB == pytest.approx(sum(p.total for p in one.parts))


# --- every recipe end to end on tiny models -----------------------------------------------------------------------


def _datasets(root: Path, koniq: int = 10) -> None:
    """The recipes' dataset folders, in the official layouts, where the recipes expect them (relative to the cwd);
    ``koniq`` images of KonIQ-10k."""
    for folder, write in (
        ("KonIQ-10k", partial(fx.koniq_sets, n=koniq)),
        ("SPAQ", fx.spaq),
        ("kadid10k", fx.kadid),
        ("ChallengeDB_release", fx.livec),
        ("AGIQA-3K", fx.agiqa3k),
    ):
        (root / "datasets" / folder).mkdir(parents=True)
        write(root / "datasets" / folder)


def _sa_bench(root: Path, n: int = 6) -> None:
    """SA-BENCH as published (annotation CSVs, ``n`` images per dimension) and preference pairs of its images for
    the fusion recipe (the paper's 750 pairs are not released): the brighter image preferred."""
    bench = root / "datasets" / "SA-BENCH"
    written = fx.sa_bench(bench, n=n)
    images = [(f"images/{d}/{r['id']}.jpg", r[f"{d}_score_mos"]) for d in fx.SA_BENCH for r in written[f"{d}_full"]]
    images = images[:: max(1, len(images) // 24)]  # pairs of 24 of them, spread over the dimensions
    pairs = [(a, b) for i, a in enumerate(images) for b in images[i + 1 :: 5]]
    rows = [{"a": a, "b": b, "label": "tie" if ma == mb else "a" if ma > mb else "b"} for (a, ma), (b, mb) in pairs]
    (bench / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


# Every recipe that trains, run at its own per-process geometry on 2 CPU processes (gloo), as configs/recipe/NAME.yaml
# says (per-device batch, accumulation on 2 processes, GRPO's group, rewards and losses), changing only the model (a
# tiny one of the recipe's family), the data (tiny folders in the official layouts), the steps (1-2), the process
# count and what a CPU cannot do (bf16, DataLoader workers). Name -> (command, per-device batch, accumulation, group).
GEOMETRY = {
    "qalign-koniq": ("sft", 8, 1, None),
    "deqa-koniq": ("sft", 32, 1, None),  # 16 pairs within each process's batch of 32
    "sa-iqa-bench": ("sft", 2, 64, None),  # global batch 256 = 2 x 64 x 2 (on the recipe's 4 processes: 2 x 32 x 4)
    "grpo-expansion": ("grpo", 4, 4, 8),  # 32 completions = 4 x 4 x 2, 4 prompts of 8
    "tiny-real-photos": ("sft", 16, 1, None),
    "tiny-real-photos-gpu": ("sft", 256, 1, None),
    "q-insight-koniq": ("grpo_scorer", 8, 2, 8),  # one image's 8 answers per process, twice a step
    "visualquality-r1-koniq": ("grpo_scorer", 48, 1, 6),  # 8 images of 6 answers per process
}
ACTIVE = {  # the terms each recipe trains on: logged, finite, and not all 0 (a reward's answers parse); GRPO's loss
    # is only checked finite (its policy term averages group-normalised advantages: 0 up to rounding at the first step)
    "deqa-koniq": ["loss", "deqa_kl", "deqa_ce", "deqa_fidelity"],
    "grpo-expansion": ["rewards/sa-iqa/mean"],
    "q-insight-koniq": ["rewards/q_insight_score/mean", "rewards/answer_format/mean"],
    "visualquality-r1-koniq": ["rewards/ranking_reward/mean", "rewards/answer_format/mean"],
}


def _plan(paths: dict[str, Path]) -> list[dict]:
    """What each recipe runs with: the recipe, its tiny model and 1-2 steps (GRPO: answers as long as the tiny
    models write theirs), nothing else of its geometry changed."""
    cpu = ["trainer.bf16=false", "trainer.dataloader_num_workers=0"]
    one = ["trainer.max_steps=1", *cpu]
    scorer = [f"model.path={paths['format_taught']}", "trainer.max_steps=2", "trainer.bf16=false"]
    runs = {
        "qalign-koniq": ("sft", [f"model.path={paths['qwen25']}", *one]),
        "deqa-koniq": ("sft", [f"model.path={paths['qwen25']}", *one]),
        "sa-iqa-bench": ("sft", [f"model.path={paths['qwen3']}", *one]),
        "sa-iqa-bench-fusion": ("fit", ["bootstrap=0"]),
        "grpo-expansion": (
            "grpo",
            [f"generator.path={paths['flux']}", "generator.steps=2", "trainer.max_steps=1", "eval.every=0"]
            + ["trainer.max_completion_length=16", "trainer.bf16=false"],
        ),
        "tiny-real-photos": ("sft", [f"model.path={paths['small']}", "out=runs/tiny-real-photos", *one]),
        "tiny-real-photos-gpu": (  # its 12 DataLoader workers: none on 2 cores (prefetching needs workers)
            "sft",
            [
                f"model.path={paths['small']}",
                "out=runs/tiny-real-photos-gpu",
                *one,
                "trainer.dataloader_prefetch_factor=null",
            ],
        ),
        "q-insight-koniq": ("grpo_scorer", [*scorer, "trainer.max_completion_length=48"]),
        "visualquality-r1-koniq": ("grpo_scorer", [*scorer, "trainer.max_completion_length=32"]),
    }
    return [{"name": n, "command": c, "argv": [f"+recipe={n}", *argv]} for n, (c, argv) in runs.items()]


def _launch(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    done = subprocess.run([*cmd, "--mixed_precision", "no", *args], capture_output=True, text=True, env=env, cwd=cwd)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def _check_geometry_and_terms(name: str, records: list[dict]) -> None:
    command, per_device, accumulation, group = GEOMETRY[name]
    for seen in records:
        assert seen["geometry"] == {
            "processes": 2,
            "per_device": per_device,
            "accumulation": accumulation,
            "num_generations": group,
        }, name
        numbers = [v for log in seen["logs"] for v in log.values() if isinstance(v, int | float)]
        assert numbers and all(math.isfinite(v) for v in numbers), (name, seen["logs"])  # no NaN, no None
        steps = [log for log in seen["logs"] if "loss" in log]
        assert steps, (name, seen["logs"])
        for term in ACTIVE.get(name, ["loss"]):
            values = [log.get(term) for log in steps]
            assert all(v is not None for v in values) and any(v != 0 for v in values), (name, term, values)


@pytest.mark.slow
def test_every_recipe_runs_in_order_at_its_own_geometry_on_two_processes(
    tiny_vlm_path,
    tiny_vlm25_path,
    tiny_vlm3_path,
    tiny_small_vlm_path,
    format_taught_vlm_path,
    tiny_lm_path,
    tiny_pipeline_path,
    tmp_path,
    monkeypatch,
    pace_protocol_path,
):
    """The recipes in the order a user runs them (later recipes read earlier outputs) under 2 processes each; the
    GRPO scorer recipes start from the tiny VLM taught the answer formats, so their rewards have answers to read."""
    from pace_judge.commands.judge import run as run_judge
    from pace_judge.commands.memory import run as run_memory
    from rl.tasks import run as run_tasks

    monkeypatch.chdir(tmp_path)
    _datasets(tmp_path, koniq=90)  # deqa's 32 a process after data.keep
    _sa_bench(tmp_path, n=96)  # sa-iqa-bench's step: 256 training rows
    chats = tmp_path / "datasets" / "expansions"
    chats.mkdir(parents=True)
    row = {"messages": [{"role": "user", "content": "Expand this inpainting prompt: a sofa"}]}
    row["messages"].append({"role": "assistant", "content": "a linen sofa in warm light"})
    (chats / "train.jsonl").write_text((json.dumps(row) + "\n") * 32)
    trl = [str(Path(sys.executable).parent / "trl"), "sft", "--config", str(RECIPES / "grpo-expansion-stage1.yaml")]
    trl += ["--model_name_or_path", str(tiny_lm_path), "--max_steps", "1", "--use_cpu", "--bf16", "false"]
    trl += ["--multi_gpu", "--num_processes", "2", "--mixed_precision", "no"]  # accelerate's, through trl's CLI
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(trl, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert Path("runs/grpo-expansion-stage1/adapter_config.json").is_file()
    run_tasks(parse(TasksSettings, compose("tasks", ["out=datasets/inpainting", "n=8"], schema=TasksSettings)))

    paths = {"qwen25": tiny_vlm25_path, "qwen3": tiny_vlm3_path, "small": tiny_small_vlm_path}
    paths |= {"format_taught": format_taught_vlm_path, "flux": tiny_pipeline_path("flux-fill")}
    (tmp_path / "plan.json").write_text(json.dumps(_plan(paths)))
    (tmp_path / "seen").mkdir()
    _launch([str(ROOT / "tests" / "launched_recipes.py"), str(tmp_path / "plan.json"), "seen"], tmp_path)
    seen = {
        item["name"]: [json.loads(Path(f"seen/{item['name']}-{rank}.json").read_text()) for rank in (0, 1)]
        for item in _plan(paths)
    }
    for name in GEOMETRY:
        _check_geometry_and_terms(name, seen[name])

    qalign = seen["qalign-koniq"][0]["result"]
    assert qalign["global_step"] == 1 and Path("runs/qalign-koniq/scorer/sa_iqa.json").is_file()
    cross = json.loads(Path("runs/qalign-koniq/cross/leaderboard.json").read_text())
    assert {"spaq", "kadid10k", "livec", "agiqa3k"} <= set(json.dumps(cross).replace('"', " ").split())
    assert set(qalign["metrics"]) >= {"quality"} and Path("runs/deqa-koniq/scorer/sa_iqa.json").is_file()
    bench = seen["sa-iqa-bench"][0]["result"]
    assert set(bench["metrics"]) >= {"layout", "harmony", "lighting", "distortion"}
    assert Path("runs/sa-iqa-bench/scorer/fusion_weights.json").is_file()  # the fusion recipe's
    grpo = seen["grpo-expansion"][0]["result"]
    assert grpo["global_step"] == 1 and grpo["complete"]
    for name in ("q-insight-koniq", "visualquality-r1-koniq"):
        result = seen[name][0]["result"]
        assert result["global_step"] == 2 and result["dimension"] == "quality" and "warning" not in result, name
        assert Path(f"runs/{name}/scorer/sa_iqa.json").is_file()

    Path("images").mkdir()
    for i, level in enumerate((0.2, 0.8)):
        fx.image(tmp_path / "images" / f"{i}.png", level, seed=i)
    assert (
        run_cli(
            "memory",
            run_memory,
            ["import", "memory=memory", f"protocol={pace_protocol_path}"],
            ("list", "show", "import", "delete", "route"),
            schema=MemorySettings,
        )
        == 0
    )
    vlm = f"model={tiny_vlm_path}"

    def judge(*argv: str) -> list:
        return run_judge(parse(JudgeSettings, compose("judge", ["+recipe=pace-fast", vlm, *argv])))

    judged = judge("dimension=quality", "images=images", "out=judged")
    assert judged and Path("judged/scores.jsonl").is_file()
    stored = judge("dimension=sharpness", "images=images", "out=j2")
    assert stored and Path("j2/scores.jsonl").is_file()
    from reward.core.errors import UserError

    with pytest.raises(UserError, match=r"no expert names it and no stored protocol is within theta=0.8"):
        judge("dimension=text legibility", "images=images", "out=j3")
    assert torch.isfinite(torch.tensor([json.loads(ln)["score"] for ln in Path("judged/scores.jsonl").open()])).all()
