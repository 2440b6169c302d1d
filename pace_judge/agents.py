"""PACE's agents (§4.3, appendix A.1): Planner, Visualizer, Critic and Generator build a protocol from a dimension.

The prompts are the paper's (A.1.2) as editable defaults (``agents.prompts=FILE``, JSON or YAML: role -> template);
decoding is deterministic. JSON is read out of free-text answers (fences, prose, single quotes, trailing commas, Python
literals; nothing is executed). An answer still unusable after ``retries`` re-asks is a recorded failure with its raw
text, never a crash nor a silently empty protocol: :class:`ProtocolBuildError` carries every failure.

    >>> parse_json("Sure! ```json\\n{'rules': [{'q': 'Crisp?', 'w': 1.0,},],}\\n``` Hope this helps.")
    {'rules': [{'q': 'Crisp?', 'w': 1.0}]}
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from omegaconf import OmegaConf
from PIL import Image

from pace_judge.protocol import Probe, Protocol, SubDimension, protocol_from_dict
from reward.core.config import RETRIES, TOKENS
from reward.core.errors import UserError
from reward.rewards.levels import dimension_words

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
RETRY_NOTE = "\n\nYour previous answer could not be used ({error}). Reply again with the requested format only."
ON_REJECT = ("keep_last", "drop")
_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)```", re.S)
_CLOSE = {"{": "}", "[": "]"}


class ProtocolBuildError(RuntimeError):
    """The agents could not build a valid protocol; ``failures`` holds each failed answer with its raw text."""

    def __init__(self, message: str, failures: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass
class AgentConfig:
    max_rounds: int = field(
        default=3,
        metadata={"help": "Visualizer <-> Critic rounds per sub-dimension (paper: at most three)", "range": (1, 100)},
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
            "help": "a sub-dimension whose probe is still rejected after max_rounds: keep_last keeps the "
            "Visualizer's revision after the last critique, unreviewed (Algorithm 1); drop leaves the "
            "sub-dimension out (§4.3, A.6, the released code)",
            "choices": ON_REJECT,
        },
    )

    def __post_init__(self) -> None:
        if self.min_sub > self.max_sub:
            raise UserError(f"agents.min_sub={self.min_sub} is above agents.max_sub={self.max_sub}")


def _literal(span: str) -> Any:
    """``span`` read as JSON (trailing commas allowed) or as a Python literal; ``ValueError`` when neither reads it."""
    for attempt in (span, re.sub(r",\s*([}\]])", r"\1", span)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            pass
    pythonish = re.sub(r"\b(true|false|null)\b", lambda m: {"true": "True", "false": "False"}.get(m[1], "None"), span)
    for attempt in (span, pythonish):
        try:
            return ast.literal_eval(attempt)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    raise ValueError("no valid JSON object")


def parse_json(text: str) -> Any:
    """The first JSON object or list in ``text`` (fenced blocks first): the shortest readable span from each opening
    bracket; ``ValueError`` when there is none."""
    text = text or ""
    for block in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        for i in [i for i, ch in enumerate(block) if ch in _CLOSE]:
            for j in [j for j in range(i + 1, len(block)) if block[j] == _CLOSE[block[i]]]:
                try:
                    return _literal(block[i : j + 1])
                except ValueError:
                    pass
    raise ValueError("the answer holds no JSON object")


def parse_verdict(text: str) -> tuple[bool, str]:
    """The Critic's ``Yes. Reason: ...`` / ``No. Reason: ...`` (also VALID/INVALID or {"valid": ..., "reason"})."""
    stripped = (text or "").strip()
    m = re.match(r"^[\s*_#>`-]*(yes|no|valid|invalid)\b[*_`]*(?:[.:,!]\s*|\s+|$)(.*)$", stripped, re.I | re.S)
    if m:
        reason = re.sub(r"^reason\s*:\s*", "", m.group(2).strip(), flags=re.I)
        return m.group(1).lower() in ("yes", "valid"), reason.strip() or "no reason given"
    try:
        obj = parse_json(stripped)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("valid"), bool):
        return obj["valid"], str(obj.get("reason", "no reason given"))
    raise ValueError("the verdict starts with neither Yes nor No")


def _scores(probe: Probe) -> str:
    return ", ".join(f"{o.text}: {o.score:g}" for o in probe.options)


def _rules(probes: Sequence[Probe]) -> str:
    return "\n".join(f'- "{p.question}" ({_scores(p)})' for p in probes)


