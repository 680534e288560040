"""scikit-learn compatible estimators backed by the distributed solvers.

``fit`` accepts a NumPy/SciPy matrix with labels, or a dataset store (path,
URL or :class:`storage.Dataset`) with ``y=None``.  In-memory data is first
written to a temporary store, so both inputs train by the same code.
Parameters mean what they mean in scikit-learn's ``LinearSVC``: the same C
(LIBLINEAR's scaling), ``fit_intercept`` as a regularized bias feature of value
``intercept_scaling`` (LIBLINEAR's ``-B``), ``tol`` as LIBLINEAR's ``eps``.
The cluster is the active Dask client if there is one, else ``scheduler``,
else an embedded local cluster for the duration of ``fit``.
"""

from __future__ import annotations

import inspect
import os
import tempfile

import numpy as np

from storage import Dataset

from . import jobs
from .ingest import ingest
from .model import Model
from .progress import Progress


class _Params:
    """get_params/set_params from the constructor's signature, as scikit-learn's BaseEstimator."""

    @classmethod
    def _param_names(cls):
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep=True):
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params):
        valid = self._param_names()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"Invalid parameter {k!r} for estimator {type(self).__name__}. "
                                 f"Valid parameters are: {valid!r}.")
            setattr(self, k, v)
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


def _is_store(X) -> bool:
    return isinstance(X, (str, os.PathLike, Dataset))


class LinearSVC(_Params):
    """Linear SVM (L1- or L2-loss) trained by distributed dual coordinate descent.

    Minimizes ``½‖w‖² + C Σᵢ loss(yᵢ wᵀxᵢ)`` with loss ``hinge`` (LIBLINEAR ``-s 3``)
    or ``squared_hinge`` (``-s 1``).  Binary classification.
    """

    _estimator_type = "classifier"

    def __init__(self, C=1.0, loss="squared_hinge", tol=1e-4, max_iter=1000,
                 fit_intercept=True, intercept_scaling=1.0, random_state=None,
                 inner_passes=1, scheduler=None, n_workers=None, verbose=0):
        self.C = C
        self.loss = loss
        self.tol = tol
        self.max_iter = max_iter
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.random_state = random_state
        self.inner_passes = inner_passes
        self.scheduler = scheduler
        self.n_workers = n_workers
        self.verbose = verbose

    def _train_kwargs(self):
        if self.fit_intercept:
            jobs._check_real(type(self).__name__, "intercept_scaling", self.intercept_scaling, 0.0)
        return dict(loss=self.loss, C=self.C, eps=self.tol,
                    bias=float(self.intercept_scaling) if self.fit_intercept else -1.0,
                    max_rounds=self.max_iter,
                    seed=0 if self.random_state is None else self.random_state,
                    inner_passes=self.inner_passes, scheduler=self.scheduler,
                    n_workers=self.n_workers, progress=Progress(quiet=not self.verbose),
                    owner=type(self).__name__)

    def fit(self, X, y=None):
        """Fit on ``(X, y)`` in memory, or on a dataset store given as ``X`` with ``y=None``."""
        kwargs = self._train_kwargs()
        jobs.check_params(kwargs["owner"], solver="dcd", loss=kwargs["loss"], C=kwargs["C"],
                          eps=kwargs["eps"], bias=kwargs["bias"],
                          max_rounds=kwargs["max_rounds"], seed=kwargs["seed"],
                          inner_passes=kwargs["inner_passes"])
        if _is_store(X):
            if y is not None:
                raise ValueError("y must be None when X is a dataset store (labels are stored)")
            self._set_model(jobs.train(X, **kwargs))
            return self
        if y is None:
            raise ValueError(f"{type(self).__name__}.fit requires y when X is an array")
        with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
            store = os.path.join(tmp, "train.zarr")
            ingest((X, y), store, seed=kwargs["seed"])
            self._set_model(jobs.train(store, **kwargs))
        return self

    def _set_model(self, model: Model):
        self.model_ = model
        self.classes_ = np.asarray(model.classes)
        self.coef_ = np.atleast_2d(model.coef_)
        self.intercept_ = np.atleast_1d(model.intercept_).astype(np.float64)
        self.n_features_in_ = model.n_features
        self.n_iter_ = model.summary["rounds"]
        self.objective_ = model.summary["primal_objective"]
        self.duality_gap_ = model.summary["duality_gap"]

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            raise ValueError(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' "
                             "with appropriate arguments before using this estimator.")

    def decision_function(self, X):
        """wᵀx + b for every row of an in-memory matrix; > 0 means ``classes_[1]``."""
        self._check_fitted()
        if _is_store(X):
            raise ValueError("decision_function takes an in-memory matrix; use score() or "
                             "distsvm.jobs.predict for a dataset store")
        return self.model_.decision_function(X)

    def predict(self, X):
        """Predicted labels (values from ``classes_``) for an in-memory matrix."""
        self._check_fitted()
        return self.model_.predict(X)

    def score(self, X, y=None):
        """Mean accuracy on ``(X, y)``, or on a dataset store (``y=None``) computed on the cluster."""
        self._check_fitted()
        if _is_store(X):
            return jobs.predict(X, self.model_, scheduler=self.scheduler,
                                n_workers=self.n_workers)["accuracy"]
        return float(np.mean(self.predict(X) == np.asarray(y)))
