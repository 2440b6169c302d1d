"""PACE's dual-track score (§4.5, eq. 4-10): the queries, the formulas and :class:`DualTrackScorer`.

Track 1 asks every probe with its options lettered (A = highest score, as the released code) and reads the softmax
over exactly those letters; zoom probes are also asked on a grid of crops. Track 2 shows [high anchor, low anchor,
target] and reads five rank letters. One ``option_logprobs`` call per track (and one for the crops); sums in float64.

    >>> alpha2_from_logits(torch.zeros(1, 5)).round(decimals=6).tolist()  # uniform over the five ranks -> the middle
    [0.5]
    >>> final_score(torch.tensor([1.0]), torch.tensor([0.0]), (0.5, 0.5), y_low=1.4, y_high=4.6).tolist()
    [3.0]
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from pace_judge.protocol import Option, Probe, Protocol, protocol_to_dict
from pace_judge.track_settings import CropConfig
from reward.data.images import load_image, to_rgb
from reward.rewards.levels import dimension_words
from reward.vlm import VLM, OptionQuery

LETTERS = string.ascii_uppercase
# The system turn is part of every image group's shared prefix: what is said once here is not repeated per probe.
SYSTEM = (
    "You inspect images for visual quality. Each question lists lettered options; reply with the letter of "
    "exactly one option and nothing else."
)
RANK_VALUES = (1.0, 0.75, 0.5, 0.25, 0.0)  # Track 2: identical to high ... identical to low (eq. 8)
RANK_LABELS = (
    "Identical in {dim} to the high-quality anchor",
    "Closer in {dim} to the high-quality anchor",
    "Halfway between the two anchors in {dim}",
    "Closer in {dim} to the low-quality anchor",
    "Identical in {dim} to the low-quality anchor",
)
# The released PACE code's Track 2 question (the paper prints none), with the dimension where it says "quality".
COMPARATIVE = (
    "Reference Image 1: High {dim}\nReference Image 2: Low {dim}\nTarget Image: Image 3\n\n"
    "Which reference image is Image 3 more similar to in terms of {dim}?\n"
    "A) Extremely similar to Image 1\nB) Closer to Image 1\nC) Right in the middle\nD) Closer to Image 2\n"
    "E) Extremely similar to Image 2\nREPLY WITH THE LETTER ONLY."
)


def lettered_query(question: str, texts: Sequence[str]) -> OptionQuery:
    """``question`` with its options lettered A, B, ... and answered with one of exactly those letters."""
    letters = LETTERS[: len(texts)]
    lines = [f"{letter}. {text}" for letter, text in zip(letters, texts, strict=True)]
    answer = f"Answer with {', '.join(letters[:-1])} or {letters[-1]}."
    return OptionQuery("\n".join([question, *lines, answer]), tuple(letters), "")


def letterings(probes: Sequence[Probe], lettering: str = "best-first", seed: int = 0) -> list[tuple[Option, ...]]:
    """Each probe's options in the order they are lettered: ``best-first`` (highest score first), ``reversed`` or
    ``shuffled`` (one seeded permutation per probe, in probe order)."""
    rng = np.random.default_rng(seed)
    orders = [p.lettered[::-1] if lettering == "reversed" else p.lettered for p in probes]
    if lettering == "shuffled":
        orders = [tuple(opts[int(i)] for i in rng.permutation(len(opts))) for opts in orders]
    return orders


def rank_query(dimension: str, high_score: float, low_score: float, variant: str = "comparative") -> OptionQuery:
    """Track 2's question about [high anchor, low anchor, target]: ``comparative`` (§4.5: "purely on comparative
    visuals") does not tell the anchors' scores, ``scored`` does. The anchors come first, so the text before the target
    is the same for every image (a server's prefix cache encodes them once).

    >>> [("4.6" in rank_query("sharpness", 4.6, 1.4, v).question) for v in ("comparative", "scored")]
    [False, True]
    """
    dimension = dimension_words(dimension)  # the key's words: colour_cast is asked about as "colour cast"
    if variant == "comparative":
        return OptionQuery(COMPARATIVE.format(dim=dimension), tuple(LETTERS[:5]), "")
    intro = (
        f"We are judging the {dimension} of images. The first image is the high-quality anchor (human {dimension} "
        f"score {high_score:g} of 5); the second image is the low-quality anchor (human score {low_score:g} of 5); "
        f"the third image is the target. Comparing only their {dimension}, where does the target stand?"
    )
    return lettered_query(intro, [label.format(dim=dimension) for label in RANK_LABELS])


def crop_grid(image: Image.Image, grid: Sequence[int] = (2, 2), *, upscale: bool = False) -> list[Image.Image]:
    """The image cut into ``rows x cols`` tiles at their native pixels (a crop never costs more visual tokens than
    the whole image); ``upscale``: each tile enlarged back to the image's size."""
    (rows, cols), (w, h) = grid, image.size
    boxes = [
        (c * w // cols, r * h // rows, (c + 1) * w // cols, (r + 1) * h // rows)
        for r in range(rows)
        for c in range(cols)
    ]
    return [image.crop(b).resize((w, h), Image.Resampling.BICUBIC) if upscale else image.crop(b) for b in boxes]


def expected_scores(
    logprobs: torch.Tensor, orders: Sequence[Sequence[Option]]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """E_r (eq. 5) of every probe ``[..., Q]`` and each probe's option probabilities (a softmax over its own letters,
    the options lettered as in ``orders``)."""
    probs = [torch.softmax(logprobs[..., q, : len(opts)].float(), dim=-1) for q, opts in enumerate(orders)]
    values = [torch.tensor([o.score for o in opts]) for opts in orders]
    return torch.stack([(p * v).sum(-1) for p, v in zip(probs, values, strict=True)], dim=-1), probs


def combine_crops(full: torch.Tensor, crops: torch.Tensor, zoom: Sequence[bool], how: str = "mean") -> torch.Tensor:
    """Zoom probes combine the whole image's E_r ``[B, Q]`` with its crops' ``[B, G, Q]`` by mean or min."""
    if crops.shape[1] == 0 or not any(zoom):
        return full
    stacked = torch.cat([full[:, None], crops], dim=1)
    merged = stacked.mean(1) if how == "mean" else stacked.min(1).values
    return torch.where(torch.tensor(list(zoom)), merged, full)


def alpha1(e: torch.Tensor, weights: Sequence[float], bounds: tuple[float, float]) -> torch.Tensor:
    """alpha1 = (sum_r w_r E_r / sum_r w_r - S_min) / (S_max - S_min) (eq. 6), summed in float64."""
    w = torch.tensor(list(weights), dtype=torch.float64)
    s_min, s_max = bounds
    return ((e.double() * w).sum(-1) / w.sum() - s_min) / (s_max - s_min)


def alpha2_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """alpha2 = sum_k softmax(L)_k V_k over the five rank letters (eq. 7-8), in float64."""
    return (torch.softmax(logits.double(), dim=-1) * torch.tensor(RANK_VALUES, dtype=torch.float64)).sum(-1)


def final_score(
    a1: torch.Tensor, a2: torch.Tensor | None, omega: tuple[float, float], *, y_low: float, y_high: float
) -> torch.Tensor:
    """Y_low + (Y_high - Y_low)(w1 a1 + w2 a2), clamped to [Y_low, Y_high] (eq. 9-10); Track 1 alone if no a2."""
    w1, w2 = omega
    alpha = a1.double() if a2 is None else w1 * a1.double() + w2 * a2.double()
    return (y_low + (y_high - y_low) * alpha).clamp(min(y_low, y_high), max(y_low, y_high))


@dataclass
class Judgement:
    """The images' scores, alpha1 and alpha2 (tensors [B]) and one explanation per image."""

    scores: torch.Tensor
    alpha1: torch.Tensor
    alpha2: torch.Tensor | None
    explanations: list[dict[str, Any]]


class DualTrackScorer:
    """PACE's dual-track score of images under one protocol; ``backend``: a :class:`reward.vlm.VLM`, an
    OpenAI-compatible backend (:mod:`reward.vlm.server`) or anything with their ``option_logprobs``."""

    def __init__(
        self,
        protocol: Protocol,
        backend: Any,
        *,
        omega: tuple[float, float] = (0.5, 0.5),
        crops: CropConfig | None = None,
        track2_prompt: str = "comparative",
        probe_weights: str = "uniform",
        lettering: str = "best-first",
        lettering_seed: int = 0,
    ) -> None:
        self.protocol, self.backend, self.omega = protocol, backend, omega
        self.crops, self.track2_prompt, self.probe_weights = crops or CropConfig(), track2_prompt, probe_weights
        self.weights = [1.0 if probe_weights == "uniform" else float(p.weight) for p in protocol.probes]  # w_r
        self.lettering = lettering if lettering != "shuffled" else f"shuffled (seed {lettering_seed})"
        self.orders = letterings(protocol.probes, lettering, lettering_seed)
        self.queries = [
            lettered_query(p.question, [o.text for o in order])
            for p, order in zip(protocol.probes, self.orders, strict=True)
        ]
        self.zoom = [p.zoom for p in protocol.probes]
        self.n_crops = self.crops.grid[0] * self.crops.grid[1] if self.crops.enabled and any(self.zoom) else 0
        self.anchor_images: list[Image.Image] = []
        self.rank: OptionQuery | None = None
        low, high = protocol.score_bounds
        self.scale = f"options {low:g}-{high:g} (uncalibrated)"  # what the scores' numbers mean
        if protocol.anchors:
            self.anchor_images = [load_image(protocol.anchor_path(w)) for w in ("high", "low")]
            high, low = protocol.anchors["high"].score, protocol.anchors["low"].score
            self.rank = rank_query(protocol.dimension, high, low, track2_prompt)
            self.scale = f"anchors {low:g}-{high:g}"  # the human scale of eq. 10
        scored = protocol_to_dict(protocol)  # what scores depend on: not the provenance, not where anchors lie
        scored.pop("provenance")
        for anchor in scored.get("anchors", {}).values():
            anchor.pop("image")
        self.protocol_id = hashlib.sha256(json.dumps(scored, sort_keys=True).encode()).hexdigest()[:12]
        for query in self.queries + ([self.rank] if self.rank else []):  # letters not single tokens fail now
            if hasattr(backend, "candidate_ids"):
                backend.candidate_ids(query, SYSTEM)

    def track1(self, images: Sequence[Image.Image]) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """Expected option scores ``[B, 1 + crops, Q]`` (the whole image, then its crops; a probe without zoom keeps
        the whole image's value), the whole image's option probabilities per probe, and the letter mass a remote
        top-k list missed ``[B, 1 + crops, Q]``."""
        b, per = len(images), 1 + self.n_crops
        res = self.backend.option_logprobs([[img] for img in images], self.queries, system=SYSTEM)
        e_full, probs = expected_scores(res.logprobs, self.orders)  # [B, Q]
        e_all = e_full[:, None, :].repeat(1, per, 1)
        missing = torch.zeros(b, per, len(self.queries))
        missing[:, 0] = res.missing_mass
        if self.n_crops:
            zoom = [q for q, z in enumerate(self.zoom) if z]
            groups = [[c] for img in images for c in crop_grid(img, self.crops.grid, upscale=self.crops.upscale)]
            crops = self.backend.option_logprobs(groups, [self.queries[q] for q in zoom], system=SYSTEM)
            e_all[:, 1:, zoom] = expected_scores(crops.logprobs, [self.orders[q] for q in zoom])[0].view(
                b, self.n_crops, len(zoom)
            )
            missing[:, 1:, zoom] = crops.missing_mass.view(b, self.n_crops, len(zoom))
        return e_all, probs, missing

    def track2(self, images: Sequence[Image.Image]) -> torch.Tensor:
        """Track 2's rank log-probs ``[B, 5]``; a local model encodes the anchors once per batch."""
        from pace_judge.anchored import anchored_logprobs, supports_anchor_prefix

        if isinstance(self.backend, VLM) and len(images) > 1 and supports_anchor_prefix(self.backend):
            return anchored_logprobs(self.backend, self.anchor_images, images, self.rank, system=SYSTEM).logprobs[:, 0]
        groups = [[*self.anchor_images, img] for img in images]  # anchors first: a prefix shared across targets
        return self.backend.option_logprobs(groups, [self.rank], system=SYSTEM).logprobs[:, 0]

    def judge(self, images: Sequence[Image.Image]) -> Judgement:
        images = [to_rgb(im) for im in images]
        e_all, probs, missing = self.track1(images)
        e = combine_crops(e_all[:, 0], e_all[:, 1:], self.zoom, self.crops.combine)
        a1 = alpha1(e, self.weights, self.protocol.score_bounds)
        a2 = rank_probs = None
        y_low, y_high = self.protocol.score_bounds
        if self.rank is not None and self.protocol.anchors:
            logprobs = self.track2(images)
            a2, rank_probs = alpha2_from_logits(logprobs), torch.softmax(logprobs.float(), dim=-1)
            y_low, y_high = self.protocol.anchors["low"].score, self.protocol.anchors["high"].score
        scores = final_score(a1, a2, self.omega, y_low=y_low, y_high=y_high).float()
        judged = Judgement(scores, a1.float(), None if a2 is None else a2.float(), [])
        for i in range(len(images)):
            judged.explanations.append(self._explain(i, judged, e, e_all, probs, missing, rank_probs))
        return judged

    def _explain(
        self,
        i: int,
        judged: Judgement,
        e: torch.Tensor,
        e_all: torch.Tensor,
        probs: list[torch.Tensor],
        missing: torch.Tensor,
        rank_probs: torch.Tensor | None,
    ) -> dict[str, Any]:
        """Image ``i``'s explanation: per probe, per sub-dimension, alpha1, alpha2 and the rank probabilities."""
        probes, subs = [], {}
        for q, p in enumerate(self.protocol.probes):
            entry: dict[str, Any] = {
                "question": p.question,
                "sub_dimension": p.sub_dimension,
                "weight": self.weights[q],
                "options": {o.text: round(float(probs[q][i, k]), 6) for k, o in enumerate(self.orders[q])},
                "letters": {LETTERS[k]: o.text for k, o in enumerate(self.orders[q])},
                "expected": round(float(e[i, q]), 6),
            }
            if p.zoom and e_all.shape[1] > 1:
                entry["whole_image"] = round(float(e_all[i, 0, q]), 6)
                entry["crops"] = [round(float(v), 6) for v in e_all[i, 1:, q]]
            if float(missing[i, :, q].max()) > 0:
                entry["missing_mass"] = round(float(missing[i, :, q].max()), 6)
            probes.append(entry)
            subs.setdefault(p.sub_dimension or self.protocol.dimension, []).append((self.weights[q], float(e[i, q])))
        out: dict[str, Any] = {
            "score": float(judged.scores[i]),
            "alpha1": float(judged.alpha1[i]),
            "alpha2": None if judged.alpha2 is None else float(judged.alpha2[i]),
            "calibrated": self.protocol.calibrated,
            "scale": self.scale,
            "protocol_id": self.protocol_id,
            "dimension": self.protocol.dimension,
            "sub_dimensions": {k: sum(w * v for w, v in wv) / sum(w for w, _ in wv) for k, wv in subs.items()},
            "probe_weights": self.probe_weights,
            "lettering": self.lettering,
            "probes": probes,
        }
        if rank_probs is not None:
            out["ranks"] = [round(float(v), 6) for v in rank_probs[i]]
            out["track2_prompt"] = self.track2_prompt
        return out
