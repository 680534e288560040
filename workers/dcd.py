"""The per-block tasks of dual coordinate descent.

A block's α, shrinking state and last visit's statistics stay in the memory
of the worker that owns the block (:func:`distsvm.workers.blocks.run_state`); only
``w`` travels, from task to task.  Each block also keeps a copy of its α from
the start of the current round (``tag``), so that after a worker loss the
coordinator can roll the survivors back to it (:func:`restore`).
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from distsvm.storage import BlockInfo
from distsvm.storage.dataset import join_blocks, take_rows

from . import blocks, losses, resident
from .kernels import adaptive, dcd_lr, svr_dual
from .kernels import dcd as kernel
from .kernels.linear import loss_sums
from .kernels.newton import dot as kernel_dot
from .losses import LOGISTIC, is_regression


def _state(run: str, info: BlockInfo) -> dict:
    """The block's α, shrinking state and last visit's statistics, made on first use."""
    def fresh():
        state, index = kernel.new_state(info.n_rows)
        return {"alpha": np.zeros(info.n_rows), "index": index, "state": state, "stats": None}

    s = blocks.run_state(run, info.name, dict)
    if "state" not in s:  # new, or only α kept by restore()
        s.update({**fresh(), **s})
    return s


def _cut(s, regression: bool) -> None:
    """A block not visited because the time budget ran out (issue 31): its α, Σα and
    ΣDᵢᵢαᵢ² stand (a block never visited: α = 0), so the dual objective is exact, and its
    loss is measured at the round's w as any other's; ``full`` False keeps the round from
    meeting LIBLINEAR's stopping rule on the previous visit's projected gradients."""
    s["stats"] = {"sum_alpha": 0.0, "sum_dsq": 0.0, "pg_max": -np.inf, "pg_min": np.inf,
                  "active": 0, **({"gnorm1": 0.0} if regression else {}),
                  **(s["stats"] or {}), "full": False, "skipped": False}


def _past(deadline: float | None) -> bool:
    """Whether the time budget's ``deadline`` (``time.time()``) has passed."""
    return deadline is not None and time.time() >= deadline


@contextlib.contextmanager
def _alarm(deadline: float | None):
    """The stop flag :func:`kernel.dcd_passes` polls, raised at ``deadline``
    (``time.time()``) by a timer thread (the kernels release the GIL), so that a time budget
    also ends a long block visit — a joined store's, whose one visit is a round; None
    without a deadline."""
    if deadline is None:
        yield None
        return
    flag = np.zeros(1)
    timer = threading.Timer(max(0.0, deadline - time.time()), flag.fill, (1.0,))
    timer.daemon = True
    timer.start()
    try:
        yield flag
    finally:
        timer.cancel()


def _visit(w, block, sqnorm, s, seed, *, bias, n_features, loss, class_cost, eps, n_passes,
           positive, shrink, epsilon=0.0, stop=None):
    """DCD passes on one block, updating ``w`` in place; the block's statistics are kept.

    ``class_cost`` is C per class index with its class weight (its row costs Cᵢ are
    :func:`losses.costs`); ``shrink`` is the round's ``(M̄, m̄)`` of (16), taken over all
    blocks by the coordinator, or None to reactivate every row of the block first.
    ``epsilon``: the SVR losses' p (:func:`_visit_svr`); ``stop``: :func:`_alarm`'s flag,
    which every loss's kernel polls.
    """
    cost = losses.costs(class_cost, block.y, block.weight)
    if loss == LOGISTIC:
        return _visit_lr(w, block, sqnorm, s, seed, bias=bias, n_features=n_features,
                         cost=cost, eps=eps, n_passes=n_passes, positive=positive, stop=stop)
    if is_regression(loss):
        return _visit_svr(w, block, sqnorm, s, seed, bias=bias, n_features=n_features,
                          loss=loss, cost=cost, eps=eps, n_passes=n_passes, shrink=shrink,
                          epsilon=epsilon, stop=stop)
    state = s["state"]
    _thresholds(state, block.n_rows, shrink)
    pg_max, pg_min, full, _, sum_a, sum_dsq = kernel.dcd_passes(
        block.indptr, block.indices, block.data, block.y, positive, sqnorm, w, bias,
        n_features, s["alpha"], s["index"], state, loss, cost, eps, n_passes, seed, 1.0, False,
        stop)
    s["stats"] = {**(s["stats"] or {}), "pg_max": pg_max, "pg_min": pg_min, "full": bool(full),
                  "sum_alpha": sum_a, "sum_dsq": sum_dsq, "active": int(state[kernel.ACTIVE]),
                  "skipped": False}


def _thresholds(state, n_rows: int, shrink) -> None:
    """A block's shrinking state for its visit: the round's ``shrink`` = (M̄, m̄) of (16),
    or with None every one of its ``n_rows`` rows active again and no thresholds."""
    if shrink is None:
        state[kernel.ACTIVE] = n_rows
        state[kernel.PG_MAX_OLD], state[kernel.PG_MIN_OLD] = np.inf, -np.inf
    else:
        state[kernel.PG_MAX_OLD], state[kernel.PG_MIN_OLD] = shrink


