"""No secret in any file: a token or API key given in the settings, on the command line or in the environment is
never written to a record (run.json, results, summaries), a model card, training_args.bin, a log line, a lock file, an
upload or a message; a record says "<secret given>". Each test gives a fresh random secret and searches every byte
written for it."""

from __future__ import annotations

import json
import logging
import pickle
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir

from reward.core.cli import compose, main, setup_logging
from reward.core.outputs import OutputFolderError, check_output, prepare_output
from reward.core.secrets import REDACTED
from reward.data.files import append_jsonl, atomic_write_json
from training.commands.sft import SftSettings

ROOT = Path(__file__).resolve().parents[1]


def _secret(prefix: str = "hf_") -> str:
    return prefix + secrets.token_hex(16)


def _files_holding(folder: Path, *values: str) -> list[str]:
    """Every file under ``folder`` (hidden ones and binaries too) whose bytes hold one of ``values``."""
    needles = [v.encode() for v in values]
    return [str(p) for p in sorted(folder.rglob("*")) if p.is_file() and any(n in p.read_bytes() for n in needles)]


def _env() -> dict[str, str]:
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def test_run_json_and_the_folders_lock_say_a_secret_was_given_never_its_value(tmp_path, monkeypatch):
    token, key = _secret(), _secret("sk-")
    monkeypatch.setattr(sys, "argv", ["training/sft.py", f"trainer.hub_token={token}", "out=o"])
    settings = {"trainer": {"hub_token": token, "lr": 0.1}, "reward": {"server": {"api_key": key, "model": "m"}}}
    out = tmp_path / "out"
    run = prepare_output(out, "sft", settings)
    saved = json.loads((out / "run.json").read_text())["settings"]
    assert saved["trainer"]["hub_token"] == REDACTED and saved["reward"]["server"]["api_key"] == REDACTED
    assert saved["reward"]["server"]["model"] == "m" and saved["trainer"]["lr"] == 0.1
    probe = "import sys\nfrom reward.core.outputs import check_output\ncheck_output(sys.argv[1], 'sft', {})"
    busy = subprocess.run([sys.executable, "-c", probe, str(out)], env=_env(), capture_output=True, text=True)
    assert "is in use by another run" in busy.stderr and "trainer.hub_token=<secret given>" in busy.stderr
    assert token not in busy.stderr
    assert _files_holding(tmp_path, token, key) == []  # run.json, and the lock file beside the folder
    del run


def test_a_secret_changed_on_resume_is_no_difference_and_an_old_record_never_shows_one(tmp_path):
    out = tmp_path / "out"
    prepare_output(out, "sft", {"trainer": {"hub_token": _secret(), "lr": 0.1}})
    (out / "checkpoint-1").mkdir()
    resumed = check_output(out, "sft", {"trainer": {"hub_token": _secret(), "lr": 0.1}}, resume=True)
    assert resumed.resumed  # another token: the same run
    old = json.loads((out / "run.json").read_text())
    leaked = _secret()
    old["settings"]["trainer"]["hub_token"] = leaked  # a run.json written before secrets were redacted
    (out / "run.json").write_text(json.dumps(old))
    del resumed
    with pytest.raises(OutputFolderError) as refused:
        check_output(out, "sft", {"trainer": {"hub_token": None, "lr": 0.2}}, resume=True)
    assert "trainer.lr: 0.1 -> 0.2" in str(refused.value) and leaked not in str(refused.value)
    assert "hub_token" not in str(refused.value)


def test_secrets_of_the_environment_never_reach_a_record_or_a_log_line(tmp_path, monkeypatch, capsys):
    hf, openai, other = _secret(), _secret("sk-"), _secret("gh_")
    monkeypatch.setenv("HF_TOKEN", hf)
    monkeypatch.setenv("OPENAI_API_KEY", openai)
    monkeypatch.setenv("MY_SERVICE_TOKEN", other)
    atomic_write_json(tmp_path / "metrics.json", {"server": {"error": f"401: bad key {openai}", "url": "http://x"}})
    append_jsonl(tmp_path / "scores.jsonl", [{"image": "a.png", "note": f"pushed with {hf} and {other}"}])
    setup_logging()
    logging.getLogger("reward.test").info("request with Authorization: Bearer %s to https://bob:%s@host/v1", hf, other)
    out = capsys.readouterr().out
    assert "Authorization: Bearer <secret given> to https://<secret given>@host/v1" in out
    assert _files_holding(tmp_path, hf, openai, other) == []
    assert REDACTED in (tmp_path / "metrics.json").read_text()


