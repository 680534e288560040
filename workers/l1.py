"""The worker tasks of L1-regularized classification (LIBLINEAR -s 5 CDN, -s 6 newGLMNET).

Exact mode (:func:`exact_rounds`): one worker runs LIBLINEAR's sequential algorithm over
every column block, read through its block cache (:func:`distsvm.workers.pcd.load_columns`) with
the next block prefetched, the state staying on the worker between tasks
(:func:`distsvm.workers.blocks.run_state`):

* CDN: w, bⱼ = 1 − yⱼwᵀxⱼ, Cⱼ, the active (unshrunk) features and the shrinking bound;
* newGLMNET: w, wᵀxⱼ, τ, D, Cⱼ, the gradient and Hessian diagonal at w with the
  active features, and the inner tolerance.

Everything is a function of w and a few scalars that every task returns (the active set
for CDN), so the coordinator can checkpoint, or rebuild the state on another worker, from
them (:func:`initial`).  One round is one outer iteration of LIBLINEAR's (CDN: one pass
over the active features; newGLMNET: one Newton iteration — quadratic model, line search,
and the gradient at the new w that the stopping rule reads).

Parallel mode (:func:`parallel_initial`, :func:`part`, :func:`combine`): the round's state
(w, b or wᵀx, the shrinking state) lives in a Dask future on the first owner; each owner's
:func:`part` runs the round on its own column blocks from it and returns its direction;
:func:`combine` sums them, line-searches the full objective and makes the next state.
"""

from __future__ import annotations

import math
import time

import numpy as np

from distsvm.storage import BlockInfo
from distsvm.storage.columns import ColumnsMeta

from . import blocks
from .kernels import l1 as kernel
from .pcd import _reader, held, load_columns, n_items, round_plan
from .validation import row_costs

MAX_INNER = 1000  # newGLMNET's inner CD cycles per Newton iteration (LIBLINEAR's max_iter)


def _visit(url, cmeta, keys, cache_bytes, storage_options, fn, bias_fn, handoff=None,
           then=None):
    """``fn(k, block)`` for each column block number in ``keys`` (``bias_fn()`` for the bias
    item, number ``len(cmeta.blocks)``), the next block read by the prefetch thread while
    the kernel (which releases the GIL) works on the current one.

    ``handoff`` (a dict the caller keeps across calls, or None): it gets the read of the
    item ``then`` (the next call's first), started while this call works on its last item,
    and the next call starts with it — so that a block streamed every round is not waited
    for when the round's random order puts it first (``-s 5`` on 2 × 512 MB workers,
    docs/benchmarks.md).  The read lives as long as the dict: the caller's rounds, one
    task."""
    def load(k):
        if k == len(cmeta.blocks):
            return None
        return load_columns(url, cmeta.blocks[k], cache_bytes, storage_options)[0]

    handed = handoff.pop("read", None) if handoff is not None else None
    if keys and handed is not None and handed[0] == keys[0]:
        ahead = handed[1]
    else:
        ahead = _reader().submit(load, keys[0]) if keys else None
    del handed
    for i, k in enumerate(keys):
        block = ahead.result()
        if i + 1 < len(keys):
            ahead = _reader().submit(load, keys[i + 1])
        elif handoff is not None and then is not None:
            handoff["read"] = (then, _reader().submit(load, then))
        if block is None:
            bias_fn()
        else:
            fn(k, block)
        del block


def initial(url: str, cmeta: ColumnsMeta, run: str, *, loss: int, bias: float, class_cost,
            row_infos: list[BlockInfo] | None, positive: int, w: np.ndarray | None,
            cache_bytes: int, storage_options: dict | None = None, holdout=None, **_) -> dict:
    """The state at ``w`` (None: 0): labels, costs Cⱼ (class cost × instance weight,
    :func:`_rows`), and wᵀxⱼ by one pass over the column blocks; CDN's b or newGLMNET's
    wᵀxⱼ, τ, D."""
    y, cost = _rows(run, url, cmeta, class_cost, row_infos, holdout, storage_options)
    n = cmeta.n_features
    dim = n + (1 if bias >= 0 else 0)
    w = np.zeros(dim) if w is None else np.array(w, dtype=np.float64)
    wx = np.zeros(cmeta.n_rows)
    if np.any(w[:n]):
        for info in cmeta.blocks:
            block, _ = load_columns(url, info, cache_bytes, storage_options)
            kernel.margins(block.indptr, block.indices, block.data, info.col_start, w, wx)
    if bias >= 0:
        wx += w[n] * bias
    state = {"y": y, "w": w, "c": cost, "active": np.ones(dim, dtype=np.uint8)}
    if loss == 1:  # squared hinge: b = 1 − y wᵀx
        state["b"] = 1.0 - np.where(y == positive, wx, -wx)
    else:  # newGLMNET keeps the margins wᵀx (LIBLINEAR: e^{wᵀx}; see glm_loss_change)
        state["wx"] = wx
        state["tau"], state["D"] = np.empty_like(wx), np.empty_like(wx)
        kernel.glm_weights(wx, cost, state["tau"], state["D"])
        state["grad"], state["hdiag"] = np.zeros(dim), np.zeros(dim)
    return state


