"""L1-regularized linear classification over CSC column blocks (LIBLINEAR -s 5, -s 6).

Problems (Fan et al. 2008, 2022 revision, Appendices F and G; Yuan et al. 2010, 2012)::

    min_w ‖w‖₁ + Σⱼ Cⱼ max(0, 1 − yⱼwᵀxⱼ)²      (-s 5, CDN, Appendix F)
    min_w ‖w‖₁ + Σⱼ Cⱼ log(1 + e^{−yⱼwᵀxⱼ})     (-s 6, newGLMNET, Appendix G)

CDN (:func:`cdn_columns`): one feature at a time, the Newton direction of the
one-variable problem with the L1 term (Appendix F's d = −(G ± 1)/H, or −wⱼ), an
Armijo line search λ = 1, ½, ¼, … on f(w + λd eⱼ) − f(w) ≤ σλ(Gd + |wⱼ + d| − |wⱼ|),
first tested against the upper bound of the loss change Σ Cⱼxⱼⱼ²d² + G·d (LIBLINEAR's
``appxcond``) so that most steps need no evaluation; bⱼ = 1 − yⱼwᵀxⱼ kept up to date.

newGLMNET (:func:`glm_gradient`, :func:`glm_qp_columns`, :func:`glm_line_search`): at
each outer iteration the gradient and the diagonal of the Hessian of the loss (plus
ν = 1e-12), then coordinate descent on the quadratic model with the L1 term over
w + d (``wpd``) keeping Xd (``xTd``), then a line search on the full step.

Shrinking as LIBLINEAR: a feature with wⱼ = 0 whose gradient lies strictly inside
(−1 + M/l, 1 − M/l), M the largest violation of the previous pass, is skipped
(``active[j] = 0``).  Every kernel follows linear.cpp's ``solve_l1r_l2_svc`` /
``solve_l1r_lr`` line by line where the paper leaves a choice (our reading: their
constants, σ = 0.01, ≤ 20 line-search steps, the clip of z to ±10).  ``reg = False``
leaves the L1 term off feature ``n_features`` (the bias, LIBLINEAR's ``-R``).

Cⱼ = ``cost[j]`` (C times the class and instance weights).  Kernels update their
arrays in place and accumulate into the float64 ``stats`` array (layout below).
"""

import numba
import numpy as np

from ..losses import LOGISTIC, SQUARED_HINGE, d2xi, dxi, xi, xi_slack
from .linear import AHEAD, PREFETCH_MIN, column_entry, prefetch

SIGMA = 0.01
MAX_LINESEARCH = 20
NU = 1e-12

# stats layout: Gmax (largest violation), Gnorm1 (sum of violations), features visited,
# features shrunk, line-search evaluations, line searches that ran out of steps
GMAX, GNORM1, VISITED, SHRUNK, EVALS, LS_FAIL = range(6)
N_STATS = 6


def new_stats():
    return np.zeros(N_STATS)


@numba.njit(cache=True, nogil=True, inline="always")
def _violation(g, wj, reg):
    """The minimum-norm subgradient's size at wⱼ for gradient g of the loss, and whether
    wⱼ = 0 with g in (−1, 1) (a shrinking candidate): (violation, inside)."""
    if not reg:
        return abs(g), False
    gp = g + 1.0
    gn = g - 1.0
    if wj == 0.0:
        if gp < 0.0:
            return -gp, False
        if gn > 0.0:
            return gn, False
        return 0.0, True
    return (abs(gp), False) if wj > 0.0 else (abs(gn), False)


