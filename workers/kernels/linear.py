"""Kernels shared by every solver: decision values and the primal loss of a CSR block.

Data may be float32 or float64; ``w`` and every accumulator are float64.  When
``bias >= 0`` the block has an implicit last feature of constant value
``bias`` (LIBLINEAR's ``-B``), whose weight is ``w[n_features]``.
"""

import numba
import numpy as np

import math

from ..losses import HINGE, LOGISTIC, SQUARED_HINGE


@numba.njit(cache=True, nogil=True, inline="always")
def row_dot(indptr, indices, data, i, w, bias, n_features):
    """wᵀxᵢ in float64, including the bias feature."""
    s = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        s += w[indices[k]] * data[k]
    if bias >= 0.0:
        s += w[n_features] * bias
    return s


@numba.njit(cache=True, nogil=True)
def decision_values(indptr, indices, data, w, bias, n_features, out):
    """Write wᵀxᵢ for every row into ``out`` (float64, in place)."""
    for i in range(len(indptr) - 1):
        out[i] = row_dot(indptr, indices, data, i, w, bias, n_features)


@numba.njit(cache=True, nogil=True)
def loss_sum(indptr, indices, data, y, positive, w, bias, n_features, loss, cost):
    """Return (Σ Cᵢ loss(yᵢ wᵀxᵢ), number of rows with yᵢ wᵀxᵢ > 0), yᵢ = +1 iff y ==
    positive, Cᵢ = ``cost[i]`` (the row's C with its weights, float64)."""
    total = 0.0
    correct = 0
    for i in range(len(indptr) - 1):
        yi = 1.0 if y[i] == positive else -1.0
        m = yi * row_dot(indptr, indices, data, i, w, bias, n_features)
        if m > 0.0:
            correct += 1
        if loss == LOGISTIC:  # log(1 + e^{−m}) without overflow
            total += cost[i] * (math.log1p(math.exp(-m)) if m > 0.0
                                else -m + math.log1p(math.exp(m)))
        elif m < 1.0:
            if loss == HINGE:
                total += cost[i] * (1.0 - m)
            elif loss == SQUARED_HINGE:
                total += cost[i] * (1.0 - m) * (1.0 - m)
    return total, correct


@numba.njit(cache=True, nogil=True)
def row_sqnorms(indptr, data, out):
    """‖xᵢ‖² per row into ``out`` (float64, in place)."""
    for i in range(len(indptr) - 1):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += np.float64(data[k]) * data[k]
        out[i] = s
