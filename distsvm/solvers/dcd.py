"""Dual coordinate descent by block minimization over a row-blocked store.

Problem: LIBLINEAR's ``min_w ½wᵀw + C Σᵢ ξ(w; xᵢ, yᵢ)`` with the L1 (hinge,
``-s 3``) or L2 (squared hinge, ``-s 1``) loss, solved through its dual (4) of
Hsieh et al. 2008 (ICML), Algorithm 1 with the random permutation of §3.1 and
the shrinking of §3.2.  Kernel: :mod:`workers.kernels.dcd`.  With the logistic
loss (``-s 7``) the same coordinator runs the dual CD of Yu, Huang & Lin 2011 on
each block (:mod:`workers.kernels.dcd_lr`: no shrinking, stopping on max |g′| < eps,
sequential mode only).

Distribution (what differs from the paper): the rows are split into blocks
held by workers, and every round visits all blocks in a fresh random order
(the block minimization of Yu, Hsieh, Chang & Lin, KDD 2010, "Large linear
classification when data cannot fit in memory"), running ``inner_passes`` DCD
outer iterations on the block with ``w`` carried from block to block.  With
one block and one inner pass a round is exactly one LIBLINEAR outer
iteration.  Each block's α and shrinking state stay on the worker that owns
the block; only ``w`` moves, from task to task, never through the coordinator
inside a round.  The choice left open by Yu et al. — how long to work on a
block per visit — is one pass by default, so shrinking and the stopping rule
see every row once per round as in LIBLINEAR.

Visiting rows block by block stalls short of LIBLINEAR's stopping rule (docs/solvers/dcd.md,
"Blocks and the stopping rule"), so a store one worker's cache can hold is solved as one
joined block (:func:`distsvm.solvers.resident.held_by_one`), and a single owner runs its
rounds itself (:func:`solve_ovr` with one problem, :func:`workers.dcd.ovr_batch`), where
several streamed blocks each problem revisits a cache of informative rows with every block
(:func:`workers.dcd._visit_cached`); what follows describes the chained path of a store
spread over several workers.

Shrinking (§3.2) is global, as in LIBLINEAR: the thresholds M̄, m̄ of (16) are
the extremes of the projected gradients over the previous round's visits of
all blocks, and when the shrunken problem meets (17) every block reactivates
all its rows.  (Per-block thresholds would shrink more aggressively than
LIBLINEAR: a block's own extremes lie inside the global ones.)  A block whose
rows are all shrunk is not read until then (:func:`workers.dcd.segment`); its
loss is the one last measured, so a round with such blocks (``stale_blocks``)
has an inexact primal objective and cannot stop on the gap certificate.

Parallel DCD (``parallel="average"`` or ``"add"``): instead of passing ``w``
from block to block, every round the coordinator sends ``w`` with the task of
each of the K workers that own blocks (not ``client.scatter(broadcast=True)``:
with distributed 2026.8, replicating to a worker that had just been killed
retried its address every 30 s and the scatter did not return); each runs
``inner_passes`` DCD passes (Hsieh et al. 2008, Algorithm 1) over its own
blocks from that ``w`` with its α in its memory and returns only Δw and the
statistics of its blocks at the broadcast ``w``; the coordinator sets
``w += γ Σₖ Δwₖ``.  This is CoCoA (Jaggi, Smith, Takáč, Terhorst, Krishnan,
Hofmann & Jordan, NIPS 2014, "Communication-efficient distributed dual
coordinate ascent", Algorithm 1, with
``LocalDualMethod`` = H passes of DCD) for "average", γ = 1/K, and CoCoA+
(Ma, Smith, Jaggi, Jordan, Richtárik & Takáč, ICML 2015, "Adding vs.
averaging in distributed primal-dual optimization", Algorithm 1) for "add",
γ = 1 with the local subproblem's quadratic term scaled by σ′ = γK = K (the
safe choice they recommend), which :func:`workers.kernels.dcd.dcd_passes` solves with Q̄ᵢᵢ = σ′‖xᵢ‖² + Dᵢᵢ.
Each worker moves its α by γΔα, so w = Σ αᵢyᵢxᵢ holds after every round and
the dual objective is exact.  What differs from the papers: their
objective is λ/2‖w‖² + 1/n Σ loss (we use LIBLINEAR's ½‖w‖² + C Σ loss, an
equivalent scaling); a "machine" is a worker with several row blocks, the
passes visit its blocks in a random order with a random permutation inside
each; shrinking (§3.2) works inside a round only (every round starts with all
rows active: the thresholds of (16) go stale when w moves by the other
workers' updates, and every block is read each round anyway for the
statistics at the broadcast w); and the round's primal, dual, gap and projected gradients
are those of the broadcast ``w``, measured in the same task, so stopping on
them returns that ``w`` and discards the round's last local updates.

Worker faults: a block's α lives only in its owner's memory, so when an owner
leaves the cluster (killed, or restarted by its nanny) α of its blocks is lost.
:func:`distsvm.cluster.gather` notices within two seconds instead of waiting on
tasks pinned to the departed address, and the coordinator then
(:func:`distsvm.solvers.resident.recover`, shared with the Crammer–Singer solver)
cancels the round's tasks and waits for the survivors' running ones to end;
gives the lost blocks to the surviving workers of the job, round-robin (a
worker that joins later, such as the nanny's replacement, is not used); sets
the lost blocks' α to 0 — a feasible dual point, the start of the
"resetting those blocks" option of the issue — and rolls every surviving
block's α back to the start of the round (each visit keeps a copy of the α it
found at its block's first change in a round, :func:`workers.dcd.restore`);
sums w = Σ_b X_bᵀ(α_b∘y_b) of (13) from the survivors' blocks, one task per
survivor; and runs the round again, with the same block order and seeds, from
that w (the parallel modes with γ and σ′ for the new K).  So w = Σ αᵢyᵢxᵢ holds
again, the dual objective stays exact and the gap stays a certificate; what is
lost is the progress on the lost blocks' dual variables.  Rolling back to the
round's start, rather than keeping whatever the interrupted round's tasks had
done, makes the result depend only on the round in which the loss is noticed
and on which worker left, not on timing inside the round.  Only when no
worker of the job is left does the job fail, with ClusterError.  In the
sequential mode each round starts from the gathered w rather than from the
previous round's last task: a loss between rounds must not make Dask re-run a
stateful task of an earlier round to recompute its lost result.  One-vs-rest
(:func:`solve_ovr`) keeps each problem's state on one worker and recovers differently:
the lost worker's problems restart elsewhere from the latest checkpoint or from α = 0.

Checkpoints (:mod:`distsvm.checkpoint`, for ``distsvm resume``): every k rounds each
owner writes the state of its blocks (α, and in the sequential mode the shrinking state
and last statistics) straight into the checkpoint's directory, and the coordinator then
commits w (O(n_features)), the shrinking thresholds (16) and the history.  A resumed run
loads them and takes the same choices as an uninterrupted one (the block orders and the
blocks' seeds derive from (seed, round), :func:`workers.dcd.block_order` and
:func:`workers.dcd.block_seed`), so it reaches the same w.  One-vs-rest
(:func:`solve_ovr`) checkpoints every problem still running — each problem's worker
writes its block states, one file per problem and block (``class<k>-block-<name>.npz``)
— and the coordinator commits W and each problem's thresholds, stopping flags and
history.

Stopping: LIBLINEAR's rule (17): the spread of projected gradients over a
round whose passes covered every row, max PG − min PG ≤ eps; or, with
``gap_tol`` > 0, a duality gap ≤ gap_tol·P(w), which bounds P(w) − P* by the
same amount (the certificate LIBLINEAR does not offer); or ``max_rounds``
with a :class:`~distsvm.errors.ConvergenceWarning`.  Each round also reports
the primal and dual objectives and the duality gap, which certifies the
solution's quality independently of the stopping rule.
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np

import workers.blocks
import workers.dcd
from storage import Dataset
from workers import losses

from .. import cluster
from ..checkpoint import Checkpoint, Checkpointer
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress
from . import ovr, resident
from .driver import Result
from .ovr import Tagged

BATCH_SECONDS = 0.5  # one-vs-rest: rounds one task may run before it reports
PARALLEL_GAP = 1e-3  # the parallel modes' default stop: duality gap / primal objective
BATCHED = "dcd-batched"  # the checkpoints of solve_ovr (its state differs from solve's)


def _segments(order: list[int], owners: tuple[str, ...]) -> list[tuple[str, list[int]]]:
    """Split a round's block order into runs of consecutive blocks with the same owner;
    each run is one task, so a worker that owns every block does a round in one task."""
    out: list[tuple[str, list[int]]] = []
    for b in order:
        if out and out[-1][0] == owners[b]:
            out[-1][1].append(b)
        else:
            out.append((owners[b], [b]))
    return out


def _round(r: int, reports: list[dict], n_rows: int, start: float) -> dict:
    """A round's log row (:func:`workers.dcd.round_row`) with the seconds so far."""
    return {**workers.dcd.round_row(r, reports, n_rows), "seconds": time.perf_counter() - start}


