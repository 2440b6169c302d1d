"""Flow-GRPO's math against hand computations: the SDE transition and its log-probability as the paper writes them
(Flow-GRPO, arXiv:2505.05470, eq. 9 and its Gaussian), the KL of two transitions, the clipped objective, group
advantages (ties, a group without spread, a failed item), and the gathered path over processes equal to the
single-process one where per-process statistics would differ."""

from __future__ import annotations

import math

import pytest
import torch

from rl.flow_advantages import gathered_advantages, group_advantages, round_stats
from rl.flow_rollout import seed_of
from rl.flow_sde import noise_scale, policy_loss, sde_step, transition_kl, window_start
from rl.flow_settings import Layout


def _paper_log_prob(x: list[float], v: list[float], nxt: list[float], t: float, t_next: float, a: float) -> float:
    """Eq. 9 written out element by element with floats (time t to t_next < t, dt = t - t_next > 0 as the paper's
    forward-time Euler-Maruyama step runs): mean = x - [v + s^2/(2t) (x + (1 - t) v)] dt, std = s sqrt(dt),
    s = a sqrt(t / (1 - t)); the Gaussian's log density averaged over the elements."""
    s = a * math.sqrt(t / (1 - t))
    dt = t - t_next
    std = s * math.sqrt(dt)
    total = 0.0
    for xi, vi, ni in zip(x, v, nxt, strict=True):
        mean = xi - (vi + s * s / (2 * t) * (xi + (1 - t) * vi)) * dt
        total += -((ni - mean) ** 2) / (2 * std * std) - math.log(std * math.sqrt(2 * math.pi))
    return total / len(x)


def test_the_transition_log_probability_is_the_papers_gaussian_on_hand_set_tensors():
    x = [[0.5, -1.0, 2.0, 0.25], [-0.3, 0.8, 0.0, 1.5]]
    v = [[1.0, 0.5, -0.5, 2.0], [0.2, -1.2, 0.7, 0.1]]
    nxt = [[0.1, -0.9, 2.3, -0.4], [-0.2, 1.0, -0.3, 1.4]]
    t, t_next, a = torch.tensor([0.8, 0.4]), torch.tensor([0.6, 0.1]), 0.7
    step = sde_step(
        torch.tensor(v), torch.tensor(x), t, t_next, noise_level=a, sigma_cap=0.9, next_sample=torch.tensor(nxt)
    )
    expected = [_paper_log_prob(x[i], v[i], nxt[i], float(t[i]), float(t_next[i]), a) for i in range(2)]
    assert step.log_prob.tolist() == pytest.approx(expected, abs=1e-5)
    # a latent with more dimensions averages the same way (images: channels x height x width)
    step4 = sde_step(
        torch.tensor(v).reshape(2, 1, 2, 2),
        torch.tensor(x).reshape(2, 1, 2, 2),
        t,
        t_next,
        noise_level=a,
        sigma_cap=0.9,
        next_sample=torch.tensor(nxt).reshape(2, 1, 2, 2),
    )
    assert step4.log_prob.tolist() == pytest.approx(expected, abs=1e-5)


def test_at_sigma_one_the_schedules_next_sigma_stands_in_under_the_root_as_flow_grpo_does():
    assert noise_scale(torch.tensor([1.0]), 0.7, sigma_cap=0.8).item() == pytest.approx(0.7 * math.sqrt(1 / 0.2))
    x, v = torch.ones(1, 3), torch.full((1, 3), 0.5)
    step = sde_step(v, x, torch.tensor([1.0]), torch.tensor([0.8]), noise_level=0.7, sigma_cap=0.8)
    assert torch.isfinite(step.sample).all() and torch.isfinite(step.log_prob).all()


def test_the_ode_step_is_eulers_and_has_no_log_probability():
    x, v = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0]])
    step = sde_step(v, x, torch.tensor([0.5]), torch.tensor([0.25]), noise_level=0.0, sigma_cap=0.9)
    assert step.sample.tolist() == [[1.0 - 0.125, 2.0 + 0.25]]
    assert math.isnan(step.log_prob.item())


def test_sampling_draws_its_noise_from_each_items_generator():
    x, v = torch.zeros(2, 4), torch.zeros(2, 4)
    draws = [
        sde_step(
            v,
            x,
            torch.tensor([0.5]),
            torch.tensor([0.25]),
            noise_level=1.0,
            sigma_cap=0.9,
            generators=[torch.Generator().manual_seed(s) for s in seeds],
        ).sample
        for seeds in ([1, 2], [1, 3])
    ]
    assert torch.equal(draws[0][0], draws[1][0]) and not torch.equal(draws[0][1], draws[1][1])


def test_the_kl_of_two_transitions_is_the_gaussians_kl():
    mean, ref, std = torch.tensor([[0.3, -0.1, 1.2]]), torch.tensor([[0.0, 0.4, 1.0]]), torch.tensor([[0.5]])
    exact = torch.distributions.kl_divergence(
        torch.distributions.Normal(mean, std.expand_as(mean)), torch.distributions.Normal(ref, std.expand_as(ref))
    ).mean(dim=1)
    assert transition_kl(mean, ref, std).tolist() == pytest.approx(exact.tolist(), abs=1e-6)


