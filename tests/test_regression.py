"""Regression: stores of real-valued targets, their refusals, and L2-loss SVR (-s 11).

The shipped data is abalone_scale (data/abalone_scale.xz: 4,177 rows x 8 features, integer
ring counts as targets); cpusmall_scale from ../shared is a slow test, skipped when absent.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from distsvm import jobs, params, prediction
from distsvm.ingest import ingest
from distsvm.storage import open_dataset
from distsvm.storage.dataset import FORMAT_VERSION, append
from distsvm.storage.errors import InputDataError

from .conftest import DATA, liblinear_svr_optimum, load_xy, shared_dataset, svr_objective

ABALONE = DATA / "abalone_scale.xz"
@pytest.fixture(scope="module")
def abalone():
    return load_xy(ABALONE, 8)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """abalone as a regression store of 5 blocks and of 1 block, and dna (classes)."""
    tmp = tmp_path_factory.mktemp("regression")
    many = ingest(str(ABALONE), str(tmp / "ab.zarr"), block_rows=1000, regression=True)
    one = ingest(str(ABALONE), str(tmp / "ab1.zarr"), regression=True)
    dna = ingest(str(DATA / "dna.scale.t.xz"), str(tmp / "dna.zarr"))
    return tmp, many, one, dna


# ---------------------------------------------------------------- stores


def test_a_regression_store_keeps_the_targets(stores, abalone):
    _, many, one, _ = stores
    X, y = abalone
    m = many.meta
    assert m.task == "regression" and m.regression
    assert (m.n_rows, m.n_features, m.nnz, len(m.blocks)) == (4177, 8, 32080, 5)
    assert m.classes == () and m.class_counts == ()
    assert m.targets == pytest.approx({"min": 1.0, "max": 29.0, "mean": y.mean()}, rel=1e-12)
    many.verify()
    blocks = [many.read_block(b) for b in range(many.n_blocks)]
    for b in blocks:
        assert b.target.dtype == np.float64 and not np.any(b.y)  # y: zeros (class index 0)
    # the same multiset of (row, target) pairs as the file: the shuffle moves rows whole
    rows = sorted((tuple(np.round(b.data[b.indptr[i]:b.indptr[i + 1]], 6)), b.target[i])
                  for b in blocks for i in range(b.n_rows))
    ref = sorted((tuple(np.round(X[i].data, 6)), y[i]) for i in range(X.shape[0]))
    assert rows == ref
    assert len(one.meta.blocks) == 1


def test_stores_keep_their_format_versions(stores):
    """Classification stores are still written as version 1 (older readers open them);
    a regression store is version 2, which older readers refuse by its version."""
    tmp, many, _, dna = stores
    assert FORMAT_VERSION == 2
    raw = json.loads((tmp / "dna.zarr" / "zarr.json").read_text())["attributes"]["distsvm"]
    assert raw["format_version"] == 1 and "task" not in raw
    assert dna.meta.task == "classification" and not dna.meta.regression
    raw = json.loads((tmp / "ab.zarr" / "zarr.json").read_text())["attributes"]["distsvm"]
    assert raw["format_version"] == 2 and raw["task"] == "regression"


def test_in_memory_ingest_and_append_keep_the_task(tmp_path, abalone):
    X, y = abalone
    base = ingest((X[:3000], y[:3000]), str(tmp_path / "base.zarr"), block_rows=1000,
                  regression=True)
    part = ingest((X[3000:], y[3000:]), str(tmp_path / "part.zarr"), regression=True)
    d = append(base.url, part, {"partition": "p", "sha256": "x"})
    assert d.meta.task == "regression" and d.meta.n_rows == 4177 and len(d.meta.blocks) == 4
    assert d.meta.targets == pytest.approx({"min": 1.0, "max": 29.0, "mean": y.mean()})
    d.verify()
    assert np.sort(np.concatenate([d.read_block(b).target for b in range(4)])) == \
        pytest.approx(np.sort(y))
    labels = ingest((X[:50], (y[:50] > 9).astype(float)), str(tmp_path / "c.zarr"))
    with pytest.raises(InputDataError, match="a classification part cannot be appended to the "
                                             "regression store .* \\(ingest it with --regression"):
        append(base.url, labels, {})
    with pytest.raises(InputDataError, match="a regression part cannot be appended to the "
                                             "classification store .* \\(ingest it without --regression"):
        append(labels.url, part, {})
    assert open_dataset(base.url).meta == d.meta


def test_cli_ingest_and_info(tmp_path, capsys, stores):
    from distsvm.cli import main

    assert main(["info", stores[3].url, "--no-verify"]) == 0
    text = capsys.readouterr().out
    assert "labels           classes [1.0, 2.0, 3.0]" in text and "targets" not in text

    store = tmp_path / "ab.zarr"
    assert main(["ingest", str(ABALONE), str(store), "--regression", "--serial", "-q",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "regression" and out["classes"] == []
    assert main(["info", str(store)]) == 0
    text = capsys.readouterr().out
    assert "labels           targets (regression): 4177, min 1, max 29, mean 9.93368" in text
    assert main(["info", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == "regression"


def test_the_task_of_the_store_and_of_the_loss_must_agree(stores):
    """A classifier on real targets, or SVR on class labels: one clear line, no training."""
    _, many, _, dna = stores
    from distsvm.jobs import train

    with pytest.raises(ValueError, match=r"-s 2 needs a store of class labels; .*ab.zarr is a "
                                         r"regression store \(real-valued targets\)"):
        train(many, solver="newton", loss="squared_hinge")
    with pytest.raises(ValueError, match="solver 'pcd' with loss 'logistic' needs a store of "
                                         "class labels"):
        params.check_task(params.Params(solver="pcd", loss="logistic"), many)
    # SVR on a store of classes reads its labels as numbers (issue 29.3: -s decides the task)
    svr = params.Params(solver="newton", loss="squared_epsilon_insensitive")
    params.check_task(svr, dna)
    view = params.for_task(svr.loss, dna)
    assert view.meta.regression and view.meta.targets["min"] == 1.0 and view is not dna
    assert params.for_task("squared_hinge", dna) is dna
    with pytest.raises(ValueError, match="'class_weight' parameter of train needs classes"):
        params.check_data("train", params.Params(solver="newton",
                                                 loss="squared_epsilon_insensitive",
                                                 class_weight="balanced"), many)
    with pytest.raises(ValueError, match=r"'epsilon' parameter of train must be a float in "
                                         r"the range \[0, inf\)"):
        params.check_params("train", params.Params(epsilon=-1.0))


# ---------------------------------------------------------------- -s 11: L2-loss SVR by Newton


def test_s11_is_liblinears_optimum_and_mse(stores, abalone, client):
    """-s 11 -p 0.1 -c 1 at the default eps (0.0001, train.c's): LIBLINEAR 2.50's iterate
    (objectives computed here, 1e-9 relative) and the MSE and squared correlation of its
    predictions (1e-4).  At tight tolerance (-e 1e-6 against LIBLINEAR's -e 1e-10), one
    block = many, faults and resume: the conformance case newton-svr (test_solvers.py)."""
    from liblinear.liblinearutil import parameter, predict, problem
    from liblinear.liblinearutil import train as lltrain

    _, many, _, _ = stores
    X, y = abalone
    _, f_ref = liblinear_svr_optimum(X, y, "-s 11")
    model = jobs.train(many, client=client, solver="newton", loss="squared_epsilon_insensitive")
    assert model.params["eps"] == 1e-4 and model.summary["rounds"] == 4
    f = svr_objective(model.w, X, y)
    assert f == pytest.approx(model.summary["primal_objective"], rel=1e-9)
    assert f == pytest.approx(f_ref, rel=1e-9), (f, f_ref)  # the same stopping iterate
    res = prediction.predict(many, model, client=client)
    m = lltrain(problem(y, X.astype(np.float64)), parameter("-s 11 -q"))
    _, (_, mse, scc), _ = predict(y, X.astype(np.float64), m, "-q")
    assert res["mean_squared_error"] == pytest.approx(mse, rel=1e-4)
    assert res["squared_correlation"] == pytest.approx(scc, rel=1e-4)


def test_s11_options_bias_unregularized_and_epsilon(stores, abalone, client):
    """-B 1 -R, and -p 0.5 -c 4: LIBLINEAR's optimum each."""
    _, many, _, _ = stores
    X, y = abalone
    for kw, options in (({"bias": 1.0, "regularize_bias": False}, "-s 11 -e 1e-8 -R"),
                        ({"epsilon": 0.5, "C": 4.0}, "-s 11 -e 1e-8")):
        model = jobs.train(many, client=client, solver="newton",
                           loss="squared_epsilon_insensitive", eps=1e-8, **kw)
        bias, p, C = kw.get("bias", -1.0), kw.get("epsilon", 0.1), kw.get("C", 1.0)
        w_ref, _ = liblinear_svr_optimum(X, y, options, C=C, p=p, bias=bias)
        reg = np.ones(len(w_ref))
        if kw.get("regularize_bias") is False:
            reg[-1] = 0.0

        def f(w, bias=bias, p=p, C=C, reg=reg):
            return svr_objective(w, X, y, C=C, p=p, bias=bias) - 0.5 * float(w @ ((1 - reg) * w))

        assert f(model.w) == pytest.approx(f(w_ref), rel=1e-6), (kw, f(model.w), f(w_ref))


def test_s11_instance_weights_are_repeated_rows(tmp_path, abalone, client):
    """A regression store's instance weights multiply Cᵢ: weights 1-3 = rows repeated."""
    X, y = abalone[0][:600], abalone[1][:600]
    sw = np.random.default_rng(0).integers(1, 4, X.shape[0]).astype(float)
    rows = np.repeat(np.arange(X.shape[0]), sw.astype(int))
    weighted = ingest((X, y), str(tmp_path / "w.zarr"), block_rows=200, sample_weight=sw,
                      regression=True)
    repeated = ingest((X[rows], y[rows]), str(tmp_path / "r.zarr"), block_rows=500,
                      regression=True)
    fits = [jobs.train(d, client=client, solver="newton", loss="squared_epsilon_insensitive",
                       eps=1e-6) for d in (weighted, repeated)]
    assert fits[0].params["sample_weight"] is True
    np.testing.assert_allclose(fits[0].w, fits[1].w, rtol=0, atol=1e-6)


def test_cli_train_predict_export_and_cross_validation(tmp_path, stores, abalone, client,
                                                      capsys):
    """The CLI (in this process, on the session's cluster): -s 11 trains; predict prints
    LIBLINEAR's two regression lines (--json has them); the exported text model gives
    LIBLINEAR's predict the same values, and imports back; -v 5 prints LIBLINEAR's
    cross-validation lines; the wrong store for the model or the type is one error line."""
    from liblinear.liblinearutil import load_model, predict

    from distsvm.cli import main

    _, many, _, dna = stores
    sched = ["-q", "--scheduler", client.scheduler.address]

    def run(*args, code=0):
        assert main([str(a) for a in args]) == code
        return capsys.readouterr()

    model = tmp_path / "m.model"
    out = json.loads(run("train", many.url, model, "-s", 11, "-p", 0.2, "-c", 2, "--json",
                         *sched).out)
    assert (out["solver"], out["loss"], out["C"], out["eps"]) == \
        ("newton", "squared_epsilon_insensitive", 2.0, 1e-4)
    lines = run("predict", many.url, model, "--output", tmp_path / "pred.txt",
                *sched).out.splitlines()
    assert lines[0].startswith("Mean squared error = ") and lines[0].endswith(" (regression)")
    assert lines[1].startswith("Squared correlation coefficient = ")
    res = json.loads(run("predict", many.url, model, "--json", *sched).out)
    assert set(res) == {"n_rows", "mean_squared_error", "squared_correlation"}
    assert lines[0] == f"Mean squared error = {res['mean_squared_error']:g} (regression)"
    run("export", model, tmp_path / "m.txt")
    text = (tmp_path / "m.txt").read_text()
    assert text.startswith("solver_type L2R_L2LOSS_SVR\nnr_class 2\nnr_feature 8\n")
    assert "label" not in text
    # LIBLINEAR's predict on the exported model: the rows in the store's order, then the
    # output's (the source's) order
    blocks = [many.read_block(b) for b in range(many.n_blocks)]
    rows = [{int(j) + 1: float(v) for j, v in zip(b.indices[b.indptr[i]:b.indptr[i + 1]],
                                                   b.data[b.indptr[i]:b.indptr[i + 1]])}
            for b in blocks for i in range(b.n_rows)]
    targets = np.concatenate([b.target for b in blocks])
    ll_pred, (_, mse, scc), _ = predict(targets.tolist(), rows,
                                        load_model(str(tmp_path / "m.txt")), "-q")
    from distsvm.storage.dataset import read_block_positions  # --output: the file's order

    order = np.argsort(np.concatenate([read_block_positions(many.url, b)
                                       for b in many.meta.blocks]))
    np.testing.assert_allclose(np.loadtxt(tmp_path / "pred.txt"), np.asarray(ll_pred)[order],
                               rtol=1e-5)  # %g
    assert res["mean_squared_error"] == pytest.approx(mse, rel=1e-9)
    assert res["squared_correlation"] == pytest.approx(scc, rel=1e-9)
    run("import", tmp_path / "m.txt", tmp_path / "back.model")
    again = json.loads(run("predict", many.url, tmp_path / "back.model", "--json", *sched).out)
    assert again["mean_squared_error"] == pytest.approx(res["mean_squared_error"], rel=1e-12)
    cv = run("train", many.url, "-s", 11, "-v", 5, *sched).out.splitlines()
    assert cv[0].startswith("Cross Validation Mean squared error = ")
    assert cv[1].startswith("Cross Validation Squared correlation coefficient = ")
    assert 4.5 < float(cv[0].split("= ")[1]) < 6.0  # abalone's in-sample MSE is 5.16
    # -s decides the task (issue 29.3): SVR trains on dna's class labels as numbers, and a
    # regression model predicts a store of classes by them (LIBLINEAR's habit, one file)
    run("train", dna.url, tmp_path / "x.model", "-s", 11, *sched)
    out = run("predict", dna.url, tmp_path / "x.model", *sched).out
    assert out.startswith("Mean squared error = ") and "(regression)" in out


def test_p_is_svr_epsilon_and_double_dash_p_is_alms_exponent():
    from distsvm.arguments import given, parse

    assert given(parse(["train", "s", "m", "-s", "11", "-p", "0.3"])) == {"epsilon": 0.3}
    a = given(parse(["train", "s", "m", "--solver", "alm", "--loss", "lp", "--p", "1.5",
                     "-p", "0.2"]))
    assert a["p"] == 1.5 and a["epsilon"] == 0.2
    assert given(parse(["train", "s", "m"])) == {}  # the default is the table's:
    assert params.DEFAULTS.epsilon == 0.1


# ---------------------------------------------------------------- LinearSVR


def test_linear_svr_is_scikit_learns(abalone, client):
    """LinearSVR(loss="squared_epsilon_insensitive", dual=False) = scikit-learn's LinearSVR
    (liblinear -s 11 with its intercept as a bias feature): the objective, predictions, R²."""
    import sklearn.svm
    from sklearn.base import is_classifier, is_regressor
    from sklearn.exceptions import DataConversionWarning

    import distsvm

    X, y = abalone
    kw = dict(epsilon=0.1, C=1.0, loss="squared_epsilon_insensitive", dual=False, tol=1e-6)
    ours = distsvm.LinearSVR(**kw).fit(X, y)
    ref = sklearn.svm.LinearSVR(**kw, max_iter=1000).fit(X, y)
    w = np.append(ours.coef_, ours.intercept_)
    w_ref = np.append(ref.coef_, ref.intercept_)
    f, f_ref = (svr_objective(v, X, y, bias=1.0) for v in (w, w_ref))
    assert f == pytest.approx(f_ref, rel=1e-4) and f <= f_ref * (1 + 1e-9)
    assert ours.objective_ == pytest.approx(f, rel=1e-9)
    np.testing.assert_allclose(ours.predict(X[:50]), ref.predict(X[:50]), rtol=1e-3)
    assert ours.score(X, y) == pytest.approx(ref.score(X, y), rel=1e-4)
    assert ours.coef_.shape == (8,) and ours.intercept_.shape == (1,)
    assert is_regressor(ours) and not is_classifier(ours)  # scikit-learn's own test
    assert ours.get_params()["epsilon"] == 0.1
    with pytest.warns(DataConversionWarning, match="column-vector y"):  # as scikit-learn's
        column = distsvm.LinearSVR(**kw).fit(X, y.reshape(-1, 1))
    np.testing.assert_array_equal(column.coef_, ours.coef_)


def test_linear_svr_on_a_store_and_its_refusals(stores):
    import distsvm
    from distsvm.solvers import registry

    _, many, _, dna = stores
    est = distsvm.LinearSVR(loss="squared_epsilon_insensitive", fit_intercept=False,
                            epsilon=0.1, tol=1e-4)
    est.fit(many.url)
    X = np.zeros((1, 8))
    assert est.predict(X) == pytest.approx([0.0])
    r2 = est.score(many.url)
    assert 0.4 < r2 < 0.6  # 1 − MSE/var: abalone's MSE 5.16, variance 10.4
    with pytest.raises(ValueError, match="The 'loss' parameter of LinearSVR must be one of"):
        distsvm.LinearSVR(loss="hinge").fit(X, [1.0])
    with pytest.raises(ValueError, match="loss='epsilon_insensitive' are not supported when "
                                         "dual=False"):
        distsvm.LinearSVR(dual=False).fit(X, [1.0])
    if 13 not in registry.LIBLINEAR_TYPES:  # the dual SVR (-s 12, 13) is not registered yet
        with pytest.raises(ValueError, match=r"LinearSVR: LIBLINEAR solver type -s 13 is not "
                                             "available"):
            distsvm.LinearSVR().fit(X, [1.0])
    on_classes = distsvm.LinearSVR(loss="squared_epsilon_insensitive", dual=False).fit(dna.url)
    assert on_classes.coef_.shape == (180,)  # dna's labels 1, 2, 3 as numbers (issue 29.3)
    with pytest.raises(ValueError, match="The 'epsilon' parameter of LinearSVR"):
        distsvm.LinearSVR(loss="squared_epsilon_insensitive", dual=False,
                          epsilon=-1).fit(X, [1.0])


# ---------------------------------------------------------------- the shared datasets


@pytest.mark.slow
def test_s11_on_cpusmall(tmp_path, client):
    """cpusmall_scale (8,192 x 12, ../shared): -s 11's objective and MSE are LIBLINEAR's."""
    from liblinear.liblinearutil import parameter, predict, problem
    from liblinear.liblinearutil import train as lltrain

    path = shared_dataset("regression/cpusmall_scale")
    X, y = load_xy(path, 12)
    store = ingest(str(path), str(tmp_path / "cpu.zarr"), block_rows=2000, regression=True)
    model = jobs.train(store, client=client, solver="newton",
                       loss="squared_epsilon_insensitive", eps=1e-6)
    _, f_ref = liblinear_svr_optimum(X, y, "-s 11 -e 1e-6")
    assert svr_objective(model.w, X, y) == pytest.approx(f_ref, rel=1e-6)
    m = lltrain(problem(y, X.astype(np.float64)), parameter("-s 11 -e 1e-6 -q"))
    _, (_, mse, _), _ = predict(y, X.astype(np.float64), m, "-q")
    assert prediction.predict(store, model, client=client)["mean_squared_error"] == \
        pytest.approx(mse, rel=1e-4)


# ---------------------------------------------------------------- job specs and the pipeline


def test_job_spec_trains_svr(tmp_path, stores, client):
    """A job spec's solver takes the SVR loss and epsilon; its test metrics are the MSE and
    squared correlation."""
    from distsvm import spec

    _, many, _, _ = stores
    path = tmp_path / "job.yaml"
    path.write_text(f"""
name: abalone
data: {{train: {many.url}, test: {many.url}}}
solver: {{solver: newton, loss: squared_epsilon_insensitive, epsilon: 0.2, C: 2}}
output: {{model: {tmp_path / 'm.model'}}}
""")
    result = spec.run(spec.load_spec(path), run_id="r1", client=client)
    assert result["loss"] == "squared_epsilon_insensitive"
    assert 4.5 < result["test_mean_squared_error"] < 6.0 and "test_accuracy" not in result


@pytest.mark.slow
def test_pipeline_trains_svr(tmp_path, client):
    """The pipeline ingests regression partitions (ingest.regression) and promotes by the
    holdout's mean squared error."""
    import lzma

    from distsvm import pipeline, spec
    from distsvm.progress import Progress

    with lzma.open(ABALONE, "rt") as f:
        rows = f.readlines()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p1.svm").write_text("".join(rows[:2000]))
    (tmp_path / "hold.svm").write_text("".join(rows[3000:]))
    ingest(str(tmp_path / "hold.svm"), str(tmp_path / "hold.zarr"), regression=True)
    pspec = {"name": "ab", "dataset": str(tmp_path / "data.zarr"),
             "partitions": str(tmp_path / "in" / "*.svm"), "holdout": str(tmp_path / "hold.zarr"),
             "registry": str(tmp_path / "registry"),
             "ingest": {"block_rows": 500, "n_features": 8, "regression": True},
             "solver": {"solver": "newton", "loss": "squared_epsilon_insensitive"},
             "source": str(tmp_path / "pipeline.yaml")}
    spec.validate({k: v for k, v in pspec.items() if k != "source"}, "pipeline", "p.yaml")
    code, out = pipeline.run(pspec, Progress(quiet=True), client=client)
    assert (code, out["version"], out["promoted"]) == (0, 1, True)
    assert open_dataset(pspec["dataset"]).meta.task == "regression"
    (tmp_path / "in" / "p2.svm").write_text("".join(rows[2000:3000]))
    code, out = pipeline.run(pspec, Progress(quiet=True), client=client)
    assert out["version"] == 2 and "holdout mean squared error" in out["reason"]
    assert 3 < out["holdout_mean_squared_error"] < 8
