"""PACE's memory bank: routing with the real all-MiniLM-L6-v2 embeddings, two concurrent writers, the CLI, and a
scripted slow-path build that is stored and then reused on the fast path."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pace_doubles import ScriptedBackend, example_protocol

from conftest import random_images, run_cli
from pace_judge.calibration import CalibrationSource
from pace_judge.commands import memory as memory_command
from pace_judge.commands.calibrate import CalibrateSettings
from pace_judge.commands.judge import JudgeSettings
from pace_judge.commands.memory import MemorySettings
from pace_judge.memory_bank import Embedder, MemoryBank
from pace_judge.protocol import load_protocol, protocol_to_dict
from reward.core.config import parse
from reward.data.files import safe_name

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def test_near_synonyms_route_fast_and_unrelated_dimensions_slow(tmp_path, embedder):
    bank = MemoryBank(tmp_path / "mem", embedder)
    for dim in ("tactile satisfaction", "text legibility", "lighting harmony"):
        bank.add(example_protocol(dim))
    pairs = [
        ("satisfaction of tactile feel", "tactile satisfaction"),
        ("legibility of text", "text legibility"),
        ("harmony of the lighting", "lighting harmony"),
    ]
    for query, stored in pairs:
        r = bank.route(query, theta=0.8)
        assert r.fast and r.dimension == stored and r.cosine > 0.8
    for query in ("human vitality", "cinematic narrative"):
        r = bank.route(query, theta=0.8)
        assert not r.fast and r.cosine < 0.5
    assert not bank.route("text readability", theta=0.8).fast and bank.route("text readability", theta=0.7).fast


def test_two_writer_processes_lose_nothing(tmp_path, embedder):
    folder = tmp_path / "mem"
    dims = {w: [f"{w} dimension {i}" for i in range(6)] for w in ("alpha", "beta")}
    vectors = {d: v.tolist() for ds in dims.values() for d, v in zip(ds, embedder.encode(ds), strict=True)}
    template = protocol_to_dict(example_protocol())
    writer = (  # a light process (no torch): a protocol from JSON, the embeddings computed above
        "import json, sys\nfrom pace_judge.memory_bank import MemoryBank\n"
        "from pace_judge.protocol import protocol_from_dict\n"
        "dims, vectors, raw = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[4])\n"
        "bank = MemoryBank(sys.argv[3])\n"
        "for d in dims:\n    bank.add(protocol_from_dict({**raw, 'dimension': d}), embedding=vectors[d])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", writer, json.dumps(ds), json.dumps(vectors), str(folder), json.dumps(template)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for ds in dims.values()
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    bank = MemoryBank(folder, embedder)
    entries = bank.entries()
    assert sorted(e["dimension"] for e in entries.values()) == sorted(vectors)
    for e in entries.values():
        assert load_protocol(folder / e["protocol"]).dimension == e["dimension"]
    assert not list(folder.rglob("*.tmp"))


def main(argv: list[str]) -> int:
    return run_cli("memory", memory_command.run, argv, memory_command.SUBCOMMANDS, schema=MemorySettings)


def test_memory_cli_imports_lists_shows_and_deletes(tmp_path, pace_protocol_path, embedder, caplog, capsys):
    caplog.set_level(logging.INFO, logger="pace_judge.commands.memory")
    folder = tmp_path / "mem"
    assert main(["import", f"memory={folder}", f"protocol={pace_protocol_path}"]) == 0
    assert main(["import", f"memory={folder}", f"protocol={pace_protocol_path}"]) == 2  # stored already
    assert "stored already (replace=true overwrites it" in capsys.readouterr().err
    stored = MemoryBank(folder, embedder).load("sharpness")
    assert stored.calibrated and stored.anchor_path("high").is_file()  # anchors copied beside the protocol
    assert stored.anchor_path("high").parent == folder / "sharpness" / "anchors"
    caplog.clear()
    assert main(["list", f"memory={folder}"]) == 0 and "sharpness" in caplog.text and "3 probes" in caplog.text
    assert main(["show", f"memory={folder}", "dimension=Sharpness"]) == 0 and '"pace-protocol/1"' in caplog.text
    assert main(["route", f"memory={folder}", "dimension=sharpness of the image"]) == 0
    assert "fast path" in caplog.text
    assert main(["delete", f"memory={folder}", "dimension=sharpness"]) == 0
    assert MemoryBank(folder).entries() == {} and not (folder / "sharpness").exists()
    assert main(["show", f"memory={folder}", "dimension=sharpness"]) == 2
    capsys.readouterr()
    assert main(["show", f"memory={folder}"]) == 2
    assert "show needs dimension=" in capsys.readouterr().err


def _script(prompt: str, n_images: int) -> str:
    if prompt.startswith("[Planning Agent]"):
        return '{"subdimensions": ["surface texture", "material softness", "fabric detail"]}'
    if prompt.startswith("[Critic Agent]"):
        return "Yes. Reason: observable"
    sub = prompt.split("related to ")[1].split(" (")[0]
    return json.dumps(
        {
            "rules": [
                {
                    "question": f"Is the {sub} clearly visible?",
                    "option_scores": {"Yes": 5, "Medium": 3, "No": 1},
                    "weight": 1.0,
                }
            ]
        }
    )


def _calibration_split(folder: Path) -> Path:
    """A labelled calibration split of one dimension: its highest- and lowest-MOS images become the anchors."""
    import numpy as np
    from PIL import Image

    (folder / "img").mkdir(parents=True)
    rows = []
    for i, mos in enumerate([2.0, 4.4, 1.6, 3.0]):
        Image.fromarray(np.full((40, 40, 3), 60 * i, np.uint8)).save(folder / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "feel", "mos": mos})
    (folder / "calib.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "calib.jsonl"


def test_an_uncalibrated_stored_protocol_is_never_scored_until_calibrated(tmp_path, tiny_vlm, embedder):
    from pace_judge.commands.calibrate import run as run_calibrate
    from pace_judge.config import PaceConfig
    from pace_judge.pace import PaceReward
    from reward.core.errors import UserError

    images = random_images(2, seed=4)
    bank = tmp_path / "mem"
    cfg = {"model": "unused", "dimension": "tactile satisfaction", "memory": str(bank)}
    slow = ScriptedBackend(_script, tiny_vlm)
    first = PaceReward(PaceConfig(**cfg), backend=slow)
    assert first.scorer is None  # the Visualizer waits for an example image: the first one scored
    with pytest.raises(UserError, match="perceptual-rewards calibrate protocol=.*memory=") as err:
        first.score(images)
    assert str(bank) in str(err.value) and any(n == 1 for _, n in slow.calls)  # built from the example image
    entries = MemoryBank(bank, embedder).entries()
    assert [(e["dimension"], e["calibrated"]) for e in entries.values()] == [("tactile satisfaction", False)]
    fast_cfg = PaceConfig(**{**cfg, "dimension": "satisfaction of tactile feel"})
    with pytest.raises(
        UserError, match="stored uncalibrated"
    ):  # the fast path refuses the draft too, before any scoring
        PaceReward(fast_cfg, backend=ScriptedBackend(_script, tiny_vlm))

    split = _calibration_split(tmp_path / "calib")
    stored = bank / safe_name("tactile satisfaction") / "protocol.json"
    run_calibrate(parse(CalibrateSettings, {"protocol": str(stored), "benchmark": str(split), "memory": str(bank)}))
    fast = ScriptedBackend(_script, tiny_vlm)
    again = PaceReward(fast_cfg, backend=fast)
    assert again.route["path"] == "fast" and again.route["matched"] == "tactile satisfaction" and fast.calls == []
    judged = again.judge(images)
    assert all(1.6 <= s <= 4.4 for s in judged.scores.tolist())  # on the anchors' human scale
    assert {e["scale"] for e in judged.explanations} == {"anchors 1.6-4.4"}


def test_a_configured_calibration_source_calibrates_before_storing_and_the_fast_path_reuses_it(
    tmp_path, tiny_vlm, embedder
):
    from pace_judge.config import PaceConfig
    from pace_judge.pace import PaceReward

    images = random_images(3, seed=6)
    split = _calibration_split(tmp_path / "calib")
    cfg = {
        "model": "unused",
        "dimension": "tactile satisfaction",
        "memory": str(tmp_path / "mem"),
        "calibration": CalibrationSource(benchmark=str(split)),
    }
    first = PaceReward(PaceConfig(**cfg), backend=ScriptedBackend(_script, tiny_vlm))
    scores = first.score(images).scores
    assert first.route["path"] == "slow" and first.scorer.protocol.calibrated
    entry = MemoryBank(tmp_path / "mem", embedder).entries()[safe_name("tactile satisfaction")]
    assert entry["calibrated"] is True
    assert all(1.6 <= s <= 4.4 for s in scores.tolist())
    fast = ScriptedBackend(_script, tiny_vlm)
    again = PaceReward(PaceConfig(**{**cfg, "dimension": "satisfaction of tactile feel"}), backend=fast)
    assert again.route["path"] == "fast" and fast.calls == []
    assert again.scorer.protocol_id == first.scorer.protocol_id
    assert again.score(images).scores.tolist() == pytest.approx(scores.tolist(), abs=1e-5)


def test_the_visualizer_sees_the_closest_stored_protocol_as_reference_rules(tmp_path, tiny_vlm, embedder):
    from pace_judge.config import PaceConfig
    from pace_judge.pace import PaceReward

    bank = MemoryBank(tmp_path / "mem", embedder)
    bank.add(example_protocol("tactile satisfaction"))
    seen = []

    def script(prompt: str, n_images: int) -> str:
        if prompt.startswith("[Visualizer Agent]"):
            seen.append(prompt)
        return _script(prompt, n_images)

    cfg = {
        "model": "unused",
        "dimension": "surface feel",  # cosine 0.44 to "tactile satisfaction": below theta, the slow path
        "memory": str(tmp_path / "mem"),
        "calibration": CalibrationSource(benchmark=str(_calibration_split(tmp_path / "calib"))),
    }
    reward = PaceReward(PaceConfig(**cfg), backend=ScriptedBackend(script, tiny_vlm))
    reward.score(random_images(1, seed=2))
    assert reward.route["path"] == "slow" and len(seen) == 3
    for prompt in seen:
        assert "related dimension 'tactile satisfaction'" in prompt
        assert '- "Are object edges crisp?" (Yes: 5, Somewhat: 3, No: 1)' in prompt  # the stored rules
    reference = reward.scorer.protocol.provenance["reference"]
    assert reference["dimension"] == "tactile satisfaction" and 0.3 < reference["cosine"] < 0.8


def test_dimensions_close_to_a_configured_expert_route_to_that_reward(tiny_vlm_path, embedder):
    from reward import get_reward

    images = random_images(3, seed=8)
    experts = {"blur": {"name": "qbench", "model": str(tiny_vlm_path)}}
    pace = get_reward("pace", {"model": str(tiny_vlm_path), "dimension": "image blur", "experts": experts})
    assert pace.route["path"] == "expert qbench" and pace.route["matched"] == "blur"  # cosine 0.82 > 0.8
    qbench = get_reward("qbench", {"model": str(tiny_vlm_path)}).score(images).scores
    assert pace.score(images).scores.tolist() == pytest.approx((1 + 4 * qbench).tolist(), abs=1e-5)
    unrelated = get_reward(
        "pace", {"model": str(tiny_vlm_path), "dimension": "tactile satisfaction", "experts": experts}
    )
    assert unrelated.expert is None and unrelated.scorer is None  # slow path, waiting for an example image


def test_several_experts_give_their_mean_on_the_1_to_5_scale(tiny_vlm_path, tiny_scorer_path):
    from reward import get_reward

    images = random_images(3, seed=9)
    sa_iqa = {"name": "sa-iqa", "model": str(tiny_scorer_path), "dimensions": ["lighting"]}  # one: it stands in
    members = [{"name": "qbench", "model": str(tiny_vlm_path)}, sa_iqa]
    pace = get_reward("pace", {"model": str(tiny_vlm_path), "dimension": "noise", "experts": {"noise": members}})
    qbench = get_reward("qbench", {"model": str(tiny_vlm_path)}).score(images).scores.double()
    sa_iqa = get_reward("sa-iqa", {"model": str(tiny_scorer_path)}).score(images).dimensions["lighting"].double()
    judged = pace.judge(images)
    expected = ((1 + 4 * qbench) + sa_iqa) / 2  # qbench 0-1 mapped onto 1-5; sa-iqa already on 1-5
    assert judged.scores.tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert pace.route["path"] == "expert qbench+sa-iqa"
    explained = judged.explanations[0]["members"]
    assert [m["expert"] for m in explained] == ["qbench", "sa-iqa"]
    assert explained[1]["raw"] == pytest.approx(float(sa_iqa[0]), abs=1e-5)
    weighted = get_reward(
        "pace",
        {
            "model": str(tiny_vlm_path),
            "dimension": "noise",
            "experts": {"noise": {"members": members, "weights": [3, 1]}},
        },
    )
    expected = (3 * (1 + 4 * qbench) + sa_iqa) / 4
    assert weighted.score(images).scores.tolist() == pytest.approx(expected.tolist(), abs=1e-5)


def test_a_near_miss_of_theta_is_said_once_and_the_agents_failure_names_theta(tmp_path, embedder, caplog):
    from pace_judge.agents import ProtocolBuildError
    from pace_judge.config import PaceConfig
    from pace_judge.pace import PaceReward

    MemoryBank(tmp_path / "mem", embedder).add(example_protocol("sharpness"))
    experts = {"sharpness": {"name": "qbench", "model": "unused"}}  # never loaded: not routed to
    cfg = PaceConfig(model="unused", dimension="image sharpness", memory=str(tmp_path / "mem"), experts=experts)
    with caplog.at_level(logging.INFO, logger="pace_judge"):
        reward = PaceReward(cfg, backend=ScriptedBackend(lambda prompt, n: "I cannot help with that."))
        with pytest.raises(ProtocolBuildError) as err:
            reward.score(random_images(1, seed=3))
    said = [r.getMessage() for r in caplog.records if "not above theta" in r.getMessage()]
    assert len(said) == 1 and "'image sharpness': slow path" in said[0]  # cosine 0.789: said once, not per call
    for what in ("expert", "stored protocol"):
        assert f"the closest {what} is 'sharpness' at cosine 0.789, not above theta=0.8 (theta=0.78 routes" in said[0]
    assert "Routing: the closest expert is 'sharpness' at cosine 0.789" in str(err.value)
    assert "theta=0.78 routes it there, or dimension='sharpness'" in str(err.value)


def test_experts_are_matched_by_the_memory_banks_rule(embedder, tiny_vlm_path):
    from pace_judge.config import PaceConfig
    from pace_judge.pace import PaceReward

    qbench = {"name": "qbench", "model": str(tiny_vlm_path)}
    cfg = {"model": "unused", "experts": {"噪点": qbench, "Image Blur": qbench}}
    unknown = PaceReward(PaceConfig(**cfg, dimension="色彩"), backend=ScriptedBackend(_script))
    assert unknown.route["path"] == "slow"  # [UNK] [UNK], as 噪点 is (cosine 1.000): no cosine between them
    spaced = PaceReward(PaceConfig(**cfg, dimension="image  blur", theta=0.99), backend=ScriptedBackend(_script))
    assert spaced.route["matched"] == "Image Blur"  # the same name, case and spacing aside


def test_experts_given_whole_on_the_command_line_in_any_script():
    from pace_judge.commands.judge import JudgeSettings
    from reward.core.cli import compose
    from reward.core.config import parse
    from reward.core.errors import UserError

    rest = ["images=IMAGES", "out=OUT", "dimension=清晰度", "model=M"]
    line = "experts={清晰度: {name: qbench}, image sharpness: [{name: qbench}, {name: sa-iqa}]}"
    settings = parse(JudgeSettings, compose("judge", [line, *rest]))
    assert settings.experts == {
        "清晰度": {"name": "qbench"},
        "image sharpness": [{"name": "qbench"}, {"name": "sa-iqa"}],
    }
    with pytest.raises(UserError, match=r"experts=5: give a mapping \{DIMENSION: \{name: REWARD"):
        parse(JudgeSettings, compose("judge", ["experts=5", *rest]))


def test_an_expert_scoring_several_dimensions_gives_the_one_it_is_named_after(tiny_scorer_path):
    from reward import get_reward
    from reward.core.errors import UserError

    images = random_images(3, seed=10)
    sa_iqa = get_reward("sa-iqa", {"model": str(tiny_scorer_path)}).score(images)
    cfg = {"model": str(tiny_scorer_path), "dimension": "Lighting"}
    pace = get_reward("pace", {**cfg, "experts": {"lighting": {"name": "sa-iqa", "model": str(tiny_scorer_path)}}})
    judged = pace.judge(images)
    assert judged.scores.tolist() == pytest.approx(sa_iqa.dimensions["lighting"].tolist(), abs=1e-5)  # 1-5 already
    assert judged.scores.tolist() != pytest.approx(sa_iqa.scores.tolist(), abs=1e-5)  # not the fused score
    assert judged.explanations[0]["members"][0]["dimension"] == "lighting"
    noise = {"noise": {"name": "sa-iqa", "model": str(tiny_scorer_path)}}
    unnamed = get_reward("pace", {**cfg, "dimension": "noise", "experts": noise})
    with pytest.raises(UserError, match=r"sa-iqa scores the dimensions \['lighting', 'harmony'\], none named 'noise'"):
        unnamed.judge(images)


def test_the_memory_bank_a_judge_run_stores_into_is_no_new_input_of_its_rerun(
    tmp_path, tiny_vlm, tiny_vlm_path, monkeypatch
):
    from run_state import mark_incomplete

    from pace_judge import pace
    from pace_judge.commands.judge import run as run_judge
    from reward.core.outputs import RunComplete

    monkeypatch.setattr(pace, "load_backend", lambda *a: ScriptedBackend(_script, tiny_vlm))
    MemoryBank(tmp_path / "mem").add(example_protocol("text legibility"))  # a bank that exists: an input
    (tmp_path / "imgs").mkdir()
    for i, image in enumerate(random_images(2, seed=5)):
        image.save(tmp_path / "imgs" / f"{i}.png")
    settings = {
        "dimension": "tactile satisfaction",
        "memory": str(tmp_path / "mem"),
        "calibration": {"benchmark": str(_calibration_split(tmp_path / "calib"))},
        "images": str(tmp_path / "imgs"),
        "out": str(tmp_path / "out"),
        "model": str(tiny_vlm_path),
    }
    rows = run_judge(parse(JudgeSettings, settings))  # the slow path stores its calibrated protocol in the bank
    assert len(MemoryBank(tmp_path / "mem").entries()) == 2
    with pytest.raises(RunComplete, match="already complete"):
        run_judge(parse(JudgeSettings, settings))
    mark_incomplete(tmp_path / "out")
    assert [r["score"] for r in run_judge(parse(JudgeSettings, {**settings, "resume": "auto"}))] == [
        r["score"] for r in rows
    ]