def test_the_model_cards_command_says_a_token_was_given():
    from training.shared.cards import command_line

    token = _secret()
    line = command_line("training/sft.py", {"trainer": {"hub_token": token, "max_steps": 5}}, {"trainer": {}})
    assert token not in line and f"+trainer.hub_token='{REDACTED}'" in line and "+trainer.max_steps=5" in line


@pytest.mark.parametrize("flag", [["--cfg", "job"], ["--help"]])
def test_printed_settings_never_show_a_secret(flag, capsys, tmp_path):
    from training.commands.sft import run

    token = _secret()
    argv = ["model.path=m", "data.train=d.jsonl", f"out={tmp_path / 'o'}", f"trainer.hub_token={token}", *flag]
    main("sft", run, argv=argv, schema=SftSettings)
    printed = capsys.readouterr()
    assert token not in printed.out + printed.err and REDACTED in printed.out


def test_grpo_never_puts_the_hub_token_in_the_arguments_trl_pickles(tmp_path, monkeypatch):
    from rl.commands.grpo import GrpoSettings, grpo_args, parse_settings, prepare
    from training.procedural.synthetic import write_inpainting_tasks

    monkeypatch.delenv("HF_TOKEN", raising=False)
    token = _secret()
    tasks = write_inpainting_tasks(tmp_path / "tasks", 8, size=32, seed=0)
    overrides = [f"policy.path={tmp_path}", f"data={tasks}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        s = parse_settings(compose("grpo", overrides=[*overrides, f"+trainer.hub_token={token}"], schema=GrpoSettings))
    args = grpo_args(s, tmp_path / "run")
    assert args.hub_token is None and token.encode() not in pickle.dumps(args)  # what training_args.bin holds
    prepare(s, tmp_path / "run")
    assert _files_holding(tmp_path, token) == []


def _sft_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("sft", overrides=overrides, schema=SftSettings)


@pytest.mark.slow
def test_an_sft_run_that_pushes_with_a_token_writes_and_uploads_it_nowhere(
    tiny_vlm_path, tmp_path, monkeypatch, capfd
):
    from huggingface_hub import constants

    from reward.testing.hub_server import FakeHub
    from reward.testing.loopback import serve
    from training.commands.sft import run as run_sft
    from training.procedural.synthetic import write_benchmark

    token = _secret()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    bench = write_benchmark(tmp_path / "bench", 8, size=56, seed=5)
    out = tmp_path / "run"
    hub = FakeHub()
    overrides = [
        f"model.path={tiny_vlm_path}",
        f"data.train={bench.ratings}",
        f"data.test={bench.ratings}",
        f"out={out}",
        "prompt.type=1",
        "prompt.dimensions=[lighting]",
        "trainer.max_steps=2",
        "trainer.save_steps=1",  # a checkpoint too: trl writes training_args.bin into each
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "push_to_hub=true",
        "hub_model_id=example-org/tiny-scorer",
        f"+trainer.hub_token={token}",
    ]
    with serve(hub.app()) as url:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        setup_logging()
        run_sft(_sft_cfg(overrides))
    assert hub.tokens == {token}  # the push used the token given
    assert list(out.glob("checkpoint-*/training_args.bin")) and (out / "scorer" / "README.md").is_file()
    assert _files_holding(tmp_path, token) == []  # run.json, card, sft_result.json, metrics, training_args.bin ...
    assert not [name for name, data in hub.files["example-org/tiny-scorer"].items() if token.encode() in data]
    logs = capfd.readouterr()
    assert token not in logs.out + logs.err
    assert REDACTED in (out / "run.json").read_text() and REDACTED in (out / "scorer" / "README.md").read_text()


@pytest.mark.slow
def test_an_evaluation_through_a_server_with_an_api_key_writes_it_nowhere(tiny_vlm, tmp_path, monkeypatch, capfd):
    import numpy as np
    from PIL import Image

    from reward.commands.evaluate import EvaluateSettings
    from reward.commands.evaluate import run as run_evaluate
    from reward.testing.openai_server import serve_openai

    given, from_env = _secret("sk-"), _secret("sk-")
    monkeypatch.setenv("OPENAI_API_KEY", from_env)
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(3):
        Image.fromarray(np.full((56, 56, 3), 70 * i, np.uint8)).save(tmp_path / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + i})
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with serve_openai(tiny_vlm) as url:
        for name, key in (("given", given), ("env", "null")):  # a key in the settings, then one from the environment
            overrides = [
                "reward=qbench",
                "reward.backend=openai",
                f"reward.server.base_urls=[{url}]",
                "reward.server.model=tiny",
                f"reward.server.top_logprobs={len(tiny_vlm.tokenizer)}",
                f"reward.server.api_key={key}",
                f"data={tmp_path / 'r.jsonl'}",
                f"out={tmp_path / name}",
            ]
            with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
                cfg = compose("evaluate", overrides=overrides, schema=EvaluateSettings)
            setup_logging()
            assert run_evaluate(cfg)["lighting"]["n"] == 3
    assert _files_holding(tmp_path, given, from_env) == []
    logs = capfd.readouterr()
    assert given not in logs.out + logs.err and from_env not in logs.out + logs.err
    recorded = json.loads((tmp_path / "given" / "run.json").read_text())["settings"]["reward"]["server"]
    assert recorded["api_key"] == REDACTED


