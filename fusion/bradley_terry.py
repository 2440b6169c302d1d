"""Bradley–Terry fusion of dimension scores (SA-IQA §3.2.2, eq. 2–3), with ties.

Dimension scores ``x`` fuse into ``S = x·w``; a pair ``(A, B)`` is modelled from ``s = (x_A - x_B)·w`` (no
intercept). Ties, which eq. 2 has no outcome for, follow ``tie_model``: ``davidson`` (default, ours; Davidson 1970,
``π = exp(S)``, ``ν`` fitted with ``w``)::

    P(A) = πA / (πA + πB + ν√(πA πB)),  P(B) = πB / (...),  P(tie) = ν√(πA πB) / (...)

without ties ``ν = 0`` and ``P(A > B) = sigmoid(s)``, eq. 2 exactly; ``zero``: eq. 2 literally, a tie is ``y = 0`` (a
win of B, so the weights depend on which image of a tied pair is listed first); ``half``: a tie is ``y = 0.5`` (eq. 2
averaged over both orders); ``drop``: ties left out. The mean negative log-likelihood plus ``l2 / 2 · ||w||²`` is
minimised by L-BFGS-B with analytic gradients, each weight boxed to ``[-max_abs_weight, max_abs_weight]`` (``[0,
...]`` with ``nonneg``) so that degenerate data (separable pairs, all ties) still gives finite numbers.

>>> import numpy as np
>>> x_a = np.array([[4.0, 2.0], [1.0, 3.0], [5.0, 5.0], [2.0, 1.0]])
>>> x_b = np.array([[2.0, 2.0], [3.0, 1.0], [1.0, 4.0], [2.0, 2.0]])
>>> fit = fit_bradley_terry(x_a, x_b, ["a", "b", "a", "tie"], dimensions=["layout", "lighting"], l2=0.1)
>>> fit.weights.round(3).tolist(), round(fit.nu, 3)
([1.684, -0.35], 1.882)
>>> s = fit.score(x_a[:1]) - fit.score(x_b[:1])  # P(A wins), P(B wins), P(tie) of the first pair
>>> [round(float(np.exp(pair_log_likelihood(s, np.array([k]), "davidson", fit.nu))[0]), 3) for k in range(3)]
[0.723, 0.025, 0.252]
>>> fit.score(np.array([[3.0, 4.0]])).round(3).tolist()  # S = x·w
[3.654]
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from reward.data.labels import LABEL_A, LABEL_B, LABEL_TIE, label_codes  # noqa: F401 (LABEL_B re-exported)

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

logger = logging.getLogger(__name__)

TIE_MODELS = ("davidson", "zero", "half", "drop")
TIE_TARGET: dict[str, float | None] = {"zero": 0.0, "half": 0.5, "drop": None}  # eq. 2's y of a tie; None: left out
THETA_BOUND = 20.0  # |log ν| ≤ 20 keeps everything finite when all pairs (or none) are ties


@dataclass(frozen=True)
class FitOptions:
    """``tie_model`` (see the module), ``l2`` (added to the *mean* NLL; 0: plain maximum likelihood), ``nonneg``
    (every weight >= 0), ``max_abs_weight`` (box bound on each ``|w_j|``), and L-BFGS-B's ``max_iter`` / ``gtol``."""

    tie_model: str = "davidson"
    l2: float = 1e-4
    nonneg: bool = False
    max_abs_weight: float = 100.0
    max_iter: int = 2000
    gtol: float = 1e-9

    def __post_init__(self) -> None:
        checks = {
            "tie_model": (self.tie_model in TIE_MODELS, f"one of {list(TIE_MODELS)}"),
            "l2": (np.isfinite(self.l2) and self.l2 >= 0, "a finite number >= 0"),
            "max_abs_weight": (np.isfinite(self.max_abs_weight) and self.max_abs_weight > 0, "a finite number > 0"),
            "max_iter": (self.max_iter >= 1, ">= 1"),
        }
        problems = [f"{k}={getattr(self, k)!r} must be {expected}" for k, (ok, expected) in checks.items() if not ok]
        if problems:
            raise ValueError("Invalid Bradley–Terry fit options: " + "; ".join(problems) + ".")


