"""Ingest jobs: LIBSVM files, in-memory matrices, dask collections and Parquet/CSV files into a
committed dataset, on Dask or in-process (:mod:`distsvm.storage.ingest` holds the per-piece tasks of
the phases and :mod:`distsvm.storage.tabular` the tabular pieces'; this module runs them as a job).

Runs the three phases of :mod:`distsvm.storage.ingest` (parts, plan, blocks).  With a
Dask client, an uncompressed file that the workers see at the same path (a
shared filesystem: :func:`workers_see`) is split into byte ranges at line
boundaries that workers read and parse themselves; any other file is
read (and decompressed) here as a stream and its pieces parsed by the workers, with a
bounded number in flight.  Without a client every task runs in this process.
Either way the store appears only when complete (:func:`distsvm.storage.dataset.commit`),
and a failure or an interrupt removes everything written.  Dask collections and tabular
files go the same way, a task a piece (:func:`ingest_tabular`).
"""

from __future__ import annotations

import contextlib
import lzma
import os
import sys
import time
import zlib

import numpy as np
import scipy.sparse as sp

from distsvm.storage import Dataset
from distsvm.storage import dataset as ds
from distsvm.storage import ingest as ing
from distsvm.storage import tabular as tab
from distsvm.storage.errors import InputDataError, StorageError, listed
from distsvm.storage.leftovers import remove_leftovers
from distsvm.storage.lock import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from distsvm.storage.lock import Lock
from distsvm.storage.paths import resolve

from . import dask_io, params, resources
from .errors import need_tabular
from .progress import Progress

DEFAULT_BLOCK_MB = 64.0
DEFAULT_CHUNK_MB = 32.0


class Runner:
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
            from .cluster import scattered

            args, kwargs = scattered(self.client, args, kwargs)
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
def staging(store: str, overwrite: bool, storage_options: dict | None, client,
            lock_timeout: float | None = None, progress: Progress | None = None):
    """Yield ``(stage, runner)`` for writing a new dataset at ``store``, holding the store's
    lock (:mod:`distsvm.storage.lock`; waiting up to ``lock_timeout`` seconds) and having removed
    what killed writers left (:func:`distsvm.storage.leftovers.remove_leftovers`); on any failure
    cancel the runner's pending tasks and remove the staging group, so that nothing a later
    command could take for a whole store is left behind (an OSError that names no file,
    such as a full disk's, is raised naming the store)."""
    with Lock(store, storage_options, what=f"{store}",
              timeout=DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout,
              progress=progress):
        remove_leftovers(store, storage_options, progress)
        stage = ds.prepare(store, overwrite, storage_options)
        run = Runner(client)
        try:
            yield stage, run
        except BaseException as exc:
            if client is not None:
                client.cancel(run.pending)
                if not isinstance(exc, KeyboardInterrupt):  # a cancelled task runs on: let those
                    from .cluster import alive, settle  # running end, or they write into a

                    with contextlib.suppress(Exception):  # removed stage
                        settle(client, run.pending, alive(client))
            ds.abort(stage, store, storage_options)
            if isinstance(exc, OSError) and exc.filename is None:  # a write's ENOSPC, EIO
                raise StorageError(f"{store}: cannot write the store: {exc}") from exc
            raise


