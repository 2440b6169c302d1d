"""Installed like a library: the wheel built from this checkout carries the configs, and every command runs by name
from any folder (``perceptual-rewards NAME``, ``python -m reward NAME``, ``accelerate launch -m reward NAME``), with
no checkout in sight."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from reward import console
from reward.core.cli import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reward", "training", "rl", "fusion", "pace_judge")
DECLARED = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][console.COMMANDS]
# commands with subcommands: one to compose
FIRST_WORD = {"memory": ["list"], "photos": ["heldout"], "study": ["report"]}


def entry_scripts() -> dict[str, str]:
    """Config name -> module of every entry script (a file whose ``__main__`` block calls ``main("NAME", ...)``)."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("*.py")):
            calls = [
                node.args[0].value
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "main" and node.args
                if isinstance(node.args[0], ast.Constant)
            ]
            if calls:
                found[calls[0]] = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return found


# ---------------------------------------------------------------------------------------------- fast


def test_every_entry_script_is_a_command_named_after_its_config():
    scripts = entry_scripts()
    assert len(scripts) == 18 and {n.replace("_", "-"): m for n, m in scripts.items()} == DECLARED


def test_the_console_runs_a_command_by_name_and_names_a_close_one(monkeypatch, capsys):
    monkeypatch.setattr(console, "commands", lambda: dict(DECLARED))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    console.main(["fit", "pairs=p.jsonl", "--cfg", "job"])
    assert "pairs: p.jsonl" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        console.main(["evalute", "data=x"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: unknown command 'evalute'. Did you mean 'evaluate'? Commands: {', '.join(DECLARED)}"
    ]
    console.main([])
    listing = capsys.readouterr().out
    assert "  best-of-n " in listing and "Best-of-N reranking" in listing  # each command with its docstring's line


def test_a_checkout_installed_before_the_commands_existed_is_told_to_reinstall(monkeypatch, capsys):
    monkeypatch.setattr(console, "commands", dict)
    with pytest.raises(SystemExit) as exited:
        console.main(["sft"])
    assert exited.value.code == 2 and "reinstall with pip install -e ." in capsys.readouterr().err


def test_messages_name_the_commands_as_this_process_was_started(monkeypatch, tmp_path):
    from reward.core import cli
    from reward.core.cli import as_run

    text = "fit one with python fusion/fit.py pairs=P; accelerate launch --config_file configs/accelerate/zero2.yaml "
    text += "training/sft.py ...; see docs/configs/x"
    monkeypatch.chdir(ROOT)
    assert as_run(text) == text  # from the checkout, as typed there
    monkeypatch.setattr(cli, "started_as", ("perceptual-rewards fit", DECLARED))
    monkeypatch.chdir(tmp_path)  # elsewhere, by name: the commands by name, configs/ the shipped folder's path
    assert as_run(text) == (
        f"fit one with perceptual-rewards fit pairs=P; accelerate launch --config_file {CONFIG_DIR}/accelerate/"
        "zero2.yaml -m reward sft ...; see docs/configs/x"
    )


def test_in_a_checkout_the_configs_are_its_own():
    assert CONFIG_DIR == ROOT / "configs"


def test_the_console_says_where_the_configs_and_samples_are(monkeypatch, capsys):
    """The README's flow runs on ``$(perceptual-rewards --configs)`` and ``$(perceptual-rewards --samples)``: each
    prints one folder, and the listing names both."""
    monkeypatch.setattr(console, "commands", lambda: dict(DECLARED))
    console.main(["--samples"])
    samples = Path(capsys.readouterr().out.strip())
    assert samples == ROOT / "reward" / "assets" / "samples" and (samples / "pairs.jsonl").is_file()
    console.main(["--configs"])
    assert Path(capsys.readouterr().out.strip()) / "accelerate" / "single_process.yaml" == (
        CONFIG_DIR / "accelerate" / "single_process.yaml"
    )
    console.main([])
    listing = capsys.readouterr().out
    assert f"--configs): {CONFIG_DIR}\n" in listing and f"--samples): {samples}\n" in listing


# ---------------------------------------------------------------------------------------------- slow: the wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel of this checkout (its tracked and new files, offline, without build isolation) installed into a fresh
    virtual environment that reuses this interpreter's installed dependencies (a .pth file) and nothing else."""
    tmp = tmp_path_factory.mktemp("install")
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    for name in filter(None, files):
        if (ROOT / name).is_file():  # (a file deleted but not yet committed is listed too)
            (tmp / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp / "src" / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp / "dist", tmp / "src"],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp / "venv"], check=True)
    python = tmp / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    Path(purelib, "shared-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel], check=True)
    (tmp / "elsewhere").mkdir()
    return {"wheel": wheel, "python": python, "bin": python.parent, "cwd": tmp / "elsewhere", "site": Path(purelib)}


def run_installed(installed: dict[str, Path], argv: list, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # this checkout must not be importable
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [str(a) for a in argv], cwd=installed["cwd"], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_the_wheel_ships_every_config_and_the_commands_run_from_it(installed, tiny_vlm_path):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    configs = sorted(p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml"))
    assert sorted(n for n in names if n.startswith("reward/configs/")) == [f"reward/configs/{c}" for c in configs]
    assert "training/shared/trl_fields.json" in names and "reward/assets/samples/ratings.jsonl" in names
    assert "rl/study.html" in names  # the study's page

    # --cfg job of every command through the console, in one process (each module run as __main__ in turn)
    driver = (
        "import contextlib, io, json, sys\n"
        "from reward import console\nfrom reward.core import cli\n"
        "out = {'configs': str(cli.CONFIG_DIR), 'reward': __import__('reward').__file__}\n"
        f"for name, first in {json.dumps({n: FIRST_WORD.get(n, []) for n in DECLARED})}.items():\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        console.main([name, *first, '--cfg', 'job'])\n"
        "    out[name] = buf.getvalue()\n"
        "print(json.dumps(out))\n"
    )
    proc = run_installed(installed, [installed["python"], "-c", driver])
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout.splitlines()[-1])
    assert shown.pop("configs") == str(installed["site"] / "reward" / "configs")
    assert shown.pop("reward") == str(installed["site"] / "reward" / "__init__.py")
    assert set(shown) == set(DECLARED)
    for name, text in shown.items():  # the composed config holds what the checkout's configs/NAME.yaml sets
        own = yaml.safe_load((ROOT / "configs" / f"{name.replace('-', '_')}.yaml").read_text()) or {}
        assert set(own) - {"defaults"} <= set(yaml.safe_load(text)), name

    # the folders the README's flow names: the installed package's configs and samples
    for flag, folder in (("--configs", "configs"), ("--samples", "assets/samples")):
        proc = run_installed(installed, [installed["bin"] / "perceptual-rewards", flag])
        assert proc.returncode == 0 and proc.stdout.strip() == str(installed["site"] / "reward" / folder), proc.stdout

    # --help says the commands and configs the installed user has (no checkout's training/sft.py, configs/)
    proc = run_installed(installed, [installed["bin"] / "perceptual-rewards", "sft", "--help"])
    shipped = installed["site"] / "reward" / "configs"
    assert proc.returncode == 0 and "perceptual-rewards sft model.path=" in proc.stdout, proc.stdout
    assert "accelerate launch --config_file CONFIGS/accelerate/zero2.yaml -m reward sft" in proc.stdout
    assert "training/sft.py" not in proc.stdout and f"({shipped}/sft.yaml; ??? = required)" in proc.stdout

    # one tiny evaluate by the console script, on the samples the wheel ships
    samples = installed["site"] / "reward" / "assets" / "samples"
    proc = run_installed(
        installed,
        [
            installed["bin"] / "perceptual-rewards",
            "evaluate",
            "reward=qbench",
            f"reward.model={tiny_vlm_path}",
            f"data={samples / 'ratings.jsonl'}",
            "out=zero-shot",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((installed["cwd"] / "zero-shot" / "metrics.json").read_text())
    assert {"layout", "harmony", "lighting", "distortion"} <= set(metrics), sorted(metrics)


@pytest.mark.slow
def test_under_accelerate_launch_a_mistake_is_the_one_line_of_the_command(installed):
    """``accelerate launch -q --config_file .../single_process.yaml -m reward sft`` with a misspelt key: the command's
    one ``error:`` line, without accelerate's warning about guessed values or its traceback."""
    config = installed["site"] / "reward" / "configs" / "accelerate" / "single_process.yaml"
    proc = run_installed(
        installed,
        [
            installed["python"],
            "-m",
            "accelerate.commands.launch",
            "-q",
            "--config_file",
            config,
            "-m",
            "reward",
            "sft",
            "data.trian=x",
        ],
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert lines == [  # every problem at once, one a line, and nothing else (no traceback, no launcher report)
        "error: invalid settings:",
        "  - unknown key data.trian (did you mean 'train'?)",
        "  - missing required key data.train (set it with data.train=...)",
        "  - missing required key out (set it with out=...)",
        "  - missing required key model.path (set it with model.path=...)",
    ]
    assert proc.returncode == 1  # accelerate's own status for a failed process


def test_the_entry_scripts_docstrings_start_with_one_line_for_the_listing():
    for module in DECLARED.values():
        path = ROOT / (module.replace(".", "/") + ".py")
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert doc and len(doc.splitlines()[0]) <= 120, module


def test_every_commands_line_in_the_listing_is_one_whole_sentence_without_markup(monkeypatch, capsys):
    """``perceptual-rewards`` alone: each command's line is its docstring's first paragraph, a whole sentence in plain
    words (mos's was cut mid-sentence after ":func:`read_raw_ratings` (one row per")."""
    monkeypatch.setattr(console, "commands", lambda: dict(DECLARED))
    console.main([])
    listing = capsys.readouterr().out
    for name, module in DECLARED.items():
        line = next(ln for ln in listing.splitlines() if ln.startswith(f"  {name} "))
        said = line[len(f"  {name} ") :].strip()
        assert said == console.summary(module) and said.endswith("."), (name, said)
        assert not any(mark in said for mark in ("`", ":func:", ":class:", ":data:", ":mod:")), (name, said)
        path = ROOT / (module.replace(".", "/") + ".py")
        first = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0]
        assert said == console.plain(" ".join(first.split())), name  # the whole paragraph, not its first line
