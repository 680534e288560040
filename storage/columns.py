"""The column view of a dataset: CSC column blocks next to the row blocks (format v1 extension).

Its format, reader and the tasks that build it; :mod:`distsvm.columns` plans and runs them.

Layout (inside the same dataset group; see ``docs/storage-format.md``)::

    STORE/cols/y                  int32   (n_rows,)          one chunk  class index, global row order
    STORE/cols/<block>/indptr     int64   (n_cols_b + 1,)    one chunk  column pointers
    STORE/cols/<block>/indices    int32   (nnz_b,)           one chunk  GLOBAL 0-based row indices, increasing
    STORE/cols/<block>/data       float32 (nnz_b,)           one chunk  (float64 if the dataset's dtype is)

The global row index of a row is its position in the concatenation of the
row blocks in block order.  Column block ``b`` holds the contiguous feature
range ``[col_start, col_stop)``.  The view is described by the group attribute
``distsvm_columns`` (:class:`ColumnsMeta`), written after every array: a view
without that entry does not exist for readers, and ``columnize`` removes the
entry before it rewrites any array, so a stale entry never describes new arrays.

The transpose is external and multi-pass, with memory bounded by a parameter
(:func:`plan_groups`): pass 1 counts the non-zeros of every column (one
``int64`` per feature); then each *group* of consecutive column blocks whose
CSC arrays fit in the budget is filled by one more pass over the row blocks,
scattering each row block's entries into the group's buffers, and written.
A task holds at most its group's buffers plus one row block.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numba
import numpy as np

from . import dataset as ds
from .errors import CorruptStoreError, IncompleteStoreError, StorageError, listed

ATTRIBUTE = "distsvm_columns"
COL_ARRAYS = ("indptr", "indices", "data")
MAX_ROWS = 2**31 - 1  # row indices are int32


@dataclasses.dataclass(frozen=True)
class ColumnBlock:
    """One block of columns in CSC form (read-only views); row indices are global."""

    indptr: np.ndarray  # int64 (n_cols + 1,)
    indices: np.ndarray  # int32 (nnz,)
    data: np.ndarray  # float32 or float64 (nnz,)
    col_start: int

    @property
    def n_cols(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.data)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.indptr, self.indices, self.data))


@dataclasses.dataclass(frozen=True)
class ColumnInfo:
    """One entry of the column block table."""

    name: str
    col_start: int
    col_stop: int
    nnz: int
    crc32: dict[str, int]
    # the view's n_rows, which its row indices must stay below (None: read the store's)
    n_rows: int | None = dataclasses.field(default=None, compare=False, repr=False)
    # a block joined in memory (:func:`joined`): its stored blocks, in order; () if stored
    parts: tuple[ColumnInfo, ...] = dataclasses.field(default=(), compare=False, repr=False)
    # the store's dtype, which its data must have (None: float32 or float64)
    dtype: str | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def n_cols(self) -> int:
        return self.col_stop - self.col_start


@dataclasses.dataclass(frozen=True)
class ColumnsMeta:
    """The validated ``distsvm_columns`` attribute."""

    n_rows: int
    n_features: int
    nnz: int
    y_crc32: int
    blocks: tuple[ColumnInfo, ...]
    memory_bytes: int
    passes: int
    # the store's class count, which cols/y must stay below (None: read the store's)
    n_classes: int | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_json(self) -> dict:
        return ds.seal_metadata({
                "n_rows": self.n_rows, "n_features": self.n_features, "nnz": self.nnz,
                "y_crc32": self.y_crc32,
                "blocks": [{k: v for k, v in dataclasses.asdict(b).items()
                            if k not in ("n_rows", "parts", "dtype")} for b in self.blocks],
                "memory_bytes": self.memory_bytes, "passes": self.passes})

    @classmethod
    def from_json(cls, url: str, d: Any, meta: ds.DatasetMeta) -> ColumnsMeta:
        ds.check_metadata_digest(url, d, f"column view metadata (attribute {ATTRIBUTE!r})")
        try:
            out = cls(int(d["n_rows"]), int(d["n_features"]), int(d["nnz"]), int(d["y_crc32"]),
                      tuple(ColumnInfo(str(b["name"]), int(b["col_start"]), int(b["col_stop"]),
                                       int(b["nnz"]), {k: int(v) for k, v in b["crc32"].items()},
                                       int(d["n_rows"]), dtype=meta.dtype)
                            for b in d["blocks"]),
                      int(d["memory_bytes"]), int(d["passes"]),
                      1 if meta.regression else len(meta.classes))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStoreError(f"{url}: malformed column metadata: {exc!r}") from exc
        problems = []
        if (out.n_rows, out.n_features, out.nnz) != (meta.n_rows, meta.n_features, meta.nnz):
            problems.append("its shape or nnz differs from the row blocks' (a stale column view)")
        if sum(b.nnz for b in out.blocks) != out.nnz:
            problems.append("block nnz do not add up to nnz")
        stops = [0] + [b.col_stop for b in out.blocks]
        if any(b.col_start != s for b, s in zip(out.blocks, stops)) or stops[-1] != out.n_features:
            problems.append("column ranges do not tile [0, n_features)")
        if problems:
            raise CorruptStoreError(f"{url}: inconsistent column metadata: " + "; ".join(problems))
        return out


def joined(cmeta: ColumnsMeta) -> ColumnsMeta:
    """The view as one block of all its columns, made in memory from its stored blocks
    (:func:`join_blocks`): a pass over it can visit every column in one random order, as
    LIBLINEAR's does, where a pass over several blocks visits them block by block."""
    if len(cmeta.blocks) < 2:
        return cmeta
    b = cmeta.blocks
    info = ColumnInfo("+".join(x.name for x in b), 0, cmeta.n_features, cmeta.nnz, {},
                      cmeta.n_rows, parts=b)
    return dataclasses.replace(cmeta, blocks=(info,))


