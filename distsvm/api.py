"""scikit-learn's linear estimators on the distributed solvers: LinearSVC, LogisticRegression,
LinearSVR and LinearOneClassSVM.

They stand on scikit-learn's own bases — ``BaseEstimator`` (parameters, ``clone``, the
repr), ``ClassifierMixin``, ``RegressorMixin``, ``OutlierMixin`` (``score``, the tags) —
and share one ``fit`` (:class:`_LinearModel`): it accepts a NumPy/SciPy matrix with labels
(targets), a dask array or dataframe, or a dataset store (path, URL or
:class:`storage.Dataset`) with ``y=None``.  In-memory data is first written to a temporary
store, so every input trains by the same code; a dask collection by tasks of the active
Dask client (:func:`distsvm.ingest.ingest_tabular`: the same store, so the same model), and
predictions on one are lazy dask arrays.  Each estimator maps its parameters to one of
LIBLINEAR's ``-s`` types through the registry's table
(:func:`distsvm.solvers.registry.type_of`, scikit-learn's ``_get_liblinear_solver_type``)
and trains with whatever solver the project runs for that type, with LIBLINEAR's switch to
the primal solver for ``-s 1``, ``-s 7`` and ``-s 12``; its parameters are validated from
the training parameters' declaration (``_parameter_constraints``, :mod:`distsvm.params`).

Parameters mean what they mean in scikit-learn: the same C (LIBLINEAR's scaling),
``fit_intercept`` as a regularized bias feature of value ``intercept_scaling``
(LIBLINEAR's ``-B``), ``tol`` as LIBLINEAR's ``eps``.  The cluster is the active Dask
client if there is one, else ``scheduler``, else ``n_workers`` worker processes started for
the fit, else the process's in-process cluster, started by the first fit and reused by the
later ones (:func:`distsvm.cluster.embedded_client`).  In-memory labels are encoded as
their index in ``classes_`` before ingest (any label values, strings included);
predictions map back.  In-memory input is checked as scikit-learn does (2-D, numeric,
finite, non-empty, the fitted number of features).
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, OutlierMixin, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import check_is_fitted

from distsvm.storage import Dataset
from distsvm.storage.errors import listed

from . import dask_io, jobs, params
from .ingest import DEFAULT_BLOCK_MB, ingest, ingest_tabular
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
INTERCEPT = {"fit_intercept": "no_validation", "intercept_scaling": (params.Real(0.0),)}
# anytime training as scikit-learn's SGD estimators say it (issue 31): early_stopping holds
# out validation_fraction of the rows (by random_state) and stops after n_iter_no_change
# rounds without improvement, keeping the best round's model; max_time is the time budget
ANYTIME = {"early_stopping": (BOOL,),
           "validation_fraction": (params.Satisfies(
               lambda v: params.Real(0.0, 1.0).accepts(v) and v < 1,
               "a float in the range (0, 1)"),),
           "n_iter_no_change": (params.Int(1),), "max_time": (None, params.Real(0.0))}
ANYTIME_NAMES = {"validation_fraction", "n_iter_no_change", "max_time"}


def _is_store(X) -> bool:
    return isinstance(X, (str, os.PathLike, Dataset))


class _LinearModel(BaseEstimator):
    """The estimators' one ``fit`` and what goes with it: their parameters checked and
    turned into :func:`distsvm.jobs.train`'s (LIBLINEAR's ``-s`` of their loss, penalty and
    ``dual``), a store, a dask collection or an in-memory matrix trained alike, the fitted
    attributes, the decision values.  A subclass says what its ``y`` is
    (:meth:`_targets`, :meth:`_dask_targets`) and which attributes a fit sets
    (:meth:`_set_model`)."""

    _stored = "labels"  # what a store holds for y (the message of _fit_store)
    _loss_name = None  # the loss as scikit-learn's messages name it, if not as distsvm's
    _regression = False  # y: real-valued targets (a regression store)

    def _keep(self, arguments: dict) -> None:
        """Store the constructor's arguments as they are (scikit-learn's rule for ``__init__``)."""
        for k, v in arguments.items():
            if k != "self":
                setattr(self, k, v)

    def _validate_params(self) -> None:
        """Each parameter against ``_parameter_constraints`` (scikit-learn's method, with
        :func:`distsvm.params.validate`'s messages)."""
        for name, rules in self._parameter_constraints.items():
            if rules != "no_validation":
                params.validate(type(self).__name__, name, getattr(self, name), rules)

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

    def _train_kwargs(self, shape: tuple[int, int]) -> dict:
        """:func:`distsvm.jobs.train`'s keyword arguments for data of ``shape``: LIBLINEAR's
        ``-s`` (:func:`~distsvm.solvers.registry.type_params`) and the estimator's
        parameters, checked (in scikit-learn's names) — those that are training parameters
        and that the type's solver takes, as :class:`distsvm.params.Params` names them."""
        self._validate_params()
        owner = type(self).__name__
        training = {**registry.type_params(self._liblinear_type(shape)), "eps": self.tol,
                    "max_rounds": self.max_iter,
                    "seed": 0 if self.random_state is None else self.random_state}
        solver, loss = training["solver"], training["loss"]
        for name in self._get_param_names():
            if (name in params.OPTIONS and name not in training and name not in ANYTIME_NAMES
                    and params.takes(solver, name, loss)):
                training[name] = getattr(self, name)
        if getattr(self, "early_stopping", False):
            training.update(validation_fraction=self.validation_fraction,
                            n_iter_no_change=self.n_iter_no_change)
        if getattr(self, "max_time", None) is not None:
            training["time_budget"] = self.max_time
        if getattr(self, "fit_intercept", False):
            training["bias"] = float(self.intercept_scaling)
        params.check_kwargs(owner, training, names=SKLEARN_NAMES)
        return dict(training, scheduler=self.scheduler, n_workers=self.n_workers,
                    progress=Progress(quiet=not self.verbose), owner=owner)

    def fit(self, X, y=None, sample_weight=None):
        """Fit on ``(X, y)`` in memory or as dask collections, or on a dataset store given
        as ``X`` with ``y=None`` (its labels and any instance weights are stored)."""
        if _is_store(X):
            model, classes = self._fit_store(X, y, sample_weight)
        elif dask_io.is_dask(X) or dask_io.is_dask(y):
            model, classes = self._fit_dask(X, y, sample_weight)
        else:
            model, classes = self._fit_memory(X, y, sample_weight)
        self._set_model(model, classes)
        return self

    def _fit_store(self, X, y, sample_weight) -> tuple[Model, np.ndarray]:
        """Train on the dataset store ``X``: its labels (targets) and instance weights are
        stored, so ``y`` and ``sample_weight`` must be None."""
        if y is not None or sample_weight is not None:
            raise ValueError(f"y must be None when X is a dataset store ({self._stored} are "
                             "stored), and so must sample_weight (so are instance weights)")
        dataset = jobs.as_dataset(X)
        meta = dataset.meta
        model = jobs.train(dataset, **self._train_kwargs((meta.n_rows, meta.n_features)))
        return model, np.asarray(model.classes)

    def _fit_memory(self, X, y, sample_weight) -> tuple[Model, np.ndarray | None]:
        """Train on an in-memory matrix, written to a temporary store first."""
        X = _check_X(X, type(self).__name__)
        kwargs = self._train_kwargs(X.shape)
        stored, classes, weights = self._targets(y, X.shape[0], sample_weight, kwargs)
        extra = {} if weights is None else {"sample_weight": weights}
        with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
            store = ingest((X, stored), os.path.join(tmp, "train.zarr"), seed=kwargs["seed"],
                           regression=self._regression, **extra)
            return self._train(store, kwargs), classes

    def _fit_dask(self, X, y, sample_weight) -> tuple[Model, np.ndarray | None]:
        """Train on a dask array or dataframe ``X`` and dask (or NumPy) labels ``y``:
        written to a temporary store by tasks on the active Dask client's workers (or dask's
        local scheduler), the store the same matrix in memory gives (so the same model)."""
        owner = type(self).__name__
        if sample_weight is not None:
            raise ValueError(f"{owner}: sample_weight is not supported with a dask "
                             "collection; ingest a store with instance weights instead")
        X, y = dask_io.as_arrays(X, y)
        if getattr(X, "ndim", 0) != 2:
            raise ValueError(f"{owner}: expected a 2-D dask array or dataframe")
        X = dask_io.rows_known(X)
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise ValueError(f"Found array with {X.shape[0]} sample(s) and {X.shape[1]} "
                             f"feature(s) (shape={X.shape}) while a minimum of 1 is required "
                             f"by {owner}.")
        kwargs = self._train_kwargs(X.shape)
        y, classes = self._dask_targets(y, X.shape[0], kwargs)
        client = None
        try:
            from distributed import default_client

            client = default_client()
        except (ImportError, ValueError):
            pass
        with tempfile.TemporaryDirectory(prefix="distsvm-fit-") as tmp:
            store = ingest_tabular((X, y), os.path.join(tmp, "train.zarr"), client=client,
                                   classes=classes, seed=kwargs["seed"],
                                   block_mb=DEFAULT_BLOCK_MB, regression=self._regression)
            return self._train(store, kwargs), classes

    @staticmethod
    def _train(store, kwargs) -> Model:
        """Train on a temporary store (its column view built first where the solver reads
        it: in this process, the rows were in its memory anyway)."""
        if registry.SOLVERS[kwargs["solver"]].reads == "columns":
            from .columns import columnize

            columnize(store)
        return jobs.train(store, **kwargs)

    def _targets(self, y, n_rows: int, sample_weight, kwargs: dict):
        """``y`` as the temporary store holds it, the classes (None: not a classifier) and
        the instance weights (None: none); ``kwargs`` adjusted to the stored labels."""
        raise NotImplementedError

    def _dask_targets(self, y, n_rows: int, kwargs: dict):
        """A dask ``y`` as the temporary store holds it, and the classes (None: none)."""
        raise NotImplementedError

    def _set_model(self, model: Model, classes) -> None:
        self.model_ = model
        self.coef_ = np.atleast_2d(model.coef_)
        self.intercept_ = np.atleast_1d(model.intercept_).astype(np.float64)
        self.n_features_in_ = model.n_features
        self.n_iter_ = model.summary["rounds"]
        self.objective_ = model.summary["primal_objective"]

    def decision_function(self, X):
        """The model's decision values for every row of an in-memory matrix: wᵀx + b, (n,)
        for two classes (> 0 means ``classes_[1]``) or a regression, (n, n_classes) for
        more; a one-class model's wᵀx − ρ (> 0: an inlier)."""
        check_is_fitted(self, "model_")
        if _is_store(X):
            raise ValueError("decision_function takes an in-memory matrix; for a dataset "
                             "store use distsvm.predict")
        if dask_io.is_dask(X):  # a lazy dask array, chunk by chunk
            return dask_io.decision_function(self.model_, X, type(self).__name__)
        return self.model_.decision_function(_check_X(X, type(self).__name__,
                                                      self.n_features_in_))

    def _labels(self, X, classes=None):
        """``classes`` (default ``classes_``) indexed by the model's rule for the rows of
        ``X`` (lazy for dask)."""
        dv = self.decision_function(X)
        classes = self.classes_ if classes is None else classes
        if dask_io.is_dask(dv):
            return dask_io.labels(dv, self.model_, classes)
        return np.asarray(classes)[self.model_.class_index(dv)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class _LinearClassifier(ClassifierMixin, _LinearModel):
    """A classifier: labels of any values, encoded as their index in ``classes_`` for
    the temporary store; class and instance weights."""

    def _targets(self, y, n_rows, sample_weight, kwargs):
        owner = type(self).__name__
        classes, codes = _check_y(y, n_rows, owner)
        _code_class_weight(kwargs, classes, owner)
        weights = (None if sample_weight is None
                   else _check_sample_weight(sample_weight, codes, len(classes)))
        return codes.astype(np.float64), classes, weights

    def _dask_targets(self, y, n_rows, kwargs):
        owner = type(self).__name__
        if y is None:
            raise ValueError(f"{owner} requires y to be passed, but the target y is None")
        classes = dask_io.labels_of(y)
        if classes.dtype.kind in "fc" and (not np.all(np.isfinite(classes))
                                           or np.any(classes != np.round(classes))):
            raise ValueError("Unknown label type: continuous. Maybe you are trying to fit a "
                             "classifier, which expects discrete classes on a regression "
                             "target with continuous values.")
        _code_class_weight(kwargs, classes, owner)
        return y, classes

    def _set_model(self, model: Model, classes) -> None:
        super()._set_model(model, classes)
        self.classes_ = classes

    def predict(self, X):
        """Predicted labels (values from ``classes_``) for an in-memory matrix."""
        return self._labels(X)

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy on ``(X, y)`` (scikit-learn's), or on a dataset store (``y=None``)
        computed on the cluster."""
        check_is_fitted(self, "model_")
        if _is_store(X):
            return predict(X, self.model_, scheduler=self.scheduler,
                           n_workers=self.n_workers)["accuracy"]
        if dask_io.is_dask(X) or dask_io.is_dask(y):  # on the cluster, row chunks aligned
            X, y = dask_io.as_arrays(X, y)
            X = dask_io.rows_known(X) if dask_io.is_dask(X) else X
            return dask_io.score(self.predict(X), y, sample_weight, "accuracy")
        return super().score(X, y, sample_weight)


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
        warnings.warn("A column-vector y was passed when a 1d array was expected. Please "
                      "change the shape of y to (n_samples,), for example using ravel().",
                      DataConversionWarning, stacklevel=6)
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
                             f"which is not a class of y {listed(classes)}.")
        out[int(found[0])] = weight
    return out


def _code_class_weight(kwargs: dict, classes: np.ndarray, owner: str) -> None:
    """A ``{label: weight}`` class weight of ``kwargs`` as the temporary store's labels (the
    classes' indices) name them."""
    if isinstance(kwargs.get("class_weight"), dict):
        kwargs["class_weight"] = _coded_class_weight(kwargs["class_weight"], classes, owner)


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
        **INTERCEPT, **ANYTIME)

    def __init__(self, C=1.0, loss="squared_hinge", dual="auto", tol=1e-4, max_iter=1000,
                 fit_intercept=True, intercept_scaling=1.0, class_weight=None,
                 random_state=None, inner_passes=1, scheduler=None, n_workers=None, verbose=0,
                 penalty="l2", early_stopping=False, validation_fraction=0.1,
                 n_iter_no_change=5, max_time=None):
        self._keep(locals())

    def _loss_penalty(self) -> tuple[str, str]:
        return self.loss, self.penalty


class LogisticRegression(_LinearClassifier):
    """L2-regularized logistic regression, ``½‖w‖² + C Σᵢ log(1 + e^{−yᵢwᵀxᵢ})``:
    LIBLINEAR ``-s 0`` (primal, ``dual=False``) or ``-s 7`` (dual, ``dual=True``);
    ``penalty="l1"``: ``‖w‖₁ + C Σᵢ log(1 + e^{−yᵢwᵀxᵢ})``, LIBLINEAR ``-s 6``."""

    _parameter_constraints = _constraints(
        "C", "tol", "max_iter", "random_state", "class_weight", dual=(BOOL,), penalty=PENALTY,
        **INTERCEPT, **ANYTIME)
    _loss_name = "logistic_regression"

    def __init__(self, C=1.0, dual=False, tol=1e-4, max_iter=1000, fit_intercept=True,
                 intercept_scaling=1.0, class_weight=None, random_state=None, scheduler=None,
                 n_workers=None, verbose=0, penalty="l2", early_stopping=False,
                 validation_fraction=0.1, n_iter_no_change=5, max_time=None):
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


class LinearSVR(RegressorMixin, _LinearModel):
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

    _stored = "targets"
    _regression = True
    _parameter_constraints = _constraints(
        "C", "tol", "max_iter", "random_state", "epsilon",
        loss=(params.OneOf(registry.REGRESSION_LOSSES),), dual=DUAL, **INTERCEPT, **ANYTIME)

    def __init__(self, epsilon=0.0, tol=1e-4, C=1.0, loss="epsilon_insensitive",
                 fit_intercept=True, intercept_scaling=1.0, dual="auto", verbose=0,
                 random_state=None, max_iter=1000, scheduler=None, n_workers=None,
                 early_stopping=False, validation_fraction=0.1, n_iter_no_change=5,
                 max_time=None):
        self._keep(locals())

    def _targets(self, y, n_rows, sample_weight, kwargs):
        y = _check_target(y, n_rows, type(self).__name__)
        if sample_weight is None:
            return y, None, None
        sw = np.asarray(sample_weight, dtype=np.float64)
        if sw.shape != y.shape:
            raise ValueError(f"sample_weight.shape == {sw.shape}, expected {y.shape}!")
        if not np.all(np.isfinite(sw)) or np.any(sw < 0) or not np.any(sw > 0):
            raise ValueError("sample_weight must be finite and >= 0, with at least one "
                             "non-zero number")
        return y, None, sw

    def _dask_targets(self, y, n_rows, kwargs):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target "
                             "y is None")
        return y, None

    def _set_model(self, model: Model, classes) -> None:
        super()._set_model(model, classes)
        self.coef_ = np.asarray(model.coef_, dtype=np.float64)

    def predict(self, X):
        """wᵀx + b for every row of an in-memory matrix."""
        return self.decision_function(X)

    def score(self, X, y=None, sample_weight=None):
        """R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)² on ``(X, y)`` (scikit-learn's), or on a regression
        store (``y=None``) from the cluster's sums (:func:`distsvm.prediction.regression_sums`)."""
        check_is_fitted(self, "model_")
        if _is_store(X):
            res = predict(X, self.model_, scheduler=self.scheduler, n_workers=self.n_workers)
            error, _, st, _, stt, _ = res["regression_sums"]
            return float(1.0 - error / (stt - st * st / res["n_rows"]))
        if dask_io.is_dask(X) or dask_io.is_dask(y):  # on the cluster, row chunks aligned
            X, y = dask_io.as_arrays(X, y)
            X = dask_io.rows_known(X) if dask_io.is_dask(X) else X
            return dask_io.score(self.predict(X), y, sample_weight, "r2")
        return super().score(X, y, sample_weight)


def _check_target(y, n_rows: int, owner: str) -> np.ndarray:
    """Real targets: float64 (n_rows,), finite, in scikit-learn's words."""
    y = _y_1d(y, n_rows, owner).astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("Input y contains NaN or infinity.")
    return y


class LinearOneClassSVM(OutlierMixin, _LinearModel):
    """Linear one-class SVM (LIBLINEAR ``-s 21``, :mod:`distsvm.solvers.oneclass`):
    w = Σαᵢxᵢ and ρ of ``min ½αᵀQα s.t. 0 ≤ αᵢ ≤ 1, eᵀα = νl``; ``predict`` is +1 where
    wᵀx − ρ > 0, else −1.  scikit-learn's ``OneClassSVM`` is kernel-based (libsvm); this is
    its linear case, with its names (``nu``, ``tol``, ``max_iter``; ``offset_`` = ρ,
    ``decision_function`` = ``score_samples`` − ``offset_``).  ``fit`` takes an in-memory
    matrix or dask collection (``y`` ignored) or a dataset store (its labels are ignored);
    no bias feature, as LIBLINEAR's ``-s 21``."""

    _parameter_constraints = _constraints("nu", "tol", "max_iter", "random_state")

    def __init__(self, nu=0.5, tol=0.01, max_iter=1000, random_state=None, verbose=False,
                 scheduler=None, n_workers=None):
        self._keep(locals())

    def _liblinear_type(self, shape: tuple[int, int]) -> int:
        return 21  # LIBLINEAR's one-class SVM

    def fit(self, X, y=None, sample_weight=None):
        """Fit on an in-memory matrix, a dask collection or a dataset store; ``y`` is
        ignored."""
        if sample_weight is not None:
            raise ValueError(f"{type(self).__name__} takes no sample_weight (LIBLINEAR's "
                             "-s 21 has none)")
        return super().fit(X)

    def _targets(self, y, n_rows, sample_weight, kwargs):
        return self._dask_targets(y, n_rows, kwargs)[0], None, None

    def _dask_targets(self, y, n_rows, kwargs):
        """Labels the solver does not read, 0 then 1s: a store holds two classes."""
        if n_rows < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 samples, got {n_rows}")
        return (np.arange(n_rows) > 0).astype(np.float64), None

    def _set_model(self, model: Model, classes) -> None:
        super()._set_model(model, classes)
        self.offset_ = float(model.rho)

    def score_samples(self, X):
        """wᵀx for every row."""
        return self.decision_function(X) + self.offset_

    def predict(self, X):
        """+1 (inlier) where wᵀx − ρ > 0, else −1, as LIBLINEAR's predict."""
        return self._labels(X, np.array([-1, 1]))
