"""Kernels of the Newton solver: the loss part of f, ∇f, the Hessian's diagonal weights and
preconditioner, and Hessian-vector products, over one CSR block.

The objective is LIBLINEAR's ``f(w) = ½wᵀw + Σᵢ Cᵢ ξ(yᵢwᵀxᵢ)`` with a per-row cost Cᵢ (C
times the class and instance weights).  For row i with zᵢ = wᵀxᵢ and mᵢ = yᵢzᵢ,
∂/∂zᵢ = Cᵢyᵢξ′(mᵢ) and Dᵢ = Cᵢξ″(mᵢ) (ξ and its derivatives from :mod:`distsvm.workers.losses`):

* logistic (LIBLINEAR ``-s 0``): ξ(m) = log(1 + e^{−m});
  ∂/∂zᵢ = −Cᵢyᵢσ(−mᵢ) and Dᵢ = Cᵢσ(mᵢ)σ(−mᵢ) (Lin, Weng & Keerthi 2008, §3);
* squared hinge (``-s 2``): ξ(m) = max(0, 1 − m)²; on I = {i: mᵢ < 1}
  ∂/∂zᵢ = 2Cᵢ(zᵢ − yᵢ) and Dᵢ = 2Cᵢ (the generalized Hessian, Mangasarian 2002, as
  LIBLINEAR), Dᵢ = 0 elsewhere;
* L2-loss SVR (``-s 11``, Fan et al. 2008, A.6; LIBLINEAR's ``l2r_l2_svr_fun``), a function
  of the residual rᵢ = zᵢ − yᵢ with yᵢ the real target: ξ(r) = max(0, |r| − p)²;
  ∂/∂zᵢ = 2Cᵢ(rᵢ ∓ p) and Dᵢ = 2Cᵢ on I = {i: |rᵢ| > p}, 0 elsewhere.

The kernels take ``y`` as the block's class indices (the row is +1 when ``y[i] ==
positive``) and ``p`` None, or, for an SVR loss, ``y`` as its float64 targets and ``p``
the loss's ε (LIBLINEAR's ``-p``).

Then ∇f = w + Xᵀ(∂/∂z), ∇²f = I + XᵀDX, and the diagonal preconditioner of
LIBLINEAR ≥ 2.40 (Hsia, Chiang & Lin 2018) is ``1 + Σᵢ Dᵢxᵢⱼ²``.  The bias
feature of constant value ``bias`` (when ``bias >= 0``) is the last coordinate;
its parts are returned as scalars, the others accumulated in place.  Data may be
float32 or float64; w, z, D and every accumulator are float64.
"""

import numba
import numpy as np

from ..losses import d2xi, d2xi_residual, dxi, dxi_residual, xi, xi_residual


@numba.njit(cache=True, nogil=True)
def dot(a, b):
    """aᵀb, summed in order in float64: the coordinator's vector products without BLAS,
    whose threads (two by default) cost more than the product on a loaded machine."""
    total = 0.0
    for j in range(len(a)):
        total += a[j] * b[j]
    return total


def side_by_side(*columns) -> np.ndarray:
    """The columns side by side in one (d, k) float64 array: each a vector, or None for
    zeros (an accumulator).

    A pass reads a vector at a row's features and adds into its accumulators at the same
    features: side by side, the adds find the cache lines the reads brought in.  On
    pypi-summaries' rows (one thread) the Hessian-vector product took 0.82× the time of v
    and its output as two vectors, the gradient pass 0.91–1.00× (logistic; squared hinge
    0.93–0.98×), and the gradient pass with the line search's Xs 0.69× of Xs and that pass
    apart (docs/benchmarks.md)."""
    d = len(next(c for c in columns if c is not None))
    out = np.zeros((d, len(columns)))
    for j, c in enumerate(columns):
        if c is not None:
            out[:, j] = c
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _row_dot(indptr, indices, data, i, W, j, bias, n_features):
    """vᵀxᵢ in float64 with v column ``j`` of ``W`` (:func:`side_by_side`), the bias
    feature included: :func:`~distsvm.workers.kernels.linear.row_dot`'s sum."""
    s = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        s += W[indices[k], j] * data[k]
    if bias >= 0.0:
        s += W[n_features, j] * bias
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def _row_dots(indptr, indices, data, i, W, bias, n_features):
    """:func:`_row_dot` of columns 0 and 3 of ``W`` in one loop over the row: the same two
    sums."""
    s = u = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        x = data[k]
        s += W[indices[k], 0] * x
        u += W[indices[k], 3] * x
    if bias >= 0.0:
        s += W[n_features, 0] * bias
        u += W[n_features, 3] * bias
    return s, u


