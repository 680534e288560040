"""Worker-resident state (each block's α, or SVM-ALM's λ and e, on the worker that owns it,
:mod:`distsvm.workers.resident`): what the dual block solvers — DCD (:mod:`distsvm.solvers.dcd`) and
Crammer–Singer (:mod:`distsvm.solvers.crammer_singer`) — share: where the blocks are visited
(joined blocks) and the chained sequential round; and, with SVM-ALM too, writing and loading
the blocks' state for checkpoints.  Rolling it back after a worker loss is the round driver's ROLLBACK policy
(:mod:`distsvm.solvers.driver`).

The functions that submit tasks take the solver's per-block task (``save_blocks``,
``load_blocks``, ``segment``/``report`` of its :mod:`workers` module) and pass the run ids
through unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import distsvm.workers.dcd
from distsvm.storage import Dataset
from distsvm.storage.dataset import join_infos

from .. import cluster
from ..checkpoint import Checkpoint
from ..cluster import WorkerPlan


def hold(dataset: Dataset, plan: WorkerPlan, p) -> tuple[Dataset, WorkerPlan]:
    """The rows and plan every problem of a dual CD solver (the registry's ``joins``) trains
    on: :func:`held_by_one` sequentially, :func:`held_by_each` in a parallel mode, the store's
    own blocks with ``join_blocks=False``."""
    if not p.join_blocks:
        return dataset, plan
    return (held_by_one if p.parallel is None else held_by_each)(dataset, plan)


def held_by_one(dataset: Dataset, plan: WorkerPlan) -> tuple[Dataset, WorkerPlan]:
    """Every block on the worker with the largest cache: where that cache can hold the
    whole store, as one joined block (:func:`held_by_each`), so that each round of dual CD
    visits all rows in one random permutation, as LIBLINEAR does; else as they are, streamed
    through that worker, whose rounds revisit a cache of informative rows with every block
    (:func:`distsvm.workers.dcd.ovr_batch`).  Visiting the rows block by block without it, as the
    chained rounds over several owners do, stalls short of LIBLINEAR's stopping rule
    (docs/solvers/dcd.md, "Blocks and the stopping rule")."""
    if len(dataset.meta.blocks) <= 1:
        return dataset, plan
    a = max(plan.workers, key=lambda w: plan.free.get(w, plan.cache_bytes[w]))  # the first
    one = cluster.assign(plan, (a,) * len(plan.owners))  # of the largest
    view, joined = held_by_each(dataset, one)
    return (view, joined) if len(view.meta.blocks) == 1 else (dataset, one)


def held_by_each(dataset: Dataset, plan: WorkerPlan) -> tuple[Dataset, WorkerPlan]:
    """Parallel DCD: each worker's blocks as one joined block (:func:`storage.joined_block`),
    where its cache can hold them, so that its local passes visit its rows in one
    permutation rather than block by block (which stalls: docs/solvers/dcd.md, "Blocks and
    the stopping rule"); a worker whose blocks do not fit keeps them as they are."""
    infos, owners = [], []
    for a in plan.workers:
        mine = [dataset.meta.blocks[b] for b in plan.blocks_of(a)]
        joined = join_infos(mine) if len(mine) > 1 else None
        fits = joined is not None and plan.holds(a, cluster.block_bytes(
            dataclasses.replace(dataset.meta, blocks=(joined,))))
        for info in [joined] if fits else mine:
            infos.append(info)
            owners.append(a)
    if len(infos) == len(dataset.meta.blocks):
        return dataset, plan
    meta = dataclasses.replace(dataset.meta, blocks=tuple(infos))
    return (Dataset(dataset.url, meta, dataset.storage_options, dataset.block_ids),
            cluster.assign(plan, owners, cluster.block_sizes(meta)))


def spread(dataset: Dataset, plan: WorkerPlan) -> bool:
    """Whether the store is spread over several workers' memory, no one of which holds it
    all: each owner's cache holds its share of ``plan``, and none can hold the joined store
    (:func:`held_by_one`)."""
    if len(owners(plan)) < 2 or not plan.free:
        return False
    sizes = cluster.block_sizes(dataset.meta)
    if any(sum(sizes[b] for b in plan.blocks_of(a)) > plan.cache_bytes[a] for a in owners(plan)):
        return False
    return len(held_by_one(dataset, plan)[0].meta.blocks) > 1


def owners(plan: WorkerPlan) -> list[str]:
    """The workers of ``plan`` that own blocks."""
    return [a for a in plan.workers if plan.blocks_of(a)]


def held(ctx, runs) -> dict:
    """{worker: (``runs``, its blocks)} for each owner of blocks in ``ctx.plan``: who holds
    which blocks' state (``runs``: the run id, or {file prefix: run id}, the tasks take)."""
    meta, plan = ctx.dataset.meta, ctx.plan
    return {a: (runs, [meta.blocks[b] for b in plan.blocks_of(a)]) for a in owners(plan)}


def write(ctx, save_blocks, holders: dict, directory: str) -> dict:
    """Checkpoint: each worker of ``holders`` ({worker: (runs, infos)}) writes its blocks'
    state (``save_blocks(runs, infos, directory, storage_options)``) into ``directory``;
    {file: SHA-256} of what they wrote."""
    futures = [ctx.client.submit(save_blocks, runs, infos, directory,
                                 ctx.checkpoint.storage_options, workers=[a], pure=False)
               for a, (runs, infos) in holders.items()]
    ctx.pending = futures
    written = cluster.gather(ctx.client, futures, list(holders))
    return {k: v for part in written for k, v in part.items()}


def load(ctx, load_blocks, holders: dict, found: Checkpoint) -> None:
    """Resume: each worker of ``holders`` loads its blocks' state from checkpoint ``found``
    (``load_blocks(runs, infos, directory, digests, storage_options)``)."""
    ctx.pending = [ctx.client.submit(load_blocks, runs, infos, found.directory, found.files,
                                     ctx.checkpoint.storage_options, workers=[a], pure=False)
                   for a, (runs, infos) in holders.items()]
    cluster.gather(ctx.client, ctx.pending, list(holders))


def segments(order: list[int], owners: tuple[str, ...]) -> list[tuple[str, list[int]]]:
    """Split a round's block order into runs of consecutive blocks with the same owner;
    each run is one task, so a worker that owns every block does a round in one task."""
    out: list[tuple[str, list[int]]] = []
    for b in order:
        if out and out[-1][0] == owners[b]:
            out[-1][1].append(b)
        else:
            out.append((owners[b], [b]))
    return out


def chained_round(ctx, tasks, w, order: list[int], r: int, seed: int, *,
                  segment_kw: dict, report_kw: dict) -> tuple[np.ndarray, list[dict]]:
    """Round r of sequential block minimization over the blocks in ``order`` from ``w``
    (dual CD, Crammer–Singer): one ``tasks.segment`` per run of consecutive blocks with the
    same owner (:func:`segments`), chained so that w goes from task to task and never
    through the coordinator, the last one reporting on its owner's blocks and
    ``tasks.report`` on every other owner's, all at the round's final w; block b's seed is
    :func:`distsvm.workers.dcd.block_seed` of (``seed``, r, b).  Returns (w, the owners' reports)."""
    meta, plan, client = ctx.dataset.meta, ctx.plan, ctx.client
    parts, prev, futures = segments(order, plan.owners), w, []
    ctx.pending = futures
    for k, (a, blocks) in enumerate(parts):
        last = k == len(parts) - 1
        prev = client.submit(
            tasks.segment, prev, ctx.dataset.url, [meta.blocks[b] for b in blocks],
            [distsvm.workers.dcd.block_seed(seed, r, b) for b in blocks], ctx.run,
            report_infos=[meta.blocks[b] for b in plan.blocks_of(a)] if last else None,
            cache_bytes=plan.cache_bytes[a], tag=r, workers=[a], pure=False, **segment_kw)
        futures.append(prev)
    last_owner = parts[-1][0]
    futures += [client.submit(tasks.report, prev, ctx.dataset.url,
                              [meta.blocks[b] for b in plan.blocks_of(a)], ctx.run,
                              cache_bytes=plan.cache_bytes[a], workers=[a], pure=False,
                              **report_kw)
                for a in owners(plan) if a != last_owner]
    (w, own), *rest = cluster.gather(client, [prev] + futures[len(parts):], owners(plan))
    return w, [own] + rest
