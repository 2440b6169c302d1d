"""PACE evaluation protocols: versioned, human-editable JSON, validated on load, never executed or unpickled.

A protocol turns one quality dimension into VQA probes with option->score maps (PACE §4.3) and, once calibrated,
two human-rated anchor images (§4.4). Anchor image paths are relative to the protocol file's folder and must stay
inside it (no ``..``, no symlink out of it); an absolute path is refused unless ``allow_absolute_paths``. Unknown keys
are errors naming the close match (``wieght`` -> ``weight``), and every number is checked to a finite, sane range.

Example:
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError, UserError
from reward.core.registry import close_match
from reward.data.files import atomic_write_json

SCHEMA = "pace-protocol/1"
SCORE_RANGE = (1.0, 5.0)  # option and anchor scores live on the 1-5 MOS scale of the paper
MAX_OPTIONS = 5  # options are lettered A, B, ... in score order
WEIGHT_RANGE = (1e-3, 1e3)  # a probe's weight relative to the others: beyond this ratio a probe is noise or all
KEYS = {  # the keys each object of a protocol may have
    "protocol": ("schema", "dimension", "sub_dimensions", "probes", "anchors", "provenance"),
    "sub_dimension": ("name", "description"),
    "probe": ("question", "options", "weight", "sub_dimension", "zoom"),
    "option": ("text", "score"),
    "anchors": ("high", "low"),
    "anchor": ("image", "score"),
}
# Probes about micro-features are also asked on enlarged crops (PACE §4.5, "Crop & Zoom").
ZOOM_KEYWORDS = (
    "texture",
    "noise",
    "noisy",
    "grain",
    "edge",
    "blur",
    "sharp",
    "detail",
    "artifact",
    "artefact",
    "pixel",
    "jagged",
    "compression",
    "fine",
    "micro",
)


class ProtocolError(UserError):
    """A protocol file or mapping that does not follow the schema; the message names every bad field."""


def _unknown_keys(raw: dict[str, Any], kind: str, where: str, problems: list[str]) -> None:
    """An error per key ``raw`` has that a ``kind`` object does not, with the close match."""
    known = KEYS[kind]
    for key in raw:
        if key not in known:
            hint = close_match(str(key), list(known), fmt=" (did you mean {!r}?)")
            prefix = f"{where}." if where else ""
            problems.append(f"unknown key {prefix}{key}{hint}; {kind} keys are {', '.join(known)}")


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
        """The options in score order, highest first: they are asked as A, B, C ..."""
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
    allow_absolute_paths: bool = False  # anchors may name absolute paths (refused by default)

    @property
    def score_bounds(self) -> tuple[float, float]:
        """(S_min, S_max): the lowest and highest option score of the whole protocol (PACE eq. 6)."""
        scores = [o.score for p in self.probes for o in p.options]
        return min(scores), max(scores)

    @property
    def calibrated(self) -> bool:
        return self.anchors is not None

    def anchor_path(self, which: str) -> Path:
        """The anchor image's path, inside the protocol's folder (:func:`resolve_inside`)."""
        if self.anchors is None:
            raise ProtocolError(f"protocol for {self.dimension!r} has no anchors; calibrate it first")
        image = self.anchors[which].image
        if self.folder is None:
            if not Path(image).is_absolute() or not self.allow_absolute_paths:
                raise ProtocolError(
                    f"protocol for {self.dimension!r}: anchors.{which}.image = {image!r} has no folder to be "
                    "resolved in; load the protocol from its file"
                )
            return Path(image)
        return resolve_inside(self.folder, image, f"anchors.{which}.image", allow_absolute=self.allow_absolute_paths)


def resolve_inside(folder: Path, name: str, where: str, *, allow_absolute: bool = False) -> Path:
    """``folder / name``, refused when it leaves ``folder`` (``..``, or a symlink pointing out of it) or when ``name``
    is absolute and ``allow_absolute`` is false. Nothing a data file names may read a file outside its folder.

    >>> resolve_inside(Path("/data/p"), "anchors/high.png", "anchors.high.image").as_posix()
    '/data/p/anchors/high.png'
    >>> resolve_inside(Path("/data/p"), "../../etc/passwd", "anchors.high.image")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pace_judge.protocol.ProtocolError: anchors.high.image = '../../etc/passwd' leaves the protocol's folder ...
    """
    path = Path(name)
    if path.is_absolute():
        if not allow_absolute:
            raise ProtocolError(
                f"{where} = {name!r} is an absolute path; anchor paths are relative to the protocol's folder "
                "(pass allow_absolute_paths=true to accept absolute paths)"
            )
        return path
    root = folder.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ProtocolError(f"{where} = {name!r} leaves the protocol's folder {root}; anchor images must be inside it")
    return target  # what was checked is what is read


def wants_zoom(question: str) -> bool:
    """Whether a probe's question is about micro-features (texture, noise, edges, blur ...)."""
    words = re.findall(r"[a-z]+", question.lower())
    return any(w.startswith(k) for w in words for k in ZOOM_KEYWORDS)


