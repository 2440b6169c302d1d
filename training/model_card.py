"""The model card of a trained SA-IQA scorer (``scorer/README.md``): what the Hub shows and what a reader needs.

YAML front matter (``base_model``, ``library_name``, ``tags``, ``datasets``, ``pipeline_tag``) and a body naming the
base model, the data and its split, the dimensions with their definitions, the rating words and their values, the
held-out metrics, the scorer used from Python (as pyiqa's and Q-Align's are) and from the command line, and the command
that made it as it was launched (``accelerate launch ...`` when it was). It replaces the template trl writes
("fine-tuned version of [None]").

Example:
    >>> card = ScorerCard(base_model="Qwen/Qwen2-VL-2B-Instruct", dimensions={"lighting": ""},
    ...                   level_words=["good", "bad"], level_values=[5.0, 1.0], train_data="r.jsonl",
    ...                   command="python training/sft.py model.path=Qwen/Qwen2-VL-2B-Instruct data.train=r.jsonl")
    >>> text = render_card(card)
    >>> text.splitlines()[1], "| good | 5 |" in text
    ('base_model: Qwen/Qwen2-VL-2B-Instruct', True)
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.secrets import redact
from reward.data.files import atomic_write_text
from reward.vlm.hub import is_repo_id

__all__ = ["CARD", "ScorerCard", "command_line", "launched_as", "launcher", "render_card", "write_card"]

CARD = "README.md"
TAGS = ("image-quality-assessment", "reward-model", "sa-iqa", "vision-language-model", "perceptual-rewards")
METRICS = ("srcc", "plcc", "krcc", "hor", "n")


@dataclass
class ScorerCard:
    """What a scorer's card says about it."""

    base_model: str  # the checkpoint fine-tuned (a Hub id or a folder)
    dimensions: Mapping[str, str]  # name -> definition ("" when the prompt type has none)
    level_words: Sequence[str]
    level_values: Sequence[float]
    train_data: str
    command: str
    test_data: str | None = None
    prompt_type: int = 4
    adapter: bool = False  # the folder holds a LoRA adapter (peft) rather than a full model
    metrics: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # dimension -> metrics.json's entries
    data_info: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # "train"/"test" -> split, rule, ...
    steps: int | None = None
    location: str = "THIS_FOLDER_OR_REPO_ID"  # where a reader loads the scorer from: its Hub id or its folder


def _hub_dataset(source: str | None) -> str | None:
    """The Hub dataset id of an ``hf:ORG/NAME[:SPLIT]`` source (a folder is no Hub dataset)."""
    if not source or not source.startswith("hf:"):
        return None
    name = source[3:].rsplit(":", 1)[0] if source.count(":") > 1 else source[3:]
    return name if is_repo_id(name) and not Path(name).exists() else None


def _front_matter(card: ScorerCard) -> str:
    lines = ["---"]
    if is_repo_id(card.base_model) and not Path(card.base_model).exists():
        lines.append(f"base_model: {card.base_model}")
    lines.append(f"library_name: {'peft' if card.adapter else 'transformers'}")
    lines.append("pipeline_tag: image-text-to-text")
    lines += ["tags:", *(f"- {t}" for t in TAGS)]
    hub_data = sorted({d for d in (_hub_dataset(card.train_data), _hub_dataset(card.test_data)) if d})
    if hub_data:
        lines += ["datasets:", *(f"- {d}" for d in hub_data)]
    return "\n".join([*lines, "---"])


def _split(card: ScorerCard, key: str) -> str:
    info = card.data_info.get(key) or {}
    return f" (split {info['split']}: {info.get('split_rule') or 'as given'})" if info.get("split") else ""


def _metrics_table(card: ScorerCard) -> list[str]:
    if not card.metrics:
        return ["No test data was given (data.test): the scorer was not evaluated."]
    rows = ["| dimension | " + " | ".join(METRICS) + " |", "|" + " --- |" * (len(METRICS) + 1)]
    for dim, values in card.metrics.items():
        if not isinstance(values, Mapping):
            continue
        cells = [f"{values[m]:.3f}" if isinstance(values.get(m), float) else str(values.get(m, "")) for m in METRICS]
        rows.append(f"| {dim} | " + " | ".join(cells) + " |")
    note = (
        "The test data is the training data: these numbers are not held out."
        if card.test_data == card.train_data and not _split(card, "test")
        else f"On {card.test_data}{_split(card, 'test')}, not trained on."
    )
    return [note, "", *rows]


