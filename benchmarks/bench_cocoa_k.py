"""Benchmark: rounds of parallel DCD (CoCoA average / CoCoA+ add) to 1% of the optimum vs K.

Run from the repository root (needs the `bench` extra and ../shared/datasets):

    python benchmarks/bench_cocoa_k.py --data pypi-summaries --k 1 2 4 8 16 32 --png docs/img/cocoa-k.png

A simulation of K workers in one process, so that it holds beyond this machine's 2 cores:
the rows are split at random into K partitions, and each round runs, partition after
partition, exactly what a worker's `distsvm.workers.dcd.local_round` runs — H passes of the DCD
kernel (`distsvm.workers.kernels.dcd.dcd_passes`) from the round's w, with the local subproblem
scaled by σ′ (1 for average, K for add) — then combines w += γ Σ Δwₖ (γ = 1/K for average,
1 for add) and moves each partition's α by γΔα.  The kernel, seeds and combination are the
distributed solver's; only the Dask round trips are absent.  f* is LIBLINEAR's primal
objective at -e 1e-4 (-s 3 for hinge, -s 1 for squared hinge).  Prints rounds to 1% per K
and mode, and with --png plots the relative primal gap against rounds (log scale).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_dcd import gap_plot  # noqa: E402


def simulate(X, s, sqnorm, K, mode, loss, C, f_star, max_rounds, passes, seed):
    """Relative primal gaps (P(w) − f*)/f* after each round of K-partition parallel DCD."""
    from distsvm.workers import losses
    from distsvm.workers.kernels.dcd import dcd_passes, new_state

    code = losses.code(loss)
    gamma, sigma = (1.0 / K, 1.0) if mode == "average" else (1.0, float(K))
    parts = np.array_split(np.random.default_rng(seed).permutation(X.shape[0]), K)
    blocks = []
    for p in parts:
        p = np.sort(p)
        Xp = X[p]
        blocks.append((Xp.indptr.astype(np.int64), Xp.indices, Xp.data, s[p].astype(np.float32),
                       sqnorm[p], np.zeros(len(p))))
    w = np.zeros(X.shape[1])
    gaps = []
    for r in range(max_rounds):
        dw = np.zeros_like(w)
        for k, (indptr, indices, data, y, sq, alpha) in enumerate(blocks):
            u = w.copy()
            old = alpha.copy()
            state, index = new_state(len(alpha))
            dcd_passes(indptr, indices, data, y, 1, sq, u, -1.0, X.shape[1], alpha, index,
                       state, code, np.full(len(alpha), C), 0.0, passes,
                       int(seed * 1000003 + r * 1009 + k), sigma)
            alpha[:] = old + gamma * (alpha - old)
            dw += (u - w) / sigma
        w += gamma * dw
        xi = np.maximum(0.0, 1.0 - s * (X @ w))
        primal = 0.5 * w @ w + C * np.sum(xi if loss == "hinge" else xi * xi)
        gaps.append((primal - f_star) / f_star)
        if gaps[-1] <= 0.01:
            break
    return gaps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="pypi-summaries")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--losses", nargs="+", default=["hinge", "squared_hinge"])
    ap.add_argument("--modes", nargs="+", default=["add", "average"])
    ap.add_argument("-c", dest="C", type=float, default=1.0)
    ap.add_argument("--inner-passes", type=int, default=1)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png")
    a = ap.parse_args()

    from tests.conftest import DATA, SHARED, liblinear_optimum, load_xy

    path = DATA / "a9a.xz" if a.data == "a9a" else SHARED / f"{a.data}.xz"
    X, y = load_xy(path, 123 if a.data == "a9a" else None)
    s = np.where(y == np.max(y), 1.0, -1.0)
    sqnorm = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    print(f"{a.data}: {X.shape[0]} rows x {X.shape[1]} features, C={a.C:g}, "
          f"H={a.inner_passes} pass(es) per round")
    print(f"{'loss':14s} {'mode':8s} " + " ".join(f"{'K=' + str(k):>6s}" for k in a.k)
          + "   (rounds to 1%; '>' = not reached within --max-rounds)")
    curves = {}
    for loss in a.losses:
        t = time.perf_counter()
        _, f_star = liblinear_optimum(X, y, loss, C=a.C, eps=1e-4)
        print(f"  f* ({loss}) = {f_star:.6g} from LIBLINEAR -e 1e-4 in {time.perf_counter() - t:.1f}s")
        for mode in a.modes:
            cells = []
            for k in a.k:
                gaps = simulate(X, s, sqnorm, k, mode, loss, a.C, f_star, a.max_rounds,
                                a.inner_passes, a.seed)
                curves[loss, mode, k] = gaps
                cells.append(f"{len(gaps):6d}" if gaps[-1] <= 0.01 else f"{'>' + str(len(gaps)):>6s}")
            print(f"{loss:14s} {mode:8s} " + " ".join(cells), flush=True)
    if a.png:
        gap_plot({f"{a.data}, {loss}, {mode}": {f"K={k}": (np.arange(1, len(g) + 1), g)
                                                for (lo, mo, k), g in curves.items()
                                                if (lo, mo) == (loss, mode)}
                  for loss in a.losses for mode in a.modes}, "round", a.png)

if __name__ == "__main__":
    main()
