"""Crammer–Singer (LIBLINEAR -s 4): the optimum and accuracy against LIBLINEAR's, the duality
gap, the sub-problem solver against a generic QP solution, model files."""

from __future__ import annotations

import numpy as np
import pytest

from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.model import export_liblinear, load_model, save_model
from distsvm.workers.kernels import crammer_singer as kernel

from .conftest import DATA, load_xy
from .test_multiclass import accuracy, liblinear_model


def cs_primal(W, X, y, C, bias=-1.0):
    """½‖W‖² + C Σᵢ max(0, maxₘ≠yᵢ 1 + wₘᵀxᵢ − w_{yᵢ}ᵀxᵢ) of (14), in NumPy; W is K × n [+1]."""
    k = np.searchsorted(np.unique(y), y)
    S = X.astype(np.float64) @ W[:, : X.shape[1]].T
    if bias >= 0:
        S += W[:, -1] * bias
    margins = 1.0 + S - S[np.arange(len(k)), k][:, None]
    margins[np.arange(len(k)), k] = 0.0
    return 0.5 * float(np.sum(W * W)) + C * float(np.sum(np.maximum(0.0, margins.max(axis=1))))


@pytest.fixture(scope="module")
def dna():
    return load_xy(DATA / "dna.scale.xz", 180), load_xy(DATA / "dna.scale.t.xz", 180)