def rule_to_probe(rule: Any, sub_dimension: str, *, where: str = "rule") -> Probe:
    """A Visualizer rule ({question, option_scores, weight, zoom}) as a validated probe whose scores are monotone in
    the Visualizer's order of the options (a non-monotone map is refused before the Critic sees it)."""
    if not isinstance(rule, dict):
        raise ValueError(f"{where} must be an object")
    scores = rule.get("option_scores", rule.get("options"))
    if isinstance(scores, dict):
        scores = [{"text": str(k).split("/")[-1].strip(), "score": v} for k, v in scores.items()]
    elif not isinstance(scores, list):
        raise ValueError(f"{where}.option_scores must map option text to score")
    raw = {"question": rule.get("question"), "options": scores, "weight": rule.get("weight", 1.0)}
    raw |= {"sub_dimension": sub_dimension} | ({"zoom": rule["zoom"]} if isinstance(rule.get("zoom"), bool) else {})
    probe = protocol_from_dict({"schema": "pace-protocol/1", "dimension": "x", "probes": [raw]}, source=where).probes[
        0
    ]
    diffs = [b.score - a.score for a, b in zip(probe.options, probe.options[1:], strict=False)]
    if not (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)):
        raise ValueError(
            f"{where}: scores {[o.score for o in probe.options]} are not monotone in the order of the options"
        )
    return probe


def _parse_rules(sub: str, answer: str) -> list[Probe]:
    obj = parse_json(answer)
    rules = obj.get("rules") if isinstance(obj, dict) else obj
    if not isinstance(rules, list) or not rules:
        raise ValueError('expected {"rules": [...]} with at least one rule')
    return [rule_to_probe(r, sub, where=f"rules[{i}]") for i, r in enumerate(rules)]


