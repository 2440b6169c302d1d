"""Q-Bench A1 question files: the released LLVisionQA / LLVisionQA-pair JSON (or the same rows as JSONL), a row
:data:`QUESTION_EXAMPLE` (``img_path`` one path or a pair; ``type`` 0 yes-or-no, 1 what, 2 how; ``concern`` 0-3, the
paper's four quadrants: :data:`CONCERNS`), image paths relative to the file's folder (absolute ones only with
``allow_absolute_paths``); or the Hugging Face layout lmms-eval reads (``q-future/Q-Bench-HF``, ``Q-Bench2-HF``,
:func:`hf_row`) from a ``.parquet`` file, a ``save_to_disk`` folder (images decoded when asked) or JSON/JSONL. Every
bad row is named by ``file:line`` (also inside a JSON list) and fails or, with ``skip_bad``, is skipped and counted.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from pathlib import Path
from typing import Any, TypeVar

from reward.core.errors import MissingInputError
from reward.data import DatasetImage, SkippedRow
from reward.data.images import ImageError, load_image
from reward.data.manifest import ManifestError, iter_jsonl, resolve_image_path

logger = logging.getLogger(__name__)
T = TypeVar("T")

TYPES: dict[int, str] = {0: "yes-or-no", 1: "what", 2: "how"}
CONCERNS: dict[str, dict[int, str]] = {
    "single": {0: "global distortion", 1: "global other", 2: "in-context distortion", 3: "in-context other"},
    "pair": {0: "comparison distortion", 1: "comparison other", 2: "joint distortion", 3: "joint other"},
}
QUESTION_EXAMPLE = (
    '{"img_path": "a.jpg", "question": "Is this image blurry?", "candidates": ["Yes", "No"], '
    '"correct_ans": "No", "type": 0, "concern": 0}'
)


@dataclass(frozen=True)
class Question:
    """One multiple-choice question about one image or a pair (``images`` holds one or two paths)."""

    images: tuple[Path | DatasetImage, ...]  # files, or images held in a question table
    question: str
    candidates: tuple[str, ...]
    correct: str
    type: int
    concern: int
    line: int
    extra: dict = field(default_factory=dict)

    @property
    def part(self) -> str:
        """``single`` or ``pair``."""
        return "pair" if len(self.images) == 2 else "single"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table."""
    return ["| " + " | ".join(header) + " |", "|---" * len(header) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def json_list_items(path: Path) -> Iterator[tuple[int, dict | ManifestError]]:
    """Each element of a top-level JSON list with the line it starts on."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ManifestError(f"{path}:{line}: not UTF-8 text (byte {err.start}); save the file as UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ManifestError(
            f"{path}:{err.lineno}: invalid JSON ({err.msg}); the file must be a JSON list of rows "
            f"like {QUESTION_EXAMPLE}, or JSONL with one such row per line."
        ) from err
    if not isinstance(data, list):
        raise ManifestError(f"{path}: expected a JSON list of question rows, got {type(data).__name__}.")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    for _ in data:
        while text[pos] in " \t\r\n,":
            pos += 1
        item, end = decoder.raw_decode(text, pos)
        line = text.count("\n", 0, pos) + 1
        if not isinstance(item, dict):
            yield line, ManifestError(f"{path}:{line}: expected a JSON object, got {type(item).__name__}.")
        else:
            yield line, item
        pos = end


HF_OPTIONS = ("option0", "option1", "option2", "option3")
HF_IMAGES = ("image", "image1", "image2")


def hf_row(row: dict, where: str) -> dict:
    """A row of the Hugging Face layout as a released row, as lmms-eval reads it: the candidates are the options up
    to the first ``"N/A"``, the answer is the candidate at ``correct_choice``'s letter, ``type`` and ``concern`` are
    ``question_type`` and ``question_concern``, the images ``image`` or ``[image1, image2]``."""
    candidates = list(takewhile(lambda o: o is not None and str(o).strip() != "N/A", map(row.get, HF_OPTIONS)))
    letter = row.get("correct_choice")
    index = ord(letter.strip().upper()) - ord("A") if isinstance(letter, str) and len(letter.strip()) == 1 else -1
    if not 0 <= index < len(candidates):
        raise ManifestError(
            f"{where}: correct_choice {letter!r} names none of the {len(candidates)} options before the first 'N/A' "
            f"({candidates}); it must be a letter A-{chr(ord('A') + max(len(candidates), 1) - 1)}."
        )
    pair = row.get("image1") is not None and row.get("image2") is not None
    images = [row["image1"], row["image2"]] if pair else row.get("image")
    used = {*HF_OPTIONS, *HF_IMAGES, "question", "correct_choice", "question_type", "question_concern"}
    return {
        "img_path": images,
        "question": row.get("question"),
        "candidates": candidates,
        "correct_ans": candidates[index],
        "type": row.get("question_type"),
        "concern": row.get("question_concern"),
        **{k: v for k, v in row.items() if k not in used},
    }


def _table_items(path: Path) -> Iterator[tuple[int, dict | ManifestError]]:
    """The rows of a ``.parquet`` file or a ``save_to_disk`` folder, image cells as lazy :class:`DatasetImage`."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path)) if path.is_dir() else datasets.Dataset.from_parquet(str(path))
    except (FileNotFoundError, ValueError, OSError) as err:
        raise ManifestError(
            f"{path}: not a question table ({err}); pass a .parquet file, a folder saved with "
            "save_to_disk, or a JSON/JSONL question file"
        ) from err
    if isinstance(ds, datasets.DatasetDict):
        raise ManifestError(f"{path} holds splits {list(ds)}; pass one split, e.g. {path / next(iter(ds))}.")
    for name in HF_IMAGES:
        feature = ds.features.get(name)
        if isinstance(feature, datasets.Image) and feature.decode:
            ds = ds.cast_column(name, datasets.Image(decode=False))
    for i in range(len(ds)):
        row = dict(ds[i])
        for name in HF_IMAGES:
            cell = row.get(name)
            if isinstance(cell, dict) and (cell.get("bytes") or cell.get("path")):
                label = row.get("id", i)
                row[name] = DatasetImage(ds, i, name, f"{path.name}/{label}/{name}")
        yield i + 1, row


def image_name(image: Path | DatasetImage) -> str:
    """How an image of a question is named in the outputs: its path, or ``table/id/column`` for a table's image."""
    return image.key if isinstance(image, DatasetImage) else str(image)


def image_paths(
    base: Path, value: Any, where: str, check: bool, allow_absolute: bool = False
) -> tuple[Path | DatasetImage, ...]:
    """``img_path``: one path, or a list of two for a pair (inside the file's folder unless ``allow_absolute``), or
    images held in a question table; with ``check`` each is decoded once."""
    values = value if isinstance(value, list) else [value]
    if len(values) not in (1, 2):
        raise ManifestError(f"{where}: 'img_path' must be one path or a list of two (a pair), got {len(values)}.")
    images = []
    for value in values:
        if isinstance(value, DatasetImage):
            image = value
        elif isinstance(value, str) and value.strip():
            image = resolve_image_path(base, value, where=where, allow_absolute=allow_absolute)
        else:
            raise ManifestError(f"{where}: 'img_path' entries must be non-empty strings, got {value!r}.")
        try:
            if check:
                load_image(image)
        except FileNotFoundError as err:
            raise ManifestError(
                f"{where}: image {value!r} not found at {image} (relative paths are read from {base}); fix the path "
                "or add the file."
            ) from err
        except (ImageError, OSError) as err:
            raise ManifestError(f"{where}: image {image_name(image)!r} is unusable: {err}") from err
        images.append(image)
    return tuple(images)


def _parse(row: dict, base: Path, where: str, line: int, check: bool, allow_absolute: bool = False) -> Question:
    if "correct_choice" in row and "option0" in row:  # the Hugging Face layout
        row = hf_row(row, where)
    missing = [k for k in ("img_path", "question", "candidates", "correct_ans") if row.get(k) is None]
    if missing:
        raise ManifestError(
            f"{where}: missing field(s) {', '.join(map(repr, missing))}; a row looks like {QUESTION_EXAMPLE}."
        )
    cands = row["candidates"]
    if not isinstance(cands, list) or len(cands) < 2 or not all(isinstance(c, str) and c.strip() for c in cands):
        raise ManifestError(f"{where}: 'candidates' must be a list of at least two answer texts, got {cands!r}.")
    if len(set(cands)) != len(cands):
        raise ManifestError(f"{where}: 'candidates' {cands} repeat an answer; each option must be distinct.")
    if len(cands) > 26:
        raise ManifestError(f"{where}: {len(cands)} candidates; at most 26 can be lettered A-Z.")
    if row["correct_ans"] not in cands:
        raise ManifestError(
            f"{where}: 'correct_ans' {row['correct_ans']!r} is not among the candidates {cands}; "
            "fix the answer or the candidates."
        )
    qtype, concern = row.get("type", 0), row.get("concern", 0)
    if isinstance(qtype, bool) or qtype not in TYPES:
        raise ManifestError(f"{where}: unknown 'type' {qtype!r}; use 0 (yes-or-no), 1 (what) or 2 (how).")
    if isinstance(concern, bool) or concern not in (0, 1, 2, 3):
        raise ManifestError(f"{where}: unknown 'concern' {concern!r}; use 0-3 (the four quadrants).")
    if not isinstance(row["question"], str) or not row["question"].strip():
        raise ManifestError(f"{where}: 'question' must be a non-empty string.")
    images = image_paths(base, row["img_path"], where, check, allow_absolute)
    used = {"img_path", "question", "candidates", "correct_ans", "type", "concern"}
    extra = {k: v for k, v in row.items() if k not in used}
    return Question(images, row["question"], tuple(cands), row["correct_ans"], int(qtype), int(concern), line, extra)


def load_rows(
    path: str | Path,
    parse: Callable[[dict, Path, str, int], T],
    *,
    skip_bad: bool = False,
    what: str = "row",
    image_root: str | Path | None = None,
) -> tuple[list[T], list[SkippedRow]]:
    """Parse every row of a JSON-list or JSONL file with ``parse(row, base_dir, "file:line", line)``; ``base_dir`` is
    ``image_root`` when given, else the file's folder. Bad rows raise ``ManifestError`` naming ``file:line``, or with
    ``skip_bad=True`` are logged, skipped and returned."""
    path = Path(path)
    base = path.resolve() if path.is_dir() else path.resolve().parent
    if image_root is not None:
        base = Path(image_root).expanduser().resolve()
        if not base.is_dir():
            raise MissingInputError(f"image_root={image_root}: no such folder; name the folder your images are in")
    table = path.is_dir() or path.suffix.lower() == ".parquet"
    if not table and not path.is_file():
        raise MissingInputError(f"question file {str(path)!r} does not exist; pass a LLVisionQA JSON or JSONL file")
    if table:
        items = _table_items(path)
    else:  # (bytes: a line that is not UTF-8 is named where it is read)
        items = json_list_items(path) if path.read_bytes().lstrip()[:1] == b"[" else iter_jsonl(path)
    rows: list[T] = []
    skipped: list[SkippedRow] = []
    for line, item in items:
        where = f"{path} row {line}" if table else f"{path}:{line}"
        try:
            if isinstance(item, ManifestError):
                raise item
            rows.append(parse(item, base, where, line))
        except ManifestError as err:
            if not skip_bad:
                raise ManifestError(
                    f"{str(err).rstrip('.')}; or pass skip_bad=true to skip and count such rows"
                ) from err
            logger.warning("skipping bad %s: %s", what, err)
            skipped.append(SkippedRow(line, str(err)))
    if not rows:
        first = f"; first problem: {skipped[0].reason}" if skipped else ""
        raise ManifestError(f"{path}: no usable {what}{first}")
    if skipped:
        logger.warning("%s: skipped %d of %d %ss", path, len(skipped), len(skipped) + len(rows), what)
    return rows, skipped


def load_questions(
    path: str | Path,
    *,
    skip_bad: bool = False,
    check_images: bool = True,
    allow_absolute_paths: bool = False,
    image_root: str | Path | None = None,
) -> tuple[list[Question], list[SkippedRow]]:
    """A question file's questions and the bad rows skipped (:func:`load_rows`)."""
    parse = functools.partial(_parse, check=check_images, allow_absolute=allow_absolute_paths)
    return load_rows(path, parse, skip_bad=skip_bad, what="question", image_root=image_root)
