"""Tabular and array pieces → ingest parts: Parquet/CSV files, pandas partitions, matrix chunks.

A Dask collection or a set of tabular files is ingested as the in-memory matrix is
(:mod:`distsvm.storage.ingest`, phase 1): each piece — a chunk of rows of a dask array, a
partition of a dask dataframe, a Parquet row group, ~64 MB of a CSV file — becomes one part,
written by a task on the worker that holds or reads it, so memory is bounded by one
piece.  A row's position (what its shuffle key is made of) is its global row number in
the input, so a store does not depend on how the input was split: a dask array and the
same matrix in memory give the same store, block for block.

Two tabular layouts (docs/tabular.md):

* **dense** — one numeric column per feature (all columns but the label, or the ones
  named), zeros dropped as in a SciPy matrix;
* **sparse** — a list column of 0-based feature indices and a list column of values of
  the same lengths per row (``--indices COL --values COL``), as a CSR row.

Every check names the piece (file, or partition) and the 1-based row in it, so the CLI
prints it as one line: a missing or non-numeric column, NaN or infinite values, a
missing label, negative or repeated indices, lists of different lengths.
"""

from __future__ import annotations

import contextlib

import numpy as np
import scipy.sparse as sp

from . import ingest as ing
from .errors import InputDataError, listed

TABULAR_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv",
                    ".csv.gz": "csv", ".csv.bz2": "csv", ".csv.xz": "csv"}


def tabular_format(path: str) -> str | None:
    """"parquet" or "csv" by the name's suffix, else None (LIBSVM text)."""
    name = str(path).lower().rstrip("/")
    for suffix, kind in TABULAR_SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    return None


def _first_bad(mask: np.ndarray) -> int:
    """1-based row number of the first True of a per-row mask."""
    return int(np.flatnonzero(mask)[0]) + 1


def chunk_to_csr(X, where: str, dtype: str, columns=None):
    """A matrix chunk (NumPy or SciPy) as CSR arrays (indptr int64, indices int32, data of
    ``dtype``), zeros of a dense chunk dropped; NaN or infinite values, also once cast to
    ``dtype``, raise naming the row (and its column of ``columns``, the chunk's names)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        X.sum_duplicates()
        X.sort_indices()
        bad = ~np.isfinite(X.data)
        if bad.any():
            row = int(np.searchsorted(X.indptr, np.flatnonzero(bad)[0], side="right"))
            raise InputDataError(f"{where}, row {row}: NaN or infinite value")
    else:
        X = np.asarray(X)
        if X.ndim != 2:
            raise InputDataError(f"{where}: expected a 2-D matrix, got {X.ndim}-D")
        if X.dtype.kind not in "biuf":
            raise InputDataError(f"{where}: values of dtype {X.dtype} are not numbers")
        bad = ~np.isfinite(X).all(axis=1)
        if bad.any():
            raise InputDataError(f"{where}, row {_first_bad(bad)}: NaN or infinite value")
        X = sp.csr_matrix(X)
    data = ing.cast_values(X.data, X.indptr, X.indices, dtype, where, columns)
    return X.indptr.astype(np.int64), X.indices.astype(np.int32), data, X.shape[1]


def check_labels(y, n_rows: int, where: str) -> np.ndarray:
    """Labels (or targets) as float64, one per row, each a finite number (else one line)."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1 or len(y) != n_rows:
        raise InputDataError(f"{where}: {n_rows} rows but labels of shape {y.shape}")
    try:
        y = y.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(f"{where}: labels are not numbers ({exc})") from exc
    bad = ~np.isfinite(y)
    if bad.any():
        raise InputDataError(f"{where}, row {_first_bad(bad)}: missing, NaN or infinite label")
    return y