def _visit_svr(w, block, sqnorm, s, seed, *, bias, n_features, loss, cost, eps, n_passes,
               shrink, epsilon, stop):
    """SVR dual CD passes (:mod:`distsvm.workers.kernels.svr_dual`, LIBLINEAR's -s 12/13) on one
    block: β in ``s["alpha"]``, w = Σ βᵢxᵢ.  ``shrink`` is ``(M̄, −∞)``, M̄ the round's
    largest violation over all blocks (LIBLINEAR's Gmax_old), or None to reactivate every
    row.  Its statistics fit the coordinator's round (:func:`stopping`): ``pg_max`` the
    largest violation and ``pg_min`` 0, ``gnorm1`` the summed violation of the rows it
    visited, ``sum_alpha`` Σ(yᵢβᵢ − p|βᵢ|) and ``sum_dsq`` ΣDᵢᵢβᵢ², so the coordinator's
    dual Σα − ½‖w‖² − ½ΣDᵢᵢαᵢ² is the SVR dual objective."""
    state = s["state"]
    if shrink is None:
        state[svr_dual.ACTIVE] = block.n_rows
        state[svr_dual.GMAX_OLD] = np.inf
    else:
        state[svr_dual.GMAX_OLD] = shrink[0]
    gmax, gnorm1, full, _, sum_lin, sum_dsq = svr_dual.svr_passes(
        block.indptr, block.indices, block.data, block.target, sqnorm, w, bias, n_features,
        s["alpha"], s["index"], state, loss, cost, epsilon, eps, n_passes, seed, False, stop)
    s["stats"] = {**(s["stats"] or {}), "pg_max": gmax, "pg_min": 0.0, "gnorm1": gnorm1,
                  "full": bool(full), "sum_alpha": sum_lin, "sum_dsq": sum_dsq,
                  "active": int(state[svr_dual.ACTIVE]), "skipped": False}


def _visit_lr(w, block, sqnorm, s, seed, *, bias, n_features, cost, eps, n_passes, positive,
              stop):
    """Dual CD passes for logistic regression (:mod:`distsvm.workers.kernels.dcd_lr`) on one block.

    Its statistics fit the coordinator's round: ``pg_max`` = max |g′| (LIBLINEAR's
    stopping quantity for ``-s 7``, against eps) and ``pg_min`` = 0; every row is always
    active (no shrinking); ``sum_alpha`` holds −Σ[αᵢ log αᵢ + (Cᵢ−αᵢ) log(Cᵢ−αᵢ) − Cᵢ log Cᵢ],
    so that the coordinator's dual Σ sum_alpha − ½‖w‖² is the logistic dual objective
    (its Dᵢᵢ is 0 for this loss).  The complement Cᵢ − αᵢ is rebuilt from α if missing
    (first visit, or α rolled back by :func:`restore`).  ``cost`` is the per-row Cᵢ.
    """
    if "alpha_c" not in s:
        s["alpha_c"] = cost - s["alpha"]
        s["innereps"] = 1e-2
    gmax, full, _, s["innereps"], entropy = dcd_lr.lr_passes(
        block.indptr, block.indices, block.data, block.y, positive, sqnorm, w, bias,
        n_features, s["alpha"], s["alpha_c"], cost, s["index"], s["innereps"], eps, n_passes,
        seed, stop)
    s["stats"] = {**(s["stats"] or {}), "pg_max": gmax, "pg_min": 0.0, "full": bool(full),
                  "sum_alpha": -entropy, "sum_dsq": 0.0, "active": block.n_rows,
                  "skipped": False}


# The cache of informative rows (selective block minimization, Chang & Roth, KDD 2011) that
# a problem of the batched solver keeps when its rounds visit several blocks.
CACHE = "informative-rows"  # its name among the run's states (blocks.run_state)
CACHE_ROWS = 0.1  # at most this share of the store's rows ...
CACHE_SHARE = 0.25  # ... and of the plan's budget (WorkerPlan.budgets, split among the problems)


def cache_rows(infos: list[BlockInfo], loss: int, budget: int, n_problems: int) -> int:
    """How many rows each problem's cache of informative rows may hold (:func:`_visit_cached`),
    0 for none (one block, or ``-s 7``, whose αᵢ are all > 0, or SVR, whose rows with βᵢ ≠ 0
    are not the ones α > 0 picks): ``CACHE_ROWS`` of the store's
    rows but no more than an average block's (each block visit revisits the whole cache, so a
    round then costs at most twice the rows of a round over the blocks alone), and the
    problem's share of ``CACHE_SHARE`` of ``budget`` (the workers' smallest
    :attr:`distsvm.cluster.WorkerPlan.budgets`, which leave out the processes' own memory) at
    the store's average bytes a row.  The coordinator sets it once for the run, so a
    problem's path does not depend on where, with which others, or next to how much memory
    it runs."""
    if len(infos) <= 1 or loss == LOGISTIC or is_regression.py_func(loss):  # on the coordinator
        return 0
    n_rows = sum(i.n_rows for i in infos)
    return int(min(CACHE_ROWS * n_rows, n_rows / len(infos),
                   CACHE_SHARE * budget / n_problems / _row_bytes(infos)))


def _row_bytes(infos: list[BlockInfo]) -> float:
    """A cached row's bytes, on average over the store (CSR entries and per-row arrays)."""
    n_rows = sum(i.n_rows for i in infos)
    return (sum(i.nnz for i in infos) * 8 + n_rows * 40) / max(1, n_rows)