def _sequential_round(client, dataset: Dataset, plan: WorkerPlan, w, order: list[int], r: int,
                      seed: int, run: str, progress: Progress, tasks, *, segment_kw: dict,
                      report_kw: dict, restore_kw: dict, after_loss: dict):
    """Round ``r`` of sequential block minimization over the blocks in ``order``, from ``w``.

    ``tasks`` is the solver's per-block task module (:mod:`workers.dcd`,
    :mod:`workers.crammer_singer`): one ``tasks.segment`` per run of consecutive blocks with
    the same owner (:func:`_segments`), chained so that w goes from task to task, the last
    one reporting on its owner's blocks and ``tasks.report`` on every other owner's, all at
    the round's final w.  When a worker leaves, :func:`resident.recover` (with
    ``tasks.restore`` and ``restore_kw``) rolls the survivors back and rebuilds w, and the
    round runs again with ``after_loss`` added to the segments' parameters.  Returns
    (plan, w, the owners' reports, whether a worker was lost)."""
    meta = dataset.meta
    lost_any = False
    while True:
        segments, owners = _segments(order, plan.owners), resident.owners(plan)
        prev, futures = w, []
        try:
            for k, (a, blocks) in enumerate(segments):
                last = k == len(segments) - 1
                prev = client.submit(
                    tasks.segment, prev, dataset.url, [meta.blocks[b] for b in blocks],
                    [workers.dcd.block_seed(seed, r, b) for b in blocks], run,
                    report_infos=[meta.blocks[b] for b in plan.blocks_of(a)] if last else None,
                    cache_bytes=plan.cache_bytes[a], tag=r, workers=[a], pure=False,
                    **segment_kw)
                futures.append(prev)
            last_owner = segments[-1][0]
            futures += [client.submit(tasks.report, prev, dataset.url,
                                      [meta.blocks[b] for b in plan.blocks_of(a)], run,
                                      cache_bytes=plan.cache_bytes[a], workers=[a], pure=False,
                                      **report_kw)
                        for a in owners if a != last_owner]
            (w, own), *rest = cluster.gather(client, [prev] + futures[len(segments):], owners)
            return plan, w, [own] + rest, lost_any
        except cluster.WorkerLost as lost:
            plan, w = resident.recover(client, dataset, plan, lost.gone, futures, r, progress,
                                       tasks.restore, run, **restore_kw)
            segment_kw, lost_any = {**segment_kw, **after_loss}, True


