"""SVM-ALM: the e-update against brute force, optima against independent references, distribution."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from distsvm.workers.kernels import alm as kernel


def _F(e, t, yi, gamma, p):
    return gamma * max(0.0, yi * e) ** p + 0.5 * (e - t) ** 2


@pytest.mark.parametrize("p", [1.0, 2.0, 1.5, 1.1, 1.9, 3.0])
def test_e_update_minimizes_F_against_brute_force(p):
    """(10)-(13): the kernel's eᵢ against a dense grid refined by bounded scalar minimization."""
    rng = np.random.default_rng(int(p * 10))
    for _ in range(300):
        t = rng.normal(scale=rng.choice([0.01, 1.0, 100.0]))
        yi = rng.choice([-1.0, 1.0])
        gamma = 10.0 ** rng.uniform(-4, 3)
        e = kernel.e_update(t, yi, gamma, p)
        lo, hi = min(0.0, t) - 1.0, max(0.0, t) + 1.0
        grid = np.linspace(lo, hi, 20001)
        vals = gamma * np.maximum(0.0, yi * grid) ** p + 0.5 * (grid - t) ** 2
        j = int(np.argmin(vals))
        ref = scipy.optimize.minimize_scalar(
            _F, bounds=(grid[max(j - 1, 0)], grid[min(j + 1, len(grid) - 1)]),
            args=(t, yi, gamma, p), method="bounded", options={"xatol": 1e-13})
        best = min(ref.fun, vals[j], _F(0.0, t, yi, gamma, p))
        f = _F(e, t, yi, gamma, p)
        assert f <= best + 1e-12 * (1.0 + abs(best)), (t, yi, gamma, p, e, ref.x)
        # and it is the minimizer, not merely as good: F is strongly convex (modulus 1)
        assert abs(e - ref.x) <= 1e-5 * (1.0 + abs(t)) or f < ref.fun


@pytest.mark.parametrize("p", [1.2, 1.5, 1.8, 2.5])
def test_lp_root_solves_eq_11_to_stated_precision(p):
    rng = np.random.default_rng(3)
    for _ in range(500):
        s = 10.0 ** rng.uniform(-6, 4)
        gamma = 10.0 ** rng.uniform(-5, 5)
        u = kernel.lp_root(s, gamma, p)
        assert 0.0 <= u <= s
        # the exact root by a bracketing solver at full precision
        ref = scipy.optimize.brentq(lambda v: p * gamma * v ** (p - 1) + v - s, 0.0, s,
                                    xtol=1e-300, rtol=1e-15)
        assert abs(u - ref) <= 2 * kernel.REL_TOL * s + 1e-300, (s, gamma, p, u, ref)


def test_closed_forms_equal_the_root_of_eq_11():
    """(12) and (13) agree with the general root-finder for p → 1⁺ and p → 2."""
    for t, yi, gamma in [(2.0, 1.0, 0.5), (-3.0, -1.0, 0.1), (0.3, 1.0, 1.0), (5.0, 1.0, 4.9)]:
        s = yi * t  # > 0 in every case: the branch where (11) is solved
        assert kernel.e_update(t, yi, gamma, 2.0) == pytest.approx(
            yi * kernel.lp_root(s, gamma, 2.0 + 1e-9), rel=1e-7)
        assert kernel.e_update(t, yi, gamma, 1.0) == pytest.approx(
            yi * kernel.lp_root(s, gamma, 1.0 + 1e-9), abs=1e-6)


# --- the solver on the cluster -------------------------------------------------------------

from distsvm.errors import ConvergenceWarning  # noqa: E402
from distsvm.ingest import ingest  # noqa: E402
from distsvm.jobs import train  # noqa: E402

from .conftest import liblinear_optimum, load_xy, shared_dataset  # noqa: E402


def lp_objective(x, X, y, p, C=1.0, intercept=True):
    """obj (4) in NumPy: ½‖w‖² + C Σ max(0, 1 − yᵢ(wᵀxᵢ + b))ᵖ, x = [w; b] or w."""
    d = X.shape[1]
    s = np.where(y == np.max(y), 1.0, -1.0)
    m = X.astype(np.float64) @ x[:d] + (x[d] if intercept else 0.0)
    xi = np.maximum(0.0, 1.0 - s * m)
    return 0.5 * float(x[:d] @ x[:d]) + C * float(np.sum(xi ** p))