def _visit_cached(w, b: int, block, sqnorm, run: str, infos: list[BlockInfo], seed: int,
                  share: int, *, bias, n_features, loss, class_cost, eps, n_passes,
                  positive, shrink, epsilon=0.0, stop=None):
    """A DCD pass over block ``b``'s rows and the problem's cached informative rows of the
    other blocks, in one random permutation; then block ``b``'s part of the cache becomes
    its rows with αᵢ > 0 (a seeded sample of them, at most ``share`` rows).

    This is the selective block minimization of Chang & Roth (KDD 2011) for a solver that
    streams blocks: visiting the rows block by block stalls short of LIBLINEAR's stopping
    rule (17), revisiting the support vectors of the other blocks with every block does
    not (docs/solvers/dcd.md, "Blocks and the stopping rule").  Every block's α stays in its
    state on this worker; a cached row's α is read from its block's state and written back
    (with the block's Σα and ΣDᵢᵢαᵢ² for the dual objective), so w = Σ αᵢyᵢxᵢ holds as
    ever.  Shrinking (16) as :func:`_visit`'s: block ``b``'s rows shrunk at its last visit
    stay out until ``shrink`` (the round's thresholds) is None, which reactivates them; the
    cached rows are all visited each time (they are the informative ones), so a visit's
    pass is over block b's active rows and the cache.  Which rows of a block are cached is
    kept in its state (``cached``, checkpointed with its shrinking state), so a resumed run
    rebuilds the same cache (:func:`_rebuild_cache`).  Classification only (``epsilon``,
    the SVR losses' p, is not used: :func:`cache_rows` gives SVR no cache).
    """
    cache = blocks.run_state(run, CACHE, dict)  # {block index: (rows, RowBlock, sqnorm)}
    states = {c: _state(run, infos[c]) for c in cache if c != b}
    s = _state(run, infos[b])
    others = [(c, cache[c]) for c in sorted(states)]
    joined = join_blocks([block] + [piece for _, (_, piece, _) in others])
    sq = np.concatenate([sqnorm] + [q for _, (_, _, q) in others])
    alpha = np.concatenate([s["alpha"]] + [states[c]["alpha"][rows] for c, (rows, _, _)
                                           in others])
    cost = losses.costs(class_cost, joined.y, joined.weight)
    n_own, own_index, own_state = block.n_rows, s["index"], s["state"]
    _thresholds(own_state, n_own, shrink)
    act = int(own_state[kernel.ACTIVE])
    # the joined rows' permutation buffer: block b's active rows, the cache, b's shrunk rows
    index = np.concatenate([own_index[:act], np.arange(n_own, joined.n_rows, dtype=np.int32),
                            own_index[act:]])
    state = own_state.copy()
    state[kernel.ACTIVE] += joined.n_rows - n_own  # the cached rows: all active
    pg_max, pg_min, full, _, _, _ = kernel.dcd_passes(
        joined.indptr, joined.indices, joined.data, joined.y, positive, sq, w, bias,
        n_features, alpha, index, state, loss, cost, eps, n_passes, seed, 1.0, False, stop)
    kept = int(state[kernel.ACTIVE])
    active, shrunk = index[:kept], index[kept:]
    active = active[active < n_own]
    own_index[:] = np.concatenate([active, shrunk[shrunk < n_own]])
    own_state[kernel.ACTIVE] = len(active)
    start = block.n_rows
    for c, (rows, _, _) in others:
        part = slice(start, start + len(rows))
        new, old = alpha[part], states[c]["alpha"][rows]
        st = states[c]["stats"]
        st["sum_alpha"] += float(new.sum() - old.sum())
        st["sum_dsq"] += kernel.dual_dsq(new, loss, cost[part]) \
            - kernel.dual_dsq(old, loss, cost[part])
        states[c]["alpha"][rows] = new
        start += len(rows)
    own = s["alpha"]
    own[:] = alpha[:block.n_rows]
    informative = np.flatnonzero(own > 0)
    if len(informative) > share:
        informative = np.sort(np.random.default_rng(seed).choice(informative, share,
                                                                 replace=False))
    s["cached"] = informative
    cache[b] = _piece(block, sqnorm, informative)
    s["stats"] = {**(s["stats"] or {}), "pg_max": pg_max, "pg_min": pg_min, "full": bool(full),
                  "sum_alpha": float(own.sum()),
                  "sum_dsq": kernel.dual_dsq(own, loss, cost[:block.n_rows]),
                  "active": len(active), "skipped": False}


def _piece(block, sqnorm, rows) -> tuple:
    """A block's part of a cache of informative rows: (its row indices, their CSR rows,
    their ‖xᵢ‖²)."""
    return rows, take_rows(block, rows), sqnorm[rows]


def _rebuild_cache(url: str, infos: list[BlockInfo], run: str, cache_bytes: int,
                   storage_options) -> None:
    """A problem whose block states were loaded from a checkpoint: its cache of informative
    rows again, from the rows each block's state names (``cached``), one read of the blocks
    that have some."""
    cache = blocks.run_state(run, CACHE, dict)
    named = [b for b, info in enumerate(infos)
             if len(blocks.run_state(run, info.name, dict).get("cached", ())) and b not in cache]
    for b, (block, sqnorm) in zip(named, blocks.stream(url, [infos[b] for b in named],
                                                       cache_bytes, storage_options)):
        rows = blocks.run_state(run, infos[b].name, dict)["cached"]
        cache[b] = _piece(block, sqnorm, rows)


