"""A worker's endpoint for a job's map-reduce passes: a Dask actor whose calls go straight
from the coordinator to the worker and back, not as tasks through the scheduler.

A pass is one call on each worker that owns blocks (:class:`distsvm.solvers.driver.Passes`).
As a task, its arguments go coordinator → scheduler → worker, and the reply waits for the
scheduler to hear that the task ended before the coordinator fetches it; a call is one round
trip (on this machine's 2-worker LocalCluster with a 3.2 MB vector each way: 21 ms a task
pass, 9 ms a call, see docs/benchmarks.md).  ``CALLS`` counts the calls on this worker by
function name, for the tests that count a pass's work.

A worker runs the calls it gets one at a time, on Dask's actor thread: a call shares its
blocks among the worker's threads itself (:func:`distsvm.workers.blocks.each_block`). Calls
in a pool of the worker's threads instead, so that problems side by side (one-vs-rest) would
run side by side as their tasks did, were measured and not kept, the simpler code being as
fast: letter ``-s 0`` one-vs-rest on 2 workers × 2 threads 2.85–3.29 s against 2.80–2.94 s
(docs/benchmarks.md); Newton ``-s 2`` on pypi-summaries within the machine's noise. A worker
that Dask has paused (its memory over the pause threshold) starts no call, as it starts no
task: the call waits until the worker resumes, at most ``PAUSED_WAIT`` seconds (the
coordinator gives up on a worker paused for ``distsvm.cluster.PAUSED_SECONDS``, less than
this, and the call then ends without running instead of changing the state of a job that has
ended).
"""

from __future__ import annotations

import collections
import time

CALLS: collections.Counter = collections.Counter()
PAUSED_WAIT = 65.0  # just over the coordinator's distsvm.cluster.PAUSED_SECONDS (60 s)


class Runner:
    """Runs ``fn(*args, **kwargs)`` on the worker that holds this actor."""

    def __init__(self):
        from distributed import get_worker

        self.worker = get_worker()

    def call(self, fn, *args, **kwargs):
        from distributed.core import Status

        until = time.monotonic() + PAUSED_WAIT
        while self.worker.status == Status.paused:
            if time.monotonic() > until:
                raise RuntimeError(f"worker paused for {PAUSED_WAIT:.0f}s: {fn.__name__} not run")
            time.sleep(0.05)
        CALLS[fn.__name__] += 1
        return fn(*args, **kwargs)


def calls() -> dict:
    """``CALLS`` of this worker (for ``client.run``)."""
    return dict(CALLS)