def test_sub_problem_is_the_qp_optimum():
    """E.3's closed form against the KKT conditions of (19): minimize
    Σ ½A αₘ² + Bₘαₘ s.t. Σ αₘ = 0, αₘ ≤ Cᵢᵐ; optimal iff αₘ = min(Cᵢᵐ, (β − Bₘ)/A) for one β
    with Σ αₘ = 0."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        K = int(rng.integers(2, 8))
        A, C, yi = float(rng.uniform(0.1, 5)), float(rng.uniform(0.01, 2)), int(rng.integers(K))
        B = rng.normal(size=K)
        out, D = np.empty(K), np.empty(K)
        kernel._sub_problem(A, yi, C, K, B, out, D)
        bounds = np.where(np.arange(K) == yi, C, 0.0)
        assert abs(out.sum()) < 1e-10 and np.all(out <= bounds + 1e-12)
        # the multiplier β: (β − Bₘ)/A at every free αₘ, and ≥ A·bound + Bₘ at the bound ones
        free = out < bounds - 1e-12
        beta = A * out[free] + B[free]
        assert np.ptp(beta) < 1e-9
        b = beta[0] if len(beta) else None
        if b is not None:
            assert np.all(b >= A * bounds[~free] + B[~free] - 1e-9)


@pytest.mark.parametrize("block_rows", [None, pytest.param(700, marks=pytest.mark.slow)])
def test_matches_liblinear_s4(client, dna, tmp_path, block_rows):
    (X, y), (Xt, yt) = dna
    _, W_ref = liblinear_model(X, y, "-s 4 -c 0.1 -e 1e-4")
    p_ref = cs_primal(W_ref, X, y, 0.1)
    store = ingest((X, y), str(tmp_path / "dna.zarr"), block_rows=block_rows)
    # several blocks: LIBLINEAR's rule stops ~1e-3 above the optimum, so the gap decides
    model = train(store, solver="crammer_singer", loss="crammer_singer", C=0.1,
                  eps=1e-9 if block_rows else 0.003, gap_tol=5e-4 if block_rows else 0.0,
                  max_rounds=2000, client=client)
    s = model.summary
    assert model.w.shape == (3, 180) and s["converged"]
    p = cs_primal(model.w, X, y, 0.1)
    assert abs(p - s["primal_objective"]) <= 1e-9 * p  # the reported objective is the true one
    assert abs(p - p_ref) <= 1e-3 * p_ref, (p, p_ref)
    assert s["dual_objective"] <= p_ref * (1 + 1e-9)  # weak duality
    if block_rows:
        assert s["duality_gap"] <= 5e-4 * p
    assert abs(accuracy(model.w, Xt, yt) - accuracy(W_ref, Xt, yt)) <= 0.003
    np.testing.assert_array_equal(model.predict(Xt), np.unique(y)[np.argmax(
        Xt.astype(np.float64) @ model.w.T, axis=1)])


def test_model_round_trip_with_bias_and_liblinear(client, dna, tmp_path):
    from liblinear.liblinearutil import load_model as ll_load
    from liblinear.liblinearutil import predict as ll_predict

    (X, y), (Xt, yt) = dna
    store = ingest((X, y), str(tmp_path / "dna.zarr"))
    model = train(store, solver="crammer_singer", loss="crammer_singer", C=0.1, bias=1.0,
                  eps=0.01, client=client)
    assert model.w.shape == (3, 181)
    _, W_ref = liblinear_model(X, y, "-s 4 -c 0.1 -B 1 -e 1e-4")
    assert cs_primal(model.w, X, y, 0.1, 1.0) <= cs_primal(W_ref, X, y, 0.1, 1.0) * 1.01
    save_model(model, tmp_path / "m")
    assert load_model(tmp_path / "m").solver == "crammer_singer"
    export_liblinear(model, tmp_path / "m.txt")
    assert "MCSVM_CS" in (tmp_path / "m.txt").read_text()
    labels, _, _ = ll_predict(yt, Xt.astype(np.float64), ll_load(str(tmp_path / "m.txt")), "-q")
    np.testing.assert_array_equal(labels, model.predict(Xt))
    back = load_model(tmp_path / "m.txt")
    np.testing.assert_allclose(back.w, model.w, rtol=1e-15)


def test_reaches_liblinears_optimum_where_it_takes_over_1000_rounds(client, tmp_path):
    """a9a (2 classes, 32,561 rows) at C = 3: LIBLINEAR's -s 4 takes ~2,400 outer iterations
    at the default eps, as news20 (20 classes) takes ~21,000; a round over the one joined
    block is one of them, so the default round limit is LIBLINEAR's max_iter (100000), not
    the dual CD's 1000 at which the run stopped unconverged.  The objective is within 1e-3
    of LIBLINEAR's optimum (-e 1e-4), the training accuracy within 0.3 points of its
    default run's."""
    X, y = load_xy(DATA / "a9a.xz", 123)
    _, W_opt = liblinear_model(X, y, "-s 4 -c 3 -e 1e-4")
    _, W_ref = liblinear_model(X, y, "-s 4 -c 3")
    p_opt = cs_primal(W_opt, X, y, 3.0)
    store = ingest((X, y), str(tmp_path / "a9a.zarr"))
    model = train(store, solver="crammer_singer", loss="crammer_singer", C=3.0, client=client)
    s = model.summary
    p = cs_primal(model.w, X, y, 3.0)
    assert abs(p - p_opt) <= 1e-3 * p_opt, (p, p_opt)
    assert s["converged"] and 1000 < s["rounds"] < 10000, s
    assert model.params["max_rounds"] == 100000
    assert abs(p - s["primal_objective"]) <= 1e-9 * p
    assert s["dual_objective"] <= p_opt * (1 + 1e-9)  # weak duality
    assert abs(accuracy(model.w, X, y) - accuracy(W_ref, X, y)) <= 0.003


def test_rounds_run_on_their_worker_as_from_the_coordinator(client, dna, tmp_path):
    """Three blocks visited block-wise: on one worker the rounds run in batches on it
    (:func:`distsvm.workers.crammer_singer.batch`), on two each round is a chain of tasks from the
    coordinator; the block orders, seeds and stopping rule are the same, so are the rounds,
    the duals (the batch's kept ‖W‖² against the coordinator's sum) and W."""
    (X, y), _ = dna
    store = ingest((X, y), str(tmp_path / "dna.zarr"), block_rows=700)
    kw = dict(solver="crammer_singer", loss="crammer_singer", C=0.1, eps=0.01, join_blocks=False,
              seed=3, client=client)
    one, two = (train(store, n_workers=n, **kw) for n in (1, 2))
    assert one.summary["converged"] and one.summary["rounds"] == two.summary["rounds"]
    assert any("primal" not in row for row in one.summary["history"])  # batched: not measured
    np.testing.assert_allclose(one.w, two.w, rtol=0, atol=1e-12)
    for a, b in zip(one.summary["history"], two.summary["history"], strict=True):
        assert a["dual"] == pytest.approx(b["dual"], rel=1e-12)
        assert a["pg_violation"] == pytest.approx(b["pg_violation"], rel=1e-12)
        assert a["active"] == b["active"]
