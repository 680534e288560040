"""The per-worker tasks of primal coordinate descent over column blocks.

The solver's state is ``{"w", "b", "f"}``: the weights, bⱼ(w) = 1 − yⱼwᵀxⱼ for
every row (length l) and f(w).  It lives in a Dask future that the coordinator
threads from round to round: :func:`part` tasks read it (and copy what they
change), :func:`combine` makes the next one.  The labels ``cols/y`` are read
once per worker and run (:func:`workers.blocks.run_state`); column blocks come
through the worker's block cache.
"""

from __future__ import annotations

import numpy as np

from storage.columns import ColumnInfo, ColumnsMeta, read_column_block, read_labels

from . import blocks
from .kernels import pcd as kernel

BIAS = None  # stands for the bias feature in a part's visiting order


def initial(n_rows: int, dim: int, loss: int, C: float) -> dict:
    """w = 0, so every bⱼ = 1 (§2, after (17)) and f(0) = C·l·ξ(1)."""
    b = np.ones(n_rows)
    return {"w": np.zeros(dim), "b": b, "f": C * kernel.loss_sum(b, np.zeros(0), 0.0, loss)}


def load_columns(url: str, info: ColumnInfo, cache_bytes: int,
                 storage_options: dict | None = None):
    """``(block, colsq)``: a column block and Σⱼ xⱼᵢ² of its columns, cached."""
    def read():
        block = read_column_block(url, info, storage_options)
        colsq = np.empty(block.n_cols)
        kernel.column_sqnorms(block.indptr, block.data, colsq)
        return (block, colsq), block.nbytes + colsq.nbytes

    return blocks.cached((url, "cols", info.name), read, cache_bytes)


def part(state: dict, url: str, cmeta: ColumnsMeta, items: list, seeds: list[int], run: str, *,
         bias: float, n_features: int, loss: int, C: float, first: bool, cache_bytes: int,
         storage_options: dict | None = None) -> dict:
    """Algorithm 1's inner iterations over ``items`` (column blocks, or :data:`BIAS`) in the
    order given, from ``state``; returns this part's Δw (per block), Δb and statistics."""
    y = blocks.run_state(run, "y", lambda: read_labels(url, cmeta, storage_options))
    w0, b0 = state["w"], state["b"]
    w, b = w0.copy(), b0.copy()
    stats = kernel.new_stats()
    ranges = []
    for item, seed in zip(items, seeds):
        if item is BIAS:
            kernel.pcd_bias(bias, y, 1, b, w, n_features, loss, C, first, stats)
            ranges.append((n_features, n_features + 1))
            continue
        block, colsq = load_columns(url, item, cache_bytes, storage_options)
        kernel.pcd_columns(block.indptr, block.indices, block.data, item.col_start, colsq, y, 1,
                           b, w, loss, C, seed, first, stats)
        ranges.append((item.col_start, item.col_stop))
    b -= b0
    return {"dw": [(s, w[s:e] - w0[s:e]) for s, e in ranges], "db": b, "stats": stats}


def combine(state: dict, parts: list[dict], *, loss: int, C: float) -> tuple[dict, dict]:
    """The next state from the parts' directions, by a line search on the aggregated step.

    With P parts, t = 1, ½, ¼, … is tried until f(w + tΔw) < f(w), but never below
    1/P: by convexity f(w + ΣΔwₚ/P) ≤ Σ f(w + Δwₚ)/P ≤ f(w), since every part's own
    steps decrease f (12).  So f never increases.  One part (exact mode) is Algorithm 1
    and its step is taken whole.  Returns ``(state, report)``.
    """
    w, b, f0 = state["w"], state["b"], state["f"]
    dw = np.zeros_like(w)
    for p in parts:
        for s, v in p["dw"]:
            dw[s:s + len(v)] += v
    db = parts[0]["db"]
    for p in parts[1:]:
        db = db + p["db"]
    t, floor = 1.0, 1.0 / len(parts)
    while True:
        wt = w + t * dw
        f = 0.5 * float(wt @ wt) + C * kernel.loss_sum(b, db, t, loss)
        if f < f0 or t <= floor:
            break
        t = max(t * kernel.BETA, floor)
    stats = np.zeros(kernel.N_STATS)
    for p in parts:
        s = p["stats"]
        stats += s
        for k in (kernel.MAX_GRAD, kernel.MAX_GRAD0):
            stats[k] = max(stats[k] - s[k], s[k])  # a maximum, not a sum
    return ({"w": wt, "b": b + t * db, "f": f},
            {"f": f, "t": t, "stats": stats})


def weights(state: dict) -> np.ndarray:
    return state["w"]


def report(result: tuple) -> dict:
    return result[1]


def state_of(result: tuple) -> dict:
    return result[0]