def ingest(source, store: str, *, client=None, dtype: str = "float32", index_base: int = 1,
           shuffle: bool = True, seed: int = 0, block_rows: int | None = None,
           block_mb: float | None = DEFAULT_BLOCK_MB, n_features: int | None = None,
           overwrite: bool = False, chunk_mb: float = DEFAULT_CHUNK_MB,
           storage_options: dict | None = None, progress: Progress | None = None,
           sample_weight=None, regression: bool = False, label: str | None = None,
           features=None, indices: str | None = None, values: str | None = None,
           lock_timeout: float | None = None, provenance: dict | None = None,
           compression: str = "lz4") -> Dataset:
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

    Dask collections and tabular files (:func:`ingest_tabular`, docs/tabular.md): ``source``
    may also be an ``(X, y)`` pair of dask arrays (dense or SciPy-sparse chunks; ``y`` may be
    NumPy), a dask dataframe with a ``label`` column, or a Parquet/CSV path, glob or
    directory; ``features`` names the dense feature columns (default: all but the label),
    ``indices`` and ``values`` the list columns of the sparse layout.

    ``lock_timeout``: seconds to wait for another writer of ``store`` (default 60;
    :class:`distsvm.storage.lock.LockHeldError` then).  ``provenance``: entries added to the
    header's ``source`` (JSON; :mod:`distsvm.sources` records the file's fingerprint).

    ``compression``: the blocks' codec (rows, and a column view built later), "lz4"
    (Blosc-LZ4) or "none": uncompressed blocks take 1.4-3.6x the disk and no CPU to decode,
    for a store that workers re-read from a local disk while their cores are busy with the
    kernels (docs/storage-format.md).

    Every row's position in the source (its row number) is kept in its block
    (docs/storage-format.md), so that predictions can be written in the source's order.
    """
    params.check_settings("ingest", {  # block_mb has a default: block_rows takes over
        "block_rows": block_rows, "block_mb": None if block_rows else block_mb,
        "n_features": n_features, "seed": seed, "lock_timeout": lock_timeout,
        "compression": compression})
    if is_tabular(source, storage_options):
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported with dask or tabular input")
        return ingest_tabular(source, store, client=client, label=label, features=features,
                              indices=indices, values=values, dtype=dtype, shuffle=shuffle,
                              seed=seed, block_rows=block_rows, block_mb=block_mb,
                              n_features=n_features, overwrite=overwrite,
                              storage_options=storage_options, progress=progress,
                              regression=regression, lock_timeout=lock_timeout,
                              provenance=provenance, compression=compression)
    if label is not None or features or indices is not None or values is not None:
        raise ValueError(f"{source}: label, features, indices and values name the columns of a "
                         "dask dataframe or of Parquet/CSV files (.parquet, .csv)")
    progress = progress or Progress(quiet=True)
    if dtype not in ds.DTYPES:
        raise ValueError(f"The 'dtype' parameter must be one of {ds.DTYPES}. Got {dtype!r} instead.")
    if index_base not in (0, 1):
        raise ValueError(f"The 'index_base' parameter must be 0 or 1. Got {index_base!r} instead.")
    if not block_rows and not block_mb:
        raise ValueError("Give a block size: block_rows or block_mb")
    is_text = isinstance(source, (str, os.PathLike))
    if is_text:
        from distsvm.storage import libsvm

        source = resolve(source)  # workers read it: absolute, ~ expanded (URLs as they are)
    where = str(source) if is_text else "input matrix"
    remote = is_text and libsvm.is_remote(source)  # streamed from here, as compressed files
    if is_text and not remote and not os.path.exists(source):
        raise FileNotFoundError(f"{source}: no such file")
    weights = _read_weights(sample_weight)
    start = time.perf_counter()
    with staging(store, overwrite, storage_options, client, lock_timeout,
                 progress) as (stage, run):
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
                values = ing.cast_values(sub.data, sub.indptr, sub.indices, dtype, where,
                                         first_row=r0 + 1)
                run.submit(ing.write_part, stage, part, sub.indptr.astype(np.int64),
                           sub.indices.astype(np.int32), values, y[r0:r0 + step],
                           np.arange(r0, r0 + sub.shape[0]),
                           weights=None if weights is None else weights[r0:r0 + step], **common)
            if n_features is None:
                n_features = X.shape[1]
        elif (client is not None and not libsvm.is_compressed(source) and not remote
              and (shared := workers_see(client, source))):
            for part, (a, b) in enumerate(libsvm.split_ranges(source, int(chunk_mb * 2**20))):
                run.submit(ing.part_from_text, stage, part, shared, start=a, end=b,
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
        dataset = write_blocks(stage, run, infos, (n_rows, nnz, n_features, classes, counts),
                               store=store, where=where, dtype=dtype, shuffle=shuffle, seed=seed,
                               block_rows=block_rows, block_mb=block_mb, overwrite=overwrite,
                               storage_options=storage_options, progress=progress, start=start,
                               regression=bool(regression), weighted=weights is not None,
                               source={"index_base": index_base, **(provenance or {})},
                               compression=compression)
    n_blocks = len(dataset.meta.blocks)
    progress.note(f"ingest: wrote {store}: {n_blocks} blocks in {time.perf_counter() - start:.1f}s")
    return dataset


def is_tabular(source, storage_options: dict | None = None) -> bool:
    """Whether :func:`ingest` should hand ``source`` to :func:`ingest_tabular`: a dask
    dataframe, an ``(X, y)`` pair with a dask member, or a Parquet/CSV path, glob or
    directory (a LIBSVM source is a file; a URL without a tabular suffix costs one
    request to ask whether it is a directory)."""
    if isinstance(source, tuple) and len(source) == 2:
        return dask_io.is_dask(source[0]) or dask_io.is_dask(source[1])
    if dask_io.is_dask(source):
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


def ingest_tabular(source, store: str, *, client=None, label=None, features=None,
                   indices=None, values=None, classes=None, dtype="float32", shuffle=True,
                   seed=0, block_rows=None, block_mb=None, n_features=None, overwrite=False,
                   storage_options=None, progress: Progress | None = None, regression=False,
                   lock_timeout=None, provenance: dict | None = None,
                   compression: str = "lz4") -> Dataset:
    """Ingest a dask ``(X, y)`` pair, a dask dataframe with a ``label`` column, or Parquet/CSV
    files (a path, glob or directory, local or any fsspec URL) into a store at ``store``:
    the LIBSVM path's three phases, each piece — a row chunk of a dask array, a partition
    of a dask dataframe, a Parquet row group, a CSV file — checked and written as one part
    by a task on the cluster (memory bounded by a piece).  A row's shuffle key comes from
    its global row number, so a dask array gives the store, block for block, that the same
    matrix in memory gives (and so the same model).  Layouts and options: docs/tabular.md.

    ``features``: the dense layout's feature columns (default: every column but the
    label); ``indices`` and ``values``: the sparse layout's list columns.  ``classes``
    (sorted): store each label as its index in them (the estimators' coded labels).
    """
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
    elif dask_io.is_dask(source):
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
                                 f"{listed(sorted(widths))}")
        if n_features is None and indices is None and widths:
            n_features = widths.pop()
        summary = ing.summarize(infos, n_features, where, bool(regression))
        dataset = write_blocks(stage, run, infos, summary, store=store, where=where,
                               dtype=dtype, shuffle=shuffle, seed=seed, block_rows=block_rows,
                               block_mb=block_mb, overwrite=overwrite,
                               storage_options=storage_options, progress=progress, start=start,
                               regression=bool(regression),
                               source={**{k: v for k, v in layout.items() if v is not None},
                                       **(provenance or {})}, compression=compression)
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


def _array_tasks(X, y, dtype, classes, common, storage_options) -> list:
    """Delayed part writers, one per row chunk of a dask ``X`` (its labels ``y``, a dask or
    NumPy array, cut at the same rows)."""
    import dask
    import dask.array as da

    X, y = dask_io.as_arrays(X, y)
    if not isinstance(X, da.Array):
        raise InputDataError("X must be a dask array or dataframe when y is a dask collection "
                             "(or pass y.compute())")
    if X.ndim != 2:
        raise InputDataError(f"dask array: expected a 2-D matrix, got {X.ndim}-D")
    if y is None:
        raise InputDataError("dask array: no labels (give an (X, y) pair)")
    X = dask_io.rows_known(X).rechunk({1: -1})
    rows = X.chunks[0]
    y = dask_io.rows_known(y) if isinstance(y, da.Array) else da.from_array(np.asarray(y))
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


def workers_see(client, path) -> str | None:
    """The absolute path by which every worker of ``client`` reads the local file ``path``
    itself — the same file as here (size, modification time and inode agree: one machine,
    or a shared filesystem at the same mount point) — or None: workers on other machines,
    or without the mount, cannot be handed the path, and the file is streamed from here
    instead (as a compressed one is)."""
    from distsvm.storage import libsvm

    mine = libsvm.file_identity(path)
    if mine is None:
        return None
    candidate = resolve(path)  # the workers' working directory is not this process's
    try:
        theirs = client.run(libsvm.file_identity, candidate)
    except Exception:  # noqa: BLE001 - a worker gone or failing: stream from here
        return None
    if theirs and all(t is not None and tuple(t) == mine for t in theirs.values()):
        return candidate
    return None


def write_blocks(stage, run, infos, summary, *, store, where, dtype, shuffle, seed, block_rows,
                 block_mb, overwrite, storage_options, progress, start, regression=False,
                 weighted=False, source=None, compression="lz4") -> Dataset:
    """Phases 2 and 3 once every part is written (``summary``: :func:`distsvm.storage.ingest.summarize`'s
    totals): plan the blocks, build them, remove the parts and commit the store."""
    n_rows, nnz, n_features, classes, counts = summary
    labels = "real-valued targets" if regression else f"{len(classes)} classes"
    progress.note(f"ingest: parsed {n_rows} rows, {nnz} non-zeros, {n_features} features, "
                  f"{labels} in {time.perf_counter() - start:.1f}s")
    n_blocks = ing.n_blocks_for(n_rows, nnz, np.dtype(dtype).itemsize, block_rows, block_mb)
    resources.check_fits(where, n_features, resources.block_bytes(
        -(-n_rows // n_blocks), -(-nnz // n_blocks), np.dtype(dtype).itemsize), run.client)
    if shuffle:
        for info in infos:
            run.submit(ing.shuffled_bounds, stage, info.part, n_blocks, storage_options)
        bounds = run.results()
    else:
        bounds = ing.ordered_bounds([i.n_rows for i in infos], n_blocks)
    firsts = np.cumsum([0] + [i.n_rows for i in infos])  # parts in source order
    first_rows = {info.part: int(f) for info, f in zip(infos, firsts)}
    for b, slices in enumerate(ing.plan_blocks(infos, bounds)):
        run.submit(ing.build_block, stage, b, slices, classes, dtype, weighted,
                   storage_options, regression, first_rows, compression)
    blocks = run.results(progress, "ingest: blocks")
    ing.remove_parts(stage, storage_options)
    meta = ds.DatasetMeta(
        n_rows=n_rows, n_features=n_features, nnz=nnz, dtype=dtype, classes=classes,
        class_counts=counts, blocks=tuple(blocks), created=ds.now_iso(),
        source={"input": where, **(source or {}), "shuffle": shuffle, "seed": seed,
                "block_rows": block_rows, "block_mb": block_mb},
        **({"task": "regression", "targets": ing.target_stats(infos)} if regression
           else {}))
    return ds.commit(stage, store, meta, overwrite, storage_options)


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


class _CallableModule(type(contextlib)):
    """``distsvm.ingest`` is this module once it is imported (Python sets a package's
    attribute to its submodule), so the module calls :func:`ingest`: ``distsvm.ingest(...)``
    works however often and in whatever order it is used."""

    def __call__(self, *args, **kwargs):
        return ingest(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
