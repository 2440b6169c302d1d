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
from reward.core.cli import subcommand_problems
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
    memory: str = field(default=MISSING, metadata={"help": "the memory bank folder", "output": True})
    dimension: str | None = field(default=None, metadata={"help": "show, delete, route: a dimension in words"})
    protocol: str | None = field(default=None, metadata={"help": "import: protocol JSON file(s), comma-separated"})
    replace: bool = field(default=False, metadata={"help": "import: replace a stored protocol of the same dimension"})
    theta: float = field(
        default=0.8, metadata={"help": "route: fast path above this cosine to a stored dimension", "range": (-1, 1)}
    )
    embedder: str | None = field(
        default=None, metadata={"help": "sentence-transformers path (default: all-MiniLM-L6-v2, offline)"}
    )
    allow_absolute_paths: bool = field(
        default=False,
        metadata={"help": "import: accept absolute anchor paths (default: inside the protocol's folder)"},
    )

    def problems(self) -> list[str]:
        return subcommand_problems(self, NEEDS)


def run(settings: MemorySettings) -> Any:
    """Run the subcommand on the memory bank; returns what it lists, shows, imports or routes."""
    bank = MemoryBank(settings.memory, Embedder(settings.embedder))
    result: Any = None
    if settings.cmd == "list":
        entries = bank.entries()
        result = sorted(entries)
        for slug in result:
            entry, protocol = entries[slug], load_protocol(bank.protocol_file(slug), check_anchors=False)
            state = "calibrated  " if entry.get("calibrated") else "uncalibrated"
            logger.info("%-32s %2d probes  %s  %s", entry["dimension"], len(protocol.probes), state, slug)
    elif settings.cmd == "show":
        result = protocol_to_dict(bank.load(settings.dimension))
        logger.info("%s", json.dumps(result, indent=2))
    elif settings.cmd == "import":
        result = []
        for path in str(settings.protocol).split(","):
            protocol = load_protocol(path, allow_absolute_paths=settings.allow_absolute_paths)
            result.append(bank.add(protocol, replace=settings.replace))
            logger.info("imported %s as %s", path, result[-1])
    elif settings.cmd == "delete":
        bank.delete(settings.dimension)
        logger.info("deleted %r", settings.dimension)
    else:
        result = r = bank.route(settings.dimension, settings.theta)
        if r.unknown:
            logger.info("%s: the embedder cannot represent %s; slow path", settings.dimension, r.unknown)
        else:
            draft = r.fast and not bank.entries()[r.slug].get("calibrated")
            note = " (uncalibrated: not used until calibrated with perceptual-rewards calibrate)" if draft else ""
            path = "fast" if r.fast else "slow"
            logger.info("%s -> %r (cosine %.3f): %s path%s", settings.dimension, r.dimension, r.cosine, path, note)
    log_summary(f"pace memory {settings.cmd}", {"protocols": len(bank.entries())}, {"memory bank": settings.memory})
    return result
