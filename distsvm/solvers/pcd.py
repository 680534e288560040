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
for the whole run, so a batch is one task, and w comes back with the last one.
A round's logged time is when the coordinator received the batch less the
worker time spent on the batch's later rounds (so every latency is charged to
the round).
Parallel mode submits round r + 1 before it reads round r's report.

Stopping (§5.3): the largest |D′ᵢ(0)| seen in an outer iteration, relative to
the largest |∇f(0)ᵢ| at w = 0: max |D′ᵢ(0)| ≤ eps · max |∇f(0)ᵢ|; or
``max_rounds`` with a :class:`~distsvm.errors.ConvergenceWarning`.  The
Euclidean norm of the D′ᵢ(0) of the round, relative to ‖∇f(0)‖, is logged too.

Worker faults: the solver state (w, the residual vectors) lives in the workers'
memory and is not rebuilt; when a worker whose tasks a round waits on leaves the
cluster, the job fails within seconds with a :class:`~distsvm.errors.ClusterError`
(:func:`distsvm.cluster.gather` watches every worker of the round), never waiting
on a task pinned to the departed one.
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
LOSSES = ("squared_hinge", "logistic")


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

    With ``checkpoint`` (exact mode only: :mod:`distsvm.checkpoint`), every
    ``checkpoint.every`` rounds the worker writes the state (w, b, f) and the coordinator
    the history, and a run continues from its latest checkpoint; the round orders derive
    from (seed, round), so a resumed run reaches the same w.
    """
    progress = progress or Progress(quiet=True)
    if checkpoint is not None and mode != "exact":
        progress.note("pcd: parallel mode writes no checkpoints; this run cannot be resumed")
        checkpoint = None
    code = losses.code(loss)
    meta = dataset.meta
    cmeta = read_columns_meta(dataset)
    dim = meta.n_features + (1 if bias >= 0 else 0)
    n_items = len(cmeta.blocks) + (1 if bias >= 0 else 0)  # the bias is the last item
    addrs = plan.workers[:1] if mode == "exact" else plan.workers[:n_items]
    owners = [addrs[k % len(addrs)] for k in range(n_items)]
    run = uuid.uuid4().hex
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
    w = None
    r = 1

    def parallel_round(prev, r):
        parts = [client.submit(workers.pcd.part, prev, dataset.url, cmeta,
                               [k for k in range(n_items) if owners[k] == a], r, seed, run,
                               cache_bytes=plan.cache_bytes[a], workers=[a], pure=False,
                               **common)
                 for a in addrs]
        return client.submit(workers.pcd.combine, prev, parts, loss=code,
                             workers=addrs[:1], pure=False)

    if mode == "parallel":
        state = client.submit(workers.pcd.initial, dataset.url, cmeta, dim, code, class_cost,
                              row_infos, dataset.storage_options, workers=addrs[:1],
                              pure=False)
    ahead = None
    found = checkpoint.latest("pcd") if checkpoint is not None else None
    try:
        if found is not None:
            cluster.gather(client, [client.submit(
                workers.pcd.load_state, run, found.directory, found.files,
                checkpoint.storage_options, workers=addrs[:1], pure=False)], addrs[:1])
            r, history = found.round + 1, found.state["history"]
            g0, gnorm0, f = found.state["g0"], found.state["gnorm0"], found.state["f"]
            start -= found.state["seconds"]
            progress.note(f"resuming from the checkpoint of round {found.round} "
                          f"({found.directory})")
        while r <= max_rounds and not converged:
            if mode == "exact":  # the state stays on the worker: only reports come back
                every = checkpoint.every if checkpoint is not None else None
                batch = client.submit(
                    workers.pcd.exact_rounds, dataset.url, cmeta, r, max_rounds, seed, run,
                    eps=eps, g0=g0, seconds=BATCH_SECONDS,
                    stop_at=-(-r // every) * every if every else None,
                    cache_bytes=plan.cache_bytes[addrs[0]], workers=addrs[:1], pure=False,
                    **common)
                out = cluster.gather(client, [batch], addrs[:1])[0]
                reps, w = out["reports"], out["w"]
            else:  # round r + 1 is submitted before round r's report is read, hiding latency
                state = ahead or parallel_round(state, r)
                ahead = parallel_round(state, r + 1) if r < max_rounds else None
                reps = cluster.gather(client, [client.submit(  # waits on every worker's part
                    workers.pcd.reports, state, workers=addrs[:1], pure=False)], addrs)[0]
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
                saved = cluster.gather(client, [client.submit(
                    workers.pcd.save_state, run, checkpoint.directory(r - 1),
                    checkpoint.storage_options, workers=addrs[:1], pure=False)], addrs[:1])[0]
                checkpoint.save(r - 1, "pcd", {}, {
                    "history": history, "g0": g0, "gnorm0": gnorm0, "f": f,
                    "seconds": time.perf_counter() - start}, saved)
        if not converged:
            warnings.warn(f"pcd reached the round limit ({max_rounds}) before max|D'ᵢ(0)| fell "
                          f"to eps={eps:g} of its value at w = 0 ({history[-1]['max_grad']:.3g});"
                          " increase max_rounds or eps", ConvergenceWarning, stacklevel=2)
        if mode == "parallel":
            w = cluster.gather(client, [client.submit(workers.pcd.weights, state,
                                                      workers=addrs[:1], pure=False)],
                               addrs[:1])[0]
    finally:
        if ahead is not None:
            client.cancel(ahead)
        client.run(workers.blocks.drop_run, run)
    return Result(w=w, rounds=len(history), converged=converged, primal_objective=f,
                  dual_objective=np.nan, duality_gap=np.nan,
                  train_seconds=time.perf_counter() - start, history=history)