def segment(prev, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
            report_infos: list[BlockInfo] | None = None, shrink=None, cache_bytes: int,
            storage_options: dict | None = None, tag: int = 0, deadline: float | None = None,
            **kw):
    """Visit ``infos`` in order (consecutive blocks of a round owned by this worker).

    ``prev`` is the initial ``w`` or the previous segment's ``(w, report)``; the
    coordinator chains the segments of a round, so ``w`` moves from worker to
    worker without passing through it.  The blocks are streamed with prefetch
    (:func:`blocks.stream`), except those whose rows are all shrunk while the
    round keeps shrinking (``shrink`` given): such a visit would do nothing, so
    the block is not read and keeps its statistics, its projected gradients
    leaving (16)–(17) as shrunken rows do in LIBLINEAR.  Once the time budget's
    ``deadline`` has passed, the blocks left are not visited (:func:`_cut`), but for the
    first of a round.  Returns
    ``(w, report)``, where report covers ``report_infos`` (see :func:`report`) if given,
    else None.
    """
    blocks.begin_reads(run)
    w = np.array(prev[0] if isinstance(prev, tuple) else prev, dtype=np.float64)  # own copy
    states = [_state(run, info) for info in infos]
    skip = [shrink is not None and s["state"][kernel.ACTIVE] == 0 for s in states]
    loaded = blocks.stream(url, [info for info, k in zip(infos, skip) if not k], cache_bytes,
                           storage_options)
    first = not isinstance(prev, tuple)  # a round's first segment visits one block at least
    with _alarm(deadline) as stop:
        for i, (s, k, seed) in enumerate(zip(states, skip, seeds)):
            if _past(deadline) and not (first and i == 0):
                _cut(s, is_regression(kw["loss"]))
            elif k:  # (an SVR block's violations leave the round's sum too)
                s["stats"].update(pg_max=-np.inf, pg_min=np.inf, full=False, skipped=True,
                                  **({"gnorm1": 0.0} if "gnorm1" in s["stats"] else {}))
            else:
                block, sqnorm = next(loaded)
                resident.mark(s, tag)
                _visit(w, block, sqnorm, s, seed, shrink=shrink, stop=stop, **kw)
                del block, sqnorm
    out = None
    if report_infos:
        out = report(w, url, report_infos, run, bias=kw["bias"], n_features=kw["n_features"],
                     loss=kw["loss"], positive=kw["positive"], class_cost=kw["class_cost"],
                     cache_bytes=cache_bytes, storage_options=storage_options,
                     epsilon=kw.get("epsilon", 0.0))
    return w, out


def report(prev, url: str, infos: list[BlockInfo], run: str, *, bias: float,
           n_features: int, loss: int, positive: int, class_cost: np.ndarray, cache_bytes: int,
           storage_options: dict | None = None, epsilon: float = 0.0) -> dict:
    """End of a round on one worker: the loss Σ Cᵢ loss of its blocks at the round's final ``w`` and
    the statistics of their last visits, summed — all the coordinator needs, in one reply.

    A block skipped this round (all rows shrunk) is not read: its loss and
    correct count are those last measured, ``stale`` counts such blocks, and
    the round's primal objective is then not exact.
    """
    w = prev[0] if isinstance(prev, tuple) else prev
    return ovr_report(np.atleast_2d(w), url, infos, [run], [positive], [class_cost], bias=bias,
                      n_features=n_features, loss=loss, cache_bytes=cache_bytes,
                      storage_options=storage_options, epsilon=epsilon)[0]


def local_round(w, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
                gamma: float | None, sigma: float, bias: float, n_features: int, loss: int,
                positive: int, class_cost: np.ndarray, eps: float, n_passes: int,
                cache_bytes: int,
                storage_options: dict | None = None, tag: int = 0, epsilon: float = 0.0,
                deadline: float | None = None):
    """One round of parallel DCD (CoCoA/CoCoA+) on the blocks ``infos`` this worker owns.

    For each block in turn, streamed with prefetch (:func:`blocks.stream`):
    its statistics at the broadcast ``w`` (the loss, the projected gradients
    and Σα, ΣDᵢᵢαᵢ², see :func:`kernel.dual_stats`; its α has not moved yet this
    round, so one read serves both), then ``n_passes`` local DCD passes from
    the running ``w₀ + σ′Δw`` with the local subproblem scaled by ``sigma``
    (σ′), and finally its α moves by ``gamma`` times its change, so that after
    the coordinator's ``w += gamma·Σ Δw`` it still holds that w = Σ αᵢyᵢxᵢ.
    With ``gamma`` None (the ``line`` mode) α stays where the round found it and its
    change δ is kept for :func:`apply_step`, the report adding the block's terms of the
    line search (``"lin"``, ``"quad"``, ``"t_max"``: :func:`kernel.step_terms`).
    α never leaves the worker.  Returns ``(Δw, report)``.  (Classification only: the
    registry offers no parallel mode for the SVR losses; ``epsilon`` is not used.)
    Once the time budget's ``deadline`` (``time.time()``) has passed, the passes stop
    (:func:`_alarm`) and the blocks after the first get their statistics but no passes
    (their α stays: a smaller, valid step).
    """
    blocks.begin_reads(run)
    u = np.array(w, dtype=np.float64)  # w₀ + σ′Δw as the local passes go
    rows, line = [], [0.0, 0.0, np.inf]
    with _alarm(deadline) as stop:
        loaded = blocks.stream(url, infos, cache_bytes, storage_options)
        for i, (info, seed) in enumerate(zip(infos, seeds)):
            block, sqnorm = next(loaded)
            s = blocks.run_state(run, info.name, dict)
            if "alpha" not in s:
                s["alpha"] = np.zeros(block.n_rows)
            resident.mark(s, tag)
            alpha = s["alpha"]
            cost = losses.costs(class_cost, block.y, block.weight)
            # at the broadcast w, before this block's α moves: one read per block and round
            rows.append(kernel.dual_stats(block.indptr, block.indices, block.data, block.y,
                                          positive, w, bias, n_features, alpha, loss, cost))
            old = alpha.copy()
            state, index = kernel.new_state(block.n_rows)  # shrinking only within the round
            if not (i and _past(deadline)):
                kernel.dcd_passes(block.indptr, block.indices, block.data, block.y, positive,
                                  sqnorm, u, bias, n_features, alpha, index, state, loss, cost, eps,
                                  n_passes, seed, sigma, True, stop)
            if gamma is None:  # the line mode: the step waits for the coordinator's t
                s["delta"] = alpha - old
                alpha[:] = old
                lin, quad, t_max = kernel.step_terms(alpha, s["delta"], loss, cost)
                line = [line[0] + lin, line[1] + quad, min(line[2], t_max)]
            else:
                alpha[:] = old + gamma * (alpha - old)
            del block, sqnorm  # before the next one arrives: two blocks at most in memory
    total, correct, pg_max, pg_min, sum_a, sum_dsq = zip(*rows)
    report = {"loss": sum(total), "correct": sum(correct), "ww": float(w @ w),
              "pg_max": max(pg_max), "pg_min": min(pg_min), "sum_alpha": sum(sum_a),
              "sum_dsq": sum(sum_dsq), "active": sum(info.n_rows for info in infos),
              "bytes_read": blocks.take_bytes_read()}
    if gamma is None:
        report.update(lin=line[0], quad=line[1], t_max=line[2])
    return (u - w) / sigma, report


