"""Columnize: build a dataset's CSC column view (:mod:`distsvm.storage.columns`), on Dask or in-process.

:mod:`distsvm.storage.columns` is the view's format, its reader and the tasks that build it; this
module plans those tasks within a memory bound and runs them as one job.

Pass 1 counts every column's non-zeros, one task per row block; the column
blocks and the groups of them that fit the memory budget follow; each group is
one task that makes one more pass over the row blocks.  So a store takes
``1 + groups`` passes (two when the whole view fits the budget), and no task
holds more than ``memory_mb``: its group's buffers plus one row block.
"""

from __future__ import annotations

import time

import numpy as np

from distsvm.storage import Dataset
from distsvm.storage import columns as cols
from distsvm.storage import dataset as ds
from distsvm.storage.errors import IncompleteStoreError
from distsvm.storage.lock import DEFAULT_TIMEOUT, Lock

from .ingest import DEFAULT_BLOCK_MB, Runner
from .progress import Progress

DEFAULT_MEMORY_MB = 512.0


def ensure_columns(dataset: Dataset, client=None, progress: Progress | None = None,
                   lock_timeout: float | None = None) -> cols.ColumnsMeta:
    """The column view of ``dataset``, built now if the store has none (a plain ``ingest``'s
    store, or one appended to since): under the store's lock (another command building it
    meanwhile is waited for and its view taken), kept in the store for the next run, and
    said in one line.  What a solver that reads columns (-s 5, -s 6, pcd) calls first."""
    try:
        return cols.read_columns_meta(dataset)
    except IncompleteStoreError:
        pass
    with Lock(dataset.url, dataset.storage_options, what=dataset.url,
              timeout=DEFAULT_TIMEOUT if lock_timeout is None else lock_timeout,
              progress=progress):
        try:  # built by another command while this one waited
            return cols.read_columns_meta(dataset)
        except IncompleteStoreError:
            pass
        start = time.perf_counter()
        cmeta = columnize(dataset, client=client)
    (progress or Progress(quiet=True)).note(
        f"train: {dataset.url} had no column view (the solver reads the store by feature): "
        f"built it, {len(cmeta.blocks)} column blocks in {time.perf_counter() - start:.1f}s, "
        "kept in the store for the next run")
    return cmeta


def training_rows(dataset: Dataset, p) -> tuple[cols.ColumnsMeta, dict]:
    """What a solver over the column view (pcd, l1) reads to train on ``dataset``: the
    column view's metadata, and its tasks' keywords on the rows — ``row_infos``, the row
    blocks whose instance weights they read (a weighted store's, all of them, the view's row
    order), and ``holdout``, ``p``'s validation_fraction and seed, whose held-out rows cost 0
    (:func:`distsvm.workers.validation.row_costs`).  ``dataset`` is the store, or the
    training rows :func:`distsvm.anytime.holdout` leaves of it: the column view covers every
    row of the store, so the solver reads it whole and the held-out rows weigh nothing."""
    holdout = None if p.validation_fraction is None else (float(p.validation_fraction),
                                                          int(p.seed))
    stored = dataset
    if dataset.is_subset:
        if holdout is None:  # a fold: its solver is refused before (params.check_solver)
            raise ValueError(f"{dataset.url}: a view of some row blocks has no column view")
        stored = ds.open_dataset(dataset.url, dataset.storage_options)
    return cols.read_columns_meta(stored), {
        "row_infos": list(stored.meta.blocks) if stored.meta.weighted else None,
        "holdout": holdout}