@dataclass(frozen=True, eq=False)
class BTFit:
    """A fitted fusion: ``weights`` [d] (``S = x·w``), Davidson's ``nu`` (0 under the other tie models or without
    ties), the ``dimensions``' names, the ``options``, the pairs and ties used, the training log-likelihood (without
    the penalty), whether L-BFGS-B converged and the degenerate-data ``warnings`` logged."""

    weights: np.ndarray
    nu: float
    dimensions: tuple[str, ...]
    options: FitOptions
    n_pairs: int
    n_ties: int
    log_likelihood: float
    converged: bool
    n_iter: int
    warnings: tuple[str, ...] = ()

    def score(self, x: np.ndarray) -> np.ndarray:
        """Fused scores ``S = x·w`` for ``x`` [n, d] (eq. 3)."""
        return np.asarray(x, dtype=np.float64) @ self.weights


def pairwise_accuracy(s: np.ndarray, codes: np.ndarray) -> float:
    """Fraction of non-tie pairs ordered right by ``s = S_A - S_B`` (``s == 0`` counts one half); ``nan`` without
    a non-tie pair (:func:`reward.eval.metrics.pairwise_accuracy` on score differences)."""
    from reward.eval.metrics import pairwise_accuracy as metric_pairwise_accuracy  # SciPy: when a fit is measured

    s = np.asarray(s, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no decisive pair: nan, as documented
        return metric_pairwise_accuracy(s, np.zeros_like(s), codes)


def pair_log_likelihood(s: np.ndarray, codes: np.ndarray, tie_model: str, nu: float) -> np.ndarray:
    """Per-pair log-likelihood of ``codes`` given ``s`` (the optimiser has a fused version).

    >>> pair_log_likelihood(np.array([0.0, 0.0]), np.array([LABEL_A, LABEL_TIE]), "drop", 0.0).round(4).tolist()
    [-0.6931, 0.0]
    """
    s = np.asarray(s, dtype=np.float64)
    if tie_model == "davidson" and nu > 0:  # log P = (+h | -h | log ν) - log(e^h + e^-h + ν), h = s/2, stably
        h = 0.5 * s
        a = np.abs(h)
        log_z = a + np.log1p(np.exp(-2.0 * a) + nu * np.exp(-a))
        return np.choose(codes, [h, -h, np.full_like(h, np.log(nu))]) - log_z
    target = TIE_TARGET.get(tie_model, 0.5)  # davidson without ties in the data: plain Bradley–Terry
    y = np.choose(codes, [1.0, 0.0, 0.0 if target is None else target])
    ll = y * s - np.logaddexp(0.0, s)
    return np.where(codes == LABEL_TIE, 0.0, ll) if target is None else ll


# The products use einsum, not BLAS: single-threaded, so bit-for-bit reproducible whatever the BLAS thread count,
# and free of BLAS thread start-up in the bootstrap's many small fits.


def _bt_objective(v, dx, y, c, n_total, l2_scaled):
    """Mean BT NLL (eq. 2; a tie's y is 0 or 0.5) + penalty, and its gradient, in scaled coordinates."""
    s = np.einsum("ij,j->i", dx, v)
    e = np.exp(-np.abs(s))
    ll = y * s - np.maximum(s, 0.0) - np.log1p(e)
    r = y - np.where(s >= 0, 1.0, e) / (1.0 + e)
    if c is not None:
        ll, r = ll * c, r * c
    loss = -ll.sum() / n_total + 0.5 * np.dot(l2_scaled * v, v)
    return loss, -np.einsum("ij,i->j", dx, r) / n_total + l2_scaled * v


def _davidson_objective(params, dx, sgn, tie, c, n_total, l2_scaled):
    """Mean Davidson NLL + penalty and gradient; ``params = [v..., θ]``, ``sgn`` is +1/-1/0 for A/B/tie."""
    v, theta = params[:-1], params[-1]
    h = 0.5 * np.einsum("ij,j->i", dx, v)
    a = np.abs(h)
    small = np.exp(-2.0 * a)
    tie_term = np.exp(theta - a)
    z = 1.0 + small + tie_term
    ll = sgn * h + tie * theta - a - np.log(z)
    d_s = 0.5 * (sgn - np.sign(h) * (1.0 - small) / z)  # d ll / d s; P(A) - P(B) = sign(h) (1 - small) / z
    d_theta = tie - tie_term / z
    if c is not None:
        ll, d_s, d_theta = ll * c, d_s * c, d_theta * c
    loss = -ll.sum() / n_total + 0.5 * np.dot(l2_scaled * v, v)
    grad = np.empty_like(params)
    grad[:-1] = -np.einsum("ij,i->j", dx, d_s) / n_total + l2_scaled * v
    grad[-1] = -d_theta.sum() / n_total
    return loss, grad


def fit_differences(
    dx: np.ndarray,
    codes: np.ndarray,
    options: FitOptions,
    sample_weight: np.ndarray | None = None,
    init: tuple[np.ndarray, float] | None = None,
) -> tuple[np.ndarray, float, OptimizeResult]:
    """``(w, ν, L-BFGS-B's result)`` minimising the penalised mean NLL for differences ``dx`` [n, d] and label codes,
    started from ``init = (w, ν)``. No checks, no logging: the building block of the fit and of the bootstrap."""
    from scipy.optimize import OptimizeResult, minimize  # when a fit runs, not when fit's settings are read

    n, d = dx.shape
    scale = np.sqrt(np.mean(dx * dx, axis=0))
    scale[~(scale > 0)] = 1.0  # constant dimensions keep weight 0 (zero gradient)
    dxs = np.divide(dx, scale, order="F")  # column-major: the einsum products run along contiguous columns
    l2_scaled = options.l2 / scale**2
    c = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    n_total = float(n if c is None else c.sum())
    bounds = [((0.0 if options.nonneg else -options.max_abs_weight) * s, options.max_abs_weight * s) for s in scale]
    v0 = np.zeros(d) if init is None else np.clip(init[0] * scale, *np.transpose(bounds))
    tie = (codes == LABEL_TIE).astype(np.float64)
    tie_weight = float(tie.sum() if c is None else (tie * c).sum())
    lbfgs = {"jac": True, "method": "L-BFGS-B"}
    lbfgs["options"] = {"maxiter": options.max_iter, "gtol": options.gtol, "ftol": 1e-15, "maxcor": 20}
    if options.tie_model == "davidson" and tie_weight > 0:
        if init is not None and init[1] > 0:
            theta0 = float(np.log(init[1]))
        else:  # at w = 0, P(tie) = ν / (2 + ν): match the observed tie fraction
            frac = min(tie_weight / n_total, 1.0 - 1e-9)
            theta0 = float(np.log(2.0 * frac / (1.0 - frac)))
        x0 = np.append(v0, np.clip(theta0, -THETA_BOUND, THETA_BOUND))
        args = (dxs, np.choose(codes, [1.0, -1.0, 0.0]), tie, c, n_total, l2_scaled)
        res = minimize(_davidson_objective, x0, args=args, bounds=[*bounds, (-THETA_BOUND, THETA_BOUND)], **lbfgs)
        return res.x[:-1] / scale, float(np.exp(res.x[-1])), res
    target = TIE_TARGET.get(options.tie_model, 0.5)
    y = np.choose(codes, [1.0, 0.0, 0.0 if target is None else target])
    if target is None and tie_weight > 0:  # drop: the ties weigh nothing
        c = (1.0 - tie) if c is None else c * (1.0 - tie)
        n_total = float(c.sum())
        if n_total <= 0:  # nothing but ties: w stays at 0
            return np.zeros(d), 0.0, OptimizeResult(success=True, nit=0, message="all pairs are ties (dropped)")
    res = minimize(_bt_objective, v0, args=(dxs, y, c, n_total, l2_scaled), bounds=bounds, **lbfgs)
    return res.x / scale, 0.0, res


def _warnings(dx: np.ndarray, codes: np.ndarray, dims: tuple[str, ...], options: FitOptions, w: np.ndarray) -> list:
    """What in the data leaves the weights unidentified, and what the ties did to the fit."""
    n, n_ties = len(codes), int(np.sum(codes == LABEL_TIE))
    found = []
    if n_ties == n and options.tie_model == "zero":
        found.append(
            f"all {n} pairs are ties: no pair says which image is better, and tie_model=zero counts every tie as a "
            f"win of b, so the fitted weights {[round(float(v), 2) for v in w]} only make each pair's a lose to its "
            "b (they follow which image of each pair is listed first); add pairs with a preference, or use "
            "tie_model=half, davidson or drop"
        )
    elif n_ties == n:
        found.append(
            f"all {n} pairs are ties: no pair says which image is better, so the weights are not identified and stay "
            f"at 0 (tie_model={options.tie_model}); add pairs with a preference"
        )
    elif n_ties and options.tie_model == "zero":
        found.append(
            f"tie_model=zero (eq. 2 literally) counts each of the {n_ties} ties as a win of b: the weights depend "
            "on which image of a tied pair is listed first; tie_model=half is eq. 2 averaged over both orders and "
            "does not"
        )
    rms = np.sqrt(np.mean(dx * dx, axis=0))
    constant = rms <= 1e-12 * max(1.0, float(rms.max(initial=0.0)))
    found += [
        f"dimension {dims[j]!r} does not differ within any pair (constant): its weight is not identified and stays "
        "at 0; drop it with dimensions=[...] or add pairs where it varies"
        for j in np.flatnonzero(constant)
    ]
    live = np.flatnonzero(~constant)
    if len(live) > 1:
        gram = (dx[:, live].T @ dx[:, live]) / np.outer(rms[live], rms[live]) / len(dx)
        same = [(i, j) for i, j in zip(*np.triu_indices(len(live), k=1), strict=True) if abs(gram[i, j]) > 1 - 1e-9]
        found += [
            f"dimensions {dims[live[i]]!r} and {dims[live[j]]!r} are identical (or exactly proportional) across "
            "pairs: only their combination is identified, the L2 penalty splits it; drop one with dimensions=[...]"
            for i, j in same
        ]
        if not same and np.linalg.matrix_rank(gram, tol=1e-9) < len(live):
            found.append(
                "the dimension differences are linearly dependent: some weight combinations are not identified "
                "and are set by the L2 penalty"
            )
    s = dx @ w
    if n_ties == 0 and np.all(np.where(codes == LABEL_A, s, -s) > 0):
        found.append(
            "the pairs are perfectly separable: the fused scores order every pair correctly, so the likelihood has "
            "no finite maximum and the weights' scale is set by l2 / max_abs_weight; read their ratios only"
        )
    at_bound = [dims[j] for j in np.flatnonzero(np.abs(w) >= 0.999 * options.max_abs_weight)]
    if at_bound:
        found.append(f"weights of {at_bound} reached max_abs_weight={options.max_abs_weight}; raise l2 or the bound")
    return found


def fit_bradley_terry(
    x_a: np.ndarray,
    x_b: np.ndarray,
    labels: Sequence[str] | np.ndarray,
    *,
    dimensions: Sequence[str] | None = None,
    options: FitOptions | None = None,
    sample_weight: np.ndarray | None = None,
    **option_overrides: object,
) -> BTFit:
    """Fusion weights from pairs: ``x_a``, ``x_b`` [n, d] dimension scores, ``labels`` a/b/tie; ``options`` or keyword
    overrides (``tie_model="half"``) set the model, ``sample_weight`` [n] weighs each pair. Degenerate data is fitted
    to finite weights and logged as a warning (kept in ``BTFit.warnings``)."""
    options = dataclasses.replace(options or FitOptions(), **option_overrides)
    x_a, x_b = np.asarray(x_a, dtype=np.float64), np.asarray(x_b, dtype=np.float64)
    if x_a.ndim != 2 or x_a.shape != x_b.shape:
        raise ValueError(f"x_a and x_b must both have shape [n_pairs, n_dimensions]; got {x_a.shape} and {x_b.shape}.")
    n, d = x_a.shape
    codes = label_codes(labels)
    if codes.shape != (n,):
        raise ValueError(f"Got {codes.shape[0]} labels for {n} pairs; give exactly one label per pair.")
    if n == 0 or d == 0:
        raise ValueError(f"Need at least one pair and one dimension to fit weights; got {n} pairs, {d} dimensions.")
    dims = tuple(dimensions) if dimensions is not None else tuple(f"x{j}" for j in range(d))
    if len(dims) != d:
        raise ValueError(f"Got {len(dims)} dimension names {list(dims)} for {d} score columns.")
    bad = ~np.isfinite(x_a) | ~np.isfinite(x_b)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"Non-finite dimension score in pair {i}, dimension {dims[j]!r}; every score must be finite.")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
        if sample_weight.shape != (n,) or (sample_weight < 0).any() or not sample_weight.sum() > 0:
            raise ValueError("sample_weight must be [n_pairs] non-negative numbers with a positive sum.")
    dx = x_a - x_b
    w, nu, res = fit_differences(dx, codes, options, sample_weight)
    found = _warnings(dx, codes, dims, options, w)
    if not res.success:
        found.append(f"L-BFGS-B did not converge after {res.nit} iterations ({res.message})")
    for message in found:
        logger.warning("Bradley–Terry fit: %s.", message)
    ll = pair_log_likelihood(dx @ w, codes, options.tie_model, nu)
    return BTFit(
        weights=w,
        nu=nu,
        dimensions=dims,
        options=options,
        n_pairs=n,
        n_ties=int(np.sum(codes == LABEL_TIE)),
        log_likelihood=float(np.sum(ll if sample_weight is None else ll * sample_weight)),
        converged=bool(res.success),
        n_iter=int(res.nit),
        warnings=tuple(found),
    )