def line_step(w: np.ndarray, dw: np.ndarray, reports: list[dict]) -> float:
    """The line mode's step t: the exact minimizer of the dual objective along the round's
    combined change (α + tΔα, w + tΔw), a quadratic in t whose coefficients are wᵀΔw + Σ
    (Dᵢᵢαᵢ − 1)Δαᵢ and ‖Δw‖² + Σ DᵢᵢΔαᵢ² (the owners' ``reports`` of :func:`local_round`
    hold the per-row sums), clipped to the t ∈ [0, t_max] that keeps α feasible: Lee & Chang
    (2019, "Distributed block-diagonal approximation methods for regularized empirical risk
    minimization", Machine Learning), for the L1 and L2 losses, whose duals are quadratic."""
    slope = kernel_dot(w, dw) + sum(rep["lin"] for rep in reports)
    curve = kernel_dot(dw, dw) + sum(rep["quad"] for rep in reports)
    t_max = min(rep["t_max"] for rep in reports)
    return 0.0 if curve <= 0.0 or slope >= 0.0 else min(-slope / curve, t_max)


def apply_step(infos: list[BlockInfo], run: str, t: float) -> None:
    """The line mode's step: each block's α moves by ``t`` times the change δ that its
    :func:`local_round` kept (the coordinator's w moves by t·Σ Δw at the same time)."""
    for info in infos:
        s = blocks.run_state(run, info.name, dict)
        alpha = s["alpha"]
        alpha += t * s.pop("delta")
        np.maximum(alpha, 0.0, out=alpha)  # a bound t_max reaches, to the bit


def restore(url: str, infos: list[BlockInfo], run: str, tag: int, *, bias: float,
            n_features: int, positive: int, cache_bytes: int,
            storage_options: dict | None = None, regression: bool = False) -> np.ndarray:
    """After a worker loss: roll the blocks ``infos`` of this worker back to the start of
    round ``tag`` and return their part of w, Σ_b X_bᵀ(α_b∘y_b) (13), or with
    ``regression`` (SVR) Σ_b X_bᵀβ_b (:func:`resident.restore`)."""
    def coefficients(block, alpha):
        return alpha if regression else alpha * np.where(block.y == positive, 1.0, -1.0)

    return resident.restore(url, infos, run, tag, np.zeros(n_features + (1 if bias >= 0 else 0)),
                            coefficients, bias=bias, n_features=n_features,
                            cache_bytes=cache_bytes, storage_options=storage_options)


def save_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                storage_options: dict | None = None) -> dict[str, str]:
    """Checkpoint: write the state of blocks ``infos`` in each run of ``runs`` ({file prefix:
    run id}: one entry per problem) — α, and the shrinking state and last statistics where
    the block has them — into ``directory`` (:func:`resident.save_blocks`); return {file
    name: SHA-256}."""
    return resident.save_blocks(runs, infos, directory,
                                ("alpha", "index", "state", "stats", "cached"),
                                storage_options, json_keys=("stats",))


def load_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                digests: dict[str, str], storage_options: dict | None = None) -> int:
    """Resume: set the state of blocks ``infos`` in each run of ``runs`` ({file prefix: run
    id}) that the checkpoint holds, from the files :func:`save_blocks` wrote, each checked
    against its digest; return the blocks loaded."""
    return resident.load_blocks(runs, infos, directory, digests, storage_options,
                                json_keys=("stats",))


def block_order(seed: int, r: int, n_blocks: int) -> list[int]:
    """Round ``r``'s random order of the blocks: a function of (seed, r) only, so a problem's
    path does not depend on how its rounds are batched or which worker runs them."""
    return [int(b) for b in np.random.default_rng([seed, r]).permutation(n_blocks)]


def block_seed(seed: int, r: int, block: int) -> int:
    """The kernel's seed (its permutation of the rows) for ``block`` in round ``r``."""
    return int(np.random.SeedSequence([seed, r, block]).generate_state(1)[0])


