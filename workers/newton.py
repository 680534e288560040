"""The per-worker tasks of the Newton solver: map-reduce passes over the row blocks a worker owns.

Each task covers all the blocks of one worker and returns one small reply
(an n_features[+1]-vector and a few scalars) that the coordinator sums over
workers.  The per-row vectors stay in the memory of the worker that owns the
block for the whole run (:func:`distsvm.workers.blocks.run_state`): z = Xw, the
Hessian's weights D, t = Xs of the current direction, z₀ = Xw of the point the
direction starts from, the costs Cᵢ and the labels; and per worker, the w of
the last evaluation, so that :func:`step` need not be sent it, and the iterate
the next :func:`iteration` starts from.  Only
:func:`evaluate`, :func:`hess_vec` and :func:`step` read blocks; :func:`trial`
works on the kept vectors alone.

An iteration's CG (:func:`direction`) and line search (:func:`line_search`) take the passes
as ``each(fn, run, …)``, the replies of ``fn`` over the blocks' owners, to be added: on each
owner at once, their sum already added up among them (:func:`iteration`, one call per owner
an iteration), or, over many owners, the coordinator's calls, one a pass, added up a tree;
:func:`advance` is the iteration either way.
"""

from __future__ import annotations

import numpy as np

from distsvm.storage import BlockInfo

from . import blocks, losses
from .kernels import newton as kernel
from .kernels.newton import dot

ETA = 0.01  # sufficient decrease of the line search (newton.cpp)
MAX_LINESEARCH = 20
ALPHA_PCG = 0.01  # weight of diag(∇²f) in the preconditioner (newton.cpp)
EPS_CG = 0.5  # upper limit of the CG tolerance (newton.cpp)


def _state(run: str, info: BlockInfo, block=None, class_cost=None) -> dict:
    """The block's kept vectors; made (from ``block``) on the first pass of a run."""
    def make():  # "y": the class indices, or a regression block's targets
        return {"z": np.zeros(info.n_rows), "z0": np.zeros(info.n_rows),
                "D": np.zeros(info.n_rows), "t": np.zeros(info.n_rows),
                "y": block.y if block.target is None else block.target,
                "cost": losses.costs(class_cost, block.y, block.weight)}

    return blocks.run_state(run, info.name, make)


def _point(run: str, infos: list[BlockInfo]) -> dict:
    """The ``{"w": …, "start": …}`` of the owner of ``infos`` in run ``run``: the w of its
    last evaluation (:func:`evaluate`, :func:`step`) and the iterate its next
    :func:`iteration` starts from.  Keyed by its first block, not by process: the workers of
    an in-process cluster share one process."""
    return blocks.run_state(run, f":w:{infos[0].name}", dict)


def _fun_grad(url, infos, run, w, bias, n_features, loss, class_cost, positive, cache_bytes,
              storage_options, threads, direction=None, epsilon=0.0) -> dict:
    """:func:`evaluate`'s pass; with ``direction`` s, also t = Xs of each block and the
    loss along it at α = 1 from the block's z (→ z₀) and t, before z becomes Xw.  Each
    block's rows are shared among ``threads`` threads (:func:`blocks.each_block`)."""
    p = epsilon if losses.is_regression(loss) else None  # the kernels' SVR switch
    # w, the gradient's and the preconditioner's sums beside it, and s (a step pass)
    columns = (w, None, None) if direction is None else (w, None, None, direction)

    def make():
        return {"loss": 0.0, "wgd": kernel.side_by_side(*columns), "grad_b": 0.0,
                "diag_b": 0.0, "correct": 0, "along": 0.0}

    def visit(info, block, acc, rows):
        s = _state(run, info, block, class_cost)
        part = blocks.rows_of(block, rows)
        y, cost, z, z0, D, t = (s[k][rows] for k in ("y", "cost", "z", "z0", "D", "t"))
        if direction is not None:
            z0[:] = z  # the line search's start; z becomes X(w + s), t Xs
        out = kernel.fun_grad(part.indptr, part.indices, part.data, y, positive, cost,
                              acc["wgd"], bias, n_features, loss, z, D, p,
                              None if direction is None else t)
        if direction is not None:
            acc["along"] += kernel.loss_along(y, positive, cost, z0, t, 1.0, loss, p)
        acc["loss"] += out[0]
        acc["grad_b"] += out[1]
        acc["diag_b"] += out[2]
        acc["correct"] += out[3]

    total = blocks.each_block(url, infos, cache_bytes, storage_options, threads, visit, make)
    # columns 1 and 2: the sums; 0 (and 3): the threads' copies of w (and s) added, unused
    grad, diag = total["wgd"][:, 1].copy(), total["wgd"][:, 2].copy()
    if bias >= 0:
        grad[n_features] = total["grad_b"]
        diag[n_features] = total["diag_b"]
    _point(run, infos)["w"] = w
    return {"grad": grad, "diag": diag, **{k: total[k] for k in ("loss", "correct", "along")}}