def join_blocks(blocks: list[ColumnBlock]) -> ColumnBlock:
    """Consecutive column blocks as one (their columns in order)."""
    offsets = np.cumsum([0] + [b.nnz for b in blocks[:-1]])
    return ColumnBlock(
        np.concatenate([blocks[0].indptr[:1]] + [b.indptr[1:] + o
                                                 for b, o in zip(blocks, offsets)]),
        np.concatenate([b.indices for b in blocks]), np.concatenate([b.data for b in blocks]),
        blocks[0].col_start)


def read_columns_meta(dataset: ds.Dataset) -> ColumnsMeta:
    """The column view's metadata; ``IncompleteStoreError`` if the store has none."""
    if dataset.is_subset:
        raise StorageError(f"{dataset.url}: a view of blocks {listed(dataset.block_ids)} has no "
                           "column view (the store's covers every row)")
    g = ds.open_group(dataset.url, mode="r", storage_options=dataset.storage_options)
    attrs = g.attrs.asdict()
    if ATTRIBUTE not in attrs:
        raise IncompleteStoreError(
            f"{dataset.url}: this store has no column view; build it with "
            f"`distsvm columnize {dataset.url}` (or ingest with --columns)")
    return ColumnsMeta.from_json(dataset.url, attrs[ATTRIBUTE], dataset.meta)


