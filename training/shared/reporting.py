"""``trainer.report_to`` checked before any model loads (transformers imports a tracker only once the model has
loaded), naming the ``pip`` command that adds a missing one; its names are transformers' (``INTEGRATION_TO_CALLBACK``,
kept equal by ``tests/test_summaries.py``).

    >>> report_to_problems("none")
    []
    >>> report_to_problems("tensorbord")  # doctest: +ELLIPSIS
    ["trainer.report_to=tensorbord: unknown backend. Did you mean 'tensorboard'? Known: ..."]
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from reward.core.errors import close_match

# backend -> (modules any one of which makes it available, the pip command that installs it)
BACKENDS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install 'perceptual-rewards[tensorboard]' (or tensorboard)"),
    "wandb": (("wandb",), "pip install wandb"),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "comet_ml": (("comet_ml",), "pip install comet-ml"),
    "clearml": (("clearml",), "pip install clearml"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "trackio": (("trackio",), "pip install trackio"),
    "neptune": (("neptune",), "pip install neptune"),
    "codecarbon": (("codecarbon",), "pip install codecarbon"),
    "dagshub": (("dagshub",), "pip install dagshub mlflow"),
    "azure_ml": (("azureml",), "pip install azureml-core"),
    "flyte": (("flytekit",), "pip install flytekit flytekitplugins-deck-standard"),
    "kubeflow": ((), "set KUBEFLOW_TRAINER_SERVER_URL (kubeflow logs through its trainer server)"),
}


def report_to_problems(value: Any, key: str = "trainer.report_to") -> list[str]:
    """A message per backend in ``value`` (a name, a list of names, ``none`` or ``all``) that is unknown or not
    installed; ``[]`` when every one will work."""
    names = [value] if isinstance(value, str) or value is None else list(value)
    problems = []
    for name in names:
        if name in (None, "none", "all"):
            continue
        if name not in BACKENDS:
            problems.append(
                f"{key}={name}: unknown backend.{close_match(str(name), list(BACKENDS))} Known: "
                f"{', '.join(BACKENDS)}, none or all"
            )
            continue
        modules, install = BACKENDS[name]
        found = any(importlib.util.find_spec(m) for m in modules)
        if not (os.environ.get("KUBEFLOW_TRAINER_SERVER_URL") if name == "kubeflow" else found):
            problems.append(f"{key}={name}: {name} is not installed; {install}, or set {key}=none")
    return problems
