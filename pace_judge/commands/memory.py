"""``python pace_judge/memory.py list|show|import|delete|route``: the memory bank of protocols
(:mod:`pace_judge.memory_bank`)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from pace_judge.memory_bank import Embedder, MemoryBank
from pace_judge.protocol import load_protocol, protocol_to_dict
from reward.core.cli import check_subcommand
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.summary import log_summary

logger = logging.getLogger(__name__)

SUBCOMMANDS = ("list", "show", "import", "delete", "route")
NEEDS = {
    "list": (),
    "show": ("dimension",),
    "import": ("protocol",),
    "delete": ("dimension",),
    "route": ("dimension",),
}


@dataclass
class MemorySettings:
    cmd: str = field(
        default="list", metadata={"help": "list | show | import | delete | route (the first word of the command line)"}
    )
    memory: str = field(default=MISSING, metadata={"help": "the memory bank folder"})
    dimension: str | None = field(default=None, metadata={"help": "show, delete, route: a dimension in words"})
    protocol: str | None = field(default=None, metadata={"help": "import: protocol JSON file(s), comma-separated"})
    replace: bool = field(default=False, metadata={"help": "import: replace a stored protocol of the same dimension"})
    theta: float = field(
        default=0.8,
        metadata={
            "help": "route: fast path when the cosine to a stored dimension is above this",
            "range": (-1, 1),
        },
    )
    embedder: str | None = field(
        default=None, metadata={"help": "sentence-transformers path (default: all-MiniLM-L6-v2, offline)"}
    )
    allow_absolute_paths: bool = field(
        default=False,
        metadata={"help": "import: accept absolute anchor paths (default: inside the protocol's folder)"},
    )


def run(cfg: Any) -> Any:
    settings = parse(MemorySettings, cfg, where="")
    check_subcommand(settings, NEEDS)
    bank = MemoryBank(settings.memory, Embedder(settings.embedder) if settings.embedder else None)
    try:
        result = _do(settings, bank)
        log_summary(
            f"pace memory {settings.cmd}", {"protocols": len(bank.entries())}, {"memory bank": settings.memory}
        )
        return result
    except KeyError as err:  # a dimension that is not stored
        raise UserError(str(err.args[0]) if err.args else str(err)) from None


def _do(settings: MemorySettings, bank: MemoryBank) -> Any:
    if settings.cmd == "list":
        entries = sorted(bank.entries().items())
        for slug, e in entries:
            p = load_protocol(bank.protocol_file(slug), check_anchors=False)
            state = "calibrated  " if e.get("calibrated") else "uncalibrated"
            logger.info("%-32s %2d probes  %s  %s", e["dimension"], len(p.probes), state, slug)
        return [slug for slug, _ in entries]
    if settings.cmd == "show":
        data = protocol_to_dict(bank.load(settings.dimension))
        logger.info("%s", json.dumps(data, indent=2))
        return data
    if settings.cmd == "import":
        slugs = []
        for path in str(settings.protocol).split(","):
            protocol = load_protocol(path, allow_absolute_paths=settings.allow_absolute_paths)
            slugs.append(bank.add(protocol, replace=settings.replace))
            logger.info("imported %s as %s", path, slugs[-1])
        return slugs
    if settings.cmd == "delete":
        bank.delete(settings.dimension)
        logger.info("deleted %r", settings.dimension)
        return None
    r = bank.route(settings.dimension, settings.theta)
    if r.unknown:
        logger.info(
            "%s: the embedder cannot represent %s; slow path (no protocol chosen by cosine)",
            settings.dimension,
            r.unknown,
        )
        return r
    note = ""
    if r.fast and r.slug is not None and not bank.entries()[r.slug].get("calibrated"):
        note = " (uncalibrated: it will not be used until calibrated with pace_judge/calibrate.py)"
    logger.info(
        "%s -> %r (cosine %.3f): %s path%s",
        settings.dimension,
        r.dimension,
        r.cosine,
        "fast" if r.fast else "slow",
        note,
    )
    return r
