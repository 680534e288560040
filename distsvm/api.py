"""scikit-learn compatible estimators on the distributed solvers: LinearSVC, LogisticRegression,
LinearSVR.

``fit`` accepts a NumPy/SciPy matrix with labels, or a dataset store (path,
URL or :class:`storage.Dataset`) with ``y=None``.  In-memory data is first
written to a temporary store, so both inputs train by the same code; so is a dask
array or dataframe, by tasks of the active Dask client (:mod:`distsvm.dask_io`: the
same store, so the same model), and predictions on one are lazy dask arrays.
Parameters mean what they mean in scikit-learn's ``LinearSVC``: the same C
(LIBLINEAR's scaling), ``fit_intercept`` as a regularized bias feature of value
``intercept_scaling`` (LIBLINEAR's ``-B``), ``tol`` as LIBLINEAR's ``eps``.
The cluster is the active Dask client if there is one, else ``scheduler``,
else ``n_workers`` worker processes started for the fit, else the process's in-process
cluster, started by the first fit and reused by the later ones
(:func:`distsvm.cluster.embedded_client`).

Both estimators share :class:`_LinearClassifier`; each only maps its parameters
to a LIBLINEAR solver type (:data:`distsvm.solvers.registry.LIBLINEAR_TYPES`), so they train
with whatever solver the project runs for that type.  In-memory labels are
encoded as their index in ``classes_`` before ingest (any label values, strings
included); predictions map back.  In-memory input is checked as scikit-learn
does (2-D, numeric, finite, non-empty, the fitted number of features).
"""

from __future__ import annotations

import inspect
import os
import tempfile

import numpy as np
import scipy.sparse as sp

from storage import Dataset

from . import dask_io, jobs, params
from .ingest import ingest, ingest_tabular
from .model import Model, probabilities
from .prediction import predict
from .progress import Progress
from .solvers import registry

# scikit-learn's names of distsvm's parameters: the estimators' messages use them
SKLEARN_NAMES = {"eps": "tol", "max_rounds": "max_iter", "seed": "random_state"}


def _constraints(*trained, **own) -> dict:
    """scikit-learn's ``_parameter_constraints`` of an estimator: the constraints of its
    parameters ``trained`` come from :class:`distsvm.params.Params`' table (``C``, ``tol``
    for ``eps``, ``random_state`` for ``seed``, or None), ``own`` are its own
    ("no_validation": none)."""
    table = {SKLEARN_NAMES.get(name, name): o.check for name, o in params.OPTIONS.items()}
    table["random_state"] = (None, *table["random_state"])
    return {**{k: table[k] for k in trained}, **own, **dict.fromkeys(
        ("scheduler", "n_workers", "verbose"), "no_validation")}


BOOL = params.Satisfies(lambda v: isinstance(v, (bool, np.bool_)), "a bool")
DUAL = (BOOL, params.OneOf(("auto",)))
PENALTY = (params.OneOf(("l1", "l2"), "a str among {'l1', 'l2'}"),)


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

    def _validate_params(self) -> None:
        """Each parameter against ``_parameter_constraints`` (scikit-learn's method, with
        :func:`distsvm.params.validate`'s messages)."""
        for name, rules in self._parameter_constraints.items():
            if rules != "no_validation":
                params.validate(type(self).__name__, name, getattr(self, name), rules)

    def _training(self, code: int) -> dict:
        """:func:`distsvm.jobs.train`'s keyword arguments for LIBLINEAR's ``-s code``
        (:func:`~distsvm.solvers.registry.type_params`) and the estimator's parameters,
        checked (in scikit-learn's names): its training parameters that the type's solver
        takes, as :class:`distsvm.params.Params` names them."""
        owner = type(self).__name__
        training = {**registry.type_params(code), "eps": self.tol, "max_rounds": self.max_iter,
                    "seed": 0 if self.random_state is None else self.random_state}
        solver, loss = training["solver"], training["loss"]
        for name in self._param_names():
            if (name in params.OPTIONS and name not in training
                    and params.takes(solver, name, loss)):
                training[name] = getattr(self, name)
        params.check_kwargs(owner, training, names=SKLEARN_NAMES)
        return dict(training, scheduler=self.scheduler, n_workers=self.n_workers,
                    progress=Progress(quiet=not self.verbose), owner=owner)

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            error = _sklearn_class("exceptions", "NotFittedError", NotFittedError)
            raise error(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' "
                        "with appropriate arguments before using this estimator.")

    def decision_function(self, X):
        """The model's decision values for every row of an in-memory matrix: wᵀx + b, (n,)
        for two classes (> 0 means ``classes_[1]``) or a regression, (n, n_classes) for
        more; a one-class model's wᵀx − ρ (> 0: an inlier)."""
        self._check_fitted()
        if _is_store(X):
            raise ValueError("decision_function takes an in-memory matrix; for a dataset "
                             "store use distsvm.predict")
        if dask_io.is_dask(X):  # a lazy dask array, chunk by chunk
            return dask_io.decision_function(self.model_, X, type(self).__name__)
        return self.model_.decision_function(_check_X(X, type(self).__name__,
                                                      self.n_features_in_))


