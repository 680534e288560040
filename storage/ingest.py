"""Ingest: parsed rows → staged parts → shuffled row blocks → committed dataset.

The per-piece tasks of the phases; :mod:`distsvm.ingest` runs them as a job.

The pipeline has three phases, each a set of independent tasks with memory
bounded by one part or one block (never by the dataset):

1. **parts** — each parsed chunk of input (a byte range of a file, a streamed
   piece of a compressed file, or a slice of an in-memory matrix) is written as
   a *part*: its rows sorted by a 64-bit key.  With shuffling the key is
   ``splitmix64(seed, position)`` where position is the row's byte offset in
   the file (or its row number for in-memory input); without, it is the
   position itself.  Keys depend only on the input, so the result does not
   depend on how the input was split (serial and parallel ingest agree).
2. **plan** — once the row count is known, the number of blocks follows from
   the block size; each part reports, for every block, the range of its
   (sorted) rows that fall into that block: a key range with shuffling, a range
   of global row numbers without.
3. **blocks** — each block gathers its slices from all parts, orders its rows
   by key and is written as one row block of the dataset.

The coordinator (``distsvm.ingest``) runs the tasks on Dask or in-process.
"""

from __future__ import annotations

import dataclasses
import math

import numba
import numpy as np

from . import dataset as ds
from .errors import InputDataError

PARTS = "_parts"
KEY_SPACE = 2.0**64


@dataclasses.dataclass(frozen=True)
class PartInfo:
    """What the coordinator learns from writing one part."""

    part: int
    n_rows: int
    nnz: int
    max_index: int
    labels: tuple[float, ...]
    label_counts: tuple[int, ...]
    targets: tuple[float, ...] = ()  # regression: (min, max, sum) of its targets; else ()


@numba.njit(cache=True, nogil=True)
def shuffle_keys(positions, seed):
    """splitmix64(seed + position): a bijection on uint64, so distinct positions get distinct keys."""
    out = np.empty(len(positions), dtype=np.uint64)
    s = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
    for i in range(len(positions)):
        z = np.uint64(positions[i]) + s
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = z ^ (z >> np.uint64(31))
    return out


@numba.njit(cache=True, nogil=True)
def gather_rows(indptr, indices, data, order):
    """CSR rows ``order[0], order[1], ...`` of (indptr, indices, data) as a new CSR matrix."""
    n = len(order)
    new_ptr = np.empty(n + 1, dtype=np.int64)
    new_ptr[0] = 0
    for k in range(n):
        r = order[k]
        new_ptr[k + 1] = new_ptr[k] + indptr[r + 1] - indptr[r]
    new_ind = np.empty(new_ptr[n], dtype=indices.dtype)
    new_dat = np.empty(new_ptr[n], dtype=data.dtype)
    for k in range(n):
        r = order[k]
        a, b, o = indptr[r], indptr[r + 1], new_ptr[k]
        for j in range(b - a):
            new_ind[o + j] = indices[a + j]
            new_dat[o + j] = data[a + j]
    return new_ptr, new_ind, new_dat


def _fs(stage: str, storage_options: dict | None):
    import fsspec

    return fsspec.core.url_to_fs(stage, **(storage_options or {}))


# The arrays of a part, as raw little-endian files; their dtypes are fixed but for data's.
PART_DTYPES = {"indptr": "<i8", "indices": "<i4", "labels": "<f8", "keys": "<u8",
               "weights": "<f8", "order": "<i8"}


def _part_path(root: str, part: int, name: str) -> str:
    return f"{root.rstrip('/')}/{PARTS}/{part:06d}/{name}.bin"


