"""Primal coordinate descent over a CSC column block (Chang, Hsieh & Lin 2008, JMLR 9).

Problem (LIBLINEAR's ``-s 2`` and ``-s 0`` problems, solved in the primal)::

    min_w f(w) = ½ wᵀw + Σⱼ Cⱼ ξ(bⱼ(w)),   bⱼ(w) = 1 − yⱼ wᵀxⱼ                    (1), (8)
    L2-loss SVM (squared hinge):  ξ(b) = max(b, 0)²                               (3)
    logistic regression:          ξ(b) = log(1 + e^{−(1−b)}) = log(1 + e^{−yⱼwᵀxⱼ})  (4)

Algorithm 1 (one outer iteration = every feature once, in a random order, §3.2)
with each one-variable sub-problem Dᵢ(z) = f(w + z eᵢ) solved approximately by
Algorithm 2: the Newton direction d = −D′ᵢ(0)/D″ᵢ(0) (13), with D′ᵢ(0) from (9)
and the generalized second derivative D″ᵢ(0) of (10), then λ = 1, β, β², … until
z = λd meets the sufficient decrease condition (12) Dᵢ(z) − Dᵢ(0) ≤ −σz², σ = 0.01,
β = 0.5.  Before evaluating Dᵢ(λd) by (18), λ is checked against λ̄ = D″ᵢ(0)/(Hᵢ/2 + σ)
(15), with Hᵢ = 1 + 2C Σⱼ xⱼᵢ² (14) precomputed (``colsq``, by
:func:`distsvm.workers.kernels.linear.row_sqnorms` on the CSC arrays); when λ ≤ λ̄ (12) holds without
evaluating anything.  ``b`` is kept up to date by (17), bⱼ ← bⱼ − z yⱼ xⱼᵢ, so a
sub-problem costs O(nnz of the column).  ξ, ξ′, ξ″ and the bound sup ξ″ of (14) are
:mod:`distsvm.workers.losses`'s functions of the margin yⱼwᵀxⱼ = 1 − bⱼ.

Logistic regression (§6.2): D′ᵢ(0) and D″ᵢ(0) are the formulas of §6.2, written
with τⱼ = 1/(1 + e^{yⱼwᵀxⱼ}); the line search is the same.  The paper leaves Hᵢ
for this loss open; we take the bound on D″ᵢ everywhere, Hᵢ = 1 + (C/4) Σⱼ xⱼᵢ²
(τ(1−τ) ≤ ¼), for which the proof of Theorem 1 (A.1) goes through unchanged.

The bias feature (LIBLINEAR's ``-B``), a column holding ``bias`` in every row,
is handled by the same code as a *dense* column (:func:`pcd_bias`).

Weights: the paper's C is one for all rows; row j here costs Cⱼ = ``cost[j]`` (C times
its class and instance weights, LIBLINEAR's ``-wi`` and ``-W``), which multiplies row j's
terms of (9), (10), (18) and the loss.  (14) then takes max Cⱼ for C, still an upper bound
on D″ᵢ, so (15) stays valid.

Kernels update ``w`` and ``b`` in place, never write to the data, and return scalars.
"""

import numba
import numpy as np

from ..losses import d2xi, d2xi_max, dxi, xi_slack
from .linear import AHEAD, PREFETCH_MIN, column_entry, prefetch

SIGMA = 0.01  # (12)
BETA = 0.5  # Algorithm 2

# Layout of the float64 ``stats`` array a pass accumulates into (in place).
MAX_GRAD, SUM_GRAD_SQ, INNER, SHORTCUT, FULL_STEP, EVALS, MAX_GRAD0, SUM_GRAD0_SQ = range(8)
N_STATS = 8


def new_stats():
    return np.zeros(N_STATS)


@numba.njit(cache=True, nogil=True)
def derivatives(lo, hi, indices, data, dense, dval, y, positive, b, wi, loss, cost):
    """(D′ᵢ(0), D″ᵢ(0), Σⱼ Cⱼyⱼxⱼᵢ) for the column whose entries are lo..hi: (9)-(10), or §6.2:
    D′ᵢ(0) = wᵢ + Σⱼ Cⱼyⱼxⱼᵢξ′(mⱼ) and D″ᵢ(0) = 1 + Σⱼ Cⱼxⱼᵢ²ξ″(mⱼ) at mⱼ = 1 − bⱼ."""
    g = 0.0
    h = 0.0
    sy = 0.0
    for k in range(lo, hi):
        j, x = column_entry(k, indices, data, dense, dval)
        yx = x if y[j] == positive else -x
        c = cost[j]
        sy += c * yx
        m = 1.0 - b[j]
        g += c * yx * dxi(m, loss)
        h += c * x * x * d2xi(m, loss)
    return wi + g, 1.0 + h, sy


@numba.njit(cache=True, nogil=True)
def delta(lo, hi, indices, data, dense, dval, y, positive, b, wi, z, loss, cost):
    """Dᵢ(z) − Dᵢ(0) by (18): only the rows of the column's non-zeros change."""
    s = 0.0
    for k in range(lo, hi):
        j, x = column_entry(k, indices, data, dense, dval)
        yx = x if y[j] == positive else -x
        s += cost[j] * (xi_slack(b[j] - z * yx, loss) - xi_slack(b[j], loss))
    return 0.5 * (wi + z) * (wi + z) - 0.5 * wi * wi + s


