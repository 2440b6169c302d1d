"""Procedural interior scenes whose quality levels are known: the renderer behind ``training.procedural.synthetic``.

A :class:`SceneSpec` (room, windows, lamp, base hue, up to :data:`MAX_OBJECTS` boxes, a noise seed) is drawn once and
rendered at any ``levels`` (1 = bad ... 5 = excellent) of the four dimensions, each a strong, monotone effect that
the statistics of the other dimensions barely see (tests/test_synthetic.py):

========== ============================================================ ===================================
dimension  low level (1) ... high level (5)                             statistic that tracks it
========== ============================================================ ===================================
layout     18 floating, overlapping boxes ... 2 in a balanced row        edges of the smoothed log-luminance
harmony    saturated hues spread around purple ... one low-chroma family spread of the chromaticity
lighting   dim, flat, random shadows ... bright, soft, consistent        mean luminance
distortion wavy warp and blotchy noise ... none                          median high-pass residual
========== ============================================================ ===================================

Colours are ``luma * (1, 1, 1) + chroma`` with the chroma orthogonal to the luma weights (harmony changes no
luminance); lighting and noise are grey factors (no chromaticity). A tiny VLM (4 image tokens) learns lighting
(held-out SRCC 0.97 after 300 steps of 8) and harmony (0.85 after 800: palettes lean towards :data:`CLASH_HUE`), not
the second-order noise and clutter in 500 steps; lighting and harmony together only with prompt type 2.
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

DIMENSIONS: tuple[str, ...] = ("layout", "harmony", "lighting", "distortion")
MAX_OBJECTS = 18
LUMA = np.array([0.299, 0.587, 0.114])
CLASH_HUE = 300.0  # purple (in the luma-free chroma plane of make_colour): the centre of clashing palettes


@dataclass(frozen=True)
class LevelEffects:
    """Strength of every visual effect at levels 1..5 (index 0 = level 1 = bad). One place for all defaults."""

    n_objects: tuple[int, ...] = (18, 12, 7, 4, 2)  # layout: clutter (count of furniture boxes)
    disorder: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25, 0.0)  # layout: 0 = balanced slots, 1 = random, floating
    hue_spread: tuple[float, ...] = (80.0, 65.0, 45.0, 25.0, 5.0)  # harmony: max hue offset from the base (deg)
    chroma: tuple[float, ...] = (0.36, 0.25, 0.15, 0.08, 0.03)  # harmony: chroma magnitude (RGB units)
    clash_pull: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25, 0.0)  # harmony: palette centre pulled to CLASH_HUE
    gain: tuple[float, ...] = (0.22, 0.33, 0.48, 0.7, 1.0)  # lighting: global exposure (x0.7 per level)
    ambient: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6)  # lighting: 1 = flat, lower = stronger window fall-off
    wrong_shadows: tuple[float, ...] = (0.6, 0.45, 0.3, 0.15, 0.0)  # lighting: share of boxes shaded the wrong way
    warp: tuple[float, ...] = (0.04, 0.025, 0.014, 0.006, 0.0)  # distortion: warp amplitude (fraction of size)
    noise: tuple[float, ...] = (0.24, 0.16, 0.1, 0.05, 0.0)  # distortion: material noise (relative std)


EFFECTS = LevelEffects()

# name, width (fraction of back-wall width), height (fraction of back-wall height), depth (floor units)
FURNITURE: tuple[tuple[str, float, float, float], ...] = (
    ("sofa", 0.45, 0.28, 0.35),
    ("armchair", 0.18, 0.25, 0.25),
    ("cabinet", 0.2, 0.45, 0.2),
    ("coffee table", 0.28, 0.12, 0.25),
    ("bookshelf", 0.22, 0.7, 0.15),
    ("side table", 0.12, 0.15, 0.15),
    ("bed", 0.5, 0.2, 0.6),
    ("desk", 0.3, 0.22, 0.25),
)
ROOMS = ("living room", "bedroom", "study", "dining room")
_SS = 2  # supersampling factor (anti-aliasing)
_NOISE_GRID = 32  # material noise is drawn on this grid and upsampled, so it looks the same at every size


@dataclass(frozen=True)
class FurnitureSpec:
    """One furniture box: its kind, colour draws and the placements it takes at each disorder."""

    kind: str
    width: float
    height: float
    depth: float
    slot_t: float  # lateral floor position in [-1, 1] used when the layout is good
    random_t: float  # lateral floor position used when the layout is bad
    random_v: float  # distance from the back wall (floor units) used when the layout is bad
    float_u: float  # in [0, 1]: how far the box floats above the floor when the layout is bad
    hue_u: float  # in [-1, 1]: hue offset in units of the harmony spread
    luma: float
    chroma_u: float  # in [0.8, 1.2]: chroma jitter
    wrong_u: float  # in [0, 1]: shaded the wrong way when below the lighting level's share


@dataclass(frozen=True)
class SceneSpec:
    """Everything random about a scene except its quality levels (see module docstring)."""

    room: str
    wall: tuple[float, float, float, float]  # back wall x0, x1, y0, y1 in [0, 1] image coordinates
    vanish: tuple[float, float]  # vanishing point
    base_hue: float  # degrees
    surface_hue_u: tuple[float, float, float, float]  # back wall, side walls, ceiling, floor offsets in [-1, 1]
    surface_luma: tuple[float, float, float, float]
    planks: int
    windows: tuple[tuple[float, float, float, float], ...]  # rectangles in back-wall coordinates [0, 1]^2
    lamp: tuple[float, float, float] | None  # centre x, y and radius in image coordinates
    furniture: tuple[FurnitureSpec, ...]
    warp_phase: tuple[float, float, float, float]
    warp_freq: tuple[float, float]
    noise_seed: int


def _check_levels(levels: dict[str, int]) -> None:
    for name in DIMENSIONS:
        value = levels.get(name)
        if not isinstance(value, int | np.integer) or not 1 <= value <= 5:
            raise ValueError(f"levels[{name!r}] must be an integer in 1..5, got {value!r}; levels = {levels}")


def sample_scene(rng: np.random.Generator) -> SceneSpec:
    """Draw the level-independent part of a scene (geometry, palette draws, furniture, noise seed)."""
    x0, x1 = rng.uniform(0.2, 0.3), rng.uniform(0.7, 0.8)
    y0, y1 = rng.uniform(0.12, 0.2), rng.uniform(0.52, 0.6)
    vanish = (rng.uniform(x0 + 0.15, x1 - 0.15), rng.uniform(y0 + 0.2, y1 - 0.12))
    n_windows = int(rng.integers(1, 3))
    side = rng.choice([-1.0, 1.0])
    windows = []
    for k in range(n_windows):
        cx = 0.5 + side * rng.uniform(0.2, 0.3) * (1 if k == 0 else -1)
        w, h = rng.uniform(0.16, 0.26), rng.uniform(0.3, 0.45)
        windows.append((cx - w / 2, cx + w / 2, 0.12, 0.12 + h))
    lamp = (rng.uniform(0.35, 0.65), rng.uniform(0.04, 0.08), rng.uniform(0.025, 0.04)) if rng.random() < 0.5 else None
    kinds = rng.permutation(len(FURNITURE))
    furniture = []
    for i in range(MAX_OBJECTS):
        kind, width, height, depth = FURNITURE[int(kinds[i % len(FURNITURE)])]
        scale = rng.uniform(0.85, 1.15)
        dark = rng.random() < 0.75
        furniture.append(
            FurnitureSpec(
                kind=kind,
                width=width * scale,
                height=height * scale,
                depth=depth,
                slot_t=0.0,
                random_t=rng.uniform(-1.0, 1.0),
                random_v=rng.uniform(0.0, 1.4),
                float_u=rng.uniform(0.3, 1.0),
                hue_u=rng.uniform(-1.0, 1.0),
                luma=rng.uniform(0.12, 0.3) if dark else rng.uniform(0.85, 0.95),
                chroma_u=rng.uniform(0.8, 1.2),
                wrong_u=rng.random(),
            )
        )
    return SceneSpec(
        room=str(rng.choice(ROOMS)),
        wall=(x0, x1, y0, y1),
        vanish=vanish,
        base_hue=rng.uniform(0.0, 360.0),
        surface_hue_u=tuple(rng.uniform(-1.0, 1.0, size=4)),
        surface_luma=(rng.uniform(0.6, 0.75), 0.0, rng.uniform(0.75, 0.85), rng.uniform(0.4, 0.52)),
        planks=int(rng.integers(5, 9)),
        windows=tuple(windows),
        lamp=lamp,
        furniture=tuple(furniture),
        warp_phase=tuple(rng.uniform(0.0, 1.0, size=4)),
        warp_freq=(rng.uniform(1.5, 3.0), rng.uniform(1.5, 3.0)),
        noise_seed=int(rng.integers(2**31)),
    )


_E1 = np.array([1.0, -LUMA[0] / LUMA[1], 0.0])
_E1 /= np.linalg.norm(_E1)
_E2 = np.cross(LUMA, _E1)
_E2 /= np.linalg.norm(_E2)


def make_colour(luma: float, hue: float, chroma: float) -> np.ndarray:
    """An RGB colour with exactly this luma, hue angle (degrees) and chroma, shrunk into the RGB gamut."""
    theta = math.radians(hue)
    direction = math.cos(theta) * _E1 + math.sin(theta) * _E2
    grey = np.full(3, luma)
    limit = chroma
    for d, g in zip(direction, grey, strict=True):  # largest chroma keeping every channel in [0, 1]
        if d > 1e-9:
            limit = min(limit, (1.0 - g) / d)
        elif d < -1e-9:
            limit = min(limit, g / -d)
    return grey + max(limit, 0.0) * direction


@dataclass(frozen=True)
class Placement:
    """A furniture box as drawn: front rectangle in image coordinates and its extrusion towards the vanishing point."""

    index: int
    x0: float
    x1: float
    y0: float
    y1: float
    depth_ratio: float  # front/back scale ratio (> 1)
    v: float  # floor coordinate of the front edge (draw order)
    floor_y: float  # image y of the floor under the box (for the shadow)
    colour: np.ndarray
    wrong_shading: bool


def palette_hue(spec: SceneSpec, levels: dict[str, int], unit: float) -> float:
    """Hue (degrees) of a surface whose draw is ``unit`` in [-1, 1]: as harmony falls the palette centre moves
    along the shorter arc towards :data:`CLASH_HUE` and the surfaces spread around it by up to ``hue_spread``."""
    level = levels["harmony"] - 1
    delta = (CLASH_HUE - spec.base_hue + 180.0) % 360.0 - 180.0
    return spec.base_hue + EFFECTS.clash_pull[level] * delta + unit * EFFECTS.hue_spread[level]


def balanced_slots(n: int) -> list[float]:
    """Lateral floor positions in [-1, 1] of a symmetric row of ``n`` boxes (the centre first when ``n`` is odd).

    >>> balanced_slots(3)
    [0.0, -0.6, 0.6]
    """
    centre = [0.0] if n % 2 else []
    pairs = [0.6] if n // 2 == 1 else np.linspace(0.75, 0.3, n // 2).round(6).tolist()
    return centre + [side * t for t in pairs[: n // 2] for side in (-1.0, 1.0)]


def place_furniture(spec: SceneSpec, levels: dict[str, int]) -> list[Placement]:
    """The boxes drawn at these levels, back to front."""
    _check_levels(levels)
    n = EFFECTS.n_objects[levels["layout"] - 1]
    disorder = EFFECTS.disorder[levels["layout"] - 1]
    wrong_share = EFFECTS.wrong_shadows[levels["lighting"] - 1]
    x0, x1, y0, y1 = spec.wall
    vx, vy = spec.vanish
    slots = balanced_slots(n)
    chroma = EFFECTS.chroma[levels["harmony"] - 1]
    placements = []
    for i, item in enumerate(spec.furniture[:n]):
        t = (1 - disorder) * slots[i] + disorder * item.random_t
        v = 1.0 + item.depth + 0.03 + disorder * item.random_v
        colour = make_colour(item.luma, palette_hue(spec, levels, item.hue_u), item.chroma_u * chroma)
        # floor point (t, v) to image: the floor row at v spans t in [-1, 1] between the perspective side lines
        floor_y = vy + v * (y1 - vy)
        cx = vx + t * v * ((x1 - vx) if t >= 0 else (vx - x0))
        w = item.width * (x1 - x0) * v
        h = item.height * (y1 - y0) * v
        lift = disorder * item.float_u * 1.2 * h
        placements.append(
            Placement(
                index=i,
                x0=cx - w / 2,
                x1=cx + w / 2,
                y0=floor_y - lift - h,
                y1=floor_y - lift,
                depth_ratio=v / max(v - item.depth, 0.6),
                v=v,
                floor_y=floor_y,
                colour=colour,
                wrong_shading=item.wrong_u < wrong_share,
            )
        )
    return sorted(placements, key=lambda p: p.v)


def _box_faces(p: Placement, vx: float, vy: float, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mask of a box (front face and its extrusion to the vanishing point) and its face per pixel: 0 front, 1 side,
    2 top or underside, -1 outside. A pixel is in the box if some ``t`` in [1, depth_ratio] maps it onto the front
    rectangle (``x0 <= vx + t (X - vx) <= x1``, likewise in y): each bound is an interval of ``t``."""
    back = [(vx + (x - vx) / p.depth_ratio, vy + (y - vy) / p.depth_ratio) for x in (p.x0, p.x1) for y in (p.y0, p.y1)]
    x_lo, x_hi = min(p.x0, *(b[0] for b in back)), max(p.x1, *(b[0] for b in back))
    y_lo, y_hi = min(p.y0, *(b[1] for b in back)), max(p.y1, *(b[1] for b in back))
    near = (X >= x_lo) & (X <= x_hi) & (Y >= y_lo) & (Y <= y_hi)  # the box's bounding rectangle
    xs, ys = X[near], Y[near]
    lo, hi = np.ones_like(xs), np.full_like(xs, p.depth_ratio)
    axis_lo = np.zeros(xs.shape, dtype=np.int8)
    for axis, (coord, c, a, b) in enumerate(((xs, vx, p.x0, p.x1), (ys, vy, p.y0, p.y1)), start=1):
        d = coord - c
        with np.errstate(divide="ignore", invalid="ignore"):
            t1, t2 = (a - c) / d, (b - c) / d
        tmin = np.where(d > 0, t1, t2)
        tmax = np.where(d > 0, t2, t1)
        zero = np.abs(d) < 1e-12
        tmin = np.where(zero, -np.inf if a <= c <= b else np.inf, tmin)
        tmax = np.where(zero, np.inf, tmax)
        axis_lo = np.where(tmin > lo, axis, axis_lo)
        lo = np.maximum(lo, tmin)
        hi = np.minimum(hi, tmax)
    inside = np.zeros(X.shape, dtype=bool)
    face = np.full(X.shape, -1, dtype=np.int8)
    inside[near] = lo <= hi
    face[near] = np.where(lo <= hi, axis_lo, -1)
    return inside, face


