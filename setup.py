"""What pyproject.toml cannot say: the top-level ``configs/`` folder (every command's YAML, kept at the root where
users edit it) ships inside the wheel as the package ``reward.configs``, where :mod:`reward.core.cli` finds it in an
installed copy. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["reward*", "fusion*", "pace_judge*", "training*", "rl*"]), "reward.configs"],
    package_dir={"reward.configs": "configs"},
)
