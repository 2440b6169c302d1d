"""What reaches trl is a finite score in the reward's range or ``None``, counted: ±inf and NaN, a score outside the
declared ``score_range``, an empty image list; a reward returning the wrong number of scores, a degenerate range and
``rerank``'s mistyped arguments are refused with one message naming what is wrong."""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from reward import RewardOutput, images_from_column, rerank, trl_reward_func, trl_reward_funcs
from reward.core.errors import UserError
from reward.integrations.reward_set import RewardSet, named_reward

IMAGE = Image.new("RGB", (8, 8), (90, 90, 90))


class Fixed:
    """Returns the given scores, the first ``len(images)`` of them (or all of them: a wrong count)."""

    def __init__(self, scores: list[float], *, exact: bool = True) -> None:
        self.scores, self.exact = scores, exact

    def score(self, images, prompts=None) -> RewardOutput:
        values = self.scores[: len(images)] if self.exact else self.scores
        return RewardOutput(scores=torch.tensor(values, dtype=torch.float32))


def _call(f, n: int, column=None):
    return f(prompts=["p"] * n, completions=[f"c{i}" for i in range(n)], image=column or [IMAGE] * n)


@pytest.mark.parametrize("bad", [-math.inf, math.inf, math.nan])
def test_a_non_finite_score_reaches_trl_as_none_and_is_counted_as_failed(bad):
    f = trl_reward_func(Fixed([bad, 2.0, 3.0]), images_from_column(), name="r", higher_is_better=True)
    assert _call(f, 3) == [None, 2.0, 3.0]
    assert f.last_failed == 1
    assert f.scoring.tally.as_dict()["failed"] == {"r": 1} and f.scoring.tally.unusable == 1


@pytest.mark.parametrize("normalize", [True, False])
def test_a_score_outside_the_declared_range_is_none_and_counted_rounding_is_clipped(normalize, caplog):
    reward = Fixed([7.0, 0.5, 5.0000001, 1.0, 3.0])
    f = trl_reward_func(
        reward, images_from_column(), name="r", higher_is_better=True, score_range=(1, 5), normalize=normalize
    )
    logged = {}
    values = f(
        prompts=["p"] * 5,
        completions=list("abcde"),
        image=[IMAGE] * 5,
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert values == ([None, None, 1.0, 0.0, 0.5] if normalize else [None, None, 5.0, 1.0, 3.0])
    assert f.last_failed == 2 and logged["r/out_of_range"] == 2.0 and logged["r/failed"] == 2.0
    assert "outside its score_range (1.0, 5.0) (e.g. 7.0)" in caplog.text


def test_an_empty_image_list_in_a_row_is_a_failed_render_not_an_index_error():
    f = trl_reward_func(Fixed([4.0, 4.0, 4.0]), images_from_column("images"), name="r", higher_is_better=True)
    values = f(prompts=["p"] * 3, completions=list("abc"), images=[[], [IMAGE], [IMAGE, IMAGE]])
    assert values == [None, 4.0, 4.0]
    assert f.scoring.tally.render_failed == 1 and f.scoring.tally.unusable == 1
    second = images_from_column("images", index=1)
    assert second(["p", "q"], ["c", "d"], images=[[IMAGE], [IMAGE, "B"]]) == [None, "B"]


@pytest.mark.parametrize("returned", [[1.0], [1.0, 2.0, 3.0, 4.0], [[1.0], [2.0], [3.0]]])
def test_a_reward_returning_the_wrong_number_of_scores_is_named_with_the_counts(returned):
    f = trl_reward_func(Fixed(returned, exact=False), images_from_column(), name="odd", higher_is_better=True)
    with pytest.raises(UserError, match=r"^reward odd: score returned .* for 3 images; a reward returns one score"):
        _call(f, 3)


@pytest.mark.parametrize("span", [(1, 1), (5, 1), (math.nan, 1), ("a", "b"), "15", (1,)])
def test_a_degenerate_score_range_is_refused_when_the_function_is_built(span):
    with pytest.raises(ValueError, match=r"^r: score_range="):
        trl_reward_func(Fixed([1.0]), images_from_column(), name="r", higher_is_better=True, score_range=span)


def test_normalising_needs_a_finite_range_and_a_set_refuses_a_degenerate_one_too():
    with pytest.raises(ValueError, match="normalize=True needs a finite score_range"):
        named_reward(Fixed([1.0]), name="r", higher_is_better=True, score_range=(0, math.inf), normalize=True)
    with pytest.raises(ValueError, match=r"score_range=\(2, 2\)"):
        trl_reward_funcs([named_reward(Fixed([1.0]), name="r", higher_is_better=True, score_range=(2, 2))], print)
    ok = named_reward(Fixed([1.0]), name="r", higher_is_better=False, score_range=(0, 4), normalize=True)
    assert RewardSet([ok]).to_unit(ok, 1.0) == 0.75


class Ascending:
    """Scores images 0, 1, 2, ... in order (the last given is the best)."""

    def score(self, images, prompts=None) -> RewardOutput:
        return RewardOutput(scores=torch.arange(len(images), dtype=torch.float32))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 1.5}, r"k=1\.5 must be a whole number"),
        ({"k": "2"}, r"k='2' must be a whole number"),
        ({"k": True}, r"k=True must be a whole number"),
        ({"prompts": "abc"}, r"prompts='abc' must be a list of strings, one per image"),
        ({"prompts": [1, 2, 3]}, r"prompts must be strings"),
    ],
)
def test_rerank_refuses_mistyped_k_and_prompts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rerank([IMAGE] * 3, Ascending(), higher_is_better=True, **kwargs)
    assert rerank([IMAGE] * 3, Ascending(), higher_is_better=True, k=2, prompts=["a", "b", "c"]).indices == [2, 1]


def test_rerank_ranks_an_infinite_score_as_unscored_not_as_the_best():
    best = rerank([IMAGE] * 3, Fixed([math.inf, 1.0, 2.0]), higher_is_better=True, k=2)
    assert best.indices == [2, 1] and math.isnan(best.all_scores[0])
