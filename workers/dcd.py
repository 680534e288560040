"""The per-block task of dual coordinate descent: one visit of one block.

The block's α and shrinking state stay in this worker's memory between
visits (:func:`workers.blocks.run_state`); only ``w`` travels.
"""

from __future__ import annotations

import numpy as np

from storage import BlockInfo

from . import blocks
from .kernels import dcd as kernel


def visit(prev, url: str, info: BlockInfo, run: str, *, bias: float, n_features: int,
          loss: int, C: float, eps: float, n_passes: int, seed: int, positive: int,
          cache_bytes: int, storage_options: dict | None = None):
    """Run DCD passes on one block starting from ``w`` and return ``(w, stats)``.

    ``prev`` is either the initial ``w`` or the ``(w, stats)`` of the block
    visited before, so a round is a chain of tasks the coordinator submits at
    once and ``w`` moves from worker to worker without passing through it.
    """
    w = np.array(prev[0] if isinstance(prev, tuple) else prev, dtype=np.float64)  # own copy
    block, sqnorm = blocks.load(url, info, cache_bytes, storage_options)

    def fresh():
        state, index = kernel.new_state(block.n_rows)
        return np.zeros(block.n_rows), index, state

    alpha, index, state = blocks.run_state(run, info.name, fresh)
    pg_max, pg_min, full, converged, sum_a, sum_a2 = kernel.dcd_passes(
        block.indptr, block.indices, block.data, block.y, positive, sqnorm, w, bias,
        n_features, alpha, index, state, loss, C, eps, n_passes, seed)
    stats = {"block": info.name, "pg_max": pg_max, "pg_min": pg_min, "full": bool(full),
             "converged": bool(converged), "sum_alpha": sum_a, "sum_alpha_sq": sum_a2,
             "active": int(state[kernel.ACTIVE])}
    return w, stats


def stats_of(result):
    """The stats half of a visit's result (a tiny task, so ``w`` is not gathered)."""
    return result[1]
