"""Score images with one PACE protocol: Track 1 (probes, crops), Track 2 (anchors), the fused score, explanations.

Every probe about a batch of images goes through one ``option_logprobs`` call (each image is an image group whose
prefix is encoded once and shared by every probe); the crops of the batch go through a second call that asks only
the zoom probes (the only ones whose score the crops change); Track 2 is a third call with [high anchor, low
anchor, target] groups, where the local model encodes the two anchors once for the whole batch
(pace_judge.anchored).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from pace_judge import tracks
from pace_judge.backends import Backend
from pace_judge.protocol import Protocol, protocol_to_dict
from reward.data.images import load_image, to_rgb

logger = logging.getLogger(__name__)


@dataclass
class CropConfig:
    grid: tuple[int, int] = field(
        default=(2, 2), metadata={"help": "rows x cols of crops for zoom probes", "range": (1, 8)}
    )
    combine: str = field(
        default="mean", metadata={"help": "mean | min: how a zoom probe merges the whole image with its crops"}
    )
    enabled: bool = field(default=True, metadata={"help": "false: zoom probes are asked on the whole image only"})
    upscale: bool = field(
        default=False,
        metadata={"help": "true: each crop enlarged to the whole image's size (one image's tokens per crop)"},
    )


def protocol_scale(protocol: Protocol) -> str:
    """``anchors 1.4-4.6`` (calibrated: the human scale of eq. 10) or ``options 1-5 (uncalibrated)``."""
    if protocol.anchors:
        return f"anchors {protocol.anchors['low'].score:g}-{protocol.anchors['high'].score:g}"
    low, high = protocol.score_bounds
    return f"options {low:g}-{high:g} (uncalibrated)"


def protocol_fingerprint(protocol: Protocol) -> str:
    """A short hash of what scores depend on: the probes, options, weights and anchor scores (not the provenance)."""
    import hashlib
    import json

    data = protocol_to_dict(protocol)
    data.pop("provenance", None)
    for anchor in (data.get("anchors") or {}).values():
        anchor.pop("image", None)  # the same anchors stored elsewhere keep the same id
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Judgement:
    """One image's scores (tensors [B]) and per-image explanations."""

    scores: torch.Tensor
    alpha1: torch.Tensor
    alpha2: torch.Tensor | None
    explanations: list[dict[str, Any]]