def _norm1(w, n_features, reg):
    s = float(np.abs(w).sum())
    return s - abs(w[n_features]) if not reg and len(w) > n_features else s


def objective(state, *, loss, n_features, reg, positive) -> float:
    """‖w‖₁ (the bias's term left out if unregularized) + Σⱼ Cⱼ ξⱼ."""
    w = state["w"]
    if loss == 1:
        data = kernel.l2_loss_sum(state["b"], state["c"])
    else:
        data = kernel.lr_loss_sum(state["wx"], state["y"], positive, state["c"])
    return _norm1(w, n_features, reg) + data


def _cdn_round(state, url, cmeta, r, seed, *, bias, reg, positive, n_features, shrink_at,
               cache_bytes, storage_options, mine=None, handoff=None, read_next=False):
    """One outer iteration of CDN (Appendix F) over every item — or, in parallel mode, over
    an owner's items ``mine`` in the round's order; updates ``state`` (y, b, w, c, active)
    and returns the stats.  ``handoff``: :func:`_visit`'s; ``read_next``: whether to read the
    next round's first block into it."""
    order, seeds = round_plan(seed, r, n_items(cmeta, bias))
    if mine is not None:
        order = [k for k in order if k in mine]
    y, b, w, c, active = state["y"], state["b"], state["w"], state["c"], state["active"]
    stats = kernel.new_stats()

    def columns(k, block):
        kernel.cdn_columns(block.indptr, block.indices, block.data, cmeta.blocks[k].col_start,
                           y, positive, b, w, c, active, shrink_at, seeds[k], stats)

    def biased():
        kernel.cdn_bias(bias, y, positive, b, w, n_features, c, reg, active, shrink_at, stats)

    first = round_plan(seed, r + 1, n_items(cmeta, bias))[0][0] if read_next else None
    _visit(url, cmeta, order, cache_bytes, storage_options, columns, biased, handoff, first)
    return stats


def _glm_gradient(state, url, cmeta, *, bias, reg, positive, n_features, shrink_at,
                  cache_bytes, storage_options, mine=None):
    """newGLMNET's gradient pass at w (the start of a Newton iteration) over every item, or
    over an owner's items ``mine`` (parallel mode): fills the state's grad, hdiag and active;
    returns the stats."""
    y, w, c = state["y"], state["w"], state["c"]
    tau, D, grad, hdiag, active = (state[k] for k in ("tau", "D", "grad", "hdiag", "active"))
    stats = kernel.new_stats()

    def columns(k, block):
        kernel.glm_gradient(block.indptr, block.indices, block.data, cmeta.blocks[k].col_start,
                            y, positive, tau, D, c, w, shrink_at, grad, hdiag, active, stats)

    def biased():
        kernel.glm_gradient_bias(bias, y, positive, tau, D, c, w, n_features, reg, shrink_at,
                                 grad, hdiag, active, stats)

    keys = range(n_items(cmeta, bias)) if mine is None else sorted(mine)
    _visit(url, cmeta, list(keys), cache_bytes, storage_options, columns, biased)
    return stats


