"""What ``perceptual-rewards evaluate`` does: score a ratings manifest with a reward and compare with the human MOS."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import MISSING

from reward.core.config import BATCH, PIXELS, WORKERS, overwrite_field, resume_field, resume_mode
from reward.core.errors import MissingInputError
from reward.core.outputs import Output, check_output, may_change_keys, path_inputs
from reward.core.summary import log_summary
from reward.data import DEFAULT_MAX_PIXELS, load_ratings
from reward.data.datasets import mos_range_of
from reward.data.hf import HfColumns
from reward.data.manifest import allow_absolute_paths_field, image_paths, image_root_field
from reward.data.rows import check_row_images
from reward.eval.evaluation import (
    COMPARE,
    EvalResult,
    EvalSettings,
    NothingScored,
    check_dimensions,
    evaluate_rows,
    format_table,
    write_results,
)
from reward.rewards.base import failure_summary, served_stats, server_report
from reward.rewards.registry import get_reward, reward_config, reward_dimensions, reward_info

logger = logging.getLogger(__name__)

RESAMPLES = (0, 1_000_000)


@dataclass
class HorSettings:
    tau_low: float | None = field(
        default=None,
        metadata={"help": "MOS at or below: a low-quality image (null: 3 on a 1-5 scale, mapped to mos_range)"},
    )
    tau_high: float | None = field(
        default=None,
        metadata={"help": "prediction at or above (on the MOS scale): scored high (null: 4 on 1-5, mapped)"},
    )


@dataclass
class EvaluateSettings:
    """Settings of ``perceptual-rewards evaluate``. Keys marked ``may_change`` may differ when a run is resumed:
    they do not change the scores already written."""

    groups: ClassVar[dict] = {"reward": reward_config}

    reward: Any = field(
        default=MISSING,
        metadata={
            "help": "reward=NAME selects configs/reward/NAME.yaml; its keys are set with reward.KEY=VALUE",
            "may_change": ("batch_size", "device", "device_map"),
        },
    )
    data: str = field(
        default=MISSING,
        metadata={
            "help": (
                'ratings manifest (JSONL: {"image", "dimension", "mos"}), a datasets folder, or a public '
                "dataset read from its own files: NAME:FOLDER[:SPLIT] (e.g. kadid10k:/data/kadid10k:test; "
                "default split all), or a datasets dataset hf:NAME_OR_DIR[:SPLIT] (a save_to_disk or "
                "parquet folder, or a Hub name; all splits)"
            )
        },
    )
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    data_columns: HfColumns = field(
        default_factory=HfColumns, metadata={"help": "data=hf:...: the image, MOS and dimension columns"}
    )
    out: str = field(default=MISSING, metadata={"help": "output folder: metrics.json, scores.jsonl, scatter plots"})
    batch_size: int = field(
        default=16, metadata={"help": "images per reward call", "may_change": True, "range": BATCH}
    )
    num_workers: int = field(
        default=2,
        metadata={
            "help": "DataLoader workers decoding images while the model scores (0: in the main process)",
            "may_change": True,
            "range": WORKERS,
        },
    )
    resume: str = resume_field(
        "auto: continue the same run in out/ (after a crash): score only the missing images | never", default="never"
    )
    overwrite: bool = overwrite_field(
        "true: an out/ holding another run is moved aside to out.old-<time> (never deleted)"
    )
    skip_bad: bool = field(default=False, metadata={"help": "true: skip (and count) bad rows instead of failing"})
    max_decode_pixels: int | None = field(
        default=DEFAULT_MAX_PIXELS,
        metadata={
            "help": (
                "decode guard: larger images are refused unread (not the processor's budget: that is "
                "reward.max_pixels)"
            ),
            "range": PIXELS,
        },
    )
    mos_range: list[float] | None = field(
        default=None,
        metadata={
            "help": (
                "the MOS scale; null: the dataset's own (NAME:FOLDER, or a manifest written from one), else [1, 5]"
            )
        },
    )
    hor: HorSettings = field(
        default_factory=HorSettings, metadata={"help": "Holistic Override Rate thresholds (PACE eq. 1)"}
    )
    bootstrap: int = field(
        default=0,
        metadata={"help": "resamples for 95% CIs of SRCC and HOR (0: off)", "may_change": True, "range": RESAMPLES},
    )
    compare: str = field(
        default="dimension",
        metadata={
            "help": (
                "dimension: each row against the reward's score of its dimension (rows of a dimension the reward "
                "lacks are skipped and counted); fused: every row against the reward's fused score"
            ),
            "choices": COMPARE,
        },
    )
    seed: int = field(default=0, metadata={"may_change": True})

    def problems(self) -> list[str]:
        found = []
        if not dict(self.reward or {}).get("name"):
            found.append("no reward chosen: pass reward=NAME (e.g. reward=qbench reward.model=PATH)")
        if self.mos_range is not None and (len(self.mos_range) != 2 or not self.mos_range[0] < self.mos_range[1]):
            found.append(f"mos_range={self.mos_range}: give [low, high] with low < high, e.g. mos_range=[1,5]")
        return found


def run(settings: EvaluateSettings) -> dict[str, Any]:
    """Set up, score, report; returns the metrics (``out/metrics.json``, written by the main process)."""
    setup = set_up(settings)
    result = score(setup)
    return report(setup, result)


@dataclass
class Setup:
    """What :func:`set_up` builds for :func:`score` and :func:`report`."""

    settings: EvaluateSettings
    name: str  # the reward's registered name
    score_range: tuple[float, float]  # the reward's, from the registry
    eval_settings: EvalSettings
    manifest: Any  # reward.data.ManifestResult: the rows, the skipped ones, the dataset's info
    reward: Any
    output: Output
    state: Any  # this process (accelerate's PartialState)


def set_up(settings: EvaluateSettings) -> Setup:
    """The reward named, the output folder checked (new, or this same run resumed), the manifest read (images decoded
    later), the reward built on this process's device, and the folder created once every process has checked it."""
    reward_cfg = dict(settings.reward or {})
    name = reward_cfg.pop("name")
    mos_range = settings.mos_range if settings.mos_range is not None else mos_range_of(settings.data)
    kept = ("batch_size", "skip_bad", "max_decode_pixels", "bootstrap", "seed", "num_workers", "compare")
    eval_settings = EvalSettings(  # the scoring settings of reward.eval.evaluation; the MOS scale set, else the data's
        **{k: getattr(settings, k) for k in kept},
        mos_range=(float(mos_range[0]), float(mos_range[1])),
        tau_low=settings.hor.tau_low,
        tau_high=settings.hor.tau_high,
    )
    record = {k: v for k, v in dataclasses.asdict(settings).items() if k != "out"}  # new, or this run resumed
    inputs = {"data": settings.data, **{f"reward.{k}": v for k, v in path_inputs(reward_cfg).items()}}
    output = check_output(
        settings.out,
        "evaluate",
        record,
        inputs,
        resume=resume_mode(settings.resume),
        overwrite=settings.overwrite,
        may_change=may_change_keys(EvaluateSettings),
        resume_hint="resume=auto",
    )
    manifest = load_ratings(
        settings.data,
        skip_bad=eval_settings.skip_bad,
        check_images=False,
        max_pixels=eval_settings.max_decode_pixels,
        mos_range=eval_settings.mos_range,
        columns=settings.data_columns,
        skip_key="skip_bad",
        **image_paths(settings),
    )
    check_images_found(manifest.rows, settings)
    manifest = check_row_images(  # each image exists and is one (its header read): now, not while scoring
        manifest, skip_bad=settings.skip_bad, max_pixels=settings.max_decode_pixels, skip_key="skip_bad"
    )
    spec = reward_info(name)
    if settings.compare == "dimension":  # a scorer without the rows' dimensions: said before it loads
        check_dimensions(manifest.rows, reward_dimensions(name, reward_cfg))
    from reward.eval.parallel import process_state  # torch and accelerate: once the settings and inputs are checked

    state = process_state()
    if "device" in reward_cfg and reward_cfg["device"] is None and reward_cfg.get("device_map") is None:
        reward_cfg["device"] = str(state.device)  # each process on its own GPU under accelerate launch
    reward = get_reward(name, reward_cfg)
    state.wait_for_everyone()  # every process has checked the folder before it is created
    if state.is_main_process:
        output.create()
    state.wait_for_everyone()
    return Setup(settings, name, spec.score_range, eval_settings, manifest, reward, output, state)