def render_card(card: ScorerCard) -> str:
    """The card's Markdown (front matter and body)."""
    dims = ["| dimension | definition |", "| --- | --- |"]
    dims += [
        f"| {d} | {definition or '(prompt type ' + str(card.prompt_type) + ': none)'} |"
        for d, definition in card.dimensions.items()
    ]
    words = ["| word | value |", "| --- | --- |"]
    words += [f"| {w} | {v:g} |" for w, v in zip(card.level_words, card.level_values, strict=True)]
    kind = "a LoRA adapter on" if card.adapter else "a fine-tune of"
    trained = f" for {card.steps} steps" if card.steps else ""
    body = [
        "# SA-IQA scorer",
        "",
        f"{kind.capitalize()} `{card.base_model}` that rates images on {len(card.dimensions)} quality dimensions "
        "with rating words, trained by supervised fine-tuning on the words (SA-IQA, arXiv:2512.05098) with "
        f"perceptual-rewards{trained}. Base model: `{card.base_model}`.",
        "",
        "## Data",
        "",
        f"- training: `{card.train_data}`{_split(card, 'train')}",
        f"- test: `{card.test_data}`{_split(card, 'test')}" if card.test_data else "- test: none",
        "",
        "## Dimensions",
        "",
        f"SA-IQA prompt type {card.prompt_type}; one query per dimension.",
        "",
        *dims,
        "",
        "## Rating words",
        "",
        "A dimension's score is the expected value of these words' values under the model's probabilities after "
        "the dimension's response prefix (SA-IQA eq. 1), in [1, 5].",
        "",
        *words,
        "",
        "## Held-out metrics",
        "",
        *_metrics_table(card),
        "",
        "## Use",
        "",
        "From Python, as pyiqa's and Q-Align's scorers are used (image paths, `pathlib.Path`s, PIL images, tensors or "
        "arrays; one image or a list):",
        "",
        "```python",
        "from reward import get_reward",
        "",
        f'scorer = get_reward("sa-iqa", {{"model": {json.dumps(card.location)}}})',
        'scores = scorer(["photo.png"])  # a tensor of fused scores in [1, 5], one per image',
        'out = scorer.score("photo.png")  # out.scores and out.dimensions: a tensor per dimension',
        "```",
        "",
        "From the command line, on a ratings manifest:",
        "",
        "```bash",
        f"python reward/evaluate.py reward=sa-iqa reward.model={card.location} data=RATINGS.jsonl out=OUT",
        "```",
        "",
        "The folder's `sa_iqa.json` holds the rendered queries, the rating words and their values (and, once "
        "`fusion/fit.py` has run, the fusion weights).",
        "",
        "## How it was made",
        "",
        "```bash",
        card.command,
        "```",
        "",
    ]
    return _front_matter(card) + "\n\n" + "\n".join(body)


def write_card(folder: str | Path, card: ScorerCard) -> Path:
    """Write ``folder/README.md`` (replacing any template there); returns its path."""
    path = Path(folder) / CARD
    atomic_write_text(path, render_card(card))
    return path


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


def launcher(cmdline: Sequence[str], script: str) -> str | None:
    """The ``accelerate launch`` part of a launcher's command line (its options, then ``script``), or ``None`` when
    ``cmdline`` is no ``accelerate launch`` (``python -m accelerate.commands.launch`` reads the same).

    >>> launcher(["/venv/bin/python", "/venv/bin/accelerate", "launch", "--num_processes", "2", "sft.py", "a=1"],
    ...          "training/sft.py")
    'accelerate launch --num_processes 2 training/sft.py'
    >>> launcher(["python", "-m", "accelerate.commands.launch", "--cpu", "/repo/training/sft.py"], "training/sft.py")
    'accelerate launch --cpu training/sft.py'
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
    return shlex.join(["accelerate", "launch", *options[:end], script])


def launched_as(script: str) -> str:
    """How this process was started, up to its settings: ``accelerate launch [options] SCRIPT`` when a launcher
    among its parents is ``accelerate launch`` (read from ``/proc``; where there is none, from accelerate's
    environment: ``--num_processes``), else ``python SCRIPT``."""
    pid = os.getppid()
    for _ in range(4):  # the launcher, or torch's elastic agent under it
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            break
        found = launcher([a for a in cmdline if a], script)
        if found:
            return found
        pid = int(stat[1])  # the parent's parent
        if pid <= 1:
            break
    if any(key.startswith("ACCELERATE_") for key in os.environ):
        processes = os.environ.get("WORLD_SIZE", "1")
        return f"accelerate launch --num_processes {processes} {script}"
    return f"python {script}"


def command_line(
    script: str, settings: Mapping[str, Any], defaults: Mapping[str, Any], *, launch: str | None = None
) -> str:
    """The command that makes these ``settings``: ``launch`` (default ``python SCRIPT``; :func:`launched_as` gives
    the one this process was started with) and a ``key=value`` for each setting that differs from ``defaults`` (the
    command's config composed without overrides; a key it lacks is ``+key``); a secret (``trainer.hub_token``, an
    API key) is written ``<secret given>``.

    >>> command_line("training/sft.py", {"a": 1, "t": {"lr": 0.1, "x": [1, 2]}}, {"a": 1, "t": {"lr": 0.2}})
    "python training/sft.py t.lr=0.1 +t.x='[1,2]'"
    """
    now, base = _flat(redact(settings)), _flat(defaults)  # a secret is said to be given, never shown
    parts = [
        f"{'' if key in base else '+'}{key}={_value(value)}"
        for key, value in now.items()
        if key not in base or base[key] != value
    ]
    return " ".join([launch or f"python {script}", *parts])