def _glm_inner(w, D, grad, hdiag, active, url, cmeta, r, seed, tol, *, bias, reg,
               n_features, cache_bytes, storage_options, mine=None):
    """Appendix G's inner coordinate descent on the quadratic model plus ‖w + d‖₁ over the
    items ``mine`` (None: all) in the round's order, from d = 0: cycles with their own
    shrinking until the cycle's Gnorm1 ≤ ``tol`` on the full ``active`` set, or
    ``MAX_INNER`` cycles.  Returns (cycles, w + d, Xd)."""
    n_rows = len(D)
    items = n_items(cmeta, bias)
    wpd = w.copy()
    xTd = np.zeros(n_rows)
    qp_active = active.copy()
    qp_gmax_old = math.inf
    inner = 0
    while inner < MAX_INNER:
        stats = kernel.new_stats()
        shrink_at = qp_gmax_old / n_rows
        order, seeds = round_plan(seed, r, inner, items)
        keys = [k for k in order if (mine is None or k in mine) and (
                (k == len(cmeta.blocks) and qp_active[n_features])
                or (k < len(cmeta.blocks) and qp_active[cmeta.blocks[k].col_start:
                                                       cmeta.blocks[k].col_stop].any()))]

        def columns(k, block, stats=stats, shrink_at=shrink_at, seeds=seeds):
            kernel.glm_qp_columns(block.indptr, block.indices, block.data,
                                  cmeta.blocks[k].col_start, D, xTd, w, wpd, grad, hdiag,
                                  qp_active, shrink_at, seeds[k], stats)

        def biased(stats=stats, shrink_at=shrink_at):
            kernel.glm_qp_bias(bias, D, xTd, w, wpd, n_features, grad, hdiag, reg, qp_active,
                               shrink_at, stats)

        _visit(url, cmeta, keys, cache_bytes, storage_options, columns, biased)
        inner += 1
        if stats[kernel.GNORM1] <= tol:
            if np.array_equal(qp_active, active):
                break
            qp_active[:] = active  # active-set reactivation
            qp_gmax_old = math.inf
            continue
        qp_gmax_old = stats[kernel.GMAX]
    return inner, wpd, xTd


def _glm_line_search(w, wx, wpd, xTd, gd, y, positive, c, *, n_features, reg):
    """Appendix G's line search on w + t·d, d = ``wpd`` − w, t = 1, ½, … (at most
    ``MAX_LINESEARCH`` halvings) with LIBLINEAR's sufficient decrease F(w + td) − F(w) ≤
    σt(∇L(w)ᵀd + ‖w + d‖₁ − ‖w‖₁), ``gd`` = ∇L(w)ᵀd, computed from the margins ``wx`` and
    ``xTd`` = Xd alone (``xTd`` is halved in place).  Returns (w + td, its margins, halvings,
    t), or (None, None, halvings, 0) if no step is accepted."""
    w_norm = _norm1(w, n_features, reg)
    w_norm_new = _norm1(wpd, n_features, reg)
    delta = gd + w_norm_new - w_norm
    e_new = np.empty(len(wx))
    steps, t = 0, 1.0
    while steps < kernel.MAX_LINESEARCH:
        s, negsum = kernel.glm_loss_change(wx, xTd, y, positive, c, e_new)
        if w_norm_new - w_norm + negsum - kernel.SIGMA * delta + s <= 0.0:
            return wpd, e_new, steps, t
        wpd = 0.5 * (w + wpd)
        w_norm_new = _norm1(wpd, n_features, reg)
        delta *= 0.5
        xTd *= 0.5
        t *= 0.5
        steps += 1
    return None, None, steps, 0.0


def _glm_newton(state, url, cmeta, r, seed, *, bias, reg, positive, n_features, gnorm1_init,
                cache_bytes, storage_options):
    """Appendix G's Newton iteration from the gradient in ``state``: inner CD cycles on the
    quadratic model (inner shrinking, LIBLINEAR's inner tolerance), then the line search;
    updates the state to the new w.  Returns (inner cycles, line-search steps, t)."""
    y, w, c, D = state["y"], state["w"], state["c"], state["D"]
    grad = state["grad"]
    inner, wpd, xTd = _glm_inner(w, D, grad, state["hdiag"], state["active"], url, cmeta, r,
                                 seed, state["inner_eps"] * gnorm1_init, bias=bias, reg=reg,
                                 n_features=n_features, cache_bytes=cache_bytes,
                                 storage_options=storage_options)
    new_w, new_wx, steps, t = _glm_line_search(w, state["wx"], wpd, xTd, float(grad @ (wpd - w)),
                                               y, positive, c, n_features=n_features, reg=reg)
    accepted = new_w is not None
    if accepted:
        w[:] = new_w
        state["wx"][:] = new_wx
        kernel.glm_weights(state["wx"], c, state["tau"], D)
    if not accepted:  # LIBLINEAR recomputes e^{wᵀx} from w here
        state["wx"][:] = initial_margins(state, url, cmeta, bias=bias, n_features=n_features,
                                         cache_bytes=cache_bytes,
                                         storage_options=storage_options)
    if inner == 1:
        state["inner_eps"] *= 0.25
    return inner, steps, t if accepted else 0.0


