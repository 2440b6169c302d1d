"""Bradley–Terry fusion of dimension scores (SA-IQA §3.2.2, eq. 2–3), with ties.

Each image has a vector of dimension scores ``x`` (layout, harmony, lighting, distortion, ...). A weight
vector ``w`` fuses them into one score ``S = x·w``; a pair ``(A, B)`` is modelled from the score difference
``s = (x_A - x_B)·w`` with no intercept:

- ``tie_model="davidson"`` (default, this toolkit's choice: eq. 2 has no tie outcome): Davidson's (1970)
  extension, with ``π = exp(S)`` and ``ν = exp(θ)``::

      P(A) = πA / (πA + πB + ν√(πA πB)),  P(B) = πB / (...),  P(tie) = ν√(πA πB) / (...)

  ``ν`` is fitted with ``w``. Without ties in the data the model is plain Bradley–Terry (``ν = 0``), so
  ``P(A > B) = sigmoid(s)`` exactly as in eq. 2.
- ``tie_model="zero"``: eq. 2 literally. The paper's labels are ``y ∈ {0, 1}``, "y = 1 if A is preferred, y = 0
  otherwise", so a tie counts as ``y = 0`` (as a win of B) in the logistic loss. The weights then depend on which
  image of a tied pair a file lists first (a fit with ties says so in a warning).
- ``tie_model="half"``: a tie counts as ``y = 0.5`` in the logistic loss: eq. 2's ``y = 0`` averaged over both
  orders of the tied pair (``½(log σ(-s) + log σ(s))`` is the ``y = ½`` term), so the order does not matter.
- ``tie_model="drop"``: ties are left out of the fit (and of the log-likelihood).

The objective is the mean negative log-likelihood plus ``l2 / 2 · ||w||²``, minimised by scipy's L-BFGS-B with
analytic gradients; every weight is boxed to ``[-max_abs_weight, max_abs_weight]`` (``[0, max_abs_weight]`` with
``nonneg=True``) so that degenerate data (perfectly separable pairs, all ties) still gives finite numbers.

>>> import numpy as np
>>> x_a = np.array([[4.0, 2.0], [1.0, 3.0], [5.0, 5.0], [2.0, 1.0]])
>>> x_b = np.array([[2.0, 2.0], [3.0, 1.0], [1.0, 4.0], [2.0, 2.0]])
>>> fit = fit_bradley_terry(x_a, x_b, ["a", "b", "a", "tie"], dimensions=["layout", "lighting"], l2=0.1)
>>> fit.weights.round(3).tolist(), round(fit.nu, 3)
([1.684, -0.35], 1.882)
>>> [round(float(p[0]), 3) for p in fit.predict_proba(x_a[:1], x_b[:1])]  # P(A), P(B), P(tie)
[0.723, 0.025, 0.252]
>>> fit.score(np.array([[3.0, 4.0]])).round(3).tolist()  # S = x·w
[3.654]
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from reward.data.labels import LABEL_A, LABEL_B, LABEL_TIE, label_codes
from reward.eval.metrics import pairwise_accuracy as metric_pairwise_accuracy

__all__ = [
    "LABEL_A",
    "LABEL_B",
    "LABEL_TIE",
    "TIE_MODELS",
    "BTFit",
    "FitOptions",
    "encode_labels",
    "fit_bradley_terry",
    "outcome_probabilities",
    "pairwise_accuracy",
]

logger = logging.getLogger(__name__)

encode_labels = label_codes  # labels a/b/tie (any case) or codes -> int8 codes (reward.data.labels)
TIE_MODELS = ("davidson", "zero", "half", "drop")
# the logistic target of a tie (eq. 2's y) under each non-Davidson model; None: the tie is left out
TIE_TARGET: dict[str, float | None] = {"zero": 0.0, "half": 0.5, "drop": None}
THETA_BOUND = 20.0  # |log ν| ≤ 20: ν in [2e-9, 5e8] keeps everything finite when all pairs (or none) are ties


@dataclass(frozen=True)
class FitOptions:
    """How to fit the weights.

    Args:
        tie_model: ``"davidson"`` (ties get their own probability, ``ν`` fitted; ours), ``"zero"`` (tie = ``y=0``,
            eq. 2 literally), ``"half"`` (tie = ``y=0.5``; ours) or ``"drop"`` (ties left out).
        l2: L2 penalty ``l2/2·||w||²`` added to the *mean* negative log-likelihood (so it does not grow with the
            number of pairs). ``0`` gives the plain maximum-likelihood fit.
        nonneg: constrain every weight to be ``>= 0``.
        max_abs_weight: box bound on each ``|w_j|``; keeps separable data finite.
        max_iter: L-BFGS-B iteration limit.
        gtol: L-BFGS-B projected-gradient tolerance.
    """

    tie_model: str = "davidson"
    l2: float = 1e-4
    nonneg: bool = False
    max_abs_weight: float = 100.0
    max_iter: int = 2000
    gtol: float = 1e-9

    def __post_init__(self) -> None:
        problems = []
        if self.tie_model not in TIE_MODELS:
            problems.append(f"tie_model={self.tie_model!r} is unknown; use one of {list(TIE_MODELS)}")
        if not (np.isfinite(self.l2) and self.l2 >= 0):
            problems.append(f"l2={self.l2!r} must be a finite number >= 0")
        if not (np.isfinite(self.max_abs_weight) and self.max_abs_weight > 0):
            problems.append(f"max_abs_weight={self.max_abs_weight!r} must be a finite number > 0")
        if self.max_iter < 1:
            problems.append(f"max_iter={self.max_iter!r} must be >= 1")
        if problems:
            raise ValueError("Invalid Bradley–Terry fit options: " + "; ".join(problems) + ".")


@dataclass(frozen=True, eq=False)
class BTFit:
    """A fitted Bradley–Terry fusion.

    Attributes:
        weights: ``w`` [d], in the units of the dimension scores (``S = x·w``).
        nu: Davidson tie parameter ``ν`` (``0`` under the other tie models or when the data has no ties).
        dimensions: names of the ``d`` dimensions, in the order of ``weights``.
        options: the options used.
        n_pairs, n_ties: pairs used and how many of them were ties.
        log_likelihood: total log-likelihood of the training pairs (without the penalty).
        converged, n_iter, message: what L-BFGS-B reported.
        warnings: the degenerate-data warnings that were logged.
    """

    weights: np.ndarray
    nu: float
    dimensions: tuple[str, ...]
    options: FitOptions
    n_pairs: int
    n_ties: int
    log_likelihood: float
    converged: bool
    n_iter: int
    message: str = ""
    warnings: tuple[str, ...] = field(default=())

    @property
    def tie_model(self) -> str:
        return self.options.tie_model

    def score(self, x: np.ndarray) -> np.ndarray:
        """Fused scores ``S = x·w`` for ``x`` of shape [n, d] (eq. 3)."""
        return np.asarray(x, dtype=np.float64) @ self.weights

    def predict_proba(self, x_a: np.ndarray, x_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(P(A wins), P(B wins), P(tie))`` for each pair; ``P(tie)`` is 0 unless the Davidson ``ν > 0``."""
        s = self.score(x_a) - self.score(x_b)
        return outcome_probabilities(s, self.nu if self.tie_model == "davidson" else 0.0)

    def accuracy(self, x_a: np.ndarray, x_b: np.ndarray, labels: Sequence[str] | np.ndarray) -> float:
        """Pairwise accuracy of the fused scores on the non-tie pairs (see :func:`pairwise_accuracy`)."""
        return pairwise_accuracy(self.score(x_a) - self.score(x_b), encode_labels(labels))

    def log_likelihood_of(self, x_a: np.ndarray, x_b: np.ndarray, labels: Sequence[str] | np.ndarray) -> float:
        """Total log-likelihood of ``labels`` under this fit (a tie counts as ``y = 0`` under ``"zero"``, ``0.5``
        under ``"half"``, nothing under ``"drop"``)."""
        dx = np.asarray(x_a, dtype=np.float64) - np.asarray(x_b, dtype=np.float64)
        codes = encode_labels(labels)
        return float(np.sum(pair_log_likelihood(dx @ self.weights, codes, self.tie_model, self.nu)))


