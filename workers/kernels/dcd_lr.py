"""Dual coordinate descent for L2-regularized logistic regression on one CSR block
(Yu, Huang & Lin 2011, MLJ 85, "Dual coordinate descent methods for logistic regression
and maximum entropy models"; LIBLINEAR's ``-s 7``, ``solve_l2r_lr_dual``).

Problem: the dual ((6) of the LIBLINEAR paper, Fan et al. 2008, Appendix A.3) of
``min_w ½‖w‖² + C Σᵢ log(1 + e^{−yᵢwᵀxᵢ})``::

    min_α  ½ αᵀQα + Σᵢ [αᵢ log αᵢ + (Cᵢ − αᵢ) log(Cᵢ − αᵢ)]   s.t. 0 < αᵢ < Cᵢ,

Qᵢⱼ = yᵢyⱼxᵢᵀxⱼ, with w = Σ αᵢyᵢxᵢ maintained as in the SVM kernel; P(w*) equals
``−(½‖w‖² + Σᵢ [αᵢ log αᵢ + (Cᵢ − αᵢ) log(Cᵢ − αᵢ) − Cᵢ log Cᵢ])`` at the optimum.
The paper's dual CD method (its Algorithm 5 as LIBLINEAR's source numbers it, in the
version LIBLINEAR implements, which this follows step by step): each coordinate's
sub-problem is solved by a modified Newton method on
``g(z) = z log z + (C − z) log(C − z) + ½a(z − αᵢ)² + b(z − αᵢ)``
(a = ‖xᵢ‖², b = yᵢwᵀxᵢ), in the variable z = αᵢ or z = C − αᵢ, whichever
the sign of g′ at the midpoint picks (it keeps z away from C, where the logarithm
loses precision), both kept (``alpha``, ``alpha_c``); a Newton step
that leaves (0, C) is replaced by z ← ηz, η = 0.1; the inner tolerance starts at
10⁻² and shrinks ten-fold after a pass with ≤ n/10 inner steps, down to
min(10⁻⁸, eps).  Stopping: max |g′(αᵢ)| over a pass < eps.  No shrinking (LIBLINEAR has none
for this solver).  Initial α: min(0.001·Cᵢ, 10⁻⁸) and its w part.

What the distributed version changes: as the SVM kernel, it runs on one block at a time with
``w`` passed from block to block; the inner tolerance is kept per block (LIBLINEAR's is one
for the whole problem and adapts on its whole pass).  ``upper`` is the per-row Cᵢ (C times
the row's weight), float64.
"""

import numba
import numpy as np

from ..losses import logistic_dual, logistic_dual_d1, logistic_dual_d2
from .linear import AHEAD, PREFETCH_MIN, prefetch, row_dot, stop_asked

MAX_INNER = 100  # Newton steps per coordinate (LIBLINEAR's max_inner_iter)
ETA = 0.1  # the paper's ξ: z ← ηz when a Newton step leaves (0, C)


@numba.njit(cache=True, nogil=True)
def _add_row(indptr, indices, data, i, w, bias, n_features, d):
    for k in range(indptr[i], indptr[i + 1]):
        w[indices[k]] += d * data[k]
    if bias >= 0.0:
        w[n_features] += d * bias


@numba.njit(cache=True, nogil=True)
def lr_passes(indptr, indices, data, y, positive, sqnorm, w, bias, n_features, alpha, alpha_c,
              upper, index, innereps, eps, n_passes, seed, stop=None):
    """Up to ``n_passes`` passes of dual CD for logistic regression over the block's rows.

    Rows with ``alpha`` = 0 (never visited) first get the initial α and add αᵢyᵢxᵢ to ``w``.
    Updates ``w``, ``alpha``, ``alpha_c`` (= Cᵢ − αᵢ), ``index`` in place.  Returns
    ``(gmax, full, converged, innereps, entropy)``: max |g′| of the last pass, whether that
    pass covered every row, whether it was < eps, the inner tolerance for the next visit, and
    Σᵢ [αᵢ log αᵢ + (Cᵢ − αᵢ) log(Cᵢ − αᵢ) − Cᵢ log Cᵢ] (≤ 0), the non-quadratic part of the
    dual objective.  ``stop``: a time budget's flag, as :func:`.dcd.dcd_passes`' (a pass it
    ends is not ``full`` and leaves the inner tolerance as it was).
    """
    np.random.seed(seed)
    n = len(alpha)
    ahead = len(indices) >= PREFETCH_MIN
    bias_sq = bias * bias if bias >= 0.0 else 0.0
    innereps_min = min(1.0e-8, eps)
    for i in range(n):
        if alpha[i] == 0.0 and upper[i] > 0.0:
            a0 = min(0.001 * upper[i], 1.0e-8)
            alpha[i], alpha_c[i] = a0, upper[i] - a0
            _add_row(indptr, indices, data, i, w, bias, n_features,
                     a0 if y[i] == positive else -a0)
    gmax = 0.0
    full, converged = True, False
    for _ in range(n_passes):
        for s in range(n):
            j = np.random.randint(s, n)
            index[s], index[j] = index[j], index[s]
        newton_iter = 0
        gmax = 0.0
        for s in range(n):
            if stop_asked(stop, s):
                full = False
                break
            if ahead and s + AHEAD < n:  # the rows to come (linear.prefetch)
                prefetch(index[s + AHEAD], indptr, upper, y, alpha, alpha_c, sqnorm)
                prefetch(indptr[index[s + AHEAD // 2]], indices, data)
            i = index[s]
            if upper[i] == 0.0:  # a row of cost 0 keeps αᵢ = 0 (LIBLINEAR drops it)
                continue
            yi = 1.0 if y[i] == positive else -1.0
            C = upper[i]
            a = sqnorm[i] + bias_sq
            b = yi * row_dot(indptr, indices, data, i, w, bias, n_features)
            sign = 1.0
            old = alpha[i]
            if 0.5 * a * (alpha_c[i] - alpha[i]) + b < 0.0:  # minimize over z = C − αᵢ
                sign = -1.0
                old = alpha_c[i]
            z = old
            if C - z < 0.5 * C:
                z = 0.1 * z
            gp = a * (z - old) + sign * b + logistic_dual_d1(z, C)
            gmax = max(gmax, abs(gp))
            inner = 0
            while inner <= MAX_INNER:
                if abs(gp) < innereps:
                    break
                gpp = a + logistic_dual_d2(z, C)
                tmpz = z - gp / gpp
                z = z * ETA if tmpz <= 0.0 else tmpz
                gp = a * (z - old) + sign * b + logistic_dual_d1(z, C)
                newton_iter += 1
                inner += 1
            if inner > 0:
                if sign > 0.0:
                    alpha[i], alpha_c[i] = z, C - z
                else:
                    alpha_c[i], alpha[i] = z, C - z
                _add_row(indptr, indices, data, i, w, bias, n_features, sign * (z - old) * yi)
        if not full:
            break
        if gmax < eps:
            converged = True
            break
        if newton_iter <= n / 10:
            innereps = max(innereps_min, 0.1 * innereps)
    entropy = 0.0
    for i in range(n):
        if upper[i] > 0.0:
            entropy += logistic_dual(alpha[i], alpha_c[i], upper[i])
    return gmax, full, converged, innereps, entropy