def round_row(r: int, reports: list[dict], n_rows: int) -> dict:
    """A round's log row from the reports of its blocks' owners (:func:`ovr_report`, or
    without ``loss`` when the primal was not measured): P(w) = ½‖w‖² + Σ Cᵢ loss,
    D(α) = Σα − ½‖w‖² − ½ΣDᵢᵢαᵢ², the gap (only with the losses), the projected-gradient
    spread of (17), the active rows, the training accuracy and the bytes of blocks read."""
    ww = reports[0]["ww"]
    dual = sum(p["sum_alpha"] for p in reports) - 0.5 * ww \
        - 0.5 * sum(p["sum_dsq"] for p in reports)
    pg = max(p["pg_max"] for p in reports) - min(p["pg_min"] for p in reports)
    row = resident.round_row(r, reports, n_rows, dual, pg)
    if "gnorm1" in reports[0]:  # SVR: the summed violation; pg_violation is set by stopping
        row["gnorm1"] = sum(p["gnorm1"] for p in reports)
    if "train_accuracy" in row and all("sq_error" in p for p in reports):  # SVR: the MSE
        del row["train_accuracy"]
        row["train_mse"] = sum(p["sq_error"] for p in reports) / max(1, n_rows)
    return row


def certified(row: dict, gap_tol: float) -> bool:
    """Whether the round's duality gap certifies P(w) to within gap_tol relative."""
    return gap_tol > 0 and "primal" in row and row["gap"] <= gap_tol * abs(row["primal"])


def stopping(row: dict, reports: list[dict], eps: float, gap_certified: bool,
             init: float | None = None):
    """After a round of sequential DCD: (converged, the thresholds (M̄, m̄) of (16) for the
    next round, None to reactivate every row).  Converged: LIBLINEAR's (17) on a round whose
    passes covered every row, or ``gap_certified``; when (17) holds on the shrunken problem
    only, every row is reactivated and checked again, as LIBLINEAR does.

    SVR (the row has ``gnorm1``): ``solve_l2r_l1l2_svr``'s rule instead, Σ violation ≤
    eps · ``init`` (the first round's Σ violation; None: this is the first round), the row's
    ``pg_violation`` becoming that ratio, and (M̄, m̄) = (the round's largest violation, −∞)."""
    if "gnorm1" in row:
        return _stopping_svr(row, reports, eps, gap_certified, init)
    pg = row["pg_violation"]
    if (pg <= eps and all(p["full"] for p in reports)) or gap_certified:
        return True, None
    if pg <= eps:
        return False, None
    pg_max, pg_min = max(p["pg_max"] for p in reports), min(p["pg_min"] for p in reports)
    return False, (pg_max if pg_max > 0 else np.inf, pg_min if pg_min < 0 else -np.inf)


def _stopping_svr(row, reports, eps, gap_certified, init):
    """:func:`stopping` for SVR (LIBLINEAR's -s 12/13)."""
    gn = row["gnorm1"]
    init = gn if init is None else init
    row["pg_violation"] = gn / init if init > 0 else (0.0 if gn == 0 else np.inf)
    if (gn <= eps * init and all(p["full"] for p in reports)) or gap_certified:
        return True, None
    if gn <= eps * init:
        return False, None
    return False, (max(p["pg_max"] for p in reports), -np.inf)


def first_gnorm1(history: list[dict]) -> float | None:
    """An SVR problem's first-round Σ violation, LIBLINEAR's Gnorm1_init (None before it)."""
    return history[0]["gnorm1"] if history and "gnorm1" in history[0] else None


START = "sgd-start"  # a problem's SGD start among its run's states (blocks.run_state)
START_ETA = 0.5  # its step η: Vowpal Wabbit's default learning rate (docs/anytime.md)


def _start_visit(run: str, block, seed: int, *, positive, class_cost, bias, n_features, loss,
                 n_rows, stop) -> None:
    """One pass of the SGD start (:mod:`.kernels.adaptive`) of problem ``run`` on a block its
    dual CD is about to visit: its w and AdaGrad's sums, kept on this worker, made on first
    use."""
    s = blocks.run_state(run, START, dict)
    if "w" not in s:
        dim = n_features + (1 if bias >= 0 else 0)
        s.update(w=np.zeros(dim), G=np.zeros(dim))
    c = float(np.max(class_cost))
    adaptive.adaptive_pass(block.indptr, block.indices, block.data, block.y, positive,
                           losses.costs(class_cost, block.y, block.weight), 1.0 / c,
                           1.0 / (c * n_rows), bias, n_features, loss, s["w"], s["G"],
                           START_ETA, seed, stop)


