"""Every command of the README's and the docs pages' ```bash blocks runs as written, in order, on the shipped samples
and tiny models; then the README's Python snippet, on what its commands wrote.

The README's main flow runs as installed (``perceptual-rewards NAME``, here ``python -m reward NAME``; ``-m reward
NAME`` under accelerate) on the folders its first line puts in shell variables (``CONFIGS=$(perceptual-rewards
--configs)``: the test runs the command and expands ``$CONFIGS`` with what it printed), and writes under ``runs/``
(here a temporary folder in its place). The docs pages write
placeholders (``PATH``, ``DIR``, ``MANIFEST``, ...) where a user puts their own models and data:
:data:`BY_KEY` and :data:`BY_VALUE` say what each one stands for here (tiny models built in the session, the samples
of ``reward/assets/samples``, folders of earlier commands), :data:`SHORTER` shortens the few commands that would run
for minutes as written, and :data:`SKIP` lists, each with its reason, the commands that cannot run on this machine.
A fast test checks that the tables fit the README (every command is skipped or fully substituted, no skip is stale);
the slow one runs them all. When the README changes, re-point the tables, not the test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUNS = re.compile(r"(?<![\w./-])runs/")  # the README's output folder, relative to the clone: a temporary one here
SAMPLES = ROOT / "reward" / "assets" / "samples"

# Commands that cannot run here, by a piece of text only that command holds -> why (and where it is tested instead).
SKIP: dict[str, str] = {
    "make demo": "the whole demo (minutes); tests/test_demo.py runs demo.py shortened",
    "make test": "the whole test suite, this test included",
    "pip install": "installs into the environment; tests/test_install.py builds the wheel, installs it into a fresh "
    "virtual environment and runs every command from it",
    "python docs/settings.py": "rewrites the docs pages; tests/test_docs.py runs its check",
    'dimension="tactile satisfaction"': "the agents write a new protocol: a tiny random VLM cannot (the agents run "
    "with a scripted backend in tests/test_pace_agents.py)",
    "pipeline=SD_DIR": "the Generator agent writes the text-to-image prompts: a tiny random VLM cannot "
    "(tests/test_pace_calibrate.py scripts it)",
    "backend=openai server.base_url=URL": "needs an OpenAI-compatible server (tests/test_reward_server.py serves "
    "one on loopback)",
    "a2.judge.base_url=URL": "needs an OpenAI-compatible judge server (tests/test_qbench_a2.py uses a loopback one)",
    "--num_processes 4 --gpu_ids 0,1,2,3": "8 GPUs and two reward servers",
    "trl sft --model_name_or_path Qwen/Qwen2.5-VL-7B-Instruct": "downloads a 7B model; tests/test_rl_grpo.py "
    "runs this recipe on the tiny text policy (test_the_stage1_recipe_trl_sft_lora_then_grpo_from_the_adapter_folder)",
    "policy.path=STAGE1 lora.enabled=true": "its settings are elided (...): the command above it, completed",
    "vllm serve": "a vLLM server on a GPU",
    "rl/study.py serve": "serves its page until Ctrl-C (tests/test_study.py answers on it in headless chromium)",
    "perceptual-rewards study serve": "serves its page until Ctrl-C (tests/test_study.py answers on it in headless "
    "chromium)",
    "rl/study.py report": "reports raters' answers (tests/test_study.py gives some in headless chromium first)",
    "perceptual-rewards study report": "reports raters' answers (tests/test_study.py gives some in headless chromium "
    "first)",
    "sglang.launch_server": "an SGLang server on a GPU",
    "koniq10k:/data/KonIQ-10k": "KonIQ-10k is not shipped (tests/test_datasets_e2e.py builds stand-in folders)",
    "spaq:/data/SPAQ,kadid10k": "SPAQ, KADID-10k, LIVE Challenge and AGIQA-3K are not shipped",
    "data=spaq:/data/SPAQ:test": "SPAQ is not shipped",
    "pairs=spaq:/data/SPAQ": "SPAQ is not shipped",
    "kadid10k:/data/kadid10k:test": "KADID-10k is not shipped",
    "data=sa-bench:/data/SA-BENCH:test:layout": "SA-BENCH is not shipped (tests/test_sa_bench.py builds a stand-in)",
    "reward=chat-judge reward.server.base_url=": "needs an OpenAI-compatible chat model (tests/test_chat_judge.py "
    "serves one on loopback)",
    "--num_processes 8 reward/evaluate.py": "8 processes; tests/test_evaluate_parallel.py launches 2",
    "reward/evaluate.py ... out=OUT resume=auto": "its settings are elided (...): the command above it, resumed",
    "benchmark=agiqa3k:DIR:train": "AGIQA-3K is not shipped (tests/test_pace_scales.py builds a stand-in folder)",
    "a3.released=Q-Bench": "Q-Bench's released outputs are not shipped (tests/test_a3_released.py reads a fixture)",
    # the published rows: 7B checkpoints, the datasets and GPUs; tests/test_recipes.py runs every recipe on tiny models
    "--num_processes 8 training/sft.py +recipe=qalign-koniq": "a published row (7B, KonIQ-10k, 8 GPUs)",
    "training/sft.py +recipe=deqa-koniq": "a published row (7B, KonIQ-10k, 8 GPUs)",
    "+recipe=visualquality-r1-koniq": "a published row (7B, KonIQ-10k, 8 GPUs)",
    "training/sft.py +recipe=sa-iqa-bench": "a published row (8B, SA-BENCH, 4 GPUs)",
    "fusion/fit.py +recipe=sa-iqa-bench-fusion": "a published row (the sa-iqa-bench scorer and SA-BENCH pairs)",
    "trl sft --config configs/recipe/grpo-expansion-stage1.yaml": "a published row (Qwen2.5-VL-7B)",
    "rl/grpo.py +recipe=grpo-expansion": "a published row (7B policy, FLUX Fill, 4 GPUs)",
    "judge.py +recipe=pace-fast": "a published row (its experts and memory bank are the other recipes' outputs)",
    "--num_processes 8 rl/flow_grpo.py +recipe=flow-grpo-flux-fill": "a published row (FLUX.1 Fill, an 8B reward, a "
    "7B judge, 8 GPUs); tests/test_flow_grpo_processes.py runs it on 2 CPU processes at its geometry",
    "generator.path=black-forest-labs/FLUX.1-Fill-dev": "FLUX.1 Fill (12B) with a 7B reward and judge; "
    "tests/test_flow_grpo.py trains the tiny FLUX Fill",
    "generator.path=stabilityai/stable-diffusion-3.5-medium": "SD3.5 Medium, PACE and a served judge; "
    "tests/test_flow_grpo.py trains the tiny SD3 and PACE beside a served reward",
    "--num_machines 2": "two machines",
}

# `KEY=PLACEHOLDER` -> the resource it names here (a key absent from this table: BY_VALUE decides)
BY_KEY: dict[tuple[str, str], str] = {
    ("policy.path", "PATH"): "lm",
    ("images", "DIR"): "images",
    ("memory", "DIR"): "memory",
    ("generator.path", "DIR"): "sd15",
    ("reward.model", "DIR/scorer"): "last_scorer",
    ("reward.model", "RUN/scorer"): "last_scorer",
    ("reward.model", "GRPO_DIR/scorer"): "last_grpo_scorer",
    ("scores", "DIR/scores.jsonl"): "last_scores",
    ("out", "HELDOUT"): "heldout",
    ("data", "HELDOUT/ratings.jsonl"): "heldout_ratings",
    ("data.test", "HELDOUT/ratings.jsonl"): "heldout_ratings",
}
# a placeholder value (or a list item) -> the resource, whatever the key
BY_VALUE: dict[str, str] = {
    "PATH": "vlm",
    "MODEL": "vlm",
    "MANIFEST": "ratings",
    "CALIBRATION_MANIFEST": "calibration_split",  # calibration and test images must differ: half the samples each
    "TEST_MANIFEST": "test_split",
    "PAIRS.jsonl": "pairs",
    "FILE": "protocol",
    "SD_DIR": "text_to_image",
    "FLUX_FILL_DIR": "flux",
    "TASKS.jsonl": "tasks",
    "llvisionqa_dev.json": "a1_questions",
    "koniq.jsonl": "a3_first",
    "spaq.jsonl": "a3_second",
    "DIR": "new_folder",
    "GRPO_DIR": "new_folder",
    "OUT": "new_folder",
    "RUN": "new_folder",
    "WEIGHTS.json": "new_file",
}
# Where the README's own command would run for minutes on 2 CPU cores (its defaults are the paper's, for GPUs), these
# shorten it: whole tokens swapped, then settings added to the commands whose README text holds a marker (only these
# change the work; a test checks that each still matches a README command).
SHORTER: dict[str, str] = {
    "trainer.max_steps=2000": "trainer.max_steps=2",  # SFT: 2,000 steps of 16
}
APPEND: dict[str, list[str]] = {
    # SFT's defaults are the paper's: 3 epochs, or the steps given, of 32 accumulated batches of 8 (256 examples a
    # step); 30 steps of one batch, as the README's flow, learn enough for the fusion fit that reads its scores to
    # find weights (a scorer of one step orders no pair, and the fit refuses all-zero weights)
    "data.test=MANIFEST out=DIR": [
        "trainer.max_steps=30",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=1e-3",
    ],
    "trainer.max_steps=2000": ["trainer.gradient_accumulation_steps=1"],
    # GRPO on the scorer: the recipe's groups of 8 answers of up to 512 tokens, for minutes; 2 steps of groups of 4
    # short answers run every part (tests/test_grpo_scorer.py shows it learning)
    "training/grpo_scorer.py model.path=PATH": [
        "data.dimension=lighting",  # the sample manifest rates 4 dimensions; a scorer trained by GRPO learns one
        "trainer.max_steps=2",
        "trainer.per_device_train_batch_size=8",
        "trainer.num_generations=4",
        "trainer.max_completion_length=8",
    ],
    # the full run also times a 23M-parameter config, for minutes; one timing of 2 images runs every part once
    "bench/pace_cost.py": ["--quick", "--repeats", "1", "--images", "2"],
    "+recipe=tiny-real-photos": ["trainer.max_steps=2"],  # the recipe's 2,400 steps
    # the README's main flow, smaller where it proves the same: its policy trains 2 steps (not 4), 4 tasks are picked
    # (its scorer trains the 30 steps written: with fewer, the fit's non-negative weights may all be 0)
    "out=runs/grpo trainer.max_steps=4": ["trainer.max_steps=2"],
    "out=runs/best-of-4": ["limit=4"],
    # the paper's 500 steps of 4 prompts x 8 completions of up to 512 tokens (FLUX's T5 budget), held out every 10
    "data=TASKS.jsonl out=OUT": [
        "trainer.max_steps=2",
        "trainer.per_device_train_batch_size=8",
        "trainer.global_batch_size=8",  # one micro-batch a step, not the paper's 32 completions
        "trainer.max_completion_length=8",
        "eval.every=0",
        "generator.steps=4",  # the diffusers pipelines' 30 denoising steps per candidate
    ],
    # 24 tasks x 4 candidates x 30 denoising steps: minutes on CPU; 4 tasks in 4 steps show the same. sd15-inpaint's
    # config loads the checkpoint's float16 weights, whose convolutions crawl on a CPU (2 min here, 20 s in float32)
    "data=TASKS.jsonl n=4": ["limit=4", "generator.steps=4", "generator.dtype=float32"],
}
# `python pace_judge/memory.py list|show|import|delete|route ... [dimension=NAME] [protocol=FILE]` is a synopsis:
# its subcommands, each with the settings it takes, in an order that works on an empty bank
SYNOPSES: dict[str, list[str]] = {
    "list|show|import|delete|route": [
        "python pace_judge/memory.py import memory=DIR protocol=FILE",
        "python pace_judge/memory.py list memory=DIR",
        "python pace_judge/memory.py show memory=DIR dimension=lighting",
        "python pace_judge/memory.py route memory=DIR dimension=brightness",
        "python pace_judge/memory.py delete memory=DIR dimension=lighting",
    ]
}
ASSIGNMENT = re.compile(r"([A-Z_]+)=\$\(([^)]*)\)")  # NAME=$(command): the shell variable of a command's output
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b|\.\.\.|\w+\.jsonl?\b")
NOT_PLACEHOLDERS = {"CUDA_VISIBLE_DEVICES"}


def documents() -> list[Path]:
    """The README, then the docs pages in the order its reference table lists them (a page's commands may use what
    an earlier page's wrote: the last scorer, the last scores)."""
    pages = re.findall(r"\]\((docs/[\w.-]+\.md)\)", README.read_text(encoding="utf-8"))
    return [README, *(ROOT / page for page in dict.fromkeys(pages))]


def readme_commands(text: str | None = None) -> list[str]:
    """The commands of the ```bash blocks of the README and the docs pages, in order: comment lines dropped,
    continued lines joined, a trailing ``# comment`` cut."""
    if text is None:
        text = "\n".join(path.read_text(encoding="utf-8") for path in documents())
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\s*\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            commands.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return commands


def skip_reason(command: str) -> str | None:
    return next((why for key, why in SKIP.items() if key in command), None)


@dataclass
class Session:
    """The resources placeholders stand for: built on first use; ``new_folder`` / ``new_file`` are fresh each
    time; the last scorer and scores file follow the commands run."""

    tmp: Path
    builders: dict[str, Callable[[], Path]] = field(default_factory=dict)
    built: dict[str, Path] = field(default_factory=dict)
    count: int = 0
    last: dict[str, Path] = field(default_factory=dict)

    def get(self, name: str) -> Path:
        if name in ("new_folder", "new_file"):
            self.count += 1
            return self.tmp / "runs" / (f"{self.count:02d}" + ("" if name == "new_folder" else ".json"))
        if name in ("last_scorer", "last_scores", "last_grpo_scorer"):
            if name not in self.last:
                raise LookupError(f"{name}: no earlier command of the README wrote one")
            return self.last[name]
        if name not in self.built:
            self.built[name] = self.builders[name]()
        return self.built[name]


def substitute(command: str, resolve: Callable[[str], str], variables: dict[str, str] | None = None) -> list[str]:
    """``command`` with every placeholder replaced (``resolve(resource)`` gives its value), each ``$NAME`` of
    ``variables`` expanded, the shortenings of :data:`SHORTER` / :data:`APPEND` applied, and ``python`` /
    ``accelerate`` / ``perceptual-rewards`` those of this interpreter (the last as ``python -m reward``)."""
    out = []
    for token in shlex.split(command):
        for name, value in (variables or {}).items():
            token = token.replace(f"${name}", value)
        token = RUNS.sub(lambda _: resolve("runs") + "/", token)
        key, eq, value = token.partition("=")
        if eq and (key, value) in BY_KEY:
            token = f"{key}={resolve(BY_KEY[key, value])}"
        elif eq and value.startswith("[") and value.endswith("]"):
            items = [resolve(BY_VALUE[v]) if v in BY_VALUE else v for v in value[1:-1].split(",")]
            token = f"{key}=[{','.join(items)}]"
        elif eq and value.startswith("{") and value.endswith("}"):  # a Hydra dict: {name: qbench, model: PATH}
            items = [item.strip().partition(": ") for item in value[1:-1].split(",")]
            items = [(k, resolve(BY_VALUE[v]) if v in BY_VALUE else v) for k, _, v in items]
            token = f"{key}={{{', '.join(f'{k}: {v}' for k, v in items)}}}"
        elif eq and value in BY_VALUE:
            token = f"{key}={resolve(BY_VALUE[value])}"
        out.append(token)
    out = [SHORTER.get(t, t) for t in out]
    for marker, extra in APPEND.items():
        if marker in command:
            out += extra
    if out[0] == "python":
        out[0] = sys.executable
    elif out[0] == "accelerate":
        out[0] = str(Path(sys.executable).parent / "accelerate")
    elif out[0] == "perceptual-rewards":
        out[:1] = [sys.executable, "-m", "reward"]
    return out


def assignments(command: str) -> dict[str, str] | None:
    """``NAME=$(COMMAND) ...``: each variable's command, or ``None`` for any other line."""
    found = ASSIGNMENT.findall(command)
    return dict(found) if found and not ASSIGNMENT.sub("", command).strip() else None


def expand(command: str) -> list[str]:
    return next((cmds for key, cmds in SYNOPSES.items() if key in command), [command])


def runnable() -> list[str]:
    return [c for command in readme_commands() if not skip_reason(command) for c in expand(command)]


# ---------------------------------------------------------------------------------------------- fast: the tables


def test_readme_commands_are_found_in_order():
    text = "```bash\n# a comment\npython a.py x=1 \\\n    y=2   # why\nmake b\n```\n```python\nc()\n```\n"
    assert readme_commands(text) == ["python a.py x=1 y=2", "make b"]
    assert readme_commands()[:2] == ["make demo", "make test"]


def test_every_skip_names_a_readme_command():
    commands = readme_commands()
    stale = [key for key in SKIP if not any(key in c for c in commands)]
    assert not stale, f"SKIP entries that match no README command (remove or re-point them): {stale}"
    stale = [key for key in SYNOPSES if not any(key in c for c in commands)]
    assert not stale, f"SYNOPSES entries that match no README command: {stale}"
    stale = [key for key in [*SHORTER, *APPEND] if not any(key in c for c in runnable())]
    assert not stale, f"SHORTER / APPEND entries that match no command the test runs: {stale}"


def test_every_runnable_command_is_fully_substituted():
    known = set(_builders(Path("/tmp"), Path("/tmp"), lambda: Path("/tmp"), lambda kind: Path("/tmp"))) | DYNAMIC

    def resolve(name: str) -> str:
        assert name in known, f"no builder for the resource {name!r}"
        return f"/resource/{name}"

    left = {}
    variables = {}
    for command in runnable():
        if (assigned := assignments(command)) is not None:
            variables.update({name: f"/resource/{name.lower()}" for name in assigned})
            continue
        words = " ".join(substitute(command, resolve, variables)[1:])
        found = {w for w in PLACEHOLDER.findall(words) if w == "..." or w.isupper() or w in BY_VALUE}
        if found - NOT_PLACEHOLDERS:
            left[command] = sorted(found - NOT_PLACEHOLDERS)
    assert not left, f"placeholders without a substitute (add them to BY_KEY / BY_VALUE, or SKIP): {left}"


# ---------------------------------------------------------------------------------------------- slow: run them


def _copy_samples(dest: Path, manifest: str) -> Path:
    shutil.copytree(SAMPLES / "images", dest / "images")
    shutil.copy(SAMPLES / "ratings.jsonl", dest / manifest)
    return dest / manifest


def _split_samples(dest: Path, half: int) -> Path:
    """The samples' first (``half=0``) or second half of the images, as a manifest beside a copy of the images."""
    if not (dest / "images").exists():
        shutil.copytree(SAMPLES / "images", dest / "images")
    rows = [json.loads(line) for line in (SAMPLES / "ratings.jsonl").read_text().splitlines()]
    images = sorted({r["image"] for r in rows})
    keep = set(images[: len(images) // 2] if half == 0 else images[len(images) // 2 :])
    path = dest / ("calibration.jsonl" if half == 0 else "test.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["image"] in keep))
    return path


def _builders(
    tmp: Path, vlm: Path, lm: Callable[[], Path], pipeline: Callable[[str], Path]
) -> dict[str, Callable[[], Path]]:
    """Resource name -> how to make it (heavy imports only when called); ``lm`` and ``pipeline`` give the session's
    tiny text LM and diffusers pipelines (conftest.py)."""

    def protocol() -> Path:  # a copy: calibration writes next to the protocol
        shutil.copytree(SAMPLES / "pace", tmp / "pace")
        return tmp / "pace" / "protocol.json"

    def tasks() -> Path:
        from training.procedural.synthetic import write_inpainting_tasks

        return write_inpainting_tasks(tmp / "tasks", 24, size=64, seed=0)

    def a1_questions() -> Path:
        from training.procedural.perception_questions import write_questions

        return write_questions(tmp / "a1", 8, seed=0)

    return {
        "vlm": lambda: vlm,
        "lm": lm,
        "sd15": lambda: pipeline("sd15-inpaint"),
        "flux": lambda: pipeline("flux-fill"),
        "text_to_image": lambda: pipeline("text-to-image"),
        "ratings": lambda: SAMPLES / "ratings.jsonl",
        "pairs": lambda: SAMPLES / "pairs.jsonl",
        "calibration_split": lambda: _split_samples(tmp / "split", 0),
        "test_split": lambda: _split_samples(tmp / "split", 1),
        "images": lambda: SAMPLES / "images",
        "protocol": protocol,
        "memory": lambda: tmp / "memory",
        "tasks": tasks,
        "a1_questions": a1_questions,
        "a3_first": lambda: _copy_samples(tmp / "a3" / "first", "koniq.jsonl"),
        "a3_second": lambda: _copy_samples(tmp / "a3" / "second", "spaq.jsonl"),
        "heldout": lambda: tmp / "heldout",
        "heldout_ratings": lambda: tmp / "heldout" / "ratings.jsonl",
        "runs": lambda: tmp / "runs",
    }


DYNAMIC = {"new_folder", "new_file", "last_scorer", "last_scores", "last_grpo_scorer"}  # made by Session.get itself


def _record(session: Session, argv: list[str]) -> None:
    """What later commands name as ``DIR/scorer`` and ``DIR/scores.jsonl``: the last SFT's scorer, the last
    evaluation's scores."""
    settings = dict(t.split("=", 1) for t in argv if "=" in t and not t.startswith("-"))
    out = settings.get("out") or settings.get("output_dir")  # (output_dir: the alias)
    if _runs(argv, "training/sft.py", "sft") and out:
        session.last["last_scorer"] = Path(out) / "scorer"
    if _runs(argv, "training/grpo_scorer.py", "grpo-scorer") and out:
        session.last["last_grpo_scorer"] = Path(out) / "scorer"
    if _runs(argv, "reward/evaluate.py", "evaluate") and "out" in settings:
        session.last["last_scores"] = Path(settings["out"]) / "scores.jsonl"


def _runs(argv: list[str], script: str, name: str) -> bool:
    """Whether ``argv`` runs the entry script ``script`` (its file) or the command ``name`` (``-m reward NAME``)."""
    return any(t.endswith(script) for t in argv) or any(
        a == "reward" and b == name for a, b in zip(argv, argv[1:], strict=False)
    )


@pytest.mark.slow
def test_every_readme_command_runs_as_written(tiny_vlm_path, tiny_lm_path, tiny_pipeline_path, tmp_path):
    session = Session(tmp_path, _builders(tmp_path, tiny_vlm_path, lambda: tiny_lm_path, tiny_pipeline_path))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions"),
    }
    failures, variables = [], {}
    for command in runnable():
        if (assigned := assignments(command)) is not None:  # NAME=$(perceptual-rewards --configs): what it prints
            for name, line in assigned.items():
                proc = subprocess.run(substitute(line, str), cwd=ROOT, env=env, capture_output=True, text=True)
                variables[name] = proc.stdout.strip()
                if proc.returncode != 0 or not Path(variables[name]).is_dir():
                    failures.append(f"{command}\n  {name}: exit {proc.returncode}: {proc.stdout}{proc.stderr[-1500:]}")
            continue
        try:
            argv = substitute(command, lambda name: str(session.get(name)), variables)
        except LookupError as missing:  # an earlier command failed: said with its own failure, not in its place
            failures.append(f"{command}\n  not run: {missing}")
            continue
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            failures.append(f"{command}\n  ran: {shlex.join(argv)}\n  exit {proc.returncode}: {proc.stderr[-1500:]}")
            continue
        _record(session, argv)
    for snippet in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        code = RUNS.sub(lambda _: f"{session.get('runs')}/", snippet)  # on what the README's commands wrote
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
        )
        if proc.returncode != 0:
            failures.append(f"the README's Python snippet\n{snippet}\n  exit {proc.returncode}: {proc.stderr[-1500:]}")
    assert not failures, "README / docs commands that fail:\n\n" + "\n\n".join(failures)
    assert json.loads((session.last["last_scores"].parent / "metrics.json").read_text())