def _is_store(X) -> bool:
    return isinstance(X, (str, os.PathLike, Dataset))


def _fit_dask(est, X, y, sample_weight, regression: bool = False, kwargs=None):
    """Fit ``est`` on a dask array or dataframe ``X`` and dask (or NumPy) labels ``y``:
    written to a temporary store by tasks on the active Dask client's workers (or dask's
    local scheduler), with the store the same matrix in memory gives (so the same model);
    returns ``(model, classes)``.  ``kwargs``: :func:`distsvm.jobs.train`'s, when ``est``
    makes them otherwise (the one-class SVM)."""
    from .ingest import DEFAULT_BLOCK_MB

    owner = type(est).__name__
    if sample_weight is not None:
        raise ValueError(f"{owner}: sample_weight is not supported with a dask collection; "
                         "ingest a store with instance weights instead")
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None")
    X, y = dask_io.as_arrays(X, y)
    if getattr(X, "ndim", 0) != 2:
        raise ValueError(f"{owner}: expected a 2-D dask array or dataframe")
    X = dask_io.rows_known(X)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"Found array with {X.shape[0]} sample(s) and {X.shape[1]} feature(s) "
                         f"(shape={X.shape}) while a minimum of 1 is required by {owner}.")
    kwargs = kwargs or est._train_kwargs(X.shape)
    classes = None
    if not regression:
        classes = dask_io.labels_of(y)
        if classes.dtype.kind in "fc" and (not np.all(np.isfinite(classes))
                                           or np.any(classes != np.round(classes))):
            raise ValueError("Unknown label type: continuous. Maybe you are trying to fit a "
                             "classifier, which expects discrete classes on a regression "
                             "target with continuous values.")
        if isinstance(kwargs.get("class_weight"), dict):
            kwargs["class_weight"] = _coded_class_weight(kwargs["class_weight"], classes, owner)
    client = None
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        pass
    with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
        store = ingest_tabular((X, y), os.path.join(tmp, "train.zarr"), client=client,
                               classes=classes, seed=kwargs["seed"], block_mb=DEFAULT_BLOCK_MB,
                               regression=regression)
        if registry.SOLVERS[kwargs["solver"]].reads == "columns":
            from .columns import columnize

            columnize(store)
        return jobs.train(store, **kwargs), classes


class NotFittedError(ValueError, AttributeError):
    """A method that needs a fitted estimator was called before ``fit`` (scikit-learn's
    own ``NotFittedError`` is raised instead when scikit-learn is installed)."""


def _sklearn_class(module: str, name: str, fallback):
    """scikit-learn's exception or warning class ``name``, or ``fallback`` without it (it is
    not a dependency): with it, scikit-learn code catching its own classes catches ours."""
    try:
        return getattr(__import__(f"sklearn.{module}", fromlist=[name]), name)
    except ImportError:
        return fallback