def evaluate(url: str, infos: list[BlockInfo], run: str, w: np.ndarray, *, bias: float,
             n_features: int, loss: int, class_cost: np.ndarray, positive: int,
             cache_bytes: int, storage_options: dict | None = None, threads: int = 1,
             epsilon: float = 0.0) -> dict:
    """f's loss part, ∇ of it and the preconditioner's Σ Dᵢxᵢⱼ² at ``w``, over this worker's
    blocks (:func:`distsvm.workers.kernels.newton.fun_grad`), keeping z = Xw, D and w.

    z is computed afresh from ``w`` (the pass reads the block anyway), not updated as
    z + αt: so an evaluation at w depends on w alone, and a run resumed or recovered at w
    continues exactly as the uninterrupted one.  Returns ``{"loss", "grad", "diag",
    "correct"}`` (and ``"along"``, 0).
    """
    return _fun_grad(url, infos, run, w, bias, n_features, loss, class_cost, positive,
                     cache_bytes, storage_options, threads, epsilon=epsilon)


def hess_vec(url: str, infos: list[BlockInfo], run: str, v: np.ndarray, *, bias: float,
             n_features: int, cache_bytes: int, storage_options: dict | None = None,
             threads: int = 1) -> np.ndarray:
    """Xᵀ(D(Xv)) over this worker's blocks, with the D of the last :func:`evaluate`, each
    block's rows shared among ``threads`` threads."""
    def visit(info, block, acc, rows):
        part = blocks.rows_of(block, rows)
        acc["b"] += kernel.hess_vec(part.indptr, part.indices, part.data,
                                    _state(run, info)["D"][rows], acc["vo"], bias, n_features)

    total = blocks.each_block(url, infos, cache_bytes, storage_options, threads, visit,
                              lambda: {"vo": kernel.side_by_side(v, None), "b": 0.0})
    out = total["vo"][:, 1].copy()  # column 0: the threads' copies of v added, unused
    if bias >= 0:
        out[n_features] = total["b"]
    return out


def step(url: str, infos: list[BlockInfo], run: str, s: np.ndarray, *, bias: float,
         n_features: int, loss: int, positive: int, cache_bytes: int,
         storage_options: dict | None = None, threads: int = 1, epsilon: float = 0.0) -> dict:
    """Along the direction ``s`` from the w of the last evaluation, in one read of each block:
    keep t = Xs and z₀ = Xw for the line search, and return the loss part of f(w + s) from
    z₀ + t (its first trial, ``"along"``) together with :func:`evaluate` at w + s (which
    then keeps z = X(w + s), D and w + s): when the line search takes α = 1, as it mostly
    does, the next iteration needs no evaluation pass."""
    w = _point(run, infos)["w"] + 1.0 * s  # the coordinator's w + α·s at α = 1, to the bit
    return _fun_grad(url, infos, run, w, bias, n_features, loss, None, positive, cache_bytes,
                     storage_options, threads, direction=s, epsilon=epsilon)


