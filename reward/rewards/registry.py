"""The reward registry: the single source of reward names and their metadata (``higher_is_better``,
``score_range``, the settings dataclass: the Hydra schema of ``configs/reward/NAME.yaml``). Callers read the
metadata, never the name; ``package.module:factory`` names a custom reward declared with :func:`declare_reward`.

Other packages (ours above this one included) declare rewards as entry points of :data:`ENTRY_POINTS`::

    [project.entry-points."perceptual_rewards.rewards"]
    my-reward = "my_package:MY_REWARD"   # a dict of register_reward's arguments (factory, metadata, config)

registered when the names are first read (factory and settings stay import paths until a reward is built).

Example:
    >>> from reward import list_rewards
    >>> "qbench" in list_rewards()
    True
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from typing import TYPE_CHECKING, Any

from reward.core.config import to_plain
from reward.core.errors import UserError
from reward.core.registry import Registry, import_path

if TYPE_CHECKING:  # torch is imported when a reward is built, not when a command reads the names
    from reward.rewards.base import Reward

logger = logging.getLogger(__name__)

Factory = Callable[[dict[str, Any]], "Reward"]
ENTRY_POINTS = "perceptual_rewards.rewards"  # the entry point group of rewards declared by other packages
DISTRIBUTION = "perceptual-rewards"  # this project, whose own packages declare rewards that way too


def _register_entry_points() -> None:
    """Register every reward declared as an entry point of :data:`ENTRY_POINTS` (a name registered already, e.g.
    by the user's code, is kept); one that cannot be loaded is named in a warning and left out."""
    points = metadata.entry_points(group=ENTRY_POINTS)
    for point in points:
        if point.name in REWARDS:
            logger.debug("reward %r is registered already: entry point %s not used", point.name, point.value)
            continue
        try:
            registration = point.load()
        except Exception as err:  # noqa: BLE001 - one broken package must not hide every other reward
            logger.warning("reward %r (entry point %s) could not be loaded: %s", point.name, point.value, err)
            continue
        register_reward(point.name, **registration)
    if note := install_note():
        logger.warning("%s", note)


def install_note() -> str | None:
    """Why this project's own entry point rewards are missing (it is not installed, or its installed metadata is
    older than the entry points: a checkout updated without reinstalling), or ``None``."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return (
            f"{DISTRIBUTION} is not installed, so the rewards its packages declare as entry points "
            f"({ENTRY_POINTS}) are missing: install it with pip install -e . (make does it)"
        )
    if not dist.entry_points.select(group=ENTRY_POINTS):
        return (
            f"the installed metadata of {DISTRIBUTION} has no {ENTRY_POINTS} entry points (installed before they "
            "were added?), so the rewards its packages declare there are missing: reinstall it with pip install -e . "
            "(make does it)"
        )
    return None


REWARDS = Registry(
    "reward", required=("higher_is_better", "score_range", "description"), discover=_register_entry_points
)


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: how to build it and how to read its scores."""

    name: str
    factory: str | Factory  # a callable, or "package.module:function" imported on first use
    higher_is_better: bool
    score_range: tuple[float, float]
    description: str
    config: str | type | None = None  # its settings dataclass (or "package.module:Class"), the Hydra schema
    dimensions: str | Callable[[dict[str, Any]], list[str] | None] | None = None  # see reward_dimensions


def register_reward(
    name: str,
    factory: str | Factory,
    *,
    higher_is_better: bool,
    score_range: tuple[float, float],
    description: str,
    config: str | type | None = None,
    dimensions: str | Callable[[dict[str, Any]], list[str] | None] | None = None,
) -> RewardSpec:
    """Register a reward under a kebab-case ``name``; metadata is required. ``dimensions`` (optional): a function of
    the reward's settings giving the dimensions it scores without building it (:func:`reward_dimensions`)."""
    spec = replace(_spec(name, factory, higher_is_better, score_range, description, config), dimensions=dimensions)
    REWARDS.register(
        name, spec, higher_is_better=higher_is_better, score_range=spec.score_range, description=description
    )
    return spec


def _spec(name: str, factory: Any, higher: Any, score_range: Any, description: str, config: Any) -> RewardSpec:
    if not isinstance(higher, bool):
        raise ValueError(f"reward {name!r}: higher_is_better must be true or false, got {higher!r}")
    return RewardSpec(name, factory, higher, checked_range(f"reward {name!r}", score_range), description, config)


def checked_range(name: str, span: Any, finite: bool = False) -> tuple[float, float]:
    """``span`` as ``(low, high)`` floats with ``low < high`` (finite ones when ``finite``: a range to normalise by).

    >>> checked_range("r", (1, 1))
    Traceback (most recent call last):
    ...
    ValueError: r: score_range=(1, 1) must be (low, high) with low < high, e.g. (1.0, 5.0)
    """
    try:
        if isinstance(span, str | bytes) or any(isinstance(v, str | bytes) for v in span):
            raise TypeError
        low, high = (float(v) for v in span)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: score_range={span!r} must be two numbers (low, high), e.g. (1.0, 5.0)") from None
    if not low < high:
        raise ValueError(f"{name}: score_range={span!r} must be (low, high) with low < high, e.g. (1.0, 5.0)")
    if finite and not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name}: normalize=True needs a finite score_range, got {span!r}")
    return low, high


