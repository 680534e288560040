"""Kernels shared by every solver: decision values and the primal loss of a CSR block, and
the entries of a CSC column that the primal CD solvers (pcd, l1) walk.

Data may be float32 or float64; ``w`` and every accumulator are float64.  When
``bias >= 0`` the block has an implicit last feature of constant value
``bias`` (LIBLINEAR's ``-B``), whose weight is ``w[n_features]``.
"""

import numba
import numpy as np

from ..losses import xi


@numba.njit(cache=True, nogil=True, inline="always")
def row_dot(indptr, indices, data, i, w, bias, n_features):
    """wᵀxᵢ in float64, including the bias feature."""
    s = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        s += w[indices[k]] * data[k]
    if bias >= 0.0:
        s += w[n_features] * bias
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def column_entry(k, indices, data, dense, dval):
    """Row index and value of the k-th entry of a column (dense: row k, value dval)."""
    if dense:
        return k, dval
    return indices[k], np.float64(data[k])


@numba.njit(cache=True, nogil=True)
def decision_values(indptr, indices, data, w, bias, n_features, out):
    """Write wᵀxᵢ for every row into ``out`` (float64, in place)."""
    for i in range(len(indptr) - 1):
        out[i] = row_dot(indptr, indices, data, i, w, bias, n_features)


@numba.njit(cache=True, nogil=True)
def loss_sums(indptr, indices, data, y, positives, W, bias, n_features, loss, class_costs,
              weight, totals, correct):
    """For each problem j (a row of ``W``, yᵢ = +1 iff y == ``positives[j]``): Σ Cᵢ loss(yᵢ
    wⱼᵀxᵢ) into ``totals[j]`` and the number of rows with yᵢ wⱼᵀxᵢ > 0 into ``correct[j]``,
    both in place, with Cᵢ = ``class_costs[j, y[i]]`` times ``weight[i]`` (an empty
    ``weight``: no instance weights).  One read of the block serves every problem."""
    totals[:] = 0.0
    correct[:] = 0
    for j in range(len(positives)):  # problem by problem: one w at a time stays in cache
        w = W[j]
        for i in range(len(indptr) - 1):
            yi = 1.0 if y[i] == positives[j] else -1.0
            m = yi * row_dot(indptr, indices, data, i, w, bias, n_features)
            if m > 0.0:
                correct[j] += 1
            c = class_costs[j, y[i]] * (weight[i] if len(weight) else 1.0)
            totals[j] += c * xi(m, loss)


@numba.njit(cache=True, nogil=True)
def row_sqnorms(indptr, data, out):
    """‖xᵢ‖² per row into ``out`` (float64, in place)."""
    for i in range(len(indptr) - 1):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += np.float64(data[k]) * data[k]
        out[i] = s
