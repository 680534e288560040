"""distsvm.LinearSVC: scikit-learn's interface over the distributed solver."""

from __future__ import annotations

import numpy as np
import pytest

import distsvm
from distsvm.ingest import ingest
from distsvm.solvers.registry import LIBLINEAR_TYPES

from .conftest import liblinear_optimum, primal_objective


def test_fit_arrays_matches_liblinear_with_bias(client, a9a):
    X, y = a9a
    clf = distsvm.LinearSVC(C=1.0, tol=1e-3).fit(X, y)  # uses the session's default client
    assert clf.coef_.shape == (1, 123) and clf.intercept_.shape == (1,)
    assert clf.classes_.tolist() == [-1.0, 1.0] and clf.n_features_in_ == 123
    w = np.append(clf.coef_.ravel(), clf.intercept_[0])  # intercept_scaling = 1
    _, p_ref = liblinear_optimum(X, y, "squared_hinge", bias=1.0)
    assert primal_objective(w, X, y, "squared_hinge", bias=1.0) <= p_ref * (1 + 1e-3)
    dv = clf.decision_function(X)
    np.testing.assert_allclose(dv, X @ clf.coef_.ravel() + clf.intercept_[0], rtol=1e-6)
    assert np.array_equal(clf.predict(X), np.where(dv > 0, 1.0, -1.0))
    assert clf.score(X, y) == pytest.approx(np.mean(clf.predict(X) == y))
    assert 0.84 < clf.score(X, y) < 0.86


@pytest.mark.filterwarnings("ignore::distsvm.errors.ConvergenceWarning")
def test_fit_store_and_score_store(client, a9a, tmp_path):
    store = ingest(a9a, str(tmp_path / "a.zarr"))
    clf = distsvm.LinearSVC(loss="hinge", tol=1e-2, max_iter=200, fit_intercept=False)
    clf.fit(store.url)
    assert clf.intercept_.tolist() == [0.0]
    X, y = a9a
    assert clf.score(store.url) == pytest.approx(clf.score(X, y))
    with pytest.raises(ValueError, match="y must be None"):
        distsvm.LinearSVC().fit(store.url, y)


def test_params_and_clone():
    from sklearn.base import clone

    clf = distsvm.LinearSVC(C=0.5, loss="hinge")
    assert clf.get_params()["C"] == 0.5
    c2 = clone(clf).set_params(C=2.0)
    assert c2.C == 2.0 and clf.C == 0.5
    with pytest.raises(ValueError, match="Invalid parameter 'bogus'"):
        clf.set_params(bogus=1)


@pytest.mark.parametrize("params,match", [
    ({"C": -1}, r"The 'C' parameter of LinearSVC must be a float in the range \(0, inf\). Got -1 instead."),
    ({"loss": "l3"}, "The 'loss' parameter of LinearSVC must be one of"),
    ({"tol": 0}, "The 'tol' parameter"),
    ({"max_iter": 0}, "The 'max_iter' parameter"),
    ({"intercept_scaling": -2.0}, "The 'intercept_scaling' parameter"),
])
def test_parameter_errors_in_sklearn_wording(a9a, params, match):
    X, y = a9a
    with pytest.raises(ValueError, match=match):
        distsvm.LinearSVC(**params).fit(X[:10], y[:10])


def test_not_fitted():
    with pytest.raises(ValueError, match="not fitted yet"):
        distsvm.LinearSVC().predict(np.zeros((1, 3)))


