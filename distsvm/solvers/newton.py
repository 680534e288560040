"""Line-search Newton with preconditioned conjugate gradient: LIBLINEAR's primal solver for
L2-regularized logistic regression (``-s 0``) and the L2-loss SVM (``-s 2``).

Problem: ``min_w f(w) = ½wᵀw + Σᵢ Cᵢ ξ(yᵢwᵀxᵢ)`` with ξ the logistic loss or the squared
hinge (:mod:`workers.kernels.newton`) and Cᵢ = C times the class weight of yᵢ.

Algorithm: the line-search truncated Newton method of Galli & Lin (2021, "A study on
truncated Newton methods for linear classification", IEEE TNNLS), which replaced the
trust-region method TRON (Lin, Weng & Keerthi 2008; Fan et al. 2008, Appendix) in
LIBLINEAR 2.40 and is its default since; we follow LIBLINEAR's ``newton.cpp``:

1. the Newton direction s ≈ −∇²f(w)⁻¹∇f(w) by preconditioned CG (:func:`pcg`) with
   LIBLINEAR's diagonal preconditioner M = (1 − a)I + a·diag(∇²f), a = 0.01 (Hsia,
   Chiang & Lin 2018), stopped by the quadratic-model rule of Galli & Lin (2021, §4):
   ``k·(Q_k − Q_{k−1}) ≥ tol·Q_k`` with Q the CG model value and
   tol = min(0.5, ‖∇f‖_{M⁻¹}^{1/2});
2. a backtracking line search from α = 1, halving, accepting the first α with
   ``f(w + αs) − f(w) ≤ η·α·∇fᵀs``, η = 0.01, at most 20 trials;
3. stop when ``‖∇f(w)‖ ≤ eps'·‖∇f(0)‖`` with LIBLINEAR's
   ``eps' = eps·max(min(#pos, #neg), 1)/l`` (``train()`` of linear.cpp; eps = 0.01 by
   default for ``-s 0`` and ``-s 2``), or after ``max_rounds`` Newton iterations
   (LIBLINEAR's 1000) with a :class:`~distsvm.errors.ConvergenceWarning`, or when the
   line search fails or f no longer decreases (|Δf| ≤ 10⁻¹²|f|), as LIBLINEAR.

Distribution: the data are touched only through map-reduce passes over the row blocks
(:mod:`workers.newton`), one task per worker — its blocks shared among the worker's threads
(:func:`workers.blocks.each_block`) — each returning a vector of n_features[+1]:

* one pass per function/gradient evaluation, which also computes the Hessian's
  diagonal weights D and the preconditioner's diagonal Σᵢ Dᵢxᵢⱼ², and keeps D and
  z = Xw on the workers;
* one pass per Hessian-vector product ``v + Xᵀ(D(Xv))``;
* one pass per direction s (:func:`workers.newton.step`) that keeps t = Xs and z₀ = Xw on
  the workers, returns the loss at w + s computed as LIBLINEAR's first line-search trial
  (from z₀ + t), and in the same read of the blocks evaluates f, ∇f and D at w + s, as the
  evaluation pass would: when the line search takes α = 1 (it mostly does: Newton's
  step) the next iteration needs no evaluation pass.  Every further trial f(w + αs) uses
  the kept z₀ and t only, reading no data, and an accepted α < 1 costs an evaluation
  pass at w + αs.  The workers keep the w of their last evaluation, so a step is sent s
  alone (w itself only with an evaluation).  Where LIBLINEAR keeps ``wx`` as z + αt,
  the evaluations compute z = Xw afresh from the block they read anyway (one more
  product per row, no more data read): an evaluation then depends on w alone, which
  makes a resumed or recovered run continue exactly as an uninterrupted one.

So a Newton iteration with k CG steps reads the data k + 1 times when α = 1 (k + 2 with
a shorter step), where LIBLINEAR reads it k + 2 times; the iterates are the same.  The
coordinator holds O(n_features) vectors: w, ∇f, M, and the CG vectors; its inner
products are :func:`workers.kernels.newton.dot` (sequential, no BLAS threads).

Checkpoints and worker faults: the state of a run is the coordinator's w, the
iteration, ‖∇f(0)‖ (the stopping rule's reference) and the history; the workers' z = Xw
and D are functions of w.  So a checkpoint (:mod:`distsvm.checkpoint`, every k
iterations) holds those alone, and a resumed run recomputes z and D from w in one
evaluation pass and goes on exactly as the uninterrupted run.  When a worker leaves the cluster
(:class:`distsvm.cluster.WorkerLost`), the coordinator waits for the survivors' tasks of
the interrupted pass to end, gives the departed worker's blocks to the survivors
(:func:`distsvm.cluster.replan`), starts the per-row state afresh (a new run id) and runs
the interrupted iteration again from its w, first recomputing z and D of every block in
one pass (simpler than recomputing the lost blocks only, and one pass among the k + 1 of
an iteration); the job fails with ClusterError only when no worker of the job is left.

Bias: with ``bias >= 0`` the last coordinate of w weighs a constant feature of that
value (``-B``); ``regularize_bias=False`` leaves it out of ½wᵀw and out of the
identity part of the Hessian and of the preconditioner (LIBLINEAR's ``-R``).
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np

import workers.blocks
import workers.newton
from storage import Dataset
from workers import losses
from workers.kernels.newton import dot

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress
from .alm import _Passes as Passes
from .dcd import Result

ETA = 0.01  # sufficient decrease of the line search (newton.cpp)
MAX_LINESEARCH = 20
ALPHA_PCG = 0.01  # weight of diag(∇²f) in the preconditioner (newton.cpp)
EPS_CG = 0.5  # upper limit of the CG tolerance (newton.cpp)


def stopping_tolerance(eps: float, class_counts) -> float:
    """LIBLINEAR's eps' = eps·max(min(#pos, #neg), 1)/l for its primal solvers."""
    return eps * max(min(class_counts), 1) / max(1, sum(class_counts))


def pcg(hess_vec, g: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, int, str | None]:
    """Preconditioned CG on ∇²f·s = −g, stopped by the quadratic-model rule (newton.cpp's
    ``pcg``); returns (s, CG iterations, warning or None)."""
    n = len(g)
    s = np.zeros(n)
    r = -g
    z = r / M
    d = z.copy()
    zTr = dot(z, r)
    cgtol = min(EPS_CG, np.sqrt(np.sqrt(zTr)))
    Q = 0.0
    for k in range(1, max(n, 5) + 1):
        Hd = hess_vec(d)
        dHd = dot(d, Hd)
        if dHd <= 1e-16:  # avoids 0/0 in the step
            return s, k, None
        a = zTr / dHd
        s += a * d
        r -= a * Hd
        newQ = -0.5 * (dot(s, r) - dot(s, g))  # the quadratic model at s
        Qdiff = newQ - Q
        if newQ > 0 or Qdiff > 0:
            return s, k, "quadratic approximation > 0 or increasing in CG"
        if k * Qdiff >= cgtol * newQ:
            return s, k, None
        Q = newQ
        z = r / M
        znew = dot(z, r)
        d = z + (znew / zTr) * d
        zTr = znew
    return s, max(n, 5), "reaching maximal number of CG steps"


def solve(client, dataset: Dataset, plan: WorkerPlan, *, loss: str, C: float, eps: float,
          bias: float, max_rounds: int, class_cost=None, regularize_bias: bool = True,
          warm_start: np.ndarray | None = None, progress: Progress | None = None,
          positive: int = 1, checkpoint: Checkpointer | None = None) -> Result:
    """Train by line-search Newton on the cluster behind ``client``; see the module docstring.

    ``class_cost`` is each class index's cost Cᵢ (C times its weight; default C for all);
    ``warm_start`` an initial w of n_features (+1 with a bias) entries; rows of class index
    ``positive`` have yᵢ = +1, the others −1 (one-vs-rest).  With ``checkpoint`` the run
    continues from its latest checkpoint and writes one every ``checkpoint.every``
    iterations (see "Checkpoints and worker faults" in the module docstring).
    """
    progress = progress or Progress(quiet=True)
    meta = dataset.meta
    d = meta.n_features
    dim = d + (1 if bias >= 0 else 0)
    reg = np.ones(dim)
    if bias >= 0 and not regularize_bias:
        reg[d] = 0.0
    class_cost = np.full(2, C) if class_cost is None else np.asarray(class_cost, np.float64)
    passes = Passes(client, dataset, plan, bias)
    run = uuid.uuid4().hex
    kw = dict(loss=losses.code(loss), positive=positive)
    start = time.perf_counter()

    def evaluate(w):
        return totals(w, passes.each(workers.newton.evaluate, run, w, class_cost=class_cost,
                                     threaded=True, **kw))

    def totals(w, reps):
        """(f, ∇f, diag(∇²f), rows right) at w from the workers' replies of an evaluation."""
        f = 0.5 * dot(reg, w * w) + sum(r["loss"] for r in reps)
        return (f, reg * w + sum(r["grad"] for r in reps), reg + sum(r["diag"] for r in reps),
                sum(r["correct"] for r in reps))

    def hess_vec(v):
        return reg * v + sum(passes.each(workers.newton.hess_vec, run, v, threaded=True))

    def retried(step, k):
        """``step()``, run again after each worker loss: the survivors take the lost blocks
        and the per-row state starts afresh (a new run id) from the coordinator's w."""
        nonlocal run
        while True:
            try:
                return step()
            except cluster.WorkerLost as lost:
                moved = passes.replan(lost.gone)
                client.run(workers.blocks.drop_run, run)
                run = uuid.uuid4().hex
                progress.note(f"iter {k}: worker {', '.join(lost.gone)} left the cluster; its "
                              f"{moved} blocks go to the other {len(passes.owners)} worker(s), "
                              f"which recompute z = Xw and D from the iteration's w and run "
                              f"iteration {k} again")
                fresh[0] = True

    fresh = [True]  # whether the workers' z and D must be recomputed from w first
    history: list[dict] = []

    def log(k, f, gnorm, cg, step, correct):
        row = {"round": k, "primal": f, "grad_norm": gnorm, "rel_grad_norm": gnorm / gnorm0,
               "cg_iterations": cg, "step": step, "train_accuracy": correct / max(1, meta.n_rows),
               "passes": passes.count, "seconds": time.perf_counter() - start}
        history.append(row)
        progress.round(row, f"iter {k:4d}  f {f:.8e}  |grad| {gnorm:.3e} "
                       f"({row['rel_grad_norm']:.1e} rel)  CG {cg:3d}  step {step:.3g}  "
                       f"{row['seconds']:.2f}s")

    def iteration(w, f, g, M):
        """One Newton iteration from w: (w, f, g, M, correct, CG iterations, step α); α = 0
        when the line search fails.  After a worker loss it first rebuilds z and D at w."""
        if fresh[0]:
            f, g, M, _ = evaluate(w)
            fresh[0] = False
        s, cg, warning = pcg(hess_vec, g, (1 - ALPHA_PCG) + ALPHA_PCG * M)
        if warning:
            progress.note(f"WARNING: {warning}")
        alpha, at_one = _line_search(passes, run, kw, w, s, g, f, reg)
        if alpha == 0.0:
            return w, f, g, M, 0, cg, alpha
        w = w + alpha * s
        return (w, *(totals(w, at_one) if alpha == 1.0 else evaluate(w)), cg, alpha)

    w = np.zeros(dim) if warm_start is None else np.array(warm_start, dtype=np.float64)
    resumed = checkpoint.latest("newton") if checkpoint is not None else None
    k = 0
    try:
        if resumed is not None:
            w, k, gnorm0 = resumed.arrays["w"], resumed.round, resumed.state["gnorm0"]
            history, passes.count = resumed.state["history"], resumed.state["passes"]
            start -= resumed.state["seconds"]
            progress.note(f"resuming from the checkpoint of iteration {k} "
                          f"({resumed.directory})")
        elif warm_start is not None and np.any(w):
            g0 = retried(lambda: evaluate(np.zeros(dim)), 0)[1]
            gnorm0 = np.sqrt(dot(g0, g0))
        f, g, M, correct = retried(lambda: evaluate(w), k)
        fresh[0] = False
        gnorm = np.sqrt(dot(g, g))
        if resumed is None and (warm_start is None or not np.any(w)):
            gnorm0 = gnorm
        gnorm0 = gnorm0 or 1.0  # ∇f(0) = 0: w = 0 is optimal, stop at once
        n_pos = meta.class_counts[positive]  # one-vs-rest: this class against the rest
        tol = stopping_tolerance(eps, (meta.n_rows - n_pos, n_pos)) * gnorm0
        if resumed is None:
            log(0, f, gnorm, 0, 0.0, correct)
        converged = gnorm <= tol
        while not converged and k < max_rounds:
            k += 1
            f_old = f
            w, f, g, M, correct, cg, alpha = retried(lambda: iteration(w, f, g, M), k)
            if alpha == 0.0:
                progress.note("WARNING: line search fails")
                break
            gnorm = np.sqrt(dot(g, g))
            log(k, f, gnorm, cg, alpha, correct)
            converged = gnorm <= tol
            if not converged and abs(f_old - f) <= 1e-12 * abs(f):
                progress.note("WARNING: actred too small")
                break
            if not converged and checkpoint is not None and checkpoint.due(k) \
                    and k < max_rounds:
                checkpoint.save(k, "newton", {"w": w},
                                {"gnorm0": gnorm0, "history": history, "passes": passes.count,
                                 "seconds": time.perf_counter() - start})
        if not converged and k >= max_rounds:
            warnings.warn(f"newton reached the iteration limit ({max_rounds}) before ‖∇f‖ fell "
                          f"to eps'={tol / gnorm0:.3g} of ‖∇f(0)‖ ({gnorm / gnorm0:.3g}); "
                          "increase max_rounds or eps", ConvergenceWarning, stacklevel=2)
    finally:
        client.run(workers.blocks.drop_run, run)
    return Result(w=w, rounds=len(history) - 1, converged=converged, primal_objective=f,
                  dual_objective=np.nan, duality_gap=np.nan,
                  train_seconds=time.perf_counter() - start, history=history)


def _line_search(passes, run, kw, w, s, g, f, reg) -> tuple[float, list]:
    """Backtracking from α = 1 (newton.cpp's ``linesearch_and_update``): the first α of
    1, ½, ¼, … with f(w + αs) − f(w) ≤ η·α·∇fᵀs; 0 if none of ``MAX_LINESEARCH`` is.
    Returns α and the workers' evaluations at w + s (:func:`workers.newton.step`)."""
    wTw, wTs, sTs = dot(reg, w * w), dot(reg, w * s), dot(reg, s * s)
    gTs = dot(g, s)
    at_one = passes.each(workers.newton.step, run, s, threaded=True, **kw)
    loss = sum(r["along"] for r in at_one)
    alpha = 1.0
    for trial in range(MAX_LINESEARCH):
        if trial:
            loss = sum(passes.each(workers.newton.trial, run, alpha, **kw))
        if loss + 0.5 * (wTw + 2 * alpha * wTs + alpha * alpha * sTs) - f <= ETA * alpha * gTs:
            return alpha, at_one
        alpha *= 0.5
    return 0.0, at_one