def lp_gradient(x, X, y, p, C=1.0):
    d = X.shape[1]
    s = np.where(y == np.max(y), 1.0, -1.0)
    xi = np.maximum(0.0, 1.0 - s * (X.astype(np.float64) @ x[:d] + x[d]))
    g = -p * s * xi ** (p - 1) * (xi > 0)
    return np.concatenate([x[:d] + C * (X.T @ g), [C * g.sum()]])


def scipy_optimum(X, y, p, C=1.0):
    """An independent reference for (4) with an unregularized bias: LIBSVM's C-SVC (linear
    kernel, the same problem) for p = 1, tight L-BFGS on the C¹ objective for p > 1."""
    if p == 1.0:
        from sklearn.svm import SVC

        m = SVC(kernel="linear", C=C, tol=1e-8).fit(X.astype(np.float64), y)
        coef = m.coef_.toarray() if hasattr(m.coef_, "toarray") else m.coef_
        x = np.concatenate([np.ravel(coef), m.intercept_])
        return x if m.classes_[1] == np.max(y) else -x, lp_objective(x, X, y, 1.0, C)
    r = scipy.optimize.minimize(
        lambda x: (lp_objective(x, X, y, p, C), lp_gradient(x, X, y, p, C)),
        np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B",
        options={"maxiter": 20000, "gtol": 1e-9, "ftol": 1e-15, "maxcor": 30})
    return r.x, r.fun


@pytest.fixture(scope="module")
def small(a9a):
    X, y = a9a
    return X[:1000], y[:1000]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory, small):
    """One block: a pass is one task, so these tests pay the least per-pass latency."""
    return ingest(small, str(tmp_path_factory.mktemp("alm") / "small.zarr"))


def check_optimum(model, X, y, p, ref, intercept=True):
    """The model's true objective (4) is the reported one and within 1e-3 of the reference."""
    obj = lp_objective(model.w, X, y, p, intercept=intercept)
    s = model.summary
    assert abs(obj - s["primal_objective"]) <= 1e-9 * obj
    assert ref <= obj * (1 + 1e-9) and obj <= ref * (1 + 1e-3), (obj, ref)
    assert s["passes"] == 2 * s["rounds"] - 1  # two map-reduce passes per iteration
    objs = [r["primal"] for r in s["history"]]  # comes down to the optimum
    assert objs[-1] <= min(objs[:50]) and objs[0] > 1.5 * ref
    return obj


@pytest.mark.parametrize("loss,p,iters", [("hinge", 1.0, 300), ("lp", 1.5, 200),
                                         ("squared_hinge", 2.0, 200)])
