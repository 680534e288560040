"""The per-block tasks of dual coordinate descent.

A block's α, shrinking state and last visit's statistics stay in the memory
of the worker that owns the block (:func:`workers.blocks.run_state`); only
``w`` travels, from task to task.  Each block also keeps a copy of its α from
the start of the current round (``tag``), so that after a worker loss the
coordinator can roll the survivors back to it (:func:`restore`).
"""

from __future__ import annotations

import numpy as np

from storage import BlockInfo

from . import blocks
from .kernels import dcd as kernel


def _checkpoint(s: dict, tag: int) -> None:
    """Before a block's first change in round ``tag``, keep its α as the round found it."""
    if s.get("tag") != tag:
        s["tag"], s["saved"] = tag, s["alpha"].copy()


def _visit(w, url, info, run, seed, *, bias, n_features, loss, C, eps, n_passes, positive,
           shrink, cache_bytes, storage_options, tag=0):
    """DCD passes on one block, updating ``w`` in place; the block's statistics are kept.

    ``shrink`` is the round's ``(M̄, m̄)`` of (16), taken over all blocks by the
    coordinator, or None to reactivate every row of the block first.
    """
    block, sqnorm = blocks.load(url, info, cache_bytes, storage_options)

    def fresh():
        state, index = kernel.new_state(block.n_rows)
        return {"alpha": np.zeros(block.n_rows), "index": index, "state": state, "stats": None}

    s = blocks.run_state(run, info.name, dict)
    if "state" not in s:  # new, or only α kept by restore()
        s.update({**fresh(), **s})
    _checkpoint(s, tag)
    state = s["state"]
    if shrink is None:
        state[kernel.ACTIVE] = block.n_rows
        state[kernel.PG_MAX_OLD], state[kernel.PG_MIN_OLD] = np.inf, -np.inf
    else:
        state[kernel.PG_MAX_OLD], state[kernel.PG_MIN_OLD] = shrink
    pg_max, pg_min, full, _, sum_a, sum_a2 = kernel.dcd_passes(
        block.indptr, block.indices, block.data, block.y, positive, sqnorm, w, bias,
        n_features, s["alpha"], s["index"], state, loss, C, eps, n_passes, seed)
    s["stats"] = {"pg_max": pg_max, "pg_min": pg_min, "full": bool(full), "sum_alpha": sum_a,
                  "sum_alpha_sq": sum_a2, "active": int(state[kernel.ACTIVE])}


def segment(prev, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
            report_infos: list[BlockInfo] | None = None, **kw):
    """Visit ``infos`` in order (consecutive blocks of a round owned by this worker).

    ``prev`` is the initial ``w`` or the previous segment's ``(w, report)``; the
    coordinator chains the segments of a round, so ``w`` moves from worker to
    worker without passing through it.  Returns ``(w, report)``, where report
    covers ``report_infos`` (see :func:`report`) if given, else None.
    """
    w = np.array(prev[0] if isinstance(prev, tuple) else prev, dtype=np.float64)  # own copy
    for info, seed in zip(infos, seeds):
        _visit(w, url, info, run, seed, **kw)
    out = None
    if report_infos:
        out = report(w, url, report_infos, run, bias=kw["bias"], n_features=kw["n_features"],
                     loss=kw["loss"], positive=kw["positive"], cache_bytes=kw["cache_bytes"],
                     storage_options=kw["storage_options"])
    return w, out


def report(prev, url: str, infos: list[BlockInfo], run: str, *, bias: float,
           n_features: int, loss: int, positive: int, cache_bytes: int,
           storage_options: dict | None = None) -> dict:
    """End of a round on one worker: the loss of its blocks at the round's final ``w`` and
    the statistics of their last visits, summed — all the coordinator needs, in one reply."""
    w = prev[0] if isinstance(prev, tuple) else prev
    total, correct, _ = blocks.block_loss(url, infos, w, bias, n_features, loss, positive,
                                          cache_bytes, storage_options)
    stats = [blocks.run_state(run, info.name, dict)["stats"] for info in infos]
    return {"loss": total, "correct": correct, "ww": float(w @ w),
            "sum_alpha": sum(s["sum_alpha"] for s in stats),
            "sum_alpha_sq": sum(s["sum_alpha_sq"] for s in stats),
            "pg_max": max(s["pg_max"] for s in stats), "pg_min": min(s["pg_min"] for s in stats),
            "full": all(s["full"] for s in stats), "active": sum(s["active"] for s in stats)}