def trial(url: str, infos: list[BlockInfo], run: str, alpha: float, *, loss: int, positive: int,
          cache_bytes: int, bias: float, n_features: int,
          storage_options: dict | None = None, epsilon: float = 0.0) -> float:
    """The loss part of f(w + αs) from the kept z₀ = Xw and t = Xs (:func:`step`): a
    line-search trial that reads no block."""
    total = 0.0
    for info in infos:
        st = _state(run, info)
        total += kernel.loss_along(st["y"], positive, st["cost"], st["z0"], st["t"], alpha, loss,
                                   epsilon if losses.is_regression(loss) else None)
    return total


def pcg(xtdx, reg: np.ndarray, g: np.ndarray,
        M: np.ndarray) -> tuple[np.ndarray, int, str | None]:
    """Preconditioned CG on ∇²f·s = −g, stopped by the quadratic-model rule (newton.cpp's
    ``pcg``), with ∇²f·v = reg∘v + ``xtdx(v)``, the passes' Xᵀ(D(Xv)); returns (s, CG
    iterations, warning or None).  A step's vector arithmetic is three compiled passes
    (:func:`~distsvm.workers.kernels.newton.cg_curvature`, ``cg_update``,
    ``cg_direction``), newton.cpp's operations in its order, in place (a worker's fresh
    arrays of this size cost it page faults)."""
    n = len(g)
    s = np.zeros(n)
    r = -g
    z = r / M
    d = z.copy()
    Hd = np.empty(n)
    zTr = dot(z, r)
    cgtol = min(EPS_CG, np.sqrt(np.sqrt(zTr)))
    Q = 0.0
    for k in range(1, max(n, 5) + 1):
        dHd = kernel.cg_curvature(reg, d, xtdx(d), Hd)
        if dHd <= 1e-16:  # avoids 0/0 in the step
            return s, k, None
        a = zTr / dHd
        sTr, sTg, znew = kernel.cg_update(a, d, Hd, g, M, s, r, z)
        newQ = -0.5 * (sTr - sTg)
        Qdiff = newQ - Q
        if newQ > 0 or Qdiff > 0:
            return s, k, "quadratic approximation > 0 or increasing in CG"
        if k * Qdiff >= cgtol * newQ:
            return s, k, None
        Q = newQ
        kernel.cg_direction(znew / zTr, z, d)
        zTr = znew
    return s, max(n, 5), "reaching maximal number of CG steps"


def direction(each, run, g, M, reg) -> tuple[np.ndarray, int, str | None]:
    """The Newton direction by :func:`pcg`, its Hessian-vector products by :func:`hess_vec`
    passes (``each``), preconditioned by newton.cpp's (1 − α)I + α·diag(∇²f) of ``M``."""
    def xtdx(v):
        parts = each(hess_vec, run, v, threaded=True)
        return sum(parts[1:], parts[0])

    return pcg(xtdx, reg, g, (1 - ALPHA_PCG) + ALPHA_PCG * M)


def line_search(each, run, kw, w, s, g, f, reg) -> tuple[float, list]:
    """Backtracking from α = 1 (newton.cpp's ``linesearch_and_update``): the first α of
    1, ½, ¼, … with f(w + αs) − f(w) ≤ η·α·∇fᵀs; 0 if none of ``MAX_LINESEARCH`` is.
    Returns α and the owners' evaluations at w + s (:func:`step`)."""
    wTw, wTs, sTs = dot(reg, w * w), dot(reg, w * s), dot(reg, s * s)
    gTs = dot(g, s)
    at_one = each(step, run, s, threaded=True, **kw)
    loss = sum(r["along"] for r in at_one)
    alpha = 1.0
    for k in range(MAX_LINESEARCH):
        if k:
            loss = sum(each(trial, run, alpha, **kw))
        if loss + 0.5 * (wTw + 2 * alpha * wTs + alpha * alpha * sTs) - f <= ETA * alpha * gTs:
            return alpha, at_one
        alpha *= 0.5
    return 0.0, at_one