@dataclass
class Agents:
    """The four agents sharing one backend (the paper uses one backbone with different prompts)."""

    backend: Any  # reward.vlm.VLM, reward.vlm.server.OpenAIBackend or a test double with chat()
    cfg: AgentConfig = field(default_factory=AgentConfig)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.prompts = dict(PROMPTS)
        if self.cfg.prompts:
            try:  # JSON or YAML
                custom = OmegaConf.to_container(OmegaConf.load(self.cfg.prompts))
            except Exception as err:  # noqa: BLE001 - unreadable, not UTF-8, neither JSON nor YAML: named
                said = " ".join(str(err).split())
                raise UserError(f"agents.prompts={self.cfg.prompts}: unreadable as JSON or YAML ({said})") from None
            unknown = sorted(set(custom) - set(PROMPTS)) if isinstance(custom, dict) else ["(not a mapping)"]
            if unknown:
                raise UserError(f"agents.prompts={self.cfg.prompts}: unknown roles {unknown}; use {sorted(PROMPTS)}")
            self.prompts.update(custom)  # type: ignore[arg-type]

    def ask(
        self,
        role: str,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        parse: Callable[[str], Any] | list[Callable[[str], Any]],
        context: Sequence[dict[str, Any]],
    ) -> list[Any]:
        """Ask ``prompts`` in one batch and parse each answer (one parser, or one per prompt), re-asking the unusable
        ones; ``None`` where every try failed (recorded in ``failures``)."""
        parsers = parse if isinstance(parse, list) else [parse] * len(prompts)
        results: list[Any] = [None] * len(prompts)
        pending, errors = list(range(len(prompts))), {}
        raws: dict[int, list[str]] = {i: [] for i in pending}
        chat = getattr(self.backend, "chat", None) or (lambda p, g, **kw: self.backend.generate(g, p, **kw))
        for _ in range(self.cfg.retries + 1):
            if not pending:
                break
            asked = [prompts[i] + (RETRY_NOTE.format(error=errors[i]) if i in errors else "") for i in pending]
            answers = chat(asked, [images[i] for i in pending], max_new_tokens=self.cfg.max_new_tokens)
            still = []
            for i, answer in zip(pending, answers, strict=True):
                raws[i].append(answer)
                try:
                    results[i] = parsers[i](answer)
                except (ValueError, TypeError, KeyError) as err:
                    errors[i] = " ".join(str(err).split())[:400]
                    still.append(i)
            pending = still
        for i in pending:
            self.failures.append({"agent": role, **context[i], "error": errors[i], "raw": raws[i]})
            logger.warning("%s agent: unusable answer after %d tries (%s)", role, self.cfg.retries + 1, errors[i])
        return results

    def plan(self, dimension: str) -> list[SubDimension]:
        c = self.cfg
        prompt = self.prompts["planner"].format(
            dimension=dimension_words(dimension), min_sub=c.min_sub, max_sub=c.max_sub
        )

        def parse(answer: str) -> list[SubDimension]:
            obj = parse_json(answer)
            items = obj.get("subdimensions", obj.get("sub_dimensions")) if isinstance(obj, dict) else obj
            if not isinstance(items, list):
                raise ValueError('expected {"subdimensions": [...]}')
            subs = []
            for it in items:
                name = it.get("name") if isinstance(it, dict) else it
                if not isinstance(name, str) or not name.strip():
                    raise ValueError(f"sub-dimension {it!r} has no name")
                subs.append(
                    SubDimension(name.strip(), str(it.get("description", "")).strip() if isinstance(it, dict) else "")
                )
            if len({s.name.lower() for s in subs}) != len(subs):
                raise ValueError("sub-dimensions repeat a name")
            if not c.min_sub <= len(subs) <= c.max_sub:
                raise ValueError(f"{len(subs)} sub-dimensions; give {c.min_sub} to {c.max_sub}")
            return subs

        return self.ask("planner", [prompt], [[]], parse, [{"dimension": dimension}])[0] or []

    def visualize(
        self,
        dimension: str,
        subs: Sequence[SubDimension],
        *,
        image: Image.Image | None,
        feedback: dict[str, str],
        round_: int,
        refcontext: str,
    ) -> list[list[Probe] | None]:
        prompts = [
            self.prompts["visualizer"].format(
                dimension=dimension_words(dimension),
                sub_dimension=s.name,
                description=s.description or s.name,
                feedback=feedback[s.name],
                max_rules=self.cfg.rules_per_sub,
                refcontext=refcontext,
            )
            for s in subs
        ]
        images = [[image] if image is not None else [] for _ in subs]
        parsers = [partial(_parse_rules, s.name) for s in subs]
        return self.ask(
            "visualizer", prompts, images, parsers, [{"sub_dimension": s.name, "round": round_} for s in subs]
        )

    def criticize(
        self, dimension: str, probes: Sequence[Probe], round_: int, siblings: Sequence[Sequence[Probe]]
    ) -> list[tuple[bool, str]]:
        """One verdict per probe, each reviewed against ``siblings[i]``, the rules before it (§4.3: "redundant")."""
        prompts = [
            self.prompts["critic"].format(
                dimension=dimension_words(dimension),
                question=p.question,
                option_scores=_scores(p),
                context=SIBLINGS_NOTE.format(rules=_rules(sib)) if sib else "",
            )
            for p, sib in zip(probes, siblings, strict=True)
        ]
        ctx = [{"question": p.question, "round": round_} for p in probes]
        verdicts = self.ask("critic", prompts, [[] for _ in probes], parse_verdict, ctx)
        return [v if v is not None else (False, "the critic's answer could not be read") for v in verdicts]

    def calibration_prompts(self, protocol: Protocol, n: int = 2) -> tuple[list[str], list[str]]:
        """The Generator's ``n`` positive and ``n`` negative text-to-image prompts for calibration."""
        rules = "\n".join(f"- {p.question}" for p in protocol.probes)
        prompt = self.prompts["generator"].format(dimension=dimension_words(protocol.dimension), rules=rules, n=n)

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


