"""Model files: a safe, versioned format (JSON + .npy in a zip, never pickle) and LIBLINEAR's text format.

Conventions (LIBLINEAR's, with scikit-learn's label order):

* ``w`` is float64; binary: shape (n_features [+1],), multi-class (one-vs-rest):
  (n_classes, n_features [+1]).  The extra last column is the weight of the
  bias feature when ``bias >= 0`` (LIBLINEAR's ``-B``); intercept = w[..., -1]·bias.
* ``classes`` are the original label values, sorted; a binary decision value
  > 0 predicts ``classes[1]``.  LIBLINEAR predicts its ``label[0]`` for > 0, so
  the text format is written and read with the labels in that order.
* A *ranking* model (ordinal regression, the cutting-plane solver's ``objective="ordinal"``)
  has ``thresholds`` θ₁ ≤ … ≤ θ_{R−1}: ``classes`` are its R ranks in increasing order, ``w``
  is one vector (n_features [+1],) whatever R, and a row with score s = wᵀx gets the rank
  ``classes[#{k : s > θ_k}]``.  Its file is format version 2 (classifiers stay version 1),
  so a reader that predates ranking models refuses it instead of misreading it.
* A *regression* model (an SVR loss, :data:`~distsvm.solvers.registry.REGRESSION_LOSSES`)
  has no classes (``classes == ()``) and one vector w; it predicts the real value wᵀx + b.
  LIBLINEAR writes it with ``nr_class 2`` and no ``label`` line (linear.cpp ``train``).
* A *one-class* model (LIBLINEAR's ``-s 21``) has ``rho`` ρ: its decision value is wᵀx − ρ,
  a row is ``classes[1]`` = +1 (an inlier) if it is > 0, else −1 (LIBLINEAR's ``predict``);
  ``classes`` are (−1, +1) whatever the training store's labels.  Its file is format version
  3, so that an older reader refuses it rather than predict without ρ.
"""

from __future__ import annotations

import dataclasses
import io
import json
import numbers
import os
import tokenize
import warnings
import zipfile
import zlib

import numpy as np
import scipy.sparse as sp

from distsvm.storage.checkpoint import json_default, read_bytes, write_bytes
from distsvm.storage.errors import listed
from distsvm.workers.layout import laid_out

from . import __version__
from .resources import size
from .solvers.registry import LIBLINEAR_TYPES, REGRESSION_LOSSES, SOLVERS, liblinear_type

FORMAT_NAME = "distsvm-model"
FORMAT_VERSION = 1
RANKING_FORMAT_VERSION = 2  # a ranking model's file: version 1's fields plus "thresholds"
ONECLASS_FORMAT_VERSION = 3  # a one-class model's file: version 1's fields plus "rho"
SUPPORTED_VERSIONS = (1, 2, 3)
ONECLASS_CLASSES = (-1.0, 1.0)
ONECLASS_LOSS = "oneclass"  # the loss of LIBLINEAR's -s 21, whose models have a rho

# LIBLINEAR's solver_type names by -s code (linear.cpp's solver_type_table): a (solver, loss)
# is written and read by its registry code, so a registry entry is all a new type needs here.
_TYPE_NAMES = {0: "L2R_LR", 1: "L2R_L2LOSS_SVC_DUAL", 2: "L2R_L2LOSS_SVC",
               3: "L2R_L1LOSS_SVC_DUAL", 4: "MCSVM_CS", 5: "L1R_L2LOSS_SVC", 6: "L1R_LR",
               7: "L2R_LR_DUAL", 11: "L2R_L2LOSS_SVR", 12: "L2R_L2LOSS_SVR_DUAL",
               13: "L2R_L1LOSS_SVR_DUAL", 21: "ONECLASS_SVM"}
