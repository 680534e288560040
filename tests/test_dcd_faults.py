"""DCD loses a worker process (SIGKILL) at a random round: the job finishes on the others, at
the no-fault run's objective, deterministically; and it fails promptly if no worker is left."""

from __future__ import annotations

import time

import numpy as np
import pytest

import distsvm.workers.blocks
import distsvm.workers.dcd
from distsvm.errors import ClusterError
from distsvm.jobs import train
from distsvm.progress import Progress
from distsvm.workers import losses

from .conftest import Killer, local_client, primal_objective

FAULT_GAP = 4e-5  # both runs of a fault test are certified to this: they differ by < 1e-4
FAULT_C = 0.003  # a few dozen rounds to FAULT_GAP on 3,000 rows


@pytest.fixture(scope="module")
def three():
    with local_client(3) as c:
        yield c


@pytest.mark.parametrize("parallel", [None, "add", "line"])
@pytest.mark.parametrize("n_workers", [3])  # 2: tests/test_solvers.py
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
              parallel=parallel, seed=1, join_blocks=False)  # each worker owns blocks
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
    with local_client(1) as c:
        start = time.perf_counter()
        with pytest.raises(ClusterError, match="every worker of the job left"):
            train(small_store, eps=1e-12, max_rounds=100_000, client=c,
                  progress=Killer(c, 3, 0))
        assert time.perf_counter() - start < 30


def _hog(dask_worker=None):
    """Hold memory until the process is at 87.5% of its limit: between Dask's pause (80%)
    and terminate (95%) thresholds."""
    import psutil

    n = int(0.875 * dask_worker.memory_manager.memory_limit) - psutil.Process().memory_info().rss
    dask_worker.distsvm_test_hog = np.ones(max(n, 0), dtype=np.uint8)  # stays resident


class Hog(Progress):
    """After round ``at``, brings every worker's memory between Dask's pause and terminate
    thresholds, as a job whose blocks and state outgrow the memory limit would."""

    def __init__(self, client, at):
        super().__init__(quiet=True)
        self.client, self.at = client, at

    def round(self, row, text=None):
        if row["round"] == self.at:
            self.client.run(_hog)


@pytest.mark.parametrize("solver, workers", [("dcd", 1), ("newton", 2)])
def test_a_worker_paused_over_its_memory_fails_the_job_instead_of_hanging(small_store,
                                                                         monkeypatch, solver,
                                                                         workers):
    """Dual CD's tasks (one worker) and Newton's passes, calls on each worker's Runner
    (two workers): a paused worker starts neither, and the job fails with one clear error."""
    from distributed import Client, LocalCluster

    import distsvm.cluster

    monkeypatch.setattr(distsvm.cluster, "PAUSED_SECONDS", 3.0)
    with LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", memory_limit="1000MiB") as cluster, \
            Client(cluster) as c:
        start = time.perf_counter()
        with pytest.raises(ClusterError, match="paused by Dask"):
            train(small_store, solver=solver, eps=1e-12, max_rounds=100_000, client=c,
                  progress=Hog(c, 2))
        assert time.perf_counter() - start < 60


def test_restore_rolls_back_to_the_round_start_and_rebuilds_w(small_store):
    """In this process: two rounds of distsvm.workers.dcd.local_round on all blocks (with a bias
    feature), then restore for round 2 gives back round 1's α and w = Σ αᵢyᵢxᵢ, and again
    the same when repeated (a loss during the recovery); restored with it, a second run
    (the other class as +1, as one-vs-rest) that did only round 1 keeps its α and w."""
    d = small_store
    infos, run, other = list(d.meta.blocks), "test-restore", "test-restore-other"
    kw = dict(bias=1.0, n_features=d.meta.n_features, cache_bytes=0)
    step = dict(gamma=1.0, sigma=1.0, loss=losses.SQUARED_HINGE, positive=1,
                class_cost=np.full(2, FAULT_C), eps=1e-9, n_passes=1, **kw)
    w = np.zeros(d.meta.n_features + 1)
    try:
        for tag in (1, 2):
            dw, _ = distsvm.workers.dcd.local_round(w, d.url, infos, list(range(len(infos))), run,
                                            tag=tag, **step)
            if tag == 1:
                w1 = w + dw
                alpha1 = [distsvm.workers.blocks.run_state(run, i.name, dict)["alpha"].copy()
                          for i in infos]
            w = w + dw
        assert np.abs(w - w1).max() > 1e-3  # round 2 moved w and α
        w_other, _ = distsvm.workers.dcd.local_round(np.zeros_like(w), d.url, infos,
                                             list(range(len(infos))), other, tag=1,
                                             **{**step, "positive": 0})
        for _ in range(2):
            rebuilt = [distsvm.workers.dcd.restore(d.url, infos, run, 2, positive=1, **kw),
                       distsvm.workers.dcd.restore(d.url, infos, other, 2, positive=0, **kw)]
            np.testing.assert_allclose(rebuilt, [w1, w_other], rtol=1e-9, atol=1e-10)
            for info, a1 in zip(infos, alpha1):
                alpha = distsvm.workers.blocks.run_state(run, info.name, dict)["alpha"]
                np.testing.assert_array_equal(alpha, a1)
    finally:
        distsvm.workers.blocks.drop_run(run)
        distsvm.workers.blocks.drop_run(other)
