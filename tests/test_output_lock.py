"""An output folder belongs to one run at a time, is checked for writing before anything loads, and what is written
there follows the umask."""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.outputs import check_output, prepare_output
from reward.data.files import atomic_write_json, atomic_write_with

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
HOLDER = (  # takes the folder's lock the way every command does, says so, and holds it until stdin closes
    "import sys\nfrom reward.core.outputs import check_output\n"
    "output = check_output(sys.argv[1], 'evaluate', {'holder': True})\n"
    "print('held', flush=True)\nsys.stdin.read()\ndel output\n"
)


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def _manifest(folder: Path) -> Path:
    (folder / "img").mkdir(parents=True)
    rows = []
    for i in range(4):
        Image.fromarray(np.full((56, 56, 3), 50 * i, np.uint8)).save(folder / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + i})
    path = folder / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(**overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("evaluate", overrides=[f"{k}={v}" for k, v in overrides.items()], schema=EvaluateSettings)


@pytest.mark.slow
def test_a_second_run_into_a_folder_in_use_exits_2_naming_the_holder(tmp_path, tiny_vlm_path):
    data, out = _manifest(tmp_path / "data"), tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        command = [
            sys.executable,
            "reward/evaluate.py",
            "reward=qbench",
            f"reward.model={tiny_vlm_path}",
            f"data={data}",
            f"out={out}",
            "num_workers=0",
        ]
        second = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in second.stderr
        assert f"out={out} is in use by another run (PID {holder.pid} on " in errors[0]
        assert "started 20" in errors[0] and "running: " in errors[0] and "pass another out=" in errors[0]
        assert not (out / "run.json").exists()  # the refused run wrote nothing
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert check_output(out, "evaluate", {"a": 1}).lock is not None  # the holder is gone: so is its lock


def test_the_lock_is_held_while_the_run_lives_and_shared_within_one_process(tmp_path):
    out = tmp_path / "run"
    first = prepare_output(out, "evaluate", {"a": 1})
    again = check_output(out, "evaluate", {"a": 1}, resume=True)  # the same process: the same lock
    assert again.lock is first.lock is not None
    probe = "import sys\nfrom reward.core.outputs import check_output\ncheck_output(sys.argv[1], 'evaluate', {'a': 1})"
    busy = subprocess.run([sys.executable, "-c", probe, str(out)], env=_env(), capture_output=True, text=True)
    assert "is in use by another run" in busy.stderr and f"PID {os.getpid()} " in busy.stderr
    assert pickle.loads(pickle.dumps(first)).lock is None  # what the main process broadcasts carries no lock
    del first, again
    free = subprocess.run([sys.executable, "-c", probe, str(out)], env=_env(), capture_output=True, text=True)
    assert "in use" not in free.stderr  # released with the run (it refuses only because the run is there)


def test_other_processes_of_a_launch_do_not_take_the_lock(tmp_path, monkeypatch):
    out = tmp_path / "run"
    held = check_output(out, "evaluate", {"a": 1})
    monkeypatch.setenv("RANK", "1")
    other = subprocess.run(
        [sys.executable, "-c", f"from reward.core.outputs import check_output; check_output({str(out)!r}, 'x', {{}})"],
        env={**_env(), "RANK": "1"},
        capture_output=True,
        text=True,
    )
    assert other.returncode == 0, other.stderr  # rank 1 follows rank 0: it never waits on, nor refuses, the lock
    assert held.lock is not None


def test_out_under_a_file_is_refused_before_the_model_loads(tmp_path):
    data = _manifest(tmp_path / "data")
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(UserError, match=r"notes.txt is a file, so no folder can be made under it"):
        run_evaluate(
            parse(
                EvaluateSettings,
                _cfg(**{"reward.model": tmp_path / "no-model", "data": data, "out": tmp_path / "notes.txt/out"}),
            )
        )


def test_out_on_a_read_only_mount_is_refused_before_the_model_loads(tmp_path):
    read_only = Path("/sys")
    try:
        (read_only / ".probe").touch()
    except OSError:
        pass
    else:  # pragma: no cover - a machine where /sys can be written
        (read_only / ".probe").unlink()
        pytest.skip("/sys is writable here")
    data = _manifest(tmp_path / "data")
    with pytest.raises(UserError, match=r"cannot write in /sys \(.*\); pass an out= folder"):
        run_evaluate(
            parse(
                EvaluateSettings,
                _cfg(**{"reward.model": tmp_path / "no-model", "data": data, "out": "/sys/perceptual-out"}),
            )
        )


@pytest.mark.parametrize("umask", [0o002, 0o022])
def test_atomically_written_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        json_file = atomic_write_json(tmp_path / "metrics.json", {"a": 1})
        png = atomic_write_with(tmp_path / "plot.png", lambda tmp: Image.new("RGB", (4, 4)).save(tmp))
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    for path in (json_file, png):
        assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~umask


def test_a_single_result_file_under_a_file_is_refused_before_any_work(tmp_path):
    from reward.core.outputs import check_output_file

    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(UserError, match=r"out=.*notes.txt/w.json: .*notes.txt is a file"):
        check_output_file(tmp_path / "notes.txt" / "w.json")


def _held_by_another_process(folder: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_one_folder_takes_one_lock_whatever_its_spelling(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "runs" / "a")  # a symlink to the folder
    (tmp_path / "alias").symlink_to(tmp_path / "runs")  # a symlinked parent
    spellings = {
        tmp_path / "runs" / "a": [tmp_path / "link", tmp_path / "alias" / "a", tmp_path / "runs" / "b" / ".." / "a"],
        tmp_path / "runs" / "new": [tmp_path / "alias" / "new"],  # not made yet: its parent's spellings still count
    }
    for held, others in spellings.items():
        holder = _held_by_another_process(held)
        try:
            for other in others:
                with pytest.raises(UserError, match=rf"out={other} is in use by another run \(PID {holder.pid} "):
                    check_output(other, "sft", {"a": 1})
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)


@pytest.mark.parametrize("kind", ["folder", "symlink to a file", "dangling symlink"])
def test_a_lock_path_that_is_not_a_plain_file_is_refused_in_one_line_and_never_followed(tmp_path, kind, capsys):
    from reward.core.cli import main

    victim = tmp_path / "victim.txt"
    victim.write_text("someone's notes")
    lock = tmp_path / ".out.lock"
    if kind == "folder":
        lock.mkdir()
    else:
        lock.symlink_to(victim if kind == "symlink to a file" else tmp_path / "nowhere")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exited:
        main(
            "evaluate",
            lambda cfg: check_output(cfg.out, "evaluate", {"a": 1}),
            argv=["reward=qbench", "data=d.jsonl", f"out={out}"],
            schema=EvaluateSettings,
        )
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    word = "a folder" if kind == "folder" else "a symlink"
    assert f"error: out={out}: its lock path {lock} is {word}, not a lock file; remove it" in err
    assert victim.read_text() == "someone's notes" and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_run_killed_however_leaves_the_folder_free_for_the_next_run(tmp_path, signal_name):
    """The lock is the OS's (filelock): it goes with its process, even one killed without a chance to clean up."""
    import signal

    out = tmp_path / "out"
    holder = _held_by_another_process(out)
    with pytest.raises(UserError, match="is in use by another run"):
        check_output(out, "evaluate", {"holder": True})
    holder.send_signal(getattr(signal, signal_name))
    assert holder.wait(timeout=60) == -getattr(signal, signal_name)
    assert not check_output(out, "evaluate", {"holder": True}).resumed  # the folder is free again


def test_out_as_a_symlink_to_a_folder_not_made_yet_is_made_and_locked_as_that_folder(tmp_path):
    target = tmp_path / "runs" / "a"
    (tmp_path / "link").symlink_to(target)  # dangling until the run makes its folder
    run = prepare_output(tmp_path / "link", "evaluate", {"a": 1})
    assert target.is_dir() and (target / "run.json").is_file() and (tmp_path / "runs" / ".a.lock").is_file()
    with pytest.raises(UserError, match="is in use by another run"):
        _in_another_process_check(target)
    del run


def _in_another_process_check(folder: Path) -> None:
    probe = "import sys\nfrom reward.core.outputs import check_output\ncheck_output(sys.argv[1], 'evaluate', {})"
    done = subprocess.run([sys.executable, "-c", probe, str(folder)], env=_env(), capture_output=True, text=True)
    if "is in use by another run" in done.stderr:
        raise UserError(done.stderr.strip().splitlines()[-1])
