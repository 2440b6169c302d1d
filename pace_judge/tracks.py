"""PACE dual-track scoring (§4.5): the queries it asks and the formulas that turn answer log-probs into a score.

Track 1 asks every probe with its options lettered in score order (A = highest score, as the released code does) and
reads the softmax over exactly those letters: E_r = sum_c P(c) S_c (eq. 4-5). A backbone that favours the letter A
moves every score up under that order: ``lettering=reversed`` (A = lowest) or ``shuffled`` (a seeded order per probe,
recorded in each explanation) measure or average out that bias. alpha1 = (sum_r w_r E_r / sum_r w_r - S_min) / (S_max -
S_min) with the protocol's own bounds (eq. 6), with uniform weights w_r = 1/N as the paper's implementation
(``probe_weights=agent``: the Visualizer's weights). Probes flagged ``zoom`` are also asked on enlarged crops and
combined by mean or min; the crops keep their native pixels (``upscale=True``: enlarged to the image's size, as
before). Track 2 shows the target with the high and low anchors, purely comparatively by default (the released code's
prompt; the anchors' human scores are not told), and reads five rank letters with V = (1, .75, .5, .25, 0): alpha2 =
sum_k P(k) V_k (eq. 7-8). Final = Y_low + (Y_high - Y_low)(w1 alpha1 + w2 alpha2) clamped to the anchors' range (eq.
9-10); without anchors, alpha1 is mapped onto [S_min, S_max] and flagged. Sums are taken in float64.

Example:
    >>> import torch
    >>> alpha2_from_logits(torch.zeros(1, 5)).round(decimals=6).tolist()  # uniform over the five ranks -> the middle
    [0.5]
    >>> final_score(torch.tensor([1.0]), torch.tensor([0.0]), (0.5, 0.5), y_low=1.4, y_high=4.6).tolist()
    [3.0]
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from pace_judge.protocol import Option, Probe
from reward.vlm import OptionQuery

LETTERS = string.ascii_uppercase
# The system turn is part of every image group's shared prefix: what is said once here is not repeated per probe.
SYSTEM = (
    "You inspect images for visual quality. Each question lists lettered options; reply with the letter of "
    "exactly one option and nothing else."
)
RANK_VALUES = (1.0, 0.75, 0.5, 0.25, 0.0)  # Track 2: identical to high ... identical to low (PACE eq. 8)
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
RANK_PROMPTS = ("comparative", "scored")  # scored: this toolkit's earlier prompt, which tells the anchors' scores
PROBE_WEIGHTS = ("uniform", "agent")  # uniform: w_r = 1/N (eq. 6) | agent: the Visualizer's weight of each probe
LETTERINGS = ("best-first", "reversed", "shuffled")  # Track 1's option order: A = best | A = worst | seeded


def letter_list(n: int) -> str:
    """'A or B', 'A, B or C' ...: the prompt names exactly the letters present."""
    letters = list(LETTERS[:n])
    return letters[0] if n == 1 else ", ".join(letters[:-1]) + f" or {letters[-1]}"


def letterings(probes: Sequence[Probe], lettering: str = "best-first", seed: int = 0) -> list[tuple[Option, ...]]:
    """Each probe's options in the order they are lettered A, B, ...: ``best-first`` (score order, highest first),
    ``reversed`` (lowest first) or ``shuffled`` (one seeded permutation per probe, in probe order).

    >>> from pace_judge.protocol import Option, Probe
    >>> p = Probe("Sharp?", (Option("Yes", 5.0), Option("Somewhat", 3.0), Option("No", 1.0)))
    >>> [[o.text for o in opts] for opts in letterings([p], "reversed")]
    [['No', 'Somewhat', 'Yes']]
    """
    if lettering not in LETTERINGS:
        raise ValueError(f"lettering={lettering!r}: choose one of {', '.join(LETTERINGS)}")
    rng = np.random.default_rng(seed)
    orders = []
    for p in probes:
        opts = p.lettered
        if lettering == "reversed":
            opts = opts[::-1]
        elif lettering == "shuffled":
            opts = tuple(opts[int(i)] for i in rng.permutation(len(opts)))
        orders.append(opts)
    return orders


def probe_weights(probes: Sequence[Probe], mode: str = "uniform") -> list[float]:
    """w_r of eq. 6: ``uniform`` (1 for every probe; alpha1 divides by their sum, so w_r = 1/N) or ``agent`` (the
    protocol's own weights).

    >>> from pace_judge.protocol import Option, Probe
    >>> ps = [Probe("q", (Option("a", 5.0), Option("b", 1.0)), w) for w in (3.0, 0.5)]
    >>> probe_weights(ps), probe_weights(ps, "agent")
    ([1.0, 1.0], [3.0, 0.5])
    """
    if mode not in PROBE_WEIGHTS:
        raise ValueError(f"probe_weights={mode!r}: choose one of {', '.join(PROBE_WEIGHTS)}")
    return [1.0 if mode == "uniform" else float(p.weight) for p in probes]


def probe_query(probe: Probe, options: Sequence[Option] | None = None) -> OptionQuery:
    """Track 1's question for one probe: options lettered in the given order (default: score order, highest
    first)."""
    opts = tuple(options) if options is not None else probe.lettered
    lines = [f"{LETTERS[i]}. {o.text}" for i, o in enumerate(opts)]
    text = "\n".join([probe.question, *lines, f"Answer with {letter_list(len(opts))}."])
    return OptionQuery(text, tuple(LETTERS[: len(opts)]), "")


def rank_query(dimension: str, high_score: float, low_score: float, variant: str = "comparative") -> OptionQuery:
    """Track 2's question; the images are [high anchor, low anchor, target] in this order.

    ``comparative`` (PACE §4.5: "Track 2 operates purely on comparative visuals") asks where the target stands
    between the anchors without their scores; ``scored`` also tells the model the anchors' human scores. The anchors
    come first so that the text before the target is the same for every image: a server with prefix caching (vLLM's
    automatic prefix caching) encodes the anchors once for all targets.

    >>> [("4.6" in rank_query("sharpness", 4.6, 1.4, v).question) for v in ("comparative", "scored")]
    [False, True]
    """
    if variant == "comparative":
        return OptionQuery(COMPARATIVE.format(dim=dimension), tuple(LETTERS[:5]), "")
    if variant != "scored":
        raise ValueError(f"track2.prompt={variant!r}: choose one of {', '.join(RANK_PROMPTS)}")
    labels = [f"{LETTERS[i]}. {lab.format(dim=dimension)}" for i, lab in enumerate(RANK_LABELS)]
    text = (
        f"We are judging the {dimension} of images. The first image is the high-quality anchor (human {dimension} "
        f"score {high_score:g} of 5); the second image is the low-quality anchor (human score {low_score:g} of 5); "
        f"the third image is the target. Comparing only their {dimension}, where does the target stand?\n"
        + "\n".join(labels)
        + f"\nAnswer with {letter_list(len(labels))}."
    )
    return OptionQuery(text, tuple(LETTERS[: len(labels)]), "")


def crop_grid(image: Image.Image, grid: tuple[int, int] = (2, 2), *, upscale: bool = False) -> list[Image.Image]:
    """The image cut into ``rows x cols`` tiles (Crop & Zoom) at their native pixels, so that a crop never costs more
    visual tokens than the whole image; ``upscale``: each tile enlarged back to the image's size (bicubic).

    >>> [t.size for t in crop_grid(Image.new("RGB", (64, 48)), (2, 2))]
    [(32, 24), (32, 24), (32, 24), (32, 24)]
    """
    rows, cols = grid
    w, h = image.size
    tiles = []
    for r in range(rows):
        for c in range(cols):
            box = (c * w // cols, r * h // rows, (c + 1) * w // cols, (r + 1) * h // rows)
            tile = image.crop(box)
            tiles.append(tile.resize((w, h), Image.Resampling.BICUBIC) if upscale else tile)
    return tiles


def option_probs(logprobs: torch.Tensor, n_options: Sequence[int]) -> list[torch.Tensor]:
    """Softmax over each probe's own letters: ``logprobs[..., q, :n_q]`` -> probabilities (float32)."""
    return [torch.softmax(logprobs[..., q, :n].float(), dim=-1) for q, n in enumerate(n_options)]


