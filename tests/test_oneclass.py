"""The one-class SVM (LIBLINEAR -s 21) against LIBLINEAR 2.50 on a9a rows: the dual and primal
objectives, the constraints on α, predictions, the LIBLINEAR export, the job, the CLI and the
estimator; the parameters' checks.  The conformance case (faults, resume) is in
tests/test_solvers.py."""

from __future__ import annotations

import numpy as np
import pytest

from distsvm import jobs, params, prediction
from distsvm.ingest import ingest
from distsvm.model import export_liblinear, import_liblinear, load_model, save_model

N = 3000


def liblinear_oneclass(X, nu: float, eps: float):
    """LIBLINEAR's (w, ρ) of ``-s 21 -n nu -e eps``."""
    from liblinear.liblinearutil import parameter, problem, train

    m = train(problem(np.ones(X.shape[0]), X.astype(np.float64)),
              parameter(f"-s 21 -n {nu} -e {eps} -q"))
    return np.array([m.w[i] for i in range(X.shape[1])]), float(m.rho)


def oneclass_primal(w, rho, X, nu: float) -> float:
    """½‖w‖² − νlρ + Σᵢ max(0, ρ − wᵀxᵢ), computed in NumPy (float64)."""
    g = X.astype(np.float64) @ w
    return 0.5 * float(w @ w) - nu * X.shape[0] * rho + float(np.sum(np.maximum(0.0, rho - g)))


@pytest.fixture(scope="module")
def rows(a9a):
    """N training rows of a9a and N held-out rows (no held-out row lies on wᵀx = ρ, where
    the free support vectors of the training rows lie, to rounding)."""
    X, y = a9a
    return (X[:N], y[:N]), (X[N:2 * N], y[N:2 * N])


@pytest.fixture(scope="module")
def store(tmp_path_factory, rows):
    return ingest(rows[0], str(tmp_path_factory.mktemp("oneclass") / "s.zarr"), block_rows=500)


@pytest.fixture(scope="module")
def tight(store, client):
    return jobs.train(store, client=client, solver="oneclass", loss="oneclass", eps=1e-6)


def test_objectives_alpha_and_predictions_are_liblinears(tight, rows):
    (X, _), (Xt, _) = rows
    w_ll, rho_ll = liblinear_oneclass(X, 0.5, 1e-6)
    s = tight.summary
    assert s["converged"] and tight.classes == (-1.0, 1.0) and tight.rho is not None
    dual_ll = 0.5 * float(w_ll @ w_ll)
    assert 0.5 * float(tight.w @ tight.w) == pytest.approx(dual_ll, rel=1e-4)
    assert -s["dual_objective"] == pytest.approx(0.5 * float(tight.w @ tight.w), rel=1e-12)
    f, f_ll = oneclass_primal(tight.w, tight.rho, X, 0.5), oneclass_primal(w_ll, rho_ll, X, 0.5)
    assert f == pytest.approx(s["primal_objective"], rel=1e-9)
    assert f == pytest.approx(f_ll, rel=1e-4)
    assert 0 <= s["duality_gap"] <= 1e-6 * abs(f)  # P(w, ρ) ≥ −D(α) = −½‖w‖²
    assert tight.rho == pytest.approx(rho_ll, rel=1e-6)
    assert s["alpha_sum"] == pytest.approx(0.5 * N, rel=1e-12)  # eᵀα = νl
    assert 0.0 <= s["alpha_min"] and s["alpha_max"] <= 1.0
    same = np.mean(tight.predict(Xt) == np.where(Xt @ w_ll - rho_ll > 0, 1, -1))
    assert same >= 0.999, same


def test_one_worker_many_blocks_equals_two_and_the_joined_block(tight, store, client, rows):
    """The global working set makes the iterates independent of the blocks and workers:
    one worker's batches over 6 blocks, 2 workers' iterations, 1 joined block."""
    kw = dict(solver="oneclass", loss="oneclass", eps=1e-6, join_blocks=False)
    one = jobs.train(store, client=client, n_workers=1, **kw)
    two = jobs.train(store, client=client, **kw)
    np.testing.assert_allclose(one.w, two.w, rtol=0, atol=1e-9 * np.abs(two.w).max())
    np.testing.assert_allclose(tight.w, two.w, rtol=0, atol=1e-9 * np.abs(two.w).max())
    assert one.rho == pytest.approx(two.rho, rel=1e-12)
    assert one.summary["rounds"] == two.summary["rounds"] == tight.summary["rounds"]


