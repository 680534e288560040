"""Ingest jobs: LIBSVM files or in-memory matrices into a committed dataset, on Dask or in-process.

Runs the three phases of :mod:`storage.ingest` (parts, plan, blocks).  With a
Dask client, an uncompressed file is split into byte ranges at line
boundaries that workers read and parse themselves; a compressed file is
decompressed here as a stream and its pieces parsed by the workers, with a
bounded number in flight.  Without a client every task runs in this process.
Either way the store appears only when complete (:func:`storage.dataset.commit`),
and a failure or an interrupt removes everything written.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import time
import zlib

import numpy as np
import scipy.sparse as sp

from storage import Dataset
from storage import dataset as ds
from storage import ingest as ing
from storage.errors import InputDataError
from storage.paths import resolve

from .progress import Progress

DEFAULT_BLOCK_MB = 64.0
DEFAULT_CHUNK_MB = 32.0


class _Runner:
    """Runs phase tasks on a Dask client, or in-process when there is none."""

    def __init__(self, client):
        self.client = client
        self.pending = []
        if client is not None:
            self.limit = 2 * max(1, len(client.scheduler_info(n_workers=-1)["workers"]))

    def submit(self, fn, *args, **kwargs):
        if self.client is None:
            self.pending.append(fn(*args, **kwargs))
        else:
            self.pending.append(self.client.submit(fn, *args, pure=False, **kwargs))
            running = [f for f in self.pending if not f.done()]
            if len(running) > self.limit:  # bound the streamed pieces held in memory
                from distributed import wait

                wait(running[: len(running) - self.limit])

    def results(self, progress: Progress | None = None, what: str = "tasks"):
        """The results of the pending tasks, in submission order; with ``progress``, a
        progress bar counts the tasks as they finish (a failed one ends it at once)."""
        if progress is not None and self.client is not None:
            from distributed import as_completed

            with progress.bar(what, len(self.pending)) as bar:
                for f in as_completed(self.pending):
                    if f.status == "error":
                        break
                    bar.update()
        out = self.pending if self.client is None else self.client.gather(self.pending)
        self.pending = []
        return out


@contextlib.contextmanager
def staging(store: str, overwrite: bool, storage_options: dict | None, client):
    """Yield ``(stage, runner)`` for writing a new dataset at ``store``; on any failure
    cancel the runner's pending tasks and remove the staging group, so that nothing a later
    command could take for a whole store is left behind."""
    stage = ds.prepare(store, overwrite, storage_options)
    run = _Runner(client)
    try:
        yield stage, run
    except BaseException:
        if client is not None:
            client.cancel(run.pending)
        ds.abort(stage, store, storage_options)
        raise


def ingest(source, store: str, *, client=None, dtype: str = "float32", index_base: int = 1,
           shuffle: bool = True, seed: int = 0, block_rows: int | None = None,
           block_mb: float | None = DEFAULT_BLOCK_MB, n_features: int | None = None,
           overwrite: bool = False, chunk_mb: float = DEFAULT_CHUNK_MB,
           storage_options: dict | None = None, progress: Progress | None = None,
           sample_weight=None, regression: bool = False) -> Dataset:
    """Ingest ``source`` — a LIBSVM/svmlight file path or fsspec URL (plain, .gz, .bz2, .xz;
    a URL is read with ``storage_options``, as the store) or an ``(X, y)`` pair of a
    NumPy/SciPy matrix and labels — into a dataset at ``store``.

    ``sample_weight``: instance weights, one per row (finite, >= 0), as an array or as the
    path of a text file of one weight per line (LIBLINEAR's ``-W`` file); the store then
    keeps them in each block (docs/storage-format.md).  For a text source the weights are
    held on this process, 8 bytes a row.

    ``regression``: the labels are real-valued targets (a regression store: task
    "regression", each block's ``target`` array; docs/storage-format.md), whatever their
    values — integer labels do not make classes.
    """
    progress = progress or Progress(quiet=True)
    if dtype not in ds.DTYPES:
        raise ValueError(f"The 'dtype' parameter must be one of {ds.DTYPES}. Got {dtype!r} instead.")
    if index_base not in (0, 1):
        raise ValueError(f"The 'index_base' parameter must be 0 or 1. Got {index_base!r} instead.")
    if not block_rows and not block_mb:
        raise ValueError("Give a block size: block_rows or block_mb")
    is_text = isinstance(source, (str, os.PathLike))
    if is_text:
        from storage import libsvm

        source = resolve(source)  # workers read it: absolute, ~ expanded (URLs as they are)
    where = str(source) if is_text else "input matrix"
    remote = is_text and libsvm.is_remote(source)  # streamed from here, as compressed files
    if is_text and not remote and not os.path.exists(source):
        raise FileNotFoundError(f"{source}: no such file")
    weights = _read_weights(sample_weight)
    start = time.perf_counter()
    with staging(store, overwrite, storage_options, client) as (stage, run):
        common = dict(shuffle=shuffle, seed=seed, storage_options=storage_options,
                      regression=bool(regression))
        if is_text:
            common["keep_order"] = weights is not None
        if not is_text:
            X, y = _check_arrays(*source)
            if weights is not None and len(weights) != X.shape[0]:
                raise InputDataError(f"sample_weight has {len(weights)} values for "
                                     f"{X.shape[0]} rows")
            row_bytes = 12 + 12 * X.nnz / max(1, X.shape[0])
            step = max(1, int(chunk_mb * 2**20 / row_bytes))
            for part, r0 in enumerate(range(0, X.shape[0], step)):
                sub = X[r0:r0 + step]
                run.submit(ing.write_part, stage, part, sub.indptr.astype(np.int64),
                           sub.indices.astype(np.int32), sub.data.astype(dtype), y[r0:r0 + step],
                           np.arange(r0, r0 + sub.shape[0]),
                           weights=None if weights is None else weights[r0:r0 + step], **common)
            if n_features is None:
                n_features = X.shape[1]
        elif client is not None and not libsvm.is_compressed(source) and not remote:
            for part, (a, b) in enumerate(libsvm.split_ranges(source, int(chunk_mb * 2**20))):
                run.submit(ing.part_from_text, stage, part, str(source), start=a, end=b,
                           dtype=dtype, index_base=index_base, **common)
        else:
            for part, (buf, offset, line) in enumerate(
                    libsvm.iter_chunks(source, int(chunk_mb * 2**20), storage_options)):
                run.submit(ing.part_from_text, stage, part, str(source), buf=buf, start=offset,
                           first_line=line, dtype=dtype, index_base=index_base, **common)
        infos = sorted(run.results(progress, "ingest: parse"), key=lambda i: i.part)
        if not infos:
            raise InputDataError(f"{where}: no rows (the input is empty)")
        n_rows, nnz, n_features, classes, counts = ing.summarize(infos, n_features, where,
                                                                  bool(regression))
        if is_text and weights is not None:
            if len(weights) != n_rows:
                raise InputDataError(f"{where}: {n_rows} rows but {len(weights)} instance "
                                     "weights")
            first = np.cumsum([0] + [i.n_rows for i in infos])
            for info, a, b in zip(infos, first[:-1], first[1:]):
                run.submit(ing.attach_weights, stage, info.part, weights[a:b], storage_options)
            run.results()
        labels = "real-valued targets" if regression else f"{len(classes)} classes"
        progress.note(f"ingest: parsed {n_rows} rows, {nnz} non-zeros, {n_features} features, "
                      f"{labels} in {time.perf_counter() - start:.1f}s")
        n_blocks = ing.n_blocks_for(n_rows, nnz, np.dtype(dtype).itemsize, block_rows, block_mb)
        if shuffle:
            for info in infos:
                run.submit(ing.shuffled_bounds, stage, info.part, n_blocks, storage_options)
            bounds = run.results()
        else:
            bounds = ing.ordered_bounds([i.n_rows for i in infos], n_blocks)
        for b, slices in enumerate(ing.plan_blocks(infos, bounds)):
            run.submit(ing.build_block, stage, b, slices, classes, dtype, weights is not None,
                       storage_options, bool(regression))
        blocks = run.results(progress, "ingest: blocks")
        ing.remove_parts(stage, storage_options)
        meta = ds.DatasetMeta(
            n_rows=n_rows, n_features=n_features, nnz=nnz, dtype=dtype, classes=classes,
            class_counts=counts, blocks=tuple(blocks), created=ds.now_iso(),
            source={"input": where, "index_base": index_base, "shuffle": shuffle, "seed": seed,
                    "block_rows": block_rows, "block_mb": block_mb},
            **({"task": "regression", "targets": ing.target_stats(infos)} if regression
               else {}))
        dataset = ds.commit(stage, store, meta, overwrite, storage_options)
    progress.note(f"ingest: wrote {store}: {n_blocks} blocks in {time.perf_counter() - start:.1f}s")
    return dataset


def _read_weights(sample_weight) -> np.ndarray | None:
    """Instance weights from an array or a file of one number per line, checked."""
    if sample_weight is None:
        return None
    where = "sample_weight"
    if isinstance(sample_weight, (str, os.PathLike)):
        where = str(sample_weight)
        try:
            sample_weight = np.loadtxt(os.path.expanduser(sample_weight), dtype=np.float64,
                                       ndmin=1)
        except (OSError, ValueError, EOFError, lzma.LZMAError, zlib.error) as exc:  # .gz too
            raise InputDataError(f"{where}: not a file of one weight per line: {exc}") from exc
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputDataError(f"{where}: instance weights must be one finite value >= 0 per row")
    return w


def _check_arrays(X, y):
    """Validate an in-memory ``(X, y)``: CSR float matrix, finite values, matching lengths."""
    X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
    X.sum_duplicates()
    X.sort_indices()
    y = np.asarray(y, dtype=np.float64).ravel()
    if X.shape[0] != len(y):
        raise InputDataError(f"X has {X.shape[0]} rows but y has {len(y)} labels")
    if not np.all(np.isfinite(X.data)):
        raise InputDataError("X contains NaN or infinite values")
    if not np.all(np.isfinite(y)):
        raise InputDataError("y contains NaN or infinite labels")
    return X, y