def ovr_batch(W, url: str, infos: list[BlockInfo], runs: list[str], positives: list[int],
              class_costs: list, rounds: list[int], shrinks: list, *, seed: int, n_rows: int,
              max_rounds: int, every: int | None, seconds: float, eps: float, gap_tol: float,
              n_passes: int, bias: float, n_features: int, loss: int, cache_bytes: int,
              informative: int = 0, storage_options: dict | None = None,
              from_checkpoint: dict | None = None, epsilon: float = 0.0,
              inits: list | None = None, deadline: float | None = None,
              starts: list[bool] | None = None) -> tuple[np.ndarray, list[dict]]:
    """Rounds of sequential DCD for several one-vs-rest problems, all on this worker.

    Problem j is row j of W: class index ``positives[j]`` against the rest, C per class
    index ``class_costs[j]``, its per-block state in run ``runs[j]``
    (:func:`blocks.run_state`, kept on this worker between tasks), ``rounds[j]`` rounds done
    and the thresholds (16) ``shrinks[j]`` for its next.  A round of a problem visits every
    block of ``infos`` (the whole store) in :func:`block_order`, one pass each with
    :func:`block_seed`, W's row going from block to block as in :func:`segment`; problems at
    the same round share each block read (from the cache or the store, with prefetch).
    After each round a problem's stopping test — LIBLINEAR's (17) on a round that covered
    every row, or with ``gap_tol`` > 0 a duality gap ≤ gap_tol·P(w) — and its next
    thresholds are taken here, as :func:`distsvm.solvers.dcd.solve` does for a binary run,
    so a problem's path is that of its binary run.  The primal objective needs a pass over
    every row per problem, so it is measured each round only with ``gap_tol``, else only
    for the last round of a problem that has stopped.

    ``informative`` > 0 (:func:`cache_rows`): the rows of each problem's cache of informative
    rows, revisited with every block (:func:`_visit_cached`); 0: plain block visits.

    ``from_checkpoint`` ({"runs": {file prefix: run id}, "directory", "files",
    "storage_options"}
    of a checkpoint) first loads those problems' block states from the checkpoint
    (:func:`load_blocks`): problems moved here from a lost worker.

    SVR (``loss`` a regression code): ``epsilon`` is the loss's p, and ``inits[j]`` problem
    j's first-round Σ violation (:func:`first_gnorm1`; None if it has done no round) for
    its stopping rule (:func:`stopping`).

    Returns when every problem has stopped ((17), the gap, or ``max_rounds``), or after a
    round that ends once ``seconds`` have passed or that is a multiple of ``every`` (a
    checkpoint is due), or after the block visit in which the time budget's ``deadline``
    (``time.time()``) passed — the round cut there (:func:`_cut`; the task's first visit
    is always made), its row ``"cut": True``:
    ``(W, outcome per problem)``, each ``{"rows": [round_row of each
    round done, with "at": seconds into the task], "shrink", "done", "converged"}``.

    ``starts[j]``: problem j also runs its SGD start on each block it visits
    (:func:`_start_visit`), whose w its outcome returns as ``"start"``; False drops it.
    """
    start = time.perf_counter()
    blocks.begin_reads(*runs)
    if from_checkpoint:
        c = from_checkpoint
        load_blocks(c["runs"], infos, c["directory"], c["files"], c["storage_options"])
    W = np.array(W, dtype=np.float64)
    out = [{"rows": [], "shrink": shrinks[j], "done": False, "converged": False}
           for j in range(len(runs))]
    kw = dict(bias=bias, n_features=n_features, loss=loss, eps=eps, n_passes=n_passes,
              epsilon=epsilon)
    inits = list(inits) if inits is not None else [None] * len(runs)
    starts = list(starts) if starts is not None else [False] * len(runs)
    for j in range(len(runs)):
        if not starts[j]:
            blocks.run_state(runs[j], START, dict).clear()
    if informative:  # each problem keeps a cache of that many rows (_visit_cached)
        cache_bytes = max(0, int(cache_bytes - len(runs) * informative * _row_bytes(infos)))
        for run in runs:
            _rebuild_cache(url, infos, run, cache_bytes, storage_options)

    def measured(js: list[int], with_loss: bool) -> list[dict]:
        """The reports of problems ``js`` at their W rows (:func:`ovr_report`)."""
        if not js:
            return []
        sub = [runs[j] for j in js]
        if with_loss:
            return ovr_report(W[js], url, infos, sub, [positives[j] for j in js],
                              [class_costs[j] for j in js], bias=bias, n_features=n_features,
                              loss=loss, cache_bytes=cache_bytes,
                              storage_options=storage_options, epsilon=epsilon)
        bytes_read = blocks.take_bytes_read()
        return [_summed(W[j], [blocks.run_state(runs[j], i.name, dict)["stats"] for i in infos],
                        bytes_read if i == 0 else 0) for i, j in enumerate(js)]

    with _alarm(deadline) as stop:
        r = list(rounds)
        while True:
            live = [j for j in range(len(runs)) if not out[j]["done"]]
            groups = sorted({r[j] + 1 for j in live})  # problems at round rr share each read
            for g, rr in enumerate(groups):
                if _past(deadline) and rr > min(rounds) + 1:
                    break
                js = [j for j in live if r[j] + 1 == rr]
                order = block_order(seed, rr, len(infos))
                # the round streamed next (the next group's, else the first group's next one):
                # its first block is read during this round's last visit
                after = groups[g + 1] if g + 1 < len(groups) else groups[0] + 1
                then = infos[block_order(seed, after, len(infos))[0]] \
                    if after <= max_rounds else None
                loaded = blocks.stream(url, [infos[b] for b in order], cache_bytes, storage_options,
                                       then)
                cut = False
                for i, b in enumerate(order):
                    if _past(deadline) and (i or rr > min(rounds) + 1):  # one visit at least
                        cut = True  # the blocks left: not read, their α as they are
                        for c in order[i:]:
                            for j in js:
                                _cut(_state(runs[j], infos[c]), is_regression(loss))
                        loaded.close()  # (waits for the one block in flight)
                        break
                    block, sqnorm = next(loaded)
                    for j in js:
                        if starts[j]:  # first: a budget that ends the visit cuts the dual's
                            _start_visit(runs[j], block, block_seed(seed, rr, b),
                                         positive=positives[j], class_cost=class_costs[j],
                                         bias=bias, n_features=n_features, loss=loss,
                                         n_rows=n_rows, stop=stop)
                        if informative:  # block b's part of the cache: its share of the rows
                            _visit_cached(W[j], b, block, sqnorm, runs[j], infos,
                                          block_seed(seed, rr, b),
                                          informative * block.n_rows // n_rows,
                                          positive=positives[j], shrink=out[j]["shrink"],
                                          class_cost=class_costs[j], stop=stop, **kw)
                        else:
                            _visit(W[j], block, sqnorm, _state(runs[j], infos[b]),
                                   block_seed(seed, rr, b), positive=positives[j],
                                   shrink=out[j]["shrink"], class_cost=class_costs[j],
                                   stop=stop, **kw)
                    del block, sqnorm
                cut = cut or _past(deadline)  # a visit the stop flag ended (kernel.dcd_passes)
                for j, report in zip(js, measured(js, gap_tol > 0)):
                    r[j] = rr
                    row = round_row(rr, [report], n_rows)
                    row["at"] = time.perf_counter() - start
                    out[j]["rows"].append(row)
                    if cut:  # no stopping test on a round cut short
                        row["cut"] = True
                        out[j]["shrink"] = None
                        continue
                    converged, out[j]["shrink"] = stopping(row, [report], eps,
                                                           certified(row, gap_tol), inits[j])
                    if inits[j] is None:
                        inits[j] = row.get("gnorm1")
                    out[j].update(done=converged or rr == max_rounds, converged=converged)
            if all(o["done"] for o in out) or time.perf_counter() - start > seconds or \
                    (every and any(r[j] % every == 0 for j in live)) or _past(deadline):
                break
    if gap_tol <= 0:  # the primal objective of each problem that has stopped (its last round)
        js = [j for j in range(len(runs)) if out[j]["rows"] and out[j]["done"]]
        for j, report in zip(js, measured(js, True)):
            last = out[j]["rows"][-1]
            full = round_row(last["round"], [report], n_rows)
            last.update({k: full[k] for k in ("primal", "gap", "train_accuracy", "train_mse")
                         if k in full})
    for j in range(len(runs)):
        if starts[j]:
            out[j]["start"] = blocks.run_state(runs[j], START, dict).get("w")
    return W, out


