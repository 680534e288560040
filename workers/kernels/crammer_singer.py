"""Crammer–Singer multi-class SVM by the sequential dual method on one CSR block
(Keerthi, Sundararajan, Chang, Hsieh & Lin, KDD 2008; LIBLINEAR's ``-s 4`` as described in
Appendix E of the LIBLINEAR paper, Fan et al. 2008, and implemented in ``Solver_MCSVM_CS``).

Problem (14) of Appendix E.1 and its dual (15)::

    min_W  ½ Σₘ ‖wₘ‖² + C Σᵢ ξᵢ   s.t.  wᵀ_{yᵢ}xᵢ − wₘᵀxᵢ ≥ eᵢᵐ − ξᵢ  (eᵢᵐ = 0 if yᵢ = m, else 1)
    min_α  ½ Σₘ ‖wₘ(α)‖² + Σᵢ Σₘ eᵢᵐ αᵢᵐ   s.t.  αᵢᵐ ≤ Cᵢᵐ,  Σₘ αᵢᵐ = 0,
           wₘ(α) = Σᵢ αᵢᵐ xᵢ,  Cᵢᵐ = Cᵢ if m = yᵢ else 0.

Algorithm 1 of Appendix E: for each row i in a random order, the gradient
Gₘ = wₘᵀxᵢ + eᵢᵐ over the row's active classes, the sub-problem (19) solved
exactly as in E.3 (sort D = B + A·Cᵢ·[m = yᵢ] decreasingly, find β, clip), and
wₘ updated by (20).  Shrinking (E.5): class m of row i leaves the row's active
set when αᵢᵐ is at its bound and Gₘ < min G over the free ones (``be_shrunk``);
a row with ≤ 1 active class leaves the pass.  Stopping (E.4): the largest
``max G − min G`` of a pass, compared by the coordinator with eps and with the
shrinking tolerance.

Layout: ``W`` is (n_features [+1], K) float64, feature-major as LIBLINEAR's ``w``
(a row's K weights of one feature are adjacent); ``alpha`` is (n_rows, K);
``alpha_index[i]`` permutes the classes of row i so that its active ones come
first and ``y_index[i]`` is the position of yᵢ in it; ``active_i[i]`` counts them.
``C`` is the per-row Cᵢ (float64).  Everything is updated in place.
"""

import numba
import numpy as np

from .linear import AHEAD, PREFETCH_MIN, prefetch

ACTIVE = 0  # state[ACTIVE]: rows of the block still in the pass
STATE_SIZE = 1


def new_state(n_rows: int, n_classes: int, y):
    """Fresh per-block state: α = 0, every row and class active."""
    return {"alpha": np.zeros((n_rows, n_classes)),
            "alpha_index": np.tile(np.arange(n_classes, dtype=np.int32), (n_rows, 1)),
            "y_index": np.asarray(y, dtype=np.int32).copy(),
            "active_i": np.full(n_rows, n_classes, dtype=np.int32),
            "index": np.arange(n_rows, dtype=np.int32),
            "state": np.array([float(n_rows)])}


@numba.njit(cache=True, nogil=True)
def _sub_problem(A, yi, C_yi, active, B, alpha_new, D):
    """(19) by Appendix E.3: the new α of the row's ``active`` classes into ``alpha_new``.
    D is sorted decreasingly in place by insertion (K is small; no array allocated per row,
    where ``-np.sort(-D)`` made three)."""
    for r in range(active):
        D[r] = B[r]
    if yi < active:
        D[yi] += A * C_yi
    for r in range(1, active):
        d = D[r]
        q = r
        while q > 0 and D[q - 1] < d:
            D[q] = D[q - 1]
            q -= 1
        D[q] = d
    beta = D[0] - A * C_yi
    r = 1
    while r < active and beta < r * D[r]:
        beta += D[r]
        r += 1
    beta /= r
    for r in range(active):
        if r == yi:
            alpha_new[r] = min(C_yi, (beta - B[r]) / A)
        else:
            alpha_new[r] = min(0.0, (beta - B[r]) / A)


@numba.njit(cache=True, nogil=True, inline="always")
def _shrinkable(m, yi_pos, alpha_im, g, min_g, C_i):
    bound = C_i if m == yi_pos else 0.0
    return alpha_im == bound and g < min_g