def frame_to_csr(df, where: str, *, label: str | None, features=None, indices: str | None = None,
                 values: str | None = None, dtype: str = "float32"):
    """A pandas frame as ``(indptr, indices, data, labels, n_columns)``: the dense layout
    (``features``, or every column but ``label``) or the sparse one (``indices`` and
    ``values`` list columns; n_columns is then the largest index + 1)."""
    import pandas as pd

    repeated = df.columns[df.columns.duplicated()]
    if len(repeated):
        name = repeated[0]
        raise InputDataError(f"{where}: column {name!r} appears "
                             f"{int((df.columns == name).sum())} times (a table's columns "
                             "need distinct names)")
    names = [c for c in (label, indices, values) if c is not None] + list(features or ())
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise InputDataError(f"{where}: no column {missing[0]!r} (columns: {listed(list(df.columns))})")
    if label is None:
        y = np.zeros(len(df))
    else:
        col = df[label]
        if not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col)):
            num = pd.to_numeric(col, errors="coerce")
            bad = num.isna().to_numpy() & col.notna().to_numpy()
            if bad.any():
                row = _first_bad(bad)
                raise InputDataError(f"{where}, row {row}: label {col.iloc[row - 1]!r} in "
                                     f"column {label!r} is not a number")
            col = num
        y = check_labels(col.to_numpy(dtype=np.float64, na_value=np.nan), len(df), where)
    if indices is not None:
        ptr, ind, dat, n_cols = _lists_to_csr(df[indices], df[values], where, indices, values,
                                              dtype)
        return ptr, ind, dat, y, n_cols
    cols = list(features) if features else [c for c in df.columns if c != label]
    if not cols:
        raise InputDataError(f"{where}: no feature columns")
    for c in cols:
        if not (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c])):
            num = pd.to_numeric(df[c], errors="coerce")
            bad = num.isna().to_numpy() & df[c].notna().to_numpy()
            row = _first_bad(bad) if bad.any() else None
            if row is not None:
                raise InputDataError(f"{where}, row {row}: value {df[c].iloc[row - 1]!r} in "
                                     f"column {c!r} is not a number")
    frame = df[cols]
    if not all(pd.api.types.is_numeric_dtype(frame[c]) for c in cols):
        frame = frame.apply(pd.to_numeric, errors="coerce")  # numbers written as strings
    X = frame.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(X)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputDataError(f"{where}, row {r + 1}: missing, NaN or infinite value in column "
                             f"{cols[c]!r}")
    ptr, ind, dat, n_cols = chunk_to_csr(X, where, dtype, cols)
    return ptr, ind, dat, y, n_cols


def _lists_to_csr(idx_col, val_col, where: str, idx_name: str, val_name: str, dtype: str):
    """Two list columns (per row: 0-based indices and their values) as sorted CSR arrays."""
    fast = _concat_lists(idx_col, val_col)
    if fast is not None:
        lengths, ind, val = fast
        inds, vals = [ind], [val]
    else:  # row by row, to name the first bad row
        lengths, inds, vals = _check_lists(idx_col, val_col, where, idx_name, val_name)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ind = np.concatenate(inds) if inds else np.zeros(0, np.int64)
    try:
        val = (np.concatenate(vals) if vals else np.zeros(0)).astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(f"{where}: values in {val_name!r} are not numbers ({exc})") from exc
    rows = np.repeat(np.arange(len(lengths)), lengths)
    for bad, what in ((ind < 0, "negative feature index"),
                      (ind >= 2**31 - 1, "feature index too large"),
                      (~np.isfinite(val), "NaN or infinite value")):
        if bad.any():
            raise InputDataError(f"{where}, row {rows[np.flatnonzero(bad)[0]] + 1}: {what}")
    n_cols = int(ind.max()) + 1 if len(ind) else 0
    X = sp.csr_matrix((val, ind, indptr), shape=(len(lengths), max(1, n_cols)))
    if not X.has_canonical_format:
        X.sort_indices()
        dup = np.flatnonzero((np.diff(X.indices) == 0) & (np.diff(rows) == 0))
        if len(dup):
            row = int(np.searchsorted(X.indptr, dup[0], side="right"))
            raise InputDataError(f"{where}, row {row}: repeated feature index")
    data = ing.cast_values(X.data, X.indptr, X.indices, dtype, where)
    return (X.indptr.astype(np.int64), X.indices.astype(np.int32), data, n_cols)