def initial_margins(state, url, cmeta, *, bias, n_features, cache_bytes, storage_options):
    """wᵀxⱼ for every row, by one pass over the column blocks."""
    w = state["w"]
    wx = np.zeros(len(state["y"]))
    for info in cmeta.blocks:
        block, _ = load_columns(url, info, cache_bytes, storage_options)
        kernel.margins(block.indptr, block.indices, block.data, info.col_start, w, wx)
    if bias >= 0:
        wx += w[n_features] * bias
    return wx


def exact_rounds(url: str, cmeta: ColumnsMeta, r: int, max_rounds: int, seed: int, run: str, *,
                 loss: int, eps: float, gnorm1_init: float, seconds: float, bias: float,
                 reg: bool, n_features: int, class_cost, positive: int,
                 row_infos: list[BlockInfo] | None, cache_bytes: int,
                 storage_options: dict | None = None, stop_at: int | None = None,
                 resume: dict | None = None, holdout=None, free_bytes: int | None = None) -> dict:
    """Rounds r, r+1, … of LIBLINEAR's algorithm on this worker until its stopping rule
    (Gnorm1 ≤ ``eps``·Gnorm1 of the first iteration; ``eps`` already scaled by
    max(min(#pos, #neg), 1)/l as linear.cpp's ``train_one``), ``max_rounds``, ``seconds``
    or round ``stop_at``, over the view :func:`~distsvm.workers.pcd.held` (joined into one block
    where this worker's memory holds it; ``free_bytes``: the plan's for this worker).
    ``resume`` (w, the shrinking bound, the active set / inner tolerance) makes the state on
    a worker that has none (the run's first task, or after a recovery).  Returns
    {"reports": [per round], "resume": the same, after the last}."""
    start = time.perf_counter()
    cmeta = held(cmeta, cache_bytes, free_bytes)
    common = dict(bias=bias, reg=reg, positive=positive, n_features=n_features,
                  cache_bytes=cache_bytes, storage_options=storage_options)
    state = blocks.run_state(run, "state", dict)
    if not state:
        if r > 1 and resume is None:
            raise RuntimeError(f"l1 run {run}: round {r} on a worker that has no state of it")
        resume = resume or {}
        state.update(initial(url, cmeta, run, loss=loss, class_cost=class_cost,
                             row_infos=row_infos, holdout=holdout, w=resume.get("w"), **common))
        state["gmax_old"] = resume.get("gmax_old", math.inf)
        if resume.get("active") is not None:
            state["active"][:] = resume["active"]
        state["inner_eps"] = resume.get("inner_eps", 1.0)
        state["ready"] = False
    n_rows = cmeta.n_rows
    reports, handoff, took = [], {}, 0.0
    while True:
        row = {}
        if loss == 1:
            began = time.perf_counter()
            # the next round's first block is read during this one's last, unless this round
            # is likely the task's last (its time is up; a read for no round wastes a block)
            more = began - start + took < seconds and not (stop_at and r >= stop_at) \
                and r < max_rounds
            stats = _cdn_round(state, url, cmeta, r, seed, shrink_at=state["gmax_old"] / n_rows,
                               handoff=handoff, read_next=more, **common)
            took = time.perf_counter() - began
            gnorm1 = stats[kernel.GNORM1]
            gnorm1_init = gnorm1 if r == 1 else gnorm1_init
            done = False
            if gnorm1 <= eps * gnorm1_init:
                if state["active"].all():
                    done = True
                else:  # LIBLINEAR: converged on the active set; check all features again
                    state["active"][:] = 1
                    state["gmax_old"] = math.inf
            else:
                state["gmax_old"] = stats[kernel.GMAX]
        else:
            if not state["ready"]:  # the gradient at w: the first, or a rebuilt state
                g = _glm_gradient(state, url, cmeta, shrink_at=state["gmax_old"] / n_rows, **common)
                state["ready"], state["gmax_used"] = True, state["gmax_old"]
                state["gmax_old"] = g[kernel.GMAX]
                gnorm1_init = g[kernel.GNORM1] if r == 1 else gnorm1_init
            inner, steps, t = _glm_newton(state, url, cmeta, r, seed, gnorm1_init=gnorm1_init,
                                          **common)
            stats = _glm_gradient(state, url, cmeta, shrink_at=state["gmax_old"] / n_rows, **common)
            state["gmax_used"], state["gmax_old"] = state["gmax_old"], stats[kernel.GMAX]
            gnorm1 = stats[kernel.GNORM1]
            done = gnorm1 <= eps * gnorm1_init
            row = {"inner": inner, "line_search": steps, "t": t}
        f = objective(state, loss=loss, n_features=n_features, reg=reg, positive=positive)
        reports.append({"f": f, "gnorm1": gnorm1, "gnorm1_init": gnorm1_init, "stats": stats,
                        "nnz": int(np.count_nonzero(state["w"])), "done": bool(done),
                        "elapsed": time.perf_counter() - start, **row})
        r += 1
        if done or r > max_rounds or time.perf_counter() - start > seconds \
                or (stop_at and r > stop_at):
            out = {"w": state["w"].copy(), "inner_eps": state["inner_eps"]}
            if loss == 1:
                out.update(gmax_old=state["gmax_old"], active=state["active"].copy())
            else:  # the bound the last gradient pass used: a rebuild repeats that pass
                out.update(gmax_old=state["gmax_used"])
            return {"reports": reports, "resume": out}


