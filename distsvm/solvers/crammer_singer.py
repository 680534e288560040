"""Crammer–Singer multi-class SVM (LIBLINEAR ``-s 4``) by the sequential dual method over
row blocks.

Problem and algorithm: Appendix E of the LIBLINEAR paper (Fan et al. 2008), after
Keerthi, Sundararajan, Chang, Hsieh & Lin (KDD 2008): the dual (15) of (14), one
row's K variables at a time by the exact sub-problem solver of E.3, with
LIBLINEAR's shrinking (E.5) and stopping rule (E.4); kernel
:mod:`workers.kernels.crammer_singer`, per-block tasks :mod:`workers.crammer_singer`.

Distribution, as sequential DCD (:mod:`distsvm.solvers.dcd`): each round visits all
blocks in a fresh random order, one pass over the active rows of each, with
W (K × n [+1]) carried from task to task and never through the coordinator inside
a round; a block's α and shrinking state stay on its owner.  The shrinking
tolerance and the stopping rule are LIBLINEAR's, applied to the round (one
LIBLINEAR outer iteration when the store has one block): with ``stopping`` the
largest ``max G − min G`` of the round's passes, if ``stopping < eps_shrink``
then the run stops when also ``stopping < eps`` on a round that started with every
row and class active, and otherwise every block reactivates everything next
round and ``eps_shrink ← max(eps_shrink/2, eps)``; ``eps_shrink`` starts at
max(10·eps, 1); or, with ``gap_tol``, on the duality gap.  Each round reports the
primal objective
½‖W‖² + C Σ ξᵢ, the dual −(½‖W‖² + Σ eᵢᵐαᵢᵐ) (the negated minimum of (15): a
lower bound of the primal optimum) and their gap.

Where one worker owns every block (the joined store by default), its rounds run on it in
batches (:func:`workers.crammer_singer.batch`): the same block orders (the generator's
state goes with the batch and comes back), seeds and decisions, so the same path, with no
task, no transfer of W and no primal pass per round (the primal is measured on a batch's
last round, every round with ``gap_tol``).  A round over one block is one LIBLINEAR
outer iteration over the active set; LIBLINEAR allows 100000 of them for ``-s 4``, the
default ``max_rounds`` of :func:`distsvm.jobs.train` here (news20 takes ~20,000).  When
the owner leaves during a batch, its blocks restart from α = 0 on a survivor and the
batch's rounds run again.

Worker faults and checkpoints, as sequential DCD (sections "Worker faults" and
"Checkpoints" of :mod:`distsvm.solvers.dcd`, through :mod:`distsvm.solvers.resident`):
when a worker leaves, the round's tasks are settled, its blocks go to the survivors with
α = 0 — feasible for (15): Σₘ αᵢᵐ = 0 and αᵢᵐ ≤ Cᵢᵐ hold — every surviving block's α goes
back to the start of the round (:func:`workers.crammer_singer.restore`), W = Σ_b X̂_bᵀα_b
is summed from the survivors, one task each, and the round runs again from it with the
same block order and seeds, every row and class active (the rolled-back blocks' shrinking
state is dropped, so that round counts as one started from all for the stopping rule).
So W = W(α) holds and the dual and the gap stay exact; only with no worker left does the
job fail with :class:`~distsvm.errors.ClusterError`.  Every ``checkpoint.every`` rounds
each owner writes its blocks' α and shrinking state (:func:`workers.crammer_singer.save_blocks`)
and the coordinator commits W, the RNG state of the block orders, ``eps_shrink``, the
stopping rule's state and the history; a resumed run goes on as an uninterrupted one.

Not done (unlike DCD): skipping blocks whose rows are all shrunk.
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np

import workers.blocks
import workers.crammer_singer
import workers.resident
from storage import Dataset

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress
from . import resident
from .dcd import BATCH_SECONDS, Result, _result, _sequential_round


def solve(client, dataset: Dataset, plan: WorkerPlan, *, C: float, eps: float, bias: float,
          max_rounds: int, seed: int, gap_tol: float = 0.0,
          progress: Progress | None = None, class_cost=None,
          checkpoint: Checkpointer | None = None) -> Result:
    """Train W (K × n [+1]) on the cluster behind ``client``; see the module docstring.
    ``class_cost`` (C per class index with its class weight; default C) and the store's
    instance weights give row i its bound Cᵢ (:func:`workers.blocks.row_costs`); the primal
    is then ½‖W‖² + Σ Cᵢξᵢ.
    ``gap_tol`` > 0 also stops once the duality gap is ≤ gap_tol·P(W), which bounds
    P(W) − P* by the same amount (LIBLINEAR's rule gives no such bound).
    With ``checkpoint``, the run continues from its latest checkpoint if there is one, and
    writes one every ``checkpoint.every`` rounds."""
    progress = progress or Progress(quiet=True)
    meta = dataset.meta
    K = len(meta.classes)
    dim = meta.n_features + (1 if bias >= 0 else 0)
    run = uuid.uuid4().hex
    rng = np.random.default_rng(seed)
    W = np.zeros((dim, K))  # feature-major on the workers, as LIBLINEAR's w
    class_cost = np.full(K, C) if class_cost is None else np.asarray(class_cost, np.float64)
    common = dict(class_cost=class_cost, bias=bias, n_features=meta.n_features,
                  storage_options=dataset.storage_options)
    restore_kw = dict(n_classes=K, bias=bias, n_features=meta.n_features)
    eps_shrink = max(10.0 * eps, 1.0)
    start_from_all, unshrink = True, True
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    first = 1
    stopping = np.inf
    try:
        resumed = resident.resume(client, checkpoint, dataset, plan, "crammer_singer",
                                  workers.resident.load_blocks, {"": run}, rng, progress)
        if resumed is not None:
            W, first, history = resumed.arrays["w"], resumed.round + 1, resumed.state["history"]
            eps_shrink = resumed.state["eps_shrink"]
            unshrink, start_from_all = resumed.state["unshrink"], resumed.state["start_from_all"]
            start -= resumed.state["seconds"]
        r = first
        while r <= max_rounds:
            owners = resident.owners(plan)
            if len(owners) == 1:  # its rounds on its worker, in batches
                shrink = {"eps_shrink": eps_shrink, "unshrink": unshrink,
                          "start_from_all": start_from_all}
                future = client.submit(
                    workers.crammer_singer.batch, W, dataset.url, list(meta.blocks), run,
                    first=r, rng_state=rng.bit_generator.state, seed=seed, n_rows=meta.n_rows,
                    max_rounds=max_rounds, every=checkpoint.every if checkpoint else None,
                    seconds=BATCH_SECONDS, eps=eps, gap_tol=gap_tol, shrink=shrink,
                    cache_bytes=plan.cache_bytes[owners[0]], workers=owners, pure=False,
                    **common)
                try:
                    W, out = cluster.gather(client, [future], owners)[0]
                except cluster.WorkerLost as lost:  # the batch's rounds run again from α = 0
                    plan, W = resident.recover(client, dataset, plan, lost.gone, [future], r,
                                               progress, workers.crammer_singer.restore, run,
                                               **restore_kw)
                    unshrink, start_from_all = True, True
                    continue
                received = time.perf_counter() - start
                for row in out["rows"]:  # its time: when the task had done it
                    row["seconds"] = received - (out["rows"][-1]["at"] - row.pop("at"))
                    history.append(row)
                    progress.round(row)
                rng.bit_generator.state = out["rng"]
                eps_shrink, unshrink, start_from_all = (
                    out["shrink"][k] for k in ("eps_shrink", "unshrink", "start_from_all"))
                converged, stopping, r = out["converged"], out["stopping"], history[-1]["round"]
            else:
                order = [int(b) for b in rng.permutation(len(meta.blocks))]
                plan, W, reports, lost = _sequential_round(
                    client, dataset, plan, W, order, r, seed, run, progress,
                    workers.crammer_singer, segment_kw=dict(unshrink=unshrink, **common),
                    report_kw=common, restore_kw=restore_kw, after_loss={"unshrink": True})
                if lost:  # restore dropped the shrinking state: the round started from all
                    start_from_all = True
                row = workers.crammer_singer.round_row(r, reports, meta.n_rows)
                row["seconds"] = time.perf_counter() - start
                history.append(row)
                progress.round(row)
                stopping = max(p["stopping"] for p in reports)
                converged, unshrink, start_from_all, eps_shrink = \
                    workers.crammer_singer.next_round(stopping, row, eps=eps, gap_tol=gap_tol,
                                                      eps_shrink=eps_shrink,
                                                      start_from_all=start_from_all)
            if converged:
                break
            if checkpoint is not None and checkpoint.due(r) and r < max_rounds:
                resident.save(client, checkpoint, dataset, plan, r, "crammer_singer",
                              workers.crammer_singer.save_blocks, {"": run}, w=W, rng=rng,
                              history=history, start=start, progress=progress,
                              eps_shrink=eps_shrink, unshrink=unshrink,
                              start_from_all=start_from_all)
            r += 1
        if not converged:
            warnings.warn(f"crammer_singer reached the round limit ({max_rounds}) before the "
                          f"stopping value {stopping:.3g} fell to eps={eps:g}; increase "
                          "max_rounds or eps", ConvergenceWarning, stacklevel=2)
    finally:
        client.run(workers.blocks.drop_run, run)
    return _result(np.ascontiguousarray(W.T), history, converged, start)
