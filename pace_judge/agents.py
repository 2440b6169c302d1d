"""PACE's agents (§4.3, appendix A.1): Planner, Visualizer, Critic and Generator build a protocol from a dimension.

The prompts are the paper's (A.1.2) as editable defaults (``agents.prompts=FILE``, a JSON or YAML mapping of
role -> template). Decoding is deterministic. Every answer is parsed robustly and validated; an answer that stays
unusable after ``retries`` re-asks is a recorded failure with its raw text -- never a crash and never a silently
empty protocol: when no probe survives, :class:`ProtocolBuildError` says why and carries every failure.

Example (a scripted backend stands in for the VLM; see tests/test_pace_agents.py):
    >>> build_protocol(backend, "tactile satisfaction", image)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from pace_judge.backends import Backend
from pace_judge.parsing import AnswerFormatError, parse_json, parse_verdict
from pace_judge.protocol import Probe, Protocol, ProtocolError, SubDimension, protocol_from_dict
from reward.core.config import RETRIES, TOKENS
from reward.core.config import parse as parse_settings

logger = logging.getLogger(__name__)

PROMPTS: dict[str, str] = {
    "planner": (
        "[Planning Agent] I need to evaluate the visual quality dimension: '{dimension}'. Please decompose this "
        "abstract concept into {min_sub} to {max_sub} distinct, visually observable sub-dimensions or low-level "
        "features. They must overlap as little as possible and together cover '{dimension}'.\n"
        'Output JSON format: {{"subdimensions": [{{"name": "...", "description": "..."}}, ...]}}'
    ),
    "visualizer": (
        "[Visualizer Agent] You are an expert in Visual Quality Assessment and VQA Logic Design. Your task is to "
        "create CONTEXT-AWARE and REUSABLE VQA rules for evaluating '{dimension}' with the provided image as visual "
        "grounding. Identify visual elements, artifacts, or strengths related to {sub_dimension} ({description}). "
        "Your questions should focus on concrete details visible in the image.\n{refcontext}"
        'Critical feedback from previous round: "{feedback}"\n'
        "REQUIREMENTS:\n1. Generate {max_rules} distinct VQA rules in JSON.\n"
        "2. Each rule must have a specific Question and a Scoring Mapping (option_scores) from 1 (worst) to 5 "
        "(best), monotone in the order of the options.\n"
        "3. Questions must be objective and focus on concrete visual evidence.\n"
        '4. Do NOT ask abstract questions like "Is it good?". Ask "Is the edge sharp?" or "Are the colors '
        'natural?".\n5. Set "zoom": true when the rule is about micro-features (texture, noise, edges, blur).\n'
        'OUTPUT FORMAT (Strict JSON): {{"rules": [{{"sub_dimension": "{sub_dimension}", "question": "The VQA '
        'question", "option_scores": {{"Yes": 5, "Medium": 3, "No": 1}}, "weight": 1.0, "zoom": false, '
        '"rationale": "Why this question is included"}}]}}'
    ),
    "critic": (
        "[Critic Agent] You are a meta-evaluator for Visual Question Answering (VQA). Please review the following "
        'proposed evaluation rule for \'{dimension}\':\nQuestion: "{question}"\nScoring mapping: "{option_scores}"\n'
        "Task: Is this a valid, visually grounded question that a Vision-Language Model can reasonably answer by "
        "observing an image?\n- VALID: evaluates physical features (sharpness, noise) or visual semantics (style, "
        "realism).\n- INVALID: purely emotional or subjective, requires invisible context, duplicates another listed "
        "rule, or its scoring mapping is inverted (a higher score for worse '{dimension}') or not monotone in the "
        "order of the options.\n{context}"
        "CRITICAL: Evaluate both the question and its scoring mapping. Do not reject just because the image is low "
        "quality.\nReply STRICTLY in this format: Yes. (or No.) Reason: [short reason]"
    ),
    "generator": (
        "[Generator Agent] These VQA rules define '{dimension}':\n{rules}\nWrite text-to-image prompts for "
        "calibration: {n} prompts whose images would score HIGH on every rule, and {n} whose images would score "
        "LOW, with the same subject so that only '{dimension}' differs.\n"
        'Output JSON format: {{"positive": ["..."], "negative": ["..."]}}'
    ),
}
REFERENCE_NOTE = (
    "Reference rules evolved earlier for the related dimension '{dimension}' (similarity {cosine:.2f}); reuse what "
    "fits '{target}', change what does not:\n{rules}\n"
)
SIBLINGS_NOTE = "Rules already in this protocol (the rule under review must not duplicate any of them):\n{rules}\n"
ON_REJECT = ("keep_last", "drop")
RETRY_NOTE = "\n\nYour previous answer could not be used ({error}). Reply again with the requested format only."


class ProtocolBuildError(RuntimeError):
    """The agents could not build a valid protocol; ``failures`` holds each failed answer with its raw text."""

    def __init__(self, message: str, failures: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass
class AgentConfig:
    max_rounds: int = field(
        default=3,
        metadata={
            "help": "Visualizer <-> Critic rounds per sub-dimension (paper: at most three)",
            "range": (1, 100),
        },
    )
    retries: int = field(
        default=2,
        metadata={"help": "re-asks of an agent whose answer cannot be parsed or validated", "range": RETRIES},
    )
    rules_per_sub: int = field(
        default=1, metadata={"help": "probes asked of the Visualizer per sub-dimension", "range": (1, 100)}
    )
    min_sub: int = field(
        default=3,
        metadata={"help": "the Planner's sub-dimensions: between min_sub and max_sub", "range": (1, 100)},
    )
    max_sub: int = field(
        default=5, metadata={"help": "the most sub-dimensions the Planner may give", "range": (1, 100)}
    )
    max_new_tokens: int = field(default=512, metadata={"help": "tokens per agent reply at most", "range": TOKENS})
    prompts: str | None = field(
        default=None, metadata={"help": "JSON/YAML file overriding some of PROMPTS (role -> template)"}
    )
    on_reject: str = field(
        default="keep_last",
        metadata={
            "help": (
                "a sub-dimension whose probe is still rejected after max_rounds: keep_last keeps the "
                "Visualizer's revision after the last critique, unreviewed (Algorithm 1); drop leaves the "
                "sub-dimension out (§4.3, A.6, the released code)"
            )
        },
    )


def agent_config(raw: dict[str, Any] | None) -> AgentConfig:
    cfg = parse_settings(AgentConfig, raw or {}, where="agents")
    if cfg.max_rounds < 1 or cfg.retries < 0 or cfg.rules_per_sub < 1 or not 1 <= cfg.min_sub <= cfg.max_sub:
        raise ValueError(
            f"agents: need max_rounds >= 1, retries >= 0, rules_per_sub >= 1, 1 <= min_sub <= max_sub; got {cfg}"
        )
    if cfg.on_reject not in ON_REJECT:
        raise ValueError(f"agents.on_reject={cfg.on_reject!r}: choose one of {', '.join(ON_REJECT)}")
    return cfg


def load_prompts(path: str | None) -> dict[str, str]:
    prompts = dict(PROMPTS)
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"agents.prompts={path}: cannot read it as UTF-8 text ({err})") from None
        if Path(path).suffix in (".yaml", ".yml"):
            from omegaconf import OmegaConf

            custom = OmegaConf.to_container(OmegaConf.create(text))
        else:
            custom = json.loads(text)
        unknown = set(custom) - set(PROMPTS)  # type: ignore[arg-type]
        if unknown:
            raise ValueError(f"{path}: unknown agent roles {sorted(unknown)}; use {sorted(PROMPTS)}")
        prompts.update(custom)  # type: ignore[arg-type]
    return prompts


@dataclass
class Agents:
    """The four agents sharing one backend (the paper uses one backbone with different prompts)."""

    backend: Backend
    cfg: AgentConfig = field(default_factory=AgentConfig)
    prompts: dict[str, str] = field(default_factory=lambda: dict(PROMPTS))
    failures: list[dict[str, Any]] = field(default_factory=list)

    def ask(
        self,
        role: str,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        parse: Any,
        context: Sequence[dict[str, Any]],
    ) -> list[Any]:
        """Ask ``prompts`` in one batch, parse each answer (``parse``: one function, or one per prompt); re-ask the
        unusable ones; ``None`` where every try failed."""
        parsers = parse if isinstance(parse, list) else [parse] * len(prompts)
        results: list[Any] = [None] * len(prompts)
        pending = list(range(len(prompts)))
        errors: dict[int, str] = {}
        raws: dict[int, list[str]] = {i: [] for i in pending}
        for _ in range(self.cfg.retries + 1):
            if not pending:
                break
            asked = [prompts[i] + (RETRY_NOTE.format(error=errors[i]) if i in errors else "") for i in pending]
            answers = self.backend.chat(asked, [images[i] for i in pending], max_new_tokens=self.cfg.max_new_tokens)
            still = []
            for i, answer in zip(pending, answers, strict=True):
                raws[i].append(answer)
                try:
                    results[i] = parsers[i](answer)
                except (AnswerFormatError, ProtocolError, ValueError, TypeError, KeyError) as err:
                    errors[i] = " ".join(str(err).split())[:400]
                    still.append(i)
            pending = still
        for i in pending:
            self.failures.append({"agent": role, **context[i], "error": errors[i], "raw": raws[i]})
            logger.warning("%s agent: unusable answer after %d tries (%s)", role, self.cfg.retries + 1, errors[i])
        return results

    # -- Planner ----------------------------------------------------------------------------------------
    def plan(self, dimension: str) -> list[SubDimension]:
        c = self.cfg
        prompt = self.prompts["planner"].format(dimension=dimension, min_sub=c.min_sub, max_sub=c.max_sub)
        return self.ask("planner", [prompt], [[]], self._parse_plan, [{"dimension": dimension}])[0] or []

    def _parse_plan(self, answer: str) -> list[SubDimension]:
        obj = parse_json(answer)
        items = obj.get("subdimensions", obj.get("sub_dimensions")) if isinstance(obj, dict) else obj
        if not isinstance(items, list):
            raise ValueError('expected {"subdimensions": [...]}')
        subs = []
        for it in items:
            name = it.get("name") if isinstance(it, dict) else it
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"sub-dimension {it!r} has no name")
            desc = str(it.get("description", "")) if isinstance(it, dict) else ""
            subs.append(SubDimension(name.strip(), desc.strip()))
        if len({s.name.lower() for s in subs}) != len(subs):
            raise ValueError("sub-dimensions repeat a name")
        if not self.cfg.min_sub <= len(subs) <= self.cfg.max_sub:
            raise ValueError(f"{len(subs)} sub-dimensions; give {self.cfg.min_sub} to {self.cfg.max_sub}")
        return subs

    # -- Visualizer -------------------------------------------------------------------------------------
    def visualize(
        self,
        dimension: str,
        subs: Sequence[SubDimension],
        image: Image.Image | None,
        feedback: Sequence[str],
        round_: int,
        refcontext: str = "",
    ) -> list[list[Probe] | None]:
        prompts = [
            self.prompts["visualizer"].format(
                dimension=dimension,
                sub_dimension=s.name,
                description=s.description or s.name,
                feedback=f,
                max_rules=self.cfg.rules_per_sub,
                refcontext=refcontext,
            )
            for s, f in zip(subs, feedback, strict=True)
        ]
        images = [[image] if image is not None else [] for _ in subs]
        parsers = [self._rules_parser(s) for s in subs]
        ctx = [{"sub_dimension": s.name, "round": round_} for s in subs]
        return self.ask("visualizer", prompts, images, parsers, ctx)

    def _rules_parser(self, sub: SubDimension) -> Any:
        def parse(answer: str) -> list[Probe]:
            obj = parse_json(answer)
            rules = obj.get("rules") if isinstance(obj, dict) else obj
            if not isinstance(rules, list) or not rules:
                raise ValueError('expected {"rules": [...]} with at least one rule')
            return [rule_to_probe(r, sub.name, where=f"rules[{i}]") for i, r in enumerate(rules)]

        return parse

    # -- Critic -----------------------------------------------------------------------------------------
    def criticize(
        self,
        dimension: str,
        probes: Sequence[Probe],
        round_: int,
        siblings: Sequence[Sequence[Probe]] | None = None,
    ) -> list[tuple[bool, str]]:
        """One verdict per probe; ``siblings[i]``: the rules probe ``i`` is reviewed against for redundancy (§4.3: the
        Critic rejects probes that are "redundant")."""
        siblings = siblings or [[] for _ in probes]
        prompts = [
            self.prompts["critic"].format(
                dimension=dimension,
                question=p.question,
                option_scores=_option_scores(p),
                context=SIBLINGS_NOTE.format(rules=_rule_lines(sib)) if sib else "",
            )
            for p, sib in zip(probes, siblings, strict=True)
        ]
        ctx = [{"question": p.question, "round": round_} for p in probes]
        verdicts = self.ask("critic", prompts, [[] for _ in probes], parse_verdict, ctx)
        return [v if v is not None else (False, "the critic's answer could not be read") for v in verdicts]

    # -- Generator --------------------------------------------------------------------------------------
    def calibration_prompts(self, protocol: Protocol, n: int = 2) -> tuple[list[str], list[str]]:
        rules = "\n".join(f"- {p.question}" for p in protocol.probes)
        prompt = self.prompts["generator"].format(dimension=protocol.dimension, rules=rules, n=n)

        def parse(answer: str) -> tuple[list[str], list[str]]:
            obj = parse_json(answer)
            pos, neg = obj.get("positive"), obj.get("negative")
            if not all(
                isinstance(x, list) and x and all(isinstance(s, str) and s.strip() for s in x) for x in (pos, neg)
            ):
                raise ValueError('expected {"positive": ["..."], "negative": ["..."]} with non-empty prompts')
            return [s.strip() for s in pos], [s.strip() for s in neg]

        out = self.ask("generator", [prompt], [[]], parse, [{"dimension": protocol.dimension}])[0]
        if out is None:
            msg = f"the Generator agent gave no usable calibration prompts for {protocol.dimension!r}"
            raise ProtocolBuildError(f"{msg}: {self.failures[-1]['error']}", self.failures)
        return out


def _option_scores(probe: Probe) -> str:
    return ", ".join(f"{o.text}: {o.score:g}" for o in probe.options)


def _rule_lines(probes: Sequence[Probe]) -> str:
    return "\n".join(f'- "{p.question}" ({_option_scores(p)})' for p in probes)


def reference_context(reference: tuple[Protocol, float] | None, dimension: str) -> str:
    """Prompt 3's ``[refcontext]``: the rules of the closest stored protocol (as the released code passes them)."""
    if reference is None:
        return ""
    protocol, cosine = reference
    return REFERENCE_NOTE.format(
        dimension=protocol.dimension, cosine=cosine, target=dimension, rules=_rule_lines(protocol.probes)
    )


