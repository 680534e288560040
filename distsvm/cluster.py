"""Connecting to Dask: an embedded LocalCluster by default, or an existing scheduler.

The embedded cluster binds to 127.0.0.1 only, with one thread per worker
process (the kernels are single-threaded and release the GIL).  Tasks that
hold per-block state are pinned to the block's owner; :func:`gather` makes sure
a job whose owner has left the cluster fails instead of waiting forever (Dask
keeps a task pinned to a departed worker pending, distributed issue #7346).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import numpy as np
import psutil
from distributed import Client, LocalCluster

from .errors import ClusterError

# Share of a worker's memory limit that its process may reach with cached blocks, below Dask's
# pause threshold (0.8): the rest is for one block in flight and the kernels' buffers.
CACHE_FRACTION = 0.6
IN_FLIGHT = 3  # a block being read takes up to ~3x its size (compressed + decoded + derived)
POLL_SECONDS = 2.0


@contextlib.contextmanager
def connect(scheduler: str | None = None, n_workers: int | None = None,
            memory_limit: str | int | None = "auto", client: Client | None = None):
    """Yield a Dask ``Client``: the one given, one for ``scheduler``, or an embedded cluster."""
    if client is not None:
        yield client
        return
    if scheduler:
        try:
            c = Client(scheduler, timeout="30s")
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
        try:
            yield c
        finally:
            c.close()
        return
    n = n_workers or max(1, min(psutil.cpu_count(logical=False) or 1, 4))
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, memory_limit=memory_limit,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as c:
        yield c


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """Which worker owns which block, and each worker's block-cache budget in bytes."""

    owners: tuple[str, ...]  # owners[b] = worker address of block b
    cache_bytes: dict[str, int]

    @property
    def workers(self) -> list[str]:
        return sorted(self.cache_bytes)

    def blocks_of(self, worker: str) -> list[int]:
        return [b for b, w in enumerate(self.owners) if w == worker]


_warmed = False  # on a worker: whether _warm_rss has read a block in this process


def _warm_rss(url: str | None, block, storage_options) -> int:
    """On a worker: load the kernels and read one block without caching it (the
    libraries and the store reader's machinery are most of a worker's footprint),
    then return the process's resident memory.  The block is read once per worker
    process: once the machinery is loaded, reading another adds nothing that stays."""
    global _warmed
    import workers.blocks
    import workers.dcd  # noqa: F401

    if url is not None and not _warmed:
        workers.blocks.load(url, block, 0, storage_options)
        _warmed = True
    return psutil.Process().memory_info().rss


def block_bytes(meta) -> int:
    """Bytes of the largest block in worker memory: CSR arrays, labels and row norms."""
    itemsize = np.dtype(meta.dtype).itemsize
    return max((b.nnz * (itemsize + 4) + b.n_rows * 20 + 8 for b in meta.blocks), default=0)


def plan(client: Client, n_blocks: int, n_workers: int | None = None,
         dataset=None) -> WorkerPlan:
    """Assign blocks to workers round-robin and size each worker's block cache.

    A worker's cache gets ``CACHE_FRACTION`` of its memory limit, less what the
    process uses once the kernels are loaded and a block of ``dataset`` has been
    read, less room for its largest block in flight.
    """
    info = client.scheduler_info(n_workers=-1)["workers"]
    if not info:
        raise ClusterError("the Dask cluster has no workers")
    addrs = sorted(info)[: n_workers or None]
    if dataset is not None and dataset.meta.blocks:
        warm = (dataset.url, dataset.meta.blocks[0], dataset.storage_options)
        in_flight = IN_FLIGHT * block_bytes(dataset.meta)
    else:
        warm, in_flight = (None, None, None), 0
    used = client.run(_warm_rss, *warm, workers=addrs)
    total = psutil.virtual_memory().total
    cache = {}
    for a in addrs:
        limit = info[a].get("memory_limit") or total // len(addrs)
        cache[a] = max(0, int(CACHE_FRACTION * limit) - used[a] - in_flight)
    return WorkerPlan(tuple(addrs[b % len(addrs)] for b in range(n_blocks)), cache)


def gather(client: Client, futures: list, workers) -> list:
    """The results of ``futures``, tasks pinned to ``workers``; raises ClusterError if one
    of those workers leaves the cluster before every result has arrived.

    Each result is fetched with a timeout: a finished task whose worker then dies goes back
    to waiting for that worker, so neither ``wait`` nor a plain ``gather`` may be trusted to
    return.
    """
    results = []
    for f in futures:
        while True:
            try:
                results.append(f.result(timeout=POLL_SECONDS))
                break
            except TimeoutError:
                alive = client.scheduler_info(n_workers=-1)["workers"]
                gone = sorted(set(workers) - set(alive))
                if gone:
                    for g in futures:
                        g.cancel()
                    raise ClusterError(
                        f"worker {', '.join(gone)} left the Dask cluster during the job "
                        "(killed, or restarted by its nanny, e.g. over its memory limit); the "
                        "solver state of its blocks is lost: run the job again") from None
    return results