def expected_scores(
    logprobs: torch.Tensor, probes: Sequence[Probe], orders: Sequence[Sequence[Option]] | None = None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """E_r (eq. 5) for every probe: ``[..., Q]``, and the per-probe option probabilities (in letter order; the
    options lettered as in ``orders``, default score order)."""
    probs = option_probs(logprobs, [len(p.options) for p in probes])
    orders = orders if orders is not None else [p.lettered for p in probes]
    values = [torch.tensor([o.score for o in opts]) for opts in orders]
    e = torch.stack([(pr * v).sum(-1) for pr, v in zip(probs, values, strict=True)], dim=-1)
    return e, probs


def combine_crops(full: torch.Tensor, crops: torch.Tensor, zoom: Sequence[bool], how: str = "mean") -> torch.Tensor:
    """Zoom probes combine the whole image's E_r ``[B, Q]`` with its crops' ``[B, G, Q]`` by mean or min."""
    if crops.shape[1] == 0 or not any(zoom):
        return full
    stacked = torch.cat([full[:, None], crops], dim=1)
    if how == "mean":
        merged = stacked.mean(1)
    elif how == "min":
        merged = stacked.min(1).values
    else:
        raise ValueError(f"crops.combine must be 'mean' or 'min', got {how!r}")
    mask = torch.tensor(list(zoom))
    return torch.where(mask, merged, full)


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