def local_round(w, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
                gamma: float, sigma: float, bias: float, n_features: int, loss: int,
                positive: int, C: float, eps: float, n_passes: int, cache_bytes: int,
                storage_options: dict | None = None, tag: int = 0):
    """One round of parallel DCD (CoCoA/CoCoA+) on the blocks ``infos`` this worker owns.

    First the statistics of its blocks at the broadcast ``w`` (the loss, the
    projected gradients and Σα, Σα², see :func:`kernel.dual_stats`), then
    ``n_passes`` local DCD passes over each block from ``w`` with the local
    subproblem scaled by ``sigma`` (σ′), and finally each block's α moves by
    ``gamma`` times its change, so that after the coordinator's
    ``w += gamma·Σ Δw`` it still holds that w = Σ αᵢyᵢxᵢ.  α never leaves the
    worker.  Returns ``(Δw, report)``.
    """
    u = np.array(w, dtype=np.float64)  # w₀ + σ′Δw as the local passes go
    rows = []
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        s = blocks.run_state(run, info.name, dict)
        if "alpha" not in s:
            s["alpha"] = np.zeros(block.n_rows)
        rows.append(kernel.dual_stats(block.indptr, block.indices, block.data, block.y,
                                      positive, w, bias, n_features, s["alpha"], loss, C))
    for info, seed in zip(infos, seeds):
        block, sqnorm = blocks.load(url, info, cache_bytes, storage_options)
        s = blocks.run_state(run, info.name, dict)
        _checkpoint(s, tag)
        alpha = s["alpha"]
        old = alpha.copy()
        state, index = kernel.new_state(block.n_rows)  # shrinking only within the round
        kernel.dcd_passes(block.indptr, block.indices, block.data, block.y, positive, sqnorm,
                          u, bias, n_features, alpha, index, state, loss, C, eps, n_passes,
                          seed, sigma)
        alpha[:] = old + gamma * (alpha - old)
    total, correct, pg_max, pg_min, sum_a, sum_a2 = zip(*rows)
    report = {"loss": sum(total), "correct": sum(correct), "pg_max": max(pg_max),
              "pg_min": min(pg_min), "sum_alpha": sum(sum_a), "sum_alpha_sq": sum(sum_a2)}
    return (u - w) / sigma, report


def restore(url: str, infos: list[BlockInfo], run: str, tag: int, *, bias: float,
            n_features: int, positive: int, cache_bytes: int,
            storage_options: dict | None = None) -> np.ndarray:
    """After a worker loss: roll the blocks ``infos`` of this worker back to the start of
    round ``tag`` and return their part of w, Σ_b X_bᵀ(α_b∘y_b) (13).

    A block changed in round ``tag`` gets back the α it had before; its other state
    (shrinking, statistics) is dropped and rebuilt at its next visit.  A block this
    worker has no state for (never visited here) has α = 0 and adds nothing.  Idempotent:
    a second loss during the recovery may run it again.
    """
    out = np.zeros(n_features + (1 if bias >= 0 else 0))
    for info in infos:
        s = blocks.run_state(run, info.name, dict)
        if "alpha" not in s:
            continue
        if s.get("tag") == tag:
            s["alpha"][:] = s["saved"]
        alpha = s["alpha"]
        s.clear()
        s.update(alpha=alpha, tag=tag, saved=alpha.copy())
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        v = alpha * np.where(block.y == positive, 1.0, -1.0)
        out += np.bincount(block.indices, weights=block.data * np.repeat(v, np.diff(block.indptr)),
                           minlength=len(out))
        if bias >= 0:
            out[-1] += bias * v.sum()
    return out
