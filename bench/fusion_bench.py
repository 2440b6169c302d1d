"""Benchmark: Bradley–Terry fusion fit on 1,000,000 pairs × 8 dimensions, on one CPU core.

    python bench/fusion_bench.py [--pairs 1000000] [--dims 8] [--repeats 3]

The script pins itself to one core and sets OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS to 1 before
numpy loads (equivalent to running it with ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``). It prints the best
wall time of the fit (data simulation excluded) for each tie model, the L-BFGS-B iterations and the error of the
recovered weights. Target: under 10 s per fit.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import time  # noqa: E402

import numpy as np  # noqa: E402
from common import arguments  # noqa: E402

from fusion.bradley_terry import LABEL_A, LABEL_B, LABEL_TIE, fit_bradley_terry, pair_log_likelihood  # noqa: E402


def simulate(n: int, w: np.ndarray, nu: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dimension scores uniform in [1, 5]; labels drawn from the Davidson model with weights ``w`` and ``nu``."""
    rng = np.random.default_rng(seed)
    x_a, x_b = rng.uniform(1, 5, (n, len(w))), rng.uniform(1, 5, (n, len(w)))
    s = (x_a - x_b) @ w  # each outcome's probability: the exponential of its log-likelihood under the model
    p_a, p_b = (np.exp(pair_log_likelihood(s, np.full(n, label), "davidson", nu)) for label in (LABEL_A, LABEL_B))
    u = rng.random(n)
    return x_a, x_b, np.where(u < p_a, LABEL_A, np.where(u < p_a + p_b, LABEL_B, LABEL_TIE)).astype(np.int8)


def main() -> None:
    args = arguments(
        __doc__,
        pairs={"type": int, "default": 1_000_000},
        dims={"type": int, "default": 8},
        repeats={"type": int, "default": 3, "help": "timed fits per tie model; the best is reported"},
        seed={"type": int, "default": 0},
    )
    w_true = np.linspace(1.0, -0.3, args.dims)
    t0 = time.perf_counter()
    x_a, x_b, labels = simulate(args.pairs, w_true, nu=0.3, seed=args.seed)
    print(
        f"simulated {args.pairs:,} pairs x {args.dims} dims ({np.mean(labels == LABEL_TIE):.1%} ties) "
        f"in {time.perf_counter() - t0:.2f} s; cores: {sorted(os.sched_getaffinity(0))}"
    )
    for tie_model in ("davidson", "half"):
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fit = fit_bradley_terry(x_a, x_b, labels, tie_model=tie_model)
            times.append(time.perf_counter() - t0)
        err = np.max(np.abs(fit.weights / np.linalg.norm(fit.weights) - w_true / np.linalg.norm(w_true)))
        print(
            f"{tie_model:>8}: best {min(times):.2f} s, median {np.median(times):.2f} s over {args.repeats} fits; "
            f"{fit.n_iter} iterations, converged={fit.converged}, nu={fit.nu:.3f}, "
            f"max |error| of normalised weights {err:.4f}"
        )


if __name__ == "__main__":
    main()
