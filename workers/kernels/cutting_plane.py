"""Kernels of the cutting-plane solver (Joachims 2006): the most violated constraint.

Data may be float32 or float64; ``w``, the constraint vector and every accumulator are
float64.  ``bias >= 0`` adds LIBLINEAR's constant feature, weight ``w[n_features]``.
"""

import numba
import numpy as np

from ..losses import HINGE, xi
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
            loss += xi(m, HINGE)
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


@numba.njit(cache=True, nogil=True)
def rank_thresholds(scores, ranks, order, n_ranks, out):
    """Thresholds θ₁ ≤ … ≤ θ_{R−1} that minimize the training absolute rank error.

    ``order`` sorts ``scores`` increasingly; ``ranks`` are 0 … n_ranks−1.  A score s is
    given the rank #{k : s > θ_k}.  Then |predicted − true| = Σ_k [s > θ_k ≠ r ≥ k], so the
    total absolute rank error is the sum over k of the errors of the binary problem
    "rank ≥ k" cut at θ_k, each minimized here on its own over the cuts between distinct
    scores (θ_k the midpoint of the two scores around the cut, or the lowest score − 1 /
    highest + 1 at the ends).  The cut errors fₖ satisfy: fₖ − fₖ₊₁ is nondecreasing in θ, so
    sorting the per-k optima keeps each pair's total, and the sorted thresholds reach the
    minimum of the whole sum.  Fills ``out`` (n_ranks − 1 floats, sorted) and returns that
    minimum, Σᵢ |predictedᵢ − rᵢ|.
    """
    n = len(order)
    total = 0
    for k in range(1, n_ranks):
        below = 0  # rows of rank < k: all misranked while the cut is below them
        for i in range(n):
            if ranks[i] < k:
                below += 1
        errors = below  # the cut under every score
        best, best_p = errors, 0
        for p in range(1, n + 1):
            if ranks[order[p - 1]] < k:
                errors -= 1
            else:
                errors += 1
            if (p == n or scores[order[p - 1]] < scores[order[p]]) and errors < best:
                best, best_p = errors, p
        if n == 0:
            out[k - 1] = 0.0
        elif best_p == 0:
            out[k - 1] = scores[order[0]] - 1.0
        elif best_p == n:
            out[k - 1] = scores[order[n - 1]] + 1.0
        else:
            out[k - 1] = 0.5 * (scores[order[best_p - 1]] + scores[order[best_p]])
        total += best
    out.sort()
    return total


@numba.njit(cache=True, nogil=True)
def concordant_pairs(scores, ranks, order, n_ranks):
    """Pairs (i, j) with rᵢ > rⱼ ordered by the scores: #{sᵢ > sⱼ} + ½ #{sᵢ = sⱼ}.

    ``order`` sorts ``scores`` increasingly.  Divided by the number of such pairs this is
    the pairwise ordering accuracy (Harrell's C; the ROC area for two ranks).  O(n·R).
    """
    n = len(order)
    lower = np.zeros(n_ranks, np.int64)  # rows scored strictly below the current group
    group = np.zeros(n_ranks, np.int64)
    total = 0.0
    p = 0
    while p < n:
        q = p
        while q < n and scores[order[q]] == scores[order[p]]:
            group[ranks[order[q]]] += 1
            q += 1
        below = 0  # rows of lower rank scored below, and tied rows of lower rank
        tied = 0
        for r in range(n_ranks):
            total += group[r] * (below + 0.5 * tied)
            below += lower[r]
            tied += group[r]
        for r in range(n_ranks):
            lower[r] += group[r]
            group[r] = 0
        p = q
    return total
