"""One pass of adaptive stochastic gradient descent over a block: the SGD start of dual CD.

Dual CD's first passes from α = 0 take each row's full step (the coordinate maximum, up to
Cᵢ): after one pass the model is worse than one pass of an online learner with a step per
feature (issue 31: on the generated beyond-memory data, 74.8% test accuracy after the first
pass of ``-s 1`` against 86.5% for this pass and 85.8% for Vowpal Wabbit's).  So while a
validation set watches, the batched dual CD runs this pass on each block it has read,
beside its own (:func:`distsvm.workers.dcd.ovr_batch`), and the round driver keeps the better
of the two models until the dual iterate overtakes (:mod:`distsvm.solvers.driver`).

The update is AdaGrad's diagonal one (Duchi, Hazan & Singer, JMLR 2011, "Adaptive
subgradient methods for online learning and stochastic optimization", the diagonal
Algorithm 1 with the plain gradient step, as Vowpal Wabbit's ``--adaptive``): for row i,
in a random order, gⱼ = λwⱼ + (Cᵢ/C)ξ′(mᵢ)yᵢxᵢⱼ on the row's features j (and the bias), then
Gⱼ += gⱼ² and wⱼ −= η gⱼ/√Gⱼ; λ = 1/(C·l) makes it a stochastic gradient of LIBLINEAR's
objective divided by C·l.  The regularizer's gradient is taken on the row's features only,
as Vowpal Wabbit's ``--l2`` does.
"""

import math

import numba
import numpy as np

from ..losses import dxi
from .linear import row_dot, stop_asked


@numba.njit(cache=True, nogil=True)
def adaptive_pass(indptr, indices, data, y, positive, cost, scale, lam, bias, n_features,
                  loss, w, G, eta, seed, stop=None):
    """One pass over the block's rows in a random order (``seed``), updating ``w`` and the
    squared-gradient sums ``G`` in place; ``cost`` is each row's Cᵢ, ``scale`` = 1/C.
    ``stop`` as :func:`distsvm.workers.kernels.dcd.dcd_passes` polls it."""
    np.random.seed(seed)
    n = len(indptr) - 1
    order = np.random.permutation(n)
    for s in range(n):
        if stop_asked(stop, s):
            return
        i = order[s]
        yi = 1.0 if y[i] == positive else -1.0
        d = dxi(yi * row_dot(indptr, indices, data, i, w, bias, n_features), loss)
        c = cost[i] * scale * d * yi
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            g = lam * w[j] + c * data[k]
            if g != 0.0:
                G[j] += g * g
                w[j] -= eta * g / math.sqrt(G[j])
        if bias >= 0.0:
            g = lam * w[n_features] + c * bias
            if g != 0.0:
                G[n_features] += g * g
                w[n_features] -= eta * g / math.sqrt(G[n_features])