def _problem(loss: str, C: float, bias: float, meta, class_cost=None):
    """What the coordinators derive from the parameters: the loss code, the dimension of w
    and C per class index (``class_cost`` if given, with the class weights, else C)."""
    code = losses.code(loss)
    dim = meta.n_features + (1 if bias >= 0 else 0)
    cost = np.full(len(meta.classes), C) if class_cost is None else \
        np.asarray(class_cost, dtype=np.float64)
    return code, dim, cost


def _round_limit(max_rounds: int, pg: float, eps: float, stacklevel: int = 3) -> None:
    msg = (f"dcd reached the round limit ({max_rounds}) before the projected-gradient "
           f"violation {pg:.3g} fell to eps={eps:g}; increase max_rounds or eps")
    warnings.warn(msg, ConvergenceWarning, stacklevel=stacklevel)


def _result(w: np.ndarray, history: list[dict], converged: bool, start: float) -> Result:
    last = history[-1]
    return Result(w=w, rounds=len(history), converged=converged, primal_objective=last["primal"],
                  dual_objective=last["dual"], duality_gap=last["gap"],
                  train_seconds=time.perf_counter() - start, history=history)


def solve(client, dataset: Dataset, plan: WorkerPlan, *, loss: str, C: float, eps: float,
          bias: float, max_rounds: int, seed: int, inner_passes: int = 1, gap_tol: float = 0.0,
          parallel: str | None = None, progress: Progress | None = None,
          checkpoint: Checkpointer | None = None, positive: int = 1,
          class_cost=None) -> Result:
    """Train by block-wise DCD on the cluster behind ``client``; see the module docstring.
    ``positive`` is the class index whose rows have yᵢ = +1 (the others −1): the binary
    problem of one class against the rest (one-vs-rest, :mod:`distsvm.solvers.ovr`).
    ``class_cost`` (C per class index, with the class weights; default C for every class)
    and the store's instance weights give each row its Cᵢ (:func:`workers.blocks.row_costs`).

    With ``checkpoint``, the run continues from its latest checkpoint if there is one, and
    writes one every ``checkpoint.every`` rounds (see "Checkpoints" in the module docstring).
    """
    progress = progress or Progress(quiet=True)
    if parallel is None and len(resident.owners(plan)) == 1:  # its rounds on its worker
        return solve_ovr(client, dataset, plan, loss=loss, C=C, eps=eps, bias=bias,
                         max_rounds=max_rounds, seed=seed, inner_passes=inner_passes,
                         gap_tol=gap_tol, progress=progress, checkpoint=checkpoint,
                         class_cost=class_cost, positive=positive)[0]
    if parallel is not None:
        return _solve_parallel(client, dataset, plan, loss=loss, C=C, eps=eps, bias=bias,
                               max_rounds=max_rounds, seed=seed, inner_passes=inner_passes,
                               gap_tol=gap_tol, parallel=parallel, progress=progress,
                               checkpoint=checkpoint, positive=positive,
                               class_cost=class_cost)
    meta = dataset.meta
    code, dim, class_cost = _problem(loss, C, bias, meta, class_cost)
    run = uuid.uuid4().hex
    prev = np.zeros(dim)
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    common = dict(bias=bias, n_features=meta.n_features, loss=code, positive=positive,
                  class_cost=class_cost, storage_options=dataset.storage_options)
    shrink = None  # (M̄, m̄) of (16) from the previous round over all blocks; None: unshrink
    first = 1
    try:
        resumed = resident.resume(client, checkpoint, dataset, plan, "dcd",
                                   workers.dcd.load_blocks, {"": run}, None, progress)
        if resumed is not None:
            prev, first = resumed.arrays["w"], resumed.round + 1
            history, shrink = resumed.state["history"], resumed.state["shrink"]
            start -= resumed.state["seconds"]
        for r in range(first, max_rounds + 1):
            order = workers.dcd.block_order(seed, r, len(meta.blocks))
            plan, w, reports, _ = _sequential_round(
                client, dataset, plan, prev, order, r, seed, run, progress, workers.dcd,
                segment_kw=dict(eps=eps, n_passes=inner_passes, shrink=shrink, **common),
                report_kw=common, restore_kw=dict(bias=bias, n_features=meta.n_features,
                                                  positive=positive),
                after_loss={"shrink": None})
            prev = w  # the next round starts from the gathered w, not from a future: a
            # worker lost between rounds then cannot make Dask re-run an old segment
            row = _round(r, reports, meta.n_rows, start)
            row["stale_blocks"] = sum(p["stale"] for p in reports)  # skipped: loss not exact
            history.append(row)
            progress.round(row)
            pg = row["pg_violation"]
            converged, shrink = workers.dcd.stopping(
                row, reports, eps, workers.dcd.certified(row, gap_tol) and not row["stale_blocks"])
            if converged:
                break
            if checkpoint is not None and checkpoint.due(r) and r < max_rounds:
                resident.save(client, checkpoint, dataset, plan, r, "dcd",
                              workers.dcd.save_blocks, {"": run}, w=w, rng=None, start=start,
                              progress=progress, history=history, shrink=shrink)
        else:
            _round_limit(max_rounds, pg, eps)
    finally:
        client.run(workers.blocks.drop_run, run)
    return _result(w, history, converged, start)


