"""Connecting to Dask: an embedded LocalCluster by default, or an existing scheduler.

The embedded cluster binds to 127.0.0.1 only, with one thread per worker
process (the kernels are single-threaded and release the GIL).  Tasks that
hold per-block state are pinned to the block's owner; :func:`gather` makes sure
a job whose owner has left the cluster gets a :class:`WorkerLost` error instead of
waiting forever (Dask keeps a task pinned to a departed worker pending, distributed
issue #7346).  A solver that can rebuild the lost state catches it, waits for the
round's other tasks to stop (:func:`settle`), moves the lost blocks to the remaining
workers (:func:`replan`) and carries on; the others let it fail the job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import time

import numpy as np
import psutil
from distributed import Client, LocalCluster

from .errors import ClusterError

# Share of a worker's memory limit that its process may reach with cached blocks, below Dask's
# pause threshold (0.8): the rest is for the blocks in flight and the kernels' buffers.
CACHE_FRACTION = 0.6
# Largest blocks in flight: the one being solved, and the next one being read (prefetch,
# workers.blocks.stream), which takes up to ~3x its size (compressed + decoded + derived).
IN_FLIGHT = 4
POLL_SECONDS = 2.0
PAUSED_SECONDS = 60.0  # a pinned worker paused this long (over its memory) fails the job


@contextlib.contextmanager
def connect(scheduler: str | None = None, n_workers: int | None = None,
            memory_limit: str | int | None = "auto", client: Client | None = None,
            progress=None, security=None):
    """Yield a Dask ``Client``: the one given, one for ``scheduler``, or an embedded cluster.

    With ``progress`` (a :class:`distsvm.progress.Progress`), a cluster this call connects
    to or starts is announced with its scheduler, workers and dashboard address.  The
    embedded cluster's HTTP server (the dashboard, where bokeh is installed) listens on
    127.0.0.1, on a free port.  ``security`` (a ``distributed.security.Security``) secures
    the connection to the scheduler, or makes the embedded cluster talk TLS (still on
    127.0.0.1 only).
    """
    if client is not None:
        yield client
        return
    if scheduler:
        try:
            c = Client(scheduler, timeout="30s", security=security)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
        try:
            _announce(c, progress)
            yield c
        finally:
            c.close()
        return
    n = n_workers or max(1, min(psutil.cpu_count(logical=False) or 1, 4))
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", memory_limit=memory_limit,
                      silence_logs=logging.ERROR, security=security,
                      protocol="tls://" if security else None) as cluster, \
            Client(cluster, security=security) as c:
        _announce(c, progress)
        yield c


def dashboard_link(client: Client) -> str | None:
    """The address of the scheduler's Dask dashboard, or None if it serves none (its HTTP
    server serves the dashboard only where bokeh is installed: for a scheduler on this
    machine, that can be told)."""
    try:
        if "dashboard" not in client.scheduler_info().get("services", {}):
            return None
        local = client.scheduler.address.startswith(("tcp://127.0.0.1:", "inproc://"))
        if local and importlib.util.find_spec("bokeh") is None:
            return None
        return client.dashboard_link
    except Exception:  # noqa: BLE001 - only informative
        return None


def _announce(client: Client, progress) -> None:
    if progress is None:
        return
    link = dashboard_link(client)
    info = client.scheduler_info()
    progress.note(f"cluster: scheduler {info.get('address', client.scheduler.address)}, "
                  f"{len(info.get('workers', {}))} workers, dashboard "
                  + (link or "off (the scheduler serves none: pip install bokeh)"),
                  event="cluster", scheduler=info.get("address"), dashboard=link)


def workers_info(client: Client) -> dict:
    """The scheduler's current workers, {address: info}, asked for now.

    Not ``client.scheduler_info(n_workers=-1)["workers"]``: that returns the client's
    cached copy, which its periodic refresh (every 2 s, without per-worker details) may
    replace between the fetch and the return, and then lists no workers at all.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """Which worker owns which block, each worker's block-cache budget in bytes, and its
    threads (used by the Newton and SVM-ALM passes and by one-vs-rest DCD's slots)."""

    owners: tuple[str, ...]  # owners[b] = worker address of block b
    cache_bytes: dict[str, int]
    threads: dict[str, int] = dataclasses.field(default_factory=dict)  # default 1

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
    read, less room for its largest block being solved and the next one in flight,
    for each of its threads.
    """
    info = workers_info(client)
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
    cache, threads = {}, {a: max(1, int(info[a].get("nthreads") or 1)) for a in addrs}
    for a in addrs:
        limit = info[a].get("memory_limit") or total // len(addrs)
        cache[a] = max(0, int(CACHE_FRACTION * limit) - used[a] - in_flight * threads[a])
    return WorkerPlan(tuple(addrs[b % len(addrs)] for b in range(n_blocks)), cache, threads)


class WorkerLost(ClusterError):
    """Workers ``gone`` left the cluster while a job's tasks on them were pending."""

    def __init__(self, gone: list[str]):
        super().__init__(
            f"worker {', '.join(gone)} left the Dask cluster during the job (killed, or "
            "restarted by its nanny, e.g. over its memory limit); the solver state of its "
            "blocks is lost: run the job again")
        self.gone = gone