def rule_to_probe(rule: Any, sub_dimension: str, *, where: str = "rule") -> Probe:
    """A Visualizer rule ({question, option_scores, weight, zoom}) as a validated probe.

    The option order is the Visualizer's; its scores must be monotone in that order (a non-monotone map is refused
    here, before the Critic sees it).
    """
    if not isinstance(rule, dict):
        raise ValueError(f"{where} must be an object")
    scores = rule.get("option_scores", rule.get("options"))
    if isinstance(scores, dict):
        options = [{"text": str(k).split("/")[-1].strip(), "score": v} for k, v in scores.items()]
    elif isinstance(scores, list):
        options = scores
    else:
        raise ValueError(f"{where}.option_scores must map option text to score")
    probe_raw = {
        "question": rule.get("question"),
        "options": options,
        "weight": rule.get("weight", 1.0),
        "sub_dimension": sub_dimension,
    }
    if isinstance(rule.get("zoom"), bool):
        probe_raw["zoom"] = rule["zoom"]
    raw = {"schema": "pace-protocol/1", "dimension": "x", "probes": [probe_raw]}
    probe = protocol_from_dict(raw, source=where).probes[0]
    values = [o.score for o in probe.options]
    diffs = [b - a for a, b in zip(values, values[1:], strict=False)]
    if not (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)):
        raise ValueError(f"{where}: scores {values} are not monotone in the order of the options")
    return probe


