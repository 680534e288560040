"""Worker-resident dual state (each block's α on the worker that owns it,
:mod:`workers.resident`): what the coordinators of the dual block solvers — sequential and
parallel DCD (:mod:`distsvm.solvers.dcd`), Crammer–Singer
(:mod:`distsvm.solvers.crammer_singer`) — share to checkpoint it, resume from a checkpoint
and recover after a worker loss (see "Worker faults" and "Checkpoints" in
:mod:`distsvm.solvers.dcd`).

Each function takes the solver's per-block task (``save_blocks``, ``load_blocks`` or
``restore`` of its :mod:`workers` module) and ``run``, the run id (or ids) that task takes,
passed through unchanged.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from storage import Dataset
from storage.dataset import join_infos

from .. import cluster
from ..checkpoint import Checkpoint, Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress


def held_by_one(dataset: Dataset, plan: WorkerPlan) -> tuple[Dataset, WorkerPlan]:
    """Where one worker's block cache can hold the whole store: the store as one joined
    block (:func:`held_by_each` with every block on the worker with the largest cache), so
    that each round of dual CD visits all rows in one random permutation, as LIBLINEAR
    does; else ``(dataset, plan)`` unchanged.  Visiting the rows block by block instead
    stalls short of LIBLINEAR's stopping rule (docs/solvers/dcd.md, "Blocks and the
    stopping rule")."""
    if len(dataset.meta.blocks) <= 1:
        return dataset, plan
    a = max(plan.workers, key=lambda w: plan.cache_bytes[w])  # the first of the largest
    view, one = held_by_each(dataset, dataclasses.replace(plan, owners=(a,) * len(plan.owners)))
    return (view, one) if len(view.meta.blocks) == 1 else (dataset, plan)


def held_by_each(dataset: Dataset, plan: WorkerPlan) -> tuple[Dataset, WorkerPlan]:
    """Parallel DCD: each worker's blocks as one joined block (:func:`storage.joined_block`),
    where its cache can hold them, so that its local passes visit its rows in one
    permutation rather than block by block (which stalls: docs/solvers/dcd.md, "Blocks and
    the stopping rule"); a worker whose blocks do not fit keeps them as they are."""
    infos, owners = [], []
    for a in plan.workers:
        mine = [dataset.meta.blocks[b] for b in plan.blocks_of(a)]
        joined = join_infos(mine) if len(mine) > 1 else None
        fits = joined is not None and cluster.block_bytes(
            dataclasses.replace(dataset.meta, blocks=(joined,))) <= plan.cache_bytes[a]
        for info in [joined] if fits else mine:
            infos.append(info)
            owners.append(a)
    if len(infos) == len(dataset.meta.blocks):
        return dataset, plan
    meta = dataclasses.replace(dataset.meta, blocks=tuple(infos))
    return (Dataset(dataset.url, meta, dataset.storage_options, dataset.block_ids),
            WorkerPlan(tuple(owners), plan.cache_bytes, plan.threads))


def owners(plan: WorkerPlan) -> list[str]:
    """The workers of ``plan`` that own blocks."""
    return [a for a in plan.workers if plan.blocks_of(a)]


def recover(client, dataset: Dataset, plan: WorkerPlan, gone: list[str], futures: list,
            r: int, progress: Progress, restore, run, **kw) -> tuple[WorkerPlan, np.ndarray]:
    """After workers ``gone`` left during round ``r``: the plan without them and the w to
    retry the round from.

    The round's ``futures`` are cancelled and the survivors' running ones waited for; the
    lost blocks go to the survivors (:func:`cluster.replan`) with α = 0; each survivor runs
    ``restore(url, infos, run, r, cache_bytes=…, storage_options=…, **kw)`` on the blocks it
    held, rolling their α back to the start of round r and returning their part of w, and w
    is the sum of the parts.  A loss during the recovery starts it again; ClusterError when
    no worker is left.
    """
    meta = dataset.meta
    while True:
        cluster.settle(client, futures, plan.workers)
        held = {a: [meta.blocks[b] for b in plan.blocks_of(a)] for a in plan.workers}
        n_lost = sum(a in gone for a in plan.owners)
        plan = cluster.replan(plan, gone)
        progress.note(f"round {r}: worker {', '.join(gone)} left the cluster; its "
                      f"{n_lost} blocks restart from alpha = 0 on the other "
                      f"{len(plan.workers)} worker(s), and round {r} is run again")
        futures = [client.submit(restore, dataset.url, held[a], run, r,
                                 cache_bytes=plan.cache_bytes[a],
                                 storage_options=dataset.storage_options, workers=[a],
                                 pure=False, **kw)
                   for a in plan.workers]
        try:
            return plan, np.sum(cluster.gather(client, futures, plan.workers), axis=0)
        except cluster.WorkerLost as again:
            gone = again.gone


def _held(dataset: Dataset, plan: WorkerPlan, run, held: dict | None) -> dict:
    """{worker: (run, its blocks)}: ``held``, or each owner's blocks in ``run``."""
    if held is not None:
        return held
    return {a: (run, [dataset.meta.blocks[b] for b in plan.blocks_of(a)]) for a in owners(plan)}


def save(client, checkpoint: Checkpointer, dataset: Dataset, plan: WorkerPlan, r: int,
         solver: str, save_blocks, run, *, w: np.ndarray, rng, start: float,
         progress: Progress, held: dict | None = None, **state) -> None:
    """Checkpoint the end of round ``r``: each owner writes its blocks' state
    (``save_blocks(run, infos, directory, storage_options)``; ``held`` ({worker: (run,
    infos)}) instead names who writes what), then the coordinator commits ``w``, the state
    of ``rng`` (the block orders; None: the solver draws them from (seed, round)), the
    seconds so far and ``state`` (JSON: the history, the stopping rule's state, …).  A
    worker lost meanwhile skips this checkpoint (the next round recovers from the loss)."""
    held = _held(dataset, plan, run, held)
    futures = [client.submit(save_blocks, which, infos, checkpoint.directory(r),
                             checkpoint.storage_options, workers=[a], pure=False)
               for a, (which, infos) in held.items()]
    try:
        written = cluster.gather(client, futures, list(held))
    except cluster.WorkerLost as lost:
        progress.note(f"round {r}: worker {', '.join(lost.gone)} left while checkpointing; "
                      "no checkpoint this round")
        return
    if rng is not None:
        state["rng"] = rng.bit_generator.state
    checkpoint.save(r, solver, {"w": w}, {"seconds": time.perf_counter() - start, **state},
                    {k: v for part in written for k, v in part.items()})


def resume(client, checkpoint: Checkpointer | None, dataset: Dataset, plan: WorkerPlan,
           solver: str, load_blocks, run, rng, progress: Progress,
           held: dict | None = None) -> Checkpoint | None:
    """The latest checkpoint of the run, its blocks' state loaded on their owners
    (``load_blocks(run, infos, directory, digests, storage_options)``; ``held`` as for
    :func:`save`) and ``rng`` (if not None) set to its state; None (a fresh start) without
    one."""
    found = checkpoint.latest(solver) if checkpoint is not None else None
    if found is None:
        return None
    held = _held(dataset, plan, run, held)
    cluster.gather(client, [client.submit(load_blocks, which, infos, found.directory,
                                          found.files, checkpoint.storage_options,
                                          workers=[a], pure=False)
                            for a, (which, infos) in held.items()], list(held))
    if rng is not None:
        rng.bit_generator.state = found.state["rng"]
    progress.note(f"resuming from the checkpoint of round {found.round} ({found.directory})")
    return found