def build_protocol(
    backend: Any,
    dimension: str,
    image: Image.Image | None,
    cfg: AgentConfig | None = None,
    *,
    backbone: str = "unknown",
    reference: tuple[Protocol, float] | None = None,
) -> Protocol:
    """The slow path (Algorithm 1, lines 5-17): plan, then the Visualizer <-> Critic rounds (:func:`_review`). A
    sub-dimension still rejected keeps the Visualizer's revision made with the last critique, unreviewed
    (``on_reject=keep_last``), or is left out (``drop``). ``reference``: the closest stored protocol and its cosine,
    shown to the Visualizer as reference rules."""
    cfg = cfg or AgentConfig()
    agents = Agents(backend, cfg)
    subs = agents.plan(dimension)
    if not subs:
        what = "the Planner gave no usable sub-dimensions"
        raise ProtocolBuildError(_failure_message(dimension, what, agents.failures), agents.failures)
    refcontext = ""
    if reference is not None:  # appendix A.1.2's [refcontext]: the closest stored protocol's rules
        stored, cosine = reference
        refcontext = REFERENCE_NOTE.format(
            dimension=dimension_words(stored.dimension),
            cosine=cosine,
            target=dimension_words(dimension),
            rules=_rules(stored.probes),
        )
    visualize = partial(agents.visualize, dimension, image=image, refcontext=refcontext)
    accepted, pending, feedback, last_proposal, critic_log, rounds = _review(agents, dimension, subs, visualize)
    if not accepted:
        what = f"no probe was accepted in {rounds} round(s)"
        raise ProtocolBuildError(_failure_message(dimension, what, agents.failures, critic_log), agents.failures)
    unaccepted = [s.name for s in pending]
    unreviewed: list[dict[str, Any]] = []
    kept_last: dict[str, list[Probe]] = {}
    if pending and cfg.on_reject == "keep_last":  # Algorithm 1 line 14 after the last critique: q_i is kept
        for s, probes in zip(pending, visualize(pending, feedback=feedback, round_=rounds + 1), strict=True):
            how = "last_revision" if probes else "last_rejected"
            if probes := probes or last_proposal.get(s.name):
                kept_last[s.name] = probes
                unreviewed += [{"sub_dimension": s.name, "question": p.question, "kept": how} for p in probes]
    dropped = [name for name in unaccepted if name not in kept_last]
    if unaccepted:
        said = "sub-dimensions without an accepted probe after %d rounds: %s (kept unreviewed: %s; dropped: %s)"
        logger.warning(said, rounds, unaccepted, sorted(kept_last), dropped)
    provenance = {"backbone": backbone, "rounds": rounds, "critic": critic_log, "failures": agents.failures}
    provenance |= {"on_reject": cfg.on_reject, "unaccepted_sub_dimensions": unaccepted, "unreviewed": unreviewed}
    provenance["dropped_sub_dimensions"] = dropped
    if reference is not None:
        provenance["reference"] = {"dimension": reference[0].dimension, "cosine": round(float(reference[1]), 4)}
    probes = [p for s in subs for p in accepted.get(s.name, kept_last.get(s.name, []))]
    kept = [s for s in subs if s.name in accepted or s.name in kept_last]
    return Protocol(dimension, probes, kept, None, provenance)


def _review(agents: Agents, dimension: str, subs: list[SubDimension], visualize: Callable[..., Any]) -> tuple:
    """Up to ``max_rounds`` Visualizer <-> Critic rounds per sub-dimension, the Critic reviewing each probe against
    the probes before it (the same answer's earlier rules and those accepted) to reject duplicates: ``(accepted,
    still pending, feedback, each one's last proposal, the critic's log, rounds run)``."""
    accepted: dict[str, list[Probe]] = {}
    last_proposal: dict[str, list[Probe]] = {}
    critic_log: list[dict[str, Any]] = []
    feedback = {s.name: "None. This is the first iteration." for s in subs}
    pending, rounds = list(subs), 0
    for round_ in range(1, agents.cfg.max_rounds + 1):
        if not pending:
            break
        rounds = round_
        proposals = visualize(pending, feedback=feedback, round_=round_)
        before = [p for probes in accepted.values() for p in probes]
        flat: list[tuple[SubDimension, Probe]] = []
        siblings: list[list[Probe]] = []
        for s, probes in zip(pending, proposals, strict=True):
            if probes:
                last_proposal[s.name] = probes
            for j, p in enumerate(probes or []):
                flat.append((s, p))
                siblings.append(before + probes[:j])  # type: ignore[index]
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
    return accepted, pending, feedback, last_proposal, critic_log, rounds


def _failure_message(
    dimension: str, what: str, failures: list[dict[str, Any]], critic: list[dict[str, Any]] = ()
) -> str:
    lines = [f"the agents could not build a protocol for {dimension!r}: {what}."]
    for f in failures[:3]:
        raw = (f["raw"][-1] if f.get("raw") else "")[:160].replace("\n", " ")
        lines.append(f"  {f['agent']}: {f['error']} (last answer: {raw!r})")
    lines += [f"  critic rejected {c['question']!r}: {c['reason']}" for c in critic[-3:]]
    lines.append(
        "The model may be too weak to write protocols: use a stronger backbone (e.g. Qwen2.5-VL-7B), "
        "or pass protocol=FILE (a hand-written pace-protocol JSON)."
    )
    return "\n".join(lines)