def test_the_clipped_objective_stops_the_gradient_outside_the_clip_range():
    log_prob = torch.tensor([0.0, 0.5, -0.5], requires_grad=True)
    adv = torch.tensor([2.0, 1.0, 1.0])
    out = policy_loss(log_prob, torch.zeros(3), adv, clip_range=0.2, advantage_clip=1.5)
    out.per_item.sum().backward()
    # item 0: ratio 1, advantage clipped to 1.5: -1.5 with gradient -1.5; item 1: ratio e^0.5 > 1.2 with A > 0:
    # clipped, no gradient; item 2: ratio e^-0.5 < 0.8 with A > 0: the unclipped term is the larger loss, kept
    assert out.per_item.tolist() == pytest.approx([-1.5, -1.2, -math.exp(-0.5)], abs=1e-6)
    assert log_prob.grad.tolist() == pytest.approx([-1.5, 0.0, -math.exp(-0.5)], abs=1e-6)
    assert out.clipped.tolist() == [False, True, True]


def test_group_advantages_by_hand_ties_zero_spread_and_a_failed_item():
    rewards = [1.0, 1.0, 4.0, None, 2.0, 2.0, 2.0, 0.5]
    groups = [0, 0, 0, 0, 1, 1, 1, 2]
    adv, usable = group_advantages(rewards, groups, scale="group")
    # group 0 (the failed item left out): mean 2, population std sqrt(2); group 1: all equal; group 2: alone
    s = math.sqrt(2) + 1e-4
    assert adv.tolist() == pytest.approx([-1 / s, -1 / s, 2 / s, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert usable.tolist() == [True, True, True, False, True, True, True, True]
    batch, _ = group_advantages(rewards, groups, scale="batch")  # the round's std over the 7 usable rewards
    values = [1.0, 1.0, 4.0, 2.0, 2.0, 2.0, 0.5]
    mean = sum(values) / 7
    std = math.sqrt(sum((r - mean) ** 2 for r in values) / 7) + 1e-4
    assert batch.tolist() == pytest.approx([-1 / std, -1 / std, 2 / std, 0.0, 0.0, 0.0, 0.0, 0.0])
    plain, _ = group_advantages(rewards, groups, scale="none")
    assert plain.tolist() == pytest.approx([-1.0, -1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    stats = round_stats(torch.tensor([math.nan if r is None else r for r in rewards]), torch.tensor(groups))
    assert (stats.groups, stats.zero_spread, stats.unusable) == (3, 2, 1)  # group 2 (one item) has no spread


def test_advantages_gathered_over_processes_equal_the_single_process_ones():
    """Two processes, each group of 4 split 2 + 2 across them: the gathered path equals one process holding every
    item, and differs from statistics each process would take over its own slice (trl's per-process rewards)."""
    rewards = torch.tensor([1.0, 2.0, 7.0, 10.0, 3.0, 3.5, 2.0, 9.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    single, _ = group_advantages(rewards.tolist(), groups, scale="group")
    slices = [torch.tensor([0, 1, 4, 5]), torch.tensor([2, 3, 6, 7])]  # process 0's items, process 1's

    def gather(local: torch.Tensor) -> torch.Tensor:  # Accelerator.gather: every process's tensor, in rank order
        return torch.cat([(rewards if local.is_floating_point() else groups)[idx] for idx in slices])

    mine = [
        gathered_advantages(rewards[idx], groups[idx], gather, rank=p, world=2, scale="group")[0]
        for p, idx in enumerate(slices)
    ]
    assert torch.cat(mine).tolist() == pytest.approx(single[torch.cat(slices)].tolist())
    per_process = [group_advantages(rewards[idx].tolist(), groups[idx], scale="group")[0] for idx in slices]
    assert torch.cat(per_process).tolist() != pytest.approx(torch.cat(mine).tolist(), abs=1e-3)  # they differ here


def test_a_round_lays_its_groups_out_over_the_processes_whatever_their_number():
    one = Layout(prompts=2, group_size=6, world=1, per_device=3)
    two = Layout(prompts=2, group_size=6, world=2, per_device=3)
    assert sum(one.batches(0), []) == sum(two.batches(0) + two.batches(1), []) == list(range(12))
    assert all(len({k // 6 for k in b}) == 1 for b in two.batches(0) + two.batches(1))  # a batch: one group
    assert "must divide trainer.num_generations=6" in Layout(2, 6, 2, 4).problem()
    assert "must be a multiple of 4 process(es)" in Layout(1, 6, 4, 3).problem()
    assert seed_of(1, "noise", 0, 3) != seed_of(1, "noise", 1, 3)


def test_a_window_lies_within_its_range():
    starts = {window_start(6, 2, (0, 4), torch.Generator().manual_seed(s)) for s in range(50)}
    assert starts == {0, 1, 2}
    with pytest.raises(ValueError, match="does not fit"):
        window_start(6, 5, (2, 6), torch.Generator())
