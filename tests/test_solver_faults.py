"""pcd and the cutting plane beyond the conformance suite (tests/test_solvers.py, which kills
a worker in each): pcd's state is a function of w (rebuilt exactly), and with no worker left
the job fails promptly with ClusterError; the ordinal cutting plane runs a lost pass again."""

from __future__ import annotations

import time

import numpy as np
import pytest

import distsvm.workers.pcd
from distsvm.columns import columnize
from distsvm.errors import ClusterError
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.storage.columns import read_columns_meta
from distsvm.workers import losses

from .conftest import Killer, local_client, primal_objective

# C small enough for a few dozen rounds to eps (measured: 30 exact, 75 parallel rounds); both
# runs of a test then stop within ~1e-9 of the optimum, so their objectives agree to 1e-6
PCD = dict(solver="pcd", loss="squared_hinge", C=0.001, eps=1e-5, max_rounds=1000, seed=3)


@pytest.fixture(scope="module")
def small(a9a):
    X, y = a9a
    return X[:2000], y[:2000]


@pytest.fixture(scope="module")
def store(tmp_path_factory, small):
    """2000 rows of a9a, in their order, with a column view of 13 column blocks."""
    d = ingest(small, str(tmp_path_factory.mktemp("faults") / "s.zarr"), block_rows=500,
               shuffle=False)
    columnize(d, block_mb=0.02)
    return d


@pytest.mark.parametrize("loss", ["squared_hinge", "logistic"])
def test_state_is_rebuilt_from_w(small, store, loss):
    """b = 1 − y∘(Xw + bias·w_bias), rebuilt by (17) over the column blocks, and f against
    NumPy, at a random w with a bias feature."""
    X, y = small
    w = np.random.default_rng(0).normal(scale=0.1, size=124)
    state = distsvm.workers.pcd.initial(store.url, read_columns_meta(store), 124, losses.code(loss),
                                np.array([0.5, 0.5]), w=w, bias=2.0, positive=1)
    s = np.where(y == y.max(), 1.0, -1.0)
    np.testing.assert_allclose(state["b"], 1 - s * (X @ w[:123] + 2.0 * w[123]), atol=1e-12)
    np.testing.assert_array_equal(state["w"], w)
    assert state["f"] == pytest.approx(primal_objective(w, X, y, loss, C=0.5, bias=2.0),
                                       rel=1e-12)


def test_losing_every_worker_fails_promptly(store):
    """With no worker of the job left the job fails with ClusterError (the nanny's replacement
    worker is not the job's), within seconds.  (Parallel mode, whose rounds in flight span
    every worker; exact mode takes the same path once ``WorkerLost`` is raised.)"""
    with local_client(1) as c:
        start = time.perf_counter()
        with pytest.raises(ClusterError, match="every worker of the job left"):
            train(store, client=c, progress=Killer(c, 2, 0),
                  **{**PCD, "eps": 1e-12, "max_rounds": 100_000, "pcd_mode": "parallel"})
        assert time.perf_counter() - start < 30


@pytest.mark.parametrize("objective", ["ordinal"])  # classification: tests/test_solvers.py
def test_cutting_plane_reruns_the_pass_of_a_lost_worker(two, store, objective):
    """The cutting-plane workers keep no state between passes: a worker killed once round 3
    is logged leaves its blocks to the other, the pass runs again, and the run takes the
    no-fault run's iterates (same rounds, same w; for ordinal, the same thresholds)."""
    two.wait_for_workers(2)  # a worker killed by an earlier case is back
    kw = dict(solver="cutting_plane", loss="hinge", eps=1e-4 if objective == "classification"
              else 1e-3, C=0.1 if objective == "classification" else 1e-5,  # ordinal: C·#pairs
              max_rounds=200, objective=objective)  # converge in ~10 rounds
    ref = train(store, client=two, **kw)
    killer = Killer(two, 3, 1)
    model = train(store, client=two, progress=killer, **kw)
    assert f"worker {killer.killed} left the cluster; its 2 blocks go to the other 1 worker(s), " \
        "which read them from the store" in killer.stream.getvalue()
    assert model.summary["rounds"] == ref.summary["rounds"] > 3
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-10)
    if objective == "ordinal":
        np.testing.assert_array_equal(model.thresholds, ref.thresholds)