def _read_checked(url, path, group, name, shape, crc, verify, dtype):
    """One array of the column view, its dtype (``dtype``: one, or a tuple of the
    allowed) and shape checked before it is read, its CRC-32 after."""
    allowed = dtype if isinstance(dtype, tuple) else (dtype,)
    try:
        array = group[name]
        got = np.dtype(array.dtype).name
        a = ds.checked_array(url, path, array, got if got in allowed else allowed[0],
                             shape)[...]
    except CorruptStoreError:
        raise
    except Exception as exc:  # a damaged chunk fails in the codec with its own error types
        raise CorruptStoreError(f"{url}: cannot read array {path} (its chunk 0, {path}/c/0): "
                                f"{exc!r}") from exc
    if a.shape != shape or a.dtype.name not in allowed:
        raise CorruptStoreError(f"{url}: array {path} reads as {a.dtype} {a.shape}, expected "
                                f"{' or '.join(allowed)} {shape}")
    if verify and ds._crc(a) != crc:
        raise ds.checksum_error(url, path, group[name])
    return a


def read_column_block(url: str, info: ColumnInfo, storage_options: dict | None = None,
                      verify: bool = True, recheck: bool = True) -> ColumnBlock:
    """Read one column block: three chunk reads, checked against its table entry.

    As :func:`distsvm.storage.dataset.read_row_block`: a local store's arrays are read
    straight from their chunk files (anything unusual, and every fault, through Zarr), and
    with ``recheck=False`` (a worker streaming the view, which re-reads a block every round)
    a block whose files this process verified and which are unchanged since is not
    verified again."""
    try:
        root = ds.open_group(url, mode="r", storage_options=storage_options)
        g = root["cols"][info.name]
        n_rows = info.n_rows if info.n_rows is not None else int(
            root.attrs[ATTRIBUTE]["n_rows"])
    except Exception as exc:
        raise CorruptStoreError(f"{url}: cannot open cols/{info.name}: {exc!r}") from exc
    shapes = {"indptr": (info.n_cols + 1,), "indices": (info.nnz,), "data": (info.nnz,)}
    dtypes = {"indptr": "int64", "indices": "int32",
              "data": info.dtype if info.dtype is not None else ds.DTYPES}
    files: list = []  # the identity of the files the fast path read
    arrays, fast = {}, []
    for k in COL_ARRAYS:
        path = f"cols/{info.name}/{k}"
        a = None if isinstance(dtypes[k], tuple) else ds._local_chunk(
            url, path, dtypes[k], shapes[k][0], files)
        if a is not None:
            fast.append(k)
        arrays[k] = a if a is not None else _read_checked(  # its CRC-32 checked there
            url, path, g, k, shapes[k], info.crc32[k], verify, dtypes[k])
    seen = (url, f"cols/{info.name}", tuple(sorted(info.crc32.items())), n_rows,
            tuple(files)) if len(fast) == len(COL_ARRAYS) else None
    trusted = verify and not recheck and seen is not None and ds._unchanged(seen)
    for k in fast if verify and not trusted else ():
        if ds._crc(arrays[k]) != info.crc32[k]:
            raise ds.checksum_error(url, f"cols/{info.name}/{k}", g[k])
    block = ColumnBlock(arrays["indptr"], arrays["indices"], arrays["data"], info.col_start)
    if not trusted:
        check_column_block(url, f"cols/{info.name}", block, n_rows)
        if verify and seen is not None:
            ds._verified(seen)
    return block


def check_column_block(url: str, path: str, block: ColumnBlock, n_rows: int) -> None:
    """The column view's :func:`distsvm.storage.dataset.check_row_block`: column pointers, row
    indices in ``[0, n_rows)`` (global, the view covers every row), finite values."""
    ds.check_pointers(url, f"{path}/indptr", block.indptr, len(block.indices))
    ds.check_range(url, f"{path}/indices", block.indices, n_rows, "row index")
    ds.check_finite(url, f"{path}/data", block.data)


def read_labels(url: str, cmeta: ColumnsMeta, storage_options: dict | None = None,
                verify: bool = True) -> np.ndarray:
    """The class index of every row, in global row order (``cols/y``)."""
    root = ds.open_group(url, mode="r", storage_options=storage_options)
    y = _read_checked(url, "cols/y", root["cols"], "y", (cmeta.n_rows,), cmeta.y_crc32, verify,
                      "int32")
    n_classes = cmeta.n_classes
    if n_classes is None:
        d = root.attrs["distsvm"]
        n_classes = 1 if d.get("task") == "regression" else len(d["classes"])
    ds.check_range(url, "cols/y", y, n_classes, "class index")
    return y


