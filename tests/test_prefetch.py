"""The kernels' prefetching (distsvm.workers.kernels.linear.prefetch) is only a hint: on a block large
enough to use it, a DCD pass is still Algorithm 1 iterate by iterate."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from distsvm.workers.kernels import dcd as kernel
from distsvm.workers.kernels.linear import PREFETCH_MIN, prefetch, row_sqnorms


@numba.njit
def _sum_with_prefetches(a, b, m):
    """Σa + Σb + Σm[:, 0], prefetching 8 elements (rows of m) ahead, past the ends too."""
    s = 0.0
    for i in range(len(a)):
        prefetch(i + 8, a, b, m)
        prefetch(np.int32(i + 1_000_000_000), a)
        s += a[i] + b[i] + m[i, 0]
    return s


def _asm(dispatcher) -> str:
    """The machine code of ``dispatcher``'s first signature, compiled afresh (a function
    loaded from Numba's cache has none to show)."""
    fresh = numba.njit(dispatcher.py_func)
    fresh.compile(dispatcher.signatures[0])
    return "\n".join(fresh.inspect_asm().values())


def test_prefetch_changes_no_value_and_is_compiled_in():
    a, b = np.arange(100.0), np.arange(100, dtype=np.int32)
    m = np.arange(300.0).reshape(100, 3)
    assert _sum_with_prefetches(a, b, m) == a.sum() + b.sum() + m[:, 0].sum()
    assert "prefetch" in _asm(_sum_with_prefetches)


@numba.njit
def _reference_pass(indptr, indices, data, s, sqnorm, alpha, w, order, diag, upper):
    """Algorithm 1, steps (a)-(d), over the rows in ``order``: no shrinking, no prefetch."""
    for i in order:
        G = -1.0 + diag * alpha[i]
        for k in range(indptr[i], indptr[i + 1]):
            G += s[i] * w[indices[k]] * data[k]
        pg = min(G, 0.0) if alpha[i] == 0.0 else (max(G, 0.0) if alpha[i] == upper else G)
        if abs(pg) > 1e-12:
            old = alpha[i]
            alpha[i] = min(max(old - G / (sqnorm[i] + diag), 0.0), upper)
            for k in range(indptr[i], indptr[i + 1]):
                w[indices[k]] += (alpha[i] - old) * s[i] * data[k]


@pytest.mark.parametrize("loss", [0, 1])
def test_first_pass_on_a_prefetching_block_equals_algorithm_1(loss):
    rng = np.random.default_rng(3)
    n, per_row, d = PREFETCH_MIN // 14 + 1000, 14, 50_000
    indptr = np.arange(0, (n + 1) * per_row, per_row, dtype=np.int64)
    indices = rng.integers(0, d, n * per_row).astype(np.int32)
    data = rng.random(n * per_row, dtype=np.float32)
    assert len(indices) >= PREFETCH_MIN
    y = rng.integers(0, 2, n).astype(np.int32)
    sq = np.empty(n)
    row_sqnorms(indptr, data, sq)
    C = 0.5
    w, alpha = np.zeros(d), np.zeros(n)
    state, index = kernel.new_state(n)
    kernel.dcd_passes(indptr, indices, data, y, 1, sq, w, -1.0, d, alpha, index, state, loss,
                      np.full(n, C), 1e-3, 1, 42)
    assert "prefetch" in _asm(kernel.dcd_passes)
    w_ref, a_ref = np.zeros(d), np.zeros(n)
    diag, upper = (0.0, C) if loss == 0 else (0.5 / C, np.inf)
    _reference_pass(indptr, indices, data, np.where(y == 1, 1.0, -1.0), sq, a_ref, w_ref,
                    index.copy(), diag, upper)
    assert np.count_nonzero(alpha) > n // 10
    np.testing.assert_allclose(alpha, a_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-12)