def _solve_parallel(client, dataset: Dataset, plan: WorkerPlan, *, loss: str, C: float,
                    eps: float, bias: float, max_rounds: int, seed: int, inner_passes: int,
                    gap_tol: float, parallel: str, progress: Progress,
                    checkpoint: Checkpointer | None, positive: int, class_cost) -> Result:
    """Parallel DCD, CoCoA (``average``) or CoCoA+ (``add``); see the module docstring.
    Without ``gap_tol`` it stops on (17) or a duality gap of ``PARALLEL_GAP`` relative: the
    projected gradients at the broadcast w rarely meet (17) (a9a, K = 2: their spread stays
    near 5 for 1000 rounds with the hinge loss), the gap certificate does."""
    gap_tol = gap_tol or PARALLEL_GAP
    meta = dataset.meta
    code, dim, class_cost = _problem(loss, C, bias, meta, class_cost)
    run = uuid.uuid4().hex
    w = np.zeros(dim)
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    common = dict(bias=bias, n_features=meta.n_features, loss=code,
                  positive=positive, class_cost=class_cost, eps=eps, n_passes=inner_passes,
                  storage_options=dataset.storage_options)
    first = 1
    try:
        resumed = resident.resume(client, checkpoint, dataset, plan, "dcd",
                                   workers.dcd.load_blocks, {"": run}, None, progress)
        if resumed is not None:
            w, first = resumed.arrays["w"], resumed.round + 1
            history = resumed.state["history"]
            start -= resumed.state["seconds"]
        for r in range(first, max_rounds + 1):
            order = workers.dcd.block_order(seed, r, len(meta.blocks))
            while True:
                owners = resident.owners(plan)
                K = len(owners)
                gamma, sigma = (1.0 / K, 1.0) if parallel == "average" else (1.0, float(K))
                futures = []
                try:
                    for a in owners:
                        mine = [b for b in order if plan.owners[b] == a]
                        futures.append(client.submit(
                            workers.dcd.local_round, w, dataset.url,
                            [meta.blocks[b] for b in mine],
                            [workers.dcd.block_seed(seed, r, b) for b in mine],
                            run, gamma=gamma, sigma=sigma, cache_bytes=plan.cache_bytes[a],
                            tag=r, workers=[a], pure=False, **common))
                    results = cluster.gather(client, futures, owners)
                    break
                except cluster.WorkerLost as lost:
                    plan, w = resident.recover(
                        client, dataset, plan, lost.gone, futures, r, progress,
                        workers.dcd.restore, run, bias=bias, n_features=meta.n_features,
                        positive=positive)
            row = _round(r, [rep for _, rep in results], meta.n_rows, start)
            history.append(row)
            progress.round(row)
            pg = row["pg_violation"]
            if pg <= eps or workers.dcd.certified(row, gap_tol):
                converged = True  # (17) at the broadcast w, or certified by the gap: keep it
                break
            if r < max_rounds:  # else return the w whose objectives were measured
                w = w + gamma * np.sum([dw for dw, _ in results], axis=0)
                if checkpoint is not None and checkpoint.due(r):
                    resident.save(client, checkpoint, dataset, plan, r, "dcd",
                                  workers.dcd.save_blocks, {"": run}, w=w, rng=None, start=start,
                                  progress=progress, history=history)
        else:
            _round_limit(max_rounds, pg, eps, stacklevel=4)
    finally:
        client.run(workers.blocks.drop_run, run)
    return _result(w, history, converged, start)