# ---------------------------------------------------------------- the transpose


@numba.njit(cache=True, nogil=True)
def _count_columns(indices, counts):
    for k in range(len(indices)):
        counts[indices[k]] += 1


@numba.njit(cache=True, nogil=True)
def _scatter(indptr, indices, data, row_offset, c0, c1, fill, out_indices, out_data):
    """Append the entries of CSR rows whose column is in [c0, c1) to their columns' runs.

    ``fill[c - c0]`` is the next free slot of column c (updated in place).  Rows
    arrive in increasing global order, so each column's row indices are sorted.
    """
    for i in range(len(indptr) - 1):
        for k in range(indptr[i], indptr[i + 1]):
            c = indices[k]
            if c0 <= c < c1:
                p = fill[c - c0]
                out_indices[p] = row_offset + i
                out_data[p] = data[k]
                fill[c - c0] = p + 1


def count_columns(url: str, info: ds.BlockInfo, n_features: int,
                  storage_options: dict | None = None) -> np.ndarray:
    """Pass 1 on one row block: non-zeros per column (int64, length n_features)."""
    block = ds.read_row_block(url, info, storage_options)
    counts = np.zeros(n_features, dtype=np.int64)
    _count_columns(block.indices, counts)
    return counts


def column_bytes(n_cols: int, nnz: int, itemsize: int) -> int:
    """Bytes of one CSC column block while it is built: its arrays and the pass's fill pointers."""
    return 16 * n_cols + 8 + nnz * (4 + itemsize)