# ----------------------------------------------------------------------------- parallel mode
# The round's state {"w", "b" (CDN) or "wx" (newGLMNET), "f", "active", "gmax_old",
# "gnorm1_init", "inner_eps"} lives in a Dask future (on the combine's worker) that the
# coordinator threads from round to round: :func:`part` tasks read it, :func:`combine`
# makes the next one.  y and Cⱼ are read once per worker and run.  What crosses the network
# is compact where L1 makes it so: w (and Δw) as its non-zeros (4 + 8 bytes each), the
# active set as bits (:func:`pack`); the vectors of length l (b, Xw, Δb, Xd) are dense.


def pack(w: np.ndarray, active: np.ndarray | None = None) -> dict:
    """w by its non-zeros, and the active set as bits: what a state or report carries."""
    idx = np.flatnonzero(w).astype(np.int32)
    out = {"n": len(w), "idx": idx, "val": w[idx]}
    if active is not None:
        out["bits"] = np.packbits(active)
    return out


def unpack_w(p: dict) -> np.ndarray:
    w = np.zeros(p["n"])
    w[p["idx"]] = p["val"]
    return w


def unpack_active(p: dict) -> np.ndarray:
    return np.unpackbits(p["bits"], count=p["n"])


def _rows(run, url, cmeta, class_cost, row_infos, holdout, storage_options):
    """The column view's class indices and row costs (:func:`validation.row_costs`), read
    once a run."""
    return blocks.run_state(run, "rows", lambda: row_costs(
        url, cmeta, class_cost, row_infos, holdout, storage_options))


def _state(prev) -> dict:
    """The state itself, or the state of a :func:`combine` result."""
    return prev[0] if isinstance(prev, tuple) else prev


def parallel_initial(url: str, cmeta: ColumnsMeta, run: str, *, loss: int, bias: float,
                     class_cost, row_infos, positive: int, n_features: int, reg: bool,
                     cache_bytes: int, storage_options: dict | None = None,
                     resume: dict | None = None, holdout=None, **_) -> dict:
    """Parallel mode's first state, at ``resume`` (w, the active set, the shrinking bound,
    inner_eps, Gnorm1₀; None: w = 0 before round 1): one pass over the column blocks."""
    resume = resume or {}
    full = initial(url, cmeta, run, loss=loss, bias=bias, class_cost=class_cost,
                   row_infos=row_infos, holdout=holdout, positive=positive, w=resume.get("w"),
                   cache_bytes=cache_bytes, storage_options=storage_options)
    if resume.get("active") is not None:
        full["active"][:] = resume["active"]
    state = {"w": pack(full["w"], full["active"]),
             "gmax_old": float(resume.get("gmax_old", math.inf)),
             "gnorm1_init": float(resume.get("gnorm1_init", math.nan)),
             "inner_eps": float(resume.get("inner_eps", 1.0))}
    state["b" if loss == 1 else "wx"] = full["b" if loss == 1 else "wx"]
    state["f"] = objective(full, loss=loss, n_features=n_features, reg=reg, positive=positive)
    return state


