"""Q-Bench A2 description: the paper's prompts generate a low-level description per image or pair; a text judge
(any OpenAI-compatible endpoint) scores completeness, precision and relevance 0/1/2 against the golden
description, 5 rounds averaged. A description file (JSON list or JSONL) holds ``{"img_path": "a.jpg" | ["a.jpg",
"b.jpg"], "golden_description": "..."}`` (or ``gt_description``, ``description``), read as A1's questions are.

Example:
    >>> parse_score("The output is quite complete. Score: 2")
    2
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from reward.core.secrets import api_key
from reward.data import SkippedRow
from reward.data.images import load_image
from reward.data.manifest import ManifestError
from reward.qbench.a1_questions import image_paths, load_rows, markdown_table
from reward.vlm import IMAGE

if TYPE_CHECKING:
    from reward.vlm import VLM

logger = logging.getLogger(__name__)

PROMPTS = {  # Q-Bench+ §III-C, its input format: the prompt, then the image(s) where IMAGE stands
    "single": f"Describe the quality, aesthetics and other low-level appearance of the image in details.\n{IMAGE}",
    "pair": "Compare and jointly analyze the quality, aesthetics and other low-level appearance of the images in "
    f"details.\nThe first image: {IMAGE}\nThe second image: {IMAGE}",
}
GOLDEN_KEYS = ("golden_description", "gt_description", "description")
DIMENSIONS = ("completeness", "precision", "relevance")
_JUDGE = {  # the released Q-Bench judge instructions, one per dimension
    "completeness": "Evaluate whether the description [MLLM DESC] completely includes the low-level visual "
    "information in the description [GOLDEN DESC]. Please rate score 2 for completely or almost completely including "
    "reference information, 0 for not including at all, 1 for including part of the information or similar "
    "description. Please only provide the result in the following format: Score:",
    "precision": "Evaluate whether the description [MLLM DESC] precisely reflects the description [GOLDEN DESC]. "
    "Please rate score 2 for totally no controversial low-level description, 1 for less controversial low-level "
    "description than matched description, and 0 for more controversial low-level description than matched "
    "description. Please only provide the result in the following format: Score:",
    "relevance": "Evaluate whether the description [MLLM DESC] is relevant to the low-level visual information, "
    "which may include blur, noise, exposure, artifact, color, lighting, focus, composition, etc. Please rate score "
    "2 for completely relevant, 1 for partly relevant, and 0 for totally irrelevant. Please only provide the result "
    "in the following format: Score:",
}


@dataclass(frozen=True)
class Description:
    images: tuple[Path, ...]
    golden: str
    line: int

    @property
    def part(self) -> str:
        return "pair" if len(self.images) == 2 else "single"


@dataclass
class A2JudgeSettings:
    base_url: str | None = field(
        default=None, metadata={"help": "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (null: no scoring)"}
    )
    model: str = field(default="gpt-4o", metadata={"help": "the judge model's name on that endpoint"})
    api_key_env: str = field(
        default="OPENAI_API_KEY",
        metadata={"help": 'environment variable holding the key ("EMPTY" if unset, as for vLLM)'},
    )
    rounds: int = field(default=5, metadata={"help": "the paper's 5 rounds, averaged", "range": (1, 100)})
    temperature: float = field(default=1.0, metadata={"help": "sampling makes the rounds differ", "range": (0, 2)})
    max_workers: int = field(default=8, metadata={"help": "concurrent requests", "range": (1, 1024)})
    timeout: float = field(default=60.0, metadata={"help": "seconds per request", "range": (0, None, True)})


def load_descriptions(
    path: str | Path,
    *,
    skip_bad: bool = False,
    allow_absolute_paths: bool = False,
    image_root: str | Path | None = None,
) -> tuple[list[Description], list[SkippedRow]]:
    """A golden-description file's rows and the bad rows skipped (read as A1's questions are)."""

    def parse(item: dict, base: Path, where: str, line: int) -> Description:
        golden = next((item[k] for k in GOLDEN_KEYS if isinstance(item.get(k), str) and item[k].strip()), None)
        if golden is None or item.get("img_path") is None:
            raise ManifestError(f"{where}: a row needs 'img_path' and a non-empty 'golden_description'.")
        return Description(image_paths(base, item["img_path"], where, True, allow_absolute_paths), golden, line)

    return load_rows(path, parse, skip_bad=skip_bad, what="description", image_root=image_root)


def describe(
    vlm: VLM, rows: Sequence[Description], *, max_new_tokens: int = 256, system: str | None = None, batch_size: int = 8
) -> list[str]:
    """Greedy descriptions with the paper's prompt for a single image or a pair."""
    out: list[str] = []
    for start in tqdm(range(0, len(rows), batch_size), desc="A2 describe", disable=None):
        chunk = rows[start : start + batch_size]
        groups = [[load_image(p) for p in r.images] for r in chunk]
        out += vlm.generate(groups, [PROMPTS[r.part] for r in chunk], system=system, max_new_tokens=max_new_tokens)
    return out


