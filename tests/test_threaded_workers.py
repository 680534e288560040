"""Workers with several threads (as `dask worker --nthreads N` starts them): one-vs-rest DCD
runs a group of problems on each thread, and the Newton and SVM-ALM passes share a worker's
blocks among its threads; all give what single-threaded workers give."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distsvm import cluster
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.params import Params
from distsvm.solvers import alm, dcd, newton

from .conftest import dna_rows, local_client


@pytest.fixture(scope="module")
def threaded():
    """One worker process with two threads."""
    with local_client(1, threads_per_worker=2) as c:
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """1,200 rows of Statlog DNA (3 classes) in 4 blocks."""
    return ingest(dna_rows(1200), str(tmp_path_factory.mktemp("threaded") / "dna.zarr"),
                  block_rows=300)


def test_ovr_runs_a_group_per_thread_and_follows_the_binary_runs(threaded, client, store):
    """On one worker with two threads (the plan sees both) the 3 problems are dealt to its
    two threads, and each ends at exactly the W of the same job on two single-threaded
    workers: a problem's path depends on neither its slot nor its worker."""
    plan = cluster.plan(threaded, len(store.meta.blocks), None, store)
    assert list(plan.threads.values()) == [2]
    p = Params(loss="squared_hinge", C=0.1, eps=0.1, bias=1.0, max_rounds=40, seed=5)
    opts = dict(costs=[np.full(3, 0.1)] * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        on_threads = dcd.solve_ovr(threaded, store, plan, p, **opts)
        on_workers = dcd.solve_ovr(client, store,
                                   cluster.plan(client, len(store.meta.blocks), None, store),
                                   p, **opts)
    for a, b in zip(on_threads, on_workers):
        np.testing.assert_array_equal(a.w, b.w)
        assert a.rounds == b.rounds


def test_newton_passes_on_threads_equal_one_thread(threaded, client, store):
    """Newton with each of the worker's 4 blocks cut into pieces for its 2 threads (each
    summing its own vectors) follows the single-threaded run up to rounding: the same
    iterations and objectives, and w within what the stopping rule certifies of both
    (f is 1-strongly convex: ‖w − w*‖ ≤ ‖∇f(w)‖ ≤ eps·‖∇f(0)‖)."""
    p = Params(solver="newton", loss="logistic", eps=1e-6, bias=-1.0, max_rounds=30)
    opts = dict(cost=np.ones(3), positive=1)  # class 1 against the other two
    a = newton.solve(threaded, store, cluster.plan(threaded, 4, None, store), p, **opts)
    b = newton.solve(client, store, cluster.plan(client, 4, None, store), p, **opts)
    assert a.converged and b.converged and a.rounds == b.rounds
    last = b.history[-1]
    certified = last["grad_norm"] + a.history[-1]["grad_norm"]
    assert certified <= 2e-6 * last["grad_norm"] / last["rel_grad_norm"]
    assert np.linalg.norm(a.w - b.w) <= certified
    # the objectives to rounding: sums over 2,000 rows cut in other places (2e-12 measured)
    np.testing.assert_allclose([r["primal"] for r in a.history],
                               [r["primal"] for r in b.history], rtol=1e-10)


def test_alm_passes_on_threads_equal_one_thread(threaded, client, store):
    """SVM-ALM (inexact) with the worker's blocks shared by its 2 threads follows the
    single-threaded run up to rounding."""
    p = Params(solver="alm", loss="squared_hinge", p=2.0, C=1.0, eps=1e-3, bias=1.0,
               max_rounds=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = alm.solve(threaded, store, cluster.plan(threaded, 4, None, store), p, positive=1)
        b = alm.solve(client, store, cluster.plan(client, 4, None, store), p, positive=1)
    assert a.rounds == b.rounds and a.extra["passes"] == b.extra["passes"]
    np.testing.assert_allclose(a.w, b.w, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose([r["primal"] for r in a.history],
                               [r["primal"] for r in b.history], rtol=1e-9)
