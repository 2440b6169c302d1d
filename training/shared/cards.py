"""What the model cards of SFT's scorer and GRPO's policy share: the YAML front matter the Hub reads, the command
that made the model, and writing ``README.md`` in place of the template trl leaves.

A card's command is rebuilt from the run's settings record (the one ``run.json`` holds), never from the raw command
line: only the settings that differ from the command's defaults are written, and whatever the record leaves out of
``run.json`` stays out of the card too.

Example:
    >>> print(front_matter("Qwen/Qwen2.5-0.5B-Instruct", "transformers", "text-generation", ["grpo"]))
    ---
    base_model: Qwen/Qwen2.5-0.5B-Instruct
    library_name: transformers
    pipeline_tag: text-generation
    tags:
    - grpo
    ---
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reward.core.secrets import redact
from reward.data.files import atomic_write_text
from reward.vlm.hub import is_repo_id

__all__ = [
    "CARD",
    "command_line",
    "front_matter",
    "hub_dataset",
    "how_it_was_made",
    "hub_model",
    "launch_of",
    "launched_as",
    "launcher",
    "write_card_text",
]

CARD = "README.md"


def hub_model(path: str | None) -> str | None:
    """``path`` when it is a Hub model id (not a folder here), else ``None``: only a Hub id is a card's
    ``base_model``."""
    return path if path and is_repo_id(path) and not Path(path).exists() else None


def hub_dataset(source: str | None) -> str | None:
    """The Hub dataset id of an ``hf:ORG/NAME[:SPLIT]`` source (a folder is no Hub dataset).

    >>> hub_dataset("hf:org/photos:test"), hub_dataset("tasks.jsonl")
    ('org/photos', None)
    """
    if not source or not source.startswith("hf:"):
        return None
    name = source[3:].rsplit(":", 1)[0] if source.count(":") > 1 else source[3:]
    return hub_model(name)


def front_matter(
    base_model: str | None,
    library_name: str,
    pipeline_tag: str,
    tags: Sequence[str],
    datasets: Sequence[str | None] = (),
) -> str:
    """The card's YAML front matter; ``base_model`` only for a Hub id, ``datasets`` only their Hub ids."""
    lines = ["---"]
    if hub_model(base_model):
        lines.append(f"base_model: {base_model}")
    lines += [f"library_name: {library_name}", f"pipeline_tag: {pipeline_tag}"]
    lines += ["tags:", *(f"- {t}" for t in tags)]
    hub_data = sorted({d for d in (hub_dataset(s) for s in datasets) if d})
    if hub_data:
        lines += ["datasets:", *(f"- {d}" for d in hub_data)]
    return "\n".join([*lines, "---"])


def write_card_text(folder: str | Path, text: str) -> Path:
    """Write ``folder/README.md`` (replacing any template there, e.g. trl's or peft's); returns its path."""
    path = Path(folder) / CARD
    atomic_write_text(path, text)
    return path


def launcher(env: Mapping[str, str] | None = None) -> str:
    """How this process was started, as a card's command begins: ``accelerate launch`` with the processes, DeepSpeed
    ZeRO stage and mixed precision it was given when accelerate's launcher started it, else ``python``.

    >>> launcher({}), launcher({"ACCELERATE_MIXED_PRECISION": "no"})
    ('python', 'accelerate launch')
    >>> launcher({"ACCELERATE_MIXED_PRECISION": "bf16", "WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true",
    ...           "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"})
    'accelerate launch --num_processes 2 --use_deepspeed --zero_stage 3 --mixed_precision bf16'
    """
    env = os.environ if env is None else env
    precision = env.get("ACCELERATE_MIXED_PRECISION")
    if precision is None:  # every accelerate launcher sets it for the processes it starts
        return "python"
    words = ["accelerate launch"]
    processes = int(env.get("WORLD_SIZE") or 1)
    if processes > 1:
        words.append(f"--num_processes {processes}")
    if env.get("ACCELERATE_USE_DEEPSPEED") == "true":
        words.append(
            "--use_deepspeed"
            + (
                f" --zero_stage {env['ACCELERATE_DEEPSPEED_ZERO_STAGE']}"
                if env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
                else ""
            )
        )
    if precision != "no":
        words.append(f"--mixed_precision {precision}")
    return " ".join(words)


