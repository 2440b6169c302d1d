"""Where each process of a launch puts its rewards and its generator: its own device unless told otherwise.

``accelerate launch --num_processes N`` starts N processes that all see every GPU, and a bare ``cuda`` is GPU 0 in
each of them; so a ``device`` (``reward.device``, ``generator.device``, each of ``more_rewards`` / ``eval_rewards``)
is resolved here from the process's local rank, as accelerate places the policy:

- ``null`` / ``auto`` / ``cuda``: the process's own GPU, ``cuda:{local_rank % gpus}`` (``cpu`` without GPUs);
- a template, ``cuda:{local_rank+4}``: process r on GPU r + 4 (4 processes on 8 GPUs: policies on 0-3, rewards 4-7);
- a list, one device per process of the machine: ``[cuda:4, cuda:5, cuda:6, cuda:7]``;
- one device (``cuda:7``, ``cpu``): every process as given (several on one GPU: one copy each, warned).

    >>> process_device("cuda:{local_rank+2}", rank=1, n_gpus=4), process_device(["cuda:4", "cuda:5"], rank=1, n_gpus=8)
    ('cuda:3', 'cuda:5')
    >>> process_device(None, rank=3, n_gpus=0)
    'cpu'
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from reward.core.errors import UserError

logger = logging.getLogger(__name__)

TEMPLATE = re.compile(r"\{local_rank(?:\s*\+\s*(\d+))?\}")


def process_device(spec: Any, *, rank: int | None = None, n_gpus: int | None = None, where: str = "device") -> str:
    """The device this process uses for ``spec`` (see the module docstring); ``rank``: its local rank."""
    import torch

    rank = int(os.environ.get("LOCAL_RANK") or 0) if rank is None else rank  # set by accelerate launch / torchrun
    gpus = torch.cuda.device_count() if n_gpus is None else n_gpus
    if spec is None or (isinstance(spec, str) and spec.strip() in ("", "auto", "cuda")):
        return f"cuda:{rank % gpus}" if gpus else "cpu"
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        if rank >= len(spec):
            raise UserError(
                f"{where}={list(spec)} names {len(spec)} devices but this is process {rank} of the machine; give one "
                "device per process, or a template such as 'cuda:{local_rank+4}'"
            )
        return str(spec[rank])
    return TEMPLATE.sub(lambda m: str(rank + int(m.group(1) or 0)), str(spec))


def resolve_devices(entries: Sequence[Any], *, schema_has_device: Callable[[str], bool], where: str) -> list[Any]:
    """Each config entry (a mapping with ``name``, or a bare name) with its ``device`` resolved for this process, where
    ``schema_has_device(name)``; with several processes on the machine a ``device_map`` is refused (each would spread
    its own copy over every GPU) and one GPU named for all of them is warned about."""
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    out = []
    for i, entry in enumerate(entries):
        node = {"name": entry} if isinstance(entry, str) else dict(entry)
        key = where if len(entries) == 1 else f"{where}[{i}]"
        if not schema_has_device(str(node.get("name"))):
            out.append(entry)
            continue
        if processes > 1 and node.get("device_map") not in (None, ""):
            raise UserError(
                f"{key}.device_map={node['device_map']!r} with {processes} processes on this machine: each would "
                "spread its own copy over every GPU. Use device (one GPU per process, e.g. 'cuda:{local_rank+4}') or "
                "a served reward (backend=openai)"
            )
        spec = node.get("device")
        node["device"] = process_device(spec, where=f"{key}.device")
        shared = spec not in (None, "", "auto", "cuda", "cpu") and not isinstance(spec, list)
        if processes > 1 and shared and not TEMPLATE.search(str(spec)):
            logger.warning(
                "%s.device=%s: all %d processes of this machine load their own copy onto it", key, spec, processes
            )
        out.append(node)
    return out


def placed_device(obj: Any, depth: int = 3) -> str | None:
    """The device an object's model actually sits on (its parameters, or a pipeline's ``device``), if any."""
    import torch

    if obj is None or depth < 0:
        return None
    if isinstance(obj, torch.nn.Module):
        p = next(obj.parameters(), None)
        return None if p is None else str(p.device)
    device = getattr(obj, "device", None)
    if isinstance(device, torch.device) and hasattr(obj, "components"):  # a diffusers pipeline
        return str(device)
    for attr in ("vlm", "backend", "model", "pipe", "reward"):
        if (found := placed_device(getattr(obj, attr, None), depth - 1)) is not None:
            return found
    return None
