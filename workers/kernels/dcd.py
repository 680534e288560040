"""Dual coordinate descent on one CSR block (Hsieh, Chang, Lin, Keerthi & Sundararajan 2008).

Problem (the dual (4) of the L1-/L2-loss SVM, LIBLINEAR's ``-s 1`` and ``-s 3``)::

    min_α  ½ αᵀ(Q + D)α − eᵀα   s.t. 0 ≤ αᵢ ≤ U,   Qᵢⱼ = yᵢyⱼxᵢᵀxⱼ
    L1 loss (hinge):          Dᵢᵢ = 0,        Uᵢ = Cᵢ
    L2 loss (squared hinge):  Dᵢᵢ = 1/(2Cᵢ),  Uᵢ = ∞      (distsvm.workers.losses.dual_diag, dual_upper)

with w = Σ yᵢαᵢxᵢ maintained by (13), so the gradient (12) costs one sparse dot.
Cᵢ is row i's cost (``cost``, float64): C times its class and instance weights, the
per-instance C that LIBLINEAR's ``solve_l2r_l1l2_svc`` takes for ``-wi`` and ``-W`` (the
paper's Table 1 with C replaced by Cᵢ row by row).  See Algorithm 1 of the paper; the
permutation of §3.1 and the shrinking of §3.2 (conditions (16), stopping rule (17)) follow LIBLINEAR's
``solve_l2r_l1l2_svc``.

What the distributed version changes: the kernel runs on one block of rows at
a time (block minimization, Yu, Hsieh, Chang & Lin 2010), so the shrinking
state — the active set and the previous pass's (M, m) of (16) — is kept per
block between visits by the caller.  ``w`` is shared by all blocks and updated
in place; every other array except ``alpha``, ``index`` and ``state`` is read only.
"""

import numba
import numpy as np

from ..losses import dual_diag, dual_upper, xi
from .linear import AHEAD, PREFETCH_MIN, prefetch, row_dot, stop_asked

# Layout of the per-block float64 ``state`` array carried between visits.
ACTIVE, PG_MAX_OLD, PG_MIN_OLD = 0, 1, 2
STATE_SIZE = 3


def new_state(n_rows):
    """Fresh shrinking state: all rows active, no thresholds yet (M = ∞, m = −∞)."""
    return np.array([n_rows, np.inf, -np.inf]), np.arange(n_rows, dtype=np.int32)


