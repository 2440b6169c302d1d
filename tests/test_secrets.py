"""No secret in any file: tokens are read where their libraries read them (``HF_TOKEN``, ``OPENAI_API_KEY``), a token
given as a setting is refused before anything is written, and the one writer of run.json shows a secret that slips
through (a secret-named key, a URL's password or query key) as "<secret given>". Each test gives a fresh random secret
and searches every byte written for it."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from hydra import initialize_config_dir

from conftest import run_cli
from reward.commands.evaluate import EvaluateSettings
from reward.core.cli import compose, setup_logging
from reward.core.config import parse
from reward.core.outputs import prepare_output
from reward.core.secrets import REDACTED
from training.commands.sft import SftSettings

ROOT = Path(__file__).resolve().parents[1]


def _secret(prefix: str = "hf_") -> str:
    return prefix + secrets.token_hex(16)


def _files_holding(folder: Path, *values: str) -> list[str]:
    """Every file under ``folder`` (hidden ones and binaries too) whose bytes hold one of ``values``."""
    needles = [v.encode() for v in values]
    return [str(p) for p in sorted(folder.rglob("*")) if p.is_file() and any(n in p.read_bytes() for n in needles)]


@pytest.mark.parametrize(
    ("command", "key"),
    [("sft", "trainer.hub_token"), ("sft", "+trainer.wandb_api_key"), ("evaluate", "reward.server.apiKey")],
)
def test_a_token_given_as_a_setting_is_refused_in_one_line_saying_where_it_goes(command, key, tmp_path, capsys):
    from reward.commands.evaluate import run as run_evaluate
    from training.commands.sft import run as run_sft

    token, out = _secret(), tmp_path / "out"
    base = {
        "sft": ["model.path=m", "data.train=d.jsonl"],
        "evaluate": ["reward=qbench", "reward.model=m", "data=d.jsonl"],
    }[command]
    run, schema = {"sft": (run_sft, SftSettings), "evaluate": (run_evaluate, EvaluateSettings)}[command]
    status = run_cli(command, run, [*base, f"out={out}", f"{key}={token}"], schema=schema)
    err = capsys.readouterr().err
    assert status == 2 and f"{key.lstrip('+')}: a token or key is never a setting" in err
    assert "HF_TOKEN" in err and "OPENAI_API_KEY" in err and token not in err
    assert not out.exists()


def test_run_json_shows_secret_named_keys_and_url_secrets_as_given_never_their_values(tmp_path):
    key, password, digits = _secret("sk-"), _secret("pw"), 91827364554637281
    urls = [f"https://bob:{password}@llm.example/v1", f"https://llm.example/v1?api_key={key}&model=m"]
    settings = {"server": {"base_urls": urls, "apiKey": key}, "trainer": {"hub_token": digits, "eos_token": "<e>"}}
    out = tmp_path / "out"
    run = prepare_output(out, "evaluate", settings)
    saved = json.loads((out / "run.json").read_text())["settings"]
    assert saved["server"]["base_urls"] == [
        f"https://{REDACTED}@llm.example/v1",
        f"https://llm.example/v1?api_key={REDACTED}&model=m",
    ]
    assert saved["server"]["apiKey"] == REDACTED and saved["trainer"] == {"hub_token": REDACTED, "eos_token": "<e>"}
    assert _files_holding(tmp_path, key, password, str(digits)) == []
    del run


def test_the_model_cards_command_says_a_token_was_given():
    from training.shared.cards import command_line

    token = _secret()
    line = command_line("training/sft.py", {"trainer": {"hub_token": token, "max_steps": 5}}, {"trainer": {}})
    assert token not in line and f"+trainer.hub_token='{REDACTED}'" in line and "+trainer.max_steps=5" in line


@pytest.mark.parametrize("flag", [["--cfg", "job"], ["--help"]])
def test_printed_settings_never_show_a_url_password(flag, capsys, tmp_path):
    from reward.commands.evaluate import run
    from reward.core.cli import main

    password = _secret("pw")
    argv = ["reward=qbench", "reward.model=m", "data=d.jsonl", f"out={tmp_path / 'o'}"]
    main(
        "evaluate",
        run,
        argv=[*argv, f"reward.server.base_urls=[https://bob:{password}@h/v1]", *flag],
        schema=EvaluateSettings,
    )
    printed = capsys.readouterr()
    assert password not in printed.out + printed.err and "base_urls" in printed.out


def _sft_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("sft", overrides=overrides, schema=SftSettings)


@pytest.mark.slow
def test_an_sft_run_that_pushes_reads_the_token_from_the_environment_and_writes_it_nowhere(
    tiny_vlm_path, tmp_path, monkeypatch, capfd
):
    from huggingface_hub import constants
    from server_doubles import FakeHub

    from reward.testing.loopback import serve
    from training.commands.sft import run as run_sft
    from training.procedural.synthetic import write_benchmark

    token = _secret()
    monkeypatch.setenv("HF_TOKEN", token)
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
    ]
    with serve(hub.app()) as url:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        setup_logging()
        run_sft(parse(SftSettings, _sft_cfg(overrides)))
    assert hub.tokens == {token}  # the push used the environment's token
    assert list(out.glob("checkpoint-*/training_args.bin")) and (out / "scorer" / "README.md").is_file()
    assert _files_holding(tmp_path, token) == []  # run.json, card, sft_result.json, metrics, training_args.bin ...
    assert not [name for name, data in hub.files["example-org/tiny-scorer"].items() if token.encode() in data]
    logs = capfd.readouterr()
    assert token not in logs.out + logs.err


@pytest.mark.slow
def test_an_evaluation_through_a_server_with_an_api_key_writes_it_nowhere(tiny_vlm, tmp_path, monkeypatch, capfd):
    import numpy as np
    from PIL import Image

    from reward.commands.evaluate import run as run_evaluate
    from reward.testing.openai_server import serve_openai

    named, from_env = _secret("sk-"), _secret("sk-")
    monkeypatch.setenv("OPENAI_API_KEY", from_env)
    monkeypatch.setenv("SCORER_SERVER", named)  # a name no rule knows as a secret's
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(3):
        Image.fromarray(np.full((56, 56, 3), 70 * i, np.uint8)).save(tmp_path / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + i})
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with serve_openai(tiny_vlm) as url:
        for name, env in (("named", "SCORER_SERVER"), ("default", "OPENAI_API_KEY")):
            overrides = [
                "reward=qbench",
                "reward.backend=openai",
                f"reward.server.base_urls=[{url}]",
                "reward.server.model=tiny",
                f"reward.server.top_logprobs={len(tiny_vlm.tokenizer)}",
                f"reward.server.api_key_env={env}",
                f"data={tmp_path / 'r.jsonl'}",
                f"out={tmp_path / name}",
            ]
            with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
                cfg = compose("evaluate", overrides=overrides, schema=EvaluateSettings)
            setup_logging()
            assert run_evaluate(parse(EvaluateSettings, cfg))["lighting"]["n"] == 3
    assert _files_holding(tmp_path, named, from_env) == []
    logs = capfd.readouterr()
    assert named not in logs.out + logs.err and from_env not in logs.out + logs.err
    recorded = json.loads((tmp_path / "named" / "run.json").read_text())["settings"]["reward"]["server"]
    assert recorded["api_key_env"] == "SCORER_SERVER"  # where the key is, never the key


def test_a_key_pasted_for_its_variables_name_is_written_as_given_and_a_key_read_is_masked_in_any_line(monkeypatch):
    import base64

    from reward.core.secrets import api_key, mask, redact

    key, password = _secret("sk-"), _secret("pw")
    assert redact({"server": {"api_key_env": key}}) == {"server": {"api_key_env": REDACTED}}
    assert redact({"server": {"api_key_env": "SCORER_KEY"}}) == {"server": {"api_key_env": "SCORER_KEY"}}
    monkeypatch.setenv("SCORER_KEY", key)
    assert api_key("SCORER_KEY", [f"https://bob:{password}@llm.example/v1"]) == key
    basic = base64.b64encode(f"bob:{password}".encode()).decode()  # what the HTTP client sends for user:password
    echoed = mask(f"401: Incorrect API key provided: {key}; Authorization: Basic {basic} ({password})")
    assert echoed == f"401: Incorrect API key provided: {REDACTED}; Authorization: Basic {REDACTED} ({REDACTED})"