def test_every_secret_trainer_key_is_kept_out_of_the_arguments_and_a_tokenizer_token_is_no_secret(tmp_path):
    from reward.core.secrets import split_hub_token

    token, other = _secret(), _secret("wb_")
    trainer = {"hub_token": token, "wandb_api_key": other, "eos_token": "<|im_end|>", "chat_token": "<|im_start|>"}
    args, given = split_hub_token(trainer)
    assert given == token and args == {"eos_token": "<|im_end|>", "chat_token": "<|im_start|>"}
    out = tmp_path / "out"
    run = prepare_output(out, "sft", {"trainer": trainer, "prompt": "<|im_start|>user"})
    template = "<|im_start|>user ... <|im_end|>"
    atomic_write_json(out / "chat.json", {"template": template, "note": f"logged in as {other}"})
    saved = json.loads((out / "run.json").read_text())["settings"]
    assert saved["trainer"] == {
        "hub_token": REDACTED,
        "wandb_api_key": REDACTED,
        "eos_token": "<|im_end|>",  # a tokenizer's token, shown as given and never blanked from other files
        "chat_token": "<|im_start|>",
    }
    assert json.loads((out / "chat.json").read_text()) == {"template": template, "note": f"logged in as {REDACTED}"}
    del run


def test_a_secret_in_a_urls_query_or_an_authorization_setting_is_never_written(tmp_path):
    key, bearer = _secret("sk-"), _secret("Bearer ")
    url = f"https://llm.example/v1?api_key={key}&model=m"
    settings = {"reward": {"server": {"base_urls": [url, "http://other/v1?sig=abc123&x=1"]}}, "authorization": bearer}
    out = tmp_path / "out"
    run = prepare_output(out, "evaluate", settings)
    saved = json.loads((out / "run.json").read_text())["settings"]
    assert saved["reward"]["server"]["base_urls"] == [
        f"https://llm.example/v1?api_key={REDACTED}&model=m",
        f"http://other/v1?sig={REDACTED}&x=1",
    ]
    assert saved["authorization"] == REDACTED and _files_holding(tmp_path, key, bearer, "abc123") == []
    del run


def test_an_uncaught_traceback_never_prints_a_secret(tmp_path):
    token = _secret()
    crash = (
        "import sys\nfrom reward.core.cli import main\nfrom reward.commands.evaluate import EvaluateSettings\n"
        "def run(cfg):\n    raise RuntimeError('upload refused for ' + sys.argv[1])\n"
        "main('evaluate', run, argv=['reward=qbench', 'data=d.jsonl', 'out=o', '+reward.api_key=' + sys.argv[1]],"
        " schema=EvaluateSettings)\n"
    )
    crashed = subprocess.run([sys.executable, "-c", crash, token], env=_env(), capture_output=True, text=True)
    assert crashed.returncode == 1 and f"RuntimeError: upload refused for {REDACTED}" in crashed.stderr
    assert token not in crashed.stderr + crashed.stdout


def test_secret_settings_spelled_in_camel_case_with_hyphens_or_as_digits_are_never_written(tmp_path):
    from reward.core.secrets import split_hub_token

    digits = 91827364554637281
    settings = {
        "server": {"apiKey": "sk-" + "c" * 20, "access-token": "at-" + "d" * 20},
        "trainer": {"hub_token": digits},
    }
    out = tmp_path / "out"
    run = prepare_output(out, "sft", settings)
    saved = json.loads((out / "run.json").read_text())["settings"]
    assert saved["server"] == {"apiKey": REDACTED, "access-token": REDACTED}
    assert saved["trainer"]["hub_token"] == REDACTED
    assert _files_holding(tmp_path, str(digits), "c" * 20, "d" * 20) == []
    assert split_hub_token({"hub_token": digits, "authToken": 12345678901}) == ({}, str(digits))
    del run