def surface_colours(spec: SceneSpec, levels: dict[str, int]) -> dict[str, np.ndarray]:
    """RGB albedo of the back wall, side walls, ceiling and floor at this harmony level."""
    chroma = EFFECTS.chroma[levels["harmony"] - 1]
    hue = [palette_hue(spec, levels, h) for h in spec.surface_hue_u]
    wall_luma, _, ceil_luma, floor_luma = spec.surface_luma
    return {
        "back": make_colour(wall_luma, hue[0], chroma),
        "side": make_colour(wall_luma * 0.85, hue[1], chroma),
        "ceiling": make_colour(ceil_luma, hue[2], chroma * 0.5),
        "floor": make_colour(floor_luma, hue[3], chroma),
    }


def _room_albedo(spec: SceneSpec, levels: dict[str, int], X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    x0, x1, y0, y1 = spec.wall
    vx, vy = spec.vanish
    dx, dy = X - vx, Y - vy
    u = np.where(dx >= 0, dx / (x1 - vx), dx / (vx - x0))
    v = np.where(dy >= 0, dy / (y1 - vy), dy / (vy - y0))
    back = (np.abs(u) <= 1) & (np.abs(v) <= 1)
    floor = ~back & (v >= np.abs(u))
    ceiling = ~back & (-v >= np.abs(u))
    colours = surface_colours(spec, levels)
    albedo = np.empty(X.shape + (3,))
    albedo[...] = colours["side"]
    albedo[back] = colours["back"]
    albedo[ceiling] = colours["ceiling"]
    # floor planks: boards along the rays from the vanishing point
    board = np.floor((u / np.maximum(v, 1e-6) + 1.0) * spec.planks / 2.0).astype(int) % 2
    albedo[floor] = colours["floor"]
    albedo[floor & (board == 1)] *= 0.88
    # windows on the back wall (frame = wall colour, cross bars)
    bu, bv = (X - x0) / (x1 - x0), (Y - y0) / (y1 - y0)
    for wx0, wx1, wy0, wy1 in spec.windows:
        inside = back & (bu >= wx0) & (bu <= wx1) & (bv >= wy0) & (bv <= wy1)
        bar = (np.abs(bu - (wx0 + wx1) / 2) < 0.012) | (np.abs(bv - (wy0 + wy1) / 2) < 0.012)
        albedo[inside & ~bar] = (0.97, 0.97, 0.95)
        albedo[inside & bar] = colours["back"] * 0.7
    return albedo


def _illumination(spec: SceneSpec, levels: dict[str, int], X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    x0, x1, y0, y1 = spec.wall
    wx0, wx1, wy0, wy1 = spec.windows[0]
    lx, ly = x0 + (wx0 + wx1) / 2 * (x1 - x0), y0 + (wy0 + wy1) / 2 * (y1 - y0)
    falloff = np.exp(-((X - lx) ** 2 + (Y - ly) ** 2) / (2 * 0.35**2))
    ambient = EFFECTS.ambient[levels["lighting"] - 1]
    return EFFECTS.gain[levels["lighting"] - 1] * (ambient + (1 - ambient) * falloff) / (ambient + (1 - ambient) * 0.6)


def _material_noise(spec: SceneSpec, shape: tuple[int, int]) -> np.ndarray:
    grid = np.random.default_rng(spec.noise_seed).standard_normal((_NOISE_GRID, _NOISE_GRID)).astype(np.float32)
    image = Image.fromarray(grid, mode="F").resize((shape[1], shape[0]), Image.Resampling.BILINEAR)
    noise = np.asarray(image, dtype=np.float64)
    return noise / max(noise.std(), 1e-6)


def render(spec: SceneSpec, levels: dict[str, int], size: int = 64) -> Image.Image:
    """Render the scene at the given levels as an RGB image of ``size`` x ``size`` pixels (deterministic)."""
    _check_levels(levels)
    if size < 8:
        raise ValueError(f"size must be at least 8 pixels, got {size}")
    n = size * _SS
    grid = (np.arange(n) + 0.5) / n
    X, Y = np.meshgrid(grid, grid)
    amp = EFFECTS.warp[levels["distortion"] - 1]
    if amp > 0:  # warp the sampling grid: every straight edge of the room and the furniture bends
        fx, fy = spec.warp_freq
        p = spec.warp_phase
        X = X + amp * (np.sin(2 * np.pi * (fx * Y + p[0])) + 0.5 * np.sin(2 * np.pi * (fy * X + p[1])))
        Y = Y + amp * (np.sin(2 * np.pi * (fy * X + p[2])) + 0.5 * np.sin(2 * np.pi * (fx * Y + p[3])))
    vx, vy = spec.vanish
    albedo = _room_albedo(spec, levels, X, Y)
    shade = np.ones(X.shape)
    light_side = 1.0 if (spec.windows[0][0] + spec.windows[0][1]) / 2 > 0.5 else -1.0  # window right (+1) or left
    for p in place_furniture(spec, levels):
        direction = -light_side if not p.wrong_shading else light_side  # shadows fall away from the light
        w, h = p.x1 - p.x0, p.y1 - p.y0
        sx = (p.x0 + p.x1) / 2 + direction * 0.45 * w
        shadow = ((X - sx) / (0.75 * w)) ** 2 + ((Y - p.floor_y) / (0.18 * h + 0.01)) ** 2 <= 1.0
        shade[shadow] *= 0.55
        inside, face = _box_faces(p, vx, vy, X, Y)
        albedo[inside] = p.colour
        shade[inside] = 1.0
        facing = (p.x0 + p.x1) / 2 < vx  # side face visible on the side towards the vanishing point
        lit_side = (light_side > 0) == facing
        if p.wrong_shading:
            lit_side = not lit_side
        shade[face == 1] = 0.9 if lit_side else 0.55
        shade[face == 2] = 1.15 if p.y0 > vy else 0.7  # top face (or the underside, for boxes above the eye)
    rgb = albedo * (shade * _illumination(spec, levels, X, Y))[..., None]
    sigma = EFFECTS.noise[levels["distortion"] - 1]
    if sigma > 0:
        rgb *= np.clip(1.0 + sigma * _material_noise(spec, X.shape), 0.2, None)[..., None]
    if spec.lamp is not None:
        lx, ly, r = spec.lamp
        lamp = (X - lx) ** 2 + (Y - ly) ** 2 <= r**2
        rgb[lamp] = EFFECTS.gain[levels["lighting"] - 1] * np.array([1.0, 0.97, 0.88])
    rgb = rgb.reshape(size, _SS, size, _SS, 3).mean(axis=(1, 3))
    return Image.fromarray(np.round(np.clip(rgb, 0.0, 1.0) * 255).astype(np.uint8), mode="RGB")


def object_mask(spec: SceneSpec, levels: dict[str, int], index: int, size: int = 64, pad: float = 0.02) -> Image.Image:
    """An ``L`` mask (255 = repaint): furniture box ``index``'s bounding rectangle at these levels, padded by ``pad``
    (fraction of the size), at its unwarped place (as an inpainting mask would be)."""
    placements = {p.index: p for p in place_furniture(spec, levels)}
    if index not in placements:
        raise ValueError(f"object {index} is not drawn at layout level {levels['layout']}: have {sorted(placements)}")
    p = placements[index]
    vx, vy = spec.vanish
    back = [(vx + (x - vx) / p.depth_ratio, vy + (y - vy) / p.depth_ratio) for x in (p.x0, p.x1) for y in (p.y0, p.y1)]
    xs = [p.x0, p.x1] + [b[0] for b in back]
    ys = [p.y0, p.y1] + [b[1] for b in back]
    grid = (np.arange(size) + 0.5) / size
    X, Y = np.meshgrid(grid, grid)
    mask = (X >= min(xs) - pad) & (X <= max(xs) + pad) & (Y >= min(ys) - pad) & (Y <= max(ys) + pad)
    return Image.fromarray((mask * 255).astype(np.uint8), mode="L")


def colour_name(rgb: np.ndarray) -> str:
    """A plain colour word for an RGB colour in [0, 1] (used in scene prompts)."""
    h, s, v = colorsys.rgb_to_hsv(*(float(c) for c in rgb))
    if s < 0.15:
        return "white" if v > 0.8 else "grey" if v > 0.35 else "charcoal"
    words = "red orange yellow green teal blue purple pink red".split()
    name = next(w for edge, w in zip((15, 40, 65, 160, 200, 255, 290, 335, 360), words, strict=True) if h * 360 < edge)
    return f"dark {name}" if v < 0.35 else f"light {name}" if v > 0.8 else name


def describe(spec: SceneSpec, levels: dict[str, int]) -> str:
    """A base prompt describing the scene (room, wall and floor colours, windows, furniture), as for inpainting."""
    colours = surface_colours(spec, levels)
    wall, floor = colour_name(colours["back"]), colour_name(colours["floor"])
    items = [f"a {colour_name(p.colour)} {spec.furniture[p.index].kind}" for p in place_furniture(spec, levels)[:4]]
    windows = "a window" if len(spec.windows) == 1 else "two windows"
    lamp = " and a pendant lamp" if spec.lamp is not None else ""
    return (
        f"A {spec.room} with a {wall} back wall, a {floor} plank floor, {windows}{lamp}; "
        f"furnished with {', '.join(items)}. Interior photograph, natural daylight."
    )


def proxy_scores(image: Image.Image) -> dict[str, float]:
    """Hand-made statistics that track each dimension's level (higher = better), measured on the image alone: the
    table of the module docstring (the median filter and the median ignore the noise and the sparse object edges)."""
    from scipy import ndimage

    rgb = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
    luma = rgb @ LUMA
    log_luma = np.log(luma + 0.005)
    smooth = ndimage.gaussian_filter(ndimage.median_filter(log_luma, size=5), 0.7)
    gy, gx = np.gradient(smooth)
    chromaticity = rgb / (rgb.sum(axis=-1, keepdims=True) + 1e-3)
    residual = np.abs(np.log(luma + 0.02) - ndimage.gaussian_filter(np.log(luma + 0.02), 1.0))
    return {
        "layout": -float((np.hypot(gx, gy) > 0.15).mean()),
        "harmony": -float(chromaticity.std(axis=(0, 1)).sum()),
        "lighting": float(luma.mean()),
        "distortion": -float(np.median(residual)),
    }
