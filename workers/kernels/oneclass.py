"""One-class SVM (LIBLINEAR ``-s 21``) by two-variable dual coordinate descent on CSR blocks.

Problem (Schölkopf et al. 2001, scaled as LIBLINEAR's ``solve_oneclass_svm`` in linear.cpp,
which follows Algorithm 7 of the supplement of Chou, Lin, Lin & Lin, SDM 2020)::

    min_α  ½ αᵀQα   s.t.  0 ≤ αᵢ ≤ 1,  eᵀα = νl,   Qᵢⱼ = xᵢᵀxⱼ,  w(α) = Σᵢ αᵢxᵢ.

One outer iteration of LIBLINEAR: the gradient Gᵢ = wᵀxᵢ of the active rows
(:func:`gradients`), the maximal violation m − M with m = max{−Gᵢ : αᵢ < 1} and
M = min{−Gᵢ : αᵢ > 0} (stop when < eps on every row), shrinking (:func:`shrink`: a row at
αᵢ = 1 with −Gᵢ > m, or at αᵢ = 0 with −Gᵢ < M, leaves the active set), then k =
max(active/10, 1) pairs (i, j), i the s-th largest −G of I_up and j the s-th smallest of
I_low (:func:`candidates`), each updated by :func:`pair_updates` — the exact minimization
along αᵢ − δ, αⱼ + δ clipped to the box, which keeps eᵀα.  Where LIBLINEAR's quick select
leaves ties to chance, the candidates here are ordered by (−G, global row id), so that one
block and many blocks pick the same pairs.

Layout: ``alpha``, ``G`` float64 per row; ``index[:active]`` the active rows, increasing;
``w`` float64 (n_features,); data float32 with float64 accumulation.  In place throughout.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def add_xt(indptr, indices, data, coef, w):
    """w += Σᵢ coefᵢ xᵢ."""
    for i in range(len(indptr) - 1):
        c = coef[i]
        if c != 0.0:
            for p in range(indptr[i], indptr[i + 1]):
                w[indices[p]] += c * data[p]


@numba.njit(cache=True, nogil=True)
def gradients(indptr, indices, data, w, alpha, G, index, active):
    """Gᵢ = wᵀxᵢ for the active rows; returns (m, M) over them (−inf/inf if empty)."""
    up, low = -np.inf, np.inf
    for s in range(active):
        i = index[s]
        g = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            g += w[indices[p]] * data[p]
        G[i] = g
        if alpha[i] < 1.0:
            up = max(up, -g)
        if alpha[i] > 0.0:
            low = min(low, -g)
    return up, low


@numba.njit(cache=True, nogil=True)
def shrink(alpha, G, index, active, up, low):
    """LIBLINEAR's shrinking with the global (m, M); returns the new active count.  The
    active rows stay in increasing order (LIBLINEAR swaps the shrunk ones to the end; the
    order changes nothing here, where ties go by row, and rows in order read the block's
    memory in order: a pass in swapped order took 10x as long on pypi-summaries)."""
    kept = 0
    for s in range(active):
        i = index[s]
        if not ((alpha[i] == 1.0 and -G[i] > up) or (alpha[i] == 0.0 and -G[i] < low)):
            index[kept] = i
            kept += 1
    return kept


@numba.njit(cache=True, nogil=True)
def _smallest(keys, rows, k):
    """``rows`` of the k smallest ``keys`` by (key, position): ``keys`` are in row order, so
    ties go to the lower row.  A partition finds the k-th key; only the k are sorted."""
    n = len(keys)
    if k >= n:
        return rows[np.argsort(keys, kind="mergesort")]
    if k <= 0:
        return rows[:0]
    thr = np.partition(keys.copy(), k - 1)[k - 1]
    sel = np.empty(k, np.int64)
    c = 0
    for t in range(n):
        if keys[t] < thr:
            sel[c] = t
            c += 1
    for t in range(n):
        if c < k and keys[t] == thr:
            sel[c] = t
            c += 1
    return rows[sel[np.argsort(keys[sel], kind="mergesort")]]


@numba.njit(cache=True, nogil=True)
def candidates(alpha, G, index, active, k):
    """The block's k best candidates of each side among its active rows, by (−G, row):
    I_up (αᵢ < 1) by −G decreasing, I_low (αᵢ > 0) by −G increasing.  Returns
    (up rows, low rows, |I_up|, |I_low|, the rows of both, increasing), rows local."""
    rows = index[:active]  # in row order (:func:`shrink`): ties go to the lower row
    n_up = n_low = 0
    for i in rows:
        if alpha[i] < 1.0:
            n_up += 1
        if alpha[i] > 0.0:
            n_low += 1
    up_rows = np.empty(n_up, np.int64)
    up_key = np.empty(n_up)
    low_rows = np.empty(n_low, np.int64)
    low_key = np.empty(n_low)
    a = b = 0
    for i in rows:
        if alpha[i] < 1.0:
            up_rows[a] = i
            up_key[a] = G[i]  # −G decreasing = G increasing
            a += 1
        if alpha[i] > 0.0:
            low_rows[b] = i
            low_key[b] = -G[i]
            b += 1
    up = _smallest(up_key, up_rows, min(k, n_up))
    low = _smallest(low_key, low_rows, min(k, n_low))
    return up, low, n_up, n_low, np.unique(np.concatenate((up, low)))


@numba.njit(cache=True, nogil=True)
def pair_updates(pi, pj, indptr, indices, data, qd, alpha, w):
    """LIBLINEAR's inner loop over the pairs (pi[s], pj[s]) of rows of a CSR set (its rows,
    with increasing indices, squared norms ``qd`` and α, updated in place with w): skip a
    pair both at the same bound or not violating by more than 1e-12; else δ = (Gᵢ − Gⱼ)/(Qᵢᵢ
    + Qⱼⱼ − 2Qᵢⱼ), αᵢ −= δ, αⱼ += δ, clipped to the box along αᵢ + αⱼ = const.  Returns the
    pairs updated."""
    done = 0
    for s in range(len(pi)):
        i, j = pi[s], pj[s]
        if (alpha[i] == 0.0 and alpha[j] == 0.0) or (alpha[i] == 1.0 and alpha[j] == 1.0):
            continue
        gi = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            gi += w[indices[p]] * data[p]
        gj = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            gj += w[indices[p]] * data[p]
        if not ((alpha[i] < 1.0 and alpha[j] > 0.0 and -gj + 1e-12 < -gi)
                or (alpha[i] > 0.0 and alpha[j] < 1.0 and -gi + 1e-12 < -gj)):
            continue
        qij = 0.0  # xᵢᵀxⱼ by merging the rows' indices (a store's are increasing)
        p, q = indptr[i], indptr[j]
        while p < indptr[i + 1] and q < indptr[j + 1]:
            if indices[p] == indices[q]:
                qij += np.float64(data[p]) * data[q]
                p += 1
                q += 1
            elif indices[p] < indices[q]:
                p += 1
            else:
                q += 1
        quad = qd[i] + qd[j] - 2.0 * qij
        if quad <= 0.0:
            quad = 1e-12
        delta = (gi - gj) / quad
        old = alpha[i]
        total = alpha[i] + alpha[j]
        ai, aj = alpha[i] - delta, alpha[j] + delta
        if total > 1.0:
            if ai > 1.0:
                ai, aj = 1.0, total - 1.0
        elif aj < 0.0:
            aj, ai = 0.0, total
        if total > 1.0:
            if aj > 1.0:
                aj, ai = 1.0, total - 1.0
        elif ai < 0.0:
            ai, aj = 0.0, total
        alpha[i], alpha[j] = ai, aj
        d = ai - old
        for p in range(indptr[i], indptr[i + 1]):
            w[indices[p]] += d * data[p]
        for p in range(indptr[j], indptr[j + 1]):
            w[indices[p]] -= d * data[p]
        done += 1
    return done


@numba.njit(cache=True, nogil=True)
def final_stats(indptr, indices, data, w, alpha, G):
    """At the final w, every row's Gᵢ (into G) and LIBLINEAR's ρ statistics: (max G over
    αᵢ = 1, min G over αᵢ = 0, free rows, Σ G over them, Σα, min α, max α, rows with α > 0)."""
    lb, ub, n_free, sum_free = -np.inf, np.inf, 0, 0.0
    total, lo, hi, n_sv = 0.0, np.inf, -np.inf, 0
    for i in range(len(alpha)):
        g = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            g += w[indices[p]] * data[p]
        G[i] = g
        a = alpha[i]
        if a == 1.0:
            lb = max(lb, g)
        elif a == 0.0:
            ub = min(ub, g)
        else:
            n_free += 1
            sum_free += g
        total += a
        lo = min(lo, a)
        hi = max(hi, a)
        if a > 0.0:
            n_sv += 1
    return lb, ub, n_free, sum_free, total, lo, hi, n_sv


@numba.njit(cache=True, nogil=True)
def hinge_sum(G, rho):
    """Σᵢ max(0, ρ − Gᵢ) and the rows with Gᵢ > ρ (predicted +1)."""
    loss, inside = 0.0, 0
    for g in G:
        if g < rho:
            loss += rho - g
        elif g > rho:
            inside += 1
    return loss, inside


@numba.njit(cache=True, nogil=True)
def take(indptr, indices, data, rows):
    """The CSR (indptr, indices, data) of ``rows`` of a CSR matrix, in that order."""
    out_ptr = np.zeros(len(rows) + 1, np.int64)
    for t in range(len(rows)):
        out_ptr[t + 1] = out_ptr[t] + indptr[rows[t] + 1] - indptr[rows[t]]
    out_idx = np.empty(out_ptr[-1], indices.dtype)
    out_data = np.empty(out_ptr[-1], data.dtype)
    for t in range(len(rows)):
        a, q = indptr[rows[t]], out_ptr[t]
        for p in range(indptr[rows[t] + 1] - a):
            out_idx[q + p] = indices[a + p]
            out_data[q + p] = data[a + p]
    return out_ptr, out_idx, out_data


@numba.njit(cache=True, nogil=True)
def sqnorm(w):
    """‖w‖² in a plain loop (NumPy's w @ w calls a BLAS whose threads, woken once an
    iteration on a busy machine, took up to 39 ms of an iteration on pypi-summaries)."""
    total = 0.0
    for v in w:
        total += v * v
    return total
