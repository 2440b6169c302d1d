"""What ``reward/evaluate.py`` does, as a function of its config (tests call it directly)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from reward.core.config import to_plain
from reward.data import load_ratings
from reward.eval.evaluation import EvalSettings, evaluate_rows, format_table, write_results
from reward.eval.parallel import process_state
from reward.rewards.registry import get_reward, reward_info

logger = logging.getLogger(__name__)


def settings_from(cfg: Any) -> EvalSettings:
    c = to_plain(cfg)
    return EvalSettings(
        batch_size=int(c.get("batch_size", 16)),
        skip_bad=bool(c.get("skip_bad", False)),
        max_decode_pixels=c.get("max_decode_pixels", 36_000_000),
        mos_range=tuple(c.get("mos_range", (1.0, 5.0))),  # type: ignore[arg-type]
        tau_low=float(c.get("hor", {}).get("tau_low", 3.0)),
        tau_high=float(c.get("hor", {}).get("tau_high", 4.0)),
        bootstrap=int(c.get("bootstrap", 0)),
        seed=int(c.get("seed", 0)),
        num_workers=int(c.get("num_workers", 2)),
    )


def run_evaluate(cfg: Any) -> dict[str, Any]:
    """Load the manifest, build the reward, score, write metrics/scores/plots; returns the metrics."""
    c = to_plain(cfg)
    reward_cfg = dict(c.get("reward") or {})
    name = reward_cfg.pop("name", None)
    if not name:
        raise ValueError("no reward chosen: pass reward=NAME (e.g. reward=qbench reward.model=PATH)")
    if not c.get("data"):
        raise ValueError("no data given: pass data=MANIFEST.jsonl (or a datasets folder)")
    if not c.get("out"):
        raise ValueError("no output folder given: pass out=DIR")
    settings = settings_from(c)
    manifest = load_ratings(
        c["data"],
        skip_bad=settings.skip_bad,
        check_images=False,
        max_pixels=settings.max_decode_pixels,
        mos_range=settings.mos_range,
        lazy_images=True,
    )
    spec = reward_info(name)
    state = process_state()
    if "device" in reward_cfg and reward_cfg["device"] is None and reward_cfg.get("device_map") is None:
        reward_cfg["device"] = str(state.device)  # each process on its own GPU under accelerate launch
    reward = get_reward(name, reward_cfg)
    base = Path(c["data"]).resolve().parent if Path(str(c["data"])).is_file() else None
    result = evaluate_rows(
        reward,
        manifest.rows,
        settings,
        score_range=spec.score_range,
        base=base,
        source=manifest.source,
        out_dir=c["out"],
        resume=bool(c.get("resume", False)),
        distributed=True,
    )
    result.skipped = sorted(manifest.skipped + result.skipped, key=lambda s: s.line)
    if state.is_main_process:
        paths = write_results(c["out"], result, settings, spec.score_range, title=name)
        logger.info(
            "reward %s on %s (%d rows, %d skipped, %d processes)\n%s",
            name,
            c["data"],
            len(manifest.rows),
            len(result.skipped),
            state.num_processes,
            format_table(result.metrics),
        )
        logger.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    state.wait_for_everyone()
    return {**result.metrics, "skipped": len(result.skipped), "meta": result.meta}