def _ranges(cmeta, keys, n_features):
    return [(n_features, n_features + 1) if k == len(cmeta.blocks) else
            (cmeta.blocks[k].col_start, cmeta.blocks[k].col_stop) for k in keys]


def part(prev, url: str, cmeta: ColumnsMeta, mine: list[int], r: int, seed: int, run: str, *,
         loss: int, bias: float, reg: bool, positive: int, n_features: int, class_cost,
         row_infos, cache_bytes: int, storage_options: dict | None = None, n_parts: int = 1,
         holdout=None, **_) -> dict:
    """Parallel mode, one owner's share of round ``r`` on its items ``mine`` (column block
    numbers; ``len(cmeta.blocks)`` is the bias feature), from the round's state, which it
    leaves untouched.  CDN: one pass of Appendix F over its active features, in the round's
    order, with shrinking; returns its Δw, Δb, active flags and statistics.  newGLMNET: the
    gradient and Hessian diagonal of its features at w (outer shrinking), then the inner CD
    of Appendix G on the quadratic model over its features (the Hessian's blocks between
    owners left out); returns its Δw, Xd, ∇Lᵀd share, cycles and statistics."""
    state = _state(prev)
    y, c = _rows(run, url, cmeta, class_cost, row_infos, holdout, storage_options)
    w0 = unpack_w(state["w"])
    mine = set(mine)
    common = dict(bias=bias, reg=reg, positive=positive, n_features=n_features,
                  shrink_at=state["gmax_old"] / cmeta.n_rows, cache_bytes=cache_bytes,
                  storage_options=storage_options, mine=mine)
    if loss == 1:
        own = {"y": y, "b": state["b"].copy(), "w": w0.copy(), "c": c,
               "active": unpack_active(state["w"])}
        stats = _cdn_round(own, url, cmeta, r, seed, **common)
        return {"dw": pack(own["w"] - w0), "db": own["b"] - state["b"], "stats": stats,
                "active": [(s, e, np.packbits(own["active"][s:e]))
                           for s, e in _ranges(cmeta, sorted(mine), n_features)]}
    own = {"y": y, "w": w0, "c": c, "tau": np.empty(cmeta.n_rows), "D": np.empty(cmeta.n_rows),
           "grad": np.zeros(len(w0)), "hdiag": np.zeros(len(w0)),
           "active": np.zeros(len(w0), dtype=np.uint8)}
    kernel.glm_weights(state["wx"], c, own["tau"], own["D"])
    stats = _glm_gradient(own, url, cmeta, **common)
    grad = own["grad"]
    # the inner tolerance: LIBLINEAR's inner_eps·Gnorm1₀, a 1/P share of it per owner of P (in
    # round 1, before Gnorm1₀ is known: inner_eps × this owner's own Gnorm1)
    tol = state["inner_eps"] * (stats[kernel.GNORM1] if r == 1
                                else state["gnorm1_init"] / n_parts)
    inner, wpd, xTd = _glm_inner(w0, own["D"], grad, own["hdiag"], own["active"], url, cmeta, r,
                                 seed, tol, bias=bias, reg=reg, n_features=n_features,
                                 cache_bytes=cache_bytes, storage_options=storage_options,
                                 mine=mine)
    return {"dw": pack(wpd - w0), "xTd": xTd,
            "gd": float(grad @ (wpd - w0)), "inner": inner, "stats": stats}


def _norm1_change(w, wt, n_features, reg):
    """‖wt‖₁ − ‖w‖₁ (the bias's term left out if unregularized), feature by feature."""
    diff = np.abs(wt) - np.abs(w)
    if not reg and len(w) > n_features:
        diff[n_features] = 0.0
    return float(diff.sum())


def _summed(state, parts):
    """Σ of the parts' directions, their statistics (Gmax a maximum), and the active flags."""
    d = np.zeros(state["w"]["n"])
    active = unpack_active(state["w"])
    stats = kernel.new_stats()
    for p in parts:
        d[p["dw"]["idx"]] += p["dw"]["val"]
        for s, e, bits in p.get("active", ()):
            active[s:e] = np.unpackbits(bits, count=e - s)
        stats += p["stats"]
    stats[kernel.GMAX] = max(p["stats"][kernel.GMAX] for p in parts)
    return d, active, stats