def advance(each, run, kw, class_cost, w, g, M, f, reg) -> tuple:
    """One Newton iteration from ``w`` (f, ∇f = ``g``, diag(∇²f) = ``M`` there), its passes
    by ``each``: :func:`direction`, :func:`line_search` and, for a step other than 1 (or 0),
    :func:`evaluate` at the new w.  Returns (s, CG iterations, warning or None, α, the
    replies at w + αs)."""
    s, cg, warning = direction(each, run, g, M, reg)
    alpha, reps = line_search(each, run, kw, w, s, g, f, reg)
    if alpha not in (0.0, 1.0):
        reps = each(evaluate, run, w + alpha * s, class_cost=class_cost, threaded=True, **kw)
    return s, cg, warning, alpha, reps


def dot_once(a: np.ndarray, b: np.ndarray) -> float:
    """aᵀb summed in order, the bits of :func:`distsvm.workers.kernels.newton.dot`, without a
    compiled kernel: for the few products at an iteration's ends (f, ‖∇f‖), which the
    coordinator also takes, where a kernel's first call costs ~0.27 s (its load from Numba's
    cache) and this ~1 ms."""
    return float(np.cumsum(a * b)[-1]) if len(a) else 0.0


def totals(w: np.ndarray, reps: list, reg: np.ndarray) -> tuple:
    """(f, ∇f, diag(∇²f), rows right) at ``w`` from the owners' replies of an evaluation
    there (:func:`evaluate`, :func:`step`); ``reg`` weighs ½wᵀw by coordinate."""
    f = 0.5 * dot_once(reg, w * w) + sum(r["loss"] for r in reps)
    return (f, reg * w + sum(r["grad"] for r in reps), reg + sum(r["diag"] for r in reps),
            sum(r["correct"] for r in reps))


def iteration(url: str, infos: list[BlockInfo], run: str, start: tuple | None, *,
              loss: int, positive: int, epsilon: float, class_cost: np.ndarray,
              reduce=None, threads: int = 1, **common) -> tuple:
    """:func:`advance` from ``start`` = (w, ∇f, diag(∇²f), f, reg) on each owner of blocks at
    once, its passes called here and their replies added up among the owners by ``reduce``
    (:class:`distsvm.cluster.AllReduce`; None: this worker owns every block): every owner
    runs the same arithmetic on the same sums, so they all hold the same iterates, and
    vectors never go through the coordinator.

    Each owner keeps where the iteration ends (w + αs and f, ∇f, diag(∇²f) there) and starts
    the next from it when ``start`` is None.  Returns (s — from the first owner only, None
    from the others —, CG iterations, warning or None, α, f, ‖∇f‖ and rows right at w + αs,
    the passes made)."""
    count = 0

    def each(fn, *args, threaded=False, **kw):
        nonlocal count
        count += 1
        part = fn(url, infos, *args, **common, **kw, **({"threads": threads} if threaded else {}))
        return [part if reduce is None else reduce(part)]

    point = _point(run, infos)
    if start is None and "start" not in point:
        raise RuntimeError("this worker holds no Newton iterate of the run (restarted?)")
    w, g, M, f, reg = point["start"] if start is None else start
    kw = dict(loss=loss, positive=positive, epsilon=epsilon)
    with blocks.vectors_from_heap(), blocks.repeating():
        s, cg, warning, alpha, reps = advance(each, run, kw, class_cost, w, g, M, f, reg)
        x = w + alpha * s
        f, g, M, correct = totals(x, reps, reg)
    point["start"] = (x, g, M, f, reg)
    first = reduce is None or reduce.rank == 0
    return s if first else None, cg, warning, alpha, f, np.sqrt(dot_once(g, g)), correct, count
