"""The per-worker tasks of the cutting-plane solver: one pass over a worker's blocks each.

Nothing is kept between tasks but the block cache: the solver's state (the working set)
lives on the coordinator, and each task returns one dense float64 vector of length
n_features [+1] — the worker's part of the new constraint — however many blocks it owns.
"""

from __future__ import annotations

import numpy as np

from distsvm.storage import BlockInfo

from . import blocks
from .kernels import cutting_plane as kernel


def hinge_cut(w, url: str, infos: list[BlockInfo], *, bias: float, n_features: int,
              positive: int, cache_bytes: int, storage_options: dict | None = None):
    """(Σ cᵢyᵢxᵢ, Σ cᵢ, Σ hinge loss) over ``infos`` at ``w`` (Algorithm 1 lines 5-7)."""
    out = np.zeros(w.shape[0])
    count, loss = 0, 0.0
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        c, s = kernel.hinge_cut(block.indptr, block.indices, block.data, block.y, positive, w,
                                bias, n_features, out)
        count += c
        loss += s
    return out, count, loss


def weighted_sum(coefs: list[np.ndarray], url: str, infos: list[BlockInfo], *, dim: int,
                 bias: float, n_features: int, cache_bytes: int,
                 storage_options: dict | None = None) -> np.ndarray:
    """Σ coefᵢ xᵢ over ``infos``, ``coefs[k]`` holding the coefficients of block ``infos[k]``."""
    out = np.zeros(dim)
    for coef, info in zip(coefs, infos):
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        kernel.weighted_sum(block.indptr, block.indices, block.data, coef, bias, n_features, out)
    return out
