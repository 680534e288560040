"""DCD on 2- and 3-worker clusters: LIBLINEAR's optimum in both parallel modes, determinism,
and a job that loses a worker process (SIGKILL) at a random round finishes on the others."""

from __future__ import annotations

import io
import os
import signal
import time

import numpy as np
import pytest

from distsvm.errors import ClusterError
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.progress import Progress

from .conftest import liblinear_optimum, load_xy, primal_objective, shared_dataset

C = 0.03  # as tests/test_dcd_parallel.py: a9a's dual converges slowly at C = 1
GAP = 1e-3
FAULT_GAP = 4e-5  # both runs of a fault test are certified to this: they differ by < 1e-4
FAULT_C = 0.003  # a few dozen rounds to FAULT_GAP on 3,000 rows


def _cluster(n):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    return cluster, Client(cluster)


@pytest.fixture(scope="module")
def three():
    """A 3-worker LocalCluster (the session's ``client`` has 2)."""
    cluster, c = _cluster(3)
    with cluster, c:
        yield c


@pytest.fixture(scope="module")
def a9a_blocks(tmp_path_factory, a9a):
    """a9a in 8 blocks: 3 workers own 3, 3 and 2."""
    return ingest(a9a, str(tmp_path_factory.mktemp("k3") / "a9a.zarr"), block_rows=4096)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("parallel", ["average", "add"])
def test_three_workers_reach_liblinear_optimum(three, a9a, a9a_blocks, parallel, loss):
    """(2 workers: tests/test_dcd_parallel.py.)"""
    X, y = a9a
    _, p_ref = liblinear_optimum(X, y, loss, C=C)
    model = train(a9a_blocks, loss=loss, C=C, eps=1e-9, gap_tol=GAP, max_rounds=1000,
                  parallel=parallel, client=three)
    s = model.summary
    assert s["converged"] and 0 <= s["duality_gap"] <= GAP * s["primal_objective"]
    p = primal_objective(model.w, X, y, loss, C=C)
    assert p == pytest.approx(s["primal_objective"], rel=1e-9)
    assert p_ref * (1 - 1e-9) <= p <= p_ref * (1 + GAP), (p, p_ref)
    assert s["dual_objective"] <= p_ref * (1 + 1e-9)  # weak duality: w = Σ αᵢyᵢxᵢ held


@pytest.mark.parametrize("parallel", ["average", "add"])
def test_three_workers_same_seed_same_w(three, a9a_blocks, parallel):
    kw = dict(loss="hinge", C=C, eps=1e-9, max_rounds=15, seed=5, parallel=parallel,
              client=three)
    with pytest.warns(Warning, match="round limit"):
        a, b = train(a9a_blocks, **kw), train(a9a_blocks, **kw)
    np.testing.assert_array_equal(a.w, b.w)
    assert len(three.scheduler_info()["workers"]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["w8a", "phishing", "a9a"])
