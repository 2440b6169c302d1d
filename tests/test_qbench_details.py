"""Q-Bench+ details: lmms-eval's A1 prompt ends with its post-prompt's newline; pair questions report Table III's
per-axis accuracies (Distortion / Other, Compare / Joint); A2 reports P0 / P1 / P2 as Tables IV and V do."""

from __future__ import annotations

from pathlib import Path

import pytest

from reward.qbench.a1_perception import INSTRUCTION, Answer, format_metrics, lettered_prompt, perception_metrics
from reward.qbench.a1_questions import Question
from reward.qbench.a2_description import Description, description_metrics, format_description_table


def test_the_lmms_prompt_ends_with_lmms_evals_newline_and_the_paper_layout_does_not():
    lmms, _, _ = lettered_prompt("Which is sharper?", ("Left", "Right"), n_images=2, seed=0, index=0, layout="lmms")
    paper, _, _ = lettered_prompt("Which is sharper?", ("Left", "Right"), n_images=2, seed=0, index=0)
    assert lmms.endswith(INSTRUCTION + "\n") and paper.endswith(INSTRUCTION)
    exact, _, _ = lettered_prompt(
        "Which is sharper?", ("Left", "Right"), n_images=2, seed=0, index=0, layout="paper-exact"
    )
    assert exact == paper.removesuffix("\n" + INSTRUCTION) and exact.endswith("B. Right")  # as the paper prints it


def _answer(concern: int, right: bool) -> Answer:
    q = Question((Path("a.png"), Path("b.png")), "Q?", ("Yes", "No"), "Yes", 0, concern, 1)
    return Answer(q, ("A", "B"), [0, 1], [0.9, 0.1] if right else [0.1, 0.9], 0 if right else 1)


def test_pair_questions_report_table_iii_axes_beside_the_four_cells():
    # concern: 0 comparison-distortion, 1 comparison-other, 2 joint-distortion, 3 joint-other
    marks = {0: [True, True, False], 1: [True], 2: [False, False], 3: [True, False, False, False]}
    answers = [_answer(c, ok) for c, oks in marks.items() for ok in oks]
    pair = perception_metrics(answers)["pair"]
    assert pair["by_concern"]["comparison distortion"] == {"accuracy": 2 / 3, "n": 3}
    axes = pair["by_axis"]
    assert axes["distortion"] == {"accuracy": 2 / 5, "n": 5}  # 0 and 2: 2 right of 3 + 0 of 2
    assert axes["other"] == {"accuracy": 2 / 5, "n": 5}  # 1 and 3: 1 of 1 + 1 of 4
    assert axes["compare"] == {"accuracy": 3 / 4, "n": 4}  # 0 and 1
    assert axes["joint"] == {"accuracy": 1 / 6, "n": 6}  # 2 and 3
    table = format_metrics(perception_metrics(answers))
    assert "| distortion | other | compare | joint |" in table and "0.167 (6)" in table


def test_a2_reports_the_frequencies_of_each_score_as_the_tables_do():
    rows = [Description((Path("a.png"),), "gold", i) for i in (1, 2)]
    per_row = [
        {"completeness": 1.0, "precision": 0.5, "relevance": 2.0}
        | {"completeness_rounds": [0, 2, 1], "precision_rounds": [0, 1], "relevance_rounds": [2, 2]},
        {"completeness": 1.5, "precision": 2.0, "relevance": 1.0}
        | {"completeness_rounds": [1, 2], "precision_rounds": [2], "relevance_rounds": [1]},
    ]
    single = description_metrics(per_row, rows)["single"]
    assert single["p"]["completeness"] == pytest.approx([1 / 5, 2 / 5, 2 / 5])
    assert single["p"]["precision"] == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    assert single["p"]["relevance"] == pytest.approx([0.0, 1 / 3, 2 / 3])
    table = format_description_table({"single": single})
    assert "completeness P0/P1/P2" in table and "20.00%/40.00%/40.00%" in table
