"""Any registered reward, by name, as trl reward functions over inpainted images.

:class:`RewardSet` builds rewards with ``reward.get_reward(name, cfg)`` and reads their direction and range from the
registry (``higher_is_better``, ``score_range``), never from their names; ``normalize`` maps each onto [0, 1] with
1 = best, so several rewards can be mixed with trl's ``reward_weights``. A batch a reward raises on (a bad image:
``ValueError``, ``RuntimeError``, ``OSError``) is retried item by item; an item that fails or scores NaN gives
``None``. A :class:`~reward.core.errors.UserError` (every scoring server down, a setting) is not an item's problem
and propagates.

:class:`InpaintingRewards` is what ``GRPOTrainer`` calls: ``(prompts, completions, task_id, ...) -> list[float |
None]`` per reward. It inpaints each completion (the expanded prompt) into its task once per batch, shared by all
rewards, with one generator seed per task and step (common random numbers: a group's completions differ only in
their prompts), and logs per-reward and per-dimension means, failure counts and timings with trl's ``log_metric``,
the prompts used and sample image paths with ``log_extra``. With several rewards, an item that one reward failed on
gets ``None`` from all of them: trl sums the rewards with ``nansum``, which would count the failed one as 0. Rewards
scored through servers (``backend=openai``) also log their requests, failures (``server_failed``, and per reason
``server_failed/REASON``), retries and missing top-k mass. Every batch is tallied (:class:`RewardTally`) for
:class:`rl.reward_guard.RewardGuard`, which stops a run whose rewards fail. When every scoring server is down the
batch gets ``None`` from every reward and the tally names the servers.
Sample images are written by the main process only (its share of the batch), so processes never share a file.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from reward import get_reward, reward_info
from reward.core.config import to_plain
from reward.core.errors import UserError
from reward.data.files import append_jsonl, json_safe
from reward.vlm.server import ServersDown, served_stats
from rl.generators import Generator, inpaint_each
from rl.inpaint_tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class ScoreResult:
    """Scores of one reward for a batch: ``value`` (normalised if asked) and ``raw`` per item, ``None`` = failed."""

    value: list[float | None]
    raw: list[float | None]
    dimensions: dict[str, list[float | None]] = field(default_factory=dict)
    failed: int = 0


@dataclass
class NamedReward:
    label: str  # unique name in logs: the reward name, suffixed when the same reward appears twice
    name: str
    reward: Any
    higher_is_better: bool
    score_range: tuple[float, float]


def reward_has_device(name: str) -> bool:
    """Whether the registered reward ``name``'s settings have a ``device`` field (custom import paths: no)."""
    import dataclasses

    from reward.core.registry import import_path

    try:
        config = reward_info(name).config
    except ValueError:
        return False
    if isinstance(config, str):
        config = import_path(config, what="reward config")
    return config is not None and any(f.name == "device" for f in dataclasses.fields(config))


server_stats = served_stats  # the request counters of a reward scored through servers, else None