def test_shared_datasets_two_and_three_workers(client, three, tmp_path, name):
    X, y = load_xy(shared_dataset(name))
    store = ingest((X, y), str(tmp_path / f"{name}.zarr"), block_rows=-(-X.shape[0] // 6))
    for c, parallel, loss in [(client, "average", "squared_hinge"), (three, "add", "hinge"),
                              (client, "add", "squared_hinge"), (three, "average", "hinge")]:
        _, p_ref = liblinear_optimum(X, y, loss, C=C)
        model = train(store, loss=loss, C=C, eps=1e-9, gap_tol=GAP, max_rounds=2000,
                      parallel=parallel, client=c)
        p = primal_objective(model.w, X, y, loss, C=C)
        assert model.summary["converged"], (name, parallel, loss)
        assert p_ref * (1 - 1e-9) <= p <= p_ref * (1 + GAP), (name, parallel, loss, p, p_ref)


class Killer(Progress):
    """Logs to a buffer and SIGKILLs worker process ``victim`` (its index among the
    cluster's sorted addresses) when round ``at`` has been logged; the coordinator goes on
    to submit the next round at once, so the loss lands during a round."""

    def __init__(self, client, at: int, victim: int):
        super().__init__(stream=io.StringIO())
        self.client, self.at, self.victim, self.killed = client, at, victim, None

    def round(self, row):
        super().round(row)
        if row["round"] == self.at:
            pids = self.client.run(os.getpid)
            self.killed = sorted(pids)[self.victim]
            os.kill(pids[self.killed], signal.SIGKILL)


@pytest.fixture(scope="module")
def small(a9a):
    """3,000 rows of a9a in 6 blocks: each of 3 workers owns 2."""
    X, y = a9a
    return X[:3000], y[:3000]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory, small):
    return ingest(small, str(tmp_path_factory.mktemp("faults") / "s.zarr"), block_rows=500)


@pytest.fixture(scope="module")
def two():
    """A 2-worker cluster of our own: the session's would lose a worker to these tests."""
    cluster, c = _cluster(2)
    with cluster, c:
        yield c


@pytest.mark.parametrize("parallel", [None, "add"])
@pytest.mark.parametrize("n_workers", [3, 2])
def test_a_killed_worker_is_recovered(request, small, small_store, parallel, n_workers):
    """Kill one worker at a random round (seeded by the test case); the job finishes on the
    others and both its run and the no-fault run are certified within FAULT_GAP of the
    optimum, so their primal objectives agree to 1e-4."""
    c = request.getfixturevalue({3: "three", 2: "two"}[n_workers])
    c.wait_for_workers(n_workers)  # a worker killed by an earlier case is back
    X, y = small
    rng = np.random.default_rng([n_workers, parallel is None])
    at, victim = int(rng.integers(2, 10)), int(rng.integers(n_workers))
    kw = dict(loss="squared_hinge", C=FAULT_C, eps=1e-9, gap_tol=FAULT_GAP, max_rounds=2000,
              parallel=parallel, seed=1)
    ref = train(small_store, client=c, **kw)
    killer = Killer(c, at, victim)
    start = time.perf_counter()
    model = train(small_store, client=c, progress=killer, **kw)
    log = killer.stream.getvalue()
    assert f"round {at + 1}: worker {killer.killed} left the cluster" in log \
        or f"round {at + 2}: worker {killer.killed} left the cluster" in log, log[-2000:]
    assert model.summary["converged"] and model.summary["rounds"] > at
    p = primal_objective(model.w, X, y, "squared_hinge", C=FAULT_C)
    assert p == pytest.approx(model.summary["primal_objective"], rel=1e-9)
    p_ref = ref.summary["primal_objective"]
    assert abs(p - p_ref) <= 1e-4 * p_ref, (p, p_ref)
    assert time.perf_counter() - start < 120


def test_the_same_fault_gives_the_same_w(two, small_store):
    """The survivors roll back to the start of the round in which the loss is noticed, so
    the result does not depend on how far that round had got."""
    runs = []
    for _ in range(2):
        two.wait_for_workers(2)
        killer = Killer(two, 3, 0)
        runs.append(train(small_store, loss="squared_hinge", C=FAULT_C, eps=1e-9,
                          gap_tol=FAULT_GAP, max_rounds=2000, parallel="average", seed=4,
                          client=two, progress=killer))
        assert "round 4: worker" in killer.stream.getvalue()
    np.testing.assert_array_equal(runs[0].w, runs[1].w)
    assert runs[0].summary["converged"]


def test_losing_every_worker_fails_promptly(small_store):
    cluster, c = _cluster(1)
    with cluster, c:
        start = time.perf_counter()
        with pytest.raises(ClusterError, match="every worker of the job left"):
            train(small_store, eps=1e-12, max_rounds=100_000, client=c,
                  progress=Killer(c, 3, 0))
        assert time.perf_counter() - start < 30