def test_matches_independent_optimum_with_bias(client, small, small_store, loss, p, iters):
    X, y = small
    _, ref = scipy_optimum(X, y, p)
    with pytest.warns(ConvergenceWarning):
        model = train(small_store, solver="alm", loss=loss, p=p if loss == "lp" else None,
                      bias=1.0, max_rounds=iters, rtol=0.0, eps=1e-8, client=client)
    assert model.w.shape == (124,) and model.bias == 1.0
    check_optimum(model, X, y, p, ref)
    if p > 1:  # the reported gradient norm is the true one, whose formula FD confirms
        g = lp_gradient(model.w, X, y, p)
        np.testing.assert_allclose(model.summary["grad_norm"], np.linalg.norm(g), rtol=1e-6)
        h, v = 1e-6, np.random.default_rng(0).normal(size=124)
        fd = lp_objective(model.w + h * v, X, y, p) - lp_objective(model.w - h * v, X, y, p)
        assert fd / (2 * h) == pytest.approx(g @ v, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("name", ["a9a", "phishing"])
def test_no_bias_decreases_to_liblinear_optimum(client, a9a, tmp_path, name):
    """Without bias the problem is LIBLINEAR's exactly; a9a in two blocks on two workers."""
    X, y = a9a if name == "a9a" else load_xy(shared_dataset(name))
    _, ref = liblinear_optimum(X, y, "squared_hinge", eps=1e-6)
    store = ingest((X, y), str(tmp_path / f"{name}.zarr"), block_rows=X.shape[0] // 2 + 1)
    model = train(store, solver="alm", loss="squared_hinge", bias=-1.0, max_rounds=200,
                  client=client)
    assert model.w.shape == (X.shape[1],) and model.bias == -1.0
    check_optimum(model, X, y, 2.0, ref, intercept=False)


@pytest.mark.slow
def test_pypi_summaries_decreases_to_liblinear_optimum(client, tmp_path):
    """Sparse text (pypi-summaries, 403,797 features): its first 20,000 rows, without the
    columns none of them uses (weights 0 at the optimum: the same problem, shorter vectors).
    The whole dataset takes minutes: benchmarks/bench_alm.py runs it (docs/solvers/alm.md)."""
    import io
    import itertools
    import lzma

    from sklearn.datasets import load_svmlight_file

    with lzma.open(shared_dataset("pypi-summaries")) as f:
        X, y = load_svmlight_file(io.BytesIO(b"".join(itertools.islice(f, 20000))))
    X = X[:, np.unique(X.indices)].astype(np.float32).tocsr()
    _, ref = liblinear_optimum(X, y, "squared_hinge", eps=1e-6)
    store = ingest((X, y), str(tmp_path / "pypi.zarr"))  # one block: the fewest round trips
    model = train(store, solver="alm", loss="squared_hinge", bias=-1.0, max_rounds=200,
                  client=client)
    check_optimum(model, X, y, 2.0, ref, intercept=False)


def numpy_alm(X, y, p, C, iters, mu0=0.01, rho=1.02, exact=False, duals=None):
    """Algorithms 1 and 2 in plain NumPy (dense, one block), the paper's order of updates:
    (10) e, then w, b by (16)+(18) or by (15) solved densely, then (9) λ; returns obj (4)
    at the start of each iteration (and appends the dual residuals µ‖g‖ to ``duals``)."""
    A = np.hstack([X.toarray().astype(np.float64), np.ones((X.shape[0], 1))])
    s = np.where(y == np.max(y), 1.0, -1.0)
    x, lam, mu, out = np.zeros(A.shape[1]), np.zeros(len(s)), mu0 * C, []
    e_update = np.vectorize(kernel.e_update)
    for _ in range(iters):
        m = A @ x
        out.append(0.5 * x[:-1] @ x[:-1] + C * np.sum(np.maximum(0.0, 1 - s * m) ** p))
        e = e_update(s - m - lam / mu, s, C / mu, p)  # (10)
        z = s - e - lam / mu
        if exact:  # (15): min ‖[A; [µ^-½ I, 0]] x − [z; 0]‖
            reg = np.hstack([np.eye(A.shape[1] - 1), np.zeros((A.shape[1] - 1, 1))]) / mu ** 0.5
            x = np.linalg.lstsq(np.vstack([A, reg]), np.concatenate([z, np.zeros(len(reg))]),
                                rcond=None)[0]
        else:
            g = A.T @ (m - z)  # (16)
            g[:-1] += x[:-1] / mu
            if duals is not None:
                duals.append(mu * np.linalg.norm(g))
            step = (g @ g) / ((A @ g) @ (A @ g) + g[:-1] @ g[:-1] / mu)  # (18)
            x = x - step * g
        lam = lam + mu * (A @ x - s + e)  # (9)
        mu = rho * mu
    return np.array(out), x


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0])
def test_inexact_iterates_equal_numpy_algorithm_2(client, small, tmp_path, p):
    """Three blocks on two workers, λ and e kept on the workers, the λ-update deferred to
    the next pass: the same iterates as the paper's Algorithm 2 in NumPy."""
    X, y = small
    store = ingest(small, str(tmp_path / "b.zarr"), block_rows=400, shuffle=False)
    with pytest.warns(ConvergenceWarning):
        model = train(store, solver="alm", loss="lp", p=p, bias=1.0, max_rounds=25,
                      client=client)
    duals = []
    ref, _ = numpy_alm(X, y, p, 1.0, 25, duals=duals)
    got = np.array([r["primal"] for r in model.summary["history"]])
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    got = [r["dual_residual"] for r in model.summary["history"]]  # µ‖[w_g; b_g]‖ of (16)
    np.testing.assert_allclose(got, duals, rtol=1e-9)