def _check_X(X, owner: str, n_features: int | None = None):
    """A 2-D numeric finite non-empty matrix (CSR if sparse), in scikit-learn's words."""
    if sp.issparse(X):
        X = X.tocsr()
        values = X.data
    else:
        X = np.asarray(X)
        if X.dtype.kind == "c":
            raise ValueError("Complex data not supported")
        if X.ndim != 2:
            raise ValueError(f"Expected 2D array, got {X.ndim}D array instead. Reshape your "
                             "data either using array.reshape(-1, 1) if your data has a single "
                             "feature or array.reshape(1, -1) if it contains a single sample.")
        X = X.astype(np.float64)  # TypeError / ValueError for what is not a number
        values = X
    if sp.issparse(X) and X.dtype.kind == "c":
        raise ValueError("Complex data not supported")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"Found array with {X.shape[0]} sample(s) and {X.shape[1]} feature(s) "
                         f"(shape={X.shape}) while a minimum of 1 is required by {owner}.")
    if not np.all(np.isfinite(values)):
        raise ValueError("Input X contains NaN or infinity.")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features, but {owner} is expecting {n_features} "
                         "features as input.")
    return X


def _y_1d(y, n_rows: int, owner: str) -> np.ndarray:
    """``y`` as a 1-d array of ``n_rows`` values (a column vector with scikit-learn's
    warning), in scikit-learn's words otherwise."""
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        import warnings

        warnings.warn("A column-vector y was passed when a 1d array was expected. Please "
                      "change the shape of y to (n_samples,), for example using ravel().",
                      _sklearn_class("exceptions", "DataConversionWarning", UserWarning),
                      stacklevel=4)
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"y should be a 1d array, got an array of shape {y.shape} instead.")
    if len(y) != n_rows:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                         f"[{n_rows}, {len(y)}]")
    return y


def _check_y(y, n_rows: int, owner: str):
    """Labels as an index into their sorted unique values: (classes, codes)."""
    y = _y_1d(y, n_rows, owner)
    if y.dtype.kind in "fc" and (not np.all(np.isfinite(y)) or np.any(y != np.round(y))):
        raise ValueError("Unknown label type: continuous. Maybe you are trying to fit a "
                         "classifier, which expects discrete classes on a regression target "
                         "with continuous values.")
    classes, codes = np.unique(y, return_inverse=True)
    return classes, codes


def _coded_class_weight(class_weight: dict, classes: np.ndarray, owner: str) -> dict:
    """``{label: weight}`` as ``{class index: weight}``, the labels of the temporary store."""
    out = {}
    for label, weight in class_weight.items():
        found = [k for k, c in enumerate(classes) if c == label]
        if len(found) != 1:
            raise ValueError(f"The 'class_weight' parameter of {owner} names label {label!r}, "
                             f"which is not a class of y {list(classes)}.")
        out[int(found[0])] = weight
    return out


def _check_sample_weight(sample_weight, codes: np.ndarray, n_classes: int) -> np.ndarray:
    """``sample_weight`` as float64 (n_rows,), finite and ≥ 0, with weight on ≥ 2 classes."""
    sw = np.asarray(sample_weight, dtype=np.float64)
    if sw.shape != codes.shape:
        raise ValueError(f"sample_weight.shape == {sw.shape}, expected {codes.shape}!")
    if not np.all(np.isfinite(sw)) or np.any(sw < 0):
        raise ValueError("sample_weight must be finite and >= 0")
    if not np.any(sw > 0):
        raise ValueError("Sample weights must contain at least one non-zero number.")
    if np.count_nonzero(np.bincount(codes, weights=sw, minlength=n_classes)) < 2:
        raise ValueError("sample_weight leaves rows of one class only (weight 0 on all the "
                         "others); a classifier needs two classes with positive weight")
    return sw