def how_it_was_made(command: str) -> list[str]:
    """A card's closing section: the command that made the model, as a bash block."""
    return ["## How it was made", "", "```bash", command, "```", ""]


def accelerate_prefix(cmdline: Sequence[str], script: str) -> str | None:
    """The ``accelerate launch`` part of a launcher's command line (its options, up to ``script``), or ``None`` when
    ``cmdline`` is no ``accelerate launch`` (``python -m accelerate.commands.launch`` reads the same).

    >>> accelerate_prefix(["/venv/bin/python", "/venv/bin/accelerate", "launch", "--num_processes", "2", "sft.py",
    ...                    "a=1"], "training/sft.py")
    'accelerate launch --num_processes 2'
    >>> accelerate_prefix(["python", "-m", "accelerate.commands.launch", "--cpu", "/repo/training/sft.py"], "sft.py")
    'accelerate launch --cpu'
    """
    args = list(cmdline)
    for i, arg in enumerate(args):
        if arg == "accelerate.commands.launch" and i and args[i - 1] == "-m":
            start = i + 1
            break
        if Path(arg).name == "accelerate" and i + 1 < len(args) and args[i + 1] == "launch":
            start = i + 2
            break
    else:
        return None
    name = Path(script).name
    options = args[start:]
    end = next((i for i, arg in enumerate(options) if Path(arg).name == name or arg == "-m"), len(options))
    return shlex.join(["accelerate", "launch", *options[:end]])


def launch_of(script: str) -> str:
    """How this process was started, as a card's command begins: the ``accelerate launch`` options its launcher was
    given, read from ``/proc`` (the launcher, or torch's elastic agent under it), else :func:`launcher` (accelerate's
    environment, or ``python``)."""
    pid = os.getppid()
    for _ in range(4):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            break
        found = accelerate_prefix([a for a in cmdline if a], script)
        if found:
            return found
        pid = int(stat[1])  # the parent's parent
        if pid <= 1:
            break
    return launcher()


def launched_as(script: str) -> str:
    """``launch_of(script)`` followed by ``script``: ``accelerate launch --cpu training/sft.py``, ``python ...``."""
    return f"{launch_of(script)} {script}"


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out or ({prefix[:-1]: {}} if prefix else {})
    return {prefix[:-1]: node}


def _value(v: Any) -> str:
    if isinstance(v, list | tuple | dict):
        return shlex.quote(json.dumps(v, separators=(",", ":")).replace('"', ""))
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return shlex.quote(str(v))


def command_line(
    script: str,
    settings: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    launch: str = "python",
    groups: Sequence[str] = (),
) -> str:
    """The command that makes these ``settings``: ``LAUNCH SCRIPT`` with a ``key=value`` for each setting that
    differs from ``defaults`` (the command's config composed without overrides; a key it lacks is ``+key``); a secret
    (``trainer.hub_token``, an API key) is written ``<secret given>``. A config group in ``groups`` is chosen first
    by name (``reward=NAME``, its ``name`` key), then its keys follow.

    >>> command_line("training/sft.py", {"a": 1, "t": {"lr": 0.1, "x": [1, 2]}}, {"a": 1, "t": {"lr": 0.2}})
    "python training/sft.py t.lr=0.1 +t.x='[1,2]'"
    >>> command_line("rl/grpo.py", {"reward": {"name": "qbench", "model": "/m"}}, {"reward": {"name": "qbench"}},
    ...              launch="accelerate launch", groups=["reward"])
    'accelerate launch rl/grpo.py reward=qbench +reward.model=/m'
    """
    now, base = _flat(redact(settings)), _flat(defaults)  # a secret is said to be given, never shown
    chosen = [
        f"{group}={_value(now[f'{group}.name'])}" for group in groups if isinstance(now.get(f"{group}.name"), str)
    ]
    parts = [
        f"{'' if key in base else '+'}{key}={_value(value)}"
        for key, value in now.items()
        if (key not in base or base[key] != value) and key not in {f"{g}.name" for g in groups}
    ]
    return " ".join([launch, script, *chosen, *parts])