# primal CD has no code of its own: it solves -s 2's and -s 0's problems (imported as newton)
_SAME_PROBLEM = {("pcd", "squared_hinge"): 2, ("pcd", "logistic"): 0}
_REGRESSION_NAMES = tuple(_TYPE_NAMES[c] for c, (_, loss) in LIBLINEAR_TYPES.items()
                          if loss in REGRESSION_LOSSES)  # LIBLINEAR's regression types


def _liblinear_name(solver: str, loss: str) -> str | None:
    """LIBLINEAR's solver_type name of a model trained by ``solver`` with ``loss``."""
    code = _SAME_PROBLEM.get((solver, loss), liblinear_type(solver, loss))
    return _TYPE_NAMES.get(code)


def _from_liblinear(name: str) -> tuple[str, str] | None:
    """The (solver, loss) of a LIBLINEAR solver_type name, or None if distsvm has none."""
    code = next((k for k, v in _TYPE_NAMES.items() if v == name), None)
    return LIBLINEAR_TYPES.get(code)


class ModelFormatError(ValueError):
    """A model file that cannot be read: the message names the file and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Model:
    """A trained linear classifier, or a ranking model if ``thresholds`` is not None."""

    w: np.ndarray
    bias: float
    classes: tuple[float, ...]
    solver: str
    loss: str
    params: dict
    summary: dict
    n_features: int
    thresholds: tuple[float, ...] | None = None
    rho: float | None = None  # a one-class model's ρ (decision value wᵀx − ρ)

    @property
    def is_ranking(self) -> bool:
        return self.thresholds is not None

    @property
    def is_regression(self) -> bool:
        """Whether this is a regression (SVR) model: no classes, predicts wᵀx + b."""
        return self.loss in REGRESSION_LOSSES

    @property
    def coef_(self) -> np.ndarray:
        return self.w[..., : self.n_features]

    @property
    def intercept_(self):
        if self.rho is not None:
            return -self.rho
        if self.bias < 0:
            return 0.0 if self.w.ndim == 1 else np.zeros(self.w.shape[0])
        return self.w[..., self.n_features] * self.bias

    def decision_function(self, X) -> np.ndarray:
        """wᵀx + b per row; columns beyond ``n_features`` are ignored, missing ones are 0."""
        X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
        k = min(X.shape[1], self.n_features)
        dv = X[:, :k].astype(np.float64) @ self.coef_[..., :k].T
        return np.asarray(dv + self.intercept_)

    def predict(self, X) -> np.ndarray:
        return self.labels(self.decision_function(X))

    def class_index(self, dv) -> np.ndarray:
        """Each row's index into ``classes`` from its decision values ``dv`` (wᵀx + b; a
        one-class model's wᵀx − ρ): the rule of every prediction — one-vs-rest, the class of
        the largest value; binary and one-class, ``classes[1]`` where it is > 0; a ranking
        model, the rank #{k : s > θ_k}."""
        dv = np.asarray(dv)
        if self.is_ranking:
            return np.searchsorted(np.asarray(self.thresholds), dv, side="left")
        return np.argmax(dv, axis=1) if dv.ndim == 2 else (dv > 0).astype(np.int64)

    def labels(self, dv) -> np.ndarray:
        """The labels of decision values ``dv`` (:meth:`class_index`); a regression model's
        predictions are its decision values."""
        return dv if self.is_regression else np.asarray(self.classes)[self.class_index(dv)]

    def weights_for(self, n_features: int) -> np.ndarray:
        """The weights laid out for data with ``n_features`` columns
        (:func:`distsvm.workers.layout.laid_out`)."""
        return laid_out(self.w, self.bias, n_features)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, (n_rows, n_classes) in ``classes`` order, of a logistic
        regression model (LIBLINEAR's ``predict_probability``; see :func:`probabilities`)."""
        self.check_probability()
        return probabilities(self.decision_function(X))

    def check_probability(self) -> None:
        """Raise ``ValueError`` unless the model gives probabilities (logistic loss only, as
        LIBLINEAR's ``check_probability_model``)."""
        if self.loss != "logistic" or self.is_ranking:
            raise ValueError(f"probability output is only supported for logistic regression; "
                             f"this model's loss is {self.loss!r}")

    def check(self, where: str) -> None:
        """Raise :class:`ModelFormatError` if the fields are inconsistent."""
        for name, v in (("bias", self.bias), *(("class label", c) for c in self.classes)):
            real = isinstance(v, numbers.Real) and not isinstance(v, bool)
            if not (real and np.isfinite(v)):  # `bias inf` predicted one class for everything
                raise ModelFormatError(f"{where}: the {name} must be a finite real number, "
                                       f"got {v!r}")
        if not isinstance(self.n_features, numbers.Integral) or self.n_features < 0:
            raise ModelFormatError(f"{where}: the number of features must be an integer >= 0, "
                                   f"got {self.n_features!r}")
        width = self.n_features + (1 if self.bias >= 0 else 0)
        n = len(self.classes)
        multiclass = self.solver in SOLVERS and SOLVERS[self.solver].multiclass
        one_vector = (n == 2 and not multiclass) or self.is_ranking or self.is_regression
        expected = (width,) if one_vector else (n, width)
        if self.w.shape != expected:
            raise ModelFormatError(f"{where}: weights have shape {self.w.shape}, expected "
                                   f"{expected} for {n} classes, {self.n_features} features "
                                   f"and bias {self.bias:g}")
        if self.is_regression:
            if n:
                raise ModelFormatError(f"{where}: a regression model ({self.loss}) has no "
                                       f"classes, got {listed(self.classes)}")
        elif n < 2 or list(self.classes) != sorted(set(self.classes)):
            raise ModelFormatError(f"{where}: classes must be two or more sorted distinct "
                                   f"values, got {listed(self.classes)}")
        if self.w.dtype.kind not in "fiu":  # complex, boolean, strings, objects
            raise ModelFormatError(f"{where}: weights have dtype {self.w.dtype}, expected "
                                   "real numbers (float64)")
        if not np.all(np.isfinite(self.w)):
            raise ModelFormatError(f"{where}: weights contain NaN or infinite values")
        if self.is_ranking:
            t = np.asarray(self.thresholds, dtype=np.float64)
            if t.shape != (n - 1,) or not np.all(np.isfinite(t)) or np.any(np.diff(t) < 0):
                raise ModelFormatError(f"{where}: a ranking model with {n} ranks needs {n - 1} "
                                       f"finite nondecreasing thresholds, got "
                                       f"{listed(self.thresholds)}")
        if (self.loss == ONECLASS_LOSS) != (self.rho is not None):
            raise ModelFormatError(f"{where}: a model of loss {self.loss!r} with rho "
                                   f"{self.rho!r}: the one-class loss and a rho go together")
        # ρ = +inf is LIBLINEAR's at ν = 1 (every α at 1, no row at 0): every row −1
        if self.rho is not None and (np.isnan(self.rho) or self.rho == -np.inf or self.bias >= 0
                                     or tuple(self.classes) != ONECLASS_CLASSES):
            raise ModelFormatError(f"{where}: a one-class model needs a rho (not NaN or -inf), "
                                   f"no bias and classes {list(ONECLASS_CLASSES)}, got rho {self.rho!r}, "
                                   f"bias {self.bias:g}, classes {listed(self.classes)}")


def probabilities(dv) -> np.ndarray:
    """Probabilities from logistic decision values, as LIBLINEAR's ``predict_probability``:
    binary (``dv`` of shape (n,)), P(classes[1]) = σ(wᵀx) = 1/(1 + e^{−wᵀx}) and
    P(classes[0]) = 1 − that; one-vs-rest (``dv`` of shape (n, K)), the K sigmoids σ(wₖᵀx)
    divided by their sum.  Returns (n, K) in ``classes`` order."""
    dv = np.asarray(dv, dtype=np.float64)
    p = 0.5 * (1.0 + np.tanh(0.5 * dv))  # σ without overflow
    if dv.ndim == 1:
        return np.column_stack([1.0 - p, p])
    return p / p.sum(axis=1, keepdims=True)


def _write(path, write, storage_options: dict | None) -> None:
    """Serialize through ``write(fileobj)`` in memory, then write the bytes whole or not at
    all (a local temp file renamed into place; one PUT on an object store)."""
    buf = io.BytesIO()
    write(buf)
    write_bytes(os.fspath(path), buf.getvalue(), storage_options)


def save_model(model: Model, path, storage_options: dict | None = None) -> None:
    """Save as a zip of ``model.json`` and ``w.npy``; atomic (never a partial file at ``path``).

    ``path`` may be a remote fsspec URL (``s3://bucket/m.model``) with ``storage_options``."""
    model.check(os.fspath(path))
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
              "distsvm_version": __version__, "bias": model.bias,
              "classes": list(model.classes), "solver": model.solver, "loss": model.loss,
              "params": model.params, "summary": model.summary,
              "n_features": model.n_features, "w_shape": list(model.w.shape)}
    if model.is_ranking:
        header.update(format_version=RANKING_FORMAT_VERSION, kind="ranking",
                      thresholds=[float(t) for t in model.thresholds])
    if model.rho is not None:
        header.update(format_version=ONECLASS_FORMAT_VERSION, kind="oneclass",
                      rho=float(model.rho))
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(model.w, dtype="<f8"), allow_pickle=False)

    def write(f):
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("model.json", json.dumps(header, allow_nan=True, default=json_default))
            z.writestr("w.npy", buf.getvalue())

    _write(path, write, storage_options)


