"""Dask collections and tabular files in, predictions out at scale.

Users' data lives in dask arrays and dataframes, Parquet and CSV more often than in LIBSVM
text.  :func:`ingest` writes such input into a store with the LIBSVM path's three phases
(:mod:`storage.ingest`) and its staging and atomic commit (:func:`distsvm.ingest.staging`):
each piece — a row chunk of a dask array, a partition of a dask dataframe, a Parquet row
group, a CSV file — is checked and written as one part by a task on the cluster (memory
bounded by a piece), then the blocks are built and the metadata committed once.  A row's
shuffle key comes from its global row number, so a dask array gives the store, block for
block, that the same matrix in memory gives (and so the same model).

The other way, :func:`decision_function`, :func:`labels` and :func:`probabilities` map a
fitted model over a dask collection lazily (``map_blocks``, the model's weights one small
shared graph key; its rule, :meth:`distsvm.model.Model.class_index`); a store's predictions
to Parquet or Zarr are :func:`distsvm.prediction.predict`'s.  Layouts and options:
docs/tabular.md.
"""

from __future__ import annotations

import os
import time

import numpy as np

from storage import Dataset
from storage import ingest as ing
from storage import tabular as tab
from storage.errors import InputDataError

from .errors import need_tabular
from .model import probabilities as probs
from .progress import Progress


def is_dask(obj) -> bool:
    """Whether ``obj`` is a dask collection (array, dataframe, series)."""
    if type(obj).__module__.split(".")[0] not in ("dask", "dask_expr"):
        return False
    import dask

    return dask.is_dask_collection(obj)


def _is_frame(obj) -> bool:
    return is_dask(obj) and hasattr(obj, "columns")


def handles(source, storage_options: dict | None = None) -> bool:
    """Whether :func:`distsvm.ingest.ingest` should hand ``source`` to :func:`ingest`: a dask
    dataframe, an ``(X, y)`` pair with a dask member, or a Parquet/CSV path, glob or
    directory (a LIBSVM source is a file; a URL without a tabular suffix costs one
    request to ask whether it is a directory)."""
    if isinstance(source, tuple) and len(source) == 2:
        return is_dask(source[0]) or is_dask(source[1])
    if is_dask(source):
        return True
    if isinstance(source, (str, os.PathLike)):
        s = os.fspath(source)
        if tab.tabular_format(s) is not None:
            return True
        if "://" not in s:
            return os.path.isdir(s)
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(s, **(storage_options or {}))
            return fs.isdir(path)
        except (OSError, ValueError, ImportError):
            return False  # the LIBSVM path reports it
    return False


def expand(source: str, storage_options: dict | None) -> list[tuple[str, str]]:
    """The ``(url, kind)`` of every Parquet/CSV file of a path, glob or directory, sorted."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(source, **(storage_options or {}))
    if any(c in path for c in "*?["):
        found = fs.glob(path)
    elif fs.isdir(path):
        found = [p for p in fs.find(path) if tab.tabular_format(p)]
    elif fs.exists(path):
        found = [path]
    else:
        raise FileNotFoundError(f"{source}: no such file, directory or glob match")
    files = sorted(p for p in found if tab.tabular_format(p) and not fs.isdir(p))
    if not files:
        raise InputDataError(f"{source}: no Parquet (.parquet) or CSV (.csv) files")
    kinds = {tab.tabular_format(p) for p in files}
    if len(kinds) > 1:
        raise InputDataError(f"{source}: both Parquet and CSV files; ingest one format")
    return [(fs.unstrip_protocol(p) if "://" in source else p, tab.tabular_format(p))
            for p in files]


def ingest(source, store: str, *, client=None, label=None, features=None, indices=None,
           values=None, classes=None, dtype="float32", shuffle=True, seed=0, block_rows=None,
           block_mb=None, n_features=None, overwrite=False, storage_options=None,
           progress: Progress | None = None, regression=False, lock_timeout=None,
           **_) -> Dataset:
    """Ingest a dask ``(X, y)`` pair, a dask dataframe with a ``label`` column, or Parquet/CSV
    files (a path, glob or directory, local or any fsspec URL) into a store at ``store``.

    ``features``: the dense layout's feature columns (default: every column but the
    label); ``indices`` and ``values``: the sparse layout's list columns.  ``classes``
    (sorted): store each label as its index in them (the estimators' coded labels).
    """
    from .ingest import staging, write_blocks

    progress = progress or Progress(quiet=True)
    if (indices is None) != (values is None):
        raise ValueError("the sparse layout needs both indices and values columns")
    if indices is not None and features:
        raise ValueError("give feature columns (dense) or indices and values (sparse), not both")
    pair = isinstance(source, tuple)
    if not pair and label is None:
        raise ValueError("a dataframe or tabular file needs its label column: label=COLUMN "
                         "(CLI: --label COLUMN)")
    start = time.perf_counter()
    common = dict(shuffle=shuffle, seed=seed, regression=bool(regression))
    layout = dict(label=label, features=features, indices=indices, values=values)
    if pair:
        where, tasks = "dask array", _array_tasks(*source, dtype, classes, common, storage_options)
    elif is_dask(source):
        where, tasks = "dask dataframe", _frame_tasks(source, layout, dtype, classes, common,
                                                      storage_options)
    else:
        where, tasks = os.fspath(source), None
        need_tabular("reading Parquet or CSV files")
        files = expand(where, storage_options)
    with staging(store, overwrite, storage_options, client, lock_timeout, progress) as (stage, run):
        if tasks is None:  # files: count the rows of every piece, then one task per piece
            for path, kind in files:
                run.submit(tab.count_rows, path, kind, storage_options)
            counts = run.results()
            first = 0
            for (path, kind), rows in zip(files, counts):
                for g, n in enumerate(rows):
                    run.submit(tab.part_from_file, stage, len(run.pending), path, kind,
                               g, first, dtype=dtype,
                               storage_options=storage_options, **layout, **common)
                    first += n
        else:
            _run_tasks(run, client, [t(stage) for t in tasks])
        results = run.results(progress, "ingest: parse")
        infos = sorted((r[0] for r in results), key=lambda i: i.part)
        widths = {r[1] for r in results if r[0].n_rows}
        if indices is None and len(widths) > 1:
            raise InputDataError(f"{where}: pieces have different numbers of feature columns "
                                 f"{sorted(widths)}")
        if n_features is None and indices is None and widths:
            n_features = widths.pop()
        summary = ing.summarize(infos, n_features, where, bool(regression))
        dataset = write_blocks(stage, run, infos, summary, store=store, where=where,
                               dtype=dtype, shuffle=shuffle, seed=seed, block_rows=block_rows,
                               block_mb=block_mb, overwrite=overwrite,
                               storage_options=storage_options, progress=progress, start=start,
                               regression=bool(regression),
                               source={k: v for k, v in layout.items() if v is not None})
    progress.note(f"ingest: wrote {store}: {len(dataset.meta.blocks)} blocks in "
                  f"{time.perf_counter() - start:.1f}s")
    return dataset


def _run_tasks(run, client, tasks) -> None:
    """Compute delayed part tasks: on the client's workers (futures the runner gathers, and
    cancels on failure), or with dask's local scheduler when there is no client."""
    import dask

    if client is None:
        run.pending.extend(dask.compute(*tasks))
    else:
        run.pending.extend(client.compute(tasks))


