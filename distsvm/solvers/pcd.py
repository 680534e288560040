"""Primal coordinate descent over a store's column blocks (Chang, Hsieh & Lin, JMLR 2008).

Problem: LIBLINEAR's ``min_w ½wᵀw + C Σⱼ ξ(w; xⱼ, yⱼ)`` in the primal, with the
L2 loss (squared hinge, the problem of LIBLINEAR ``-s 2``) or the logistic loss
(``-s 0``).  Algorithm 1 with sub-problems solved by Algorithm 2 (Newton step
(13), line search (12) with the λ̄ shortcut (15)), bⱼ(w) maintained by (17),
and logistic regression as in §6.2.  Kernel: :mod:`workers.kernels.pcd`; tasks:
:mod:`workers.pcd`.  Needs the store's column view (``distsvm columnize``).

Distribution (what differs from the paper):

* **exact** mode — one worker does each round: it visits every column block
  in a fresh random order, streaming them from the store (or its block cache),
  and every feature of a block in a fresh random order, holding ``b`` (length
  l).  That is Algorithm 1 with a random permutation per outer iteration
  (§3.2) restricted to permutations that keep each block's features together,
  a choice the paper leaves open (any order converges, Theorem 3).  The bias
  feature, if any, is one more item of the block order.
* **parallel** mode — the column blocks are split among the workers; in a
  round each worker runs the same inner iterations over its own blocks, all
  starting from the same ``w`` and ``b``, and returns its Δw block and
  Δb = b_after − b_before.  These are added and a global line search on the
  aggregated step (:func:`workers.pcd.combine`) takes the largest t ∈ {1, ½, …}
  that decreases f, falling back to 1/P, which decreases f by convexity; so the
  objective decreases monotonically.  With one worker it is the exact mode.

Exact mode batches outer iterations: one task runs rounds for up to
``BATCH_SECONDS`` (or until it stops) and reports each round, sparing a
scheduler round trip per outer iteration.  Its state (w, b) stays on the worker
for the whole run, so a batch is one task, and w comes back with each batch.
A round's logged time is when the coordinator received the batch less the
worker time spent on the batch's later rounds (so every latency is charged to
the round).
Parallel mode submits round r + 1 before it reads round r's report.

Stopping (§5.3): the largest |D′ᵢ(0)| seen in an outer iteration, relative to
the largest |∇f(0)ᵢ| at w = 0: max |D′ᵢ(0)| ≤ eps · max |∇f(0)ᵢ|; or
``max_rounds`` with a :class:`~distsvm.errors.ConvergenceWarning`.  The
Euclidean norm of the D′ᵢ(0) of the round, relative to ‖∇f(0)‖, is logged too.

Checkpoints and worker faults: the state of a run is w alone.  The residuals
bⱼ = 1 − yⱼwᵀxⱼ are a function of w, recomputed in one pass over the column blocks
by (17) applied to every feature with z = wᵢ from w = 0 (:func:`workers.pcd.initial`),
and the round orders derive from (seed, round), so there is no RNG state to keep.  The
coordinator holds the w of the last round reported (exact mode: each batch returns it,
so a batch, at most ``BATCH_SECONDS`` of work, is all a fault can lose; parallel
mode: each combine's report carries it).  A checkpoint (:mod:`distsvm.checkpoint`,
both modes, every k rounds; an exact-mode batch stops at a round that is due) holds
that w, ∇f(0)'s scales g0 and ‖∇f(0)‖ (the stopping rule's reference), f and the
history; a resumed run rebuilds b from w and goes on as the uninterrupted run (its w
agrees to rounding, the rebuilt b differing from the updated one in the last bits).
When a worker the round waits on leaves the cluster
(:func:`distsvm.cluster.gather` raises :class:`~distsvm.cluster.WorkerLost` within
seconds, never waiting on a task pinned to the departed one), the coordinator
waits for the round's other tasks to stop (:func:`distsvm.cluster.settle`), drops
the departed worker from the plan (:func:`distsvm.cluster.replan`), starts the
per-run state afresh (a new run id) on the survivors from its w, and runs the
interrupted round (exact mode: batch) again.  In parallel mode the column blocks
are then split among the survivors, which changes the rounds' steps but not the
optimum they converge to.  Only when no worker of the job is left does the job fail,
with a :class:`~distsvm.errors.ClusterError`.
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np

import workers.blocks
import workers.pcd
from storage import Dataset
from storage.columns import read_columns_meta
from workers import losses
from workers.kernels import pcd as kernel

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress
from .dcd import Result

MODES = ("exact", "parallel")
BATCH_SECONDS = 0.5  # exact mode: outer iterations one task may run before it reports


def solve(client, dataset: Dataset, plan: WorkerPlan, *, loss: str, C: float, eps: float,
          bias: float, max_rounds: int, seed: int, mode: str = "exact",
          progress: Progress | None = None, checkpoint: Checkpointer | None = None,
          positive: int = 1, class_cost=None) -> Result:
    """Train by primal coordinate descent on the cluster behind ``client``; see the module
    docstring.  ``plan`` supplies the workers and their cache budgets; parameters are
    checked by :func:`distsvm.jobs.check_params`.  Rows of class index ``positive`` have
    yᵢ = +1, the others −1 (one-vs-rest).  ``class_cost`` (C per class index with its class
    weight; default C) and the store's instance weights give row j its Cⱼ (the worker reads
    the weights from the row blocks once per run, :func:`workers.pcd.initial`).

    With ``checkpoint`` (:mod:`distsvm.checkpoint`), every ``checkpoint.every`` rounds the
    coordinator writes w and the history, and a run continues from its latest checkpoint
    (see "Checkpoints and worker faults" in the module docstring).
    """
    progress = progress or Progress(quiet=True)
    code = losses.code(loss)
    meta = dataset.meta
    cmeta = read_columns_meta(dataset)
    dim = meta.n_features + (1 if bias >= 0 else 0)
    n_items = len(cmeta.blocks) + (1 if bias >= 0 else 0)  # the bias is the last item
    class_cost = np.full(len(meta.classes), C) if class_cost is None else \
        np.asarray(class_cost, dtype=np.float64)
    row_infos = list(meta.blocks) if meta.weighted else None
    common = dict(bias=bias, n_features=meta.n_features, loss=code, class_cost=class_cost,
                  row_infos=row_infos, n_items=n_items, positive=positive,
                  storage_options=dataset.storage_options)
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    g0 = gnorm0 = f = np.nan
    w = None  # the w of the last round reported (None: w = 0)
    r = 1
    run = uuid.uuid4().hex
    fresh = True  # the workers hold no state of ``run``: the next round first makes it at w

    def workers_of(plan):
        """The workers the rounds run on, and the owner of each item (parallel mode)."""
        addrs = plan.workers[:1] if mode == "exact" else plan.workers[:n_items]
        return addrs, [addrs[k % len(addrs)] for k in range(n_items)]

    def parallel_round(prev, r):
        """Round r's tasks: the parts, then the combine (last) that makes the next state."""
        parts = [client.submit(workers.pcd.part, prev, dataset.url, cmeta,
                               [k for k in range(n_items) if owners[k] == a], r, seed, run,
                               cache_bytes=plan.cache_bytes[a], workers=[a], pure=False,
                               **common)
                 for a in addrs]
        return parts + [client.submit(workers.pcd.combine, prev, parts, loss=code,
                                      workers=addrs[:1], pure=False)]

    addrs, owners = workers_of(plan)
    pending, ahead = [], []  # the futures of the rounds in flight; round r + 1's
    found = checkpoint.latest("pcd") if checkpoint is not None else None
    try:
        if found is not None:
            w, r, history = found.arrays["w"], found.round + 1, found.state["history"]
            g0, gnorm0, f = found.state["g0"], found.state["gnorm0"], found.state["f"]
            start -= found.state["seconds"]
            progress.note(f"resuming from the checkpoint of round {found.round} "
                          f"({found.directory})")
        while r <= max_rounds and not converged:
            try:
                if mode == "exact":  # the state stays on the worker: reports and w come back
                    every = checkpoint.every if checkpoint is not None else None
                    pending = [client.submit(
                        workers.pcd.exact_rounds, dataset.url, cmeta, r, max_rounds, seed, run,
                        eps=eps, g0=g0, seconds=BATCH_SECONDS,
                        stop_at=-(-r // every) * every if every else None,
                        w0=w if fresh else None, cache_bytes=plan.cache_bytes[addrs[0]],
                        workers=addrs[:1], pure=False, **common)]
                    out = cluster.gather(client, pending, addrs[:1])[0]
                    reps, w = out["reports"], out["w"]
                else:  # round r + 1 is submitted before round r's report is read
                    if fresh:
                        ahead = parallel_round(client.submit(
                            workers.pcd.initial, dataset.url, cmeta, dim, code, class_cost,
                            row_infos, dataset.storage_options, w, bias=bias, positive=positive,
                            cache_bytes=plan.cache_bytes[addrs[0]], workers=addrs[:1],
                            pure=False), r)
                    current = ahead
                    ahead = parallel_round(current[-1], r + 1) if r < max_rounds else []
                    pending = current + ahead + [client.submit(
                        workers.pcd.reports, current[-1], workers=addrs[:1], pure=False)]
                    reps = cluster.gather(client, pending[-1:], addrs)[0]  # waits on every part
                    w = reps[-1]["w"]
                fresh = False
            except cluster.WorkerLost as lost:  # the state is a function of w: rebuild it
                cluster.settle(client, pending, plan.workers)
                plan = cluster.replan(plan, lost.gone)  # ClusterError when none is left
                addrs, owners = workers_of(plan)
                client.run(workers.blocks.drop_run, run)
                run, fresh, ahead = uuid.uuid4().hex, True, []
                progress.note(f"round {r}: worker {', '.join(lost.gone)} left the cluster; "
                              f"the other {len(plan.workers)} worker(s) rebuild the state from "
                              f"the w of round {r - 1} and run round {r} again")
                continue
            received = time.perf_counter() - start
            for rep in reps:
                s = rep["stats"]
                if r == 1:
                    g0, gnorm0 = s[kernel.MAX_GRAD0], np.sqrt(s[kernel.SUM_GRAD0_SQ])
                f = rep["f"]
                inner = max(1.0, s[kernel.INNER])
                row = {"round": r, "primal": f, "max_grad": s[kernel.MAX_GRAD] / g0,
                       "grad_norm": np.sqrt(s[kernel.SUM_GRAD_SQ]) / gnorm0, "step": rep["t"],
                       "full_newton": s[kernel.FULL_STEP] / inner,
                       "shortcut": s[kernel.SHORTCUT] / inner, "evals": int(s[kernel.EVALS]),
                       "seconds": received - (reps[-1].get("elapsed", 0.0)
                                              - rep.get("elapsed", 0.0))}
                history.append(row)
                progress.round(row, f"round {r:4d}  primal {f:.8e}  max|D'| "
                                    f"{row['max_grad']:.2e} rel  |grad| {row['grad_norm']:.2e} "
                                    f"rel  step {rep['t']:.3g}  full Newton "
                                    f"{100 * row['full_newton']:5.1f}%  {row['seconds']:.2f}s")
                converged = s[kernel.MAX_GRAD] <= eps * g0  # §5.3
                r += 1
            if checkpoint is not None and checkpoint.due(r - 1) and not converged \
                    and r <= max_rounds:
                checkpoint.save(r - 1, "pcd", {"w": w}, {
                    "history": history, "g0": g0, "gnorm0": gnorm0, "f": f,
                    "seconds": time.perf_counter() - start})
        if not converged:
            warnings.warn(f"pcd reached the round limit ({max_rounds}) before max|D'ᵢ(0)| fell "
                          f"to eps={eps:g} of its value at w = 0 ({history[-1]['max_grad']:.3g});"
                          " increase max_rounds or eps", ConvergenceWarning, stacklevel=2)
    finally:
        if ahead:
            client.cancel(ahead)
        client.run(workers.blocks.drop_run, run)
    return Result(w=w, rounds=len(history), converged=converged, primal_objective=f,
                  dual_objective=np.nan, duality_gap=np.nan,
                  train_seconds=time.perf_counter() - start, history=history)