@numba.njit(cache=True, nogil=True)
def cs_pass(indptr, indices, data, y, sqnorm, W, bias, n_features, alpha, alpha_index,
            y_index, active_i, index, state, C, seed, ww):
    """One pass of Algorithm 1 (Appendix E.2) over the block's active rows; returns the
    pass's stopping value max(max G − min G) (−∞ if no row was solved).  ``ww[0]`` gains
    the change of ‖W‖² by the pass (each update's (w + δ)² − w² = δ(2w + δ)), so that a
    round's dual needs no pass over W."""
    K = W.shape[1]
    G = np.empty(K)
    B = np.empty(K)
    D = np.empty(K)
    alpha_new = np.empty(K)
    d_ind = np.empty(K, dtype=np.int64)
    d_val = np.empty(K)
    bias_sq = bias * bias if bias >= 0.0 else 0.0
    ahead = len(indices) >= PREFETCH_MIN
    np.random.seed(seed)
    active = int(state[ACTIVE])
    for s in range(active):
        j = np.random.randint(s, active)
        index[s], index[j] = index[j], index[s]
    stopping = -np.inf
    dww = 0.0
    s = 0
    while s < active:
        if ahead and s + AHEAD < active:  # the rows to come (linear.prefetch)
            prefetch(index[s + AHEAD], indptr, sqnorm, active_i, y_index, y, C, alpha,
                     alpha_index)
            prefetch(indptr[index[s + AHEAD // 2]], indices, data)
        i = index[s]
        A = sqnorm[i] + bias_sq
        if A <= 0.0:  # xᵢ = 0: α of this row does not move w (E.2)
            s += 1
            continue
        ai = active_i[i]
        for m in range(ai):
            G[m] = 1.0
        if y_index[i] < ai:
            G[y_index[i]] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            f, v = indices[k], data[k]
            for m in range(ai):
                G[m] += W[f, alpha_index[i, m]] * v
        if bias >= 0.0:
            for m in range(ai):
                G[m] += W[n_features, alpha_index[i, m]] * bias
        min_g, max_g = np.inf, -np.inf
        for m in range(ai):
            if alpha[i, alpha_index[i, m]] < 0.0 and G[m] < min_g:
                min_g = G[m]
            if G[m] > max_g:
                max_g = G[m]
        if y_index[i] < ai and alpha[i, y[i]] < C[i] and G[y_index[i]] < min_g:
            min_g = G[y_index[i]]
        m = 0
        while m < ai:  # E.5: shrink the classes at their bound with Gₘ < min G
            if _shrinkable(m, y_index[i], alpha[i, alpha_index[i, m]], G[m], min_g, C[i]):
                ai -= 1
                while ai > m:
                    if not _shrinkable(ai, y_index[i], alpha[i, alpha_index[i, ai]], G[ai],
                                       min_g, C[i]):
                        alpha_index[i, m], alpha_index[i, ai] = alpha_index[i, ai], alpha_index[i, m]
                        G[m], G[ai] = G[ai], G[m]
                        if y_index[i] == ai:
                            y_index[i] = m
                        elif y_index[i] == m:
                            y_index[i] = ai
                        break
                    ai -= 1
            m += 1
        active_i[i] = ai
        if ai <= 1:  # α of the row is fixed by Σₘ αᵢᵐ = 0: the row leaves the pass
            active -= 1
            index[s], index[active] = index[active], index[s]
            continue
        s += 1
        if max_g - min_g <= 1e-12:
            continue
        stopping = max(stopping, max_g - min_g)
        for m in range(ai):
            B[m] = G[m] - A * alpha[i, alpha_index[i, m]]
        _sub_problem(A, y_index[i], C[i], ai, B, alpha_new, D)
        nz = 0
        for m in range(ai):
            d = alpha_new[m] - alpha[i, alpha_index[i, m]]
            alpha[i, alpha_index[i, m]] = alpha_new[m]
            if abs(d) >= 1e-12:
                d_ind[nz] = alpha_index[i, m]
                d_val[nz] = d
                nz += 1
        for k in range(indptr[i], indptr[i + 1]):  # (20)
            f, v = indices[k], data[k]
            for m in range(nz):
                delta = d_val[m] * v
                dww += delta * (2.0 * W[f, d_ind[m]] + delta)
                W[f, d_ind[m]] += delta
        if bias >= 0.0:
            for m in range(nz):
                delta = d_val[m] * bias
                dww += delta * (2.0 * W[n_features, d_ind[m]] + delta)
                W[n_features, d_ind[m]] += delta
    state[ACTIVE] = active
    ww[0] += dww
    return stopping


@numba.njit(cache=True, nogil=True)
def cs_loss(indptr, indices, data, y, W, bias, n_features, C):
    """(Σᵢ Cᵢξᵢ, rows predicted right), Cᵢ = ``C[i]``: ξᵢ = max(0, maxₘ≠yᵢ 1 + wₘᵀxᵢ − w_{yᵢ}ᵀxᵢ) and the
    prediction argmaxₘ wₘᵀxᵢ (first maximum, as LIBLINEAR)."""
    K = W.shape[1]
    scores = np.empty(K)
    total, correct = 0.0, 0
    for i in range(len(indptr) - 1):
        for m in range(K):
            scores[m] = W[n_features, m] * bias if bias >= 0.0 else 0.0
        for k in range(indptr[i], indptr[i + 1]):
            f, v = indices[k], data[k]
            for m in range(K):
                scores[m] += W[f, m] * v
        xi = 0.0
        for m in range(K):
            if m != y[i]:
                xi = max(xi, 1.0 + scores[m] - scores[y[i]])
        total += C[i] * xi
        if np.argmax(scores) == y[i]:
            correct += 1
    return total, correct