def check_images_found(rows: Sequence[Any], settings: EvaluateSettings) -> None:
    """Before the model loads: a manifest none of whose image files is where it says (kept apart from its images)
    is refused naming the folder the paths were read from and ``image_root=DIR`` (files are only looked up here)."""
    paths = [row.image for row in rows if isinstance(row.image, Path)]
    if not paths or len(paths) < len(rows) or any(path.is_file() for path in paths):
        return
    folder = f"image_root {settings.image_root}" if settings.image_root else "the data file's folder"
    raise MissingInputError(
        f"data={settings.data}: none of its {len(paths)} image files is found (e.g. {paths[0]}); relative paths are "
        f"read from {folder}: name the folder that holds the images with image_root=DIR"
    )


def score(setup: Setup) -> EvalResult:
    """Every row scored, data-parallel over the processes (resumed: only the images not yet in ``scores.jsonl``);
    when nothing could be scored, the error names what the reward's servers said."""
    manifest = setup.manifest
    try:
        return evaluate_rows(
            setup.reward,
            manifest.rows,
            setup.eval_settings,
            score_range=setup.score_range,
            source=manifest.source,
            out_dir=setup.settings.out,
            resume=setup.output.resumed,
            distributed=True,
        )
    except NothingScored as err:
        served = served_stats(setup.reward)
        raise NothingScored(f"{err}; reward {setup.name}: {failure_summary(served)}" if served else str(err)) from None


