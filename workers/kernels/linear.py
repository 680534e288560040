"""Kernels shared by every solver: decision values and the primal loss of a CSR block, and
the entries of a CSC column that the primal CD solvers (pcd, l1) walk.

Data may be float32 or float64; ``w`` and every accumulator are float64.  When
``bias >= 0`` the block has an implicit last feature of constant value
``bias`` (LIBLINEAR's ``-B``), whose weight is ``w[n_features]``.

The coordinate descent kernels visit rows (or columns) in a random order, so on a block
larger than the caches nearly every row's values are a cache miss.  On a block of at least
``PREFETCH_MIN`` entries they :func:`prefetch`, at visit s, the row pointer and per-row
values of the row ``AHEAD`` places on and the entries of the one ``AHEAD // 2`` on (whose
pointer came four visits earlier).  Measured with ``benchmarks/bench_datafit.py --data``: a
DCD pass over pypi-summaries' 9.6 M entries in 0.48–0.58× the time, over its first 200 k
rows (2.8 M entries) 0.65–0.74×; at 1.4 M entries no gain, and on blocks that stay in the caches
(a9a, w8a) the prefetches cost 1.2–1.4× a pass, so smaller blocks go without.
"""

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..losses import xi

AHEAD = 8  # rows ahead whose per-row values are prefetched; their entries AHEAD // 2 ahead
PREFETCH_MIN = 1 << 21  # entries of a block from which prefetching pays (see above)
I8P, I32 = ir.IntType(8).as_pointer(), ir.IntType(32)


@intrinsic
def prefetch(typingctx, i, *arrays):
    """Ask the CPU to bring element (row, in 2-d) ``i`` of each array into its caches:
    LLVM's ``llvm.prefetch``, a read kept in every cache level.  Only a hint, written inline
    (a helper taking arrays costs a pass 7-45% on cached blocks): it never faults, and the
    address is plain arithmetic, so an ``i`` past the end is harmless."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [I8P, I32, I32, I32]),
            "llvm.prefetch.p0")
        index = context.cast(builder, args[0], signature.args[0], types.intp)
        for array_type, value in zip(signature.args[1],
                                     cgutils.unpack_tuple(builder, args[1])):
            a = context.make_array(array_type)(context, builder, value)
            step = cgutils.unpack_tuple(builder, a.strides)[0]
            at = builder.add(builder.ptrtoint(a.data, cgutils.intp_t), builder.mul(index, step))
            builder.call(fn, [builder.inttoptr(at, I8P), I32(0), I32(3), I32(1)])
        return context.get_dummy_value()

    return types.void(i, types.StarArgTuple.from_types(arrays)), codegen


STOP_EVERY = 1024  # the dual CD kernels poll their stop flag every this many rows


@numba.njit(cache=True, nogil=True)
def stop_asked(stop, s):
    """Whether a dual CD pass at its row ``s`` ends for a time budget: ``stop`` (a
    one-element array another thread sets non-zero at the deadline,
    :func:`distsvm.workers.dcd._alarm`; None: never) is polled every ``STOP_EVERY`` rows after
    the first ``STOP_EVERY``, so that every visit makes some progress."""
    return stop is not None and s >= STOP_EVERY and s % STOP_EVERY == 0 and stop[0] != 0.0


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