@numba.njit(cache=True, nogil=True)
def dcd_passes(indptr, indices, data, y, positive, sqnorm, w, bias, n_features,
               alpha, index, state, loss, cost, eps, n_passes, seed, sigma=1.0, unshrink=True,
               stop=None):
    """Run up to ``n_passes`` outer iterations of DCD with shrinking on one block.

    Updates ``w``, ``alpha``, ``index`` (the permutation buffer whose first
    ``state[ACTIVE]`` entries are the active rows) and ``state`` in place.
    Returns ``(pg_max, pg_min, full, converged, sum_alpha, sum_dsq)``:
    the projected-gradient extremes of the last pass, whether that pass covered
    every row, whether (17) held on a full pass, and Σα, ΣDᵢᵢαᵢ² of the block.

    When a pass meets (17) on a shrunken active set, the block reactivates all
    its rows for the next pass if ``unshrink``, as LIBLINEAR does for the whole
    problem; otherwise the call stops there and leaves the rows shrunk — even
    all of them — for the caller to reactivate (the sequential block mode does
    it for all blocks at once, on (17) over all of them).

    ``sigma`` > 1 solves CoCoA+'s local subproblem (Ma et al., ICML 2015) with
    σ′ = sigma instead: ``w`` then holds w₀ + σ′·Δw of this block's updates, so
    the gradient (12) is taken at that point, the quadratic term of (9) is
    Q̄ᵢᵢ = σ′(‖xᵢ‖² + bias²) + Dᵢᵢ, and the update (13) adds σ′·Δαᵢyᵢxᵢ.

    ``stop`` (a one-element array, or None): once another thread sets it non-zero (a time
    budget's deadline), the pass ends at the next poll (:func:`.linear.stop_asked`) — w and α
    consistent as after any row —, reported as not ``full``, the shrinking thresholds left
    as they were.
    """
    np.random.seed(seed)
    n = len(alpha)
    ahead = len(indices) >= PREFETCH_MIN
    bias_sq = bias * bias if bias >= 0.0 else 0.0
    pg_max_new, pg_min_new = -np.inf, np.inf
    full = False
    converged = False
    for _ in range(n_passes):
        active = int(state[ACTIVE])
        pg_max_old, pg_min_old = state[PG_MAX_OLD], state[PG_MIN_OLD]
        pg_max_new, pg_min_new = -np.inf, np.inf
        for s in range(active):  # §3.1: random permutation of the active rows
            j = np.random.randint(s, active)
            index[s], index[j] = index[j], index[s]
        s = 0
        cut = False
        while s < active:
            if stop_asked(stop, s):
                cut = True
                break
            if ahead and s + AHEAD < active:  # the rows to come (linear.prefetch)
                prefetch(index[s + AHEAD], indptr, y, cost, alpha, sqnorm)
                prefetch(indptr[index[s + AHEAD // 2]], indices, data)
            i = index[s]
            yi = 1.0 if y[i] == positive else -1.0
            diag, upper = dual_diag(cost[i], loss), dual_upper(cost[i], loss)
            G = yi * row_dot(indptr, indices, data, i, w, bias, n_features) - 1.0 + diag * alpha[i]  # (12)
            PG = 0.0
            if alpha[i] == 0.0:
                if G > pg_max_old:  # (16): shrink
                    active -= 1
                    index[s], index[active] = index[active], index[s]
                    continue
                if G < 0.0:
                    PG = G
            elif alpha[i] == upper:
                if G < pg_min_old:  # (16): shrink
                    active -= 1
                    index[s], index[active] = index[active], index[s]
                    continue
                if G > 0.0:
                    PG = G
            else:
                PG = G
            pg_max_new = max(pg_max_new, PG)
            pg_min_new = min(pg_min_new, PG)
            if abs(PG) > 1.0e-12:
                qd = sigma * (sqnorm[i] + bias_sq) + diag
                old = alpha[i]
                if qd > 0.0:
                    alpha[i] = min(max(old - G / qd, 0.0), upper)  # (9)
                else:  # xᵢ = 0 in L1-SVM without bias: 1/Q̄ᵢᵢ = ∞ (§2), G = −1 sends αᵢ to U
                    alpha[i] = upper if G < 0.0 else 0.0
                d = sigma * (alpha[i] - old) * yi
                for k in range(indptr[i], indptr[i + 1]):  # (13)
                    w[indices[k]] += d * data[k]
                if bias >= 0.0:
                    w[n_features] += d * bias
            s += 1
        state[ACTIVE] = active
        if cut:
            full = False
            break
        full = active == n
        if pg_max_new - pg_min_new <= eps:  # (17)
            if full:
                converged = True
                break
            if not unshrink:
                break
            state[ACTIVE] = n  # solved the shrunken problem: unshrink and re-check on all rows
            state[PG_MAX_OLD], state[PG_MIN_OLD] = np.inf, -np.inf
            continue
        state[PG_MAX_OLD] = pg_max_new if pg_max_new > 0.0 else np.inf
        state[PG_MIN_OLD] = pg_min_new if pg_min_new < 0.0 else -np.inf
    if n == 0:
        pg_max_new, pg_min_new, full, converged = 0.0, 0.0, True, True
    sum_alpha = 0.0
    for i in range(n):
        sum_alpha += alpha[i]
    return pg_max_new, pg_min_new, full, converged, sum_alpha, dual_dsq(alpha, loss, cost)


@numba.njit(cache=True, nogil=True)
def dual_dsq(alpha, loss, cost):
    """ΣDᵢᵢαᵢ², the quadratic term of (4) that Q̄ = Q + D adds to ½αᵀQα."""
    total = 0.0
    for i in range(len(alpha)):
        total += dual_diag(cost[i], loss) * alpha[i] * alpha[i]
    return total


@numba.njit(cache=True, nogil=True)
def dual_stats(indptr, indices, data, y, positive, w, bias, n_features, alpha, loss, cost):
    """Statistics of one block at ``w`` for the given ``alpha``, in one pass over its rows.

    Returns ``(Σ Cᵢ loss, rows with yᵢwᵀxᵢ > 0, max PG, min PG, Σα, ΣDᵢᵢαᵢ²)``: the
    primal loss term, and the projected-gradient extremes of (17) and the sums the
    dual objective needs, which are exact when w = Σ αᵢyᵢxᵢ.
    """
    total, correct = 0.0, 0
    pg_max, pg_min, sum_alpha, sum_dsq = 0.0, 0.0, 0.0, 0.0
    for i in range(len(alpha)):
        yi = 1.0 if y[i] == positive else -1.0
        diag, upper = dual_diag(cost[i], loss), dual_upper(cost[i], loss)
        m = yi * row_dot(indptr, indices, data, i, w, bias, n_features)
        if m > 0.0:
            correct += 1
        total += cost[i] * xi(m, loss)
        G = m - 1.0 + diag * alpha[i]  # (12)
        if alpha[i] == 0.0:
            PG = min(G, 0.0)
        elif alpha[i] == upper:
            PG = max(G, 0.0)
        else:
            PG = G
        pg_max = max(pg_max, PG)
        pg_min = min(pg_min, PG)
        sum_alpha += alpha[i]
        sum_dsq += diag * alpha[i] * alpha[i]
    return total, correct, pg_max, pg_min, sum_alpha, sum_dsq


@numba.njit(cache=True, nogil=True)
def step_terms(alpha, delta, loss, cost):
    """The block's terms of the dual objective along ``alpha + t·delta`` (the exact line
    search of the parallel ``line`` mode): ``(Σ (Dᵢᵢαᵢ − 1)δᵢ, Σ Dᵢᵢδᵢ², t_max)`` with t_max
    the largest t that keeps every 0 ≤ αᵢ + tδᵢ ≤ Uᵢ (≥ 1: α + δ is feasible)."""
    lin, quad, t_max = 0.0, 0.0, np.inf
    for i in range(len(alpha)):
        d = delta[i]
        if d == 0.0:
            continue
        diag = dual_diag(cost[i], loss)
        lin += (diag * alpha[i] - 1.0) * d
        quad += diag * d * d
        if d < 0.0:
            t_max = min(t_max, alpha[i] / -d)
        else:
            upper = dual_upper(cost[i], loss)
            if upper < np.inf:
                t_max = min(t_max, (upper - alpha[i]) / d)
    return lin, quad, t_max