_STATED = re.compile(r"score\s*\**\s*[:=：]\s*\**\s*([012])(?![.,]?\d)\s*\**\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)
_BARE = re.compile(r"^\s*\**([012])\**\s*\.?\s*$")


def parse_score(text: str) -> int | None:
    r"""The 0/1/2 score a judge reply states, as the instruction asks (``Score: 2`` ending its line, or a reply that
    is only the digit); ``None`` for anything else, so that a score is never guessed from prose.

    >>> [parse_score(t) for t in ("Score: 2", "**Score:** 0", "It is complete.\nScore: 1.", "2")]
    [2, 0, 1, 2]
    >>> [parse_score(t) for t in ("1.5 out of 2?", "Score: 1.5", "a 1 or 2", "There are 0 issues.", "Score: 3")]
    [None, None, None, None, None]
    """
    stated = {int(v) for v in _STATED.findall(text)}
    if len(stated) == 1:
        return stated.pop()
    if stated:  # two different stated scores: the reply contradicts itself
        return None
    bare = _BARE.match(text)
    return int(bare.group(1)) if bare else None


def judge(outputs: Sequence[str], rows: Sequence[Description], settings: A2JudgeSettings) -> list[dict[str, Any]]:
    """Per row: each dimension's mean score over the valid rounds (``None`` if no round could be parsed) and, as
    ``DIMENSION_rounds``, the rounds' scores (0, 1 or 2)."""
    from openai import OpenAI

    key = api_key(settings.api_key_env, [settings.base_url or ""])
    client = OpenAI(base_url=settings.base_url, api_key=key, timeout=settings.timeout)

    def ask(job: tuple[int, str, int]) -> tuple[int, str, int | None]:
        i, dim, r = job
        content = f"{_JUDGE[dim]}\n\n[MLLM DESC]: {outputs[i]}\n\n[GOLDEN DESC]: {rows[i].golden}"
        messages = [{"role": "user", "content": content}]
        reply = client.chat.completions.create(
            model=settings.model, temperature=settings.temperature, seed=r, messages=messages
        )
        text = reply.choices[0].message.content or ""
        score = parse_score(text)
        if score is None:
            logger.warning(
                "line %d, %s, round %d: no 0/1/2 score in the judge's reply %r", rows[i].line, dim, r, text[:80]
            )
        return i, dim, score

    jobs = [(i, d, r) for i in range(len(rows)) for d in DIMENSIONS for r in range(settings.rounds)]
    scores: list[dict[str, list[int]]] = [{d: [] for d in DIMENSIONS} for _ in rows]
    with ThreadPoolExecutor(max_workers=max(1, settings.max_workers)) as pool:
        for i, dim, s in tqdm(pool.map(ask, jobs), total=len(jobs), desc="A2 judge", disable=None):
            if s is not None:
                scores[i][dim].append(s)
    means = [{d: float(np.mean(v)) if v else None for d, v in row.items()} for row in scores]
    return [m | {f"{d}_rounds": v for d, v in row.items()} for m, row in zip(means, scores, strict=True)]


def description_metrics(per_row: Sequence[dict[str, Any]], rows: Sequence[Description]) -> dict[str, Any]:
    """Per part (single images, pairs): each dimension's mean over the rows the judge scored on it (``n_scored``),
    their sum (Q-Bench+'s "Sum.") only when every dimension was scored on every row (else ``None``, and
    ``incomplete`` names the dimensions short of rows), and ``p``: per dimension the frequencies ``[P0, P1, P2]`` of
    the scores over every judged round, as Tables IV and V report them."""
    out: dict[str, Any] = {}
    for part in ("single", "pair"):
        items = [s for s, r in zip(per_row, rows, strict=True) if r.part == part]
        if not items:
            continue
        kept = {d: [s[d] for s in items if s[d] is not None] for d in DIMENSIONS}
        means: dict[str, Any] = {d: float(np.mean(v)) if v else None for d, v in kept.items()}
        scored = {d: len(v) for d, v in kept.items()}
        incomplete = [d for d in DIMENSIONS if scored[d] < len(items)]
        means["sum"] = None if incomplete else sum(means[d] for d in DIMENSIONS)
        rounds = {d: [v for x in items for v in (x.get(f"{d}_rounds") or [])] for d in DIMENSIONS}
        p = {d: [rounds[d].count(k) / len(rounds[d]) for k in (0, 1, 2)] if rounds[d] else None for d in DIMENSIONS}
        out[part] = {**means, "n": len(items), "n_scored": scored, "incomplete": incomplete, "p": p}
    return out


def format_description_table(metrics: dict[str, Any]) -> str:
    """Markdown as Q-Bench+'s Tables IV / V: per dimension P0 / P1 / P2 and the score, then the sum."""
    header = ["part", *(h for d in DIMENSIONS for h in (f"{d} P0/P1/P2", d)), "sum", "n"]
    rows, notes = [], []
    for part, m in metrics.items():
        p, cells = m.get("p") or {}, [part]
        for d in DIMENSIONS:
            cells += ["/".join(f"{100 * v:.2f}%" for v in p[d]) if p.get(d) else "-", _score(m[d])]
        rows.append([*cells, _score(m["sum"]), str(m["n"])])
        if m.get("incomplete"):
            short = ", ".join(f"{d} ({m['n_scored'][d]} of {m['n']} rows)" for d in m["incomplete"])
            notes.append(f"- {part}: no sum, the judge's replies gave no score for {short}")
    lines = ["### A2 description (0-2 per dimension)", "", *markdown_table(header, rows)]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