def test_stall_from_a_fast_growing_mu_is_named_in_the_warning(client, small_store):
    """µ growing fast (rho 1.5) outgrows one gradient step: the constraint violation is
    enforced but stationarity is not; the iteration-cap warning says so and suggests a
    constant µ, which (same iterations) gets further down."""
    with pytest.warns(ConvergenceWarning, match="outgrown one gradient step") as rec:
        stalled = train(small_store, solver="alm", loss="squared_hinge", bias=1.0, rho=1.5,
                        max_rounds=40, rtol=0.0, eps=1e-8, client=client)
    assert "mu0=0.03" in str(rec[0].message)
    with pytest.warns(ConvergenceWarning) as rec:
        steady = train(small_store, solver="alm", loss="squared_hinge", bias=1.0, mu0=0.03,
                       rho=1.0, max_rounds=40, rtol=0.0, eps=1e-8, client=client)
    assert "outgrown" not in str(rec[0].message)
    assert steady.summary["primal_objective"] < stalled.summary["primal_objective"]


def _synthetic(n=200, d=5, seed=0):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = np.where(X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0.3, 1.0, -1.0)
    return sp.csr_matrix(X), y


def test_exact_lsqr_iterates_equal_dense_algorithm_1(client, tmp_path):
    """Algorithm 1 with (15) solved by LSQR over distributed passes = dense least squares."""
    X, y = _synthetic()
    store = ingest((X, y), str(tmp_path / "e.zarr"), block_rows=70, shuffle=False)
    with pytest.warns(ConvergenceWarning):
        model = train(store, solver="alm", loss="lp", p=1.5, method="exact", bias=1.0,
                      max_rounds=4, client=client)
    ref, _ = numpy_alm(X, y, 1.5, 1.0, 4, exact=True)
    got = np.array([r["primal"] for r in model.summary["history"]])
    np.testing.assert_allclose(got, ref, rtol=1e-7)


def test_exact_reaches_the_optimum(client, tmp_path):
    X, y = _synthetic()
    _, ref = scipy_optimum(X, y, 2.0)
    store = ingest((X, y), str(tmp_path / "e.zarr"))
    with pytest.warns(ConvergenceWarning):
        model = train(store, solver="alm", loss="squared_hinge", method="exact", bias=1.0,
                      rho=1.1, max_rounds=30, rtol=0.0, eps=1e-8, client=client)
    obj = lp_objective(model.w, X, y, 2.0)
    assert ref <= obj * (1 + 1e-9) and obj <= ref * (1 + 1e-3), (obj, ref)


@pytest.mark.parametrize("kwargs,match", [
    (dict(loss="lp"), "'p' parameter .* is required"),
    (dict(loss="lp", p=0.5), r"'p' parameter .* range \[1, inf\)"),
    (dict(loss="hinge", p=2.0), "'p' parameter .* must be 1"),
    (dict(loss="hinge", method="newton"), "'method' parameter"),
    (dict(loss="hinge", rho=0.9), "'rho' parameter"),
    (dict(loss="hinge", mu0=0.0), "'mu0' parameter"),
    (dict(solver="dcd", loss="lp", p=1.5), "'loss' parameter .* with solver='dcd'"),
    (dict(solver="dcd", loss="hinge", rho=1.5), "belong to solver 'alm'"),
])
def test_bad_parameters_are_refused(small_store, kwargs, match):
    kwargs = {"solver": "alm", **kwargs}
    with pytest.raises(ValueError, match=match):
        train(small_store, **kwargs)


def test_cli_lp_loss_json_and_predict(client, small, small_store, tmp_path, capsys, monkeypatch):
    import json
    import warnings

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main() replaces it

    from distsvm.cli import main
    from distsvm.model import load_model

    X, y = small
    model_path = tmp_path / "m.model"
    sched = ["--scheduler", client.scheduler.address]
    assert main(["train", small_store.url, str(model_path), "--solver", "alm", "--loss", "lp",
                 "--p", "1.5", "--max-rounds", "40", "--json", "-q", *sched]) == 0
    out = json.loads(capsys.readouterr().out)
    model = load_model(model_path)
    assert out["p"] == 1.5 and out["bias"] == 1.0 and out["rounds"] == 40 and out["passes"] == 79
    assert out["primal_objective"] == pytest.approx(lp_objective(model.w, X, y, 1.5), rel=1e-9)
    assert main(["predict", small_store.url, str(model_path), "-q", *sched]) == 0
    acc = float(capsys.readouterr().out.split("=")[1].split("%")[0]) / 100
    assert acc == pytest.approx(np.mean(model.predict(X) == y), abs=1e-4) and acc > 0.7
    assert main(["train", small_store.url, str(model_path), "--solver", "alm", "-B", "1",
                 *sched]) == 1
    assert "unregularized intercept" in capsys.readouterr().err
