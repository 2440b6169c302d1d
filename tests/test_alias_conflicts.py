"""One setting, one value: an old key and its new name given different values are refused, whatever the order, for
every alias of every command (nested sections and the reward group's options included), and when a recipe sets the
old key; a recipe's old key alone is read as its new name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_hydra_cli import _entry_schemas

from reward.core.cli import CONFIG_DIR, compose
from reward.core.config import aliases_of, field_types, is_dataclass_type, parse
from reward.core.errors import ConfigError
from reward.core.schemas import groups_of
from training.commands.sft import SftSettings


def _aliases(cls: type, prefix: str = "", seen: frozenset = frozenset()) -> list[tuple[str, str]]:
    out = [(prefix + old, prefix + alias.new) for old, alias in aliases_of(cls).items()]
    for name, tp in field_types(cls).items():
        if is_dataclass_type(tp) and tp not in seen:
            out += _aliases(tp, f"{prefix}{name}.", seen | {cls})
    return out


def _every_alias() -> list[tuple[str, type, list[str], str, str]]:
    """``(command, schema, group choice, old key, new key)`` for every alias a command line can reach."""
    cases = []
    for script, schema in sorted(_entry_schemas().items()):
        command = Path(script).stem
        cases += [(command, schema, [], old, new) for old, new in _aliases(schema)]
        for group, options in groups_of(schema).items():
            for option_schema, node in options().items():
                choice = [f"{group}={option_schema.removesuffix('_schema')}"]
                cases += [(command, schema, choice, old, new) for old, new in _aliases(node, f"{group}.")]
    return cases


def test_every_alias_of_every_command_given_with_its_new_name_and_another_value_is_refused():
    cases = _every_alias()
    assert len(cases) > 60 and {c[0] for c in cases} >= {"sft", "grpo", "evaluate", "judge", "best_of_n", "fit"}
    for command, schema, choice, old, new in cases:
        for args in ([f"{old}=111", f"{new}=222"], [f"{new}=222", f"{old}=111"], [f"+{old}=111", f"{new}=222"]):
            with pytest.raises(ConfigError, match=rf"name the same setting \({old} is an alias of {new}\)"):
                compose(command, [*choice, *args], schema=schema)


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """The project's configs plus recipes written in old key names."""
    root = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, root)
    recipes = {
        "OLD_TRAINER": "trainer:\n  seed: 5\n  output_dir: /runs/from-recipe\n",
        "OLD_TOP": "output_dir: /runs/from-recipe\n",
        "OLD_REWARD": "defaults:\n  - override /reward: sa-iqa\nreward:\n  path: /scorers/from-recipe\n",
        "BOTH": "seed: 3\ntrainer:\n  seed: 5\n",
    }
    for name, body in recipes.items():
        (root / "recipe" / f"{name}.yaml").write_text("# @package _global_\n" + body)
    return root


SFT = ["model.path=m", "data.train=d"]


def test_a_recipe_old_key_and_the_command_line_new_name_with_another_value_are_refused_naming_the_recipe(configs):
    with pytest.raises(
        ConfigError, match=r"configs/recipe/OLD_TRAINER.yaml sets trainer.seed=5 and the command line "
    ):
        compose("sft", ["+recipe=OLD_TRAINER", "seed=7", *SFT], schema=SftSettings, config_dir=configs)
    with pytest.raises(ConfigError, match=r"OLD_TRAINER.yaml sets trainer.output_dir='/runs/from-recipe' and the "):
        compose("sft", ["+recipe=OLD_TRAINER", "out=/runs/cli", *SFT], schema=SftSettings, config_dir=configs)
    with pytest.raises(ConfigError, match=r"BOTH.yaml sets trainer.seed=5 and the recipe seed=3"):
        compose("sft", ["+recipe=BOTH", "out=o", *SFT], schema=SftSettings, config_dir=configs)


def test_a_recipe_old_key_alone_is_read_as_its_new_name_not_refused_against_the_default(configs, caplog):
    cfg = compose("sft", ["+recipe=OLD_TRAINER", *SFT], schema=SftSettings, config_dir=configs)
    settings = parse(SftSettings, cfg)
    assert (settings.seed, settings.out) == (5, "/runs/from-recipe")
    assert "seed" not in settings.trainer and "output_dir" not in settings.trainer
    same = compose("sft", ["+recipe=OLD_TRAINER", "seed=5", *SFT], schema=SftSettings, config_dir=configs)
    assert parse(SftSettings, same).seed == 5  # the same value twice: one setting, one value


@pytest.mark.parametrize(
    ("recipe", "command", "args", "said"),
    [
        ("OLD_TOP", "sft", SFT, "OLD_TOP.yaml sets output_dir, the old name of out: rename it there"),
        ("OLD_REWARD", "evaluate", ["data=d", "out=o"], "sets reward.path, the old name of reward.model"),
    ],
)
def test_a_recipe_old_key_of_a_typed_section_is_refused_with_its_new_name(configs, recipe, command, args, said):
    schema = _entry_schemas()["reward/evaluate.py" if command == "evaluate" else "training/sft.py"]
    with pytest.raises(ConfigError, match=said):
        compose(command, [f"+recipe={recipe}", *args], schema=schema, config_dir=configs)