def _read_slice(fs, path: str, dtype, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of a raw array file: one ranged read."""
    itemsize = np.dtype(dtype).itemsize
    with fs.open(path, "rb") as f:
        f.seek(start * itemsize)
        raw = f.read((stop - start) * itemsize)
    return np.frombuffer(raw, dtype=dtype)


def cast_values(data, indptr, indices, dtype: str, where: str, columns=None,
                first_row: int = 1) -> np.ndarray:
    """The CSR values ``data`` as the store's ``dtype``, refused (one InputDataError naming
    ``where``, the row counted from ``first_row`` and the column — by its name in
    ``columns`` if given) where a finite value is not finite once cast: 1e39 is inf in
    float32, and a store never holds one."""
    with np.errstate(over="ignore"):
        out = np.asarray(data).astype(dtype)
    bad = ~np.isfinite(out)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        row = int(np.searchsorted(indptr, k, side="right")) - 1 + first_row
        col = int(indices[k])
        name = repr(columns[col]) if columns is not None else f"{col} (0-based)"
        raise InputDataError(f"{where}, row {row}: value {float(data[k]):g} in column {name} "
                             f"is not finite as {np.dtype(dtype).name}")
    return out


def write_part(stage: str, part: int, indptr, indices, data, labels, positions, *,
               shuffle: bool, seed: int, weights=None, keep_order: bool = False,
               storage_options: dict | None = None, regression: bool = False) -> PartInfo:
    """Phase 1: sort one parsed chunk by key and write it under ``STAGE/_parts/<part>``.

    ``regression``: the labels are real-valued targets, summarized by (min, max, sum)
    rather than counted per distinct value.

    ``weights`` (instance weights of the chunk's rows) are written in key order with the
    rows; the key order itself is written too (``keep_order`` is no longer needed): for
    :func:`attach_weights` and for every row's source position (:func:`build_block`).

    Parts are temporary and read back in slices, so they are raw array files
    (one ranged read per slice) rather than Zarr arrays, whose per-call cost
    dominated ingest when every block reads a slice of every part.
    """
    positions = np.asarray(positions, dtype=np.int64)
    keys = shuffle_keys(positions, seed) if shuffle else positions.astype(np.uint64)
    order = np.argsort(keys, kind="stable")
    indptr, indices, data = gather_rows(np.asarray(indptr, np.int64), indices, data, order)
    labels = np.asarray(labels, dtype=np.float64)[order]
    fs, root = _fs(stage, storage_options)
    fs.makedirs(f"{root.rstrip('/')}/{PARTS}/{part:06d}", exist_ok=True)
    extra = (() if weights is None else (("weights", np.asarray(weights, np.float64)[order]),))
    extra += (("order", order.astype(np.int64)),)  # always: the rows' source positions
    for name, a in (("indptr", indptr), ("indices", indices), ("data", data),
                    ("labels", labels), ("keys", keys[order]), *extra):
        with fs.open(_part_path(root, part, name), "wb") as f:
            f.write(np.ascontiguousarray(a).data)
    max_index = int(indices.max()) if len(indices) else -1
    if regression:
        stats = ((float(labels.min()), float(labels.max()), float(labels.sum()))
                 if len(labels) else ())
        return PartInfo(part, len(labels), len(data), max_index, (), (), stats)
    values, counts = np.unique(labels, return_counts=True)
    return PartInfo(part, len(labels), len(data), int(indices.max()) if len(indices) else -1,
                    tuple(float(v) for v in values), tuple(int(c) for c in counts))


def attach_weights(stage: str, part: int, weights: np.ndarray,
                   storage_options: dict | None = None) -> None:
    """Phase 1½: store the instance weights of a part's rows (given in input order) in the
    part's key order, kept by :func:`write_part` with ``keep_order``."""
    fs, root = _fs(stage, storage_options)
    with fs.open(_part_path(root, part, "order"), "rb") as f:
        order = np.frombuffer(f.read(), dtype=PART_DTYPES["order"])
    with fs.open(_part_path(root, part, "weights"), "wb") as f:
        f.write(np.ascontiguousarray(np.asarray(weights, np.float64)[order]).data)


def n_blocks_for(n_rows: int, nnz: int, itemsize: int, block_rows: int | None,
                 block_mb: float | None) -> int:
    """Blocks needed so that none exceeds ``block_rows`` rows or ``block_mb`` MB of CSR."""
    n = 1
    if block_rows:
        n = max(n, math.ceil(n_rows / block_rows))
    if block_mb:
        nbytes = nnz * (4 + itemsize) + n_rows * (8 + 4)
        n = max(n, math.ceil(nbytes / (block_mb * 2**20)))
    return max(1, min(n, n_rows))


def shuffled_bounds(stage: str, part: int, n_blocks: int,
                    storage_options: dict | None = None) -> np.ndarray:
    """Phase 2 (shuffled): row ranges of this part's sorted keys in each of n_blocks equal key ranges."""
    fs, root = _fs(stage, storage_options)
    with fs.open(_part_path(root, part, "keys"), "rb") as f:
        keys = np.frombuffer(f.read(), dtype=PART_DTYPES["keys"])
    edges = [min(int(b * KEY_SPACE / n_blocks), 2**64 - 1) for b in range(1, n_blocks)]
    inner = np.searchsorted(keys, np.array(edges, dtype=np.uint64), side="left")
    return np.concatenate([[0], inner, [len(keys)]]).astype(np.int64)


def ordered_bounds(part_rows: list[int], n_blocks: int) -> list[np.ndarray]:
    """Phase 2 (no shuffle): split rows in file order into n_blocks nearly equal runs."""
    total = sum(part_rows)
    edges = np.array([(b * total) // n_blocks for b in range(n_blocks + 1)], dtype=np.int64)
    out, start = [], 0
    for n in part_rows:
        out.append(np.clip(edges - start, 0, n))
        start += n
    return out


def build_block(stage: str, block: int, slices: list[tuple[int, int, int]],
                classes: tuple[float, ...], dtype: str, weighted: bool = False,
                storage_options: dict | None = None, regression: bool = False,
                first_rows: dict[int, int] | None = None,
                compression: str = "lz4") -> ds.BlockInfo:
    """Phase 3: gather ``(part, row_start, row_stop)`` slices, order rows by key, write the
    block (with its instance weights if ``weighted``; ``regression``: the labels as the
    block's targets, ``y`` zeros), compressed as ``compression`` says
    (:data:`~distsvm.storage.dataset.COMPRESSIONS`).  ``first_rows`` (part → the source row
    number of its first row; parts are numbered in source order): the block also keeps every
    row's position in the source, ``first_rows[part]`` + its index in the part's input order."""
    fs, root = _fs(stage, storage_options)
    ptrs, inds, dats, labs, keys, wts, poss = [], [], [], [], [], [], []
    offset = 0
    for part, r0, r1 in slices:
        if r1 <= r0:
            continue
        path = lambda name: _part_path(root, part, name)  # noqa: E731
        p = _read_slice(fs, path("indptr"), PART_DTYPES["indptr"], r0, r1 + 1)
        a, b = int(p[0]), int(p[-1])
        inds.append(_read_slice(fs, path("indices"), PART_DTYPES["indices"], a, b))
        dats.append(_read_slice(fs, path("data"), dtype, a, b))
        ptrs.append(p[1:] - a + offset)
        offset += b - a
        labs.append(_read_slice(fs, path("labels"), PART_DTYPES["labels"], r0, r1))
        keys.append(_read_slice(fs, path("keys"), PART_DTYPES["keys"], r0, r1))
        if weighted:
            wts.append(_read_slice(fs, path("weights"), PART_DTYPES["weights"], r0, r1))
        if first_rows is not None:
            poss.append(first_rows[part]
                        + _read_slice(fs, path("order"), PART_DTYPES["order"], r0, r1))
    weight = position = None
    if labs:
        indptr = np.concatenate([np.zeros(1, np.int64)] + ptrs)
        indices = np.concatenate(inds).astype(np.int32, copy=False)
        data = np.concatenate(dats).astype(dtype, copy=False)
        labels, key = np.concatenate(labs), np.concatenate(keys)
        order = np.argsort(key, kind="stable")
        indptr, indices, data = gather_rows(indptr, indices, data, order)
        labels = labels[order]
        weight = np.concatenate(wts)[order] if weighted else None
        position = np.concatenate(poss)[order] if first_rows is not None else None
    else:
        indptr, indices = np.zeros(1, np.int64), np.zeros(0, np.int32)
        data, labels = np.zeros(0, dtype), np.zeros(0)
        weight = np.zeros(0) if weighted else None
        position = np.zeros(0, np.int64) if first_rows is not None else None
    if regression:
        y, target = np.zeros(len(labels), np.int32), np.asarray(labels, np.float64)
    else:
        y, target = np.searchsorted(np.asarray(classes), labels).astype(np.int32), None
    return ds.write_row_block(stage, ds.block_name(block),
                              ds.RowBlock(indptr, indices, data, y, weight, target),
                              storage_options, position, compression)


def plan_blocks(infos: list[PartInfo], bounds: list[np.ndarray]) -> list[list[tuple[int, int, int]]]:
    """Per block, the (part, row_start, row_stop) slices it is made of."""
    n_blocks = len(bounds[0]) - 1
    return [[(info.part, int(bnd[b]), int(bnd[b + 1])) for info, bnd in zip(infos, bounds)]
            for b in range(n_blocks)]


def summarize(infos: list[PartInfo], n_features: int | None, where: str,
              regression: bool = False):
    """Totals over all parts; reject data that cannot be trained on.  Regression parts
    (:func:`write_part` with ``regression``) give no classes (use :func:`target_stats`)."""
    n_rows = sum(i.n_rows for i in infos)
    nnz = sum(i.nnz for i in infos)
    if n_rows == 0:
        raise InputDataError(f"{where}: no rows (the input is empty)")
    if regression:
        seen = max(i.max_index for i in infos) + 1
        if n_features is not None and seen > n_features:
            raise InputDataError(f"{where}: feature index {seen} exceeds n_features={n_features}")
        return n_rows, nnz, seen if n_features is None else n_features, (), ()
    counts: dict[float, int] = {}
    for i in infos:
        for v, c in zip(i.labels, i.label_counts):
            counts[v] = counts.get(v, 0) + c
    classes = tuple(sorted(counts))  # one label is a store too: the one-class SVM's data
    seen = max(i.max_index for i in infos) + 1
    if n_features is None:
        n_features = seen
    elif seen > n_features:
        raise InputDataError(f"{where}: feature index {seen} exceeds n_features={n_features}")
    return n_rows, nnz, n_features, classes, tuple(counts[c] for c in classes)


def target_stats(infos: list[PartInfo]) -> dict[str, float]:
    """The targets' min, max and mean over regression parts (DatasetMeta.targets)."""
    stats = [i.targets for i in infos if i.targets]
    n = sum(i.n_rows for i in infos if i.targets)
    return {"min": min(s[0] for s in stats), "max": max(s[1] for s in stats),
            "mean": sum(s[2] for s in stats) / n}


def remove_parts(stage: str, storage_options: dict | None = None) -> None:
    """Delete the staged parts once every block is written."""
    fs, root = _fs(stage, storage_options)
    fs.rm(f"{root.rstrip('/')}/{PARTS}", recursive=True)


def part_from_text(stage: str, part: int, path: str, *, buf=None, start: int = 0, end: int = 0,
                   first_line: int = 1, dtype: str = "float32", index_base: int = 1,
                   shuffle: bool = True, seed: int = 0, keep_order: bool = False,
                   storage_options: dict | None = None, regression: bool = False) -> PartInfo:
    """Phase 1 for LIBSVM text: parse ``buf`` (a streamed piece starting at byte
    ``start``, line ``first_line``) or, when ``buf`` is None, the byte range
    [start, end) of an uncompressed file, and write the part."""
    from . import libsvm

    if buf is None:
        chunk = libsvm.parse_range(path, start, end, dtype=np.dtype(dtype), index_base=index_base)
    else:
        chunk = libsvm.parse_chunk(buf, path=path, chunk_offset=start, first_line=first_line,
                                   dtype=np.dtype(dtype), index_base=index_base)
    return write_part(stage, part, chunk.indptr, chunk.indices, chunk.data, chunk.labels,
                      chunk.line_starts, shuffle=shuffle, seed=seed, keep_order=keep_order,
                      storage_options=storage_options, regression=regression)