def test_logistic_regression_matches_liblinear_s0_and_probabilities(client, a9a):
    """LogisticRegression = LIBLINEAR -s 0 (through registry.LIBLINEAR_TYPES[0]); predict_proba
    = LIBLINEAR's predict -b 1 for two classes: σ(wᵀx + b) of classes_[1]."""
    from liblinear.liblinearutil import parameter, predict, problem, train

    X, y = a9a[0][:4000], a9a[1][:4000]
    clf = distsvm.LogisticRegression(C=0.5, tol=1e-5).fit(X, y)
    assert clf.model_.loss == "logistic" and clf.coef_.shape == (1, 123)
    w = np.append(clf.coef_.ravel(), clf.intercept_[0])
    _, p_ref = liblinear_optimum(X, y, "logistic", C=0.5, bias=1.0)
    assert primal_objective(w, X, y, "logistic", C=0.5, bias=1.0) <= p_ref * (1 + 1e-5)
    m = train(problem(y, X.astype(np.float64)), parameter("-s 0 -c 0.5 -B 1 -e 1e-5 -q"))
    _, _, ref = predict(y[:200], X[:200].astype(np.float64), m, "-b 1 -q")
    ref = np.asarray(ref)[:, np.argsort(m.get_labels())]  # columns in classes_ order
    proba = clf.predict_proba(X[:200])
    np.testing.assert_allclose(proba, ref, atol=5e-3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(clf.classes_[np.argmax(proba, axis=1)], clf.predict(X[:200]))


def test_primal_linear_svc_string_labels_and_input_checks(client, a9a):
    X, y = a9a[0][:2000], a9a[1][:2000]
    labels = np.where(y > 0, "yes", "no")
    clf = distsvm.LinearSVC(dual=False, tol=1e-3).fit(X, labels)  # LIBLINEAR -s 2
    assert clf.model_.solver == LIBLINEAR_TYPES[2][0]
    assert clf.classes_.tolist() == ["no", "yes"]
    assert set(clf.predict(X)) <= {"no", "yes"} and clf.score(X, labels) > 0.8
    with pytest.raises(ValueError, match="X has 122 features, but LinearSVC is expecting 123"):
        clf.predict(X[:, :122])
    with pytest.raises(ValueError, match="Expected 2D array"):
        clf.predict(np.zeros(123))
    with pytest.raises(ValueError, match="not supported when dual=False"):
        distsvm.LinearSVC(dual=False, loss="hinge").fit(X, y)
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        distsvm.LinearSVC().fit(X[:10], np.linspace(0, 1, 10))
    with pytest.raises(ValueError, match="requires y to be passed"):
        distsvm.LinearSVC().fit(X[:10])


def test_weighted_fits_match_liblinear_and_duplicated_rows(client, a9a):
    """LinearSVC(class_weight=...) on string labels reaches LIBLINEAR's -wi optimum (the
    label keys map to the store's class indices); fit(sample_weight=integers) equals the fit
    on duplicated rows."""
    from liblinear.liblinearutil import parameter, problem, train

    X, y = a9a[0][:2000], a9a[1][:2000]
    labels = np.where(y > 0, "yes", "no")
    cost = 0.1 * np.where(y > 0, 2.0, 0.5)
    clf = distsvm.LinearSVC(C=0.1, tol=1e-6, max_iter=3000, fit_intercept=False,
                            class_weight={"yes": 2.0, "no": 0.5}).fit(X, labels)
    m = train(problem(y, X.astype(np.float64)), parameter("-s 1 -c 0.1 -e 1e-6 -w1 2 -w-1 0.5 -q"))
    w_ref = np.array([m.w[i] for i in range(123)]) * (1 if m.get_labels()[0] == 1 else -1)

    def objective(w, cost):
        xi = np.maximum(0.0, 1.0 - np.where(y > 0, 1.0, -1.0) * (X @ w)) ** 2
        return 0.5 * w @ w + cost @ xi

    assert objective(clf.coef_.ravel(), cost) == pytest.approx(objective(w_ref, cost), rel=1e-3)
    assert clf.model_.params["class_weight"] == {"0": 0.5, "1": 2.0}
    with pytest.raises(ValueError, match="names label 'maybe'"):
        distsvm.LinearSVC(class_weight={"maybe": 2.0}).fit(X, labels)
    sw = np.random.default_rng(0).integers(1, 4, 2000)
    rows = np.repeat(np.arange(2000), sw)
    a = distsvm.LogisticRegression(C=0.1, dual=True, tol=1e-7, max_iter=3000).fit(
        X, y, sample_weight=sw)
    b = distsvm.LogisticRegression(C=0.1, dual=True, tol=1e-7, max_iter=3000).fit(
        X[rows], y[rows])
    assert a.objective_ == pytest.approx(b.objective_, rel=1e-6)
    for bad, match in ((np.ones(5), "sample_weight.shape"), (np.zeros(2000), "non-zero"),
                       (-np.ones(2000), ">= 0"), (np.where(y > 0, 1.0, 0.0), "one class")):
        with pytest.raises(ValueError, match=match):
            distsvm.LinearSVC().fit(X, y, sample_weight=bad)
