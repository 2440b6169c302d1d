"""PACE protocols: one quality dimension as VQA probes with option->score maps (§4.3) and, once calibrated, two
human-rated anchor images (§4.4). Plain JSON, validated on load (every problem named at once, an unknown key with its
close match), never executed; anchor paths stay inside the protocol file's folder.

    >>> p = protocol_from_dict({"schema": "pace-protocol/1", "dimension": "sharpness",
    ...     "sub_dimensions": [{"name": "edges", "description": "crisp object edges"}],
    ...     "probes": [{"question": "Are object edges crisp?", "sub_dimension": "edges",
    ...                 "options": [{"text": "Yes", "score": 5}, {"text": "No", "score": 1}]}]})
    >>> p.score_bounds, p.probes[0].zoom  # "edges" is a zoom keyword
    ((1.0, 5.0), True)
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError, UserError, close_match
from reward.data.files import atomic_write_json
from reward.data.images import load_image

SCHEMA = "pace-protocol/1"
SCORE_RANGE = (1.0, 5.0)  # option and anchor scores: the paper's 1-5 MOS scale
MAX_OPTIONS = 5  # lettered A to E
WEIGHT_RANGE = (1e-3, 1e3)  # a probe's weight relative to the others
KEYS = {
    "protocol": ("schema", "dimension", "sub_dimensions", "probes", "anchors", "provenance"),
    "sub_dimension": ("name", "description"),
    "probe": ("question", "options", "weight", "sub_dimension", "zoom"),
    "option": ("text", "score"),
    "anchors": ("high", "low"),
    "anchor": ("image", "score"),
}
# Probes about micro-features are also asked on crops (§4.5, "Crop & Zoom"): a word starting with one of these.
ZOOM = re.compile(
    r"(?<![a-z])(texture|noise|noisy|grain|edge|blur|sharp|detail|artifact|artefact|pixel|jagged|compression|fine|micro)"
)


@dataclass(frozen=True)
class Option:
    text: str
    score: float


@dataclass(frozen=True)
class Probe:
    question: str
    options: tuple[Option, ...]
    weight: float = 1.0
    sub_dimension: str | None = None
    zoom: bool = False

    @property
    def lettered(self) -> tuple[Option, ...]:
        """The options in score order, highest first (asked as A, B, C ...)."""
        return tuple(sorted(self.options, key=lambda o: -o.score))


@dataclass(frozen=True)
class SubDimension:
    name: str
    description: str = ""


@dataclass(frozen=True)
class Anchor:
    image: str  # relative to the protocol's folder (or absolute)
    score: float


@dataclass
class Protocol:
    dimension: str
    probes: list[Probe]
    sub_dimensions: list[SubDimension] = field(default_factory=list)
    anchors: dict[str, Anchor] | None = None  # {"high": ..., "low": ...}; None: uncalibrated
    provenance: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None  # where anchor paths are resolved (the protocol file's folder)
    allow_absolute_paths: bool = False

    @property
    def score_bounds(self) -> tuple[float, float]:
        """(S_min, S_max): the lowest and highest option score of the protocol (eq. 6)."""
        scores = [o.score for p in self.probes for o in p.options]
        return min(scores), max(scores)

    @property
    def calibrated(self) -> bool:
        return self.anchors is not None

    def anchor_path(self, which: str) -> Path:
        """The anchor image's path, inside the protocol's folder (:func:`resolve_inside`)."""
        if self.anchors is None:
            raise UserError(f"protocol for {self.dimension!r} has no anchors; calibrate it first")
        image = self.anchors[which].image
        if self.folder is None:
            if not Path(image).is_absolute() or not self.allow_absolute_paths:
                raise UserError(
                    f"protocol for {self.dimension!r}: anchors.{which}.image = {image!r} has no folder to be "
                    "resolved in; load the protocol from its file"
                )
            return Path(image)
        return resolve_inside(self.folder, image, f"anchors.{which}.image", allow_absolute=self.allow_absolute_paths)


def resolve_inside(folder: Path, name: str, where: str, *, allow_absolute: bool = False) -> Path:
    """``folder / name``, refused when it leaves ``folder`` (``..``, a symlink out of it) or is absolute (unless
    ``allow_absolute``): nothing a data file names is read outside its folder."""
    path = Path(name)
    if path.is_absolute():
        if not allow_absolute:
            raise UserError(
                f"{where} = {name!r} is an absolute path; anchor paths are relative to the protocol's folder "
                "(pass allow_absolute_paths=true to accept absolute paths)"
            )
        return path
    root = folder.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise UserError(f"{where} = {name!r} leaves the protocol's folder {root}; anchor images must be inside it")
    return target  # what was checked is what is read


def _unknown(raw: dict[str, Any], kind: str, where: str, problems: list[str]) -> None:
    known = KEYS[kind]
    for key in raw:
        if key not in known:
            hint = close_match(str(key), list(known), fmt=" (did you mean {!r}?)")
            problems.append(
                f"unknown key {where}{'.' if where else ''}{key}{hint}; {kind} keys are {', '.join(known)}"
            )


def _num(value: Any, where: str, problems: list[str], *, scale: bool = False) -> float | None:
    """A finite number (on the 1-5 scale when ``scale``), else a problem and ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{where} must be a finite number, got {value!r}")
        return None
    if scale and not SCORE_RANGE[0] <= value <= SCORE_RANGE[1]:
        problems.append(f"{where} = {float(value)} is outside the 1-5 scale")
    return float(value)