def plan_blocks(counts: np.ndarray, itemsize: int, block_bytes: int) -> list[tuple[int, int]]:
    """Split [0, n) into consecutive column ranges of at most ``block_bytes`` of CSC each (a
    single column larger than that is a block of its own): as few ranges as that allows,
    and among such splits the one whose largest range is smallest, so that the blocks are
    about even.  (Filling each block in turn left the last one small: pypi-summaries' 84 MB
    view as 64 + 20 MB, whose two owners in ``--pcd-mode parallel`` then did 3:1 of the
    work, and whose 64 MB block no 512 MB worker's cache held.)"""
    if len(counts) == 0:
        return [(0, 0)]
    cum = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    ends = 16 * np.arange(len(cum), dtype=np.int64) + cum * (4 + itemsize)
    # column_bytes of the range [s, c) is ends[c] - ends[s] + 8

    def split(cap: int) -> list[tuple[int, int]]:
        bounds, start = [], 0
        while start < len(counts):
            stop = int(np.searchsorted(ends, ends[start] + cap - 8, side="right")) - 1
            stop = min(max(stop, start + 1), len(counts))
            bounds.append((start, stop))
            start = stop
        return bounds

    fewest = len(split(block_bytes))
    lo, hi = int(ends[-1] // fewest), block_bytes  # the smallest cap that splits as few
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(split(mid)) <= fewest else (mid + 1, hi)
    return split(hi)


def plan_groups(blocks: list[tuple[int, int]], counts: np.ndarray, itemsize: int,
                budget: int) -> list[list[int]]:
    """Consecutive column blocks built by one pass each, their buffers within ``budget`` bytes."""
    groups: list[list[int]] = []
    used = budget + 1
    for b, (c0, c1) in enumerate(blocks):
        size = column_bytes(c1 - c0, int(counts[c0:c1].sum()), itemsize)
        if size > budget:
            raise ValueError(f"column block {b} needs {size} bytes, more than the memory "
                             f"budget's {budget} for column buffers; raise memory_mb or lower "
                             "block_mb")
        if used + size > budget:
            groups.append([])
            used = 0
        groups[-1].append(b)
        used += size
    return groups


def build_group(url: str, row_infos: list[ds.BlockInfo], col_bounds: list[tuple[int, int]],
                names: list[str], counts: np.ndarray, dtype: str,
                storage_options: dict | None = None,
                compression: str = "lz4") -> list[ColumnInfo]:
    """One pass over all row blocks filling the column blocks ``col_bounds`` (one group), then
    write them, compressed as the row blocks are (``compression``).  Memory: the group's CSC
    arrays plus one row block."""
    c0, c1 = col_bounds[0][0], col_bounds[-1][1]
    indptr = np.zeros(c1 - c0 + 1, dtype=np.int64)
    np.cumsum(counts[c0:c1], out=indptr[1:])
    fill = indptr[:-1].copy()
    out_indices = np.empty(indptr[-1], dtype=np.int32)
    out_data = np.empty(indptr[-1], dtype=dtype)
    offset = 0
    for info in row_infos:
        block = ds.read_row_block(url, info, storage_options)
        _scatter(block.indptr, block.indices, block.data, offset, c0, c1, fill, out_indices,
                 out_data)
        offset += block.n_rows
        del block
    if not np.array_equal(fill, indptr[1:]):
        raise CorruptStoreError(f"{url}: row blocks changed during the transpose")
    g = ds.open_group(url, mode="r+", storage_options=storage_options)["cols"]
    out = []
    for (a, b), name in zip(col_bounds, names):
        lo, hi = indptr[a - c0], indptr[b - c0]
        arrays = {"indptr": indptr[a - c0:b - c0 + 1] - lo, "indices": out_indices[lo:hi],
                  "data": out_data[lo:hi]}
        bg = g.create_group(name, overwrite=True)
        crcs = {k: _write(bg, k, v, compression) for k, v in arrays.items()}
        out.append(ColumnInfo(name, a, b, int(hi - lo), crcs))
    return out


def _write(group, name: str, a: np.ndarray, compression: str) -> int:
    a = np.ascontiguousarray(a)
    arr = group.create_array(name, shape=a.shape, chunks=(max(1, a.shape[0]),), dtype=a.dtype,
                             compressors=ds.COMPRESSIONS[compression], fill_value=0,
                             overwrite=True)
    if a.size:
        arr[...] = a
    return ds._crc(a)


def write_labels(url: str, row_infos: list[ds.BlockInfo], n_rows: int,
                 storage_options: dict | None = None, compression: str = "lz4") -> int:
    """``cols/y`` from the row blocks' ``y`` arrays (4 bytes a row); returns its CRC-32."""
    y = np.empty(n_rows, dtype=np.int32)
    offset = 0
    for info in row_infos:
        block = ds.read_row_block(url, info, storage_options)
        y[offset:offset + block.n_rows] = block.y
        offset += block.n_rows
    g = ds.open_group(url, mode="r+", storage_options=storage_options)["cols"]
    return _write(g, "y", y, compression)


def begin(dataset: ds.Dataset) -> None:
    """Retract any existing column view (its metadata first), then start an empty ``cols/``."""
    if dataset.meta.n_rows > MAX_ROWS:
        raise StorageError(f"{dataset.url}: {dataset.meta.n_rows} rows exceed the column "
                           f"view's int32 row indices ({MAX_ROWS})")
    g = ds.open_group(dataset.url, mode="r+", storage_options=dataset.storage_options)
    if ATTRIBUTE in g.attrs:
        del g.attrs[ATTRIBUTE]
    g.create_group("cols", overwrite=True)


def commit(dataset: ds.Dataset, cmeta: ColumnsMeta) -> ColumnsMeta:
    """Record the column view: the metadata entry, written after every array."""
    g = ds.open_group(dataset.url, mode="r+", storage_options=dataset.storage_options)
    g.attrs[ATTRIBUTE] = cmeta.to_json()
    return read_columns_meta(dataset)
