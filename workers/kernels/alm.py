"""Kernels of SVM-ALM (Nie, Huang, Wang & Huang, ICML 2014): the e-update (10) and the fused row pass.

Notation of the paper: eᵢ = yᵢ − (wᵀxᵢ + b) with the constraint
``Xᵀw + 1b − y + e = 0`` (5), multipliers λ, penalty µ, γ = C/µ.  The Lp loss
of a row is ``(yᵢeᵢ)₊ᵖ = max(0, 1 − yᵢ(wᵀxᵢ + b))ᵖ`` (:func:`distsvm.workers.losses.power_hinge`).

The bias b is passed as the last entry of ``w`` with ``bias = 1.0`` (a feature
of constant value 1 whose weight is *not* regularized by the coordinator), or
absent with ``bias < 0``; :func:`distsvm.workers.kernels.linear.row_dot` handles both.
Data may be float32 or float64; ``w``, λ, e and every accumulator are float64.
"""

import numba
import numpy as np

from ..losses import dpower_hinge, power_hinge
from .linear import row_dot

# Precision of the root of (11) for 1 < p, p != 2: the bracket or the last Newton step is
# at most REL_TOL · yᵢtᵢ, i.e. the e-update is exact to ~1e-14 relative to |tᵢ|.
REL_TOL = 1e-14
MAX_STEPS = 200


@numba.njit(cache=True, nogil=True)
def lp_root(s, gamma, p):
    """The root u ∈ (0, s) of (11) in u = yᵢeᵢ: ``pγuᵖ⁻¹ + u − s = 0``, for s > 0, p > 1.

    The left side is increasing in u (p ≥ 1, γ > 0) and goes from −s < 0 at 0 to
    pγsᵖ⁻¹ > 0 at s, so the root is bracketed by [0, min(s, (s/pγ)^(1/(p-1)))].  Newton steps are taken
    when they stay inside the bracket and bisection otherwise (a safeguarded
    Newton-bisection, "rtsafe"); the bracket shrinks at every step.  Stops when
    the bracket or the step is ≤ REL_TOL·s.
    """
    lo = 0.0
    # both terms of (11) are positive, so the root is at most s and at most (s/pγ)^(1/(p-1));
    # start at the smaller bound (for p < 2 the first Newton step lands left of the root,
    # after which the iterates increase monotonically to it; for p > 2 they decrease)
    hi = min(s, (s / (p * gamma)) ** (1.0 / (p - 1.0)))
    u = hi
    for _ in range(MAX_STEPS):
        pw = p * gamma * u ** (p - 1.0)
        g = pw + u - s
        if g == 0.0:
            return u
        if g < 0.0:
            lo = u
        else:
            hi = u
        if hi - lo <= REL_TOL * s:
            break
        dg = 1.0 + (p - 1.0) * pw / u if u > 0.0 else np.inf
        step = g / dg
        nu = u - step
        if nu <= lo or nu >= hi or not np.isfinite(nu):
            nu = 0.5 * (lo + hi)  # the bisection safeguard
            step = u - nu
        u = nu
        if abs(step) <= REL_TOL * s:
            break
    return u


@numba.njit(cache=True, nogil=True)
def e_update(t, yi, gamma, p):
    """eᵢ = argmin_e γ(yᵢe)₊ᵖ + ½(e − tᵢ)²  — Eq. (10), for p ≥ 1, γ > 0, yᵢ = ±1.

    In u = yᵢe (so ½(e − t)² = ½(u − yᵢt)²) with s = yᵢtᵢ: if s ≤ 0 the loss
    piece is zero at u = s, which minimizes both pieces, so e = t.  Otherwise
    p = 1: the closed form (12); p = 2: (13); any other p ≥ 1: the root of (11)
    by :func:`lp_root`.
    """
    s = yi * t
    if s <= 0.0:
        return t
    if p == 1.0:  # (12)
        return yi * (s - gamma) if s > gamma else 0.0
    if p == 2.0:  # (13)
        return t / (1.0 + 2.0 * gamma)
    return yi * lp_root(s, gamma, p)


@numba.njit(cache=True, nogil=True)
def alm_pass(indptr, indices, data, y, positive, w, bias, n_features, lam, e, mu_prev, mu,
             C, p, xtr, gloss):
    """One pass over a block: the deferred λ-update, the objective, the e-update, and Xr.

    For each row, with mᵢ = wᵀxᵢ + b at the current (w, b):

    1. λ-update (9) of the previous iteration (whose w-step produced this w):
       λᵢ += µ_prev (mᵢ − yᵢ + eᵢ); skipped when ``mu_prev == 0`` (first iteration).
    2. The objective (4) and its gradient: Σ ξᵢᵖ and ``gloss += −p yᵢ ξᵢᵖ⁻¹ xᵢ``
       (ξᵢ = (1 − yᵢmᵢ)₊; for p = 1 the subgradient −yᵢxᵢ on rows with ξᵢ > 0).
    3. e-update (10) with tᵢ = yᵢ − mᵢ − λᵢ/µ, γ = C/µ.
    4. The residual of (14), rᵢ = mᵢ − zᵢ = mᵢ − yᵢ + eᵢ + λᵢ/µ, and ``xtr += rᵢ xᵢ``
       (the X r part of the gradient (16)).

    Updates ``lam``, ``e``, ``xtr`` and ``gloss`` in place (``xtr``/``gloss`` have
    n_features entries; the bias parts are returned).  Returns
    ``(Σ ξᵢᵖ, Σ gloss_b, Σ rᵢ, Σ (mᵢ − yᵢ + eᵢ)² before the λ-update, correct rows)``.
    """
    gamma = C / mu
    loss = 0.0
    gloss_b = 0.0
    r_sum = 0.0
    resid_sq = 0.0
    correct = 0
    for i in range(len(indptr) - 1):
        yi = 1.0 if y[i] == positive else -1.0
        m = row_dot(indptr, indices, data, i, w, bias, n_features)
        margin = yi * m
        if margin > 0.0:
            correct += 1
        if mu_prev > 0.0:
            c = m - yi + e[i]
            resid_sq += c * c
            lam[i] += mu_prev * c  # (9)
        if margin < 1.0:
            loss += power_hinge(margin, p)
            g = yi * dpower_hinge(margin, p)
            gloss_b += g
            for k in range(indptr[i], indptr[i + 1]):
                gloss[indices[k]] += g * data[k]
        e[i] = e_update(yi - m - lam[i] / mu, yi, gamma, p)  # (10)
        r = m - yi + e[i] + lam[i] / mu
        r_sum += r
        for k in range(indptr[i], indptr[i + 1]):
            xtr[indices[k]] += r * data[k]
    return loss, gloss_b, r_sum, resid_sq, correct


@numba.njit(cache=True, nogil=True)
def transpose_dot(indptr, indices, data, v, out):
    """``out[:n_features] += Xᵀv`` for a block (float64 accumulators, in place); returns Σ vᵢ."""
    total = 0.0
    for i in range(len(indptr) - 1):
        vi = v[i]
        total += vi
        for k in range(indptr[i], indptr[i + 1]):
            out[indices[k]] += vi * data[k]
    return total