class DualTrackScorer:
    """PACE's dual-track score of images under one protocol."""

    def __init__(
        self,
        protocol: Protocol,
        backend: Backend,
        *,
        omega: tuple[float, float] = (0.5, 0.5),
        crops: CropConfig | None = None,
        track2_prompt: str = "comparative",
        probe_weights: str = "uniform",
        lettering: str = "best-first",
        lettering_seed: int = 0,
    ) -> None:
        self.protocol = protocol
        self.backend = backend
        self.omega = omega
        self.crops = crops or CropConfig()
        self.track2_prompt = track2_prompt
        self.probe_weights = probe_weights
        self.weights = tracks.probe_weights(protocol.probes, probe_weights)  # w_r of eq. 6
        self.lettering = lettering if lettering != "shuffled" else f"shuffled (seed {lettering_seed})"
        self.orders = tracks.letterings(protocol.probes, lettering, lettering_seed)
        self.queries = [tracks.probe_query(p, o) for p, o in zip(protocol.probes, self.orders, strict=True)]
        self.zoom = [p.zoom for p in protocol.probes]
        self.n_crops = self.crops.grid[0] * self.crops.grid[1] if self.crops.enabled and any(self.zoom) else 0
        self.anchor_images: tuple[Image.Image, Image.Image] | None = None
        self.rank = None
        if protocol.anchors:
            high, low = (to_rgb(load_image(protocol.anchor_path(w))) for w in ("high", "low"))
            self.anchor_images = (high, low)
            self.rank = tracks.rank_query(
                protocol.dimension, protocol.anchors["high"].score, protocol.anchors["low"].score, track2_prompt
            )
        check = getattr(backend, "check", None)
        if check is not None:  # letters that are not single tokens fail here, not mid-run
            check(self.queries + ([self.rank] if self.rank else []), system=tracks.SYSTEM)

    def crop_groups(self, images: Sequence[Image.Image]) -> list[list[Image.Image]]:
        """Image groups of the crops call: every image's crops, image-major."""
        return [[c] for img in images for c in tracks.crop_grid(img, self.crops.grid, upscale=self.crops.upscale)]

    def track1(self, images: Sequence[Image.Image]) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """Expected option scores ``[B, 1 + crops, Q]`` (the whole image, then its crops; a probe without zoom
        keeps the whole image's value on the crops), the whole image's option probabilities per probe, and the
        letter mass a remote top-k list missed ``[B, 1 + crops, Q]``."""
        b, per = len(images), 1 + self.n_crops
        res = self.backend.option_logprobs([[img] for img in images], self.queries, system=tracks.SYSTEM)
        e_full, probs = tracks.expected_scores(res.logprobs, self.protocol.probes, self.orders)  # [B, Q]
        e_all = e_full[:, None, :].repeat(1, per, 1)
        missing = torch.zeros(b, per, len(self.queries))
        missing[:, 0] = res.missing_mass
        if self.n_crops:
            zoom = [q for q, z in enumerate(self.zoom) if z]
            crops = self.backend.option_logprobs(
                self.crop_groups(images), [self.queries[q] for q in zoom], system=tracks.SYSTEM
            )
            e_crops, _ = tracks.expected_scores(
                crops.logprobs, [self.protocol.probes[q] for q in zoom], [self.orders[q] for q in zoom]
            )
            e_all[:, 1:, zoom] = e_crops.view(b, self.n_crops, len(zoom))
            missing[:, 1:, zoom] = crops.missing_mass.view(b, self.n_crops, len(zoom))
        return e_all, probs, missing

    def track2_groups(self, images: Sequence[Image.Image]) -> list[list[Image.Image]]:
        assert self.anchor_images is not None
        return [[*self.anchor_images, img] for img in images]  # anchors first: a shared prefix across targets

    def track2(self, images: Sequence[Image.Image]) -> Any:
        """Track 2's rank log-probs; the anchors are encoded once per batch where the backend can do that."""
        assert self.rank is not None and self.anchor_images is not None
        anchored = getattr(self.backend, "anchored_logprobs", None)
        if anchored is not None:
            return anchored(list(self.anchor_images), list(images), self.rank, system=tracks.SYSTEM)
        return self.backend.option_logprobs(self.track2_groups(images), [self.rank], system=tracks.SYSTEM)

    def judge(self, images: Sequence[Image.Image]) -> Judgement:
        images = [to_rgb(im) for im in images]
        b = len(images)
        e_all, probs, missing = self.track1(images)
        e = tracks.combine_crops(e_all[:, 0], e_all[:, 1:], self.zoom, self.crops.combine)
        bounds = self.protocol.score_bounds
        a1 = tracks.alpha1(e, self.weights, bounds)
        a2 = None
        rank_probs = None
        if self.rank is not None:
            r2 = self.track2(images)
            a2 = tracks.alpha2_from_logits(r2.logprobs[:, 0])
            rank_probs = torch.softmax(r2.logprobs[:, 0].float(), dim=-1)
        if self.protocol.anchors:
            y_low, y_high = self.protocol.anchors["low"].score, self.protocol.anchors["high"].score
            scores = tracks.final_score(a1, a2, self.omega, y_low=y_low, y_high=y_high)
        else:
            scores = tracks.final_score(a1, None, self.omega, y_low=bounds[0], y_high=bounds[1])
        judged = Judgement(scores.float(), a1.float(), None if a2 is None else a2.float(), [])
        judged.explanations = [self._explain(i, judged, e, e_all, probs, missing, rank_probs) for i in range(b)]
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
        """Image ``i``: option probabilities of each probe (whole image), its expected score (after crops), the
        crops' expected scores, sub-dimension scores, alpha1, alpha2 and the rank probabilities of Track 2."""
        per = e_all.shape[1]
        probes = []
        for q, p in enumerate(self.protocol.probes):
            entry: dict[str, Any] = {
                "question": p.question,
                "sub_dimension": p.sub_dimension,
                "weight": self.weights[q],
                "options": {o.text: round(float(probs[q][i, k]), 6) for k, o in enumerate(self.orders[q])},
                "letters": {tracks.LETTERS[k]: o.text for k, o in enumerate(self.orders[q])},
                "expected": round(float(e[i, q]), 6),
            }
            if p.zoom and per > 1:
                entry["whole_image"] = round(float(e_all[i, 0, q]), 6)
                entry["crops"] = [round(float(v), 6) for v in e_all[i, 1:, q]]
            if float(missing[i, :, q].max()) > 0:
                entry["missing_mass"] = round(float(missing[i, :, q].max()), 6)
            probes.append(entry)
        out: dict[str, Any] = {
            "score": float(judged.scores[i]),
            "alpha1": float(judged.alpha1[i]),
            "alpha2": None if judged.alpha2 is None else float(judged.alpha2[i]),
            "calibrated": self.protocol.calibrated,
            "scale": self.scale,
            "protocol_id": self.protocol_id,
            "dimension": self.protocol.dimension,
            "sub_dimensions": self._sub_scores(e[i]),
            "probe_weights": self.probe_weights,
            "lettering": self.lettering,
            "probes": probes,
        }
        if rank_probs is not None:
            out["ranks"] = [round(float(v), 6) for v in rank_probs[i]]
            out["track2_prompt"] = self.track2_prompt
        return out

    @property
    def scale(self) -> str:
        """What the score's numbers mean: the anchors' human range, or (uncalibrated) the protocol's option range."""
        return protocol_scale(self.protocol)

    @property
    def protocol_id(self) -> str:
        return protocol_fingerprint(self.protocol)

    def _sub_scores(self, e: torch.Tensor) -> dict[str, float]:
        acc: dict[str, list[tuple[float, float]]] = {}
        for q, p in enumerate(self.protocol.probes):
            acc.setdefault(p.sub_dimension or self.protocol.dimension, []).append((self.weights[q], float(e[q])))
        return {k: sum(w * v for w, v in pairs) / sum(w for w, _ in pairs) for k, pairs in acc.items()}
