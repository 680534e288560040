"""Dual coordinate descent for support vector regression on one CSR block.

Problem (Fan et al. 2008, Appendix A.6, the dual (10) of L2-regularized SVR; LIBLINEAR's
``-s 13`` L1-loss and ``-s 12`` L2-loss SVR, ``solve_l2r_l1l2_svr``)::

    min_β  ½ βᵀ(Q + D)β − yᵀβ + p Σᵢ|βᵢ|   s.t. −Uᵢ ≤ βᵢ ≤ Uᵢ,   Qᵢⱼ = xᵢᵀxⱼ
    L1-loss SVR:  Dᵢᵢ = 0,        Uᵢ = Cᵢ
    L2-loss SVR:  Dᵢᵢ = 1/(2Cᵢ),  Uᵢ = ∞           (distsvm.workers.losses.svr_diag, svr_upper)

with y the real targets, p the tube's half-width (``-p``) and w = Σ βᵢxᵢ maintained as
the β move, so that the gradient G = wᵀxᵢ − yᵢ + Dᵢᵢβᵢ of the smooth part costs one sparse
dot.  The one-variable problem min_d ½H d² + G d + p|βᵢ + d| (H = ‖xᵢ‖² + Dᵢᵢ) has the
closed form of A.6: d = −(G + p)/H if G + p < Hβᵢ, −(G − p)/H if G − p > Hβᵢ, else −βᵢ,
then clipped to [−Uᵢ, Uᵢ].  The minimum-norm subgradient's size ("violation") of each row,
the shrinking tests against the previous pass's largest violation M̄, and the stopping rule
Σ violation ≤ eps · (Σ violation of the first pass) follow ``solve_l2r_l1l2_svr`` of
LIBLINEAR 2.50 line by line.  Cᵢ is row i's cost (C times its instance weight; LIBLINEAR
has one C for all rows).

The distributed version runs the kernel on one block at a time (block minimization, as
:mod:`distsvm.workers.kernels.dcd`); the block's shrinking state (active rows, M̄, and the first
pass's Σ violation) is kept by the caller between visits, and the coordinator takes the
stopping test over all blocks.  ``w`` is updated in place; so are ``beta``, ``index`` and
``state``; every other array is read only.
"""

import numba
import numpy as np

from ..losses import svr_diag, svr_upper, xi_residual
from .linear import AHEAD, PREFETCH_MIN, prefetch, row_dot, stop_asked

# Layout of the per-block float64 ``state`` array carried between visits.
ACTIVE, GMAX_OLD, GNORM1_INIT = 0, 1, 2
STATE_SIZE = 3


def new_state(n_rows):
    """Fresh shrinking state: every row active, M̄ = ∞, no first-pass norm yet (−1)."""
    return np.array([n_rows, np.inf, -1.0]), np.arange(n_rows, dtype=np.int32)


