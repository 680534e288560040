"""L1- and L2-loss SVR by dual coordinate descent (LIBLINEAR -s 13, -s 12) against
LIBLINEAR 2.50 on abalone_scale: the kernel on NumPy CSR arrays (the whole problem as one
block, as LIBLINEAR runs it), then the distributed solver on regression stores."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from distsvm.workers import losses
from distsvm.workers.kernels import svr_dual as K
from distsvm.workers.kernels.linear import row_sqnorms

from .conftest import DATA, load_xy

ABALONE = DATA / "abalone_scale.xz"
TYPES = {"squared_epsilon_insensitive": 12, "epsilon_insensitive": 13}
P = 0.1  # LIBLINEAR's default -p


def abalone_rows(n: int | None = None):
    """The first ``n`` rows of the shipped abalone_scale (real targets, 8 features)."""
    X, y = load_xy(ABALONE, 8)
    return X[:n], y[:n]


@pytest.fixture(scope="module")
def abalone():
    return abalone_rows()


def svr_primal(w, X, y, loss, C=1.0, p=P, bias=-1.0):
    """½‖w‖² + C Σ ξ(wᵀxᵢ − yᵢ) of A.6 (9), in NumPy (float64), and the mean squared error."""
    r = X.astype(np.float64) @ w[:X.shape[1]] - y
    if bias >= 0:
        r = r + w[X.shape[1]] * bias
    d = np.maximum(0.0, np.abs(r) - p)
    xi = d if loss == "epsilon_insensitive" else d * d
    return 0.5 * float(w @ w) + C * float(xi.sum()), float(np.mean(r * r))


def liblinear_svr(X, y, loss, C=1.0, p=P, bias=-1.0, eps=1e-6, quiet=True):
    from liblinear.liblinearutil import train

    m = train(y, X.astype(np.float64),
              f"-s {TYPES[loss]} -p {p} -c {C} -e {eps} -B {bias}" + (" -q" if quiet else ""))
    return np.array([m.w[i] for i in range(X.shape[1] + (1 if bias >= 0 else 0))])


def kernel_run(X, y, loss, C=1.0, p=P, bias=-1.0, eps=1e-6, max_iter=1000, seed=1):
    """The kernel on the whole problem, one pass per call as LIBLINEAR's iterations:
    (w, β, passes, dual objective)."""
    n, d = X.shape
    w, beta = np.zeros(d + (1 if bias >= 0 else 0)), np.zeros(n)
    state, index = K.new_state(n)
    sq = np.empty(n)
    row_sqnorms(X.indptr, X.data, sq)
    cost = np.full(n, C)
    for it in range(1, max_iter + 1):
        out = K.svr_passes(X.indptr, X.indices, X.data, y, sq, w, bias, d, beta, index, state,
                           losses.code(loss), cost, p, eps, 1, seed + it)
        if out[3]:
            break
    return w, beta, it, out[4] - 0.5 * float(w @ w) - 0.5 * out[5]


@pytest.mark.parametrize("loss", list(TYPES))
@pytest.mark.parametrize("bias", [-1.0, 1.0])
def test_kernel_reaches_liblinears_optimum(abalone, loss, bias):
    """Tight eps: the primal objective equals LIBLINEAR's within 1e-4 relative (-s 12: 1e-8),
    the duality gap closes, and the training MSE equals LIBLINEAR's (-s 12: 1e-6 relative;
    -s 13: 1e-3, LIBLINEAR stopping at its 300 iterations short of its optimum)."""
    X, y = abalone
    w, beta, _, dual = kernel_run(X, y, loss, bias=bias, eps=1e-6)
    ours, mse = svr_primal(w, X, y, loss, bias=bias)
    runs = []
    for k in range(5):  # -s 13 stops at 300 iterations, where its permutation (C's rand(),
        ctypes.CDLL(None).srand(k)  # seeded here, not by the tests before) moves it
        runs.append(svr_primal(liblinear_svr(X, y, loss, bias=bias), X, y, loss, bias=bias))
    theirs, mse_ll = max(runs)
    tol = 1e-8 if loss == "squared_epsilon_insensitive" else 1e-4
    assert ours == pytest.approx(theirs, rel=tol)
    assert ours <= theirs * (1 + 1e-6)  # LIBLINEAR stops at 300 iterations for -s 13
    assert (ours - dual) / ours < 1e-5  # the gap, from the kernel's own dual terms
    # w = Σ βᵢ x̂ᵢ, |βᵢ| ≤ U
    Xb = X.astype(np.float64).toarray()
    if bias >= 0:
        Xb = np.hstack([Xb, np.full((X.shape[0], 1), bias)])
    np.testing.assert_allclose(Xb.T @ beta, w, rtol=1e-9, atol=1e-9)
    if loss == "epsilon_insensitive":
        assert np.abs(beta).max() <= 1.0
        if bias < 0:  # LIBLINEAR's 300 iterations leave its w 2e-4 (relative MSE) short
            assert mse == pytest.approx(mse_ll, rel=1e-3)
    else:
        assert mse == pytest.approx(mse_ll, rel=1e-6)


def _l1_svr_dual_reference(X, y, C=1.0, p=P, bias=-1.0):
    """-s 13's dual, min ½‖X̂ᵀβ‖² − yᵀβ + p‖β‖₁ over |βᵢ| ≤ C (A.6 (10)), by SciPy's L-BFGS-B
    on β = a − b, a, b ∈ [0, C]: an optimizer independent of ours and of LIBLINEAR's, whose
    -s 13 stops at its 300 iterations.  Returns (w = X̂ᵀβ, the dual's value)."""
    from scipy.optimize import minimize

    Xd = X.astype(np.float64).toarray()
    if bias >= 0:
        Xd = np.hstack([Xd, np.full((X.shape[0], 1), bias)])
    n = Xd.shape[0]

    def fg(z):
        w = Xd.T @ (z[:n] - z[n:])
        g = Xd @ w - y
        return 0.5 * w @ w - y @ (z[:n] - z[n:]) + p * z.sum(), np.concatenate([g + p, p - g])

    r = minimize(fg, np.zeros(2 * n), jac=True, method="L-BFGS-B", bounds=[(0, C)] * (2 * n),
                 options={"maxiter": 100000, "maxfun": 200000, "ftol": 1e-16, "gtol": 1e-12})
    return Xd.T @ (r.x[:n] - r.x[n:]), -r.fun


@pytest.mark.parametrize("bias", [-1.0, 1.0])
def test_l1_svr_mse_equals_an_independent_optimum(abalone, bias):
    """-s 13 at tight eps: the training MSE within 1e-4 relative of the optimum's, which an
    independent solver certifies by its own duality gap (LIBLINEAR's -s 13 cannot: it stops
    at 300 iterations, 3-5e-4 away in MSE)."""
    X, y = abalone
    loss = "epsilon_insensitive"
    w_ref, dual_ref = _l1_svr_dual_reference(X, y, bias=bias)
    f_ref, mse_ref = svr_primal(w_ref, X, y, loss, bias=bias)
    assert (f_ref - dual_ref) / f_ref < 1e-6  # the reference is an optimum
    w, _, _, dual = kernel_run(X, y, loss, bias=bias, eps=1e-8, max_iter=5000)
    f, mse = svr_primal(w, X, y, loss, bias=bias)
    assert (f - dual) / f < 1e-6
    assert mse == pytest.approx(mse_ref, rel=1e-4)


def test_kernel_rows_of_zeros(abalone):
    """Rows xᵢ = 0 (H = 0 for the L1 loss without bias: LIBLINEAR's step is ±∞, clipped to
    ±C; inside the tube βᵢ stays 0): LIBLINEAR's objective still, within the spread of its
    own 300-iteration stops over its permutations (srand(0..4): 1034.7234–1034.7310; the
    test compared with one unseeded run, whose permutation depended on the tests run
    before it in the process, and once failed on its best draw)."""
    import ctypes

    import scipy.sparse as sp

    X, y = abalone
    X = sp.vstack([X[:500], sp.csr_matrix((3, X.shape[1]), dtype=np.float32)]).tocsr()
    y = np.append(y[:500], [5.0, 0.05, -3.0])
    loss = "epsilon_insensitive"
    w, beta, _, _ = kernel_run(X, y, loss, eps=1e-6)
    np.testing.assert_array_equal(beta[-3:], [1.0, 0.0, -1.0])
    f = svr_primal(w, X, y, loss)[0]
    libc, theirs = ctypes.CDLL(None), []
    for k in range(5):  # its permutations come from C's rand(): seeded, not the process's
        libc.srand(k)
        theirs.append(svr_primal(liblinear_svr(X, y, loss), X, y, loss)[0])  # 300 iterations
    assert min(theirs) * (1 - 1e-4) <= f <= max(theirs) * (1 + 1e-9)


@pytest.mark.parametrize("loss", list(TYPES))
def test_kernel_default_eps_stops_like_liblinear(abalone, loss, capfd):
    """eps = 0.1 (LIBLINEAR's default for -s 12/13): the relative Σ-violation rule stops the
    kernel within a few iterations of LIBLINEAR's count, at a primal objective as close."""
    X, y = abalone
    capfd.readouterr()
    w_ll = liblinear_svr(X, y, loss, eps=0.1, quiet=False)
    iters = int(re.search(r"#iter = (\d+)", capfd.readouterr().out).group(1))
    w, _, ours, _ = kernel_run(X, y, loss, eps=0.1)
    best, _ = svr_primal(liblinear_svr(X, y, loss), X, y, loss)
    assert abs(ours - iters) <= max(3, iters // 2), (ours, iters)
    gap_ours = svr_primal(w, X, y, loss)[0] / best - 1
    gap_ll = svr_primal(w_ll, X, y, loss)[0] / best - 1
    assert gap_ours < max(0.05, 3 * gap_ll), (gap_ours, gap_ll)


# ---------------------------------------------------------------- the distributed solver


@pytest.fixture(scope="module")
def svr_stores(tmp_path_factory):
    """abalone as regression stores of 5 blocks and of 1 block."""
    from distsvm.ingest import ingest

    tmp = tmp_path_factory.mktemp("svr")
    return (ingest(str(ABALONE), str(tmp / "many.zarr"), block_rows=1000, regression=True),
            ingest(str(ABALONE), str(tmp / "one.zarr"), regression=True))


def _train(store, client, loss, **kw):
    from distsvm import jobs

    return jobs.train(store, client=client, solver="dcd", loss=loss, **kw)


@pytest.mark.parametrize("loss", list(TYPES))
def test_train_reaches_liblinears_optimum(abalone, svr_stores, client, loss):
    """jobs.train at tight eps on the 5-block store (joined into one block on one worker):
    LIBLINEAR's primal objective within 1e-4 relative (-s 12: 1e-7), the duality gap
    closed, the training MSE LIBLINEAR's, the model's objective what the rounds measured."""
    X, y = abalone
    many, _ = svr_stores
    model = _train(many, client, loss, eps=1e-5, max_rounds=2000)
    s = model.summary
    f, mse = svr_primal(model.w, X, y, loss)
    best, mse_ll = svr_primal(liblinear_svr(X, y, loss), X, y, loss)
    assert s["converged"]
    assert f == pytest.approx(s["primal_objective"], rel=1e-9)
    tight = loss == "squared_epsilon_insensitive"
    assert f == pytest.approx(best, rel=1e-7 if tight else 1e-4)
    assert s["duality_gap"] / f < (1e-8 if tight else 1e-4)
    assert s["history"][-1]["train_mse"] == pytest.approx(mse, rel=1e-9)
    assert mse == pytest.approx(mse_ll, rel=1e-6 if tight else 1e-3)


def test_s12_switches_to_the_primal_newton_solver_at_its_round_limit(abalone, svr_stores,
                                                                    client):
    """LIBLINEAR's -s 12 (linear.cpp train_one): dual CD stopped by its round limit goes on
    with -s 11's Newton solver from its w at 0.001·eps; the end is -s 11's optimum."""
    from distsvm.errors import ConvergenceWarning

    X, y = abalone
    many, _ = svr_stores
    loss = "squared_epsilon_insensitive"
    with pytest.warns(ConvergenceWarning):  # the dual's limit
        model = _train(many, client, loss, eps=1e-3, max_rounds=100, primal_switch=3)
    s = model.summary
    f, _ = svr_primal(model.w, X, y, loss)
    assert s["converged"] and s["rounds"] > 3 and model.params["primal_switch"] == 3
    assert f == pytest.approx(s["primal_objective"], rel=1e-9)
    best, _ = svr_primal(liblinear_svr(X, y, loss), X, y, loss)
    assert best * (1 - 1e-9) <= f <= best * (1 + 1e-7)


@pytest.mark.parametrize("loss", list(TYPES))
def test_default_eps_stops_with_liblinears_rule(abalone, svr_stores, client, loss, capfd):
    """eps 0.1 (the registry's default, LIBLINEAR's for -s 12/13): the run stops on
    Σ violation ≤ 0.1 · round 1's (its rows' pg_violation) at a round count near
    LIBLINEAR's iteration count."""
    X, y = abalone
    capfd.readouterr()
    liblinear_svr(X, y, loss, eps=0.1, quiet=False)
    iters = int(re.search(r"#iter = (\d+)", capfd.readouterr().out).group(1))
    model = _train(svr_stores[0], client, loss)
    s = model.summary
    assert model.params["eps"] == 0.1 and s["converged"]
    assert s["history"][-1]["pg_violation"] <= 0.1 < s["history"][-2]["pg_violation"] or \
        s["history"][-2]["active"] < 1.0  # the last round re-checked the unshrunk rows
    assert abs(s["rounds"] - iters) <= max(3, iters // 2), (s["rounds"], iters)


def test_one_block_equals_many(svr_stores, client):
    """The joined 5-block store and the 1-block store take the same path (bit for bit)."""
    many, one = svr_stores
    loss = "squared_epsilon_insensitive"
    a = _train(many, client, loss, eps=1e-3)
    b = _train(one, client, loss, eps=1e-3)
    np.testing.assert_array_equal(a.w, b.w)
    assert a.summary["rounds"] == b.summary["rounds"] > 20


@pytest.mark.slow  # a cluster of its own
def test_one_worker_equals_two(svr_stores, client):
    """On 1 worker the run takes the 2-worker run's path (bit for bit)."""
    from .conftest import local_client

    many, _ = svr_stores
    loss = "epsilon_insensitive"
    a = _train(many, client, loss, eps=1e-3)
    with local_client(1) as c1:
        solo = _train(many, c1, loss, eps=1e-3)
    np.testing.assert_array_equal(solo.w, a.w)
    assert solo.summary["rounds"] == a.summary["rounds"]


@pytest.mark.slow  # the conformance cases cover the block-wise path by default
def test_block_wise_svr_certifies_its_gap(abalone, svr_stores, client):
    """join_blocks=False (the chained rounds over 5 blocks on 2 workers) with gap_tol: the
    certified objective is LIBLINEAR's within what the gap certifies."""
    X, y = abalone
    loss = "epsilon_insensitive"
    model = _train(svr_stores[0], client, loss, C=0.1, eps=1e-9, gap_tol=1e-4,
                   join_blocks=False, max_rounds=1000)
    s = model.summary
    best, _ = svr_primal(liblinear_svr(X, y, loss, C=0.1, eps=1e-8), X, y, loss, C=0.1)
    assert s["converged"] and s["duality_gap"] <= 1e-4 * s["primal_objective"]
    assert best * (1 - 1e-6) <= s["primal_objective"] <= best * (1 + 1e-4)


def test_svr_refuses_parallel_and_reads_class_stores_as_targets(svr_stores, client, tmp_path):
    """CoCoA modes are not offered for SVR; SVR on a store of classes trains on the class
    values as numbers (LIBLINEAR's -s 12 on any file; issue 29.3, was one refusal line)."""
    from distsvm.ingest import ingest

    with pytest.raises(ValueError, match="'parallel'"):
        _train(svr_stores[0], client, "epsilon_insensitive", parallel="add")
    classes = ingest(str(DATA / "dna.scale.t.xz"), str(tmp_path / "dna.zarr"))
    model = _train(classes, client, "squared_epsilon_insensitive")
    assert model.is_regression and model.summary["n_rows"] == classes.meta.n_rows


@pytest.mark.parametrize("loss", list(TYPES))
def test_linear_svr_dual_is_liblinears_with_its_p_and_bias(abalone, client, loss):
    """distsvm.LinearSVR(dual=True) runs -s 12/13 here: with epsilon = 0.5 (LIBLINEAR's -p)
    and an intercept (-B 1), LIBLINEAR's objective and predictions."""
    from distsvm import LinearSVR

    X, y = abalone
    est = LinearSVR(loss=loss, dual=True, epsilon=0.5, C=0.1, tol=1e-5, max_iter=2000,
                    scheduler=client.scheduler.address).fit(X, y)
    w = np.append(est.coef_, est.intercept_)
    f = svr_primal(w, X, y, loss, C=0.1, p=0.5, bias=1.0)[0]
    w_ll = liblinear_svr(X, y, loss, C=0.1, p=0.5, bias=1.0, eps=1e-8)
    best = svr_primal(w_ll, X, y, loss, C=0.1, p=0.5, bias=1.0)[0]
    assert f == pytest.approx(best, rel=1e-5)
    np.testing.assert_allclose(est.predict(X), X @ w_ll[:-1] + w_ll[-1], rtol=0, atol=2e-2)


def test_joined_run_resumes_from_its_checkpoint(svr_stores, client, tmp_path):
    """The batched path (the store joined on one worker): a run stopped after round 3
    resumes from its round-2 checkpoint to the uninterrupted w, with the first round's Σ
    violation (LIBLINEAR's Gnorm1_init) read back from the checkpoint's history."""
    import io

    from distsvm.checkpoint import Checkpointer
    from distsvm.progress import Progress

    many, _ = svr_stores
    loss, kw = "epsilon_insensitive", dict(eps=1e-2, seed=4)
    ref = _train(many, client, loss, **kw)
    ck = Checkpointer(tmp_path, 2, {"case": "svr"})
    from distsvm.errors import ConvergenceWarning

    with pytest.warns(ConvergenceWarning, match=r"summed violation \(relative to round 1\)"):
        _train(many, client, loss, checkpoint=ck, max_rounds=3, **kw)
    log = Progress(stream=io.StringIO())
    resumed = _train(many, client, loss, checkpoint=ck, progress=log, **kw)
    assert "resuming from the checkpoint of round 2" in log.stream.getvalue()
    assert resumed.summary["rounds"] == ref.summary["rounds"] > 3
    np.testing.assert_array_equal(resumed.w, ref.w)


def test_instance_weights_are_repeated_rows(abalone, client, tmp_path):
    """Instance weights (Cᵢ = C·weight, Uᵢ = Cᵢ / Dᵢᵢ = 1/(2Cᵢ)): a store of integer weights
    trains to the optimum of the store with each row repeated that many times."""
    from distsvm.ingest import ingest

    X, y = abalone
    X, y = X[:400], y[:400]
    sw = np.random.default_rng(3).integers(1, 4, len(y)).astype(np.float64)
    rows = np.repeat(np.arange(len(y)), sw.astype(int))
    weighted = ingest((X, y), str(tmp_path / "w.zarr"), sample_weight=sw, regression=True)
    repeated = ingest((X[rows], y[rows]), str(tmp_path / "r.zarr"), regression=True)
    for loss in TYPES:
        a = _train(weighted, client, loss, eps=1e-6, max_rounds=3000)
        b = _train(repeated, client, loss, eps=1e-6, max_rounds=3000)
        fa = svr_primal(a.w, X[rows], y[rows], loss)[0]
        assert fa == pytest.approx(a.summary["primal_objective"], rel=1e-9)
        assert fa == pytest.approx(b.summary["primal_objective"], rel=1e-6), loss


@pytest.mark.slow  # ../shared data
@pytest.mark.parametrize("loss", list(TYPES))
def test_cpusmall_reaches_liblinears_optimum(client, tmp_path, loss):
    """cpusmall_scale (8,192 × 12): LIBLINEAR's objective at tight eps (-s 12: 1e-8; -s 13:
    1e-4, and not above LIBLINEAR's 300-iteration point), the MSE likewise."""
    from distsvm.ingest import ingest

    from .conftest import shared_dataset

    path = shared_dataset("regression/cpusmall_scale")
    X, y = load_xy(path, 12)
    store = ingest(str(path), str(tmp_path / "cpusmall.zarr"), block_rows=2000,
                   regression=True)
    model = _train(store, client, loss, eps=1e-6, max_rounds=3000)
    f, mse = svr_primal(model.w, X, y, loss)
    best, mse_ll = svr_primal(liblinear_svr(X, y, loss), X, y, loss)
    if loss == "squared_epsilon_insensitive":
        assert f == pytest.approx(best, rel=1e-8) and mse == pytest.approx(mse_ll, rel=1e-6)
    else:
        assert best * (1 - 1e-4) <= f <= best * (1 + 1e-9)
        assert mse == pytest.approx(mse_ll, rel=1e-2)


@pytest.mark.slow  # a cluster of its own
def test_a_killed_owner_restarts_the_svr_problem_elsewhere(svr_stores, monkeypatch):
    """The joined block's worker is killed mid-run (the batched path, RELOAD): the SVR
    problem restarts from β = 0 on the other worker and takes its no-fault path again."""
    from distsvm.solvers import dcd

    from .conftest import local_client
    from .test_joined import _KillOwner

    monkeypatch.setattr(dcd, "BATCH_SECONDS", 0.0)  # one round per batch
    loss, kw = "squared_epsilon_insensitive", dict(eps=1e-3, seed=3)
    with local_client(2) as c:
        ref = _train(svr_stores[0], c, loss, **kw)
        c.run(__import__("distsvm.workers.blocks").workers.blocks.clear_cache)
        killer = _KillOwner(c, 5, 0)
        model = _train(svr_stores[0], c, loss, progress=killer, **kw)
    log = killer.stream.getvalue()
    assert f"worker {killer.killed} left the cluster; its " in log, log[-2000:]
    assert "the problem restarts from alpha = 0 there" in log
    np.testing.assert_array_equal(model.w, ref.w)
    assert model.summary["rounds"] == ref.summary["rounds"]