def test_other_nu_and_default_eps(store, client, rows):
    (X, _), _ = rows
    for nu in (0.1, 0.77):
        w_ll, rho_ll = liblinear_oneclass(X, nu, 0.01)
        m = jobs.train(store, client=client, solver="oneclass", loss="oneclass", nu=nu)
        assert m.params["nu"] == nu and m.params["eps"] == 0.01
        assert m.summary["alpha_sum"] == pytest.approx(nu * N, rel=1e-12)
        assert oneclass_primal(m.w, m.rho, X, nu) == pytest.approx(
            oneclass_primal(w_ll, rho_ll, X, nu), rel=1e-3)


def test_liblinear_export_import_and_predict(tight, rows, tmp_path, store, client):
    from liblinear.liblinearutil import load_model as ll_load
    from liblinear.liblinearutil import predict as ll_predict

    _, (Xt, yt) = rows
    path = tmp_path / "oc.liblinear"
    export_liblinear(tight, path)
    text = path.read_text()
    assert "solver_type ONECLASS_SVM" in text and "\nrho " in text and "label" not in text
    labels, (acc, _, _), dv = ll_predict(yt, Xt.astype(np.float64), ll_load(str(path)), "-q")
    np.testing.assert_array_equal(np.array(labels), tight.predict(Xt))
    np.testing.assert_allclose(np.ravel(dv), tight.decision_function(Xt), rtol=1e-9,
                               atol=1e-9 * abs(tight.rho))
    back = import_liblinear(path)
    assert back.rho == tight.rho and np.array_equal(back.w, tight.w)
    save_model(tight, tmp_path / "oc.model")
    again = load_model(tmp_path / "oc.model")
    assert again.rho == tight.rho and again.classes == (-1.0, 1.0)
    # the job's accuracy: the ±1 predictions against the store's labels, as LIBLINEAR prints
    t = ingest((Xt, yt), str(tmp_path / "t.zarr"), block_rows=1000, shuffle=False)
    res = prediction.predict(t, tight, client=client, output=str(tmp_path / "out"))
    assert res["accuracy"] == pytest.approx(acc / 100, abs=1e-12)
    assert np.array_equal(np.loadtxt(tmp_path / "out"), tight.predict(Xt))


def test_parameters_are_checked():
    with pytest.raises(ValueError, match=r"The 'nu' parameter of train must be a float in the "
                                         r"range \(0, 1\]. Got 0 instead."):
        params.check_params("train", params.Params(solver="oneclass", loss="oneclass", nu=0))
    with pytest.raises(ValueError, match=r"range \(0, 1\]. Got 1.5"):
        params.check_params("train", params.Params(nu=1.5))
    with pytest.raises(ValueError, match="The 'nu' parameter of train belongs to solver "
                                         "'oneclass'"):
        params.check_solver("train", params.Params(solver="dcd", nu=0.2))
    with pytest.raises(ValueError, match="The 'bias' parameter of train must be < 0"):
        params.check_solver("train", params.Params(solver="oneclass", loss="oneclass", bias=1))
    with pytest.raises(ValueError, match="The 'C' parameter"):
        params.check_params("train", params.Params(solver="oneclass", loss="oneclass", C=-1))


def test_estimator(rows, tight):
    from distsvm import LinearOneClassSVM

    (X, _), (Xt, _) = rows
    est = LinearOneClassSVM(tol=1e-6).fit(X)
    np.testing.assert_allclose(est.coef_[0], tight.w, rtol=0, atol=1e-9 * np.abs(tight.w).max())
    assert est.offset_ == pytest.approx(tight.rho, rel=1e-12)
    assert np.array_equal(est.predict(Xt), tight.predict(Xt))
    np.testing.assert_allclose(est.score_samples(Xt) - est.offset_, est.decision_function(Xt))
    with pytest.raises(ValueError, match="The 'nu' parameter of LinearOneClassSVM"):
        LinearOneClassSVM(nu=2).fit(X)
    with pytest.raises(ValueError, match="The 'tol' parameter of LinearOneClassSVM"):
        LinearOneClassSVM(tol=0).fit(X)


def _holds_state() -> bool:
    import distsvm.workers.blocks

    return any(distsvm.workers.blocks._runs.values())


