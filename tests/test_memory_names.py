"""Memory-bank entries for dimensions named in any script: their own folders, found by their exact name, and never
routed by a cosine between names the embedder cannot represent (real all-MiniLM-L6-v2)."""

from __future__ import annotations

import logging

import pytest
from pace_doubles import example_protocol

from conftest import run_cli
from pace_judge.commands import memory as memory_command
from pace_judge.commands.memory import MemorySettings
from pace_judge.memory_bank import Embedder, MemoryBank
from pace_judge.protocol import load_protocol, protocol_to_dict, save_protocol
from reward.core.config import parse
from reward.core.errors import UserError

CHINESE = ("清晰度", "色彩", "噪点")  # sharpness, colour, noise


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def _protocol(dimension: str, probes: int):
    protocol = example_protocol(dimension)
    protocol.probes = protocol.probes[:probes]
    return protocol


def test_each_chinese_dimension_has_its_own_readable_folder_and_is_found_by_its_exact_name(tmp_path, embedder):
    bank = MemoryBank(tmp_path / "mem", embedder)
    sizes = {dim: n for dim, n in zip(CHINESE, (1, 2, 3), strict=True)}
    slugs = [bank.add(_protocol(dim, n)) for dim, n in sizes.items()]
    assert slugs == list(CHINESE)  # readable: the names themselves
    assert sorted(p.name for p in (tmp_path / "mem").iterdir() if p.is_dir()) == sorted(CHINESE)
    for dim, n in sizes.items():
        stored = bank.load(dim)
        assert stored.dimension == dim and len(stored.probes) == n  # 色彩 shows 色彩, not 清晰度
    with pytest.raises(UserError, match="no stored protocol for '锐度'"):
        bank.load("锐度")


def test_import_replace_overwrites_only_the_same_dimension(tmp_path, embedder):
    files = {}
    for dim, n in (("清晰度", 1), ("色彩", 2)):
        files[dim] = tmp_path / "in" / f"{dim}.json"  # a file named in Chinese too, unquoted on the command line
        files[dim].parent.mkdir(exist_ok=True)
        save_protocol(_protocol(dim, n), files[dim])
    mem = str(tmp_path / "mem")
    assert (
        run_cli(
            "memory",
            memory_command.run,
            ["import", f"memory={mem}", f"protocol={files['清晰度']}"],
            memory_command.SUBCOMMANDS,
            schema=MemorySettings,
        )
        == 0
    )
    argv = ["import", f"memory={mem}", f"protocol={files['色彩']}", "replace=true"]
    assert run_cli("memory", memory_command.run, argv, memory_command.SUBCOMMANDS, schema=MemorySettings) == 0
    bank = MemoryBank(mem, embedder)
    assert sorted(e["dimension"] for e in bank.entries().values()) == ["清晰度", "色彩"]
    assert len(bank.load("清晰度").probes) == 1 and len(bank.load("色彩").probes) == 2
    shown = memory_command.run(parse(MemorySettings, memory_command_cfg(mem, "show", "色彩")))
    assert shown["dimension"] == "色彩" and shown == protocol_to_dict(bank.load("色彩"))


def memory_command_cfg(mem: str, cmd: str, dimension: str):
    from reward.core.cli import compose

    return compose(
        "memory",
        [cmd, f"memory={mem}", f"dimension={dimension}"],
        subcommands=memory_command.SUBCOMMANDS,
        schema=MemorySettings,
    )


def test_a_name_the_embedder_cannot_represent_is_not_routed_by_cosine(tmp_path, embedder, caplog):
    assert embedder.unknown("噪点") == ["噪", "点"] and embedder.unknown("image noise") == []
    bank = MemoryBank(tmp_path / "mem", embedder)
    for dim in ("清晰度", "色彩", "lighting harmony"):
        bank.add(example_protocol(dim))
    with caplog.at_level(logging.WARNING, logger="pace_judge.memory_bank"):
        hit = bank.route("噪点", theta=0.8)  # MiniLM: [UNK] [UNK], the same vector as 色彩 (cosine 1.000)
    assert not hit.fast and hit.slug is None and hit.unknown == ["噪", "点"]
    assert "cannot represent '噪点'" in caplog.text
    exact = bank.route("色彩", theta=0.8)  # its exact name still finds it
    assert exact.fast and exact.dimension == "色彩" and exact.slug == "色彩"
    english = bank.route("harmony of the lighting", theta=0.8)  # stored [UNK] names take no part in cosines
    assert english.fast and english.dimension == "lighting harmony"
    assert load_protocol(bank.protocol_file(english.slug)).dimension == "lighting harmony"
