"""Benchmark: would a primal Newton method solve `-s 3` (the L1-loss SVM) in few enough
passes over the data to scale out like `-s 2`?  (issue 27; a measurement, not a solver)

The hinge has no second derivative, so Newton-CG runs on a smoothed hinge (Shalev-Shwartz &
Zhang's: quadratic within mu of the margin, linear beyond), its smoothing mu cut by
``--shrink`` after each stage, each stage warm-started and solved to a gradient norm of
``--gtol`` times its norm at w = 0.  Its stop is the exact hinge's duality gap: the smoothed
gradient gives a feasible dual point, alpha_i = C * clip((1 - y_i w.x_i) / mu, 0, 1), whose
dual objective bounds f* from below.  A pass is one loop over the rows, as distsvm's Newton
passes: the margins with the gradient, a Hessian-vector product, Xs for the line search,
w(alpha) for the gap.  LIBLINEAR's newton.cpp's steps, in NumPy/SciPy.

    python benchmarks/bench_smoothed_hinge.py ../shared/datasets/w8a.xz
"""

from __future__ import annotations

import argparse
import lzma
import pathlib
import sys
import time

import numpy as np
from sklearn.datasets import load_svmlight_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_dcd import liblinear_run  # noqa: E402


def smoothed_loss(r, mu):
    """The smoothed hinge of the residuals r = 1 - y w.x: 0, r^2 / (2 mu), r - mu / 2."""
    return np.where(r <= 0, 0.0, np.where(r >= mu, r - mu / 2, r * r / (2 * mu)))


class Problem:
    """min_w 1/2 |w|^2 + C sum_i loss(y_i w.x_i), counting passes over X."""

    def __init__(self, X, y, C):
        self.X, self.Xt, self.y, self.C, self.passes = X, X.T.tocsr(), y, C, 0

    def margins(self, w):
        self.passes += 1
        return self.y * (self.X @ w)

    def xt(self, v):
        return self.Xt @ (self.y * v)

    def hinge(self, w, m):
        return 0.5 * w @ w + self.C * np.maximum(0.0, 1.0 - m).sum()

    def smoothed(self, w, m, mu):
        """The smoothed objective, its gradient and the generalized Hessian's D at margins m."""
        r = 1.0 - m
        f = 0.5 * w @ w + self.C * smoothed_loss(r, mu).sum()
        g = w - self.C * self.xt(np.clip(r / mu, 0.0, 1.0))  # in m's pass (fun_grad)
        return f, g, self.C * ((r > 0) & (r < mu)) / mu

    def newton(self, w, mu, gtol, max_iter=200):
        """Newton-CG with an Armijo backtracking line search (newton.cpp's eps_cg = 0.1)."""
        m = self.margins(w)
        f, g, D = self.smoothed(w, m, mu)
        it = 0
        while np.linalg.norm(g) > gtol and it < max_iter:
            it += 1
            s, r, cg_tol = np.zeros_like(w), -g, 0.1 * np.linalg.norm(g)
            p, rr = r.copy(), r @ r
            while True:
                self.passes += 1  # X p and X^T (D X p) in one pass over the rows
                Hp = p + self.Xt @ (D * (self.X @ p))
                a = rr / (p @ Hp)
                s, r, rr_old = s + a * p, r - a * Hp, rr
                rr = r @ r
                if np.sqrt(rr) <= cg_tol:
                    break
                p = r + rr / rr_old * p
            xs = self.margins(s)  # the line search's trials take no pass (m + t Xs)
            t, gs = 1.0, g @ s
            while t > 1e-10:
                mt = m + t * xs
                ft = 0.5 * (w + t * s) @ (w + t * s) + self.C * smoothed_loss(1.0 - mt, mu).sum()
                if ft <= f + 0.01 * t * gs:
                    break
                t /= 2
            w, m = w + t * s, mt
            f, g, D = self.smoothed(w, m, mu)
        return w, m, it

    def gap(self, w, m, mu):
        """The hinge's primal at w and the dual at alpha from the smoothed gradient."""
        a = self.C * np.clip((1.0 - m) / mu, 0.0, 1.0)
        self.passes += 1
        wa = self.xt(a)
        return self.hinge(w, m), a.sum() - 0.5 * wa @ wa


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="a LIBSVM file (.xz), binary")
    ap.add_argument("-c", type=float, default=1.0, dest="C")
    ap.add_argument("--mu", type=float, default=1.0, help="the first stage's smoothing")
    ap.add_argument("--shrink", type=float, default=0.1, help="mu's factor between stages")
    ap.add_argument("--gtol", type=float, default=1e-5, help="a stage's relative gradient norm")
    ap.add_argument("--gap", type=float, default=1e-4, help="stop at this relative hinge gap")
    a = ap.parse_args()
    with lzma.open(a.data) as f:
        X, y = load_svmlight_file(f)
    X, y = X.tocsr(), np.where(y > 0, 1.0, -1.0)
    pb = Problem(X, y, a.C)
    w, t_default = liblinear_run(X, y, 3, 0.1, a.C)  # -e 0.1: LIBLINEAR's default for -s 3
    p_default = pb.hinge(w, pb.margins(w))
    print(f"{a.data}: {X.shape[0]} x {X.shape[1]}; LIBLINEAR's defaults: primal "
          f"{p_default:.4f} in {t_default:.2f} s")
    pb.passes, w, mu, t0, best = 0, np.zeros(X.shape[1]), a.mu, time.perf_counter(), -np.inf
    while mu > 1e-8:
        gtol = a.gtol * np.linalg.norm(pb.smoothed(np.zeros_like(w), np.zeros(len(y)), mu)[1])
        w, m, it = pb.newton(w, mu, gtol)
        p, d = pb.gap(w, m, mu)
        best = max(best, d)
        print(f"  mu {mu:.0e}: {it:3d} Newton iterations, {pb.passes:6d} passes in all, primal "
              f"{p:.4f}, gap/P {(p - d) / p:.1e}, {time.perf_counter() - t0:.1f} s")
        if (p - d) / p <= a.gap:
            break
        mu *= a.shrink
    print(f"  f* >= {best:.4f} (the best dual): LIBLINEAR's defaults within "
          f"{(p_default - best) / best:.1e} of f*, the last iterate within {(p - best) / best:.1e}")


if __name__ == "__main__":
    main()