@numba.njit(cache=True, nogil=True)
def _solve(lo, hi, indices, data, dense, dval, colsq, y, positive, b, w, i, loss, cost, C,
           first, stats):
    """Algorithm 2 on feature i; updates w[i] and b (17) in place, accumulates ``stats``.
    ``C`` is max Cⱼ, for (14)."""
    wi = w[i]
    D1, D2, sy = derivatives(lo, hi, indices, data, dense, dval, y, positive, b, wi, loss, cost)
    stats[INNER] += 1.0
    stats[MAX_GRAD] = max(stats[MAX_GRAD], abs(D1))
    stats[SUM_GRAD_SQ] += D1 * D1
    if first:  # ∇f(0)ᵢ, the scale of the stopping rule: every bⱼ(0) = 1, mⱼ = 0
        g0 = dxi(0.0, loss) * sy
        stats[MAX_GRAD0] = max(stats[MAX_GRAD0], abs(g0))
        stats[SUM_GRAD0_SQ] += g0 * g0
    if D1 == 0.0:
        return
    d = -D1 / D2  # (13)
    H = 1.0 + d2xi_max(loss) * C * colsq  # (14)
    lam_bar = D2 / (0.5 * H + SIGMA)  # (15)
    lam = 1.0
    while True:
        if lam <= lam_bar:  # (15): (12) holds, no need to evaluate Dᵢ(λd)
            if lam == 1.0:
                stats[SHORTCUT] += 1.0
            break
        z = lam * d
        stats[EVALS] += 1.0
        if delta(lo, hi, indices, data, dense, dval, y, positive, b, wi, z, loss, cost) \
                <= -SIGMA * z * z:  # (12)
            break
        lam *= BETA
    if lam == 1.0:
        stats[FULL_STEP] += 1.0
    z = lam * d
    w[i] = wi + z
    for k in range(lo, hi):  # (17)
        j, x = column_entry(k, indices, data, dense, dval)
        b[j] -= z * x if y[j] == positive else -z * x


@numba.njit(cache=True, nogil=True)
def pcd_columns(indptr, indices, data, col_start, colsq, y, positive, b, w, loss, cost, seed,
                first, stats):
    """Algorithm 1's inner iterations over one column block, in a random order (§3.2).

    Feature c of the block is w[col_start + c].  Updates ``w``, ``b`` and
    ``stats`` in place (``first``: also record ∇f(0) of these features).
    """
    np.random.seed(seed)
    C = cost.max() if len(cost) else 0.0
    n = len(indptr) - 1
    order = np.arange(n)
    for s in range(n - 1):
        t = np.random.randint(s, n)
        order[s], order[t] = order[t], order[s]
    for s in range(n):
        if len(indices) >= PREFETCH_MIN and s + AHEAD < n:  # the columns to come (linear.prefetch)
            prefetch(order[s + AHEAD], indptr, colsq)
            prefetch(indptr[order[s + AHEAD // 2]], indices, data)
        c = order[s]
        _solve(indptr[c], indptr[c + 1], indices, data, False, 0.0, colsq[c], y, positive, b,
               w, col_start + c, loss, cost, C, first, stats)


@numba.njit(cache=True, nogil=True)
def pcd_bias(bias, y, positive, b, w, i, loss, cost, first, stats):
    """One inner iteration on the bias feature w[i], the dense column of value ``bias``."""
    n = len(b)
    dummy_i = np.zeros(1, dtype=np.int32)
    dummy_x = np.zeros(1, dtype=np.float32)
    C = cost.max() if n else 0.0
    _solve(0, n, dummy_i, dummy_x, True, bias, n * bias * bias, y, positive, b, w, i, loss, cost,
           C, first, stats)


@numba.njit(cache=True, nogil=True)
def residuals(indptr, indices, data, col_start, y, positive, w, b):
    """bⱼ(w) from bⱼ(0) = 1: (17) with z = wᵢ for every feature i of a column block,
    bⱼ ← bⱼ − wᵢyⱼxⱼᵢ (feature c of the block is w[col_start + c]); updates ``b``."""
    for c in range(len(indptr) - 1):
        wi = w[col_start + c]
        if wi == 0.0:
            continue
        for k in range(indptr[c], indptr[c + 1]):
            j = indices[k]
            x = np.float64(data[k])
            b[j] -= wi * x if y[j] == positive else -wi * x


@numba.njit(cache=True, nogil=True)
def loss_sum(b, db, t, loss, cost):
    """Σⱼ Cⱼ ξ(bⱼ + t·dbⱼ) (db may be empty: t is then ignored)."""
    s = 0.0
    if len(db) == 0:
        for j in range(len(b)):
            s += cost[j] * xi_slack(b[j], loss)
    else:
        for j in range(len(b)):
            s += cost[j] * xi_slack(b[j] + t * db[j], loss)
    return s
