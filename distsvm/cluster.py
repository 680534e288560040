"""Connecting to Dask: an embedded LocalCluster by default, or an existing scheduler.

The embedded cluster binds to 127.0.0.1 only, with one thread per worker
process (the kernels are single-threaded and release the GIL).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import psutil
from distributed import Client, LocalCluster

from .errors import ClusterError

CACHE_FRACTION = 0.6  # share of a worker's memory limit its process may fill with cached blocks


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


def plan(client: Client, n_blocks: int, n_workers: int | None = None) -> WorkerPlan:
    """Assign blocks to workers round-robin and size each worker's block cache."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    if not info:
        raise ClusterError("the Dask cluster has no workers")
    addrs = sorted(info)[: n_workers or None]
    total = psutil.virtual_memory().total
    cache = {}
    for a in addrs:  # what the process already uses (interpreter, libraries) is not for blocks
        limit = info[a].get("memory_limit") or total // len(addrs)
        used = info[a].get("metrics", {}).get("memory", 0)
        cache[a] = max(0, int(CACHE_FRACTION * limit) - used)
    return WorkerPlan(tuple(addrs[b % len(addrs)] for b in range(n_blocks)), cache)