def build_protocol(
    backend: Backend,
    dimension: str,
    image: Image.Image | None,
    cfg: AgentConfig | None = None,
    *,
    backbone: str = "unknown",
    reference: tuple[Protocol, float] | None = None,
) -> Protocol:
    """The slow path (Algorithm 1, lines 5-17): plan, then up to ``max_rounds`` Visualizer <-> Critic rounds per
    sub-dimension. The Critic reviews each probe against the probes before it (the same answer's earlier rules and
    those already accepted) to reject duplicates. A sub-dimension still rejected after the last round keeps the
    Visualizer's revision made with the last critique, unreviewed (``on_reject=keep_last``), or is left out
    (``drop``). ``reference``: the closest stored protocol and its cosine, shown to the Visualizer as reference rules.
    """
    cfg = cfg or AgentConfig()
    agents = Agents(backend, cfg, load_prompts(cfg.prompts))
    subs = agents.plan(dimension)
    if not subs:
        raise ProtocolBuildError(
            _failure_message(dimension, "the Planner gave no usable sub-dimensions", agents.failures), agents.failures
        )
    refcontext = reference_context(reference, dimension)
    accepted: dict[str, list[Probe]] = {}
    last_proposal: dict[str, list[Probe]] = {}
    critic_log: list[dict[str, Any]] = []
    feedback = {s.name: "None. This is the first iteration." for s in subs}
    pending = list(subs)
    rounds = 0
    for round_ in range(1, cfg.max_rounds + 1):
        if not pending:
            break
        rounds = round_
        proposals = agents.visualize(
            dimension, pending, image, [feedback[s.name] for s in pending], round_, refcontext
        )
        before = [p for probes in accepted.values() for p in probes]
        flat: list[tuple[SubDimension, Probe]] = []
        siblings: list[list[Probe]] = []
        for s, probes in zip(pending, proposals, strict=True):
            if probes:
                last_proposal[s.name] = probes
            for j, p in enumerate(probes or []):
                flat.append((s, p))
                siblings.append(before + list((probes or [])[:j]))
        verdicts = agents.criticize(dimension, [p for _, p in flat], round_, siblings) if flat else []
        reasons: dict[str, list[str]] = {}
        for (sub, probe), (ok, reason) in zip(flat, verdicts, strict=True):
            critic_log.append(
                {"round": round_, "sub_dimension": sub.name, "question": probe.question, "valid": ok, "reason": reason}
            )
            if ok:
                accepted.setdefault(sub.name, []).append(probe)
            else:
                reasons.setdefault(sub.name, []).append(f"{probe.question!r} was rejected: {reason}")
        for s, probes in zip(pending, proposals, strict=True):
            if probes is None:
                reasons.setdefault(s.name, []).append("your answer was not valid JSON rules")
            feedback[s.name] = " ".join(reasons.get(s.name, [])) or feedback[s.name]
        pending = [s for s in pending if s.name not in accepted]
    if not accepted:
        raise ProtocolBuildError(
            _failure_message(dimension, f"no probe was accepted in {rounds} round(s)", agents.failures, critic_log),
            agents.failures,
        )
    unaccepted = [s.name for s in pending]
    unreviewed: list[dict[str, Any]] = []
    kept_last: dict[str, list[Probe]] = {}
    if pending and cfg.on_reject == "keep_last":  # Algorithm 1 line 14 after the last critique: q_i is kept
        revised = agents.visualize(
            dimension, pending, image, [feedback[s.name] for s in pending], rounds + 1, refcontext
        )
        for s, probes in zip(pending, revised, strict=True):
            how = "last_revision" if probes else "last_rejected"
            probes = probes or last_proposal.get(s.name)
            if probes:
                kept_last[s.name] = probes
                unreviewed += [{"sub_dimension": s.name, "question": p.question, "kept": how} for p in probes]
    probes = [p for s in subs for p in accepted.get(s.name, kept_last.get(s.name, []))]
    dropped = [name for name in unaccepted if name not in kept_last]
    if unaccepted:
        logger.warning(
            "sub-dimensions without an accepted probe after %d rounds: %s (kept unreviewed: %s; dropped: %s)",
            rounds,
            unaccepted,
            sorted(kept_last),
            dropped,
        )
    kept = [s for s in subs if s.name in accepted or s.name in kept_last]
    provenance = {
        "backbone": backbone,
        "rounds": rounds,
        "critic": critic_log,
        "failures": agents.failures,
        "on_reject": cfg.on_reject,
        "unaccepted_sub_dimensions": unaccepted,
        "unreviewed": unreviewed,
        "dropped_sub_dimensions": dropped,
    }
    if reference is not None:
        provenance["reference"] = {"dimension": reference[0].dimension, "cosine": round(float(reference[1]), 4)}
    return Protocol(dimension, probes, kept, None, provenance)


def _failure_message(
    dimension: str, what: str, failures: list[dict[str, Any]], critic: list[dict[str, Any]] | None = None
) -> str:
    lines = [f"the agents could not build a protocol for {dimension!r}: {what}."]
    for f in failures[:3]:
        raw = (f["raw"][-1] if f.get("raw") else "")[:160].replace("\n", " ")
        lines.append(f"  {f['agent']}: {f['error']} (last answer: {raw!r})")
    for c in (critic or [])[-3:]:
        lines.append(f"  critic rejected {c['question']!r}: {c['reason']}")
    lines.append(
        "The model may be too weak to write protocols: use a stronger backbone (e.g. Qwen2.5-VL-7B), "
        "or pass protocol=FILE (a hand-written pace-protocol JSON)."
    )
    return "\n".join(lines)
