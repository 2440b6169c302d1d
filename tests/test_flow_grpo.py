"""rl/flow_grpo.py on tiny random pipelines (FLUX Fill, SD3): the sampler at noise 0 is the pipeline's own, the
log-probability recomputed for training is the sampled one, the learning proof (a known truth, and a judge that is
another measure of it), the adapter loading in diffusers with its card, the output-folder policy, a run whose rewards
fail, classifier-free guidance on SD3, the plan, and a study of the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.outputs import RunComplete
from rl.commands.flow_grpo import run as run_flow_grpo
from rl.commands.flow_grpo_settings import FlowGrpoSettings
from rl.flow_models import FluxFillFlow, Sd3Flow
from rl.flow_rollout import Sampling, sample_group_batch, seed_of
from rl.flow_sde import sde_step
from rl.flow_settings import PromptTask
from rl.inpaint_tasks import Task
from training.procedural.synthetic import write_inpainting_tasks

pytestmark = pytest.mark.slow

TINY_FLUX = ["generator.dtype=float32", "generator.max_sequence_length=16", "generator.steps=3", "sample.max_size=32"]
# the learning proof's variant of the defaults (the 2-process test runs the recipe's own geometry): a group of 8,
# two prompts a round, one optimizer step a round, 3 sampling steps (the SDE on the first two, the last one the ODE's),
# a larger learning rate and clip range, and the transformer's output projection adapted too (a random tiny
# transformer learns through it first)
LEARN = [
    *TINY_FLUX,
    "~reward",
    "reward.name=known_truth:smoothness",
    "judge=known_truth:flatness",
    "trainer.num_generations=8",
    "trainer.per_device_train_batch_size=4",
    "trainer.generation_batch_size=16",
    "trainer.global_batch_size=16",
    "trainer.learning_rate=5e-2",
    "trainer.epsilon=0.2",
    "trainer.max_steps=20",
    "trainer.save_steps=100",
    "sample.steps=3",
    "sample.window=2",
    "sample.window_range=[0,2]",
    "lora.r=8",
    "lora.alpha=16",
    "lora.target_modules=[attn.to_q,attn.to_k,attn.to_v,attn.to_out.0,ff.net.0.proj,ff.net.2,proj_out]",
    "eval_tasks=4",
    "eval.every=10",
]


def _cfg(overrides: list[str]) -> FlowGrpoSettings:
    return parse(FlowGrpoSettings, compose("flow_grpo", overrides, schema=FlowGrpoSettings))


def _flux(path: Path, **extra) -> FluxFillFlow:
    cfg = {"name": "flux-fill", "path": str(path), "dtype": "float32", "steps": 3, "max_sequence_length": 16}
    return FluxFillFlow(cfg | extra)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    # the whole image is inpainted (mask 1.0): every pixel is the generator's
    return write_inpainting_tasks(tmp_path_factory.mktemp("flow-tasks"), 16, size=32, mask_fraction=1.0)


@pytest.fixture(scope="module")
def learned(tiny_pipeline_path, tasks, tmp_path_factory):
    out = tmp_path_factory.mktemp("flow-learn") / "run"
    args = [f"generator.path={tiny_pipeline_path('flux-fill')}", f"data={tasks}", f"out={out}", *LEARN]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is the fastest, and no thread waits on a busy machine
    try:
        return out, args, run_flow_grpo(_cfg(args))
    finally:
        torch.set_num_threads(threads)


def test_sampling_at_noise_zero_is_the_pipelines_own_sampler(tiny_pipeline_path):
    """Flow-GRPO's sampler shares the pipelines' parts (prompt encoding, packing, timesteps, guidance, VAE): at noise
    level 0 it draws exactly the image the pipeline draws from the same first latents (FLUX Fill; SD3 with CFG)."""
    image, mask = Image.new("RGB", (32, 32), (120, 80, 40)), Image.new("L", (32, 32), 0)
    mask.paste(255, (4, 4, 28, 28))
    cases = [
        (
            _flux(tiny_pipeline_path("flux-fill"), paste_back=False),  # the pipeline's image as it comes out
            Task("t:1", image, mask, "a bright room", "g"),
            {"image": [image], "mask_image": [mask], "prompt_2": ["a bright room"], "guidance_scale": 30.0},
        ),
        (
            Sd3Flow(
                {
                    "name": "sd3",
                    "path": str(tiny_pipeline_path("sd3")),
                    "dtype": "float32",
                    "steps": 3,
                    "size": 32,
                    "max_sequence_length": 16,
                }
            ),
            PromptTask("p:1", "a bright room"),
            {"negative_prompt": [""], "guidance_scale": 4.5},
        ),
    ]
    for gen, task, call in cases:
        how = Sampling(
            steps=3,
            window=2,
            window_range=(0, 3),
            noise_level=0.0,
            guidance=call["guidance_scale"],
            max_side=32,
            seed=0,
        )
        ours = sample_group_batch(gen, task, [0], 0, 0, how).images[0]
        first = gen.noise([torch.Generator().manual_seed(seed_of(0, "noise", 0, 0))], (32, 32))
        extra = {"generator": [torch.Generator().manual_seed(seed_of(0, "task", 0, 0))]} if "image" in call else {}
        theirs = gen.pipe(
            prompt=["a bright room"],
            height=32,
            width=32,
            num_inference_steps=3,
            latents=first,
            max_sequence_length=16,
            **call,
            **extra,
        ).images[0]
        assert np.array_equal(np.asarray(ours), np.asarray(theirs.convert("RGB"))), gen.name


def test_the_log_probability_recomputed_for_training_is_the_sampled_one(tiny_pipeline_path):
    """Before any update the policy ratio is 1: the training forward finds the sampled transitions' log-probabilities
    again (same conditions, latents, sigmas and guidance as sampling)."""
    gen = _flux(tiny_pipeline_path("flux-fill"))
    image = Image.new("RGB", (32, 32), (90, 90, 90))
    task = Task("t:1", image, Image.new("L", (32, 32), 255), "a quiet room", "g")
    how = Sampling(steps=4, window=2, window_range=(0, 4), noise_level=0.9, guidance=30.0, max_side=32, seed=3)
    ro = sample_group_batch(gen, task, [0, 1, 2], 0, 0, how)
    assert ro.latents.shape[1] == 3 and torch.isfinite(ro.log_probs).all()
    for k in range(2):
        with torch.no_grad():
            v = gen.velocity(gen.transformer, ro.latents[:, k], ro.sigmas[k].expand(3), ro.cond, 30.0, ro.size)
            again = sde_step(
                v,
                ro.latents[:, k],
                ro.sigmas[k],
                ro.sigmas[k + 1],
                noise_level=0.9,
                sigma_cap=ro.sigma_cap,
                next_sample=ro.latents[:, k + 1],
            )
        assert again.log_prob.tolist() == pytest.approx(ro.log_probs[:, k].tolist(), abs=1e-5)


def test_flow_grpo_learns_a_known_truth_and_the_held_out_judge_moves_with_it(learned):
    """Truth: how free of fine-grain texture the inpainted image is (the tiny random VAE lets the generator change
    its texture, not its brightness: tests/known_truth.py). Trained on one measure of it (the mean absolute
    Laplacian), judged by another (the total variation), on held-out tasks with fixed seeds, before and after 20
    steps (seeds 1, 2, 3 and 42 measured: the reward rose 0.07-0.11, the judge 0.04-0.08)."""
    out, _, result = learned
    assert result["complete"] and result["global_step"] == 20 and result["judge"] == "known_truth:flatness"
    rows = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 10, 20]
    reward, judge = (rows[-1][k] - rows[0][k] for k in ("known_truth:smoothness", "known_truth:flatness"))
    assert reward > 0.05, rows
    assert judge > 0.03, rows
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert rounds[-1]["reward"] > rounds[0]["reward"] + 0.04  # the training reward too
    assert all(r["unusable"] == 0 for r in rounds)


def test_the_adapter_loads_in_diffusers_with_its_card_and_draws_the_runs_held_out_image(learned, tiny_pipeline_path):
    """lora/ is diffusers' LoRA format with its config (alpha): a fresh FluxFillPipeline given load_lora_weights draws
    the held-out image the run drew last for the same task and seed (to a grey level or two of float rounding), not
    the base model's."""
    from diffusers import FluxFillPipeline

    from rl.inpaint_tasks import load_tasks

    out, args, result = learned
    card = (out / "lora" / "README.md").read_text()
    assert "Flow-GRPO" in card and "held-out judge (not trained on)" in card and "rl/flow_grpo.py" in card
    paths = [value for a in args if (value := a.partition("=")[2]).startswith("/")]
    assert paths and not [p for p in paths if p in card], card  # the models, data and out by their names only
    pairs = [json.loads(line) for line in (out / "heldout" / "pairs.jsonl").read_text().splitlines()]
    data = next(a.split("=", 1)[1] for a in args if a.startswith("data="))
    task = next(t for t in load_tasks(data)[0] if t.id == pairs[0]["task"])
    pipe = FluxFillPipeline.from_pretrained(next(a.split("=", 1)[1] for a in args if a.startswith("generator.path=")))
    pipe.load_lora_weights(str(out / "lora"))
    gen = FluxFillFlow(
        {"name": "flux-fill", "path": "unused", "dtype": "float32", "steps": 3, "max_sequence_length": 16}, pipe=pipe
    )
    drawn = gen.generate([task], [seed_of(42, "heldout", task.key)])[0]
    saved = Image.open(out / "heldout" / f"{pairs[0]['index']:04d}-policy.png").convert("RGB")
    base = Image.open(out / "heldout" / f"{pairs[0]['index']:04d}-base.png").convert("RGB")
    drawn, saved, base = (np.asarray(im, dtype=np.float64) for im in (drawn, saved, base))
    assert np.abs(drawn - saved).mean() < 0.5  # float rounding through a 3-step sampler and the VAE, no more
    assert np.abs(drawn - base).mean() > 10  # the adapter changed what it draws
    assert result["files"]["sample sheets"].endswith("sample_sheets.png")


