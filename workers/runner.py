"""A worker's endpoint for a job's map-reduce passes: a Dask actor whose calls go straight
from the coordinator to the worker and back, not as tasks through the scheduler.

A pass is one call on each worker that owns blocks (:class:`distsvm.solvers.driver.Passes`).
As a task, its arguments go coordinator → scheduler → worker, and the reply waits for the
scheduler to hear that the task ended before the coordinator fetches it; a call is one round
trip (on this machine's 2-worker LocalCluster with a 3.2 MB vector each way: 21 ms a task
pass, 9 ms a call, see docs/benchmarks.md).  ``CALLS`` counts the calls on this worker by
function name, for the tests that count a pass's work.  A call runs in a pool of as many
threads as the worker has (one pool per worker, shared by every job's Runner), so
calls side by side — one-vs-rest problems, one per thread — run side by side as their tasks
did; Dask's own actor thread would take them one at a time.  A worker that Dask has paused
(its memory over the pause threshold) starts no call, as it starts no task: the call waits
until the worker resumes, at most ``PAUSED_WAIT`` seconds (the coordinator gives up on a
worker paused for ``distsvm.cluster.PAUSED_SECONDS``, less than this, and the call then
ends without running instead of changing the state of a job that has ended).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools

CALLS: collections.Counter = collections.Counter()
PAUSED_WAIT = 65.0  # just over the coordinator's distsvm.cluster.PAUSED_SECONDS (60 s)
_POOLS: dict = {}  # a worker's address: its pool, made by its first Runner


class Runner:
    """Runs ``fn(*args, **kwargs)`` on the worker that holds this actor."""

    def __init__(self):
        from distributed import get_worker

        worker = self.worker = get_worker()
        if worker.address not in _POOLS:
            _POOLS[worker.address] = concurrent.futures.ThreadPoolExecutor(
                worker.state.nthreads, thread_name_prefix="distsvm-calls")
        self.pool = _POOLS[worker.address]

    async def call(self, fn, *args, **kwargs):
        from distributed.core import Status

        loop = asyncio.get_running_loop()
        until = loop.time() + PAUSED_WAIT
        while self.worker.status == Status.paused:
            if loop.time() > until:
                raise RuntimeError(f"worker paused for {PAUSED_WAIT:.0f}s: {fn.__name__} not run")
            await asyncio.sleep(0.05)
        CALLS[fn.__name__] += 1
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, functools.partial(fn, *args, **kwargs))


def calls() -> dict:
    """``CALLS`` of this worker (for ``client.run``)."""
    return dict(CALLS)
