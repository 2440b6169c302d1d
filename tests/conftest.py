"""Shared fixtures and helpers. The environment is offline: no test may try the network."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # scipy's tiny fits slow down 20-50x with BLAS threads
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: 2 workers on 2 cores, one thread each (and each process they
    # launch): two torch processes of two OpenMP threads each on two cores spin against each other (measured: a
    # learning test of 86 s took 2,099 s beside other work)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import logging  # noqa: E402
import re  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

# Test modules that start process groups (accelerate launches of several processes, DeepSpeed, the bench's GPU
# scripts): under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) they all run on one worker, one after the
# other, so that no two rendezvous ever race for one port (accelerate's and DeepSpeed's default is 29500). A
# one-process launch without DeepSpeed (the README's) starts none.
PROCESS_GROUPS = re.compile(r'accelerate\.commands\.launch|"launch"|deepspeed|\.sh\b|process_group|MASTER_PORT')
_starts_groups: dict[Path, bool] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        if path.name.startswith("test_") and path not in _starts_groups:
            _starts_groups[path] = bool(PROCESS_GROUPS.search(path.read_text(encoding="utf-8")))
        if _starts_groups.get(path):
            item.add_marker(pytest.mark.xdist_group("process-groups"))


def _root_logging_restored():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _logging_left_as_found():
    """A command run in-process installs its stdout log handler (reward.core.cli.setup_logging) and sets the root
    level: both are undone after each test, so no later test (or doctest) sees its log lines."""
    yield from _root_logging_restored()


@pytest.fixture(scope="module", autouse=True)
def _module_logging_left_as_found():
    """The same for a module's fixtures that run a command once for all its tests."""
    yield from _root_logging_restored()