def _check_lists(idx_col, val_col, where: str, idx_name: str, val_name: str):
    """Row by row: each row's indices (integers) and values, as many of each."""
    lengths = np.zeros(len(idx_col), np.int64)
    inds, vals = [], []
    for r, (i, v) in enumerate(zip(idx_col, val_col)):
        if i is None or v is None or (np.ndim(i) == 0 and i != i):
            raise InputDataError(f"{where}, row {r + 1}: missing {idx_name!r} or {val_name!r}")
        i, v = np.asarray(i), np.asarray(v)
        if len(i) != len(v):
            raise InputDataError(f"{where}, row {r + 1}: {len(i)} indices in {idx_name!r} but "
                                 f"{len(v)} values in {val_name!r}")
        if len(i) and i.dtype.kind not in "iu":
            raise InputDataError(f"{where}, row {r + 1}: indices in {idx_name!r} are not "
                                 "integers")
        lengths[r] = len(i)
        inds.append(i.astype(np.int64))
        vals.append(v)
    return lengths, inds, vals


def _concat_lists(idx_col, val_col):
    """The fast path of :func:`_lists_to_csr`: (lengths, indices, values) when every row has
    integer indices and as many values, else None (the row-by-row check names the row)."""
    try:
        n = len(idx_col)
        li = np.fromiter((len(i) for i in idx_col), np.int64, n)
        lv = np.fromiter((len(v) for v in val_col), np.int64, n)
        if not np.array_equal(li, lv) or not n:
            return None
        ind = np.concatenate(list(idx_col))
        val = np.concatenate(list(val_col))
    except (TypeError, ValueError):
        return None
    if len(ind) and ind.dtype.kind not in "iu":
        return None
    return li, ind.astype(np.int64), val


CSV_PIECE_BYTES = 64 << 20  # an uncompressed CSV file is read in pieces of about this size


def csv_pieces(path: str, storage_options=None, target: int | None = None):
    """``(header, ranges)`` of a CSV file: its header line, and the byte ranges after it of
    about ``target`` bytes each (default :data:`CSV_PIECE_BYTES`), cut at line ends, that
    :func:`read_piece` reads one at a time (an uncompressed file; a compressed one cannot
    be entered in the middle: one range, ``None``, the whole file).  A quoted field holding
    a line break must not straddle a cut (numeric tables have none)."""
    import fsspec

    if not str(path).lower().endswith(".csv"):
        return None, [None]
    target = target or CSV_PIECE_BYTES
    with fsspec.open(path, "rb", **(storage_options or {})) as f:
        header = f.readline()
        size = f.seek(0, 2)
        bounds = [len(header)]
        cut = bounds[0] + target
        while cut < size:
            f.seek(cut - 1)
            f.readline()  # to the end of the line holding byte cut - 1
            if f.tell() >= size:
                break
            bounds.append(f.tell())
            cut = f.tell() + target
        bounds.append(size)
    return header, [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a] or [(0, 0)]


def read_piece(path: str, kind: str, piece: int | None, columns, storage_options):
    """One piece of a tabular file as a pandas frame: a Parquet row group or a CSV piece
    (:func:`csv_pieces`), or with ``piece`` None the whole file; read with
    ``storage_options``."""
    import io

    import fsspec

    if kind == "parquet":
        import pyarrow.parquet as pq

        with fsspec.open(path, "rb", **(storage_options or {})) as f:
            pf = pq.ParquetFile(f)
            table = pf.read() if piece is None else pf.read_row_group(piece)
            return table.to_pandas()
    import pandas as pd

    header, ranges = csv_pieces(path, storage_options) if piece is not None else (None, [None])
    if ranges[piece or 0] is None:
        with fsspec.open(path, "rb", compression="infer", **(storage_options or {})) as f:
            return pd.read_csv(f)
    start, end = ranges[piece]
    with fsspec.open(path, "rb", **(storage_options or {})) as f:
        f.seek(start)
        return pd.read_csv(io.BytesIO(header + f.read(end - start)))