def test_a_study_serves_the_runs_trained_and_base_pairs(learned):
    from rl.study import KINDS, pairs_of

    out, _, _ = learned
    command, pairs = pairs_of(out)
    assert command == "flow_grpo" and KINDS[command] == ("the trained generator", "the base generator")
    assert len(pairs) == 4 and all(Path(p["method"]).name.endswith("-policy.png") for p in pairs)


def test_an_identical_rerun_is_complete_and_a_changed_one_is_refused(learned):
    out, args, _ = learned
    with pytest.raises(RunComplete):
        run_flow_grpo(_cfg(args))
    with pytest.raises(
        UserError, match=r"holds another run \(1 difference\(s\)\):\n  - sample.noise_level: 0.9 -> 0.5"
    ):
        run_flow_grpo(_cfg([*args, "sample.noise_level=0.5"]))


def test_a_run_whose_rewards_all_fail_stops_at_its_first_round(tiny_pipeline_path, tasks, tmp_path):
    """A served reward answering garbage: no image gets a reward, the run stops as GRPO's does (exit 2 with the
    counts), never trains on made-up scores, and says so in its result."""
    from server_doubles import serve_scripted

    out = tmp_path / "run"
    with serve_scripted([" good", " poor"], fault="not_json") as url:
        args = [
            f"generator.path={tiny_pipeline_path('flux-fill')}",
            f"data={tasks}",
            f"out={out}",
            *TINY_FLUX,
            "reward=qbench",
            "reward.backend=openai",
            "reward.model=null",
            f"+reward.server.base_urls=[{url}]",
            "reward.server.model=tiny",
            "reward.server.max_retries=0",
            "trainer.num_generations=2",
            "trainer.per_device_train_batch_size=2",
            "trainer.generation_batch_size=4",
            "trainer.max_steps=2",
            "sample.steps=2",
            "sample.window=1",
            "sample.window_range=[0,2]",
            "eval.every=0",
            "lora.r=2",
        ]
        with pytest.raises(UserError, match=r"training stopped at step 1: 4 of 4 completions got no usable reward"):
            run_flow_grpo(_cfg(args))
    result = json.loads((out / "flow_grpo_result.json").read_text())
    assert result["complete"] is False and result["global_step"] == 0
    assert result["reward_failures"]["steps_without_reward"] == 1
    assert not (out / "rounds.jsonl").exists()  # no update was made


