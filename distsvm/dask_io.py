"""Dask collections: what the estimators and ingest need of them, and a model's lazy predictions.

Dask arrays and dataframes go into a store by :func:`distsvm.ingest.ingest_tabular` (with
:func:`as_arrays` and :func:`rows_known` here).  The other way, :func:`decision_function`,
:func:`labels` and :func:`probabilities` map a fitted model over a dask collection lazily
(``map_blocks``, the model's weights one small shared graph key; its rule,
:meth:`distsvm.model.Model.class_index`); a store's predictions to Parquet or Zarr are
:func:`distsvm.prediction.predict`'s.  Layouts and options: docs/tabular.md.
"""

from __future__ import annotations

import numpy as np

from .model import probabilities as probs


def is_dask(obj) -> bool:
    """Whether ``obj`` is a dask collection (array, dataframe, series)."""
    if type(obj).__module__.split(".")[0] not in ("dask", "dask_expr"):
        return False
    import dask

    return dask.is_dask_collection(obj)


def _is_frame(obj) -> bool:
    return is_dask(obj) and hasattr(obj, "columns")


def rows_known(a):
    return a if not any(np.isnan(c) for c in a.chunks[0]) else a.compute_chunk_sizes()


def as_arrays(X, y=None):
    """A dask dataframe/series as a dask array with known chunk sizes (others as given)."""
    if is_dask(X) and not hasattr(X, "chunks"):
        X = X.to_dask_array(lengths=True)
    if y is not None and is_dask(y) and not hasattr(y, "chunks"):
        y = y.to_dask_array(lengths=True)
    return X, y


def labels_of(y) -> np.ndarray:
    """The sorted distinct labels of a dask (or NumPy) label array (one pass over y); NaN
    (a missing label) sorts last and is refused by the parts' check."""
    import dask.array as da

    _, y = as_arrays(None, y)
    if isinstance(y, da.Array):
        return np.asarray(da.unique(y).compute())  # their dtype kept: ints, strings
    return np.unique(np.asarray(y))


# --- predictions on dask collections (lazy) ------------------------------------------------

def _matrix(X, n_features: int, owner: str):
    """A dask collection as a dask array of row chunks with every column in one chunk."""
    import dask.array as da

    if _is_frame(X):
        X = X.to_dask_array()
    if not isinstance(X, da.Array) or X.ndim != 2:
        raise ValueError(f"{owner}: expected a 2-D dask array or dataframe")
    if not np.isnan(X.shape[1]) and X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features, but {owner} is expecting {n_features} "
                         "features as input.")
    return X.rechunk({1: -1})


def _chunk_decisions(chunk, model):
    return model.decision_function(chunk)  # wᵀx + b (one-class: wᵀx − ρ, its intercept_)


def decision_function(model, X, owner: str):
    """Lazy decision values of a dask collection: (n,) or (n, K) float64, chunk by chunk."""
    import dask

    X = _matrix(X, model.n_features, owner)
    m = dask.delayed(model, traverse=False)  # one graph key: the weights sent once per worker
    k = model.w.shape[0] if model.w.ndim == 2 else 0
    if k:
        return X.map_blocks(_chunk_decisions, m, dtype=np.float64, chunks=(X.chunks[0], (k,)),
                            meta=np.empty((0, 0)))
    return X.map_blocks(_chunk_decisions, m, dtype=np.float64, drop_axis=1, meta=np.empty(0))


def labels(dv, model, classes):
    """Lazy labels from lazy decision values: ``classes`` (one per class of ``model``)
    indexed by the model's rule (:meth:`distsvm.model.Model.class_index`)."""
    classes = np.asarray(classes)
    return dv.map_blocks(lambda d: classes[model.class_index(d)], dtype=classes.dtype,
                         meta=np.empty(0, classes.dtype), **({"drop_axis": 1}
                                                             if dv.ndim == 2 else {}))


def score(pred, y, sample_weight, kind: str) -> float:
    """scikit-learn's ``score`` of lazy predictions ``pred`` (a dask array of known row
    chunks) against ``y`` (dask or NumPy; rechunked to ``pred``'s rows, which a dataframe's
    unknown partition lengths broke: a broadcasting error): the (weighted) accuracy, or
    ``kind`` "r2" the coefficient of determination, computed by tasks."""
    import dask
    import dask.array as da

    def rows(v):
        if v is None:
            return None
        _, v = as_arrays(None, v)
        v = v if isinstance(v, da.Array) else da.from_array(np.asarray(v))
        v = rows_known(v)
        if v.shape[0] != pred.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                             f"[{pred.shape[0]}, {v.shape[0]}]")
        return v.rechunk(pred.chunks)

    y, w = rows(y), rows(sample_weight)
    w = da.ones_like(pred, dtype=np.float64) if w is None else w.astype(np.float64)
    if kind == "accuracy":
        hits, total = dask.compute(((pred == y) * w).sum(), w.sum())
        return float(hits / total)
    y = y.astype(np.float64)
    mean = (y * w).sum() / w.sum()
    error, spread = dask.compute((w * (y - pred) ** 2).sum(), (w * (y - mean) ** 2).sum())
    return float(1.0 - error / spread)


def probabilities(dv):
    """Lazy class probabilities (n, K) from lazy logistic decision values."""
    if dv.ndim == 1:
        return dv.map_blocks(probs, dtype=np.float64, chunks=(dv.chunks[0], (2,)), new_axis=1,
                             meta=np.empty((0, 0)))
    return dv.map_blocks(probs, dtype=np.float64, meta=np.empty((0, 0)))