def reward_configs(entries: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, config)`` pairs from config nodes with a ``name`` key, or bare names (empty config)."""
    out = []
    for entry in entries:
        if isinstance(entry, str):
            out.append((entry, {}))
            continue
        cfg = to_plain(entry)
        if not cfg.get("name"):
            raise ValueError(f"reward config {cfg} has no 'name'; use e.g. {{name: qbench, model: PATH}}")
        out.append((str(cfg.pop("name")), cfg))
    return out


class RewardSet:
    """Several rewards, each built from the registry, scored on the same images."""

    def __init__(
        self, entries: Sequence[Any], *, normalize: bool = True, built: Mapping[str, Any] | None = None
    ) -> None:
        self.normalize = normalize
        self.rewards: list[NamedReward] = []
        problems = []
        for name, cfg in reward_configs(entries):
            label = name if all(r.label != name for r in self.rewards) else f"{name}-{len(self.rewards)}"
            try:
                spec = reward_info(name)
                reward = (built or {}).get(label) or get_reward(name, cfg)
            except (ValueError, FileNotFoundError) as err:
                problems.append(f"reward {name!r}: {err}")
                continue
            self.rewards.append(NamedReward(label, name, reward, spec.higher_is_better, spec.score_range))
        if problems:
            raise ValueError("\n".join(problems))
        if not self.rewards:
            raise ValueError("no reward configured: give at least one reward name")

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.rewards]

    def to_unit(self, r: NamedReward, value: float) -> float:
        """``value`` on [0, 1] with 1 = best when normalising and the range is finite; else best = highest."""
        low, high = r.score_range
        if self.normalize and math.isfinite(low) and math.isfinite(high):
            value = (value - low) / (high - low)
            return value if r.higher_is_better else 1.0 - value
        return value if r.higher_is_better else -value

    def score(
        self, images: Sequence[Image.Image | None], prompts: Sequence[str] | None = None
    ) -> dict[str, ScoreResult]:
        """Every reward on the images that exist (``None`` images give ``None`` scores)."""
        idx = [i for i, im in enumerate(images) if im is not None]
        present = [images[i] for i in idx]
        texts = [prompts[i] for i in idx] if prompts is not None else None
        out = {}
        for r in self.rewards:
            raw: list[float | None] = [None] * len(images)
            dims: dict[str, list[float | None]] = {}
            for k, (score, dim_scores) in enumerate(_score_each(r, present, texts)):
                raw[idx[k]] = score
                for d, v in dim_scores.items():
                    dims.setdefault(d, [None] * len(images))[idx[k]] = v
            value = [None if v is None else self.to_unit(r, v) for v in raw]
            failed = sum(1 for i in idx if raw[i] is None)
            out[r.label] = ScoreResult(value, raw, dims, failed)
        return out


ITEM_ERRORS = (ValueError, RuntimeError, OSError)  # what a reward raises on a bad image (not a UserError)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _score_each(
    r: NamedReward, images: Sequence[Image.Image], prompts: Sequence[str] | None
) -> list[tuple[float | None, dict[str, float | None]]]:
    """One batched call; on an error, item by item. NaN or infinite scores become ``None``."""
    if not images:
        return []
    try:
        outs = [r.reward.score(images, prompts)]
        spans = [range(len(images))]
    except UserError:
        raise
    except ITEM_ERRORS as err:  # a bad image: isolate it
        logger.warning("reward %s failed on a batch of %d (%s); scoring item by item", r.label, len(images), err)
        outs, spans = [], []
        for i in range(len(images)):
            try:
                outs.append(r.reward.score([images[i]], None if prompts is None else [prompts[i]]))
                spans.append(range(i, i + 1))
            except UserError:
                raise
            except ITEM_ERRORS as item_err:
                logger.warning("reward %s failed on item %d: %s", r.label, i, item_err)
    result: list[tuple[float | None, dict[str, float | None]]] = [(None, {}) for _ in images]
    for out, span in zip(outs, spans, strict=True):
        for k, i in enumerate(span):
            dims = {d: _finite(float(v[k])) for d, v in out.dimensions.items()}
            result[i] = (_finite(float(out.scores[k])), dims)
    return result


def _copy(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: dict(v) if isinstance(v, dict) else v for k, v in stats.items()}


def completion_text(completion: Any) -> str:
    """The text of a trl completion: a string, or a conversation whose last message holds the text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        content = completion[-1].get("content", "")
        if isinstance(content, list):
            return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
        return str(content)
    return ""


def task_seed(seed: int, task_id: str, step: int) -> int:
    """The generator seed of a task at a step: shared by the task's group, new every step."""
    return zlib.crc32(f"{seed}:{task_id}:{step}".encode()) & 0x7FFFFFFF