def load_model(path, storage_options: dict | None = None) -> Model:
    """Load a distsvm model, or import a LIBLINEAR text model (detected by its first line);
    ``path`` may be a remote fsspec URL with ``storage_options``."""
    path = os.fspath(path)
    content = read_bytes(path, storage_options)
    if content.startswith(b"solver_type"):
        return _parse_liblinear(path, content)
    if not zipfile.is_zipfile(io.BytesIO(content)):
        raise ModelFormatError(f"{path}: not a distsvm model (not a zip archive) nor a "
                               "LIBLINEAR model")
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as z:
            names = set(z.namelist())
            missing = {"model.json", "w.npy"} - names
            if missing:
                raise ModelFormatError(f"{path}: missing member(s) {sorted(missing)}")
            header = _bounded_header(path, z)
            with warnings.catch_warnings():  # numpy's about a damaged .npy header: its error
                warnings.simplefilter("ignore")  # (below) says it in one line
                w = np.load(io.BytesIO(z.read("w.npy")), allow_pickle=False)
    except ModelFormatError:
        raise
    except _DECODE_ERRORS as exc:
        raise ModelFormatError(f"{path}: unreadable model file: {type(exc).__name__}: "
                               f"{_one_line(exc)}") from exc
    if w.dtype.kind not in "fiu":  # astype would drop a complex array's imaginary part
        raise ModelFormatError(f"{path}: weights have dtype {w.dtype}, expected real numbers "
                               "(float64)")
    if header.get("format") != FORMAT_NAME:
        raise ModelFormatError(f"{path}: not a distsvm model (format {header.get('format')!r})")
    version = header.get("format_version")
    if type(version) is not int or version not in SUPPORTED_VERSIONS:  # not true, not 1.0
        raise ModelFormatError(f"{path}: model format version {header.get('format_version')!r} "
                               f"is not supported (supported: {list(SUPPORTED_VERSIONS)})")
    try:
        model = Model(w=w.astype(np.float64, copy=False), bias=float(header["bias"]),
                      classes=tuple(float(c) for c in header["classes"]),
                      solver=str(header["solver"]), loss=str(header["loss"]),
                      params=dict(header["params"]), summary=dict(header["summary"]),
                      n_features=int(header["n_features"]),
                      thresholds=(tuple(float(t) for t in header["thresholds"])
                                  if header["format_version"] == RANKING_FORMAT_VERSION
                                  else None),
                      rho=(float(header["rho"])
                           if header["format_version"] == ONECLASS_FORMAT_VERSION else None))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ModelFormatError(f"{path}: malformed model header: {_one_line(repr(exc))}") from exc
    model.check(path)
    return model


