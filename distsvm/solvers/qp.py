"""A small dense QP over a scaled simplex: the cutting-plane dual OP3 / OP5 over the working set.

Problem (Joachims 2006, OP3 restricted to the working set W, written as a minimization;
k = |W| is at most a few hundred)::

    min_α  f(α) = ½ αᵀHα − bᵀα     subject to  α ≥ 0,  Σ α ≤ C

with H positive semidefinite (a Gram matrix Hcd = g_cᵀg_d), possibly singular: constraints
repeat, coincide with others, or are zero when no row violates its margin.

Algorithm: SMO with second-order working-set selection (Fan, Chen & Lin, JMLR 2005,
"Working set selection using second order information for training SVM", WSS 2), the
method LIBSVM uses for one linear equality constraint.  A slack variable α₀ ≥ 0 with
zero row and column in H and b₀ = 0 turns ``Σ α ≤ C`` into ``Σ α + α₀ = C``; α₀ is the
multiplier of ``ξ ≥ 0``.  Each step moves mass t from one variable j (α_j > 0) to
another i along the feasible edge, t = min((∇_j − ∇_i)/a_ij, α_j), exactly minimizing f
on that edge, and updates the gradient ∇ = Hα − b in O(k).  Why this method:

* it needs nothing of H but symmetry and semidefiniteness — where a_ij = H_ii + H_jj −
  2H_ij ≤ 0 (a flat edge) it substitutes τ = 1e-12 as LIBSVM does, so the step goes to
  the bound; convergence for any PSD H is proved (Chen, Fan & Lin, IEEE TNN 2006,
  "A study on SMO-type decomposition methods for support vector machines").  Active-set
  and Goldfarb–Idnani methods need H positive definite or a regularizing ridge;
* warm starts are free: the previous round's α, with 0 for the new constraint, is
  feasible, and usually within a few steps of the new optimum;
* its stopping rule is in the units of the problem: ∇_c = wᵀg_c − b_c is minus the slack
  that constraint c needs, so the maximal violation max_{α_j>0} ∇_j − min_i ∇_i ≤ tol
  means every constraint in the support holds with the same ξ to within ``tol`` — the
  same units as the cutting-plane ε.

The KKT conditions solved: ∇_i ≥ λ for all i (including the slack, ∇₀ = 0), with
equality where α_i > 0.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

TAU = 1e-12  # LIBSVM's substitute for a non-positive curvature a_ij


@numba.njit(cache=True, nogil=True)
def _smo(H, b, alpha, grad, tol, max_iter):
    """SMO-WSS2 on min ½αᵀHα − bᵀα, α ≥ 0, Σα = const (α, grad updated in place).

    Returns (iterations, final maximal violation).
    """
    k = alpha.shape[0]
    it = 0
    gap = np.inf
    while it < max_iter:
        # i: the variable that most wants to grow (no upper bound besides the sum)
        i = 0
        for t in range(1, k):
            if grad[t] < grad[i]:
                i = t
        # the largest gradient among variables that can shrink
        gmax = -np.inf
        for t in range(k):
            if alpha[t] > 0.0 and grad[t] > gmax:
                gmax = grad[t]
        gap = gmax - grad[i]
        if gap <= tol:
            break
        # j: second-order choice among α_j > 0 with ∇_j > ∇_i (WSS 2)
        j = -1
        best = -np.inf
        for t in range(k):
            if alpha[t] > 0.0 and grad[t] > grad[i]:
                a = H[i, i] + H[t, t] - 2.0 * H[i, t]
                if a <= 0.0:
                    a = TAU
                d = grad[t] - grad[i]
                v = d * d / a
                if v > best:
                    best = v
                    j = t
        a = H[i, i] + H[j, j] - 2.0 * H[i, j]
        if a <= 0.0:
            a = TAU
        step = (grad[j] - grad[i]) / a
        if step >= alpha[j]:
            step = alpha[j]
            alpha[i] += step
            alpha[j] = 0.0
        else:
            alpha[i] += step
            alpha[j] -= step
        for t in range(k):
            grad[t] += step * (H[t, i] - H[t, j])
        it += 1
    return it, gap


@dataclasses.dataclass
class QPResult:
    alpha: np.ndarray  # (k,), α ≥ 0, Σα ≤ C
    objective: float  # bᵀα − ½αᵀHα, the dual value (to maximize)
    iterations: int
    violation: float  # max_{α_j>0} ∇_j − min ∇ at the end (≤ tol unless max_iter was hit)
    converged: bool


def solve(H, b, C: float, alpha0=None, *, tol: float = 1e-9, max_iter: int = 1_000_000):
    """Solve ``max bᵀα − ½αᵀHα s.t. α ≥ 0, Σα ≤ C`` (see the module docstring).

    ``alpha0`` warm-starts: it is clipped to α ≥ 0 and scaled onto Σα ≤ C if needed;
    missing trailing entries (new constraints) start at 0.  ``tol`` bounds the final
    maximal violation, in the units of b.
    """
    H = np.asarray(H, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    k = b.shape[0]
    if H.shape != (k, k):
        raise ValueError(f"H must be ({k}, {k}); got {H.shape}")
    if not C > 0:
        raise ValueError(f"C must be > 0; got {C!r}")
    Ha = np.zeros((k + 1, k + 1))
    Ha[:k, :k] = H
    ba = np.zeros(k + 1)
    ba[:k] = b
    alpha = np.zeros(k + 1)
    if alpha0 is not None:
        a0 = np.maximum(np.asarray(alpha0, dtype=np.float64)[:k], 0.0)
        s = a0.sum()
        alpha[: a0.shape[0]] = a0 * (C / s) if s > C else a0
    alpha[k] = C - alpha[:k].sum()  # the slack of ξ ≥ 0 takes the rest
    if alpha[k] < 0.0:
        alpha[k] = 0.0
    iters = 0
    for _ in range(3):  # recompute ∇ from scratch: the O(k) updates drift over many steps
        grad = Ha @ alpha - ba
        n, gap = _smo(Ha, ba, alpha, grad, float(tol), int(max_iter) - iters)
        iters += n
        if n == 0 or iters >= max_iter:
            break
    a = alpha[:k].copy()
    obj = float(b @ a - 0.5 * a @ H @ a)
    return QPResult(alpha=a, objective=obj, iterations=int(iters), violation=float(gap),
                    converged=bool(gap <= tol))