@numba.njit(cache=True, nogil=True)
def _cdn_feature(lo, hi, indices, data, dense, dval, y, positive, b, w, j, cost, reg,
                 shrink_at, stats):
    """Appendix F on feature j: returns True if it is shrunk (left out for the rest of the
    outer iteration), else updates w[j] and b."""
    g_loss = 0.0
    h = 0.0
    xj_sq = 0.0
    for k in range(lo, hi):
        r, x = column_entry(k, indices, data, dense, dval)
        c = cost[r]
        xj_sq += c * x * x
        if b[r] > 0.0:
            yx = x if y[r] == positive else -x
            g_loss -= c * yx * b[r]
            h += c * x * x
    g_loss *= 2.0
    g = g_loss
    h = max(2.0 * h, 1e-12)
    viol, inside = _violation(g, w[j], reg)
    if inside:
        gp = g + 1.0
        gn = g - 1.0
        if gp > shrink_at and gn < -shrink_at:
            stats[SHRUNK] += 1.0
            return True
    stats[VISITED] += 1.0
    stats[GMAX] = max(stats[GMAX], viol)
    stats[GNORM1] += viol
    wj = w[j]
    if not reg:
        d = -g / h
    elif g + 1.0 < h * wj:
        d = -(g + 1.0) / h
    elif g - 1.0 > h * wj:
        d = -(g - 1.0) / h
    else:
        d = -wj
    if abs(d) < 1.0e-12:
        return False
    delta = g * d if not reg else abs(wj + d) - abs(wj) + g * d
    d_old = 0.0
    loss_old = 0.0
    n_ls = 0
    while n_ls < MAX_LINESEARCH:
        d_diff = d_old - d
        cond = -SIGMA * delta if not reg else abs(wj + d) - abs(wj) - SIGMA * delta
        if xj_sq * d * d + g_loss * d + cond <= 0.0:  # the bound: no evaluation needed
            for k in range(lo, hi):
                r, x = column_entry(k, indices, data, dense, dval)
                b[r] += d_diff * x if y[r] == positive else -d_diff * x
            break
        stats[EVALS] += 1.0
        loss_new = 0.0
        for k in range(lo, hi):
            r, x = column_entry(k, indices, data, dense, dval)
            c = cost[r]
            if n_ls == 0 and b[r] > 0.0:
                loss_old += c * b[r] * b[r]
            bn = b[r] + (d_diff * x if y[r] == positive else -d_diff * x)
            b[r] = bn
            if bn > 0.0:
                loss_new += c * bn * bn
        cond += loss_new - loss_old
        if cond <= 0.0:
            break
        d_old = d
        d *= 0.5
        delta *= 0.5
        n_ls += 1
    if n_ls >= MAX_LINESEARCH:
        # LIBLINEAR recomputes all of b here; b holds the residuals at w[j] + d_old, so
        # moving it to w[j] + d by (17) is the same up to rounding
        stats[LS_FAIL] += 1.0
        d_diff = d_old - d
        for k in range(lo, hi):
            r, x = column_entry(k, indices, data, dense, dval)
            b[r] += d_diff * x if y[r] == positive else -d_diff * x
    w[j] = wj + d
    return False


@numba.njit(cache=True, nogil=True)
def _shuffled(n, active, col_start, seed):
    """The block's active features (local numbers) in a random order."""
    np.random.seed(seed)
    order = np.empty(n, dtype=np.int64)
    m = 0
    for c in range(n):
        if active[col_start + c]:
            order[m] = c
            m += 1
    for s in range(m - 1):
        t = np.random.randint(s, m)
        order[s], order[t] = order[t], order[s]
    return order[:m]


