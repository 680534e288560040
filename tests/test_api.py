"""distsvm.LinearSVC: scikit-learn's interface over the distributed solver."""

from __future__ import annotations

import numpy as np
import pytest

import distsvm
from distsvm.ingest import ingest

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
