"""Refuse, up front, a dataset whose arrays cannot fit a worker's memory.

A LIBSVM file with one index of 2³¹ declares 2³¹ features: it parses in a second and
ingests into a few kilobytes, but every solver then keeps at least the weight vector and
its update — two float64 arrays of ``n_features + 1`` — in each worker (16 GiB each here),
and the job dies much later in a MemoryError or the OOM killer.  Likewise a block size
(``--block-mb``) larger than a worker's memory: a worker holds the block it solves and the
next one, prefetched (:mod:`distsvm.workers.blocks`).  :func:`check_fits` compares that floor with
the workers' memory limit (Dask's ``memory_limit``; the machine's memory when there is no
cluster or no limit) and raises one :class:`~distsvm.storage.errors.InputDataError` line with the
estimate — at ingest (:func:`distsvm.ingest.ingest`, once the feature count is known) and
before training (:func:`distsvm.jobs.train`, before any task is sent).  The estimate is a
floor, not a model of any one solver: passing it does not promise the job fits.
"""

from __future__ import annotations

from distsvm.storage.errors import InputDataError


def size(n: float) -> str:
    """``n`` bytes for a message: GiB or MiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def worker_memory(client=None) -> tuple[int, str]:
    """(bytes, what): the smallest memory limit of ``client``'s workers, or this machine's
    memory if there is no client or no worker has a limit."""
    if client is not None:
        try:
            workers = client.scheduler_info()["workers"].values()
            limits = [int(w.get("memory_limit") or 0) for w in workers]
        except Exception:  # noqa: BLE001 - no scheduler information: the machine's memory
            limits = []
        limits = [m for m in limits if m > 0]
        if limits:
            return min(limits), "a worker's memory limit"
    import psutil

    return int(psutil.virtual_memory().total), "this machine's memory"


def floor_bytes(n_features: int, block_bytes: int) -> int:
    """What every solver keeps in a worker at least: w and its update (two float64 vectors
    of ``n_features + 1``) and two blocks (the one solved and the one prefetched)."""
    return 16 * (int(n_features) + 1) + 2 * int(block_bytes)


def block_bytes(n_rows: int, nnz: int, itemsize: int) -> int:
    """Decoded bytes of a row block in a worker: indptr, indices, data, labels, ‖xᵢ‖²."""
    return 8 * (n_rows + 1) + (4 + itemsize) * nnz + 12 * n_rows


def check_fits(where: str, n_features: int, largest_block: int, client=None) -> None:
    """InputDataError naming the estimate if :func:`floor_bytes` exceeds the memory of a
    worker (:func:`worker_memory`)."""
    limit, what = worker_memory(client)
    vectors = 16 * (int(n_features) + 1)
    need = floor_bytes(n_features, largest_block)
    if need > limit:
        raise InputDataError(
            f"{where}: {n_features} features and blocks of up to {size(largest_block)} need at "
            f"least {size(need)} in each worker (w and its update, 2 x 8 bytes x "
            f"(n_features + 1) = {size(vectors)}, and two blocks), more than {what} "
            f"({size(limit)}); check the input's largest feature index or the block size")


def check_dataset(dataset, client=None) -> None:
    """:func:`check_fits` for a dataset's header (its feature count and largest block)."""
    import numpy as np

    m = dataset.meta
    itemsize = np.dtype(m.dtype).itemsize
    largest = max((block_bytes(b.n_rows, b.nnz, itemsize) for b in m.blocks), default=0)
    check_fits(dataset.url, m.n_features, largest, client)