def rows_known(a):
    return a if not any(np.isnan(c) for c in a.chunks[0]) else a.compute_chunk_sizes()


def _array_tasks(X, y, dtype, classes, common, storage_options) -> list:
    """Delayed part writers, one per row chunk of a dask ``X`` (its labels ``y``, a dask or
    NumPy array, cut at the same rows)."""
    import dask
    import dask.array as da

    X, y = as_arrays(X, y)
    if not isinstance(X, da.Array):
        raise InputDataError("X must be a dask array or dataframe when y is a dask collection "
                             "(or pass y.compute())")
    if X.ndim != 2:
        raise InputDataError(f"dask array: expected a 2-D matrix, got {X.ndim}-D")
    if y is None:
        raise InputDataError("dask array: no labels (give an (X, y) pair)")
    X = rows_known(X).rechunk({1: -1})
    rows = X.chunks[0]
    y = rows_known(y) if isinstance(y, da.Array) else da.from_array(np.asarray(y))
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise InputDataError(f"X has {X.shape[0]} rows but y has shape {y.shape}")
    y = y.rechunk({0: rows})
    xs, ys = X.to_delayed().ravel(), y.to_delayed().ravel()
    firsts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    make = dask.delayed(tab.part_from_chunk, pure=False)
    return [lambda stage, p=p, xd=xd, yd=yd, r=int(r): make(
                stage, p, xd, yd, r, f"dask array chunk {p} (rows from {r + 1})", dtype=dtype,
                classes=classes, storage_options=storage_options, **common)
            for p, (xd, yd, r) in enumerate(zip(xs, ys, firsts))]


def _frame_tasks(df, layout, dtype, classes, common, storage_options) -> list:
    """Delayed part writers, one per partition of a dask dataframe (its row counts are
    computed first: a row's position is its global row number)."""
    import dask

    lengths = df.map_partitions(len).compute()
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    make = dask.delayed(tab.part_from_frame, pure=False)
    return [lambda stage, p=p, part=part, r=int(r): make(
                stage, p, part, r, f"dask dataframe partition {p}", dtype=dtype,
                classes=classes, storage_options=storage_options, **layout, **common)
            for p, (part, r) in enumerate(zip(df.to_delayed(), firsts))]


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


def probabilities(dv):
    """Lazy class probabilities (n, K) from lazy logistic decision values."""
    if dv.ndim == 1:
        return dv.map_blocks(probs, dtype=np.float64, chunks=(dv.chunks[0], (2,)), new_axis=1,
                             meta=np.empty((0, 0)))
    return dv.map_blocks(probs, dtype=np.float64, meta=np.empty((0, 0)))