def declare_reward(*, higher_is_better: bool, score_range: tuple[float, float], description: str = "") -> Callable:
    """Decorate a reward factory used by import path (``reward=package.module:factory``) with its metadata.

    >>> @declare_reward(higher_is_better=True, score_range=(0, 1))
    ... def build(cfg):
    ...     ...
    >>> build.reward_metadata["score_range"]
    (0, 1)
    """

    def mark(factory: Callable) -> Callable:
        factory.reward_metadata = {  # type: ignore[attr-defined]
            "higher_is_better": higher_is_better,
            "score_range": score_range,
            "description": description,
        }
        return factory

    return mark


def list_rewards() -> list[str]:
    """Names of the registered rewards, sorted."""
    return REWARDS.names()


def reward_info(name: str) -> RewardSpec:
    """The registration of ``name`` (metadata such as ``score_range``); unknown names fail with suggestions.

    ``package.module:factory`` names a custom reward; its factory must carry :func:`declare_reward` metadata.
    """
    if ":" in name and name not in REWARDS:
        factory = import_path(name, what="reward factory")
        meta = getattr(factory, "reward_metadata", None)
        if not meta:
            raise UserError(
                f"reward {name!r} does not declare its direction and score range: decorate the factory with "
                "@reward.declare_reward(higher_is_better=..., score_range=(low, high)), or register it with "
                "reward.register_reward(...)"
            )
        return _spec(
            name,
            factory,
            meta.get("higher_is_better"),
            meta.get("score_range"),
            meta.get("description", "custom reward from an import path"),
            None,
        )
    note = f" Note: {install_note()}." if name not in REWARDS and install_note() else ""
    return REWARDS.get(name, hint=" A custom one can be given as 'package.module:factory'." + note).target


def get_reward(name: str, cfg: Mapping[str, Any] | Any | None = None, **overrides: Any) -> Reward:
    """Build the reward ``name`` from a config node (Hydra or plain mapping) and keyword overrides."""
    spec = reward_info(name)
    values = dict(cfg) if isinstance(cfg, dict) else to_plain(cfg)  # (a plain dict: copied, not converted)
    values.pop("name", None)
    values.update(overrides)
    factory = import_path(spec.factory, what="reward factory") if isinstance(spec.factory, str) else spec.factory
    reward = factory(values)
    try:
        reward.reward_spec = spec  # type: ignore[attr-defined]  # its metadata travels with it (rerank, trl)
    except AttributeError:  # a custom reward with __slots__: callers then pass the metadata themselves
        pass
    return reward


def spec_of(reward: Any) -> RewardSpec | None:
    """The registration a reward was built from by :func:`get_reward` (``None`` for one constructed directly)."""
    spec = getattr(reward, "reward_spec", None)
    return spec if isinstance(spec, RewardSpec) else None


def reward_dimensions(name: str, cfg: dict[str, Any]) -> list[str] | None:
    """The dimensions the reward ``name`` built from the settings ``cfg`` would score, known before it loads (its
    registration's ``dimensions``: ``sa-iqa`` reads its folder's ``sa_iqa.json``), or ``None`` when not known."""
    read = reward_info(name).dimensions
    read = import_path(read, what="reward dimensions") if isinstance(read, str) else read
    return read(cfg) if read is not None else None


def reward_config(name: str) -> type | None:
    """The settings dataclass of the registered reward ``name`` (the ``reward`` config group's option), or ``None``."""
    config = REWARDS.get(name).target.config if name in REWARDS else None
    return import_path(config, what="reward config") if isinstance(config, str) else config


register_reward(
    "qbench",
    "reward.rewards.qbench:build",
    higher_is_better=True,
    score_range=(0.0, 1.0),
    description="Q-Bench+ zero-shot: softmax of good vs poor at the answer position (optionally synonym sets)",
    config="reward.rewards.settings:QBenchConfig",
)
register_reward(
    "sa-iqa",
    "reward.rewards.sa_iqa:build",
    higher_is_better=True,
    score_range=(1.0, 5.0),
    description="SA-IQA fine-tuned scorer: expected value over five level words per dimension, fused by BT weights",
    config="reward.rewards.settings:SaIqaConfig",
    dimensions="reward.rewards.scorer_folder:scorer_dimensions",
)
register_reward(
    "chat-judge",
    "reward.rewards.chat_judge:build",
    higher_is_better=True,
    score_range=(1.0, 5.0),
    description='a chat model over an OpenAI-compatible API asked SA-IQA App. B.2\'s prompt, its {"score": N} read',
    config="reward.rewards.settings:ChatJudgeConfig",
)
register_reward(
    "reasoning-iqa",
    "reward.rewards.reasoning_iqa:build",
    higher_is_better=True,
    score_range=(1.0, 5.0),
    description="a GRPO-trained scorer (Q-Insight, VisualQuality-R1): K answers parsed and averaged, or E[digit]",
    config="reward.rewards.reasoning_iqa:ReasoningIqaConfig",
)