class _LinearClassifier(_Params):
    """fit / predict / decision_function / score over :func:`distsvm.jobs.train`.

    A subclass says its loss and penalty (``_loss_penalty``); the LIBLINEAR ``-s`` code of
    its parameters for data of a (rows, features) shape is the registry's
    (:func:`_liblinear_type`); the rest (bias, weights, tolerance, labels, stores) is
    shared.
    """

    _loss_name = None  # the loss as scikit-learn's messages name it, if not as distsvm's

    _estimator_type = "classifier"

    def _keep(self, arguments: dict) -> None:
        """Store the constructor's arguments as they are (scikit-learn's rule for ``__init__``)."""
        for k, v in arguments.items():
            if k != "self":
                setattr(self, k, v)

    def _loss_penalty(self) -> tuple[str, str]:
        return self.loss, "l2"

    def _liblinear_type(self, shape: tuple[int, int]) -> int:
        """LIBLINEAR's ``-s`` of the parameters for data of ``shape`` (rows, features):
        :func:`~distsvm.solvers.registry.type_of`, ``dual="auto"`` as scikit-learn's (the
        dual where features outnumber rows, if the type has one; else the other)."""
        loss, penalty = self._loss_penalty()
        dual = self.dual
        if dual == "auto":
            dual = shape[0] < shape[1]
            try:
                return registry.type_of(loss, penalty, dual, self._loss_name)
            except ValueError:
                dual = not dual
        return registry.type_of(loss, penalty, dual, self._loss_name)

    def _train_kwargs(self, shape: tuple[int, int]):
        """:func:`distsvm.jobs.train`'s keyword arguments, checked (in scikit-learn's names)."""
        self._validate_params()
        training = self._training(self._liblinear_type(shape))
        training["bias"] = float(self.intercept_scaling) if self.fit_intercept else -1.0
        return training

    def fit(self, X, y=None, sample_weight=None):
        """Fit on ``(X, y)`` in memory, or on a dataset store given as ``X`` with ``y=None``
        (its labels and any instance weights are stored)."""
        owner = type(self).__name__
        if _is_store(X):
            model = self._fit_store(X, y, sample_weight)
            self._set_model(model, np.asarray(model.classes))
            return self
        if dask_io.is_dask(X) or dask_io.is_dask(y):
            self._set_model(*_fit_dask(self, X, y, sample_weight))
            return self
        X = _check_X(X, owner)
        kwargs = self._train_kwargs(X.shape)
        classes, codes = _check_y(y, X.shape[0], owner)
        if isinstance(kwargs.get("class_weight"), dict):  # the store's labels are the codes
            kwargs["class_weight"] = _coded_class_weight(kwargs["class_weight"], classes, owner)
        extra = {}
        if sample_weight is not None:
            extra["sample_weight"] = _check_sample_weight(sample_weight, codes, len(classes))
        with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
            store = ingest((X, codes.astype(np.float64)), os.path.join(tmp, "train.zarr"),
                           seed=kwargs["seed"], **extra)
            if registry.SOLVERS[kwargs["solver"]].reads == "columns":
                from .columns import columnize

                columnize(store)  # in this process: the rows were in its memory anyway
            self._set_model(jobs.train(store, **kwargs), classes)
        return self

    _stored = "labels"  # what a store holds for y (the message of _fit_store)

    def _fit_store(self, X, y, sample_weight) -> Model:
        """Train on the dataset store ``X``: its labels (targets) and instance weights are
        stored, so ``y`` and ``sample_weight`` must be None."""
        if y is not None or sample_weight is not None:
            raise ValueError(f"y must be None when X is a dataset store ({self._stored} are "
                             "stored), and so must sample_weight (so are instance weights)")
        dataset = jobs.as_dataset(X)
        meta = dataset.meta
        return jobs.train(dataset, **self._train_kwargs((meta.n_rows, meta.n_features)))

    def _set_model(self, model: Model, classes):
        self.model_ = model
        self.classes_ = classes
        self.coef_ = np.atleast_2d(model.coef_)
        self.intercept_ = np.atleast_1d(model.intercept_).astype(np.float64)
        self.n_features_in_ = model.n_features
        self.n_iter_ = model.summary["rounds"]
        self.objective_ = model.summary["primal_objective"]

    def predict(self, X):
        """Predicted labels (values from ``classes_``) for an in-memory matrix."""
        dv = self.decision_function(X)
        if dask_io.is_dask(dv):
            return dask_io.labels(dv, self.model_, self.classes_)
        return self.classes_[self.model_.class_index(dv)]

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy on ``(X, y)``, or on a dataset store (``y=None``) computed on the cluster."""
        self._check_fitted()
        if _is_store(X):
            return predict(X, self.model_, scheduler=self.scheduler,
                           n_workers=self.n_workers)["accuracy"]
        return float(np.average(self.predict(X) == np.asarray(y), weights=sample_weight))

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        return Tags(estimator_type="classifier", target_tags=TargetTags(required=True),
                    classifier_tags=ClassifierTags(multi_class=True),
                    input_tags=InputTags(sparse=True))


class LinearSVC(_LinearClassifier):
    """Linear SVM (L1- or L2-loss), scikit-learn's ``LinearSVC`` on the distributed solvers.

    Minimizes ``½‖w‖² + C Σᵢ loss(yᵢ wᵀxᵢ)``: ``dual=True`` by dual coordinate descent,
    loss ``hinge`` (LIBLINEAR ``-s 3``) or ``squared_hinge`` (``-s 1``); ``dual=False``
    the L2-loss problem in the primal (``-s 2``); ``dual="auto"`` (the default, as
    scikit-learn's since 1.5) the primal when rows are at least as many as features and the
    loss has one (squared_hinge), else the dual.  ``inner_passes`` is the dual solver's.
    ``penalty="l1"`` (squared_hinge, primal): ``‖w‖₁ + C Σᵢ loss``, LIBLINEAR ``-s 5``
    (docs/solvers/l1.md).
    """

    _parameter_constraints = _constraints(
        "C", "tol", "max_iter", "random_state", "class_weight", "inner_passes",
        loss=(params.OneOf(("hinge", "squared_hinge")),), dual=DUAL, penalty=PENALTY,
        fit_intercept="no_validation", intercept_scaling=(params.Real(0.0),))

    def __init__(self, C=1.0, loss="squared_hinge", dual="auto", tol=1e-4, max_iter=1000,
                 fit_intercept=True, intercept_scaling=1.0, class_weight=None,
                 random_state=None, inner_passes=1, scheduler=None, n_workers=None, verbose=0,
                 penalty="l2"):
        self._keep(locals())

    def _loss_penalty(self) -> tuple[str, str]:
        return self.loss, self.penalty


class LogisticRegression(_LinearClassifier):
    """L2-regularized logistic regression, ``½‖w‖² + C Σᵢ log(1 + e^{−yᵢwᵀxᵢ})``:
    LIBLINEAR ``-s 0`` (primal, ``dual=False``) or ``-s 7`` (dual, ``dual=True``);
    ``penalty="l1"``: ``‖w‖₁ + C Σᵢ log(1 + e^{−yᵢwᵀxᵢ})``, LIBLINEAR ``-s 6``."""

    _parameter_constraints = _constraints(
        "C", "tol", "max_iter", "random_state", "class_weight", dual=(BOOL,), penalty=PENALTY,
        fit_intercept="no_validation", intercept_scaling=(params.Real(0.0),))
    _loss_name = "logistic_regression"

    def __init__(self, C=1.0, dual=False, tol=1e-4, max_iter=1000, fit_intercept=True,
                 intercept_scaling=1.0, class_weight=None, random_state=None, scheduler=None,
                 n_workers=None, verbose=0, penalty="l2"):
        self._keep(locals())

    def _loss_penalty(self) -> tuple[str, str]:
        return "logistic", self.penalty

    def predict_proba(self, X):
        """Class probabilities (n, n_classes), LIBLINEAR's: σ(wᵀx + b) for two classes;
        one-vs-rest σ(w_kᵀx + b_k) normalized to sum 1 for more."""
        dv = self.decision_function(X)
        return dask_io.probabilities(dv) if dask_io.is_dask(dv) else probabilities(dv)

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))


class LinearSVR(_LinearClassifier):
    """L2-regularized support vector regression, scikit-learn's ``LinearSVR`` on the
    distributed solvers: ``½‖w‖² + C Σᵢ ξ(wᵀxᵢ + b − yᵢ)`` with ξ(r) = max(0, |r| − epsilon)
    (``loss="epsilon_insensitive"``, LIBLINEAR ``-s 13``, dual only) or its square
    (``"squared_epsilon_insensitive"``: ``-s 11`` in the primal, ``-s 12`` in the dual).
    ``dual="auto"`` as scikit-learn's: the dual for the L1 loss or when features outnumber
    rows, else the primal.  The types are looked up in the registry: one it does not have
    (yet) is refused with a ``ValueError``.  ``fit`` takes real targets (or a regression
    store, ``ingest(..., regression=True)``); ``predict`` returns wᵀx + b; ``score`` is R²,
    as scikit-learn's regressors.  Defaults are scikit-learn's (epsilon 0, tol 1e-4), not
    LIBLINEAR's (-p 0.1).
    """

    _estimator_type = "regressor"
    _stored = "targets"

    _parameter_constraints = _constraints(
        "C", "tol", "max_iter", "random_state", "epsilon",
        loss=(params.OneOf(registry.REGRESSION_LOSSES),), dual=DUAL,
        fit_intercept="no_validation", intercept_scaling=(params.Real(0.0),))

    def __init__(self, epsilon=0.0, tol=1e-4, C=1.0, loss="epsilon_insensitive",
                 fit_intercept=True, intercept_scaling=1.0, dual="auto", verbose=0,
                 random_state=None, max_iter=1000, scheduler=None, n_workers=None):
        self._keep(locals())

    def fit(self, X, y=None, sample_weight=None):
        """Fit on ``(X, y)`` in memory (y real), or on a regression store given as ``X`` with
        ``y=None``."""
        owner = type(self).__name__
        if _is_store(X):
            self._set_model(self._fit_store(X, y, sample_weight))
            return self
        if dask_io.is_dask(X) or dask_io.is_dask(y):
            self._set_model(_fit_dask(self, X, y, sample_weight, regression=True)[0])
            return self
        X = _check_X(X, owner)
        kwargs = self._train_kwargs(X.shape)
        y = _check_target(y, X.shape[0], owner)
        extra = {}
        if sample_weight is not None:
            sw = np.asarray(sample_weight, dtype=np.float64)
            if sw.shape != y.shape:
                raise ValueError(f"sample_weight.shape == {sw.shape}, expected {y.shape}!")
            if not np.all(np.isfinite(sw)) or np.any(sw < 0) or not np.any(sw > 0):
                raise ValueError("sample_weight must be finite and >= 0, with at least one "
                                 "non-zero number")
            extra["sample_weight"] = sw
        with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
            store = ingest((X, y), os.path.join(tmp, "train.zarr"), seed=kwargs["seed"],
                           regression=True, **extra)
            self._set_model(jobs.train(store, **kwargs))
        return self

    def _set_model(self, model: Model, classes=None):
        self.model_ = model
        self.coef_ = np.asarray(model.coef_, dtype=np.float64)
        self.intercept_ = np.atleast_1d(model.intercept_).astype(np.float64)
        self.n_features_in_ = model.n_features
        self.n_iter_ = model.summary["rounds"]
        self.objective_ = model.summary["primal_objective"]

    def predict(self, X):
        """wᵀx + b for every row of an in-memory matrix."""
        return self.decision_function(X)

    def score(self, X, y=None, sample_weight=None):
        """R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)² on ``(X, y)``, or on a regression store
        (``y=None``) from the cluster's sums (:func:`distsvm.prediction.regression_sums`)."""
        self._check_fitted()
        if _is_store(X):
            res = predict(X, self.model_, scheduler=self.scheduler, n_workers=self.n_workers)
            error, _, st, _, stt, _ = res["regression_sums"]
            return float(1.0 - error / (stt - st * st / res["n_rows"]))
        y = _check_target(y, np.shape(X)[0], type(self).__name__)
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
        mean = np.average(y, weights=w)
        return float(1.0 - np.sum(w * (y - self.predict(X)) ** 2) / np.sum(w * (y - mean) ** 2))

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor", target_tags=TargetTags(required=True),
                    regressor_tags=RegressorTags(), input_tags=InputTags(sparse=True))