def count_rows(path: str, kind: str, storage_options=None) -> list[int]:
    """Rows per piece of one file: per row group of a Parquet file (its footer only), or
    per piece of a CSV file (:func:`csv_pieces`; each read once, one at a time)."""
    import fsspec

    with reading(path, kind):
        if kind == "parquet":
            import pyarrow.parquet as pq

            with fsspec.open(path, "rb", **(storage_options or {})) as f:
                meta = pq.ParquetFile(f).metadata
                return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        _, ranges = csv_pieces(path, storage_options)
        return [len(read_piece(path, kind, g, None, storage_options))
                for g in range(len(ranges))]


@contextlib.contextmanager
def reading(where: str, kind: str):
    """Whatever reading the tabular file ``where`` raises (pyarrow's, pandas', a codec's,
    the disk's) as one :class:`InputDataError` line naming it: "not a Parquet file", "not
    UTF-8 text", or the reader's own words."""
    try:
        yield
    except InputDataError:
        raise
    except UnicodeDecodeError as exc:
        raise InputDataError(f"{where}: cannot read as {kind}: not UTF-8 text (byte "
                             f"{exc.object[exc.start:exc.start + 1]!r} at offset {exc.start} "
                             "of its piece; re-encode the file as UTF-8)") from exc
    except Exception as exc:  # noqa: BLE001 - ArrowInvalid, ParserError, OSError, EOFError...
        text = " ".join(str(exc).split()) or type(exc).__name__
        if kind == "parquet" and "magic bytes" in text:
            text = f"not a Parquet file ({text})"
        raise InputDataError(f"{where}: cannot read as {kind}: {text}") from exc


def part_from_file(stage: str, part: int, path: str, kind: str, row_group: int | None,
                   first_row: int, *, label, features=None, indices=None, values=None,
                   dtype: str = "float32", storage_options=None, **common) -> tuple:
    """Phase 1 for a tabular piece: read it here (on the worker), check it and write the
    part; returns ``(PartInfo, n_columns)``."""
    where = path
    if kind == "parquet" and row_group is not None:
        where = f"{path} (row group {row_group})"
    elif kind == "csv" and row_group:
        where = f"{path} (piece {row_group + 1})"
    with reading(where, kind):
        df = read_piece(path, kind, row_group, None, storage_options)
    return part_from_frame(stage, part, df, first_row, where, label=label, features=features,
                           indices=indices, values=values, dtype=dtype,
                           storage_options=storage_options, **common)


def part_from_frame(stage: str, part: int, df, first_row: int, where: str, *, label,
                    features=None, indices=None, values=None, dtype: str = "float32",
                    classes=None, **common) -> tuple:
    """Phase 1 for a pandas frame (a dask dataframe's partition); ``classes``: store each
    label as its index in these sorted values (the estimators' coded labels)."""
    ptr, ind, dat, y, n_cols = frame_to_csr(df, where, label=label, features=features,
                                            indices=indices, values=values, dtype=dtype)
    if classes is not None:
        y = np.searchsorted(np.asarray(classes), y).astype(np.float64)
    info = ing.write_part(stage, part, ptr, ind, dat, y, np.arange(first_row, first_row + len(y)),
                          **common)
    return info, n_cols


def part_from_chunk(stage: str, part: int, X, y, first_row: int, where: str, *,
                    dtype: str = "float32", classes=None, **common) -> tuple:
    """Phase 1 for a chunk of rows of a dask array (dense or SciPy sparse) and its labels."""
    ptr, ind, dat, n_cols = chunk_to_csr(X, where, dtype)
    if classes is not None and np.asarray(classes).dtype.kind not in "biuf":
        y = np.searchsorted(np.asarray(classes), np.asarray(y).ravel())  # e.g. string labels
    y = check_labels(y, len(ptr) - 1, where)
    if classes is not None and np.asarray(classes).dtype.kind in "biuf":
        y = np.searchsorted(np.asarray(classes), y).astype(np.float64)
    info = ing.write_part(stage, part, ptr, ind, dat, y, np.arange(first_row, first_row + len(y)),
                          **common)
    return info, n_cols
