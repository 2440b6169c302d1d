"""reward.data.files.atomic_write_with: any writer fills a temporary file that replaces the target only on success."""

from __future__ import annotations

import pytest
from PIL import Image

from reward.data.files import atomic_write_with


def test_a_writer_that_infers_the_format_from_the_suffix_writes_the_file(tmp_path):
    out = atomic_write_with(tmp_path / "sub" / "grid.png", Image.new("RGB", (3, 2), "red").save)
    assert Image.open(out).size == (3, 2) and Image.open(out).format == "PNG"
    assert [p.name for p in out.parent.iterdir()] == ["grid.png"]


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def half_then_crash(tmp):
        tmp.write_text("half")
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        atomic_write_with(target, half_then_crash)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