# -- validation --------------------------------------------------------------------------------------------
def _num(value: Any, where: str, problems: list[str]) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{where} must be a finite number, got {value!r}")
        return None
    return float(value)


def _text(value: Any, where: str, problems: list[str]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where} must be a non-empty string, got {value!r}")
        return None
    return value.strip()


def _in_range(value: float | None, where: str, problems: list[str]) -> None:
    lo, hi = SCORE_RANGE
    if value is not None and not lo <= value <= hi:
        problems.append(f"{where} = {value} is outside the {lo:g}-{hi:g} scale")


def _parse_probe(raw: Any, where: str, sub_names: set[str], problems: list[str]) -> Probe | None:
    if not isinstance(raw, dict):
        problems.append(f"{where} must be an object with question and options, got {type(raw).__name__}")
        return None
    n_before = len(problems)
    question = _text(raw.get("question"), f"{where}.question", problems)
    raw_opts = raw.get("options")
    options: list[Option] = []
    if not isinstance(raw_opts, list) or not 2 <= len(raw_opts) <= MAX_OPTIONS:
        problems.append(f"{where}.options must be a list of 2 to {MAX_OPTIONS} {{text, score}} objects")
    else:
        for j, o in enumerate(raw_opts):
            ow = f"{where}.options[{j}]"
            if not isinstance(o, dict):
                problems.append(f"{ow} must be an object {{text, score}}, got {o!r}")
                continue
            _unknown_keys(o, "option", ow, problems)
            text, score = _text(o.get("text"), f"{ow}.text", problems), _num(o.get("score"), f"{ow}.score", problems)
            _in_range(score, f"{ow}.score", problems)
            if text is not None and score is not None:
                options.append(Option(text, score))
        if len({o.text.lower() for o in options}) < len(options):
            problems.append(f"{where}.options repeat an option text")
        if options and len({o.score for o in options}) < 2:
            problems.append(f"{where}.options all have the same score: the probe cannot tell images apart")
    _unknown_keys(raw, "probe", where, problems)
    weight = _num(raw.get("weight", 1.0), f"{where}.weight", problems)
    lo, hi = WEIGHT_RANGE
    if weight is not None and weight <= 0:
        problems.append(f"{where}.weight must be > 0, got {weight}")
    elif weight is not None and not lo <= weight <= hi:
        problems.append(f"{where}.weight = {weight:g} is outside {lo:g}-{hi:g} (weights are relative to each other)")
    sub = raw.get("sub_dimension")
    if sub is not None and sub_names and sub not in sub_names:
        problems.append(f"{where}.sub_dimension {sub!r} is not one of the sub_dimensions {sorted(sub_names)}")
    zoom = raw.get("zoom")
    if zoom is not None and not isinstance(zoom, bool):
        problems.append(f"{where}.zoom must be true or false, got {zoom!r}")
    if len(problems) > n_before or question is None or weight is None:
        return None
    zoom_flag = wants_zoom(question) if zoom is None else zoom
    return Probe(question, tuple(options), weight, sub, zoom_flag)


def _parse_anchors(raw: Any, problems: list[str]) -> dict[str, Anchor] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        _unknown_keys(raw, "anchors", "anchors", problems)
    if not isinstance(raw, dict) or set(raw) != {"high", "low"}:
        problems.append("anchors must be an object with exactly 'high' and 'low' (or be left out: uncalibrated)")
        return None
    out = {}
    for which in ("high", "low"):
        a = raw[which]
        if not isinstance(a, dict):
            problems.append(f"anchors.{which} must be {{image, score}}")
            continue
        _unknown_keys(a, "anchor", f"anchors.{which}", problems)
        image = _text(a.get("image"), f"anchors.{which}.image", problems)
        score = _num(a.get("score"), f"anchors.{which}.score", problems)
        _in_range(score, f"anchors.{which}.score", problems)
        if image is not None and score is not None:
            out[which] = Anchor(image, score)
    if len(out) == 2 and out["high"].score <= out["low"].score:
        problems.append(
            f"anchors.high.score ({out['high'].score}) must be above anchors.low.score ({out['low'].score})"
        )
    return out if len(out) == 2 else None