def test_sd3_trains_with_classifier_free_guidance(tiny_pipeline_path, tmp_path):
    """Text to image: prompts rows, SD3's CFG in sampling and in the training forward, the adapter saved."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"a room number {i}"}) + "\n" for i in range(6)))
    args = [
        "generator=sd3",
        f"generator.path={tiny_pipeline_path('sd3')}",
        "generator.dtype=float32",
        "generator.size=32",
        "generator.steps=2",
        "generator.max_sequence_length=16",
        f"data={prompts}",
        f"out={tmp_path / 'run'}",
        "reward=scene-proxy",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=2",
        "trainer.generation_batch_size=4",
        "trainer.max_steps=2",
        "trainer.beta=0.04",
        "sample.steps=2",
        "sample.window=1",
        "sample.window_range=[0,2]",
        "eval_tasks=2",
        "eval.every=2",
        "lora.r=2",
    ]
    result = run_flow_grpo(_cfg(args))
    assert result["complete"] and result["generator"] == "sd3" and result["global_step"] == 2
    rounds = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert all(r["kl"] is not None and r["kl"] >= 0 for r in rounds)  # beta > 0: the KL to the adapter-off model
    assert (tmp_path / "run" / "lora" / "pytorch_lora_weights.safetensors").is_file()


def test_the_plan_of_flux_fill_with_sa_iqa_on_8_gpus_loads_nothing(capsys):
    """plan=true: memory per GPU and a time, from the settings alone (no model here); the LoRA count of the plan is
    what peft adds to a FLUX transformer with flow_grpo's targets."""
    from rl.commands.flow_grpo_plan import FlowShape, lora_params

    args = [
        "generator.path=black-forest-labs/FLUX.1-Fill-dev",
        "reward=sa-iqa",
        "reward.model=runs/scorer",
        "data=tasks.jsonl",
        "out=runs/x",
        "plan=true",
        "plan_for.processes=8",
        "plan_for.reward_model=Qwen/Qwen3-VL-8B-Instruct",
        "plan_for.gpu_memory_gib=79",
    ]
    plan = run_flow_grpo(_cfg(args))["plan"]
    assert plan["memory_gib"]["text encoders + VAE"] == pytest.approx(9.2, abs=0.1)
    assert 40 < plan["memory_gib"]["FLUX.1 Fill + LoRA r=64"] < 60 and plan["step_s"] > 0
    assert "179.3M trained" in plan["facts"][0]
    from diffusers import FluxTransformer2DModel
    from peft import LoraConfig

    from rl.flow_settings import FLUX_TARGETS

    tiny = FluxTransformer2DModel(
        num_layers=2,
        num_single_layers=3,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        in_channels=16,
        axes_dims_rope=[4, 4, 8],
    )
    tiny.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=list(FLUX_TARGETS)))
    added = sum(p.numel() for n, p in tiny.named_parameters() if "lora_" in n)
    h = 32
    shape = FlowShape("tiny", 0, h, 2, 3, 0, 16, ((h, h),) * 8 + ((h, 4 * h), (4 * h, h)) * 2, ((h, h),) * 3, False)
    assert lora_params(shape, 4) == added