def _check_target(y, n_rows: int, owner: str) -> np.ndarray:
    """Real targets: float64 (n_rows,), finite, in scikit-learn's words."""
    y = _y_1d(y, n_rows, owner).astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("Input y contains NaN or infinity.")
    return y

class LinearOneClassSVM(_Params):
    """Linear one-class SVM (LIBLINEAR ``-s 21``, :mod:`distsvm.solvers.oneclass`):
    w = Σαᵢxᵢ and ρ of ``min ½αᵀQα s.t. 0 ≤ αᵢ ≤ 1, eᵀα = νl``; ``predict`` is +1 where
    wᵀx − ρ > 0, else −1.  scikit-learn's ``OneClassSVM`` is kernel-based (libsvm); this is
    its linear case, with its names (``nu``, ``tol``, ``max_iter``; ``offset_`` = ρ,
    ``decision_function`` = ``score_samples`` − ``offset_``).  ``fit`` takes an in-memory
    matrix (``y`` ignored) or a dataset store (its labels are ignored); no bias feature, as
    LIBLINEAR's ``-s 21``."""

    _estimator_type = "outlier_detector"

    _parameter_constraints = _constraints("nu", "tol", "max_iter", "random_state")

    def __init__(self, nu=0.5, tol=0.01, max_iter=1000, random_state=None, verbose=False,
                 scheduler=None, n_workers=None):
        self.nu, self.tol, self.max_iter, self.random_state = nu, tol, max_iter, random_state
        self.verbose, self.scheduler, self.n_workers = verbose, scheduler, n_workers

    def _train_kwargs(self) -> dict:
        self._validate_params()
        return self._training(21)  # LIBLINEAR's -s 21

    def fit(self, X, y=None, sample_weight=None):
        """Fit on an in-memory matrix or a dataset store; ``y`` is ignored."""
        owner = type(self).__name__
        if sample_weight is not None:
            raise ValueError(f"{owner} takes no sample_weight (LIBLINEAR's -s 21 has none)")
        if _is_store(X):
            model = jobs.train(jobs.as_dataset(X), **self._train_kwargs())
        elif dask_io.is_dask(X):  # the in-memory path's store, written by tasks
            X, _ = dask_io.as_arrays(X)
            X = dask_io.rows_known(X)
            if X.ndim != 2 or X.shape[0] < 2:
                raise ValueError(f"{owner} needs a 2-D dask collection of at least 2 samples, "
                                 f"got shape {X.shape}")
            labels = (np.arange(X.shape[0]) > 0).astype(np.float64)  # as in memory: unused
            model = _fit_dask(self, X, labels, None, kwargs=self._train_kwargs())[0]
        else:
            X = _check_X(X, owner)
            kwargs = self._train_kwargs()
            if X.shape[0] < 2:
                raise ValueError(f"{owner} needs at least 2 samples, got {X.shape[0]}")
            labels = (np.arange(X.shape[0]) > 0).astype(np.float64)  # unused; a store has two
            with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
                store = ingest((X, labels), os.path.join(tmp, "train.zarr"),
                               seed=kwargs["seed"])
                model = jobs.train(store, **kwargs)
        self.model_ = model
        self.coef_ = np.atleast_2d(model.coef_)
        self.offset_ = float(model.rho)
        self.intercept_ = np.array([-self.offset_])
        self.n_features_in_ = model.n_features
        self.n_iter_ = model.summary["rounds"]
        self.objective_ = model.summary["primal_objective"]
        return self

    def score_samples(self, X):
        """wᵀx for every row."""
        return self.decision_function(X) + self.offset_

    def predict(self, X):
        """+1 (inlier) where wᵀx − ρ > 0, else −1, as LIBLINEAR's predict."""
        dv, labels = self.decision_function(X), np.array([-1, 1])
        if dask_io.is_dask(dv):
            return dask_io.labels(dv, self.model_, labels)
        return labels[self.model_.class_index(dv)]

    def fit_predict(self, X, y=None):
        return self.fit(X).predict(X)
