"""The README stands alone in a user's clone and stays true: no pointer outside the repository, every command it
shows exists, and every registered reward and generator is named in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reward import list_rewards
from rl.generators import GENERATORS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = README + (ROOT / "ARCHITECTURE.md").read_text()


def test_the_docs_point_at_nothing_outside_the_repository():
    assert "../shared" not in DOCS and "DESIGN.md" not in DOCS


@pytest.mark.parametrize(
    "path",
    sorted(set(re.findall(r"(?:python|launch) ((?:reward|training|rl|fusion|pace_judge|bench)/\w+\.py)", README))),
)
def test_every_script_the_readme_runs_exists(path):
    assert (ROOT / path).is_file(), path


@pytest.mark.parametrize("name", [*list_rewards(), *GENERATORS.names()])
def test_every_registered_name_is_documented(name):
    assert f"{name}" in README, f"{name} is registered but the README never names it"


def test_every_config_starts_with_the_command_that_runs_it():
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        first = path.read_text().splitlines()[0]
        if first.startswith("# @package"):
            first = path.read_text().splitlines()[1]  # a recipe: after the @package line
        assert re.match(r"# (python|accelerate launch|bash|trl sft) ", first), f"{path}: {first}"
