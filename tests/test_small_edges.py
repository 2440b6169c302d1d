"""Small cases that used to pass in silence or end in a traceback: Ctrl-C, string or huge fusion scores, dataset
scales and duplicated rows, a command run without arguments, the resume warning of transformers."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fusion.commands.fit import FusionSettings
from reward.commands.dataset_manifest import DatasetManifestSettings
from reward.core.config import parse

ROOT = Path(__file__).resolve().parents[1]
BLOCKING_EVALUATE = """
import sys
import threading
import torch
import reward.commands.evaluate as command
from reward.core.cli import main
from reward.rewards.base import RewardOutput

class Blocking:  # scores the first batch, then waits for the test's Ctrl-C on the second (never finishing it)
    calls = 0
    def score(self, images, prompts=None):
        Blocking.calls += 1
        if Blocking.calls == 2:
            print("second batch", flush=True)
            while True:  # back in the main thread's bytecode often: the signal is handled whichever thread got it
                threading.Event().wait(0.05)
        return RewardOutput(torch.full((len(images),), 0.5))

command.get_reward = lambda name, cfg: Blocking()
main("evaluate", command.run, schema=command.EvaluateSettings, argv=sys.argv[1:])
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def _manifest(folder: Path, n: int = 4) -> Path:
    (folder / "img").mkdir(parents=True)
    rows = []
    for i in range(n):
        Image.fromarray(np.full((56, 56, 3), 50 * i, np.uint8)).save(folder / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + i})
    path = folder / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ctrl_c_as_at_a_terminal() -> None:
    """SIGINT as a terminal delivers it: a suite started in the background by a non-interactive shell (``cmd &``)
    passes its children SIGINT ignored, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_prints_one_line_saying_how_to_resume_and_exits_130(tmp_path):
    data, out = _manifest(tmp_path / "data"), tmp_path / "out"
    argv = ["reward=qbench", "reward.model=unused", f"data={data}", f"out={out}", "batch_size=2", "num_workers=0"]
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKING_EVALUATE, *argv],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    try:
        assert proc.stdout.readline().strip() == "second batch"  # the event: the second batch is being scored
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("interrupted:")]
    hint = "run the same command again (resume=auto) to continue it where it stopped"
    assert lines == [f"interrupted: {out} holds the run so far; {hint}"]
    assert len((out / "scores.jsonl").read_text().splitlines()) == 2  # the first batch is kept for the resume


def _read_until(master: int, text: str | None) -> str:
    """What the terminal shows, read from its master side until ``text`` appears (``None``: until the last process
    holding the terminal exits)."""
    seen = b""
    while text is None or text.encode() not in seen:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: no process holds the terminal any more
            break
        if not chunk:
            break
        seen += chunk
    return seen.decode(errors="replace")


def test_ctrl_c_under_accelerate_launch_ends_with_the_one_line_and_no_launcher_traceback(tmp_path):
    """``accelerate launch -q`` of one process in a terminal: Ctrl-C typed there (the terminal's SIGINT to its
    foreground group) ends with the command's ``interrupted:`` line, without the launcher's KeyboardInterrupt."""
    import fcntl
    import pty
    import termios

    data, out = _manifest(tmp_path / "data"), tmp_path / "out"
    script = tmp_path / "blocking_evaluate.py"
    script.write_text(BLOCKING_EVALUATE)
    config = ROOT / "configs" / "accelerate" / "single_process.yaml"
    argv = ["reward=qbench", "reward.model=unused", f"data={data}", f"out={out}", "batch_size=2", "num_workers=0"]
    master, terminal = pty.openpty()

    def in_the_terminal() -> None:  # a session of its own whose controlling terminal is the pty, as a shell's job
        _ctrl_c_as_at_a_terminal()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--config_file", str(config)]
    proc = subprocess.Popen(
        [*accelerate, str(script), *argv],
        env=_env(),
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
        preexec_fn=in_the_terminal,
    )
    os.close(terminal)
    try:
        shown = _read_until(master, "second batch")  # the event: the second batch is being scored
        os.write(master, b"\x03")  # Ctrl-C, typed
        shown += _read_until(master, None)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        os.close(master)
    lines = [line.replace("^C", "").strip() for line in shown.splitlines() if line.replace("^C", "").strip()]
    hint = "run the same command again (resume=auto) to continue it where it stopped"
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown[-3000:]
    assert lines[-1] == f"interrupted: {out} holds the run so far; {hint}", shown[-3000:]
    assert proc.returncode == 1  # accelerate's status for a process that failed (130), under -q


def _fusion_files(folder: Path, change) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 5, (40, 2))
    rows = [{"image": f"{i}.png", "layout": float(x[i, 0]), "lighting": float(x[i, 1])} for i in range(40)]
    change(rows)
    pairs = []
    for _ in range(100):
        i, j = rng.choice(40, 2, replace=False)
        pairs.append({"a": f"{i}.png", "b": f"{j}.png", "label": "a" if x[i].sum() > x[j].sum() else "b"})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    return folder / "pairs.jsonl", folder / "scores.jsonl"


def _fit(pairs: Path, scores: Path, *extra: str):
    from fusion.commands.fit import run as run_fit
    from reward.core.cli import compose

    argv = [f"pairs={pairs}", f"scores={scores}", f"out={pairs.parent / 'w.json'}", "bootstrap=0", *extra]
    return run_fit(parse(FusionSettings, compose("fit", argv, schema=FusionSettings)))


def test_fusion_refuses_a_dimension_written_as_strings_naming_file_and_line(tmp_path):
    from reward.data.manifest import ManifestError

    def as_strings(rows):
        for r in rows:
            r["lighting"] = str(round(r["lighting"], 3))

    pairs, scores = _fusion_files(tmp_path, as_strings)
    with pytest.raises(ManifestError, match=rf"{scores}:1: 'lighting' is the string '[0-9.]+', not a number"):
        _fit(pairs, scores)  # it was dropped in silence: a fit on layout alone


def test_fusion_refuses_a_score_too_large_to_fit_with_one_clear_message(tmp_path, caplog):
    from reward.data.manifest import ManifestError

    def huge(rows):
        rows[3]["layout"] = 1e200

    pairs, scores = _fusion_files(tmp_path, huge)
    with pytest.raises(ManifestError, match=rf"{scores}:4: 'layout' = 1e\+200 is beyond ±1e\+09, too large"):
        _fit(pairs, scores)
    assert "does not differ" not in caplog.text  # no false warning on the way
    fitted = _fit(pairs, scores, "skip_bad=true")  # or the row is skipped and counted
    assert fitted.meta["n_skipped"] >= 1 and fitted.meta["warnings"] == []


def test_dataset_manifest_refuses_mos_outside_the_scale_and_counts_duplicated_rows(tmp_path, caplog):
    import iqa_fixtures

    from conftest import run_cli
    from reward.commands.dataset_manifest import run

    iqa_fixtures.kadid(tmp_path)
    lines = (tmp_path / "dmos.csv").read_text().splitlines()
    name, ref, _, var = lines[2].split(",")
    lines[2] = f"{name},{ref},7.5,{var}"  # KADID-10k's DMOS is on 1-5
    lines.append(lines[5].rsplit(",", 2)[0] + ",1.11," + lines[5].rsplit(",", 1)[1])  # line 6's image, another DMOS
    (tmp_path / "dmos.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "m.jsonl"
    assert (
        run_cli("dataset_manifest", run, [f"data=kadid10k:{tmp_path}", f"out={out}"], schema=DatasetManifestSettings)
        == 2
    )
    assert not out.exists()
    with caplog.at_level(logging.WARNING):
        assert (
            run_cli(
                "dataset_manifest",
                run,
                [f"data=kadid10k:{tmp_path}", f"out={out}", "skip_bad=true"],
                schema=DatasetManifestSettings,
            )
            == 0
        )
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert len(sidecar["skipped"]) == 1 and "7.5 is outside kadid10k's scale [1, 5]" in sidecar["skipped"][0]["reason"]
    assert sidecar["skipped"][0]["line"] == 3 and sidecar["duplicates"] == 1
    assert "1 rows rate an image again with another value" in caplog.text
    assert all(1 <= json.loads(row)["mos"] <= 5 for row in out.read_text().splitlines())


def test_mos_script_without_arguments_says_what_it_needs_and_exits_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "training/mos.py"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "missing required key raw (set it with raw=...)" in done.stderr
    raw = tmp_path / "raw.jsonl"
    rows = [
        {"image": f"{i}.png", "dimension": "lighting", "annotator": a, "rating": 1 + (i + k) % 5}
        for i in range(6)
        for k, a in enumerate("xyz")
    ]
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    made = subprocess.run(
        [sys.executable, "training/mos.py", f"raw={raw}"], cwd=ROOT, env=_env(), capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "train.jsonl").is_file() and (tmp_path / "annotators.json").is_file()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["out="], "out= is empty: name the output folder (an unset shell variable?)"),
        (["reward=sa-iqa", "reward.model="], "reward.model= is empty: name a scorer folder or a Hub repo id"),
        (["reward.model={tmp}"], "reward.model={tmp}: not a checkpoint folder (no config.json in it)"),
        (["hydra/job_logging=disabled"], "hydra/job_logging: Hydra's own settings (hydra.*) are not used"),
        (["hydra.job.chdir=true"], "hydra.job.chdir: Hydra's own settings (hydra.*) are not used"),
        (["db/mysql=x"], "db/mysql=x: config groups are chosen by name"),
    ],
)
def test_what_an_unset_variable_or_a_hydra_group_gives_is_one_line_and_exit_2(args, said, tmp_path, capsys):
    from conftest import run_cli
    from reward.commands.evaluate import EvaluateSettings, run

    data = _manifest(tmp_path / "data")
    base = {
        "reward=qbench": None,
        f"reward.model={ROOT}/no-model": None,
        f"data={data}": None,
        f"out={tmp_path}/o": None,
    }
    keys = {a.split("=")[0] for a in args}
    argv = [a for a in base if a.split("=")[0] not in keys] + [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert run_cli("evaluate", run, argv, schema=EvaluateSettings) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert said.replace("{tmp}", str(tmp_path)) in err
    assert not (tmp_path / "o").exists()


def test_an_output_folder_whose_lock_file_name_would_be_too_long_is_locked_all_the_same(tmp_path):
    from reward.core.outputs import prepare_output

    out = tmp_path / ("a" * 250)  # a folder name the file system takes; ".NAME.lock" it would not
    run = prepare_output(out, "evaluate", {"a": 1})
    assert (out / "run.json").is_file() and run.lock is not None and run.lock.is_locked


def test_a_datasets_folder_whose_splits_disagree_on_a_columns_type_is_one_line(tmp_path, capsys):
    from conftest import run_cli
    from reward.commands.evaluate import EvaluateSettings, run

    folder = tmp_path / "hf"
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (16, 16), (40 * i, 0, 0)).save(folder / f"{i}.png")
    rows = {"train": [1.0, 2.0], "test": ["x2", "x3"]}  # the MOS a number in one split, a word in the other
    for split, values in rows.items():
        lines = [json.dumps({"image": f"{i}.png", "mos": v, "dimension": "q"}) for i, v in enumerate(values)]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    argv = ["reward=qbench", f"reward.model={ROOT}", f"data=hf:{folder}:train", f"out={tmp_path / 'o'}"]
    assert run_cli("evaluate", run, argv, schema=EvaluateSettings) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(f"error: hf:{folder}:train: datasets cannot read"), err


ENDING_PROCESS = """
import atexit, logging, sys
from pathlib import Path
from reward.commands.evaluate import EvaluateSettings
from reward.core.cli import main
atexit.register(lambda: Path(sys.argv[1]).write_text("atexit ran"))
def run(cfg):
    logging.getLogger("reward").info("logged at the end")
    print("printed, not flushed", end="")
    return "result"
print(" / main returned", main("evaluate", run, schema=EvaluateSettings, argv=["reward=qbench", "data=d", "out=o"]))
"""


@pytest.mark.parametrize("world_size", [None, "2"])
def test_a_launched_process_ends_after_its_atexit_handlers_with_its_output_flushed(tmp_path, world_size):
    """One process of a multi-process launch ends at the end of ``main`` (os._exit after an orderly shutdown: the
    interpreter's teardown, where a gloo worker thread can abort the process, is skipped); a plain run returns."""
    env = {**_env(), **({"WORLD_SIZE": world_size} if world_size else {})}
    env.pop("PYTHONUNBUFFERED", None)  # stdout a pipe's buffer: lost unless flushed before os._exit
    marker = tmp_path / "marker"
    proc = subprocess.run(
        [sys.executable, "-c", ENDING_PROCESS, str(marker)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.read_text() == "atexit ran" and "logged at the end" in proc.stdout + proc.stderr
    assert "printed, not flushed" in proc.stdout
    assert ("main returned result" in proc.stdout) is (world_size is None)