@dataclass
class RewardTally:
    """Completions scored since the last look, how many got no usable reward, and why (per reward label)."""

    completions: int = 0
    unusable: int = 0  # an item any training reward failed on (or whose image failed): no reward at all
    inpaint_failed: int = 0
    failed: Counter = field(default_factory=Counter)  # label -> items that reward failed on
    errors: list[str] = field(default_factory=list)  # batch-level errors (every scoring server down)

    def add(self, scores: Mapping[str, ScoreResult], inpaint_failed: int = 0) -> None:
        n = len(next(iter(scores.values())).value) if scores else 0
        self.completions += n
        self.inpaint_failed += inpaint_failed
        self.unusable += sum(1 for i in range(n) if any(r.value[i] is None for r in scores.values()))
        for label, res in scores.items():
            self.failed[label] += sum(1 for v in res.value if v is None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "completions": self.completions,
            "unusable": self.unusable,
            "inpaint_failed": self.inpaint_failed,
            "failed": dict(self.failed),
            "errors": list(self.errors),
        }


@dataclass
class Timing:
    """Seconds spent inpainting and scoring in this process (the policy's sampling and update: see rl.timing)."""

    inpaint_s: float = 0.0
    reward_s: float = 0.0
    batches: int = 0


class InpaintingRewards:
    """Inpaint each completion into its task and score it with every reward of a :class:`RewardSet`."""

    def __init__(
        self,
        generator: Generator,
        rewards: RewardSet,
        tasks: Mapping[str, Task],
        *,
        seed: int = 0,
        samples_dir: str | Path | None = None,
        samples_per_step: int = 4,
        write_samples: bool = True,
    ) -> None:
        self.generator, self.rewards, self.tasks, self.seed = generator, rewards, dict(tasks), seed
        self.samples_dir = Path(samples_dir) if samples_dir and write_samples else None
        self.samples_per_step = samples_per_step
        self.timing = Timing()
        self.tally = RewardTally()  # since the last look of the guard (rl.reward_guard)
        self._cache: tuple[Any, dict[str, ScoreResult]] | None = None

    def functions(self) -> list[Callable[..., list[float | None]]]:
        """One trl reward function per reward (named after it), sharing the generated images."""
        return [self._function(label) for label in self.rewards.labels]

    def _function(self, label: str) -> Callable[..., list[float | None]]:
        def reward_fn(prompts: list[Any], completions: list[Any], task_id: list[str], **kwargs: Any) -> list:
            scores = self.evaluate(completions, task_id, **kwargs)
            value = scores[label].value
            if len(scores) > 1:  # an item any reward failed on is unscored by all (trl's nansum would count 0)
                value = [None if any(r.value[i] is None for r in scores.values()) else v for i, v in enumerate(value)]
            return value

        reward_fn.__name__ = label
        return reward_fn

    def generate(
        self, texts: Sequence[str], task_ids: Sequence[str], step: int
    ) -> tuple[list[Image.Image | None], list[str], dict[str, int]]:
        """Inpaint each text into its task (truncated to the generator's limit); the images (``None`` = failed),
        the prompts used, and counts of empty, truncated and failed items."""
        unknown = sorted({t for t in task_ids if t not in self.tasks})
        if unknown:
            raise ValueError(f"unknown task ids {unknown[:3]}: the dataset and the reward's tasks differ")
        used, cut = self.generator.truncate([t.strip() for t in texts])
        tasks = [self.tasks[t] for t in task_ids]
        results, errors = inpaint_each(
            self.generator,
            [t.image for t in tasks],
            [t.mask for t in tasks],
            used,
            n=1,
            seed=[task_seed(self.seed, t, step) for t in task_ids],
        )
        images = [None if r is None else r[0] for r in results]
        counts = {"empty": sum(1 for t in used if not t), "truncated": sum(cut), "failed": len(errors)}
        return images, used, counts

    def evaluate(self, completions: Sequence[Any], task_ids: Sequence[str], **kwargs: Any) -> dict[str, ScoreResult]:
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", 0))
        key = (step, tuple(map(str, completions)), tuple(task_ids))
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        start = time.perf_counter()
        images, used, counts = self.generate([completion_text(c) for c in completions], task_ids, step)
        self.timing.inpaint_s += time.perf_counter() - start
        before = {r.label: _copy(s) for r in self.rewards.rewards if (s := server_stats(r.reward)) is not None}
        start = time.perf_counter()
        try:
            scores = self.rewards.score(images, used)
        except ServersDown as err:  # every item unscored; the guard stops the run at the end of this step
            logger.warning("%s", err)
            self.tally.errors.append(str(err))
            none: list[float | None] = [None] * len(images)
            scores = {label: ScoreResult(list(none), list(none), {}, len(images)) for label in self.rewards.labels}
        self.timing.reward_s += time.perf_counter() - start
        self.timing.batches += 1
        self.tally.add(scores, counts["failed"])
        self._log(kwargs, step, images, used, counts, scores)
        self._log_servers(kwargs.get("log_metric"), before)
        self._cache = (key, scores)
        return scores

    def _log(
        self,
        kwargs: dict[str, Any],
        step: int,
        images: list[Image.Image | None],
        used: list[str],
        counts: dict[str, int],
        scores: dict[str, ScoreResult],
    ) -> None:
        log_metric = kwargs.get("log_metric")
        log_extra = kwargs.get("log_extra")
        if log_metric is not None:
            for name, value in counts.items():
                log_metric(f"inpaint/{name}", float(value))
            for label, res in scores.items():
                log_metric(f"{label}/failed", float(res.failed))
                for dim, values in res.dimensions.items():
                    ok = [v for v in values if v is not None]
                    if ok:
                        log_metric(f"{label}/{dim}", sum(ok) / len(ok))
                ok = [v for v in res.raw if v is not None]
                if ok:
                    log_metric(f"{label}/raw", sum(ok) / len(ok))
            log_metric("time/inpaint_s", self.timing.inpaint_s)
            log_metric("time/reward_s", self.timing.reward_s)
        paths: list[str | None] = [None] * len(images)
        if self.samples_dir is not None:
            self.samples_dir.mkdir(parents=True, exist_ok=True)
            for k, image in enumerate(images[: self.samples_per_step]):
                if image is not None:
                    path = self.samples_dir / f"step{step:06d}_{k}.png"
                    image.save(path)
                    paths[k] = str(path)
            first = next(iter(scores.values()))
            rows = [
                {"step": step, "k": k, "path": p, "prompt": used[k], "reward": first.value[k]}
                for k, p in enumerate(paths)
                if p is not None
            ]
            append_jsonl(self.samples_dir / "samples.jsonl", json_safe(rows))
        if log_extra is not None:
            log_extra("expanded_prompt", list(used))
            log_extra("sample_image", paths)

    def _log_servers(self, log_metric: Any, before: dict[str, dict[str, Any]]) -> None:
        """Per served reward and batch: requests answered, failed, retried; mean and worst missing top-k mass."""
        if log_metric is None:
            return
        for r in self.rewards.rewards:
            now = server_stats(r.reward)
            if now is None or r.label not in before:
                continue
            old = before[r.label]
            for key in ("requests", "failed", "retries"):
                log_metric(f"{r.label}/server_{key}", float(now[key] - old[key]))
            old_reasons = old.get("failed_reasons") or {}
            for reason, count in (now.get("failed_reasons") or {}).items():
                if count - old_reasons.get(reason, 0):
                    log_metric(f"{r.label}/server_failed/{reason}", float(count - old_reasons.get(reason, 0)))
            answers = now["answers"] - old["answers"]
            if answers:
                log_metric(f"{r.label}/missing_mass", (now["missing_mass_sum"] - old["missing_mass_sum"]) / answers)
