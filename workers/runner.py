"""A worker's endpoint for a job's map-reduce passes: a Dask actor whose calls go straight
from the coordinator to the worker and back, not as tasks through the scheduler.

A pass is one call on each worker that owns blocks (:class:`distsvm.solvers.driver.Passes`).
As a task, its arguments go coordinator → scheduler → worker, and the reply waits for the
scheduler to hear that the task ended before the coordinator fetches it; a call is one round
trip (on this machine's 2-worker LocalCluster with a 3.2 MB vector each way: 21 ms a task
pass, 9 ms a call, see docs/benchmarks.md).  ``CALLS`` counts the calls on this worker by
function name, for the tests that count a pass's work.  A worker runs the calls it gets one
at a time (Dask's actor thread), whatever the job: a call shares its blocks among the
worker's threads itself (:func:`distsvm.workers.blocks.each_block`), and problems trained
side by side (one-vs-rest) take turns on a worker where their tasks would have shared its
threads.
"""

from __future__ import annotations

import collections

CALLS: collections.Counter = collections.Counter()


class Runner:
    """Runs ``fn(*args, **kwargs)`` on the worker that holds this actor."""

    def call(self, fn, *args, **kwargs):
        CALLS[fn.__name__] += 1
        return fn(*args, **kwargs)


def calls() -> dict:
    """``CALLS`` of this worker (for ``client.run``)."""
    return dict(CALLS)