def ovr_report(W, url: str, infos: list[BlockInfo], runs: list[str], positives: list[int],
               class_costs: list, *, bias: float, n_features: int, loss: int, cache_bytes: int,
               storage_options: dict | None = None, epsilon: float = 0.0) -> list[dict]:
    """:func:`report` of several one-vs-rest problems: problem j is row j of W
    (class index ``positives[j]`` against the rest, run ``runs[j]``, C per class index
    ``class_costs[j]``).  Each block is read (or taken from the cache) once and its losses
    for all the problems are summed in one pass (:func:`loss_sums`); a block every problem
    skipped is not read.  The bytes read are reported with the first problem.  SVR (``loss``
    a regression code, ``epsilon`` its p): the loss Σ Cᵢ ξ(wᵀxᵢ − yᵢ) and ``sq_error``
    Σ(wᵀxᵢ − yᵢ)² (:func:`svr_dual.svr_loss`), ``correct`` 0."""
    stats = [[blocks.run_state(run, info.name, dict)["stats"] for info in infos] for run in runs]
    fresh = [b for b in range(len(infos)) if not all(st[b]["skipped"] for st in stats)]
    costs = np.array(class_costs, dtype=np.float64).reshape(len(runs), -1)
    totals, correct = np.empty(len(runs)), np.empty(len(runs), dtype=np.int64)
    measured = blocks.stream(url, [infos[b] for b in fresh], cache_bytes, storage_options,
                             norms=False)
    regression = is_regression(loss)
    for b, (block, _) in zip(fresh, measured):
        if regression:
            cost = losses.costs(costs[0], block.y, block.weight)
            for j, st in enumerate(stats):
                totals[j], st[b]["sq_error"] = svr_dual.svr_loss(
                    block.indptr, block.indices, block.data, block.target, W[j], bias,
                    n_features, loss, cost, epsilon)
            correct[:] = 0
        else:
            loss_sums(block.indptr, block.indices, block.data, block.y,
                      np.asarray(positives, dtype=np.int64), W, bias, n_features, loss, costs,
                      np.empty(0) if block.weight is None else block.weight, totals, correct)
        for j, st in enumerate(stats):
            if not st[b]["skipped"]:
                st[b]["loss"], st[b]["correct"] = float(totals[j]), int(correct[j])
        del block
    bytes_read = blocks.take_bytes_read()
    return [{"loss": sum(s["loss"] for s in st), "correct": sum(s["correct"] for s in st),
             **({"sq_error": sum(s["sq_error"] for s in st)} if regression else {}),
             **_summed(W[j], st, bytes_read if j == 0 else 0)} for j, st in enumerate(stats)]


def _summed(w: np.ndarray, stats: list[dict], bytes_read: int) -> dict:
    """A problem's report from its blocks' last visits (``stats``) at its ``w``, without the
    loss (which needs a pass over the rows)."""
    return {"ww": float(w @ w), "sum_alpha": sum(s["sum_alpha"] for s in stats),
            "sum_dsq": sum(s["sum_dsq"] for s in stats),
            "pg_max": max(s["pg_max"] for s in stats), "pg_min": min(s["pg_min"] for s in stats),
            "full": all(s["full"] for s in stats), "active": sum(s["active"] for s in stats),
            "stale": sum(s["skipped"] for s in stats), "bytes_read": bytes_read,
            **({"gnorm1": sum(s["gnorm1"] for s in stats)} if "gnorm1" in stats[0] else {})}
