"""Kernels of the cutting-plane solver (Joachims 2006): the most violated constraint.

Data may be float32 or float64; ``w``, the constraint vector and every accumulator are
float64.  ``bias >= 0`` adds LIBLINEAR's constant feature, weight ``w[n_features]``.
"""

import numba
import numpy as np

from .linear import row_dot


@numba.njit(cache=True, nogil=True)
def hinge_cut(indptr, indices, data, y, positive, w, bias, n_features, out):
    """Algorithm 1 lines 5-7 on one block: cᵢ = 1 iff yᵢwᵀxᵢ < 1.

    Adds Σ cᵢyᵢxᵢ into ``out`` (float64, length n_features [+1], in place) and returns
    (Σ cᵢ, Σ max(0, 1 − yᵢwᵀxᵢ)), with yᵢ = +1 iff y == positive.
    """
    count = 0
    loss = 0.0
    for i in range(len(indptr) - 1):
        yi = 1.0 if y[i] == positive else -1.0
        m = yi * row_dot(indptr, indices, data, i, w, bias, n_features)
        if m < 1.0:
            count += 1
            loss += 1.0 - m
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += yi * data[k]
            if bias >= 0.0:
                out[n_features] += yi * bias
    return count, loss


@numba.njit(cache=True, nogil=True)
def weighted_sum(indptr, indices, data, coef, bias, n_features, out):
    """Add Σ coefᵢ xᵢ into ``out`` (float64, in place); the OP5 constraint Σ (c⁺ᵢ − c⁻ᵢ) xᵢ."""
    for i in range(len(indptr) - 1):
        c = coef[i]
        if c != 0.0:
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += c * data[k]
            if bias >= 0.0:
                out[n_features] += c * bias


@numba.njit(cache=True, nogil=True)
def pair_counts(scores, ranks, order, n_ranks, cplus, cminus):
    """Algorithm 2 lines 5-23: the most violated constraint of OP5 in O(Rn) after the sort.

    ``order`` sorts ``scores`` (wᵀxᵢ) decreasingly; ``ranks`` are 0 … n_ranks−1.  Fills
    (in place, int64, zero on entry) c⁺ᵢ = |{j : rᵢ > rⱼ, sᵢ − sⱼ < 1}| and
    c⁻ᵢ = |{j : rⱼ > rᵢ, sⱼ − sᵢ < 1}| and returns Σ c⁺ᵢ, the number of violated pairs.
    For each rank r, the pointer j runs over the prefix of examples scored above sᵢ − 1
    while i runs over the examples of rank r: b counts the lower-ranked ones in the
    prefix (each is violated with i), and a lower-ranked j entering the prefix at i is
    violated with every rank-r example from i on, n_r − a of them (the paper's line 13
    with a counting the rank-r examples before i).
    """
    n = len(order)
    counts = np.zeros(n_ranks, np.int64)
    for i in range(n):
        counts[ranks[i]] += 1
    for r in range(1, n_ranks):
        nr = counts[r]
        if nr == 0:
            continue
        j = 0
        a = 0
        b = 0
        for p in range(n):
            i = order[p]
            if ranks[i] == r:
                while j < n and scores[i] - scores[order[j]] < 1.0:
                    q = order[j]
                    if ranks[q] < r:
                        b += 1
                        cminus[q] += nr - a
                    j += 1
                a += 1
                cplus[i] += b
    total = 0
    for i in range(n):
        total += cplus[i]
    return total
