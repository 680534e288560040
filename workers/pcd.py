"""The per-worker tasks of primal coordinate descent over column blocks.

The solver's state is ``{"w", "b", "c", "f"}``: the weights, bⱼ(w) = 1 − yⱼwᵀxⱼ and
the cost Cⱼ (C times the row's class and instance weights) for every row (length l), and
f(w).  In exact mode it stays on the one worker for the
whole run (:func:`distsvm.workers.blocks.run_state`) and :func:`exact_rounds` updates it in
place; in parallel mode it lives in a Dask future that the coordinator threads from
task to task: :func:`part` tasks read it (and copy what they change) and
:func:`combine` makes the next one.  The labels ``cols/y`` are read
once per worker and run (:func:`distsvm.workers.blocks.run_state`); column blocks come
through the worker's block cache.

Everything but w is a function of w (:func:`initial` rebuilds it in one pass over the
column blocks), and every report carries w: so the coordinator can checkpoint a run, or
restart it on another worker, from w alone.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from distsvm.storage import BlockInfo
from distsvm.storage.columns import (
    ColumnInfo,
    ColumnsMeta,
    column_bytes,
    join_blocks,
    joined,
    read_column_block,
    read_labels,
)

from . import blocks
from .kernels import pcd as kernel
from .kernels.linear import row_sqnorms
from .validation import row_costs


def initial(url: str, cmeta: ColumnsMeta, dim: int, loss: int, class_cost: np.ndarray,
            row_infos: list[BlockInfo] | None = None,
            storage_options: dict | None = None, w: np.ndarray | None = None, *,
            bias: float = -1.0, positive: int = 1, cache_bytes: int = 0,
            holdout=None) -> dict:
    """The state at ``w`` (None: w = 0, where every bⱼ = 1, §2 after (17), and f(0) =
    ΣCⱼ·ξ(1)).  Cⱼ = ``class_cost[yⱼ]`` times row j's instance weight, read from the row
    blocks ``row_infos`` (all of them, in order: the column view's row order) of a weighted
    store (None: unweighted); the rows ``holdout`` names cost 0
    (:func:`distsvm.workers.validation.row_costs`).  For w ≠ 0, bⱼ(w) = 1 − yⱼwᵀxⱼ is (17)
    applied to every feature with z = wᵢ from w = 0, in one pass over the column blocks
    (through the block cache, ``cache_bytes``) and the bias feature; rows of class index
    ``positive`` have yⱼ = +1."""
    y, cost = row_costs(url, cmeta, class_cost, row_infos, holdout, storage_options)
    b = np.ones(cmeta.n_rows)
    if w is None:
        w = np.zeros(dim)
    else:
        w = np.array(w, dtype=np.float64)
        for info in cmeta.blocks:
            block, _ = load_columns(url, info, cache_bytes, storage_options)
            kernel.residuals(block.indptr, block.indices, block.data, info.col_start, y,
                             positive, w, b)
        if bias >= 0:
            b -= w[cmeta.n_features] * bias * np.where(y == positive, 1.0, -1.0)
    return {"w": w, "b": b, "c": cost, "f": _objective(w, b, loss, cost)}


def load_columns(url: str, info: ColumnInfo, cache_bytes: int,
                 storage_options: dict | None = None):
    """``(block, colsq)``: a column block and Σⱼ xⱼᵢ² of its columns, cached.  A joined
    block (:func:`distsvm.storage.columns.joined`) is made from its parts, loaded the same way."""
    def read():
        if info.parts:
            loaded = [load_columns(url, part, cache_bytes, storage_options)
                      for part in info.parts]
            block = join_blocks([b for b, _ in loaded])
            colsq = np.concatenate([c for _, c in loaded])
        else:
            block = read_column_block(url, info, storage_options, recheck=False)
            colsq = np.empty(block.n_cols)
            row_sqnorms(block.indptr, block.data, colsq)  # on CSC arrays: Σⱼ xⱼᵢ² per column
        return (block, colsq), block.nbytes + colsq.nbytes

    # keyed by content too: a column view rebuilt at the same URL is never served stale
    key = (url, "cols", info.name,
           tuple(tuple(sorted(p.crc32.items())) for p in info.parts or (info,)))
    return blocks.cached(key, read, cache_bytes)


def held(cmeta: ColumnsMeta, cache_bytes: int, free_bytes: int | None = None) -> ColumnsMeta:
    """The view a run on this worker passes over: joined into one block
    (:func:`distsvm.storage.columns.joined`) if the joined block fits in the block cache and
    it and its stored blocks, side by side while it is made, fit in ``free_bytes`` (the
    plan's memory for the cache and the blocks in flight: a joined view has none in flight
    once made; None: the cache), else as stored.  A pass over the joined block visits all
    columns in one random order: on pypi-summaries' 2 blocks, CDN (-s 5) stopped after 30
    outer iterations instead of 39 (LIBLINEAR: 31).  Sized by the data's dtype: at 8 bytes
    a value for float32 data (pypi-summaries' view: 84 MB).  Measured on a 780 MB worker:
    the view and its blocks (167 MB) in a 168 MiB cache on a fresh worker, in less after
    other jobs (the race's: 39 iterations); joined, the job peaked at 376 MiB of its
    744 MiB (docs/benchmarks.md)."""
    view = view_bytes(cmeta)
    room = cache_bytes if free_bytes is None else max(cache_bytes, free_bytes)
    return joined(cmeta) if view <= cache_bytes and 2 * view <= room else cmeta


def view_bytes(cmeta: ColumnsMeta) -> int:
    """Bytes of the column view joined in a worker's cache: its arrays and column norms, at
    the data's dtype (8 bytes a value where the view has no block)."""
    itemsize = np.dtype(cmeta.blocks[0].dtype).itemsize if cmeta.blocks else 8
    return column_bytes(cmeta.n_features, cmeta.nnz, itemsize)


def _state(prev) -> dict:
    """The state itself, or the state of a :func:`combine` result."""
    return prev[0] if isinstance(prev, tuple) else prev


def n_items(cmeta: ColumnsMeta, bias: float) -> int:
    """The items a round visits: the column blocks, then the bias feature if there is one."""
    return len(cmeta.blocks) + (1 if bias >= 0 else 0)


def round_plan(seed: int, *key: int) -> tuple[list[int], list[int]]:
    """A random order of the items (§3.2) and each item's kernel seed, for ``key`` = (round,
    [inner cycle,] number of items): a function of (seed, key) only, so results do not
    depend on how rounds are batched."""
    rng = np.random.default_rng([seed, *key])
    return [int(k) for k in rng.permutation(key[-1])], [int(v) for v in
                                                       rng.integers(0, 2**31, key[-1])]


_prefetch: ThreadPoolExecutor | None = None


def _reader() -> ThreadPoolExecutor:
    """This process's one reading thread (a worker runs one task at a time)."""
    global _prefetch
    if _prefetch is None:
        _prefetch = ThreadPoolExecutor(1, thread_name_prefix="pcd-read")
    return _prefetch


def _visit(w, b, cost, run, url, cmeta, keys, seeds, *, bias, n_features, loss, first,
           cache_bytes, storage_options, positive=1):
    """Inner iterations over the items ``keys`` (column block numbers; ``len(cmeta.blocks)``
    is the bias feature) in order, updating ``w`` and ``b`` (rows cost ``cost``); returns
    (stats, feature ranges).

    Column blocks stream through one reading thread: the next item's block is read (or taken
    from the cache) while the kernel, which releases the GIL, works on the current one, and
    the first while the labels are read; so at most two blocks are in flight.  Rows of class
    index ``positive`` have yᵢ = +1, the others −1 (one-vs-rest)."""
    def load(k):
        if k == len(cmeta.blocks):
            return None
        return load_columns(url, cmeta.blocks[k], cache_bytes, storage_options)

    stats = kernel.new_stats()
    ranges = []
    ahead = _reader().submit(load, keys[0]) if keys else None
    y = _labels(run, url, cmeta, storage_options)
    for i, k in enumerate(keys):
        loaded = ahead.result()
        ahead = _reader().submit(load, keys[i + 1]) if i + 1 < len(keys) else None
        if loaded is None:
            kernel.pcd_bias(bias, y, positive, b, w, n_features, loss, cost, first, stats)
            ranges.append((n_features, n_features + 1))
            continue
        info = cmeta.blocks[k]
        block, colsq = loaded
        kernel.pcd_columns(block.indptr, block.indices, block.data, info.col_start, colsq, y,
                           positive, b, w, loss, cost, seeds[k], first, stats)
        ranges.append((info.col_start, info.col_stop))
    return stats, ranges


def _labels(run, url, cmeta, storage_options):
    return blocks.run_state(run, "y", lambda: read_labels(url, cmeta, storage_options))


def part(prev, url: str, cmeta: ColumnsMeta, mine: list[int], r: int, seed: int, run: str, *,
         storage_options: dict | None = None, row_infos=None, class_cost=None, holdout=None,
         **kw) -> dict:
    """Parallel mode, one worker's share of round ``r``: the inner iterations over its items
    ``mine`` (in the round's order) from the round's starting state, which it leaves
    untouched; returns its Δw (per block), Δb and statistics."""
    state = _state(prev)
    w0, b0 = state["w"], state["b"]
    w, b = w0.copy(), b0.copy()
    order, seeds = round_plan(seed, r, n_items(cmeta, kw["bias"]))
    stats, ranges = _visit(w, b, state["c"], run, url, cmeta, [k for k in order if k in set(mine)], seeds,
                           first=r == 1, storage_options=storage_options, **kw)
    b -= b0
    return {"dw": [(s, w[s:e] - w0[s:e]) for s, e in ranges], "db": b, "stats": stats}


def _objective(w, b, loss, cost):
    return 0.5 * float(w @ w) + kernel.loss_sum(b, np.zeros(0), 0.0, loss, cost)


def exact_rounds(url: str, cmeta: ColumnsMeta, r: int, max_rounds: int, seed: int, run: str, *,
                 eps: float, g0: float, seconds: float, bias: float,
                 n_features: int, loss: int, class_cost: np.ndarray,
                 storage_options: dict | None = None, row_infos: list[BlockInfo] | None = None,
                 stop_at: int | None = None, w0: np.ndarray | None = None, holdout=None,
                 free_bytes: int | None = None, **kw) -> dict:
    """Exact mode: outer iterations r, r+1, … of Algorithm 1 on this worker, each visiting
    every item in the round's random order, until the stopping rule holds (``g0`` is
    max|∇f(0)ᵢ|, NaN before round 1 has measured it), ``max_rounds`` is reached, or
    ``seconds`` have passed (batching rounds into one task spares a scheduler round
    trip per outer iteration), or round ``stop_at`` is done (a checkpoint is due).

    The view is :func:`held`: joined into one block where this worker's memory holds it
    (``free_bytes``: the plan's for this worker).
    The state stays on this worker for the whole run (:func:`distsvm.workers.blocks.run_state`)
    and is updated in place; the first batch of a run makes it by :func:`initial`, at ``w0``
    (the w a resumed or recovered run continues from) or at w = 0 in round 1.  Returns
    ``{"reports": [one per round], "w": w after the last one}``.
    """
    start = time.perf_counter()
    cmeta = held(cmeta, kw["cache_bytes"], free_bytes)

    def fresh():
        if r > 1 and w0 is None:  # never restart silently from w = 0 in the middle of a run
            raise RuntimeError(f"pcd run {run}: round {r} on a worker that has no state of it")
        return initial(url, cmeta, n_features + (1 if bias >= 0 else 0), loss, class_cost,
                       row_infos, storage_options, w0, bias=bias,
                       positive=kw.get("positive", 1), cache_bytes=kw["cache_bytes"],
                       holdout=holdout)

    state = blocks.run_state(run, "state", dict)
    if not state:  # made outside run_state's lock: initial reads through the block cache
        state.update(fresh())
    w, b, cost = state["w"], state["b"], state["c"]
    reports = []
    while True:
        order, seeds = round_plan(seed, r, n_items(cmeta, bias))
        stats, _ = _visit(w, b, cost, run, url, cmeta, order, seeds, bias=bias,
                          n_features=n_features, loss=loss, first=r == 1,
                          storage_options=storage_options, **kw)
        state["f"] = _objective(w, b, loss, cost)
        reports.append({"f": state["f"], "t": 1.0, "stats": stats,
                        "elapsed": time.perf_counter() - start})
        g0 = stats[kernel.MAX_GRAD0] if r == 1 else g0
        r += 1
        done = stats[kernel.MAX_GRAD] <= eps * g0 or r > max_rounds
        if done or time.perf_counter() - start > seconds or (stop_at and r > stop_at):
            return {"reports": reports, "w": w.copy()}


def combine(prev, parts: list[dict], *, loss: int) -> tuple[dict, list[dict]]:
    """Parallel mode: the next state from the parts' directions, by a line search on the
    aggregated step.

    With P parts, t = 1, ½, ¼, … is tried until f(w + tΔw) < f(w), but never below
    1/P: by convexity f(w + ΣΔwₚ/P) ≤ Σ f(w + Δwₚ)/P ≤ f(w), since every part's own
    steps decrease f (12).  So f never increases.  Returns ``(state, [report])``; the
    report carries the new w.
    """
    state = _state(prev)
    w, b, cost, f0 = state["w"], state["b"], state["c"], state["f"]
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
        f = 0.5 * float(wt @ wt) + kernel.loss_sum(b, db, t, loss, cost)
        if f < f0 or t <= floor:
            break
        t = max(t * kernel.BETA, floor)
    stats = np.zeros(kernel.N_STATS)
    for p in parts:
        s = p["stats"]
        stats += s
        for k in (kernel.MAX_GRAD, kernel.MAX_GRAD0):
            stats[k] = max(stats[k] - s[k], s[k])  # a maximum, not a sum
    return {"w": wt, "b": b + t * db, "c": cost, "f": f}, [{"f": f, "t": t, "stats": stats,
                                                             "w": wt}]


def reports(result: tuple) -> list[dict]:
    return result[1]
