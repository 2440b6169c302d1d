"""PACE Track 1: uniform probe weights by default (eq. 6, w_r = 1/N), the agents' weights as an option, and the
option lettering (best-first, reversed, seeded shuffle) recorded with each score."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from PIL import Image

from pace_judge.protocol import Option, Probe, Protocol
from pace_judge.tracks import LETTERS, DualTrackScorer
from reward.vlm import OptionLogProbs, OptionQuery

YES_NO = (Option("Yes", 5.0), Option("No", 1.0))


class LetterBackend:
    """Answers every query with certainty: the letter of the option text ``pick[question]``."""

    def __init__(self, pick: dict[str, str]) -> None:
        self.pick = pick
        self.asked: list[str] = []

    def option_logprobs(
        self, images: Sequence[Sequence[Image.Image]], queries: Sequence[OptionQuery], *, system: str | None = None
    ) -> OptionLogProbs:
        out = torch.full((len(images), len(queries), 5), -30.0)
        for q, query in enumerate(queries):
            self.asked.append(query.question)
            lines = query.question.split("\n")
            chosen = next(line for line in lines if line.endswith(". " + self.pick[lines[0]]))
            out[:, q, LETTERS.index(chosen[0])] = 0.0
        return OptionLogProbs(out)


def _protocol() -> Protocol:
    return Protocol(
        dimension="sharpness",
        probes=[Probe("Sharp edges?", YES_NO, 3.0), Probe("Clean texture?", YES_NO, 0.5)],
    )


def _judge(**kw):
    backend = LetterBackend({"Sharp edges?": "Yes", "Clean texture?": "No"})  # E = 5 and E = 1
    scorer = DualTrackScorer(_protocol(), backend, **kw)
    return scorer.judge([Image.new("RGB", (8, 8))]), backend


def test_alpha1_weighs_the_probes_uniformly_by_default():
    """(5 + 1) / 2 = 3 on 1-5: alpha1 = 0.5; the agents' weights 3.0 and 0.5 would give (15.5 / 3.5 - 1) / 4."""
    judged, _ = _judge()
    assert judged.alpha1[0].item() == pytest.approx(0.5, abs=1e-6)
    assert judged.explanations[0]["probe_weights"] == "uniform"
    assert [p["weight"] for p in judged.explanations[0]["probes"]] == [1.0, 1.0]


def test_the_agents_weights_are_an_option():
    judged, _ = _judge(probe_weights="agent")
    assert judged.alpha1[0].item() == pytest.approx((15.5 / 3.5 - 1.0) / 4.0, abs=1e-6)  # 0.857
    assert judged.explanations[0]["probe_weights"] == "agent"


@pytest.mark.parametrize(
    ("lettering", "first"), [("best-first", "A. Yes"), ("reversed", "A. No")], ids=["best-first", "reversed"]
)
def test_the_lettering_orders_the_options_and_the_score_does_not_depend_on_it(lettering, first):
    judged, backend = _judge(lettering=lettering)
    assert all(q.split("\n")[1] == first for q in backend.asked)
    assert judged.alpha1[0].item() == pytest.approx(0.5, abs=1e-6)
    letters = judged.explanations[0]["probes"][0]["letters"]
    assert letters["A"] == first[3:] and judged.explanations[0]["lettering"] == lettering


def test_a_shuffled_lettering_is_seeded_and_recorded():
    protocol = Protocol(
        "sharpness",
        [Probe(f"Q{i}?", (Option("a", 5.0), Option("b", 4.0), Option("c", 2.0), Option("d", 1.0))) for i in range(6)],
    )
    backend = LetterBackend({f"Q{i}?": "a" for i in range(6)})
    orders = []
    for seed in (3, 3, 4):
        scorer = DualTrackScorer(protocol, backend, lettering="shuffled", lettering_seed=seed)
        judged = scorer.judge([Image.new("RGB", (8, 8))])
        assert judged.alpha1[0].item() == pytest.approx(1.0, abs=1e-6)  # always the best option, wherever it is
        assert judged.explanations[0]["lettering"] == f"shuffled (seed {seed})"
        orders.append([tuple(p["letters"].values()) for p in judged.explanations[0]["probes"]])
    assert orders[0] == orders[1] != orders[2]
    assert any(order[0] != "a" for order in orders[0])  # the best option is not always lettered A


def test_unknown_weights_or_lettering_are_refused_with_the_choices():
    from pace_judge.config import PaceConfig, validate

    with pytest.raises(ValueError) as err:
        validate(PaceConfig(model="m", protocol="p.json", probe_weights="visualizer", lettering="random"))
    assert "probe_weights='visualizer': choose one of uniform, agent" in str(err.value)
    assert "lettering='random': choose one of best-first, reversed, shuffled" in str(err.value)