def _text(value: Any, where: str, problems: list[str]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where} must be a non-empty string, got {value!r}")
        return None
    return value.strip()


def _probe(raw: Any, where: str, sub_names: set[str], problems: list[str]) -> Probe | None:
    if not isinstance(raw, dict):
        problems.append(f"{where} must be an object with question and options, got {type(raw).__name__}")
        return None
    before = len(problems)
    question = _text(raw.get("question"), f"{where}.question", problems)
    options: list[Option] = []
    if not isinstance(raw.get("options"), list | tuple) or not 2 <= len(raw["options"]) <= MAX_OPTIONS:
        problems.append(f"{where}.options must be a list of 2 to {MAX_OPTIONS} {{text, score}} objects")
    else:
        for j, o in enumerate(raw["options"]):
            ow = f"{where}.options[{j}]"
            if not isinstance(o, dict):
                problems.append(f"{ow} must be an object {{text, score}}, got {o!r}")
                continue
            _unknown(o, "option", ow, problems)
            text = _text(o.get("text"), f"{ow}.text", problems)
            score = _num(o.get("score"), f"{ow}.score", problems, scale=True)
            if text is not None and score is not None:
                options.append(Option(text, score))
        if len({o.text.lower() for o in options}) < len(options):
            problems.append(f"{where}.options repeat an option text")
        if options and len({o.score for o in options}) < 2:
            problems.append(f"{where}.options all have the same score: the probe cannot tell images apart")
    _unknown(raw, "probe", where, problems)
    weight = _num(raw.get("weight", 1.0), f"{where}.weight", problems)
    if weight is not None and weight <= 0:
        problems.append(f"{where}.weight must be > 0, got {weight}")
    elif weight is not None and not WEIGHT_RANGE[0] <= weight <= WEIGHT_RANGE[1]:
        problems.append(f"{where}.weight = {weight:g} is outside 0.001-1000 (weights are relative to each other)")
    sub, zoom = raw.get("sub_dimension"), raw.get("zoom")
    if sub is not None and sub_names and sub not in sub_names:
        problems.append(f"{where}.sub_dimension {sub!r} is not one of the sub_dimensions {sorted(sub_names)}")
    if zoom is not None and not isinstance(zoom, bool):
        problems.append(f"{where}.zoom must be true or false, got {zoom!r}")
    if len(problems) > before or question is None or weight is None:
        return None
    return Probe(question, tuple(options), weight, sub, bool(ZOOM.search(question.lower())) if zoom is None else zoom)


def _anchors(raw: Any, problems: list[str]) -> dict[str, Anchor] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        _unknown(raw, "anchors", "anchors", problems)
    if not isinstance(raw, dict) or set(raw) != {"high", "low"}:
        problems.append("anchors must be an object with exactly 'high' and 'low' (or be left out: uncalibrated)")
        return None
    out = {}
    for which, a in raw.items():
        if not isinstance(a, dict):
            problems.append(f"anchors.{which} must be {{image, score}}")
            continue
        _unknown(a, "anchor", f"anchors.{which}", problems)
        image = _text(a.get("image"), f"anchors.{which}.image", problems)
        score = _num(a.get("score"), f"anchors.{which}.score", problems, scale=True)
        if image is not None and score is not None:
            out[which] = Anchor(image, score)
    if len(out) < 2:
        return None
    if out["high"].score <= out["low"].score:
        problems.append(
            f"anchors.high.score ({out['high'].score}) must be above anchors.low.score ({out['low'].score})"
        )
    return {"high": out["high"], "low": out["low"]}


