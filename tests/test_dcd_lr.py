"""Dual coordinate descent for logistic regression (LIBLINEAR -s 7): the kernel's optimality
conditions, LIBLINEAR's optimum, the duality gap, one-vs-rest probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.workers.kernels import dcd_lr
from distsvm.workers.kernels.linear import row_sqnorms

from .conftest import DATA, liblinear_optimum, load_xy, primal_objective
from .test_multiclass import liblinear_model, ovr_objectives


@pytest.fixture(scope="module")
def small(a9a):
    X, y = a9a
    return X[:4000], y[:4000]


def test_kernel_meets_the_optimality_conditions(small):
    """At the dual optimum αᵢ = Cᵢ σ(−yᵢwᵀxᵢ) with w = Σ αᵢyᵢxᵢ (the primal-dual link of
    logistic regression), and the dual value equals −P(w)."""
    X, y = small
    C = 0.5
    sq = np.empty(X.shape[0])
    row_sqnorms(X.indptr, X.data, sq)
    w = np.zeros(X.shape[1])
    alpha, alpha_c = np.zeros(X.shape[0]), np.zeros(X.shape[0])
    upper = np.full(X.shape[0], C)
    labels = (y > 0).astype(np.int32)
    gmax, _, converged, _, entropy = dcd_lr.lr_passes(
        X.indptr, X.indices, X.data, labels, 1, sq, w, -1.0, X.shape[1], alpha, alpha_c, upper,
        np.arange(X.shape[0], dtype=np.int32), 1e-2, 1e-8, 1000, 3)
    assert converged and gmax < 1e-8
    s = np.where(y > 0, 1.0, -1.0)
    np.testing.assert_allclose(w, X.T.astype(np.float64) @ (alpha * s), atol=1e-10)
    np.testing.assert_allclose(alpha + alpha_c, C, rtol=1e-15)
    m = s * (X.astype(np.float64) @ w)
    np.testing.assert_allclose(alpha, C / (1 + np.exp(m)), rtol=1e-6)
    p = primal_objective(w, X, y, "logistic", C)
    assert -(0.5 * w @ w + entropy) == pytest.approx(p, rel=1e-9)


def test_matches_liblinear_s7_and_certifies_gap(client, small, tmp_path):
    """One block: a round is then one LIBLINEAR iteration (with several blocks this
    problem needs many more rounds, see docs/solvers/multiclass.md)."""
    X, y = small
    store = ingest((X, y), str(tmp_path / "a.zarr"))
    _, p_ref = liblinear_optimum(X, y, "logistic", eps=1e-6)
    model = train(store, solver="dcd", loss="logistic", eps=1e-3, max_rounds=500,
                  client=client)
    s = model.summary
    p = primal_objective(model.w, X, y, "logistic")
    assert s["converged"] and abs(p - s["primal_objective"]) <= 1e-9 * p
    assert abs(p - p_ref) <= 1e-3 * p_ref
    assert s["dual_objective"] <= p_ref * (1 + 1e-9) and 0 <= s["duality_gap"] <= 1e-3 * p
    assert s["history"][-1]["pg_violation"] < 1e-3  # LIBLINEAR's rule: max |g'| < eps


def test_one_vs_rest_with_bias_matches_liblinear(client, tmp_path):
    from liblinear.liblinearutil import predict as ll_predict

    (X, y), (Xt, yt) = load_xy(DATA / "dna.scale.xz", 180), load_xy(DATA / "dna.scale.t.xz", 180)
    store = ingest((X, y), str(tmp_path / "dna.zarr"))
    m, W_ref = liblinear_model(X, y, "-s 7 -c 0.1 -e 1e-4 -B 1")
    model = train(store, solver="dcd", loss="logistic", C=0.1, bias=1.0, eps=1e-3,
                  client=client)
    np.testing.assert_allclose(ovr_objectives(model.w, X, y, "logistic", 0.1, 1.0),
                               ovr_objectives(W_ref, X, y, "logistic", 0.1, 1.0), rtol=1e-3)
    _, _, ref = ll_predict(yt, Xt.astype(np.float64), m, "-b 1 -q")
    np.testing.assert_allclose(model.predict_proba(Xt),
                               np.asarray(ref)[:, np.argsort(m.get_labels())], atol=2e-3)