MAX_HEADER_BYTES = 64 << 20  # model.json: parameters and a run summary, kilobytes in practice


def _bounded_header(path: str, z: zipfile.ZipFile) -> dict:
    """``model.json`` of a model archive, after checking — before anything is
    decompressed — that it is at most :data:`MAX_HEADER_BYTES` and that ``w.npy``'s array
    header describes exactly the bytes the member declares, the shape the header's
    ``n_features``, classes and bias call for (at most), and that fits in this machine's
    available memory: a small crafted archive cannot make us decompress or allocate
    gigabytes (ModelFormatError with the sizes otherwise)."""
    from distsvm.storage.checkpoint import npy_header

    head, wi = z.getinfo("model.json"), z.getinfo("w.npy")
    if head.file_size > MAX_HEADER_BYTES:
        raise ModelFormatError(f"{path}: member model.json declares {head.file_size} bytes, "
                               f"more than {MAX_HEADER_BYTES}: refused unread")
    header = json.loads(z.read(head))
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: model.json is a JSON {type(header).__name__}, not an "
                               "object: not a distsvm model")
    shape, dtype = npy_header(z, wi, path)
    try:
        width = int(header["n_features"]) + 1
        rows = max(1, len(header["classes"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"{path}: malformed model header: {exc!r}") from exc
    count = int(np.prod(shape, dtype=object))
    if len(shape) not in (1, 2) or count > width * rows:
        raise ModelFormatError(f"{path}: w.npy has shape {shape}, more than the "
                               f"{rows} x {width} the header's classes and n_features allow")
    need = count * max(dtype.itemsize, 8)  # read, then as float64
    import psutil

    available = psutil.virtual_memory().available
    if need > available:
        raise ModelFormatError(f"{path}: its weights take {size(need)} in memory, more than "
                               f"this machine's available {size(available)}")
    return header


# What reading a damaged archive and its members can raise: the zip's own errors, a corrupt
# deflate stream (zlib.error, EOFError), an unknown compression method (NotImplementedError),
# an encrypted member (RuntimeError), a malformed .npy header (SyntaxError, TokenError,
# ValueError) or size (MemoryError, OverflowError), deep JSON (RecursionError).
_DECODE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError,
                  zlib.error, NotImplementedError, RuntimeError, SyntaxError, RecursionError,
                  tokenize.TokenError, MemoryError, OverflowError, KeyError, TypeError)


def _one_line(exc) -> str:
    """An error message on one line (a parser's may span several)."""
    return " ".join(str(exc).split())


def liblinear_label_order(model: Model) -> list[int]:
    """Indices into ``classes`` in the order of the model's LIBLINEAR labels: binary, the
    class of positive decision values first (LIBLINEAR's ``label[0]``); else sorted."""
    return [1, 0] if model.w.ndim == 1 else list(range(len(model.classes)))


def export_liblinear(model: Model, path, storage_options: dict | None = None) -> None:
    """Write LIBLINEAR's text model (as ``save_model`` in linear.cpp), loadable by LIBLINEAR."""
    if model.is_ranking:
        raise ModelFormatError(f"{path}: a ranking (ordinal regression) model with "
                               f"{len(model.classes)} ranks and thresholds cannot be written "
                               "in LIBLINEAR's format, which has no ranking models")
    name = _liblinear_name(model.solver, model.loss)
    if name is None:
        raise ModelFormatError(f"{path}: LIBLINEAR has no solver type for solver "
                               f"{model.solver!r} with loss {model.loss!r}")
    binary = model.w.ndim == 1
    labels = [] if model.is_regression else [model.classes[k]
                                             for k in liblinear_label_order(model)]
    cols = model.w[:, None] if binary else model.w.T  # one line per feature, nr_w weights

    def write(f):
        out = io.StringIO()
        out.write(f"solver_type {name}\nnr_class {2 if model.is_regression else len(model.classes)}\n")
        if not model.is_regression and model.rho is None:  # SVR and one-class: no labels
            out.write("label " + " ".join(f"{c:.17g}" for c in labels) + "\n")
        out.write(f"nr_feature {model.n_features}\nbias {model.bias:.17g}\n")
        if model.rho is not None:
            out.write(f"rho {model.rho:.17g}\n")
        out.write("w\n")
        for row in cols:
            out.write("".join(f"{v:.17g} " for v in row) + "\n")
        f.write(out.getvalue().encode())

    _write(path, write, storage_options)


def import_liblinear(path, storage_options: dict | None = None) -> Model:
    """Read LIBLINEAR's text model format into a :class:`Model`."""
    path = os.fspath(path)
    return _parse_liblinear(path, read_bytes(path, storage_options))


def _parse_liblinear(path: str, content: bytes) -> Model:
    header: dict[str, list[str]] = {}
    with io.StringIO(content.decode(errors="replace")) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "w":
                break
            header[parts[0]] = parts[1:]
        else:
            raise ModelFormatError(f"{path}: no 'w' line: not a LIBLINEAR model")
        rows = [line.split() for line in f if line.strip()]
    try:
        name = header["solver_type"][0]
        n_class = int(header["nr_class"][0])
        oneclass = name == "ONECLASS_SVM"  # no labels; a rho line
        labels = (list(ONECLASS_CLASSES[::-1]) if oneclass else [] if name in _REGRESSION_NAMES
                  else [float(v) for v in header["label"]])
        rho = float(header["rho"][0]) if oneclass else None
        n_features = int(header["nr_feature"][0])
        bias = float(header["bias"][0])
    except (KeyError, IndexError, ValueError) as exc:
        raise ModelFormatError(f"{path}: malformed LIBLINEAR header: {exc!r}") from exc
    for what, v in (("bias", bias), *(("class label", c) for c in labels)):
        if not np.isfinite(v):  # before the weights' shape, which the bias decides
            raise ModelFormatError(f"{path}: the {what} must be a finite real number, got {v!r}")
    if _from_liblinear(name) is None:
        raise ModelFormatError(f"{path}: LIBLINEAR solver type {name} (a type not trained "
                               "here) is not a model distsvm can use")
    solver, loss = _from_liblinear(name)
    regression = name in _REGRESSION_NAMES
    if regression:
        labels = []
        if n_class != 2:
            raise ModelFormatError(f"{path}: a regression model has nr_class 2, got {n_class}")
    elif len(labels) != n_class or n_class < 2:
        raise ModelFormatError(f"{path}: nr_class {n_class} does not match labels {listed(labels)}")
    nr_w = 1 if n_class == 2 and name != "MCSVM_CS" else n_class
    width = n_features + (1 if bias >= 0 else 0)
    try:
        W = np.array(rows, dtype=np.float64)
    except ValueError as exc:
        raise ModelFormatError(f"{path}: malformed weights: {exc}") from exc
    if W.shape != (width, nr_w):
        raise ModelFormatError(f"{path}: {W.shape[0]} weight lines of {W.shape[1:] or 0} "
                               f"values, expected {width} of {nr_w}")
    order = np.argsort(labels)
    classes = tuple(labels[i] for i in order)
    if regression:
        w = W[:, 0]
    elif nr_w == 1:
        w = W[:, 0] if labels[0] > labels[1] else -W[:, 0]
    else:
        w = W.T[order]
    model = Model(w=np.ascontiguousarray(w), bias=bias, classes=classes, solver=solver,
                  loss=loss, params={"liblinear_solver_type": name},
                  summary={"imported_from": path}, n_features=n_features, rho=rho)
    model.check(path)
    return model