def say_where(progress: Progress, p, plan, cmeta: cols.ColumnsMeta) -> None:
    """A solver over the column view in exact mode (-s 5/6, pcd) on several workers runs on
    the plan's first: say so, and whether its memory holds the view as one block
    (:func:`distsvm.workers.pcd.held`, the worker's own test on the same plan), as the job's
    first line counts every worker (jobs.train; the dual solvers' twin is
    jobs._say_where_held, here because no front end spells a solver's options)."""
    from distsvm.workers.pcd import held, view_bytes

    if p.pcd_mode != "exact" or len(plan.workers) < 2:
        return
    a, mb = plan.workers[0], view_bytes(cmeta) / 1e6
    others = (f"; --pcd-mode parallel shares the column blocks among the {len(plan.workers)} "
              "workers")
    if len(held(cmeta, plan.cache_bytes[a], plan.free.get(a)).blocks) <= 1:
        progress.note(f"train: {p.solver} on one worker ({a}), whose memory holds the column "
                      f"view ({mb:.0f} MB) as one block: each round visits every feature in "
                      "one random order, as LIBLINEAR does" + others)
        return
    progress.note(f"train: {p.solver} on one worker ({a}), the others idle: its memory does "
                  f"not hold the column view ({mb:.0f} MB) as one block (block cache "
                  f"{plan.cache_bytes[a] / 1e6:.0f} MB), so the view's {len(cmeta.blocks)} "
                  "blocks are read through it, each block's features in a random order of "
                  "their own (more rounds than one block)" + others)


def columnize(dataset: Dataset, *, memory_mb: float = DEFAULT_MEMORY_MB,
              block_mb: float = DEFAULT_BLOCK_MB, client=None,
              progress: Progress | None = None) -> cols.ColumnsMeta:
    """Build (or rebuild) the column view of ``dataset``, holding the store's lock (one
    writer at a time); return its metadata."""
    with Lock(dataset.url, dataset.storage_options, what=dataset.url, progress=progress):
        return _columnize(dataset, memory_mb, block_mb, client, progress)


def _columnize(dataset: Dataset, memory_mb: float, block_mb: float, client,
               progress: Progress | None) -> cols.ColumnsMeta:
    progress = progress or Progress(quiet=True)
    for name, v in (("memory_mb", memory_mb), ("block_mb", block_mb)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"The '{name}' parameter must be a float in the range (0, inf). "
                             f"Got {v!r} instead.")
    meta = dataset.meta
    itemsize = np.dtype(meta.dtype).itemsize
    # a row block as read costs its arrays twice: the decoded chunks and the arrays
    largest_row_block = 2 * max(b.nnz * (4 + itemsize) + b.n_rows * 12 + 8 for b in meta.blocks)
    budget = int(memory_mb * 2**20) - largest_row_block - 8 * meta.n_features
    if budget <= 0:
        raise ValueError(f"memory_mb={memory_mb:g} does not hold one row block "
                         f"({largest_row_block / 2**20:.2f} MB) and the column counts; raise it")
    start = time.perf_counter()
    cols.begin(dataset)
    run = Runner(client)
    url, so = dataset.url, dataset.storage_options
    for info in meta.blocks:
        run.submit(cols.count_columns, url, info, meta.n_features, so)
    counts = np.zeros(meta.n_features, dtype=np.int64)
    for c in run.results(progress, "columnize: count"):
        counts += c
    # writing a column block encodes a copy of it: keep room for one
    block_bytes = min(budget // 2, int(block_mb * 2**20))
    bounds = cols.plan_blocks(counts, itemsize, block_bytes)
    groups = cols.plan_groups(bounds, counts, itemsize, budget - block_bytes)
    compression = ds.compression_of(dataset)  # the view's blocks are written as the rows'
    run.submit(cols.write_labels, url, list(meta.blocks), meta.n_rows, so, compression)
    for group in groups:
        run.submit(cols.build_group, url, list(meta.blocks), [bounds[b] for b in group],
                   [ds.block_name(b) for b in group], counts, meta.dtype, so, compression)
    y_crc, *infos = run.results(progress, "columnize: build")
    cmeta = cols.commit(dataset, cols.ColumnsMeta(
        n_rows=meta.n_rows, n_features=meta.n_features, nnz=meta.nnz, y_crc32=y_crc,
        blocks=tuple(i for group in infos for i in group), memory_bytes=int(memory_mb * 2**20),
        passes=1 + len(groups)))
    progress.note(f"columnize: {dataset.url}: {len(bounds)} column blocks in {len(groups)} "
                  f"group(s), {1 + len(groups)} passes over the row blocks, "
                  f"{time.perf_counter() - start:.1f}s")
    return cmeta
