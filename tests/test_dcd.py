"""Dual coordinate descent: LIBLINEAR's optimum, the duality-gap certificate, blocks and workers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.workers.kernels import dcd as kernel
from distsvm.workers.kernels.linear import row_sqnorms

from .conftest import liblinear_optimum, load_xy, local_client, primal_objective, shared_dataset

LOSSES = ["hinge", "squared_hinge"]


@pytest.fixture(scope="module")
def a9a_store(tmp_path_factory, a9a):
    """a9a as the default block size stores it (one block: it is 4 MB)."""
    return ingest(a9a, str(tmp_path_factory.mktemp("dcd") / "a9a.zarr"))


@pytest.mark.parametrize("loss", LOSSES)
def test_matches_liblinear_optimum_and_certifies_gap(client, a9a, a9a_store, loss):
    X, y = a9a
    _, p_ref = liblinear_optimum(X, y, loss)
    model = train(a9a_store, loss=loss, C=1.0, eps=1e-9, gap_tol=2e-4, max_rounds=1000,
                  client=client)
    s = model.summary
    p = primal_objective(model.w, X, y, loss)
    assert abs(p - s["primal_objective"]) <= 1e-9 * p  # the reported objective is the true one
    assert p <= p_ref * (1 + 1e-3), (p, p_ref)
    # weak duality: the dual objective bounds the optimum from below, so the gap certifies w
    assert s["dual_objective"] <= p_ref * (1 + 1e-9)
    assert s["converged"] and 0 <= s["duality_gap"] <= 2e-4 * p


def test_bias_matches_liblinear(client, a9a, a9a_store):
    X, y = a9a
    _, p_ref = liblinear_optimum(X, y, "squared_hinge", bias=1.0)
    model = train(a9a_store, loss="squared_hinge", bias=1.0, eps=1e-3, max_rounds=2000,
                  client=client)
    assert model.summary["converged"]  # by LIBLINEAR's rule (17)
    assert model.w.shape == (124,)
    p = primal_objective(model.w, X, y, "squared_hinge", bias=1.0)
    assert abs(p - p_ref) <= 1e-3 * p_ref


@pytest.mark.parametrize("name", ["w8a", "mushrooms", "phishing"])
def test_shared_datasets_match_liblinear(client, tmp_path, name):
    X, y = load_xy(shared_dataset(name))
    store = ingest((X, y), str(tmp_path / f"{name}.zarr"))
    for loss in LOSSES:
        _, p_ref = liblinear_optimum(X, y, loss)
        model = train(store, loss=loss, eps=1e-9, gap_tol=5e-4, max_rounds=3000, client=client)
        p = primal_objective(model.w, X, y, loss)
        assert model.summary["converged"] and model.summary["duality_gap"] <= 5e-4 * p
        assert p <= p_ref * (1 + 1e-3), (name, loss, p, p_ref)


@pytest.fixture(scope="module")
def small(a9a):
    X, y = a9a
    return X[:4000], y[:4000]


@pytest.fixture(scope="module")
def one_worker():
    with local_client(1) as c:
        yield c


def test_one_block_and_many_blocks_reach_the_same_optimum(one_worker, small, tmp_path):
    """Both runs are certified by their duality gaps: P* ≤ P ≤ P* + gap, so the two
    objectives differ by at most the larger gap — which must itself be small.  (One
    worker holds both stores: their rows are solved as one block, tests/test_joined.py.)"""
    X, y = small
    runs = []
    for rows in (4000, 2000):
        store = ingest((X, y), str(tmp_path / f"b{rows}.zarr"), block_rows=rows)
        assert len(store.meta.blocks) == 4000 // rows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = train(store, loss="squared_hinge", eps=1e-3, max_rounds=600,
                          client=one_worker)
        p = primal_objective(model.w, X, y, "squared_hinge")
        runs.append((p, model.summary["duality_gap"]))
    (p1, gap1), (p2, gap2) = runs
    assert 0 <= gap1 <= 1e-4 * p1 and 0 <= gap2 <= 3e-3 * p2, runs
    assert abs(p1 - p2) <= max(gap1, gap2), runs


@pytest.mark.filterwarnings("ignore::distsvm.errors.ConvergenceWarning")
def test_deterministic_across_runs_and_worker_counts(client, one_worker, small, tmp_path):
    store = ingest(small, str(tmp_path / "s.zarr"), block_rows=900)
    w1 = train(store, eps=1e-2, max_rounds=40, seed=7, client=client).w
    w2 = train(store, eps=1e-2, max_rounds=40, seed=7, client=client).w
    w3 = train(store, eps=1e-2, max_rounds=40, seed=7, client=one_worker).w
    w4 = train(store, eps=1e-2, max_rounds=40, seed=8, client=client).w
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(w1, w3)
    assert not np.array_equal(w1, w4)  # the seed does drive the permutations


def test_round_limit_warns(client, a9a_store):
    with pytest.warns(ConvergenceWarning, match="round limit"):
        model = train(a9a_store, eps=1e-9, max_rounds=2, client=client)
    assert model.summary["rounds"] == 2 and not model.summary["converged"]


def _numpy_dcd_pass(X, s, alpha, w, order, diag, upper):
    """Algorithm 1, steps (a)-(d), in plain NumPy over rows in ``order`` (no shrinking)."""
    for i in order:
        xi = X[i].toarray().ravel().astype(np.float64)
        G = s[i] * (w @ xi) - 1.0 + diag * alpha[i]
        pg = min(G, 0.0) if alpha[i] == 0 else (max(G, 0.0) if alpha[i] == upper else G)
        if abs(pg) > 1e-12:
            old = alpha[i]
            alpha[i] = min(max(old - G / (xi @ xi + diag), 0.0), upper)
            w += (alpha[i] - old) * s[i] * xi


@pytest.mark.parametrize("loss", [0, 1])
def test_kernel_first_pass_equals_numpy_algorithm_1(small, loss):
    """With no shrinking possible on the first pass, the kernel is Algorithm 1 iterate by iterate."""
    X, y = small
    X = X[:500]
    yc = (y[:500] > 0).astype(np.int32)
    s = np.where(yc == 1, 1.0, -1.0)
    indptr = X.indptr.astype(np.int64)
    sq = np.empty(X.shape[0])
    row_sqnorms(indptr, X.data, sq)
    C = 0.5
    w, alpha = np.zeros(123), np.zeros(X.shape[0])
    state, index = kernel.new_state(X.shape[0])
    kernel.dcd_passes(indptr, X.indices, X.data, yc, 1, sq, w, -1.0, 123, alpha, index, state,
                      loss, np.full(X.shape[0], C), 1e-3, 1, 42)
    # the kernel leaves its permutation in `index`: replay it in NumPy
    w_ref, a_ref = np.zeros(123), np.zeros(X.shape[0])
    diag, upper = (0.0, C) if loss == 0 else (0.5 / C, np.inf)
    _numpy_dcd_pass(X, s, a_ref, w_ref, index.copy(), diag, upper)
    np.testing.assert_allclose(alpha, a_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-12)
    # w = Σ αᵢ yᵢ xᵢ (13) holds exactly
    np.testing.assert_allclose(w, X.T.astype(np.float64) @ (alpha * s), atol=1e-10)


def test_overwritten_store_is_not_served_from_worker_caches(client, a9a, tmp_path):
    """Workers cache blocks by URL, name and checksums: a store replaced at the same URL
    (other rows, fewer features) trains on its new content."""
    X, y = a9a
    url = str(tmp_path / "same.zarr")
    ingest((X[:3000], y[:3000]), url)
    train(url, eps=0.1, client=client)
    X2, y2 = X[3000:6000, :60], y[3000:6000]
    ingest((X2, y2), url, overwrite=True)
    model = train(url, eps=1e-3, gap_tol=1e-4, max_rounds=500, client=client)
    assert model.w.shape == (60,)
    p = primal_objective(model.w, X2, y2, "squared_hinge")
    assert abs(p - model.summary["primal_objective"]) <= 1e-9 * p
