"""Read JSON out of a model's free-text answer: code fences, prose around it, single quotes, trailing commas,
Python literals. Nothing is executed (``ast.literal_eval`` only reads literals).

Example:
    >>> parse_json("Sure! ```json\\n{'rules': [{'q': 'Crisp?', 'w': 1.0,},],}\\n``` Hope this helps.")
    {'rules': [{'q': 'Crisp?', 'w': 1.0}]}
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_LITERALS = {"true": "True", "false": "False", "null": "None"}


class AnswerFormatError(ValueError):
    """A model answer from which no usable JSON could be read."""


def _balanced(text: str, start: int) -> str | None:
    """The bracketed span starting at ``text[start]``, skipping brackets inside quoted strings."""
    stack, quote, escaped = [], "", False
    pairs = {"{": "}", "[": "]"}
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return text[start : i + 1]
    return None


def _candidates(text: str) -> list[str]:
    blocks = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    out = []
    for block in blocks:
        i = 0
        while i < len(block):
            span = _balanced(block, i) if block[i] in "{[" else None
            if span:
                out.append(span)
                i += len(span)
            else:
                i += 1
    return out


def _load(span: str) -> Any:
    for attempt in (span, _TRAILING_COMMA.sub(r"\1", span)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            pass
    pythonish = re.sub(r"\b(true|false|null)\b", lambda m: _LITERALS[m.group(1)], span)
    for attempt in (span, pythonish):
        try:
            return ast.literal_eval(attempt)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    raise AnswerFormatError("no valid JSON object")


def parse_json(text: str) -> Any:
    """The first JSON object or list in ``text``; :class:`AnswerFormatError` when there is none."""
    for span in _candidates(text or ""):
        try:
            return _load(span)
        except AnswerFormatError:
            continue
    raise AnswerFormatError("the answer holds no JSON object")


def parse_verdict(text: str) -> tuple[bool, str]:
    """The Critic's ``Yes. Reason: ...`` / ``No. Reason: ...`` (also VALID/INVALID or {"valid": ..., "reason"})."""
    stripped = (text or "").strip()
    m = re.match(r"^[\s*_#>`-]*(yes|no|valid|invalid)\b[*_`]*(?:[.:,!]\s*|\s+|$)(.*)$", stripped, re.I | re.S)
    if m:
        reason = re.sub(r"^reason\s*:\s*", "", m.group(2).strip(), flags=re.I)
        return m.group(1).lower() in ("yes", "valid"), reason.strip() or "no reason given"
    try:
        obj = parse_json(stripped)
    except AnswerFormatError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("valid"), bool):
        return obj["valid"], str(obj.get("reason", "no reason given"))
    raise AnswerFormatError("the verdict starts with neither Yes nor No")
