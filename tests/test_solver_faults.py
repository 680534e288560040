"""pcd (parallel mode) keeps state on its workers without rebuilding it: when a worker is
SIGKILLed mid-run the job must fail promptly with ClusterError, never hang.  (SVM-ALM and
Newton recover: tests/test_newton_alm_faults.py.)"""

from __future__ import annotations

import io
import os
import signal
import threading

import pytest

from distsvm.columns import columnize
from distsvm.errors import ClusterError
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.progress import Progress

from .conftest import local_client

PROMPT_SECONDS = 60  # cluster.gather notices a departed worker within POLL_SECONDS (2 s)


@pytest.fixture(scope="module")
def two():
    """A 2-worker cluster of our own: the session's would lose a worker to these tests."""
    with local_client(2) as c:
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory, a9a):
    X, y = a9a
    d = ingest((X[:2000], y[:2000]), str(tmp_path_factory.mktemp("faults") / "s.zarr"),
               block_rows=500)
    columnize(d, block_mb=0.02)
    return d


class Killer(Progress):
    """SIGKILLs the last worker (by address) when the line of iteration 2 is logged."""

    def __init__(self, client, marker: str):
        super().__init__(stream=io.StringIO())
        self.client, self.marker, self.killed = client, marker, False

    def note(self, text):
        super().note(text)
        if text.startswith(self.marker) and not self.killed:
            pids = self.client.run(os.getpid)
            os.kill(pids[sorted(pids)[-1]], signal.SIGKILL)
            self.killed = True


@pytest.mark.parametrize("solver, options, marker", [
    ("pcd", dict(loss="squared_hinge", pcd_mode="parallel"), "round    2"),
])
def test_a_lost_worker_fails_the_job_promptly(two, store, solver, options, marker):
    two.wait_for_workers(2)  # the worker killed by the previous case is back
    killer = Killer(two, marker)
    outcome = []

    def job():
        try:
            train(store, solver=solver, eps=1e-12, max_rounds=10_000, client=two,
                  progress=killer, **options)
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    t = threading.Thread(target=job, daemon=True)
    t.start()
    t.join(PROMPT_SECONDS)
    assert not t.is_alive(), f"{solver}: the job still waits {PROMPT_SECONDS}s after the kill"
    assert killer.killed
    assert isinstance(outcome[0], ClusterError) and "left the Dask cluster" in str(outcome[0])
