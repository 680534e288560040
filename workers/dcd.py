"""The per-block tasks of dual coordinate descent: a visit of one block, and a round's report.

A block's α, shrinking state and last visit's statistics stay in the memory
of the worker that owns the block (:func:`workers.blocks.run_state`); only
``w`` travels, from task to task.
"""

from __future__ import annotations

import numpy as np

from storage import BlockInfo

from . import blocks
from .kernels import dcd as kernel


def visit(w_in: np.ndarray, url: str, info: BlockInfo, run: str, *, bias: float,
          n_features: int, loss: int, C: float, eps: float, n_passes: int, seed: int,
          positive: int, cache_bytes: int, storage_options: dict | None = None) -> np.ndarray:
    """Run DCD passes on one block starting from ``w_in``; return the new ``w``.

    The coordinator chains the visits of a round (each takes the previous
    one's ``w``), so ``w`` moves from worker to worker without passing through it.
    """
    w = np.array(w_in, dtype=np.float64)  # Dask may hand us the previous task's own array
    block, sqnorm = blocks.load(url, info, cache_bytes, storage_options)

    def fresh():
        state, index = kernel.new_state(block.n_rows)
        return {"alpha": np.zeros(block.n_rows), "index": index, "state": state, "stats": None}

    s = blocks.run_state(run, info.name, fresh)
    pg_max, pg_min, full, converged, sum_a, sum_a2 = kernel.dcd_passes(
        block.indptr, block.indices, block.data, block.y, positive, sqnorm, w, bias,
        n_features, s["alpha"], s["index"], s["state"], loss, C, eps, n_passes, seed)
    s["stats"] = {"pg_max": pg_max, "pg_min": pg_min, "full": bool(full),
                  "converged": bool(converged), "sum_alpha": sum_a, "sum_alpha_sq": sum_a2,
                  "active": int(s["state"][kernel.ACTIVE])}
    return w


def report(w: np.ndarray, url: str, infos: list[BlockInfo], run: str, *, bias: float,
           n_features: int, loss: int, positive: int, cache_bytes: int,
           storage_options: dict | None = None) -> dict:
    """End of a round on one worker: the loss of its blocks at the round's final ``w`` and
    the statistics of their last visits, summed — all the coordinator needs, in one reply."""
    total, correct, _ = blocks.block_loss(url, infos, w, bias, n_features, loss, positive,
                                          cache_bytes, storage_options)
    stats = [blocks.run_state(run, info.name, dict)["stats"] for info in infos]
    return {"loss": total, "correct": correct, "ww": float(w @ w),
            "sum_alpha": sum(s["sum_alpha"] for s in stats),
            "sum_alpha_sq": sum(s["sum_alpha_sq"] for s in stats),
            "pg_max": max(s["pg_max"] for s in stats), "pg_min": min(s["pg_min"] for s in stats),
            "full": all(s["full"] for s in stats), "active": sum(s["active"] for s in stats)}