def outcome_probabilities(s: np.ndarray, nu: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Davidson probabilities ``(P(A), P(B), P(tie))`` for score differences ``s = S_A - S_B``.

    With ``π = exp(S)`` and dividing by ``√(πA πB)``: ``P(A) = e^{s/2} / (e^{s/2} + e^{-s/2} + ν)``, etc.
    ``nu = 0`` gives Bradley–Terry, ``P(A) = sigmoid(s)``.

    >>> [round(float(p[0]), 4) for p in outcome_probabilities(np.array([1.0]), 0.5)]
    [0.5984, 0.2201, 0.1815]
    """
    h = 0.5 * np.asarray(s, dtype=np.float64)
    a = np.abs(h)
    small = np.exp(-2.0 * a)  # e^{-|h|} / e^{|h|}
    tie = nu * np.exp(-a) if nu > 0 else np.zeros_like(a)
    z = 1.0 + small + tie
    big_p, small_p = 1.0 / z, small / z
    p_a = np.where(h >= 0, big_p, small_p)
    p_b = np.where(h >= 0, small_p, big_p)
    return p_a, p_b, tie / z


def pairwise_accuracy(s: np.ndarray, codes: np.ndarray) -> float:
    """Fraction of non-tie pairs ordered correctly by ``s = S_A - S_B``; ``s == 0`` counts one half; ``nan`` when
    there is no non-tie pair (:func:`reward.eval.metrics.pairwise_accuracy` on score differences).

    >>> pairwise_accuracy(np.array([1.0, -2.0, 0.0, 3.0]), np.array([LABEL_A, LABEL_A, LABEL_B, LABEL_TIE]))
    0.5
    """
    s = np.asarray(s, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no decisive pair: nan, as documented
        return metric_pairwise_accuracy(s, np.zeros_like(s), codes)


def pair_log_likelihood(s: np.ndarray, codes: np.ndarray, tie_model: str, nu: float) -> np.ndarray:
    """Per-pair log-likelihood of ``codes`` given score differences ``s`` (the optimiser has a fused version).

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


def _matvec(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``a @ v`` with einsum, not BLAS: single-threaded, so bit-for-bit reproducible whatever the BLAS thread
    count, and free of BLAS thread start-up in the many small fits of the bootstrap (slow on a loaded machine)."""
    return np.einsum("ij,j->i", a, v)


def _rmatvec(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``a.T @ r`` with einsum (see :func:`_matvec`)."""
    return np.einsum("ij,i->j", a, r)


def _bt_objective(v, dx, y, c, n_total, l2_scaled):
    """Mean BT NLL (eq. 2, y in {0, 1}, a tie's 0 or 0.5) + penalty, and its gradient, in scaled coordinates."""
    s = _matvec(dx, v)
    e = np.exp(-np.abs(s))
    log1pe = np.log1p(e)
    ll = y * s - np.maximum(s, 0.0) - log1pe
    sig = np.where(s >= 0, 1.0, e) / (1.0 + e)
    r = y - sig
    if c is not None:
        ll, r = ll * c, r * c
    loss = -ll.sum() / n_total + 0.5 * np.dot(l2_scaled * v, v)
    grad = -_rmatvec(dx, r) / n_total + l2_scaled * v
    return loss, grad


def _davidson_objective(params, dx, sgn, tie, c, n_total, l2_scaled):
    """Mean Davidson NLL + penalty and gradient; ``params = [v..., θ]``, ``sgn`` is +1/-1/0 for A/B/tie."""
    v, theta = params[:-1], params[-1]
    h = 0.5 * _matvec(dx, v)
    a = np.abs(h)
    small = np.exp(-2.0 * a)
    tie_term = np.exp(theta - a)
    z = 1.0 + small + tie_term
    ll = sgn * h + tie * theta - a - np.log(z)
    p_diff = np.sign(h) * (1.0 - small) / z  # P(A) - P(B)
    p_tie = tie_term / z
    d_s = 0.5 * (sgn - p_diff)  # d ll / d s
    d_theta = tie - p_tie
    if c is not None:
        ll, d_s, d_theta = ll * c, d_s * c, d_theta * c
    loss = -ll.sum() / n_total + 0.5 * np.dot(l2_scaled * v, v)
    grad = np.empty_like(params)
    grad[:-1] = -_rmatvec(dx, d_s) / n_total + l2_scaled * v
    grad[-1] = -d_theta.sum() / n_total
    return loss, grad


@dataclass(frozen=True)
class CoreResult:
    """What :func:`fit_differences` returns: weights in score units, ``ν``, and the optimiser's report."""

    weights: np.ndarray
    nu: float
    converged: bool
    n_iter: int
    message: str


def fit_differences(
    dx: np.ndarray,
    codes: np.ndarray,
    options: FitOptions,
    sample_weight: np.ndarray | None = None,
    init: tuple[np.ndarray, float] | None = None,
) -> CoreResult:
    """Minimise the penalised mean NLL for differences ``dx`` [n, d] and label codes; ``init = (w, ν)``.

    No input checks and no logging: the building block of :func:`fit_bradley_terry` and of the bootstrap.
    """
    n, d = dx.shape
    scale = np.sqrt(np.mean(dx * dx, axis=0))
    scale[~(scale > 0)] = 1.0  # constant dimensions keep weight 0 (zero gradient)
    dxs = np.divide(dx, scale, order="F")  # column-major: the einsum products run along contiguous columns
    l2_scaled = options.l2 / scale**2
    c = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    n_total = float(n if c is None else c.sum())
    lo = 0.0 if options.nonneg else -options.max_abs_weight
    w_bounds = [(lo * s, options.max_abs_weight * s) for s in scale]
    v0 = np.zeros(d) if init is None else np.clip(init[0] * scale, [b[0] for b in w_bounds], [b[1] for b in w_bounds])
    tie = (codes == LABEL_TIE).astype(np.float64)
    tie_weight = float(tie.sum() if c is None else (tie * c).sum())
    davidson = options.tie_model == "davidson" and tie_weight > 0
    minimize_options = {"maxiter": options.max_iter, "gtol": options.gtol, "ftol": 1e-15, "maxcor": 20}
    if davidson:
        if init is not None and init[1] > 0:
            theta0 = float(np.log(init[1]))
        else:  # at w = 0, P(tie) = ν / (2 + ν): match the observed tie fraction
            frac = min(tie_weight / n_total, 1.0 - 1e-9)
            theta0 = float(np.log(2.0 * frac / (1.0 - frac)))
        theta0 = float(np.clip(theta0, -THETA_BOUND, THETA_BOUND))
        sgn = np.choose(codes, [1.0, -1.0, 0.0])
        res = minimize(
            _davidson_objective,
            np.append(v0, theta0),
            args=(dxs, sgn, tie, c, n_total, l2_scaled),
            jac=True,
            method="L-BFGS-B",
            bounds=[*w_bounds, (-THETA_BOUND, THETA_BOUND)],
            options=minimize_options,
        )
        v, nu = res.x[:-1], float(np.exp(res.x[-1]))
    else:
        target = TIE_TARGET.get(options.tie_model, 0.5)
        y = np.choose(codes, [1.0, 0.0, 0.0 if target is None else target])
        if target is None and tie_weight > 0:  # drop: the ties weigh nothing
            c = (1.0 - tie) if c is None else c * (1.0 - tie)
            n_total = float(c.sum())
            if n_total <= 0:  # nothing but ties: w stays at 0
                return CoreResult(np.zeros(d), 0.0, True, 0, "all pairs are ties (dropped)")
        res = minimize(
            _bt_objective,
            v0,
            args=(dxs, y, c, n_total, l2_scaled),
            jac=True,
            method="L-BFGS-B",
            bounds=w_bounds,
            options=minimize_options,
        )
        v, nu = res.x, 0.0
    return CoreResult(v / scale, nu, bool(res.success), int(res.nit), str(res.message))


def _tie_warnings(n_ties: int, n_pairs: int, tie_model: str, weights: np.ndarray) -> list[str]:
    """What the ties did to the fit: nothing identified when every pair is a tie (and, under ``zero``, what the
    weights then say), and under ``zero`` the dependence on which image of a tied pair is listed first."""
    if n_ties == 0:
        return []
    if n_ties == n_pairs and tie_model == "zero":
        shown = [round(float(w), 2) for w in weights]
        return [
            f"all {n_pairs} pairs are ties: no pair says which image is better, and tie_model=zero counts every tie "
            f"as a win of b, so the fitted weights {shown} only make each pair's a lose to its b (they follow "
            "which image of each pair is listed first, not what matters); add pairs with a preference, or use "
            "tie_model=half, davidson or drop"
        ]
    if n_ties == n_pairs:
        return [
            f"all {n_pairs} pairs are ties: no pair says which image is better, so the weights are not "
            f"identified and stay at 0 (tie_model={tie_model}: the likelihood is highest where every pair is even); "
            "add pairs with a preference"
        ]
    if tie_model == "zero":
        return [
            f"tie_model=zero (eq. 2 literally) counts each of the {n_ties} ties as a win of b: the weights depend "
            "on which image of a tied pair is listed first; tie_model=half is eq. 2 averaged over both orders and "
            "does not"
        ]
    return []


def _degeneracy_warnings(dx: np.ndarray, codes: np.ndarray, dimensions: tuple[str, ...]) -> list[str]:
    """Warnings about data that cannot identify the weights (checked before fitting)."""
    found = []
    rms = np.sqrt(np.mean(dx * dx, axis=0))
    constant = rms <= 1e-12 * max(1.0, float(rms.max(initial=0.0)))
    for j in np.flatnonzero(constant):
        found.append(
            f"dimension {dimensions[j]!r} does not differ within any pair (constant): its weight is not "
            "identified and stays at 0; drop it with dimensions=[...] or add pairs where it varies"
        )
    live = np.flatnonzero(~constant)
    identical = False
    if len(live) > 1:
        gram = (dx[:, live].T @ dx[:, live]) / np.outer(rms[live], rms[live]) / len(dx)
        for i, j in zip(*np.triu_indices(len(live), k=1), strict=True):
            if abs(gram[i, j]) > 1.0 - 1e-9:
                identical = True
                found.append(
                    f"dimensions {dimensions[live[i]]!r} and {dimensions[live[j]]!r} are identical (or exactly "
                    "proportional) across pairs: only their combination is identified, the L2 penalty splits it; "
                    "drop one with dimensions=[...]"
                )
        if not identical and np.linalg.matrix_rank(gram, tol=1e-9) < len(live):
            found.append(
                "the dimension differences are linearly dependent: some weight combinations are not identified "
                "and are set by the L2 penalty"
            )
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
    """Fit fusion weights ``w`` from pairs: ``x_a``, ``x_b`` [n, d] dimension scores, ``labels`` a/b/tie.

    ``options`` (or keyword overrides such as ``tie_model="half"``, ``l2=0.0``, ``nonneg=True``) set the model;
    ``sample_weight`` [n] weights each pair (the bootstrap passes resampling counts). Degenerate data (all ties,
    a constant dimension, identical dimensions, perfectly separable pairs, weights at their bound) is fitted to
    finite weights and reported with ``logging.warning`` (also kept in ``BTFit.warnings``). See the module
    docstring for an example.
    """
    options = dataclasses.replace(options or FitOptions(), **option_overrides)
    x_a = np.asarray(x_a, dtype=np.float64)
    x_b = np.asarray(x_b, dtype=np.float64)
    if x_a.ndim != 2 or x_a.shape != x_b.shape:
        raise ValueError(f"x_a and x_b must both have shape [n_pairs, n_dimensions]; got {x_a.shape} and {x_b.shape}.")
    n, d = x_a.shape
    codes = encode_labels(labels)
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
    found = _degeneracy_warnings(dx, codes, dims)
    core = fit_differences(dx, codes, options, sample_weight)
    s = dx @ core.weights
    n_ties = int(np.sum(codes == LABEL_TIE))
    found = _tie_warnings(n_ties, n, options.tie_model, core.weights) + found
    if n_ties == 0 and np.all(np.where(codes == LABEL_A, s, -s) > 0):
        found.append(
            "the pairs are perfectly separable: the fused scores order every pair correctly, so the likelihood "
            "has no finite maximum and the weights' scale is set by l2 / max_abs_weight; read their ratios only"
        )
    at_bound = np.abs(core.weights) >= 0.999 * options.max_abs_weight
    if at_bound.any():
        names = [dims[j] for j in np.flatnonzero(at_bound)]
        found.append(f"weights of {names} reached max_abs_weight={options.max_abs_weight}; raise l2 or the bound")
    if not core.converged:
        found.append(f"L-BFGS-B did not converge after {core.n_iter} iterations ({core.message})")
    for message in found:
        logger.warning("Bradley–Terry fit: %s.", message)
    ll = pair_log_likelihood(s, codes, options.tie_model, core.nu)
    if sample_weight is not None:
        ll = ll * sample_weight
    return BTFit(
        weights=core.weights,
        nu=core.nu,
        dimensions=dims,
        options=options,
        n_pairs=n,
        n_ties=n_ties,
        log_likelihood=float(ll.sum()),
        converged=core.converged,
        n_iter=core.n_iter,
        message=core.message,
        warnings=tuple(found),
    )