@pytest.fixture(scope="session")
def deepspeed_ops(tmp_path_factory: pytest.TempPathFactory):
    """DeepSpeed launches of this test run build their C++ ops (the CPU shared-memory communication op) once, into a
    folder of their own (``TORCH_EXTENSIONS_DIR`` for every launch that follows): the suite never waits on a shared
    build cache or a lock an interrupted build left there. ``TEST_TORCH_EXTENSIONS_DIR`` names a folder to reuse
    across runs instead."""
    import subprocess
    import sys

    from training.shared.deepspeed import check_build_locks

    folder = os.environ.get("TEST_TORCH_EXTENSIONS_DIR") or str(tmp_path_factory.mktemp("torch_extensions"))
    before = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = folder
    check_build_locks()
    build = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    try:
        subprocess.run([sys.executable, "-c", build], check=True, capture_output=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.fail(f"building DeepSpeed's CPU communication op in {folder} took over 900 s")
    yield Path(folder)
    if before is None:
        os.environ.pop("TORCH_EXTENSIONS_DIR", None)
    else:
        os.environ["TORCH_EXTENSIONS_DIR"] = before


@pytest.fixture(scope="session")
def tiny_vlm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2-VL checkpoint built offline once per test session."""
    from reward.testing import make_tiny_vlm

    return make_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl"), family="qwen2_vl")


@pytest.fixture(scope="session")
def tiny_reasoning_scorer_path(tiny_vlm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained GRPO scorer folder (the no-thinking prompt): the tiny model plus its sa_iqa.json."""
    import shutil

    from reward.rewards.reasoning_iqa import scorer_meta
    from reward.rewards.scorer_folder import write_metadata

    d = tmp_path_factory.mktemp("reasoning-scorer")
    for f in tiny_vlm_path.iterdir():
        shutil.copy2(f, d / f.name)
    write_metadata(d, scorer_meta("visualquality-r1-fast"))
    return d


ANSWER_FORMATS = {  # what a model trained with each released prompt writes (reward.rewards.reasoning_prompts)
    "visualquality-r1": "<think>\n</think>\n<answer>{d}</answer>",
    "visualquality-r1-fast": "<answer>{d}</answer>",
    "q-insight": '<think>\n\n</think>\n<answer>\n{{"rating": {d}}}\n</answer>',
}


def teach_answer_formats(
    model_dir: Path, out: Path, prompts: tuple[str, ...], steps: int = 120, batch: int = 8, seed: int = 0
) -> Path:
    """``model_dir`` taught to answer each of the released ``prompts`` in its format (:data:`ANSWER_FORMATS`), the
    digit ``d`` uniform in 1-5 whatever the image: the answer format, no quality. Row ``k`` of a step is asked the
    prompt ``k % len(prompts)``. ``out`` is a scorer folder of the first prompt."""
    import random
    import shutil

    import torch
    from transformers import AutoModelForImageTextToText

    from reward.rewards.reasoning_iqa import scorer_meta
    from reward.rewards.reasoning_prompts import PROMPTS
    from reward.rewards.scorer_folder import write_metadata
    from reward.vlm import load_processor
    from training.procedural.synthetic import example_at

    processor = load_processor(str(model_dir))
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    heads = {}
    for name in prompts:
        released = PROMPTS[name]
        system = (
            [{"role": "system", "content": [{"type": "text", "text": released.system}]}] if released.system else []
        )
        turn = [*system, {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": released.question}]}]
        heads[name] = processor.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for step in range(steps):
        images = [example_at(seed + 77, step * batch + k, 32).image for k in range(batch)]
        asked = [prompts[k % len(prompts)] for k in range(batch)]
        answers = [ANSWER_FORMATS[name].format(d=rng.randint(1, 5)) + "<|im_end|>" for name in asked]
        texts = [heads[name] + answer for name, answer in zip(asked, answers, strict=True)]
        inputs = processor(text=texts, images=images, return_tensors="pt", padding=True)
        labels = inputs["input_ids"].clone()
        for row, answer in enumerate(answers):  # left padding: each answer is its row's tail
            labels[row, : -len(processor.tokenizer(answer, add_special_tokens=False)["input_ids"])] = -100
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out)
    for f in model_dir.iterdir():
        if not (out / f.name).exists():
            shutil.copy2(f, out / f.name)
    write_metadata(out, scorer_meta(prompts[0]))
    return out


@pytest.fixture(scope="session")
def format_taught_vlm_path(tiny_vlm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen2-VL taught VisualQuality-R1's and Q-Insight's answer formats (:func:`teach_answer_formats`): its
    answers to their prompts parse, their digits are random. Shared: tests read it and train copies elsewhere."""
    folder = tmp_path_factory.mktemp("format-taught-vlm")
    return teach_answer_formats(tiny_vlm_path, folder, ("visualquality-r1", "q-insight"), batch=8)


@pytest.fixture(scope="session")
def tiny_vlm25_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2.5-VL checkpoint."""
    from reward.testing import make_tiny_vlm

    return make_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2.5-vl"), family="qwen2_5_vl")


@pytest.fixture(scope="session")
def tiny_vlm3_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3-VL checkpoint (patch 16, deepstack, interleaved M-RoPE)."""
    from reward.testing import make_tiny_vlm

    return make_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen3-vl"), family="qwen3_vl")


@pytest.fixture(scope="session")
def tiny_vlm(tiny_vlm_path: Path):
    """The tiny Qwen2-VL loaded for scoring (shared: tests must not modify its weights)."""
    from reward.vlm import load_vlm

    return load_vlm(tiny_vlm_path, batch_size=8)


@pytest.fixture(scope="session")
def tiny_scorer_path(tiny_vlm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained SA-IQA scorer directory: the tiny model plus sa_iqa.json for lighting and harmony."""
    import json
    import shutil

    from training.prompts import scorer_metadata

    d = tmp_path_factory.mktemp("scorer")
    for f in tiny_vlm_path.iterdir():
        shutil.copy2(f, d / f.name)
    meta = scorer_metadata(["lighting", "harmony"], prompt_type=1, definitions={})
    (d / "sa_iqa.json").write_text(json.dumps(meta))
    return d


@pytest.fixture(scope="session")
def pace_protocol_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A calibrated PACE protocol (three probes, one with zoom) with its two anchor images."""
    from pace_doubles import write_example_protocol

    return write_example_protocol(tmp_path_factory.mktemp("pace-protocol"))


def random_images(n: int, seed: int = 0, sizes: tuple[int, ...] = (56,)) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        s = sizes[i % len(sizes)]
        out.append(Image.fromarray(rng.integers(0, 256, (s, s + 8 * (i % 2), 3), dtype=np.uint8)))
    return out


PHOTOS = ("astronaut", "camera", "coffee", "chelsea", "rocket", "coins", "immunohistochemistry", "moon")


def real_photos(folder: Path, n: int = 6, size: int = 64, prefix: str = "photo") -> list[Path]:
    """``n`` real photographs from scikit-image (``skimage.data``, shipped with the package), resized to ``size``
    on the long side and darkened a little more each (photo ``i`` at brightness ``1 - 0.12 i``), saved as PNG in
    ``folder``; photo ``i``'s MOS on a 1-5 scale is then ``5 - 0.6 i`` (see :func:`photo_mos`)."""
    import skimage.data

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        pixels = np.asarray(getattr(skimage.data, PHOTOS[i % len(PHOTOS)])())
        image = Image.fromarray(pixels).convert("RGB")
        image.thumbnail((size, size))
        darker = (np.asarray(image, dtype=np.float32) * (1.0 - 0.12 * i)).round().astype(np.uint8)
        paths.append(folder / f"{prefix}{i}.png")
        Image.fromarray(darker).save(paths[-1])
    return paths


def photo_mos(i: int) -> float:
    return round(5.0 - 0.6 * i, 3)


@pytest.fixture(scope="session")
def tiny_small_vlm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The "small" tiny Qwen2-VL preset (16 image tokens for a 112x112 crop), built once per session."""
    from reward.testing import make_tiny_vlm

    return make_tiny_vlm(tmp_path_factory.mktemp("tiny-small-qwen2-vl"), preset="small")


@pytest.fixture(scope="session")
def tiny_lm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random text-only causal LM (Qwen2 architecture; the text policy of GRPO and Best-of-N tests), built once
    per session (shared: tests read it, and write their runs elsewhere)."""
    from reward.testing import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="session")
def tiny_pipeline_path(tmp_path_factory: pytest.TempPathFactory):
    """``kind -> folder`` of a tiny random diffusers pipeline (``sd15-inpaint``, ``sdxl-inpaint``, ``flux-fill``,
    ``text-to-image`` (SD1.5) or ``sd3``), each kind built once per session on first use (tests only read it)."""
    from reward.testing import make_tiny_inpaint_pipeline, make_tiny_text_to_image

    built: dict[str, Path] = {}

    def path(kind: str) -> Path:
        if kind not in built:
            folder = tmp_path_factory.mktemp(f"tiny-{kind}")
            build = (
                make_tiny_text_to_image
                if kind == "text-to-image"
                else partial(make_tiny_text_to_image, kind="sd3")
                if kind == "sd3"
                else partial(make_tiny_inpaint_pipeline, kind=kind)
            )
            built[kind] = build(folder)
        return built[kind]

    return path


def accelerate_config(zero_stage: int, processes: int) -> str:
    """An accelerate config file's text for DeepSpeed on CPU processes (gloo): ZeRO-3 initialises models sharded and
    saves the gathered 16-bit weights; ZeRO-2 keeps whole models."""
    zero3 = zero_stage == 3
    return (
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
        f"  zero_stage: {zero_stage}\n  offload_optimizer_device: none\n  offload_param_device: none\n"
        f"  gradient_accumulation_steps: 1\n  zero3_init_flag: {'true' if zero3 else 'false'}\n"
        + ("  zero3_save_16bit_model: true\n" if zero3 else "")
        + f"mixed_precision: 'no'\nnum_machines: 1\nnum_processes: {processes}\nmachine_rank: 0\nuse_cpu: false\n"
    )


def run_script(script: str, argv: list[str], capsys) -> tuple[int, str]:
    """Run an entry script (a path from the repository's root) in this process as ``python SCRIPT ARGV`` would; its
    exit status and stderr."""
    import runpy
    import sys

    old, sys.argv = sys.argv, [script, *argv]
    try:
        runpy.run_path(str(Path(__file__).resolve().parents[1] / script), run_name="__main__")
        status = 0
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    finally:
        sys.argv = old
    return status, capsys.readouterr().err


def run_cli(config_name: str, run, argv: list[str], subcommands: tuple[str, ...] = (), *, schema: type) -> int:
    """Run a command as its entry script does (``reward.core.cli.main``); returns the exit status."""
    from reward.core.cli import main

    try:
        main(config_name, run, schema=schema, argv=argv, subcommands=subcommands)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def cpu_sft_args(out: Path, **extra):
    """trl's ``SFTConfig`` for a trainer built by hand in a test: batches of 4 on the CPU in fp32, nothing reported,
    no truncation (image tokens are never cut), the dataset's extra columns kept for the loss."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=4,
        use_cpu=True,
        bf16=False,
        report_to="none",
        max_length=None,
        remove_unused_columns=False,
        **extra,
    )


def next_token_logprobs(vlm, images: list, question: str, response_prefix: str = ""):
    """An oracle for option log-probabilities: one plain forward pass of the model on the rendered chat (user turn
    with ``images`` then ``question`` -- or the images where ``question`` has ``<image>`` -- assistant start,
    ``response_prefix``), log-softmax at the last position."""
    import torch

    if "<image>" in question:
        texts = question.split("<image>")
        parts = [{"type": "text", "text": texts[0]}]
        for text in texts[1:]:
            parts += [{"type": "image"}, {"type": "text", "text": text}]
        parts = [p for p in parts if p.get("text") != ""]
    else:
        parts = [*({"type": "image"} for _ in images), {"type": "text", "text": question}]
    messages = [{"role": "user", "content": parts}]
    text = vlm.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + response_prefix
    inputs = vlm.processor(text=[text], images=[images] if images else None, return_tensors="pt")  # one sample's
    with torch.no_grad():
        logits = vlm.model(**inputs).logits[0, -1]
    return logits.float().log_softmax(-1)


def word_id(tokenizer, context: str, word: str) -> int:
    """The id of ``word`` as the one token after ``context`` (tokenized with and without it)."""
    base, full = tokenizer.encode(context), tokenizer.encode(context + word)
    assert full[: len(base)] == base and len(full) == len(base) + 1, (context, word)
    return full[-1]


@pytest.fixture(scope="session")
def scripted_chat_url():
    """A loopback chat server answering ``{"score": N}``, N from 5 to 1 in steps of 0.1, higher for a brighter image
    (``reward=chat-judge``)."""
    from server_doubles import serve_scripted

    with serve_scripted([f'{{"score": {5 - k / 10:g}}}' for k in range(41)]) as url:
        yield url


def tiny_reward_config(name: str, request) -> dict:
    """A config of every registered reward on the tiny offline models; a new reward must be added here."""
    configs = {
        "qbench": lambda: {"model": str(request.getfixturevalue("tiny_vlm_path"))},
        "sa-iqa": lambda: {"model": str(request.getfixturevalue("tiny_scorer_path"))},
        "pace": lambda: {
            "model": str(request.getfixturevalue("tiny_vlm_path")),
            "protocol": str(request.getfixturevalue("pace_protocol_path")),
        },
        "scene-proxy": lambda: {"calibration_scenes": 2},
        "chat-judge": lambda: {"server": {"base_url": request.getfixturevalue("scripted_chat_url")}},
        "reasoning-iqa": lambda: {"model": str(request.getfixturevalue("tiny_reasoning_scorer_path"))},
    }
    if name not in configs:
        pytest.fail(f"registered reward {name!r} has no tiny test config in tests/conftest.py")
    return configs[name]()


def group_options(schema: type) -> dict[str, list[type]]:
    """Every option's settings dataclass of each config group of a command's settings (``reward``, ``generator``)."""
    from reward.rewards.registry import list_rewards
    from rl.generators import GENERATORS

    names = {"reward": list_rewards, "generator": GENERATORS.names}
    groups = getattr(schema, "groups", None) or {}
    return {g: [c for n in names[g]() if (c := choose(n)) is not None] for g, choose in groups.items()}


def settings_classes(schemas) -> list[type]:
    """Every settings dataclass reachable from ``schemas``: their nested sections and their groups' options."""
    import dataclasses

    from reward.core.config import field_types

    todo = list(schemas) + [c for s in schemas for options in group_options(s).values() for c in options]
    seen: list[type] = []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        todo += [t for t in field_types(cls).values() if dataclasses.is_dataclass(t)]
    return seen