@pytest.mark.slow
@pytest.mark.parametrize("victim,join_blocks", [("owner", True), (0, False), (1, False)])
def test_a_killed_worker_keeps_e_alpha_at_nu_l(store, tight, victim, join_blocks, monkeypatch):
    """Whichever worker dies (the one owner of the joined block, or one of two owners), the
    lost blocks restart with the rest of νl: eᵀα = νl at the end, and the same optimum."""
    from distsvm.solvers import dcd

    from .conftest import Killer, local_client

    monkeypatch.setattr(dcd, "BATCH_SECONDS", 0.0)  # a kill lands between batches
    with local_client(2) as c:
        if victim == "owner":  # the worker the joined block went to (the one with state)
            killer = Killer(c, 2, 0)
            original = killer.round

            def round_(row, text=None):
                if row["round"] == killer.at and killer.killed is None:
                    holds = c.run(_holds_state)
                    killer.victim = sorted(holds).index(next(a for a in sorted(holds)
                                                             if holds[a]))
                original(row, text)
            killer.round = round_
        else:
            killer = Killer(c, 2, victim)
        m = jobs.train(store, client=c, solver="oneclass", loss="oneclass", eps=1e-6,
                       join_blocks=join_blocks, progress=killer)
    assert f"worker {killer.killed} left the cluster" in killer.stream.getvalue()
    assert m.summary["alpha_sum"] == pytest.approx(0.5 * N, rel=1e-12)
    assert 0.0 <= m.summary["alpha_min"] and m.summary["alpha_max"] <= 1.0
    assert m.summary["primal_objective"] == pytest.approx(tight.summary["primal_objective"],
                                                          rel=1e-6)


@pytest.mark.slow
def test_cli_train_predict_and_cross_validation(tmp_path, rows):
    from liblinear.liblinearutil import load_model as ll_load
    from liblinear.liblinearutil import predict as ll_predict

    from .test_cli import run

    (X, y), (Xt, yt) = rows
    tr, te = ingest((X, y), str(tmp_path / "tr.zarr")), ingest((Xt, yt), str(tmp_path / "te.zarr"),
                                                               shuffle=False)
    out = run("train", tr.url, tmp_path / "m", "-s", "21", "-n", "0.3", "--json", "-q").stdout
    assert '"solver": "oneclass"' in out
    run("export", tmp_path / "m", tmp_path / "m.txt")
    printed = run("predict", te.url, tmp_path / "m", "--output", tmp_path / "out").stdout
    _, (acc, _, _), _ = ll_predict(yt, Xt.astype(np.float64), ll_load(str(tmp_path / "m.txt")),
                                   "-q")
    assert printed.startswith(f"Accuracy = {acc:.4f}%")
    cv = run("train", tr.url, "-s", "21", "-v", "3", "-q").stdout
    assert cv.startswith("Cross Validation Accuracy = ")
    bad = run("train", tr.url, tmp_path / "m2", "-s", "21", "-B", "1", ok=False)
    assert bad.returncode != 0 and "The 'bias' parameter" in bad.stderr


def test_nu_one_gives_liblinear_s_infinite_rho(store, client, rows, tmp_path):
    """ν = 1: every α at 1, no row at 0; LIBLINEAR's ρ is then +inf (every row −1), and the
    model saves, exports and loads with it."""
    from liblinear.liblinearutil import load_model as ll_load
    from liblinear.liblinearutil import predict as ll_predict

    (X, _), (Xt, yt) = rows
    w_ll, rho_ll = liblinear_oneclass(X, 1.0, 0.01)
    m = jobs.train(store, client=client, solver="oneclass", loss="oneclass", nu=1.0)
    assert rho_ll == m.rho == np.inf and m.summary["alpha_min"] == 1.0
    # the primal's infimum over ρ, at any ρ ≥ max G: ½‖w‖² − Σ wᵀxᵢ = −½‖w‖²
    assert m.summary["primal_objective"] == pytest.approx(-0.5 * float(m.w @ m.w), rel=1e-9)
    np.testing.assert_allclose(m.w, w_ll, rtol=1e-9)
    save_model(m, tmp_path / "m")
    export_liblinear(load_model(tmp_path / "m"), tmp_path / "m.txt")
    labels, _, _ = ll_predict(yt, Xt.astype(np.float64), ll_load(str(tmp_path / "m.txt")), "-q")
    assert set(labels) == {-1.0} and np.all(import_liblinear(tmp_path / "m.txt").predict(Xt) == -1)
