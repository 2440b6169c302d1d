"""The model cards (``README.md``) of SFT's scorer and GRPO's policy: a ``huggingface_hub.ModelCard`` from one Jinja
template, ``card.md`` beside this file, its front matter a ``ModelCardData``. A card's command is rebuilt from the
run's settings record, never from the raw command line: the settings that differ from the command's defaults, every
secret written ``<secret given>``. A card is made to be pushed: it names no folder of this machine (:func:`public`);
a base model is named by its Hub id, else as a local checkpoint by its folder's name and architecture.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reward.core.secrets import redact
from reward.data.files import atomic_write_text
from reward.vlm.hub import is_repo_id

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

TEMPLATE = Path(__file__).with_name("card.md")
TITLES = {
    "scorer": "SA-IQA scorer",
    "policy": "GRPO prompt-expansion policy",
    "generator": "Flow-GRPO LoRA adapter",
}
LOCATION = "THIS_FOLDER_OR_REPO_ID"  # where a reader loads a model from, when it is no Hub repo
SCORER_TAGS = ("image-quality-assessment", "reward-model", "sa-iqa", "vision-language-model", "perceptual-rewards")
SCORER_METRICS = ["srcc", "plcc", "krcc", "hor", "n"]
CACHED = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/")  # a Hub model's snapshot in the Hugging Face cache


def public(value: Any) -> Any:
    """``value`` as a card writes it: a local path (one found here, or an absolute one) by its last name, also inside
    ``hf:PATH:SPLIT`` and ``NAME:FOLDER:SPLIT``, and in the lists and mappings of a settings record; a Hub id, a URL
    and any other text as given.

    >>> public("/home/me/data/ratings.jsonl"), public("hf:/home/me/set:test"), public("Qwen/Qwen2-VL-2B-Instruct")
    ('ratings.jsonl', 'hf:set:test', 'Qwen/Qwen2-VL-2B-Instruct')
    """
    if isinstance(value, Mapping):
        return {k: public(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [public(v) for v in value]
    if not isinstance(value, str) or "://" in value:
        return value
    parts = value.split(":")
    for i, part in enumerate(parts):
        absolute = part.startswith(("/", "~/")) and not any(c.isspace() for c in part)
        with contextlib.suppress(OSError, ValueError):  # (a name too long for a path, a NUL: text)
            if absolute or ("/" in part and Path(part).exists()):
                parts[i] = Path(part).name or part
    return ":".join(parts)


def base_model(model: str) -> tuple[str | None, str]:
    """The Hub id of ``model`` (a Hub id given as such, or the repo of a snapshot in the Hugging Face cache) and how a
    card names it: the id, else the local checkpoint by its folder's name and its architecture.

    >>> base_model("Qwen/Qwen2-VL-2B-Instruct")
    ('Qwen/Qwen2-VL-2B-Instruct', '`Qwen/Qwen2-VL-2B-Instruct`')
    >>> base_model("/home/me/.cache/huggingface/hub/models--Qwen--Qwen2-VL-2B-Instruct/snapshots/0a1b")[0]
    'Qwen/Qwen2-VL-2B-Instruct'
    """
    if hub := _hub(model):
        return hub, f"`{hub}`"
    if cached := CACHED.search(Path(model).expanduser().resolve().as_posix() + "/"):
        return f"{cached[1]}/{cached[2]}", f"`{cached[1]}/{cached[2]}`"
    config = Path(model).expanduser() / "config.json"
    architecture = None
    with contextlib.suppress(OSError, ValueError, TypeError, IndexError):
        architecture = json.loads(config.read_text(encoding="utf-8"))["architectures"][0]
    return None, f"the local {architecture + ' ' if architecture else ''}checkpoint `{public(model)}`"


def _hub(name: str | None, *, dataset: bool = False) -> str | None:
    """``name`` if it is a Hub id (no local folder); ``dataset``: the id of an ``hf:ORG/NAME[:SPLIT]`` source."""
    if dataset:
        name = name[3:].split(":")[0] if name and name.startswith("hf:") else None
    return name if name and is_repo_id(name) and not Path(name).exists() else None


def model_card(
    kind: str,
    model: str,
    *,
    adapter: bool,
    pipeline_tag: str,
    tags: Sequence[str],
    sources: Sequence[str | None],
    results: Sequence[tuple[str, str, Any]] = (),
    tested_on: str | None = None,
    library: str | None = None,
    template: Path = TEMPLATE,
    **text: Any,
) -> ModelCard:
    """The card of a ``kind`` (``scorer`` or ``policy``) trained from ``model``: its front matter names ``model``
    only as a Hub id (:func:`base_model`) and of the data ``sources`` only the Hub datasets (``hf:ORG/NAME[:SPLIT]``);
    ``results`` are ``(metric, name, value)`` measured on ``tested_on``, the card's model-index when that is a Hub
    dataset (a value that is no finite number is left out); ``library``: the front matter's (default: peft for an
    adapter, else transformers); ``template``: another Jinja template (Flow-GRPO's generator card); ``text`` fills
    it, local paths by their names (:func:`public`)."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData  # when a card is written, not at import

    model_id, named = base_model(model)
    hub, split = _hub(tested_on, dataset=True), ((tested_on or "").split(":")[2:] or [None])[0]
    evals = [
        EvalResult(pipeline_tag, hub, hub, metric, float(v), metric_name=name, dataset_split=split)
        for metric, name, v in results
        if hub and isinstance(v, int | float) and math.isfinite(v)
    ]
    data = ModelCardData(
        base_model=model_id,
        datasets=sorted({d for s in sources if (d := _hub(s, dataset=True))}) or None,
        library_name=library or ("peft" if adapter else "transformers"),
        pipeline_tag=pipeline_tag,
        tags=list(tags),
        model_name=TITLES[kind] if evals else None,
        eval_results=evals or None,
    )
    text = {k: v if k in ("command", "user", "messages") else public(v) for k, v in text.items()}
    return ModelCard.from_template(
        data, template_path=str(template), kind=kind, title=TITLES[kind], model=named, adapter=adapter, **text
    )


def scorer_card(
    *,
    base_model: str,
    dimensions: Mapping[str, str],
    level_words: Sequence[str],
    level_values: Sequence[float],
    train_data: str,
    command: str,
    test_data: str | None = None,
    prompt_type: int = 4,
    adapter: bool = False,
    metrics: Mapping[str, Any] | None = None,
    data_info: Mapping[str, Mapping[str, Any]] | None = None,
    steps: int | None = None,
    location: str = LOCATION,
    **text: Any,
) -> ModelCard:
    """The card of a scorer fine-tuned from ``base_model`` (a Hub id or a folder): ``dimensions`` maps a name to its
    definition ("" when the prompt type has none), ``metrics`` is metrics.json's entries per dimension, ``data_info``
    the "train"/"test" data's split and rule, ``location`` where a reader loads the scorer from (a Hub repo id; a
    folder here is written :data:`LOCATION`), ``adapter`` whether the folder holds a LoRA
    adapter; ``text``: more of the template's fields (``method``, ``reward_name``).

    >>> card = scorer_card(base_model="Qwen/Qwen2-VL-2B-Instruct", dimensions={"lighting": ""}, level_words=["good"],
    ...                    level_values=[5.0], train_data="r.jsonl", command="python training/sft.py")
    >>> card.data.base_model, "| good | 5 |" in str(card)
    ('Qwen/Qwen2-VL-2B-Instruct', True)
    """
    info = {k: (data_info or {}).get(k) or {} for k in ("train", "test")}
    metrics = {dim: v for dim, v in (metrics or {}).items() if isinstance(v, Mapping)}
    held_out = test_data != train_data or bool(info["test"].get("split"))
    return model_card(
        "scorer",
        base_model,
        adapter=adapter,
        pipeline_tag="image-text-to-text",
        tags=SCORER_TAGS,
        sources=[train_data, test_data],
        results=[
            (m, f"{dim} {m.upper()}", v.get(m)) for dim, v in metrics.items() for m in SCORER_METRICS[:3] if held_out
        ],
        tested_on=test_data,
        dimensions=[[d, text or f"(prompt type {prompt_type}: none)"] for d, text in dimensions.items()],
        words=[[w, f"{v:g}"] for w, v in zip(level_words, level_values, strict=True)],
        metric_names=SCORER_METRICS,
        metrics=[
            [dim, *(f"{v[m]:.3f}" if isinstance(v.get(m), float) else str(v.get(m, "")) for m in SCORER_METRICS)]
            for dim, v in metrics.items()
        ],
        train_data=train_data,
        test_data=test_data,
        info=info,
        held_out=held_out,
        prompt_type=prompt_type,
        steps=steps,
        location=location if public(location) == location else LOCATION,
        command=command,
        **text,
    )


def write_card(folder: str | Path, card: ModelCard) -> Path:
    """Write ``folder/README.md`` in one step (replacing any template there, e.g. trl's or peft's)."""
    return atomic_write_text(Path(folder) / "README.md", str(card))


def launch_of(script: str) -> str:
    """How this process was started, as a card's command begins: ``accelerate launch`` with the options its launcher
    was given (read from the launcher's command line, or that of torch's elastic agent under it), else ``python``."""
    import psutil  # accelerate's own dependency

    for proc in psutil.Process().parents()[:4]:
        try:
            args = proc.cmdline()
        except psutil.Error:
            continue
        for i, arg in enumerate(args):
            module = arg == "accelerate.commands.launch" and args[i - 1 : i] == ["-m"]
            if module or (Path(arg).name == "accelerate" and args[i + 1 : i + 2] == ["launch"]):
                options = args[i + (1 if module else 2) :]
                end = next((j for j, a in enumerate(options) if a == "-m" or Path(a).name == Path(script).name), None)
                return shlex.join(["accelerate", "launch", *public(options[:end])])  # a config file by its name
    return "python"


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out = {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
        return out or ({prefix[:-1]: {}} if prefix else {})
    return {prefix[:-1]: node}


def _value(v: Any) -> str:
    if isinstance(v, list | tuple | dict):
        return shlex.quote(json.dumps(v, separators=(",", ":")).replace('"', ""))
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else shlex.quote(str(v))


def command_line(
    script: str,
    settings: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    launch: str = "python",
    groups: Sequence[str] = (),
) -> str:
    """``LAUNCH SCRIPT`` with a ``key=value`` for each setting that differs from ``defaults`` (a key they lack is
    ``+key``); a secret is written ``<secret given>``, a local path by its name (:func:`public`). A config group in
    ``groups`` is chosen first by its ``name``.

    >>> command_line("training/sft.py", {"a": 1, "t": {"lr": 0.1, "x": [1, 2]}}, {"a": 1, "t": {"lr": 0.2}})
    "python training/sft.py t.lr=0.1 +t.x='[1,2]'"
    >>> command_line("rl/grpo.py", {"reward": {"name": "qbench", "model": "/m"}}, {"reward": {"name": "qbench"}},
    ...              launch="accelerate launch", groups=["reward"])
    'accelerate launch rl/grpo.py reward=qbench +reward.model=m'
    """
    now, base = _flat(redact(settings)), _flat(defaults)
    names = [f"{g}.name" for g in groups]
    chosen = [f"{name[:-5]}={_value(now[name])}" for name in names if isinstance(now.get(name), str)]
    parts = [
        f"{'' if key in base else '+'}{key}={_value(public(value))}"
        for key, value in now.items()
        if (key not in base or base[key] != value) and key not in names
    ]
    return " ".join([w for w in (launch, script) if w] + chosen + parts)


def settings_command(script: str, config_name: str, schema: type, settings: Mapping[str, Any]) -> str:
    """The command that makes ``settings``, run as this process was (``perceptual-rewards NAME``, ``-m reward NAME``
    or the file): :func:`command_line` against the command's config composed with the groups chosen in ``settings``."""
    from omegaconf import OmegaConf

    from reward.core.cli import compose
    from reward.core.errors import UserError

    groups = list(getattr(schema, "groups", {}))
    chosen = [f"{g}={v['name']}" for g in groups if isinstance(v := settings.get(g), Mapping) and v.get("name")]
    defaults: Any = {}
    for overrides in (chosen, []):
        with contextlib.suppress(UserError):
            defaults = OmegaConf.to_container(compose(config_name, overrides, schema=schema))
            break
    launch, argv = launch_of(script), list(sys.orig_argv)
    for i, arg in enumerate(argv[:-1]):  # run by the console script or as the module, not by the file
        if Path(arg).name == "perceptual-rewards":
            script, launch = f"perceptual-rewards {argv[i + 1]}", ""
        elif arg == "-m" and argv[i + 1 : i + 2] == ["reward"] and i + 2 < len(argv):
            script = f"-m reward {argv[i + 2]}"
    return command_line(script, settings, defaults, launch=launch, groups=groups)
