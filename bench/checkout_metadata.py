"""Declare the checkout's entry points (its rewards and commands) in FOLDER as ``pip install -e .`` would, without
installing: the code is read from the checkout (``PYTHONPATH``), only the metadata is written. The GPU machine has no
build backend to install the project with, and without this metadata the rewards other packages declare
(``scene-proxy``, ``pace``) were unknown there.

    python bench/checkout_metadata.py /tmp/site   # bench/gpu_env.sh runs it after installing the wheels
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_metadata(folder: Path) -> Path:
    """``NAME-VERSION.dist-info`` in ``folder`` with ``METADATA`` and ``entry_points.txt`` from ``pyproject.toml``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    info = folder / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = {**project.get("entry-points", {}), "console_scripts": project.get("scripts", {})}
    text = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) + "\n" for group, points in groups.items()
    )
    (info / "entry_points.txt").write_text(text)
    return info


if __name__ == "__main__":
    print(f"entry points declared in {write_metadata(Path(sys.argv[1]))}")
