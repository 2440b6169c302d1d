"""``trainer.*`` keys are checked against trl's config fields from a checked-in table, so a mistake there is refused
before trl (and torch with it) is imported, like any other key's; the table is trl's own, regenerated here."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from training.shared import launch
from training.shared.launch import CLASSES, TABLE, VERSIONED, field_problems, fields_of, library_fields

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "reward" / "assets" / "samples"

# each kind of mistake, and values trl takes (a plain type, an enum's value, a richer type left to trl, None)
VALUES = {
    "lerning_rate": 1e-3,
    "max_steps": "ten",
    "bf16": "yes",
    "lr_scheduler_type": "cosin",
    "save_strategy": "steps",
    "learning_rate": 2,
    "report_to": ["none"],
    "logging_steps": None,
}


def test_the_checked_in_table_is_the_installed_trls_own():
    """Regenerates the table from trl's classes: when trl (or transformers) changed, the file is rewritten and the test
    fails until the new table is committed."""
    import trl

    versions = {lib: metadata.version(lib) for lib in VERSIONED}
    made = {"versions": versions, **{name: library_fields(getattr(trl, name)) for name in CLASSES}}
    if json.loads(TABLE.read_text(encoding="utf-8")) != made:
        TABLE.write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")
        pytest.fail(
            f"{TABLE.relative_to(ROOT)} was out of date with trl {made['versions']['trl']}: regenerated, commit it"
        )


@pytest.mark.parametrize("name", CLASSES)
def test_the_table_refuses_what_trls_classes_refuse_and_names_the_fix(name):
    import trl

    problems = field_problems(fields_of(name), VALUES, "trainer")
    assert problems == field_problems(library_fields(getattr(trl, name)), VALUES, "trainer")
    assert problems == [
        "unknown key trainer.lerning_rate (did you mean 'learning_rate'?)",
        "trainer.max_steps='ten': expected an integer",
        "trainer.bf16='yes': expected true or false",
        "trainer.lr_scheduler_type='cosin': expected one of 12 values (did you mean 'cosine'?)",
    ]


def test_an_enum_value_the_table_refuses_trl_refuses_too():
    from trl import SFTConfig

    assert field_problems(fields_of("SFTConfig"), {"save_strategy": "step"}, "trainer") == [
        "trainer.save_strategy='step': expected one of best, epoch, no, steps (did you mean 'steps'?)"
    ]
    with pytest.raises(ValueError, match="step is not a valid SaveStrategy"):
        SFTConfig(output_dir="unused", save_strategy="step", use_cpu=True, report_to="none")


def test_with_other_trl_versions_installed_the_classes_themselves_are_read(monkeypatch, tmp_path):
    other = tmp_path / "trl_fields.json"  # another trl's table (its GRPOConfig without fields)
    other.write_text(json.dumps({"versions": {"trl": "0.0.1", "transformers": "0.0.1"}, "GRPOConfig": {}}))
    monkeypatch.setattr(launch, "TABLE", other)
    fields_of.cache_clear()
    try:
        import trl

        assert fields_of("GRPOConfig") == library_fields(trl.GRPOConfig)
        assert field_problems(fields_of("GRPOConfig"), {"num_generation": 8}, "trainer") == [
            "unknown key trainer.num_generation (did you mean 'num_generations'?)"
        ]
    finally:
        fields_of.cache_clear()


def test_a_trainer_typo_is_refused_before_trl_or_torch_is_imported(tmp_path):
    """The refusal's speed, measured by what it needs: neither trl nor torch (10-16 s to import on a loaded machine)
    is imported before ``training/sft.py`` refuses ``trainer.lerning_rate``."""
    (tmp_path / "config.json").write_text("{}")  # a checkpoint folder, as far as the checks before loading go
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = ['training/sft.py', 'model.path={tmp_path}', 'data.train={SAMPLES / 'ratings.jsonl'}', "
        "'trainer.lerning_rate=1e-3', 'out=unused']\n"
        "try:\n"
        "    runpy.run_path('training/sft.py', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print(json.dumps({'code': exc.code, 'imported': sorted({'trl', 'torch'} & set(sys.modules))}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "unknown key trainer.lerning_rate (did you mean 'learning_rate'?)" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"code": 2, "imported": []}