@numba.njit(cache=True, nogil=True)
def cdn_columns(indptr, indices, data, col_start, y, positive, b, w, cost, active, shrink_at,
                seed, stats):
    """One outer iteration's inner steps over a column block's active features (feature c
    is w[col_start + c]), in a random order; shrunk features get ``active = 0``."""
    order = _shuffled(len(indptr) - 1, active, col_start, seed)
    for s in range(len(order)):
        if len(indices) >= PREFETCH_MIN and s + AHEAD < len(order):  # (linear.prefetch)
            prefetch(order[s + AHEAD], indptr)
            prefetch(indptr[order[s + AHEAD // 2]], indices, data)
        c = order[s]
        if _cdn_feature(indptr[c], indptr[c + 1], indices, data, False, 0.0, y, positive, b,
                        w, col_start + c, cost, True, shrink_at, stats):
            active[col_start + c] = 0


@numba.njit(cache=True, nogil=True)
def cdn_bias(bias, y, positive, b, w, j, cost, reg, active, shrink_at, stats):
    """The same on the bias feature w[j], a dense column of value ``bias``."""
    if not active[j]:
        return
    dummy_i = np.zeros(1, dtype=np.int32)
    dummy_x = np.zeros(1, dtype=np.float32)
    if _cdn_feature(0, len(b), dummy_i, dummy_x, True, bias, y, positive, b, w, j, cost, reg,
                    shrink_at, stats):
        active[j] = 0


@numba.njit(cache=True, nogil=True)
def l2_loss_sum(b, cost):
    """Σⱼ Cⱼ max(0, bⱼ)²."""
    s = 0.0
    for r in range(len(b)):
        s += cost[r] * xi_slack(b[r], SQUARED_HINGE)
    return s


# ------------------------------------------------------------------------------ newGLMNET


@numba.njit(cache=True, nogil=True)
def _glm_gradient(lo, hi, indices, data, dense, dval, y, positive, tau, D, cost, w, j, reg,
                  shrink_at, grad, hdiag, active, stats):
    g = 0.0
    h = NU
    for k in range(lo, hi):
        r, x = column_entry(k, indices, data, dense, dval)
        h += x * x * D[r]
        g -= x * tau[r]
        if y[r] != positive:
            g += cost[r] * x
    grad[j] = g
    hdiag[j] = h
    viol, inside = _violation(g, w[j], reg)
    if inside and g + 1.0 > shrink_at and g - 1.0 < -shrink_at:
        active[j] = 0
        stats[SHRUNK] += 1.0
        return
    active[j] = 1
    stats[VISITED] += 1.0
    stats[GMAX] = max(stats[GMAX], viol)
    stats[GNORM1] += viol


@numba.njit(cache=True, nogil=True)
def glm_gradient(indptr, indices, data, col_start, y, positive, tau, D, cost, w, shrink_at,
                 grad, hdiag, active, stats):
    """newGLMNET's outer pass over a column block: ∇L(w)ⱼ = −Σ xⱼτⱼ + Σ_{yⱼ=−1} Cⱼxⱼ and
    Hⱼⱼ = ν + Σ xⱼ²Dⱼ (τⱼ = Cⱼ/(1 + e^{wᵀxⱼ}), Dⱼ = Cⱼe^{wᵀxⱼ}/(1 + e^{wᵀxⱼ})²), the
    violation, and outer-level shrinking into ``active``."""
    for c in range(len(indptr) - 1):
        _glm_gradient(indptr[c], indptr[c + 1], indices, data, False, 0.0, y, positive, tau,
                      D, cost, w, col_start + c, True, shrink_at, grad, hdiag, active, stats)


@numba.njit(cache=True, nogil=True)
def glm_gradient_bias(bias, y, positive, tau, D, cost, w, j, reg, shrink_at, grad, hdiag,
                      active, stats):
    dummy_i = np.zeros(1, dtype=np.int32)
    dummy_x = np.zeros(1, dtype=np.float32)
    _glm_gradient(0, len(tau), dummy_i, dummy_x, True, bias, y, positive, tau, D, cost, w, j,
                  reg, shrink_at, grad, hdiag, active, stats)


@numba.njit(cache=True, nogil=True)
def _glm_qp(lo, hi, indices, data, dense, dval, D, xTd, w, wpd, j, grad, hdiag, reg,
            shrink_at, stats):
    """One CD step of the quadratic model on feature j; True if shrunk (inner level)."""
    h = hdiag[j]
    g = grad[j] + (wpd[j] - w[j]) * NU
    for k in range(lo, hi):
        r, x = column_entry(k, indices, data, dense, dval)
        g += x * D[r] * xTd[r]
    viol, inside = _violation(g, wpd[j], reg)
    if inside and g + 1.0 > shrink_at and g - 1.0 < -shrink_at:
        stats[SHRUNK] += 1.0
        return True
    stats[VISITED] += 1.0
    stats[GMAX] = max(stats[GMAX], viol)
    stats[GNORM1] += viol
    if not reg:
        z = -g / h
    elif g + 1.0 < h * wpd[j]:
        z = -(g + 1.0) / h
    elif g - 1.0 > h * wpd[j]:
        z = -(g - 1.0) / h
    else:
        z = -wpd[j]
    if abs(z) < 1.0e-12:
        return False
    z = min(max(z, -10.0), 10.0)
    wpd[j] += z
    for k in range(lo, hi):
        r, x = column_entry(k, indices, data, dense, dval)
        xTd[r] += z * x
    return False


@numba.njit(cache=True, nogil=True)
def glm_qp_columns(indptr, indices, data, col_start, D, xTd, w, wpd, grad, hdiag, qp_active,
                   shrink_at, seed, stats):
    """One inner CD cycle over a column block's features in ``qp_active``, in a random order."""
    order = _shuffled(len(indptr) - 1, qp_active, col_start, seed)
    for s in range(len(order)):
        if len(indices) >= PREFETCH_MIN and s + AHEAD < len(order):  # (linear.prefetch)
            prefetch(order[s + AHEAD], indptr)
            prefetch(indptr[order[s + AHEAD // 2]], indices, data)
        c = order[s]
        if _glm_qp(indptr[c], indptr[c + 1], indices, data, False, 0.0, D, xTd, w, wpd,
                   col_start + c, grad, hdiag, True, shrink_at, stats):
            qp_active[col_start + c] = 0


@numba.njit(cache=True, nogil=True)
def glm_qp_bias(bias, D, xTd, w, wpd, j, grad, hdiag, reg, qp_active, shrink_at, stats):
    if not qp_active[j]:
        return
    dummy_i = np.zeros(1, dtype=np.int32)
    dummy_x = np.zeros(1, dtype=np.float32)
    if _glm_qp(0, len(D), dummy_i, dummy_x, True, bias, D, xTd, w, wpd, j, grad, hdiag, reg,
               shrink_at, stats):
        qp_active[j] = 0


@numba.njit(cache=True, nogil=True, inline="always")
def _softplus(a):
    """log(1 + eᵃ) = ξ(−a) of the logistic loss."""
    return xi(-a, LOGISTIC)


@numba.njit(cache=True, nogil=True)
def glm_loss_change(wx, xTd, y, positive, cost, wx_new):
    """Σⱼ Cⱼ [ℓ(w + d) − ℓ(w)] without the Σ_{yⱼ=−1} Cⱼxⱼᵀd term (LIBLINEAR's form,
    Σⱼ Cⱼ log((1 + e^{wᵀxⱼ+xⱼᵀd}) / (e^{xⱼᵀd} + e^{wᵀxⱼ+xⱼᵀd}))), computed from the margins
    wᵀxⱼ as softplus(wᵀxⱼ + xⱼᵀd) − xⱼᵀd − softplus(wᵀxⱼ): LIBLINEAR keeps e^{wᵀxⱼ}, which
    overflows where |wᵀxⱼ| > 709 (news20) and then stalls its line search.  Fills
    ``wx_new``; also returns Σ_{yⱼ=−1} Cⱼ xⱼᵀd."""
    s = 0.0
    neg = 0.0
    for r in range(len(wx)):
        a = wx[r] + xTd[r]
        wx_new[r] = a
        s += cost[r] * (_softplus(a) - xTd[r] - _softplus(wx[r]))
        if y[r] != positive:
            neg += cost[r] * xTd[r]
    return s, neg


@numba.njit(cache=True, nogil=True)
def glm_weights(wx, cost, tau, D):
    """τⱼ = Cⱼ/(1 + e^{wᵀxⱼ}) and Dⱼ = Cⱼe^{wᵀxⱼ}/(1 + e^{wᵀxⱼ})², from the margins."""
    for r in range(len(wx)):  # as functions of m = wᵀxⱼ: 1/(1 + eᵐ) = −ξ′(m), σ(1 − σ) = ξ″(m)
        tau[r] = -cost[r] * dxi(wx[r], LOGISTIC)
        D[r] = cost[r] * d2xi(wx[r], LOGISTIC)


@numba.njit(cache=True, nogil=True)
def lr_loss_sum(wx, y, positive, cost):
    """Σⱼ Cⱼ log(1 + e^{−yⱼwᵀxⱼ}) from the margins wᵀxⱼ."""
    s = 0.0
    for r in range(len(wx)):
        s += cost[r] * _softplus(-wx[r] if y[r] == positive else wx[r])
    return s


@numba.njit(cache=True, nogil=True)
def margins(indptr, indices, data, col_start, w, out):
    """out[r] += Σ_c w[col_start + c]·x_rc over a column block (wᵀxⱼ, without labels)."""
    for c in range(len(indptr) - 1):
        wc = w[col_start + c]
        if wc == 0.0:
            continue
        for k in range(indptr[c], indptr[c + 1]):
            out[indices[k]] += wc * np.float64(data[k])


# ------------------------------------------------- parallel mode's line search (CDN combine)


@numba.njit(cache=True, nogil=True)
def l2_loss_along(b, db, t, cost):
    """Σⱼ Cⱼ max(0, bⱼ + t·Δbⱼ)²: the squared-hinge loss at w + t·d, where Δb = −y·Xd
    (b = 1 − yᵀXw is linear in w)."""
    s = 0.0
    for r in range(len(b)):
        s += cost[r] * xi_slack(b[r] + t * db[r], SQUARED_HINGE)
    return s


@numba.njit(cache=True, nogil=True)
def l2_slope(b, db, cost):
    """∇L(w)ᵀd = Σⱼ 2Cⱼ max(0, bⱼ)·Δbⱼ (the derivative of :func:`l2_loss_along` at t = 0)."""
    s = 0.0
    for r in range(len(b)):
        if b[r] > 0.0:
            s += 2.0 * cost[r] * b[r] * db[r]
    return s


@numba.njit(cache=True, nogil=True)
def l2_loss_change(b, db, t, cost):
    """Σⱼ Cⱼ [max(0, bⱼ + t·Δbⱼ)² − max(0, bⱼ)²], row by row (tΔbⱼ(2bⱼ + tΔbⱼ) where both
    are positive): the change itself, without the rounding of a difference of two sums."""
    s = 0.0
    for r in range(len(b)):
        bn = b[r] + t * db[r]
        if b[r] > 0.0 and bn > 0.0:
            s += cost[r] * t * db[r] * (2.0 * b[r] + t * db[r])
        elif bn > 0.0:
            s += cost[r] * bn * bn
        elif b[r] > 0.0:
            s -= cost[r] * b[r] * b[r]
    return s