def combine(prev, parts: list[dict], r: int, run: str, url: str, cmeta: ColumnsMeta, *,
            loss: int, eps: float, bias: float, reg: bool, positive: int, n_features: int,
            class_cost, row_infos, storage_options: dict | None = None, holdout=None, **_):
    """Parallel mode: round r's next state from the parts' summed direction d, by a line
    search on the full objective (β = 1, ½, …, Tseng & Yun 2009's Armijo rule
    F(w + βd) − F(w) ≤ σβ(∇L(w)ᵀd + ‖w + d‖₁ − ‖w‖₁), σ = 0.01), and LIBLINEAR's stopping
    rule on the summed Gnorm1.  CDN: F along d from b⁰ and Δb = ΣΔbₚ alone (b is linear in
    w); newGLMNET: Appendix G's line search (:func:`_glm_line_search`) from wᵀx and Xd =
    ΣXdₚ.  Returns ``(state, [report])``; the report carries w and the shrinking state."""
    state = _state(prev)
    y, c = _rows(run, url, cmeta, class_cost, row_infos, holdout, storage_options)
    w0 = unpack_w(state["w"])
    d, active, stats = _summed(state, parts)
    gnorm1 = stats[kernel.GNORM1]
    init = gnorm1 if r == 1 else state["gnorm1_init"]
    new = {**state, "gnorm1_init": init, "w": w0}
    row = {}
    done = False
    if loss == 1:
        b0 = state["b"]
        db = parts[0]["db"].copy()
        for p in parts[1:]:
            db += p["db"]
        delta = kernel.l2_slope(b0, db, c) + _norm1_change(w0, w0 + d, n_features, reg)
        beta, steps = 1.0, 0
        while True:
            wt = w0 + beta * d
            # F(w + βd) − F(w) term by term (not f − f₀: near the optimum the change is
            # below the rounding of f).  Δ < 0 for Tseng & Yun's directions; a sum of the
            # parts' CD passes may have Δ ≥ 0, where the test asks for no increase (β ≤ 1/P
            # decreases F, by convexity)
            change = _norm1_change(w0, wt, n_features, reg) + kernel.l2_loss_change(
                b0, db, beta, c)
            if change <= kernel.SIGMA * beta * min(delta, 0.0):
                f = _norm1(wt, n_features, reg) + kernel.l2_loss_along(b0, db, beta, c)
                break
            if steps >= kernel.MAX_LINESEARCH:  # no decrease found: stay (never seen)
                beta, wt, f = 0.0, w0, state["f"]
                break
            beta *= 0.5
            steps += 1
        new.update(w=wt, b=b0 + beta * db if beta else b0, f=f, gmax_old=stats[kernel.GMAX])
        if gnorm1 <= eps * init:
            if active.all():
                done = True
            else:  # LIBLINEAR: converged on the active set; check all features again
                active[:] = 1
                new["gmax_old"] = math.inf
        row = {"line_search": steps, "t": beta}
    else:
        inner = max(p["inner"] for p in parts)
        new["gmax_old"] = stats[kernel.GMAX]
        steps, beta = 0, 0.0
        if gnorm1 <= eps * init:  # the gradient at the round's w: it is the answer
            done = True
        else:
            xTd = parts[0]["xTd"].copy()
            for p in parts[1:]:
                xTd += p["xTd"]
            wt, wx, steps, beta = _glm_line_search(
                w0, state["wx"], w0 + d, xTd, sum(p["gd"] for p in parts), y, positive, c,
                n_features=n_features, reg=reg)
            if wt is not None:
                full = {"w": wt, "wx": wx, "y": y, "c": c}
                new.update(w=wt, wx=wx, f=objective(full, loss=loss, n_features=n_features,
                                                    reg=reg, positive=positive))
            if inner == 1:
                new["inner_eps"] = state["inner_eps"] * 0.25
        row = {"inner": inner, "line_search": steps, "t": beta}
    nnz = int(np.count_nonzero(new["w"]))
    new["w"] = pack(new["w"], active)
    resume = {"w": new["w"], "gmax_old": new["gmax_old"], "inner_eps": new["inner_eps"],
              "gnorm1_init": init}
    report = {"f": new["f"], "gnorm1": gnorm1, "gnorm1_init": init, "stats": stats,
              "nnz": nnz, "done": bool(done), "resume": resume, **row}
    return new, [report]


def reports(result: tuple) -> list[dict]:
    return result[1]