def report(setup: Setup, result: EvalResult) -> dict[str, Any]:
    """What the numbers are (the servers' failures, the run, the reward's record, the dataset), then on the main
    process ``metrics.json``, ``scores.jsonl``, the plots, the table and the closing summary."""
    name, manifest = setup.name, setup.manifest
    served = served_stats(setup.reward)
    if served is not None:  # how many items the scoring servers failed on, and why
        result.meta["server"] = server_report(served)
    result.meta["run"] = setup.output.provenance()
    if getattr(setup.reward, "record", None):  # what the numbers are (e.g. sa-iqa's fusion: mean | bradley-terry)
        result.meta["reward"] = setup.reward.record
    if manifest.info:  # a dataset by name: its scale, split rule and seed, the file read
        result.meta["data"] = manifest.info
    result.skipped = sorted(manifest.skipped + result.skipped, key=lambda row: row.line)
    if setup.state.is_main_process:
        paths = write_results(setup.settings.out, result, setup.eval_settings, setup.score_range, title=name)
        setup.output.finish()
        read = len(manifest.rows) + len(manifest.skipped)  # every row of the data, the skipped ones among them
        logger.info(
            "reward %s on %s (%d rows, %d skipped, %d processes)\n%s",
            name,
            setup.settings.data,
            read,
            len(result.skipped),
            setup.state.num_processes,
            format_table(result.metrics),
        )
        logger.info("wrote %s", ", ".join(str(p) for p in paths.values()))
        facts = {"rows": read, "skipped": len(result.skipped)}
        log_summary(f"evaluate {name}", {**facts, "SRCC": result.metrics.get("overall", {}).get("srcc")}, paths)
    setup.state.wait_for_everyone()
    return {**result.metrics, "skipped": len(result.skipped), "meta": result.meta}
