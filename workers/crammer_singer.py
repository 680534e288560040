"""The per-block tasks of the Crammer–Singer solver (:mod:`workers.kernels.crammer_singer`).

As in sequential DCD (:mod:`workers.dcd`), each block's α (n_rows × K) and shrinking
state stay in the memory of the worker that owns the block; only W travels, from
task to task.  Each block also keeps a copy of its α from the start of the current round
(``tag``), so that after a worker loss the coordinator can roll the survivors back to it
(:func:`restore`), and its state goes into checkpoints (:func:`save_blocks`).
"""

from __future__ import annotations

import numpy as np

from storage import BlockInfo

from . import blocks, resident
from .kernels import crammer_singer as kernel

# a block's state in a checkpoint: α and the shrinking state (the rows' order included)
STATE = ("alpha", "alpha_index", "y_index", "active_i", "index", "state")


def _state(run: str, info: BlockInfo, block, n_classes: int) -> dict:
    """The block's α and shrinking state, made on first use; after :func:`restore`, which
    keeps only α, the shrinking state starts afresh (every row and class active)."""
    s = blocks.run_state(run, info.name, dict)
    if "state" not in s:
        s.update({**kernel.new_state(block.n_rows, n_classes, block.y), **s})
    return s


def segment(prev, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
            unshrink: bool, class_cost: np.ndarray, bias: float, n_features: int, cache_bytes: int,
            report_infos: list[BlockInfo] | None = None, storage_options: dict | None = None,
            tag: int = 0):
    """One pass (Algorithm 1 of Appendix E) over each block of ``infos`` in order, W carried
    from block to block; ``unshrink`` first reactivates every row and class (E.5).  Row i's
    bound is Cᵢ = ``class_cost[yᵢ]`` times its instance weight (:func:`blocks.row_costs`),
    as LIBLINEAR's ``Solver_MCSVM_CS`` takes C of the row's class.  ``prev``
    is the initial W or the previous segment's ``(W, report)``; ``tag`` is the round (for
    :func:`resident.mark`).  Returns ``(W, report)``,
    report as :func:`report` for ``report_infos`` if given, else None."""
    W = np.array(prev[0] if isinstance(prev, tuple) else prev, dtype=np.float64)
    for info, seed, (block, sqnorm) in zip(infos, seeds,
                                           blocks.stream(url, infos, cache_bytes, storage_options)):
        s = _state(run, info, block, W.shape[1])
        resident.mark(s, tag)
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


def restore(url: str, infos: list[BlockInfo], run: str, tag: int, *, n_classes: int,
            bias: float, n_features: int, cache_bytes: int,
            storage_options: dict | None = None) -> np.ndarray:
    """After a worker loss: roll the blocks ``infos`` of this worker back to the start of
    round ``tag`` and return their part of W (n_features [+1] × K), wₘ = Σᵢ αᵢᵐ x̂ᵢ
    (:func:`resident.restore`)."""
    return resident.restore(url, infos, run, tag,
                            np.zeros((n_features + (1 if bias >= 0 else 0), n_classes)),
                            lambda block, alpha: alpha, bias=bias, n_features=n_features,
                            cache_bytes=cache_bytes, storage_options=storage_options)


def save_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                storage_options: dict | None = None) -> dict[str, str]:
    """Checkpoint: write α and the shrinking state of blocks ``infos`` in the run of ``runs``
    (``{"": run id}``) into ``directory`` (:func:`resident.save_blocks`); return {file
    name: SHA-256}.  They load back with :func:`resident.load_blocks`."""
    return resident.save_blocks(runs, infos, directory, STATE, storage_options)