def test_pace_and_a_served_chat_judge_train_beside_each_other_with_weights(
    tiny_pipeline_path, tasks, tmp_path, request
):
    """Any registered reward by name: PACE (its protocol on the tiny VLM) and a chat model served by an
    OpenAI-compatible server, weighted 0.25 / 0.75; both give every image a score (each term active)."""
    from conftest import tiny_reward_config

    pace, chat = tiny_reward_config("pace", request), tiny_reward_config("chat-judge", request)
    args = [
        f"generator.path={tiny_pipeline_path('flux-fill')}",
        f"data={tasks}",
        f"out={tmp_path / 'run'}",
        *TINY_FLUX,
        "~reward",
        "reward.name=pace",
        f"reward.model={pace['model']}",
        f"reward.protocol={pace['protocol']}",
        f"more_rewards=[{{name: chat-judge, server: {{base_urls: [{chat['server']['base_url']}]}}}}]",
        "trainer.reward_weights=[0.25,0.75]",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=2",
        "trainer.generation_batch_size=4",
        "trainer.max_steps=1",
        "sample.steps=2",
        "sample.window=1",
        "sample.window_range=[0,2]",
        "eval.every=0",
        "lora.r=2",
    ]
    result = run_flow_grpo(_cfg(args))
    assert result["complete"] and result["rewards"] == ["pace", "chat-judge"]
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert row["unusable"] == 0 and row["rewards/pace"] is not None and row["rewards/chat-judge"] is not None
    assert row["reward"] == pytest.approx(0.25 * row["rewards/pace"] + 0.75 * row["rewards/chat-judge"], abs=1e-9)
