"""Resolve candidate answer words to single token ids, in the context where the model reads them.

Qwen tokenizers split some rating words in two and give "good" and " good" different ids, so a word is
resolved by tokenizing the context with and without it: the difference must be exactly one token.

Example:
    >>> from reward.vlm.tokens import default_separator
    >>> default_separator("The quality of the image is"), default_separator("")
    (' ', '')
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from reward.core.errors import UserError


class CandidateTokenError(UserError):
    """A candidate word is not one token in context, or two candidates share a token."""


def default_separator(response_prefix: str) -> str:
    """The text between the response prefix and the answer word: a space after a word, nothing at the start."""
    return "" if not response_prefix or response_prefix[-1].isspace() else " "


def _extra_tokens(tokenizer: Any, context: str, word: str, sep: str) -> list[int] | None:
    base = tokenizer.encode(context, add_special_tokens=False)
    full = tokenizer.encode(context + sep + word, add_special_tokens=False)
    if full[: len(base)] != base:
        return None  # the word changed the context's own tokens (e.g. a trailing space in the prefix)
    return full[len(base) :]


def _suggest(tokenizer: Any, context: str, word: str, sep: str) -> list[str]:
    variants = dict.fromkeys([word.lower(), word.capitalize(), word.upper(), word.strip()])
    out = []
    for v in variants:
        for s in dict.fromkeys([sep, " ", ""]):
            extra = _extra_tokens(tokenizer, context, v, s)
            if extra is not None and len(extra) == 1 and (v, s) != (word, sep):
                out.append(repr(s + v))
    return out


def resolve_candidates(tokenizer: Any, context: str, words: Sequence[str], sep: str | None = None) -> list[int]:
    """Token ids of ``words`` as the next token after ``context`` (the text up to the answer position).

    Raises :class:`CandidateTokenError` naming every word that is not exactly one token in that context, with
    single-token alternatives, and any two words that share one token.
    """
    sep = default_separator(context) if sep is None else sep
    added = (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values()
    specials = [*getattr(tokenizer, "all_special_tokens", []), *(t.content for t in added if getattr(t, "special", 0))]
    tail = context[max((context.rfind(s) + len(s) for s in specials if s in context), default=0) :]
    return list(_resolve_cached(tokenizer, tail, tuple(words), sep))  # only the tail can merge with the word


@lru_cache(maxsize=4096)
def _resolve_cached(tokenizer: Any, context: str, words: tuple[str, ...], sep: str) -> tuple[int, ...]:
    if not words:
        raise CandidateTokenError("no candidate words given: pass at least two answer words, e.g. ('good', 'poor')")
    ids, problems = [], []
    for word in words:
        extra = _extra_tokens(tokenizer, context, word, sep)
        if extra is None or len(extra) != 1:
            pieces = tokenizer.convert_ids_to_tokens(extra) if extra else "it changes the context's tokens"
            hint = _suggest(tokenizer, context, word, sep)
            alt = f"single-token alternatives: {', '.join(hint)}" if hint else "choose another word"
            problems.append(f"{sep + word!r} after {context[-40:]!r} is not one token ({pieces}); {alt}")
        else:
            ids.append(extra[0])
    if problems:
        raise CandidateTokenError(
            "candidate answer words must each be exactly one token for this tokenizer:\n  - "
            + "\n  - ".join(problems)
            + "\nFix: change the words (or the response prefix) in the config."
        )
    seen: dict[int, str] = {}
    for word, tid in zip(words, ids, strict=True):
        if tid in seen:
            raise CandidateTokenError(
                f"candidate words {seen[tid]!r} and {word!r} resolve to the same token id {tid}: "
                "their probabilities cannot be told apart; use distinct words"
            )
        seen[tid] = word
    return tuple(ids)