def protocol_from_dict(raw: Any, *, source: str = "protocol", folder: Path | None = None) -> Protocol:
    """Validate a protocol mapping; every problem is reported at once, each naming its field."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"{source}: a protocol is a JSON object, got {type(raw).__name__}")
    problems: list[str] = []
    _unknown_keys(raw, "protocol", "", problems)
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
            _unknown_keys(s, "sub_dimension", f"sub_dimensions[{i}]", problems)
        name = _text(s.get("name") if isinstance(s, dict) else s, f"sub_dimensions[{i}].name", problems)
        if name is not None:
            subs.append(SubDimension(name, str(s.get("description", "")) if isinstance(s, dict) else ""))
    names = {s.name for s in subs}
    raw_probes = raw.get("probes")
    probes: list[Probe] = []
    if not isinstance(raw_probes, list) or not raw_probes:
        problems.append("probes must be a non-empty list of {question, options, weight, sub_dimension, zoom}")
    else:
        for i, p in enumerate(raw_probes):
            probe = _parse_probe(p, f"probes[{i}]", names, problems)
            if probe is not None:
                probes.append(probe)
    anchors = _parse_anchors(raw.get("anchors"), problems)
    provenance = raw.get("provenance", {})
    if not isinstance(provenance, dict):
        problems.append("provenance must be an object")
        provenance = {}
    if problems:
        raise ProtocolError(
            f"{source}: invalid PACE protocol:\n  - "
            + "\n  - ".join(problems)
            + "\nFix the file (see docs/judge.md) or rebuild it with the agents."
        )
    return Protocol(dimension or "", probes, subs, anchors, dict(provenance), folder)


def read_json_file(path: Path, what: str = "protocol") -> Any:
    """A JSON file's content; a file that is not UTF-8 or not JSON is a :class:`ProtocolError` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ProtocolError(
            f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); save the {what} "
            "file as UTF-8 JSON"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ProtocolError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg})") from None


def load_protocol(path: str | Path, *, check_anchors: bool = True, allow_absolute_paths: bool = False) -> Protocol:
    """Read and validate a protocol file (UTF-8 JSON). Anchor paths must stay inside the file's folder (absolute
    ones only with ``allow_absolute_paths``); with ``check_anchors`` each anchor must also decode as an image."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"protocol file {path} does not exist; pass protocol=FILE (a pace-protocol JSON)")
    raw = read_json_file(path)
    protocol = protocol_from_dict(raw, source=str(path), folder=path.resolve().parent)
    protocol.allow_absolute_paths = allow_absolute_paths
    if protocol.anchors:
        try:
            paths = {w: protocol.anchor_path(w) for w in ("high", "low")}  # refuses paths that leave the folder
        except ProtocolError as err:
            raise ProtocolError(f"{path}: {err}") from None
        if check_anchors:
            missing = [f"anchors.{w}.image = {p}" for w, p in paths.items() if not p.is_file()]
            if missing:
                raise ProtocolError(
                    f"{path}: anchor images not found: {'; '.join(missing)} (paths are relative to the protocol's "
                    "folder)"
                )
            for w, p in paths.items():
                check_image(p, f"{path}: anchors.{w}.image = {protocol.anchors[w].image!r}")
    return protocol


def check_image(path: Path, where: str) -> None:
    """Refuse a file that does not decode as an image (e.g. a text file named ``.png``)."""
    from reward.data.images import load_image

    try:
        load_image(path)
    except (UserError, OSError) as err:
        raise ProtocolError(f"{where} is not a readable image ({err})") from None


def protocol_to_dict(protocol: Protocol) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "dimension": protocol.dimension,
        "sub_dimensions": [{"name": s.name, "description": s.description} for s in protocol.sub_dimensions],
        "probes": [
            {
                "question": p.question,
                "options": [{"text": o.text, "score": o.score} for o in p.options],
                "weight": p.weight,
                "sub_dimension": p.sub_dimension,
                "zoom": p.zoom,
            }
            for p in protocol.probes
        ],
    }
    if protocol.anchors:
        out["anchors"] = {w: {"image": a.image, "score": a.score} for w, a in protocol.anchors.items()}
    out["provenance"] = protocol.provenance
    return out


def save_protocol(protocol: Protocol, path: str | Path) -> Path:
    """Write the protocol as indented JSON, atomically (validated first: a bad protocol is never written)."""
    data = protocol_to_dict(protocol)
    protocol_from_dict(data, source=str(path))
    return atomic_write_json(path, data)