def alive(client: Client) -> set[str]:
    """Addresses of the workers the scheduler knows now."""
    return set(workers_info(client))


def gather(client: Client, futures: list, workers) -> list:
    """The results of ``futures``, tasks pinned to ``workers``; raises :class:`WorkerLost`
    (a ClusterError) if one of those workers leaves the cluster before every result has
    arrived.

    Each result is fetched with a timeout: a finished task whose worker then dies goes back
    to waiting for that worker, so neither ``wait`` nor a plain ``gather`` may be trusted to
    return.  A worker that Dask has paused (its memory over the pause threshold, 80% of its
    limit) runs no task, and holding its blocks' state it does not recover by itself: after
    ``PAUSED_SECONDS`` of that the job fails with a ClusterError instead of waiting forever.
    """
    results = []
    paused_since: dict[str, float] = {}
    for f in futures:
        while True:
            try:
                results.append(f.result(timeout=POLL_SECONDS))
                break
            except TimeoutError:
                info = workers_info(client)
                gone = sorted(set(workers) - set(info))
                if gone:
                    client.cancel(futures)
                    raise WorkerLost(gone) from None
                now = time.monotonic()
                for a in workers:
                    if info[a].get("status") == "paused":
                        paused_since.setdefault(a, now)
                    else:
                        paused_since.pop(a, None)
                stuck = sorted(a for a, t in paused_since.items() if now - t >= PAUSED_SECONDS)
                if stuck:
                    client.cancel(futures)
                    raise ClusterError(
                        f"worker {', '.join(stuck)} has been paused by Dask for "
                        f"{PAUSED_SECONDS:.0f}s: its memory is over the pause threshold of its "
                        "memory_limit with the job's blocks and solver state; give the workers "
                        "more memory, add workers, or use smaller blocks") from None
    return results


def _running(keys: set, dask_worker=None) -> bool:
    """On a worker: whether one of ``keys`` is running in a thread (a cancelled task runs
    on to its end: Dask cannot interrupt it)."""
    return any(ts.key in keys for ts in dask_worker.state.all_running_tasks)


def settle(client: Client, futures: list, workers) -> None:
    """Cancel ``futures`` and wait until none of them runs on any of ``workers`` still
    alive, so that the state their tasks change is at rest."""
    client.cancel(futures)
    keys = {f.key for f in futures}
    while keys:
        live = sorted(set(workers) & alive(client))
        try:
            if not any(client.run(_running, keys, workers=live).values()):
                return
        except Exception:
            if not set(live) - alive(client):
                raise
            continue  # a worker left while we asked: ask the others
        time.sleep(0.05)


def replan(plan: WorkerPlan, gone) -> WorkerPlan:
    """``plan`` without the workers ``gone``: each keeps its blocks, and the blocks of the
    departed ones go round-robin (in block order) to the others; ClusterError if none is left."""
    left = [a for a in plan.workers if a not in set(gone)]
    if not left:
        raise ClusterError(f"every worker of the job left the Dask cluster "
                           f"(last: {', '.join(sorted(gone))}); nothing is left to train on")
    owners = list(plan.owners)
    lost = [b for b, a in enumerate(owners) if a not in left]
    for k, b in enumerate(lost):
        owners[b] = left[k % len(left)]
    return WorkerPlan(tuple(owners), {a: plan.cache_bytes[a] for a in left}, plan.threads)