@numba.njit(cache=True, nogil=True)
def fun_grad(indptr, indices, data, y, positive, cost, wgd, bias, n_features, loss, z, D,
             p=None, t=None):
    """The loss part of f, ∇f and the preconditioner at w, in one pass over a block.

    ``wgd`` is (d, 3): w in column 0, the gradient's and the preconditioner's accumulators
    in columns 1 and 2 (:func:`side_by_side`).  Writes zᵢ = wᵀxᵢ into ``z`` and Dᵢ into
    ``D``; adds Xᵀ(∂/∂z) and Σᵢ Dᵢxᵢⱼ² to columns 1 and 2 (their first ``n_features``
    rows).  Returns ``(Σ Cᵢξᵢ, bias part of the gradient, bias part of the
    preconditioner, rows with mᵢ > 0 (SVR: rows in the tube, |rᵢ| ≤ p))``.  With ``t``,
    ``wgd`` is (d, 4), a direction s in column 3, and tᵢ = sᵀxᵢ is written into ``t`` in
    the same loop as zᵢ (the line search's Xs, :func:`distsvm.workers.newton.step`).

    ``p`` None: a classification loss; a float: an SVR loss of that ε.  Numba prunes the
    ``p is None`` branches when it compiles each case, so the classification kernel is the
    one without SVR (a run-time test of the loss code made it 7% slower, and ``loss_along``
    2.4x: benchmarks/bench_datafit.py).
    """
    total = 0.0
    grad_b = 0.0
    diag_b = 0.0
    correct = 0
    for i in range(len(indptr) - 1):
        if t is None:  # pruned at compile time, as p
            z[i] = _row_dot(indptr, indices, data, i, wgd, 0, bias, n_features)
        else:
            z[i], t[i] = _row_dots(indptr, indices, data, i, wgd, bias, n_features)
        c = cost[i]
        if p is None:
            yi = 1.0 if y[i] == positive else -1.0
            m = yi * z[i]
            if m > 0.0:
                correct += 1
            total += c * xi(m, loss)
            coef = c * yi * dxi(m, loss)  # ∂/∂zᵢ
            D[i] = c * d2xi(m, loss)
        else:
            r = z[i] - y[i]
            if abs(r) <= p:
                correct += 1
            total += c * xi_residual(r, p, loss)
            coef = c * dxi_residual(r, p, loss)  # ∂/∂zᵢ
            D[i] = c * d2xi_residual(r, p, loss)
        if D[i] == 0.0 and coef == 0.0:
            continue
        d = D[i]
        for k in range(indptr[i], indptr[i + 1]):
            v = np.float64(data[k])
            wgd[indices[k], 1] += coef * v
            wgd[indices[k], 2] += d * v * v
        if bias >= 0.0:
            grad_b += coef * bias
            diag_b += d * bias * bias
    return total, grad_b, diag_b, correct


@numba.njit(cache=True, nogil=True)
def hess_vec(indptr, indices, data, D, vo, bias, n_features):
    """Xᵀ(D(Xv)) for a block (rows with Dᵢ = 0 skipped), ``vo`` (d, 2) holding v in column 0
    (:func:`side_by_side`): adds it to column 1's first ``n_features`` rows; returns the
    bias part."""
    out_b = 0.0
    for i in range(len(indptr) - 1):
        if D[i] == 0.0:
            continue
        t = D[i] * _row_dot(indptr, indices, data, i, vo, 0, bias, n_features)
        for k in range(indptr[i], indptr[i + 1]):
            vo[indices[k], 1] += t * data[k]
        if bias >= 0.0:
            out_b += t * bias
    return out_b


@numba.njit(cache=True, nogil=True)
def cg_curvature(reg, d, P, Hd):
    """A CG step's ∇²f·d from the passes' sum ``P`` = Xᵀ(D(Xd)): ``Hd = reg∘d + P``;
    returns dᵀHd.  One pass where the vector operations took three (workers.newton.pcg);
    every sum in order, as :func:`dot` (the same bits)."""
    total = 0.0
    for j in range(len(d)):
        h = reg[j] * d[j] + P[j]
        Hd[j] = h
        total += d[j] * h
    return total


@numba.njit(cache=True, nogil=True)
def cg_update(a, d, Hd, g, M, s, r, z):
    """A CG step's updates in one pass: ``s += a·d``, ``r −= a·Hd``, ``z = r/M``; returns
    (sᵀr, sᵀg, zᵀr), each summed in order as :func:`dot`."""
    sr = sg = zr = 0.0
    for j in range(len(s)):
        sj = s[j] + d[j] * a
        rj = r[j] - Hd[j] * a
        zj = rj / M[j]
        s[j] = sj
        r[j] = rj
        z[j] = zj
        sr += sj * rj
        sg += sj * g[j]
        zr += zj * rj
    return sr, sg, zr


@numba.njit(cache=True, nogil=True)
def cg_direction(beta, z, d):
    """CG's next direction in place: ``d = β·d + z``."""
    for j in range(len(d)):
        d[j] = d[j] * beta + z[j]


@numba.njit(cache=True, nogil=True)
def loss_along(y, positive, cost, z, t, alpha, loss, p=None):
    """Σᵢ Cᵢξ(yᵢ(zᵢ + αtᵢ)) (SVR, ``p`` given: Σᵢ Cᵢξ(zᵢ + αtᵢ − yᵢ)): the loss part of
    f(w + αs) given z = Xw and t = Xs (no data read)."""
    total = 0.0
    for i in range(len(z)):
        if p is None:  # pruned at compile time (see fun_grad)
            yi = 1.0 if y[i] == positive else -1.0
            total += cost[i] * xi(yi * (z[i] + alpha * t[i]), loss)
        else:
            total += cost[i] * xi_residual(z[i] + alpha * t[i] - y[i], p, loss)
    return total