def solve_ovr(client, dataset: Dataset, plan: WorkerPlan, *, loss: str, C: float, eps: float,
              bias: float, max_rounds: int, seed: int, inner_passes: int = 1,
              gap_tol: float = 0.0, progress: Progress | None = None,
              checkpoint: Checkpointer | None = None, class_cost=None,
              positive: int | None = None) -> list[Result]:
    """One-vs-rest for K classes by sequential DCD: the problems dealt to the workers, each
    worker running its problems' rounds over the whole store in batches.  With
    ``positive``, the one binary problem of that class index against the rest instead
    (:func:`solve` on a plan whose blocks one worker holds: its rounds then run on that
    worker, next to its blocks, with no task and no primal pass per round).

    Problem k (class k against the rest) goes to slot k mod (number of slots), a slot being
    one thread of one worker of the plan (``plan.threads``; Dask runs a worker's slots side
    by side, the kernels releasing the GIL).  The slot's worker keeps its α and shrinking
    state for every block, and the slot's task runs its rounds
    (:func:`workers.dcd.ovr_batch`): every round visits all blocks of the store in the
    round's order, the slot's problems at the same round sharing each block read (from the
    worker's block cache, or streamed from the store), and the stopping rule (17), or the gap
    certificate, is tested on the worker after each round.  A task runs rounds until its
    problems have stopped or for ``BATCH_SECONDS`` (or to a round at which a checkpoint is
    due), and returns its W rows and each round's log row; the primal objective (a pass
    over the rows) is measured for a problem's last round only (every round with
    ``gap_tol``, whose stopping test needs it).  So a round costs
    no task, no transfer of W and no pass to measure the primal: the workers run
    LIBLINEAR's solver side by side, and each problem's path is that of its binary run
    (:func:`solve` with ``positive=k``: the same block orders and seeds, functions of (seed,
    round)).  Returns the K problems' results in class order.  With ``class_cost`` (C per
    class with its weight), problem k's rows of class k cost their weighted C and the others
    C, as LIBLINEAR's one-vs-rest (:func:`distsvm.solvers.ovr.problem_cost`).

    A lost worker loses its problems' state: the running ones restart on the other workers'
    slots (round-robin, fresh run ids) from the run's latest checkpoint if it has one
    (their block states loaded by their first batch), else from α = 0, and take again the
    path they had taken, so W ends as without the fault; the other workers' batches are
    kept.  With ``checkpoint``, the run continues from its latest checkpoint and writes one
    each time the furthest problem passes a multiple of ``checkpoint.every`` rounds: each
    worker writes the block states of its running problems (files
    ``class<k>-block-<name>.npz``), and the coordinator commits W and each problem's
    thresholds, stopping flags and history (a row per round done).
    """
    progress = progress or Progress(quiet=True)
    meta = dataset.meta
    positives = list(range(len(meta.classes))) if positive is None else [positive]
    K = len(positives)
    code, dim, class_cost = _problem(loss, C, bias, meta, class_cost)
    costs = [class_cost] if positive is not None else \
        [ovr.problem_cost(class_cost, C, k) for k in range(K)]
    runs = [uuid.uuid4().hex for _ in range(K)]
    used = list(runs)  # every run id, to drop at the end
    prefixes = [f"class{k}-" for k in range(K)]  # of the problems' files in a checkpoint

    def slots() -> list[tuple[str, int]]:
        """(worker, thread): each thread of each worker runs a group of problems, the
        blocks' owners first (a binary problem runs next to its blocks)."""
        owners = resident.owners(plan)
        return [(a, t) for a in owners + [a for a in plan.workers if a not in owners]
                for t in range(plan.threads.get(a, 1))]

    where = [slots()[k % len(slots())] for k in range(K)]  # problem k's slot
    W = np.zeros((K, dim))
    histories: list[list[dict]] = [[] for _ in range(K)]
    shrink, done, converged = [None] * K, [False] * K, [False] * K
    tagged = [progress] if positive is not None else \
        [Tagged(progress, f"{c:g}") for c in meta.classes]
    start = time.perf_counter()
    infos = list(meta.blocks)
    every = checkpoint.every if checkpoint is not None else None
    common = dict(seed=seed, n_rows=meta.n_rows, max_rounds=max_rounds, every=every,
                  seconds=BATCH_SECONDS, eps=eps, gap_tol=gap_tol, n_passes=inner_passes,
                  bias=bias, n_features=meta.n_features, loss=code,
                  informative=workers.dcd.cache_rows(infos, code, min(plan.cache_bytes.values()),
                                                     K),
                  storage_options=dataset.storage_options)

    def held(ks) -> dict:
        """{worker: ({file prefix: run id} of its problems among ``ks``, all blocks)}."""
        return {a: ({prefixes[k]: runs[k] for k in ks if where[k][0] == a}, infos)
                for a in plan.workers if any(where[k][0] == a for k in ks)}

    saved = 0
    try:
        resumed = resident.resume(client, checkpoint, dataset, plan, BATCHED,
                                  workers.dcd.load_blocks, None, None, progress,
                                  held=held(range(K)))
        if resumed is not None:
            W, saved = resumed.arrays["w"], resumed.round
            histories = resumed.state["histories"]
            shrink, done = resumed.state["shrink"], resumed.state["done"]
            converged = resumed.state["converged"]
            start -= resumed.state["seconds"]
        reload: dict[int, Checkpoint] = {}  # problems to load from a checkpoint

        def from_checkpoint(g: list[int]) -> dict | None:
            """What ``ovr_batch`` loads first for the group ``g``: its problems in ``reload``."""
            ks = [k for k in g if k in reload]
            if not ks:
                return None
            found = reload[ks[0]]
            return {"runs": {prefixes[k]: runs[k] for k in ks}, "directory": found.directory,
                    "files": found.files, "storage_options": checkpoint.storage_options}

        while not all(done):
            groups = {slot: [k for k in range(K) if where[k] == slot and not done[k]]
                      for slot in slots()}
            futures = {(a, t): client.submit(
                workers.dcd.ovr_batch, W[g], dataset.url, infos, [runs[k] for k in g],
                [positives[k] for k in g],
                [costs[k] for k in g], [len(histories[k]) for k in g], [shrink[k] for k in g],
                from_checkpoint=from_checkpoint(g), cache_bytes=plan.cache_bytes[a], workers=[a],
                pure=False, **common)
                for (a, t), g in groups.items() if g}
            gone = []
            for (a, t), future in futures.items():
                try:
                    Wg, outcomes = cluster.gather(client, [future], [a])[0]
                except cluster.WorkerLost:
                    gone += [] if a in gone else [a]
                    continue
                received = time.perf_counter() - start
                last = max(row["at"] for o in outcomes for row in o["rows"])
                W[groups[a, t]] = Wg
                for k in groups[a, t]:
                    reload.pop(k, None)
                for k, o in zip(groups[a, t], outcomes):
                    for row in o["rows"]:  # its time: when the task had done it
                        row["seconds"] = received - (last - row.pop("at"))
                        histories[k].append(row)
                        tagged[k].round(row)
                    shrink[k], done[k], converged[k] = o["shrink"], o["done"], o["converged"]
                    if done[k] and not converged[k]:
                        _round_limit(max_rounds, o["rows"][-1]["pg_violation"], eps)
            if gone:
                plan = cluster.replan(plan, gone)  # ClusterError when none is left
                lost = [k for (a, _), g in groups.items() if a in gone for k in g
                        if not done[k]]
                # a problem running now was running at every checkpoint of this run
                found = checkpoint.latest(BATCHED) if saved else None
                left = slots()
                for i, k in enumerate(lost):
                    runs[k] = uuid.uuid4().hex
                    used.append(runs[k])
                    where[k] = left[i % len(left)]
                    if found is None:
                        W[k], histories[k], shrink[k] = 0.0, [], None
                    else:
                        reload[k] = found
                        W[k] = found.arrays["w"][k]
                        histories[k], shrink[k] = (found.state[key][k]
                                                   for key in ("histories", "shrink"))
                since = "alpha = 0" if found is None else \
                    f"the checkpoint of round {found.round}"
                progress.note(f"worker {', '.join(gone)} left the cluster; the problems of "
                              f"class {', '.join(f'{meta.classes[positives[k]]:g}' for k in lost)}"
                              " "
                              f"restart from {since} on the other {len(plan.workers)} "
                              "worker(s)")
            elif every and not all(done) and \
                    max(map(len, histories)) // every > saved // every:
                saved = max(map(len, histories))
                live = [k for k in range(K) if not done[k]]
                resident.save(client, checkpoint, dataset, plan, saved, BATCHED,
                              workers.dcd.save_blocks, None, w=W, rng=None, start=start,
                              progress=progress, held=held(live), histories=histories,
                              shrink=shrink, done=done, converged=converged)
    finally:
        client.run(workers.blocks.drop_run, *used)
    return [_result(W[k], histories[k], converged[k], start) for k in range(K)]