def protocol_from_dict(raw: Any, *, source: str = "protocol", folder: Path | None = None) -> Protocol:
    """Validate a protocol mapping; every problem is reported at once, each naming its field."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: a protocol is a JSON object, got {type(raw).__name__}")
    problems: list[str] = []
    _unknown(raw, "protocol", "", problems)
    if raw.get("schema") != SCHEMA:
        problems.append(f"schema must be {SCHEMA!r}, got {raw.get('schema')!r}")
    dimension = _text(raw.get("dimension"), "dimension", problems)
    subs: list[SubDimension] = []
    raw_subs = raw.get("sub_dimensions", [])
    if not isinstance(raw_subs, list):
        problems.append("sub_dimensions must be a list of {name, description}")
        raw_subs = []
    for i, s in enumerate(raw_subs):
        if isinstance(s, dict):
            _unknown(s, "sub_dimension", f"sub_dimensions[{i}]", problems)
        name = _text(s.get("name") if isinstance(s, dict) else s, f"sub_dimensions[{i}].name", problems)
        if name is not None:
            subs.append(SubDimension(name, str(s.get("description", "")) if isinstance(s, dict) else ""))
    probes = []
    if not isinstance(raw.get("probes"), list) or not raw["probes"]:
        problems.append("probes must be a non-empty list of {question, options, weight, sub_dimension, zoom}")
    else:
        probes = [_probe(p, f"probes[{i}]", {s.name for s in subs}, problems) for i, p in enumerate(raw["probes"])]
    anchors = _anchors(raw.get("anchors"), problems)
    provenance = raw.get("provenance", {})
    if not isinstance(provenance, dict):
        problems.append("provenance must be an object")
    if problems:
        raise UserError(
            f"{source}: invalid PACE protocol:\n  - "
            + "\n  - ".join(problems)
            + "\nFix the file (see docs/judge.md) or rebuild it with the agents."
        )
    return Protocol(dimension or "", probes, subs, anchors, dict(provenance), folder)  # type: ignore[arg-type]


def read_json_file(path: Path, what: str = "protocol") -> Any:
    """A JSON file's content; a file that is not UTF-8 or not JSON is an error naming it (and the position)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); save the {what} "
            "file as UTF-8 JSON"
        ) from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg})") from None


def load_protocol(path: str | Path, *, check_anchors: bool = True, allow_absolute_paths: bool = False) -> Protocol:
    """Read and validate a protocol file; anchor paths must stay inside its folder and (``check_anchors``) decode."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"protocol file {path} does not exist; pass protocol=FILE (a pace-protocol JSON)")
    protocol = protocol_from_dict(read_json_file(path), source=str(path), folder=path.resolve().parent)
    protocol.allow_absolute_paths = allow_absolute_paths
    if not protocol.anchors:
        return protocol
    try:
        paths = {w: protocol.anchor_path(w) for w in ("high", "low")}
    except UserError as err:
        raise UserError(f"{path}: {err}") from None
    if not check_anchors:
        return protocol
    missing = [f"anchors.{w}.image = {p}" for w, p in paths.items() if not p.is_file()]
    if missing:
        raise UserError(
            f"{path}: anchor images not found: {'; '.join(missing)} (paths are relative to the protocol's folder)"
        )
    for w, p in paths.items():
        try:
            load_image(p)
        except (UserError, OSError) as err:
            where = f"{path}: anchors.{w}.image = {protocol.anchors[w].image!r}"
            raise UserError(f"{where} is not a readable image ({err})") from None
    return protocol


def protocol_to_dict(protocol: Protocol) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "dimension": protocol.dimension,
        "sub_dimensions": [asdict(s) for s in protocol.sub_dimensions],
        "probes": [asdict(p) for p in protocol.probes],
    }
    if protocol.anchors:
        out["anchors"] = {w: asdict(a) for w, a in protocol.anchors.items()}
    out["provenance"] = protocol.provenance
    return out


def save_protocol(protocol: Protocol, path: str | Path) -> Path:
    """Write the protocol as indented JSON, atomically (validated first: a bad protocol is never written)."""
    data = protocol_to_dict(protocol)
    protocol_from_dict(data, source=str(path))
    return atomic_write_json(path, data)