@numba.njit(cache=True, nogil=True)
def svr_passes(indptr, indices, data, target, sqnorm, w, bias, n_features, beta, index, state,
               loss, cost, p, eps, n_passes, seed, unshrink=True, stop=None):
    """Run up to ``n_passes`` passes (LIBLINEAR's iterations) of SVR dual CD on one block.

    Returns ``(gmax, gnorm1, full, converged, sum_lin, sum_dsq)`` of the last pass: its
    largest and summed violation over the rows it visited, whether it covered every row,
    whether the stopping rule held on such a pass, and Σ(yᵢβᵢ − p|βᵢ|) and ΣDᵢᵢβᵢ² of the
    block (the dual objective's terms).  ``state[GNORM1_INIT]`` < 0 is set to the first
    pass's Σ violation, as LIBLINEAR does at iteration 0.

    When a pass meets the stopping rule on a shrunken active set, the block reactivates
    every row (M̄ = ∞) for the next pass if ``unshrink``; otherwise the call stops there
    and leaves the rows shrunk, for the caller to reactivate.

    ``stop``: a time budget's flag, as :func:`.dcd.dcd_passes`' (a pass it ends is not
    ``full``, its Σ violation not the first pass's, M̄ left as it was).
    """
    rng = _lcg(np.uint64(seed) + np.uint64(1))
    n = len(beta)
    bias_sq = bias * bias if bias >= 0.0 else 0.0
    ahead = len(indices) >= PREFETCH_MIN
    last_c, lam, upper = np.nan, 0.0, 0.0  # λᵢ, Uᵢ of the last cost seen (rows share it)
    gmax_new, gnorm1_new = 0.0, 0.0
    full = False
    converged = False
    for _ in range(n_passes):
        active = int(state[ACTIVE])
        gmax_old = state[GMAX_OLD]
        gmax_new, gnorm1_new = 0.0, 0.0
        for s in range(active):  # random permutation of the active rows
            rng = _lcg(rng)
            j = s + int((rng >> np.uint64(33)) % np.uint64(active - s))
            index[s], index[j] = index[j], index[s]
        s = 0
        cut = False
        while s < active:
            if stop_asked(stop, s):
                cut = True
                break
            if ahead and s + AHEAD < active:  # the rows to come (linear.prefetch)
                prefetch(index[s + AHEAD], indptr, cost, target, beta, sqnorm)
                prefetch(indptr[index[s + AHEAD // 2]], indices, data)
            i = index[s]
            if cost[i] != last_c:
                last_c = cost[i]
                lam, upper = svr_diag(last_c, loss), svr_upper(last_c, loss)
            G = row_dot(indptr, indices, data, i, w, bias, n_features) - target[i] + lam * beta[i]
            H = sqnorm[i] + bias_sq + lam
            Gp, Gn = G + p, G - p
            violation = 0.0
            b = beta[i]
            if b == 0.0:
                if Gp < 0.0:
                    violation = -Gp
                elif Gn > 0.0:
                    violation = Gn
                elif Gp > gmax_old and Gn < -gmax_old:  # shrink
                    active -= 1
                    index[s], index[active] = index[active], index[s]
                    continue
            elif b >= upper:
                if Gp > 0.0:
                    violation = Gp
                elif Gp < -gmax_old:  # shrink
                    active -= 1
                    index[s], index[active] = index[active], index[s]
                    continue
            elif b <= -upper:
                if Gn < 0.0:
                    violation = -Gn
                elif Gn > gmax_old:  # shrink
                    active -= 1
                    index[s], index[active] = index[active], index[s]
                    continue
            elif b > 0.0:
                violation = abs(Gp)
            else:
                violation = abs(Gn)
            gmax_new = max(gmax_new, violation)
            gnorm1_new += violation
            s += 1
            if H <= 0.0:  # xᵢ = 0 and Dᵢᵢ = 0: p|βᵢ| − yᵢβᵢ, minimized at an end or at 0
                new = upper if Gp < 0.0 else (-upper if Gn > 0.0 else 0.0)
            else:  # the closed-form Newton step of A.6
                if Gp < H * b:
                    d = -Gp / H
                elif Gn > H * b:
                    d = -Gn / H
                else:
                    d = -b
                if abs(d) < 1.0e-12:
                    continue
                new = min(max(b + d, -upper), upper)
            d = new - b
            if d != 0.0:
                beta[i] = new
                for k in range(indptr[i], indptr[i + 1]):
                    w[indices[k]] += d * data[k]
                if bias >= 0.0:
                    w[n_features] += d * bias
        state[ACTIVE] = active
        if cut:
            full = False
            break
        full = active == n
        if state[GNORM1_INIT] < 0.0:
            state[GNORM1_INIT] = gnorm1_new
        if gnorm1_new <= eps * state[GNORM1_INIT]:
            if full:
                converged = True
                break
            if not unshrink:
                break
            state[ACTIVE] = n  # solved the shrunken problem: unshrink and re-check all rows
            state[GMAX_OLD] = np.inf
            continue
        state[GMAX_OLD] = gmax_new
    if n == 0:
        gmax_new, gnorm1_new, full, converged = 0.0, 0.0, True, True
    sum_lin, sum_dsq = dual_terms(beta, target, loss, cost, p)
    return gmax_new, gnorm1_new, full, converged, sum_lin, sum_dsq


@numba.njit(cache=True, nogil=True, inline="always")
def _lcg(state):
    """One step of Knuth's MMIX 64-bit LCG: the kernel's permutations (LIBLINEAR uses
    rand(); NumPy's bounded randint inside Numba cost a third of a -s 12 pass)."""
    return state * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)


@numba.njit(cache=True, nogil=True)
def dual_terms(beta, target, loss, cost, p):
    """Σ(yᵢβᵢ − p|βᵢ|) and ΣDᵢᵢβᵢ²: with ½‖w‖² the dual objective D(β) = Σ(yᵢβᵢ − p|βᵢ|)
    − ½‖w‖² − ½ΣDᵢᵢβᵢ² (the negative of (10)'s objective, LIBLINEAR's "Objective value")."""
    lin, dsq = 0.0, 0.0
    last_c, lam = np.nan, 0.0
    for i in range(len(beta)):
        b = beta[i]
        if b != 0.0:
            lin += target[i] * b - p * abs(b)
            if cost[i] != last_c:
                last_c = cost[i]
                lam = svr_diag(last_c, loss)
            dsq += lam * b * b
    return lin, dsq


@numba.njit(cache=True, nogil=True)
def svr_loss(indptr, indices, data, target, w, bias, n_features, loss, cost, p):
    """Σ Cᵢ ξ(wᵀxᵢ − yᵢ) (the primal loss term of A.6 (9)) and Σ (wᵀxᵢ − yᵢ)² of one block."""
    total, sq = 0.0, 0.0
    for i in range(len(indptr) - 1):
        r = row_dot(indptr, indices, data, i, w, bias, n_features) - target[i]
        total += cost[i] * xi_residual(r, p, loss)
        sq += r * r
    return total, sq
