"""The per-block tasks of the Crammer–Singer solver (:mod:`workers.kernels.crammer_singer`).

As in sequential DCD (:mod:`workers.dcd`), each block's α (n_rows × K) and shrinking
state stay in the memory of the worker that owns the block; only W travels, from
task to task.
"""

from __future__ import annotations

import numpy as np

from storage import BlockInfo

from . import blocks
from .kernels import crammer_singer as kernel


def _state(run: str, info: BlockInfo, block, n_classes: int) -> dict:
    s = blocks.run_state(run, info.name, dict)
    if "alpha" not in s:
        s.update(kernel.new_state(block.n_rows, n_classes, block.y))
    return s


def segment(prev, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
            unshrink: bool, class_cost: np.ndarray, bias: float, n_features: int, cache_bytes: int,
            report_infos: list[BlockInfo] | None = None, storage_options: dict | None = None):
    """One pass (Algorithm 1 of Appendix E) over each block of ``infos`` in order, W carried
    from block to block; ``unshrink`` first reactivates every row and class (E.5).  Row i's
    bound is Cᵢ = ``class_cost[yᵢ]`` times its instance weight (:func:`blocks.row_costs`),
    as LIBLINEAR's ``Solver_MCSVM_CS`` takes C of the row's class.  ``prev``
    is the initial W or the previous segment's ``(W, report)``.  Returns ``(W, report)``,
    report as :func:`report` for ``report_infos`` if given, else None."""
    W = np.array(prev[0] if isinstance(prev, tuple) else prev, dtype=np.float64)
    for info, seed, (block, sqnorm) in zip(infos, seeds,
                                           blocks.stream(url, infos, cache_bytes, storage_options)):
        s = _state(run, info, block, W.shape[1])
        if unshrink:
            s["state"][kernel.ACTIVE] = block.n_rows
            s["active_i"][:] = W.shape[1]
        s["stopping"] = kernel.cs_pass(
            block.indptr, block.indices, block.data, block.y, sqnorm, W, bias, n_features,
            s["alpha"], s["alpha_index"], s["y_index"], s["active_i"], s["index"], s["state"],
            blocks.row_costs(block, class_cost), seed)
        del block, sqnorm
    out = None
    if report_infos:
        out = report(W, url, report_infos, run, bias=bias, n_features=n_features,
                     class_cost=class_cost, cache_bytes=cache_bytes, storage_options=storage_options)
    return W, out


def report(prev, url: str, infos: list[BlockInfo], run: str, *, bias: float, n_features: int,
           class_cost: np.ndarray, cache_bytes: int,
           storage_options: dict | None = None) -> dict:
    """End of a round on one worker: the loss ΣCᵢξᵢ and correct rows of its blocks at the
    round's final W, the dual's linear term Σᵢ Σₘ eᵢᵐαᵢᵐ = Σᵢ (Σₘ αᵢᵐ − αᵢ^{yᵢ}), the largest
    stopping value of the round's passes and the active rows, summed over the blocks."""
    W = prev[0] if isinstance(prev, tuple) else prev
    loss, correct, linear, stopping, active = 0.0, 0, 0.0, -np.inf, 0
    for info, (block, _) in zip(infos, blocks.stream(url, infos, cache_bytes, storage_options)):
        s = blocks.run_state(run, info.name, dict)
        xi, ok = kernel.cs_loss(block.indptr, block.indices, block.data, block.y, W, bias,
                                n_features, blocks.row_costs(block, class_cost))
        alpha = s["alpha"]
        loss, correct = loss + xi, correct + ok
        linear += float(alpha.sum() - alpha[np.arange(block.n_rows), block.y].sum())
        stopping = max(stopping, s["stopping"])
        active += int(s["state"][kernel.ACTIVE])
    return {"loss": loss, "correct": correct, "linear": linear, "ww": float(np.sum(W * W)),
            "stopping": stopping, "active": active, "bytes_read": blocks.take_bytes_read()}
