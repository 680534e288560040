"""The distsvm dataset: a Zarr v3 group of row blocks (format v1).

Layout (full specification in ``docs/storage-format.md``)::

    STORE/zarr.json              group; attributes["distsvm"] = metadata, written last
    STORE/rows/<block>/indptr    int64   (n_rows_b + 1,)  one chunk
    STORE/rows/<block>/indices   int32   (nnz_b,)         one chunk, 0-based columns
    STORE/rows/<block>/data      float32 (nnz_b,)         one chunk (float64 by option)
    STORE/rows/<block>/y         int32   (n_rows_b,)      one chunk, class index
    STORE/rows/<block>/weight    float64 (n_rows_b,)      one chunk, optional: instance weights
    STORE/rows/<block>/target    float64 (n_rows_b,)      one chunk, regression stores only
    STORE/rows/<block>/position  int64   (n_rows_b,)      one chunk, optional: source row numbers

A store's labels are classes (``task`` "classification": ``y`` indexes ``classes``) or
real-valued targets (``task`` "regression", format version 2: ``target`` holds them, ``y``
is all zeros, one "class index" so that a per-class cost table ``cost[y]`` is C, and
``classes`` and ``class_counts`` are empty).

A block is a contiguous range of (shuffled) rows and the unit of work: reading
one block reads exactly four chunks and nothing else.  Each array is checked
against the CRC-32 recorded in the block table, so a missing chunk (which Zarr
would silently fill with zeros) or a damaged one is an error, never data.

Commit protocol: a dataset is written into a staging location and the metadata
is written last; for local paths the staging directory is then renamed into
place, so an interrupted ingest never leaves a store that opens as whole.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import hashlib
import json
import mmap
import os
import shutil
import sys
import threading
import time
import uuid
import zlib
from typing import Any

import numcodecs
import numpy as np
import zarr
import zarr.codecs

from . import bounded
from .errors import (
    CorruptStoreError,
    FormatVersionError,
    IncompleteStoreError,
    StorageError,
    StoreExistsError,
    StoreNotFoundError,
    listed,
)
from .paths import resolve

FORMAT_NAME = "distsvm-dataset"
FORMAT_VERSION = 2  # the newest this reads; classification stores are still written as 1
READ_VERSIONS = (1, 2)  # 2: a regression store (task, targets, a target array per block)
ROW_ARRAYS = ("indptr", "indices", "data", "y")
WEIGHT = "weight"  # the optional array of per-row instance weights (in every block or none)
TARGET = "target"  # regression stores: every block's real-valued targets (float64)
# every row's position in its source (int64, 0-based row number in the input: a text file's
# data lines, a matrix's rows), in every block or none: predict --output writes in this order
POSITION = "position"
TASKS = ("classification", "regression")
DTYPES = ("float32", "float64")
# The codecs a store's arrays may use (what distsvm writes, and other lossless ones that
# decode data only); any other is refused before a chunk is decoded (see checked_array).
SAFE_CODECS = ("bytes", "zstd", "gzip", "blosc", "crc32c", "transpose")
DIGEST = "digest"  # the metadata documents' SHA-256 entry (seal_metadata)
# Row blocks are re-read every round once they do not fit in the workers' memory, so their
# codec is chosen for decoding (issue 31; docs/benchmarks.md): Blosc with LZ4 and byte
# shuffle (shuffle by item size: the codec's default) against zstd level 1, per block of
# pypi-summaries (42.7 MB decoded): 29.1 MB against 30.0 MB, decoded in 15.4 ms against
# 41.5 ms, encoded in 63 ms against 125 ms; per generated block (16.3 MB, 100 non-zeros a
# row): 4.56 MB for both, 7.5 against 8.6 ms to decode.  Uncompressed decodes in no time
# but is 1.4-3.6x the bytes to read (a store beyond the page cache, or remote).  Stores
# written with zstd read as before: the reader takes each array's codec from its metadata.
# ``none`` is there for stores re-read from local disk by workers whose cores the decode
# would take from the kernels (ingest's and generate's ``compression``; docs/storage-format.md).
# A column view (``cols/``) is written as the store's row blocks are (zstd level 1 until
# 2026-11-29, read through Zarr: a 42 MB block of pypi-summaries's view took 188 ms to read
# on a 512 MB worker, 45-55 ms in LZ4 read by hand; docs/benchmarks.md).
COMPRESSIONS = {"lz4": zarr.codecs.BloscCodec(cname="lz4"), "none": None}


@dataclasses.dataclass(frozen=True)
class RowBlock:
    """One block of rows in CSR form, as held in worker memory (read-only views)."""

    indptr: np.ndarray  # int64 (n_rows + 1,)
    indices: np.ndarray  # int32 (nnz,)
    data: np.ndarray  # float32 or float64 (nnz,)
    y: np.ndarray  # int32 (n_rows,), index into DatasetMeta.classes (regression: zeros)
    weight: np.ndarray | None = None  # float64 (n_rows,) instance weights, or None: all 1
    target: np.ndarray | None = None  # float64 (n_rows,) regression targets, else None

    @property
    def n_rows(self) -> int:
        return len(self.y)

    @property
    def nnz(self) -> int:
        return len(self.data)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.indptr, self.indices, self.data, self.y,
                                       *(a for a in (self.weight, self.target)
                                         if a is not None)))


@dataclasses.dataclass(frozen=True)
class BlockInfo:
    """One entry of the block table, or a block made of other blocks' rows (``parts``).

    A made block (:func:`joined_block`) is never stored: it is read by reading its parts,
    taking the chosen rows of each and joining them in order.  Solvers see it as one block,
    so they can visit the rows of several stored blocks in one permutation (the blocks a
    worker holds in memory) or train on some rows of a block (a cross-validation fold).
    """

    name: str
    n_rows: int
    nnz: int
    crc32: dict[str, int]
    # ((stored block, sorted row indices or None for all of them), ...); empty: a stored block
    parts: tuple = dataclasses.field(default=(), compare=False, repr=False)
    # (n_features, n_classes, regression, dtype) of the metadata this entry was read from:
    # what the block's arrays and contents are held to (None: read the store's metadata)
    limits: tuple | None = dataclasses.field(default=None, compare=False, repr=False)
    # the store's class values, when a regression job reads a classification store's labels
    # as its targets (Dataset.as_regression): the block is read with target = labels[y]
    labels: tuple | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_json(self) -> dict:
        if self.parts:
            raise ValueError(f"block {self.name} is made of other blocks: it is not stored")
        return {"name": self.name, "n_rows": self.n_rows, "nnz": self.nnz, "crc32": self.crc32}


def joined_block(parts, nnz: int | None = None) -> BlockInfo:
    """The block of ``parts`` ((stored BlockInfo, row indices or None), ...), rows in order.

    Its name and checksums are derived from the parts' (so a worker's block cache never
    confuses two different joins, nor a join with a rewritten store); ``nnz`` is required
    when some part takes a subset of its rows (counting it needs the part's row pointers).
    """
    parts = tuple((info, None if rows is None else np.asarray(rows, dtype=np.int64))
                  for info, rows in parts)
    digest = hashlib.sha256()
    for info, rows in parts:
        if info.parts:
            raise ValueError("a joined block's parts must be stored blocks")
        digest.update(f"{info.name}:{sorted(info.crc32.items())};".encode())
        if info.labels is not None:  # read as targets: another block than the classes'
            digest.update(f"targets {info.labels};".encode())
        digest.update(b"all" if rows is None else rows.tobytes())
    if nnz is None:
        if any(rows is not None for _, rows in parts):
            raise ValueError("joined_block needs nnz when a part takes some of its rows")
        nnz = sum(info.nnz for info, _ in parts)
    n_rows = sum(info.n_rows if rows is None else len(rows) for info, rows in parts)
    keys = parts[0][0].crc32 if parts else {}
    crc = {k: zlib.crc32(digest.digest() + k.encode()) for k in keys}
    return BlockInfo(f"join-{digest.hexdigest()[:16]}", n_rows, nnz, crc, parts)


def join_infos(infos) -> BlockInfo:
    """Blocks (stored or joined) as one joined block of their stored parts, rows in order."""
    return joined_block([part for info in infos for part in (info.parts or ((info, None),))],
                        sum(info.nnz for info in infos))


def take_rows(block: RowBlock, rows) -> RowBlock:
    """The rows ``rows`` (sorted indices) of ``block``, as a new CSR block (copied by a
    compiled loop: 3.5-5x NumPy's fancy indexing on a pypi-summaries block, 7.2 against
    2.0 ms for 34,000 rows; a streamed dual CD visit takes its block's cached rows so)."""
    if rows is None:
        return block
    from .ingest import gather_rows  # Numba's: not imported by the commands that take no rows

    rows = np.asarray(rows)
    y = block.y[rows]  # a row out of range raises here, before the unchecked compiled copy
    indptr, indices, data = gather_rows(block.indptr, block.indices, block.data, rows)
    return RowBlock(indptr, indices, data, y,
                    None if block.weight is None else block.weight[rows],
                    None if block.target is None else block.target[rows])


def join_parts(blocks: list[RowBlock], parts) -> RowBlock:
    """A joined block from its stored parts' blocks (``blocks[i]`` read for ``parts[i]``):
    the chosen rows of each, in order."""
    return join_blocks([take_rows(block, rows) for block, (_, rows) in zip(blocks, parts,
                                                                           strict=True)])


def join_blocks(blocks: list[RowBlock]) -> RowBlock:
    """Several CSR blocks as one, rows in order."""
    if len(blocks) == 1:
        return blocks[0]
    offsets = np.cumsum([0] + [b.nnz for b in blocks[:-1]])
    indptr = np.concatenate([[0]] + [b.indptr[1:] + o
                                     for b, o in zip(blocks, offsets, strict=True)])
    weight = None if blocks[0].weight is None else np.concatenate([b.weight for b in blocks])
    target = None if blocks[0].target is None else np.concatenate([b.target for b in blocks])
    return RowBlock(indptr.astype(np.int64), np.concatenate([b.indices for b in blocks]),
                    np.concatenate([b.data for b in blocks]),
                    np.concatenate([b.y for b in blocks]), weight, target)


@dataclasses.dataclass(frozen=True)
class DatasetMeta:
    """The validated metadata of a committed dataset.

    ``task`` "classification" (``classes`` the sorted labels, ``class_counts`` their rows) or
    "regression" (``classes`` and ``class_counts`` empty; ``targets`` the targets' "min",
    "max" and "mean")."""

    n_rows: int
    n_features: int
    nnz: int
    dtype: str
    classes: tuple[float, ...]
    class_counts: tuple[int, ...]
    blocks: tuple[BlockInfo, ...]
    source: dict[str, Any]
    created: str
    format_version: int = FORMAT_VERSION  # unused: to_json writes 1, or 2 for regression
    task: str = "classification"
    targets: dict = dataclasses.field(default_factory=dict)

    @property
    def regression(self) -> bool:
        """Whether the labels are real-valued targets (``RowBlock.target``), not classes."""
        return self.task == "regression"

    @property
    def weighted(self) -> bool:
        """Whether the blocks carry instance weights (the optional ``weight`` array)."""
        return bool(self.blocks) and WEIGHT in self.blocks[0].crc32

    @property
    def positioned(self) -> bool:
        """Whether the blocks carry each row's position in its source (``position``)."""
        return bool(self.blocks) and POSITION in self.blocks[0].crc32

    @property
    def in_source_order(self) -> bool:
        """Whether the rows, blocks concatenated, are in their source's order: every row's
        position is stored (:func:`read_block_positions`), or the store was ingested or
        generated in order (``--no-shuffle``, ``distsvm generate``) and never appended to."""
        if self.positioned:
            return True
        src = self.source
        return "appended" not in src and (src.get("shuffle") is False
                                          or str(src.get("input", "")).startswith("synthetic"))

    def to_json(self) -> dict:
        extra = {"task": self.task, "targets": dict(self.targets)} if self.regression else {}
        return seal_metadata({
            "format": FORMAT_NAME,
            # version 1 readers open classification stores; a regression store needs 2
            "format_version": 2 if self.regression else 1,
            "n_rows": self.n_rows,
            "n_features": self.n_features,
            "nnz": self.nnz,
            "dtype": self.dtype,
            "classes": list(self.classes),
            "class_counts": list(self.class_counts),
            "blocks": [b.to_json() for b in self.blocks],
            "source": self.source,
            "created": self.created,
            **extra,
        })

    @classmethod
    def from_json(cls, url: str, d: Any) -> DatasetMeta:
        """Parse and validate metadata; every failure names the store and the field."""
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise CorruptStoreError(f"{url}: group attributes are not a {FORMAT_NAME} header")
        version = d.get("format_version")
        if version not in READ_VERSIONS:
            raise FormatVersionError(
                f"{url}: dataset format version {version!r} is not supported "
                f"(this distsvm reads versions {', '.join(map(str, READ_VERSIONS))})"
            )
        check_metadata_digest(url, d, "dataset metadata (attribute 'distsvm')")
        try:
            limits = _limits(d)
            blocks = tuple(
                BlockInfo(str(b["name"]), int(b["n_rows"]), int(b["nnz"]),
                          {k: int(v) for k, v in b["crc32"].items()}, limits=limits)
                for b in d["blocks"]
            )
            meta = cls(
                n_rows=int(d["n_rows"]),
                n_features=int(d["n_features"]),
                nnz=int(d["nnz"]),
                dtype=str(d["dtype"]),
                classes=tuple(float(c) for c in d["classes"]),
                class_counts=tuple(int(c) for c in d["class_counts"]),
                blocks=blocks,
                source=dict(d.get("source", {})),
                created=str(d.get("created", "")),
                task=str(d.get("task", "classification")),
                targets={str(k): float(v) for k, v in d.get("targets", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStoreError(f"{url}: malformed dataset metadata: {exc!r}") from exc
        meta.check(url)
        return meta

    def check(self, url: str) -> None:
        """Check the header's internal consistency (not the arrays)."""
        problems = []
        if self.dtype not in DTYPES:
            problems.append(f"dtype {self.dtype!r} is not one of {DTYPES}")
        if sum(b.n_rows for b in self.blocks) != self.n_rows:
            problems.append("block row counts do not add up to n_rows")
        if sum(b.nnz for b in self.blocks) != self.nnz:
            problems.append("block nnz do not add up to nnz")
        if self.task not in TASKS:
            problems.append(f"task {self.task!r} is not one of {TASKS}")
        elif self.regression:
            if self.classes or self.class_counts:
                problems.append("a regression store has classes")
            if set(self.targets) != {"min", "max", "mean"}:
                problems.append("a regression store needs its targets' min, max and mean")
            if not all(_has_targets(b) for b in self.blocks):
                problems.append("some blocks of a regression store have no targets")
        elif len(self.classes) != len(self.class_counts) or sum(self.class_counts) != self.n_rows:
            problems.append("class counts do not add up to n_rows")
        if not self.regression and any(TARGET in b.crc32 for b in self.blocks):
            problems.append("a classification store has target arrays")
        if list(self.classes) != sorted(set(self.classes)):
            problems.append("classes are not sorted and unique")
        if len({WEIGHT in b.crc32 for b in self.blocks}) > 1:
            problems.append("some blocks have instance weights and some do not")
        if len({POSITION in b.crc32 for b in self.blocks}) > 1:
            problems.append("some blocks have source positions and some do not")
        if len({b.name for b in self.blocks}) != len(self.blocks):
            problems.append("block names are not unique")
        if self.n_features < 0:
            problems.append("n_features is negative")
        if problems:
            raise CorruptStoreError(f"{url}: inconsistent metadata: " + "; ".join(problems))


def _has_targets(info: BlockInfo) -> bool:
    """Whether a block reads with targets: stored, or its labels read as targets."""
    if info.parts:
        return all(_has_targets(part) for part, _ in info.parts)
    return TARGET in info.crc32 or info.labels is not None


def open_group(url: str, mode: str, storage_options: dict | None = None):
    """``zarr.open_group`` with ``storage_options`` for an fsspec URL only: a local path
    takes none (Zarr raises a TypeError), so that one set of options given for a command's
    remote paths does not break its local ones."""
    return zarr.open_group(url, mode=mode,
                           storage_options=None if _is_local(url) else storage_options)


def block_name(i: int) -> str:
    return f"{i:06d}"


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(a).view(np.uint8)) & 0xFFFFFFFF


class Dataset:
    """A committed dataset opened for reading.

    Cheap to construct and to pickle (it holds the URL and the metadata), so it
    can be shipped to Dask workers, which then read blocks themselves.
    """

    def __init__(self, url: str, meta: DatasetMeta, storage_options: dict | None = None,
                 block_ids: tuple[int, ...] | None = None):
        self.url = url
        self.meta = meta
        self.storage_options = storage_options
        self.block_ids = block_ids  # None: every row; else a view, of these blocks' rows (take)

    def __repr__(self) -> str:
        m = self.meta
        view = "" if self.block_ids is None else f", rows of blocks {list(self.block_ids)}"
        return (f"Dataset({self.url!r}, n_rows={m.n_rows}, n_features={m.n_features}, "
                f"nnz={m.nnz}, blocks={len(m.blocks)}{view})")

    @property
    def is_subset(self) -> bool:
        """Whether this is a view of some of the store's rows (:meth:`take`)."""
        return self.block_ids is not None

    def take(self, rows, nnz=None, class_counts=None) -> Dataset:
        """A view of the rows ``rows`` of this dataset (sorted row numbers, 0 to l−1 in block
        order; no data copied): a cross-validation fold, as LIBLINEAR's sub-problems.
        :func:`join_infos` flattens its joined blocks into their stored parts.

        The view has one block per stored block that holds some of the rows — a joined
        block (:func:`joined_block`) of that block's chosen rows, or the stored block itself
        when all its rows are chosen —, so anything that reads ``meta.blocks`` (every
        row-block solver, ``predict``) sees a smaller dataset whose blocks are no larger
        than the store's.  ``nnz`` (per stored block, the non-zeros of its chosen rows) and
        ``class_counts`` (per class, of the chosen rows) spare reading the blocks here to
        count them.  The column view covers every row of the store, so a view has none.
        """
        if self.is_subset or any(info.parts for info in self.meta.blocks):
            raise ValueError(f"{self.url}: take() takes rows of the stored blocks, not of a view")
        rows = np.asarray(rows, dtype=np.int64)
        ends = np.cumsum([info.n_rows for info in self.meta.blocks])
        if (not len(rows) or np.any(np.diff(rows) <= 0) or rows[0] < 0
                or rows[-1] >= self.meta.n_rows):
            raise ValueError(f"{self.url}: rows must be distinct sorted row numbers in "
                             f"[0, {self.meta.n_rows}) (at least one)")
        cuts = np.searchsorted(rows, np.concatenate([[0], ends]))
        blocks, ids, total_nnz = [], [], 0
        counts = np.zeros(len(self.meta.classes), np.int64)
        for b, info in enumerate(self.meta.blocks):
            chosen = rows[cuts[b]:cuts[b + 1]] - (ends[b] - info.n_rows)
            if not len(chosen):
                continue
            if nnz is None or class_counts is None:
                block = take_rows(read_row_block(self.url, info, self.storage_options), chosen)
                if not self.meta.regression:
                    counts += np.bincount(block.y, minlength=len(counts))
            whole = len(chosen) == info.n_rows
            b_nnz = info.nnz if whole else int(block.nnz if nnz is None else nnz[b])
            blocks.append(info if whole else joined_block([(info, chosen)], b_nnz))
            ids.append(b)
            total_nnz += b_nnz
        # a regression view keeps the store's target stats (informative only)
        meta = dataclasses.replace(
            self.meta, n_rows=len(rows), nnz=total_nnz, blocks=tuple(blocks),
            class_counts=() if self.meta.regression else tuple(
                int(c) for c in (counts if class_counts is None else class_counts)))
        meta.check(self.url)
        return Dataset(self.url, meta, self.storage_options, tuple(ids))

    def as_regression(self) -> Dataset:
        """This store with its labels read as regression targets: a classification store's
        class values are the numbers of its file (ingest keeps them exactly, as float64), so
        a regression loss (LIBLINEAR's -s 11, 12, 13) trains on them as LIBLINEAR does on
        the same file, with no second ingest.  A regression store is returned as it is.
        Every block reads ``target`` = ``classes[y]`` and ``y`` = 0 (:func:`read_row_block`);
        the view's metadata is a regression store's (targets' min, max and mean from the
        class counts)."""
        m = self.meta
        if m.regression:
            return self
        if self.is_subset or any(info.parts for info in m.blocks):
            raise ValueError(f"{self.url}: as_regression() takes a stored dataset, not a view")
        values = np.asarray(m.classes, dtype=np.float64)
        counts = np.asarray(m.class_counts, dtype=np.float64)
        targets = {"min": float(values.min()), "max": float(values.max()),
                   "mean": float(values @ counts / counts.sum())}
        meta = dataclasses.replace(
            m, task="regression", classes=(), class_counts=(), targets=targets,
            blocks=tuple(dataclasses.replace(b, labels=tuple(m.classes)) for b in m.blocks))
        meta.check(self.url)
        return Dataset(self.url, meta, self.storage_options)

    @property
    def n_blocks(self) -> int:
        return len(self.meta.blocks)

    def read_block(self, i: int, verify: bool = True) -> RowBlock:
        """Read block ``i`` (see :func:`read_row_block`)."""
        return read_row_block(self.url, self.meta.blocks[i], self.storage_options, verify)

    def verify(self) -> None:
        """Read every block: checksums and contents (:func:`check_row_block`); raise on the
        first fault."""
        for i in range(self.n_blocks):
            self.read_block(i)  # checksums, then the contents (check_row_block)


def read_row_block(url: str, info: BlockInfo, storage_options: dict | None = None,
                   verify: bool = True, recheck: bool = True,
                   buffers: Buffers | None = None) -> RowBlock:
    """Read one row block: four chunk reads (five with instance weights), checked against its
    block-table entry.

    Takes the URL and the entry rather than a :class:`Dataset` so that tasks
    shipped to workers carry a few hundred bytes, not the whole block table.  A joined
    block (:func:`joined_block`) is read part by part.

    ``recheck=False`` (the workers' reads, which re-read a streamed block every round): a
    local block whose files this process has verified (CRC-32s and contents) and which are
    unchanged since (:func:`_unchanged`) is not verified again: a pypi-summaries block
    (43 MB) then reads in 10.5 ms instead of 19.7 ms in one process, 19.5 ms instead of
    30.3 ms in a Dask worker (idle, medians of 7).  ``buffers``: where the local fast path
    makes the block's arrays (:class:`Buffers`), else new ones.
    """
    if info.parts:
        return join_parts([read_row_block(url, part, storage_options, verify, recheck, buffers)
                           for part, _ in info.parts], info.parts)
    arrays = {}
    files: list = []  # the identity of each array's files, read by the local fast path
    names = ROW_ARRAYS + tuple(k for k in (WEIGHT, TARGET) if k in info.crc32)
    expected = {"indptr": info.n_rows + 1, "indices": info.nnz, "data": info.nnz,
                "y": info.n_rows, WEIGHT: info.n_rows, TARGET: info.n_rows}
    where = f"rows/{info.name}"
    group = []  # the block's Zarr group, opened when an array is read through Zarr

    def zarr_group():
        if not group:
            group.append(open_group(url, mode="r", storage_options=storage_options)["rows"][
                info.name])
        return group[0]

    try:
        if info.limits is not None:
            limits = info.limits
        else:
            limits = _limits(open_group(url, mode="r",
                                        storage_options=storage_options).attrs["distsvm"])
        n_features, n_classes, regression, dtype = limits
        dtypes = row_dtypes(dtype)
        for k in names:
            where = f"rows/{info.name}/{k}"
            a = _local_chunk(url, where, dtypes[k], expected[k], files, buffers)
            arrays[k] = a if a is not None else checked_array(
                url, where, zarr_group()[k], dtypes[k], (expected[k],))[...]
    except CorruptStoreError:
        raise
    except Exception as exc:  # a damaged chunk fails in the codec with its own error types
        chunk = f" (its chunk 0, {where}/c/0)" if where.count("/") == 2 else ""
        raise CorruptStoreError(f"{url}: cannot read array {where}{chunk}: {exc!r}") from exc
    # what the verification below depends on: the entry's CRCs, the store's limits, the files
    seen = (url, info.name, tuple(sorted(info.crc32.items())), limits, tuple(files)) \
        if len(files) == len(names) else None
    trusted = verify and not recheck and seen is not None and _unchanged(seen)
    for k in names:
        a = arrays[k]
        if a.shape != (expected[k],) or a.dtype != np.dtype(dtypes[k]):  # as the header said
            raise CorruptStoreError(f"{url}: array rows/{info.name}/{k} reads as {a.dtype} "
                                    f"{a.shape}, expected {dtypes[k]} ({expected[k]},)")
        if verify and not trusted and _crc(a) != info.crc32[k]:
            raise checksum_error(url, f"rows/{info.name}/{k}", zarr_group()[k])
    block = RowBlock(arrays["indptr"], arrays["indices"], arrays["data"], arrays["y"],
                     arrays.get(WEIGHT), arrays.get(TARGET))
    if not trusted:
        check_row_block(url, f"rows/{info.name}", block, n_features, n_classes, regression)
        if verify and seen is not None:
            _verified(seen)
    if info.labels is not None and not regression:  # a classification store read as targets
        block = dataclasses.replace(block, y=np.zeros_like(block.y),
                                    target=np.asarray(info.labels, np.float64)[block.y])
    return block


def metadata_digest(doc: dict) -> str:
    """SHA-256 of a metadata document without its ``digest`` entry (canonical JSON)."""
    body = {k: v for k, v in doc.items() if k != DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True,
                      default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def seal_metadata(doc: dict) -> dict:
    """``doc`` with its ``digest`` entry (set in place): a reader refuses the document if any
    other entry changes.  Recomputed by every writer of the metadata (appends included)."""
    doc[DIGEST] = metadata_digest(doc)
    return doc


def check_metadata_digest(url: str, doc, what: str) -> None:
    """Refuse a metadata document whose ``digest`` does not match its content (an edited or
    damaged header).  A document without one (written before stores were sealed) is
    read as before: see docs/storage-format.md."""
    if isinstance(doc, dict) and DIGEST in doc and doc[DIGEST] != metadata_digest(doc):
        raise CorruptStoreError(f"{url}: the {what} fails its SHA-256 digest: it was edited "
                                "or damaged after it was written; refused")


def _limits(d: dict) -> tuple[int, int, bool, str]:
    """(n_features, n_classes, regression, dtype) of a store's metadata document ``d``."""
    return int(d["n_features"]), len(d["classes"]), d.get("task") == "regression", str(d["dtype"])


def row_dtypes(dtype: str) -> dict[str, str]:
    """The dtype of each array of a row block, for a store of values of ``dtype``."""
    return {"indptr": "int64", "indices": "int32", "data": dtype, "y": "int32",
            WEIGHT: "float64", TARGET: "float64"}


def _bad(url: str, path: str, reason: str) -> CorruptStoreError:
    return CorruptStoreError(f"{url}: array {path} (its chunk 0, {path}/c/0) {reason}; the "
                             "chunk was rewritten or written by a faulty tool: refused unused")


def check_pointers(url: str, path: str, indptr: np.ndarray, nnz: int) -> None:
    """CSR/CSC row (column) pointers ``path``: start at 0, never decrease, end at ``nnz``."""
    if len(indptr) == 0 or indptr[0] != 0 or indptr[-1] != nnz:
        raise _bad(url, path, f"is not a valid pointer array (it must run from 0 to {nnz})")
    if len(indptr) > 1 and (np.diff(indptr) < 0).any():
        raise _bad(url, path, "is not a valid pointer array (it decreases)")


def check_range(url: str, path: str, a: np.ndarray, stop: int, what: str) -> None:
    """Every entry of the integer array ``a`` in ``[0, stop)``."""
    if len(a) and (a.min() < 0 or a.max() >= stop):
        lo, hi = int(a.min()), int(a.max())
        bad = lo if lo < 0 else hi
        raise _bad(url, path, f"holds {what} {bad}, outside [0, {stop})")


def check_finite(url: str, path: str, a: np.ndarray, what: str = "values",
                 positive: bool = False) -> None:
    """Every entry of ``a`` finite (and ``>= 0`` if ``positive``)."""
    ok = np.isfinite(a).all()
    if ok and positive and len(a):
        ok = a.min() >= 0
    if not ok:
        need = "finite and >= 0" if positive else "finite"
        raise _bad(url, path, f"holds {what} that are not {need}")


def check_row_block(url: str, path: str, block: RowBlock, n_features: int, n_classes: int,
                    regression: bool) -> None:
    """Never trust a block's contents (a CRC proves the bytes are the ones written, not that
    they are valid): what every kernel indexes with or sums is checked once per load,
    vectorized — row pointers, column indices in ``[0, n_features)``, class indices in
    ``[0, n_classes)`` (regression: 0, finite targets), finite values and finite, >= 0
    instance weights.  Raises CorruptStoreError naming the array and its chunk."""
    check_pointers(url, f"{path}/indptr", block.indptr, len(block.indices))
    check_range(url, f"{path}/indices", block.indices, n_features, "column index")
    check_range(url, f"{path}/y", block.y, 1 if regression else n_classes, "class index")
    check_finite(url, f"{path}/data", block.data)
    if block.weight is not None:
        check_finite(url, f"{path}/{WEIGHT}", block.weight, "instance weights", positive=True)
    if regression:
        if block.target is None:
            raise CorruptStoreError(f"{url}: {path} of a regression store has no targets")
        check_finite(url, f"{path}/{TARGET}", block.target, "targets")


def checked_array(url: str, path: str, array, dtype: str | None = None,
                  shape: tuple | None = None):
    """``array`` if it is a Zarr v3 array whose codecs are in :data:`SAFE_CODECS` and whose
    dtype and shape are the header's (``dtype``, ``shape``; None: not checked), else a
    CorruptStoreError — before any chunk is decoded: a store is a user file, a codec such
    as numcodecs' ``pickle`` (reachable through Zarr v2 metadata) would run code from it,
    a float16 chunk (CRC resealed) would reach a kernel that has no float16, and a shape of
    10⁹ would allocate gigabytes."""
    md = array.metadata
    if md.zarr_format != 3:
        raise CorruptStoreError(f"{url}: array {path} is a Zarr v{md.zarr_format} array; distsvm "
                                "stores are Zarr v3 (refused unread: v2 codecs include pickle)")
    names = [c.to_dict()["name"] for c in md.codecs]
    unsafe = [n for n in names if n not in SAFE_CODECS]
    if unsafe:
        raise CorruptStoreError(f"{url}: array {path} uses codec(s) {unsafe}, not one of "
                                f"{list(SAFE_CODECS)}; refused unread")
    if dtype is not None and np.dtype(array.dtype) != np.dtype(dtype):
        raise CorruptStoreError(f"{url}: array {path} has dtype {np.dtype(array.dtype).name}, "
                                f"the header says {dtype}; refused unread")
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise CorruptStoreError(f"{url}: array {path} has shape {tuple(array.shape)}, the "
                                f"header says {tuple(shape)}; refused unread")
    return array


def checksum_error(url: str, path: str, array) -> CorruptStoreError:
    """The error for a one-chunk array ``path`` whose content fails its CRC-32: says whether
    its chunk is missing (Zarr then reads the fill value, zeros) or present but damaged."""
    try:
        missing = array.nchunks_initialized == 0
    except Exception:  # noqa: BLE001 - the listing failed too: say what is known
        missing = None
    what = {True: "is missing (Zarr would read it as zeros)", False: "is damaged",
            None: "is missing or damaged"}[missing]
    return CorruptStoreError(f"{url}: array {path} fails its CRC-32 check: its chunk 0 "
                             f"({path}/c/0) {what}")


# The array metadata of a one-chunk array as distsvm writes it, but for its shape and dtype
# and the compressor after the "bytes" codec (_local_chunk reads only such arrays itself).
_ONE_CHUNK = {"zarr_format": 3, "node_type": "array", "storage_transformers": [],
              "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}}
_LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}


class Buffers:
    """Memory for the arrays of row blocks read one after another, reused once nothing refers
    to an array made in it.

    A Dask worker runs with ``MALLOC_TRIM_THRESHOLD_`` set, which also fixes glibc's mmap
    threshold at 128 KiB: every decoded array of a block is then a fresh mapping whose pages
    the kernel faults in and zeroes (a 16 MB block of the 8.2× store loaded in 12.1 ms so,
    6.8 ms into reused memory; docs/benchmarks.md).  An array of at least :data:`MIN_BYTES`
    is made in the smallest held buffer that fits, at most a quarter larger, and that no array
    refers to any more, else in a new one (a block's norms made in its compressed chunk's
    buffer would keep all of it alive in the cache: 22 MiB a pypi-summaries block); a free
    buffer passed over by :data:`IDLE_TAKES` arrays in a row is let go,
    so what is held is what is in use plus what the next reads take (a streamed block's
    buffers are taken by the next block's arrays).  :meth:`disown` lets go of the buffers of
    arrays kept elsewhere (a block cache).  Dropping the object lets go of the free buffers;
    the others live as long as their arrays."""

    MIN_BYTES = 1 << 20
    IDLE_TAKES = 12

    def __init__(self):
        self._held: list[list] = []  # [buffer, arrays made since it was last taken or in use]
        self._lock = threading.Lock()

    def _free(self, i: int) -> bool:
        return sys.getrefcount(self._held[i][0]) <= _HELD_ONLY  # no array made in it lives

    def empty(self, n: int, dtype) -> np.ndarray:
        """An uninitialized array of ``n`` ``dtype``, like ``np.empty``."""
        dtype = np.dtype(dtype)
        need = n * dtype.itemsize
        if need < self.MIN_BYTES:
            return np.empty(n, dtype)
        with self._lock:
            free = [i for i in range(len(self._held)) if self._free(i)]
            fits = [i for i in free if need <= self._held[i][0].nbytes <= need + need // 4]
            take = min(fits, key=lambda i: self._held[i][0].nbytes) if fits else None
            for i, entry in enumerate(self._held):
                entry[1] = entry[1] + 1 if i in free and i != take else 0
            if take is None:
                # the next block's arrays are a little larger or smaller (by 0.4% in the 8.2×
                # store); a margin of 2 MB or more would let the kernel back the array's end
                # with a 2 MB page
                self._held.append([_mapped(need + need // 64), 0])
                take = len(self._held) - 1
            base = self._held[take][0]
            self._held = [e for e in self._held if e[1] <= self.IDLE_TAKES]
            return base[:need].view(dtype)

    def disown(self, *arrays) -> None:
        """Stop holding the buffers of ``arrays`` (they stay alive as long as those do)."""
        mine = {id(a.base) for a in arrays if a is not None}
        with self._lock:
            self._held = [e for e in self._held if id(e[0]) not in mine]

    def held_bytes(self) -> int:
        """Bytes of the buffers held, in use or free (what the tests watch)."""
        with self._lock:
            return sum(e[0].nbytes for e in self._held)


def _mapped(n: int) -> np.ndarray:
    """``n`` bytes of memory of their own (an anonymous mapping, asked for huge pages as
    NumPy asks for its large arrays), whatever malloc's thresholds: a process that takes its
    vectors from the heap (``workers.blocks.vectors_from_heap``) still gives a block's
    memory back to the system when the block is let go, and its heap holds no block."""
    m = mmap.mmap(-1, n)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(m, np.uint8)


def _held_only() -> int:
    """``sys.getrefcount`` of a held buffer that nothing else refers to, as Buffers asks it."""
    held = [[np.empty(1, np.uint8), 0]]
    return sys.getrefcount(held[0][0])


_HELD_ONLY = _held_only()


def _local_chunk(url: str, path: str, dtype: str, n: int, files: list | None = None,
                 buffers: Buffers | None = None) -> np.ndarray | None:
    """The one-chunk array ``path`` of a local store read and decoded by hand into a new
    array of ``n`` ``dtype``, or None: not the plain case, for Zarr to read (and to refuse).
    ``files``: gets the identity (:func:`_identity`) of the array's metadata and chunk files
    as read, for :func:`read_row_block`'s record of verified blocks; ``buffers``: where the
    array and the compressed chunk are made (:class:`Buffers`), else new arrays.

    The plain case is what distsvm writes: a Zarr v3 array of ``n`` (> 0) ``dtype`` in one
    chunk, its codecs ``bytes`` (little-endian) and at most one of zstd and blosc, its chunk
    file present and decoding to exactly the array's bytes.  Zarr reads the same chunk with
    two hops between threads (its event loop, a codec thread) per array and a copy of the
    decoded chunk into the array it returns; here the codec writes into the array itself,
    the uncompressed chunk is read into it (issue 31, a block of 2 M non-zeros read, decoded
    and checked, median at load 4.6: zstd / blosc-lz4 / none 29.5 / 19.9 / 13.2 ms through
    Zarr, 22.5 / 13.1 / 6.5 ms this way; docs/benchmarks.md).  Anything else — another codec or
    layout, a missing or damaged chunk — is left to Zarr, whose checks (:func:`checked_array`)
    and errors are then those of every other store."""
    if not _is_local(url) or n <= 0 or sys.byteorder != "little":
        return None
    base = os.path.join(_local_path(url), *path.split("/"))
    try:
        with open(os.path.join(base, "zarr.json"), "rb") as f:
            md = json.loads(f.read())
            ids = [_identity(f)]
        codecs = md.get("codecs")
        if (any(md.get(k) != v for k, v in _ONE_CHUNK.items()) or md.get("shape") != [n]
                or md.get("data_type") != dtype
                or md.get("chunk_grid") != {"name": "regular",
                                            "configuration": {"chunk_shape": [n]}}
                or not isinstance(codecs, list) or not 1 <= len(codecs) <= 2
                or codecs[0] != _LITTLE
                or (len(codecs) == 2 and codecs[1].get("name") not in ("zstd", "blosc"))):
            return None
        empty = buffers.empty if buffers is not None else np.empty
        out = empty(n, dtype)
        with open(os.path.join(base, "c", "0"), "rb") as f:
            if len(codecs) == 1:  # uncompressed: the file is the array's bytes
                if os.fstat(f.fileno()).st_size != out.nbytes or \
                        f.readinto(memoryview(out).cast("B")) != out.nbytes:
                    return None
            else:  # into a NumPy array, which asks the kernel for huge pages (madvise): in a
                # Dask worker (MALLOC_TRIM_THRESHOLD_: each large buffer is fresh pages) a
                # pypi-summaries block read in 29 ms so against 39 ms into bytes
                raw = empty(os.fstat(f.fileno()).st_size, np.uint8)
                if f.readinto(raw) != raw.nbytes:
                    return None
            ids.append(_identity(f))  # after the read: a write during it shows
        if len(codecs) == 2:
            if _decoded_size(codecs[1]["name"], memoryview(raw)) != out.nbytes:
                return None
            _DECODERS[codecs[1]["name"]].decode(raw, out=out)
        if files is not None:
            files.append(tuple(ids))
        return out
    except Exception:  # noqa: BLE001 - Zarr reads it again and says what is wrong
        return None


_DECODERS = {"zstd": numcodecs.Zstd(), "blosc": numcodecs.Blosc()}

# Row and column blocks this process has verified, by the identity of their files then:
# read_row_block's and read_column_block's recheck=False skips the CRC-32s and content checks
# of a block whose files are the same.
_VERIFIED: collections.OrderedDict = collections.OrderedDict()  # (url, name) -> _digest(seen)
_verified_lock = threading.Lock()
VERIFIED_MAX = 65536  # blocks remembered (least recently read forgotten first): ~16 MB at most
SETTLED_NS = 2_000_000_000  # a file changed less than 2 s before its verification is
# verified again at its next read: a change within the clock tick of its ctime would not show


def _identity(f) -> tuple:
    """An open file's identity: any write to it, or a new file at its path, changes it
    (its change time, ctime, cannot be set back by a writer)."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _digest(seen: tuple) -> bytes:
    """16 bytes for what a block was read as (its entry, limits and files' identities): an
    entry of ``_VERIFIED`` holds this, not the tuple (~2.5 kB of Python objects)."""
    return hashlib.blake2b(repr(seen).encode(), digest_size=16).digest()


def _unchanged(seen: tuple) -> bool:
    """Whether a block read as ``seen`` (its entry, limits and files) was verified so."""
    with _verified_lock:
        if _VERIFIED.get(seen[:2]) != _digest(seen):
            return False
        _VERIFIED.move_to_end(seen[:2])
        return True


def _verified(seen: tuple) -> None:
    """Remember a block verified as ``seen``, if its files had settled (``SETTLED_NS``)."""
    now = time.time_ns()
    if any(now - ident[-1] < SETTLED_NS for ids in seen[-1] for ident in ids):
        return
    with _verified_lock:
        _VERIFIED[seen[:2]] = _digest(seen)
        _VERIFIED.move_to_end(seen[:2])
        while len(_VERIFIED) > VERIFIED_MAX:
            _VERIFIED.popitem(last=False)


def _decoded_size(codec: str, raw) -> int | None:
    """The size a zstd frame or a blosc buffer says it decodes to (None: not stated)."""
    if codec == "blosc":  # header: version, versionlz, flags, typesize, nbytes (uint32 LE), …
        return int.from_bytes(raw[4:8], "little") if len(raw) >= 16 else None
    # zstd (RFC 8878 3.1.1): magic, frame header descriptor, [window], [dictionary id], size
    if len(raw) < 6 or raw[:4] != b"\x28\xb5\x2f\xfd":
        return None
    d = raw[4]
    fcs, single, did = d >> 6, (d >> 5) & 1, d & 3
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[did]
    width = (1 if single else 0, 2, 4, 8)[fcs]
    if width == 0 or len(raw) < at + width:
        return None
    size = int.from_bytes(raw[at:at + width], "little")
    return size + 256 if width == 2 else size


def read_block_labels(url: str, info: BlockInfo, storage_options: dict | None = None,
                      verify: bool = True) -> np.ndarray:
    """The class indices of one row block: its ``y`` chunk only, checked like a block."""
    if info.parts:
        return np.concatenate([read_block_labels(url, part, storage_options, verify)[
            slice(None) if rows is None else rows] for part, rows in info.parts])
    where = f"rows/{info.name}/y"
    try:
        root = open_group(url, mode="r", storage_options=storage_options)
        y = checked_array(url, where, root[where], "int32", (info.n_rows,))[...]
        limits = info.limits if info.limits is not None else _limits(root.attrs["distsvm"])
    except CorruptStoreError:
        raise
    except Exception as exc:
        raise CorruptStoreError(f"{url}: cannot read array {where}: {exc!r}") from exc
    if y.shape != (info.n_rows,) or (verify and _crc(y) != info.crc32["y"]):
        raise CorruptStoreError(f"{url}: array {where} has the wrong shape or fails its "
                                "CRC-32 check: the chunk is missing or damaged")
    _, n_classes, regression, _ = limits
    check_range(url, where, y, 1 if regression else n_classes, "class index")
    return np.zeros_like(y) if info.labels is not None else y  # as_regression: y is 0


def read_block_positions(url: str, info: BlockInfo, storage_options: dict | None = None,
                         verify: bool = True) -> np.ndarray:
    """Every row's position in its source (int64) of one row block: its ``position`` chunk
    only, checked against its CRC-32 (non-negative; that the store's positions are a
    permutation of its rows is the caller's to check: :func:`source_order`)."""
    if info.parts:
        return np.concatenate([read_block_positions(url, part, storage_options, verify)[
            slice(None) if rows is None else rows] for part, rows in info.parts])
    where = f"rows/{info.name}/{POSITION}"
    if POSITION not in info.crc32:
        raise StorageError(f"{url}: block {info.name} has no source positions (a store "
                           "ingested before they were kept)")
    try:
        root = open_group(url, mode="r", storage_options=storage_options)
        pos = checked_array(url, where, root[where], "int64", (info.n_rows,))[...]
    except CorruptStoreError:
        raise
    except Exception as exc:
        raise CorruptStoreError(f"{url}: cannot read array {where}: {exc!r}") from exc
    if verify and _crc(pos) != info.crc32[POSITION]:
        raise checksum_error(url, where, root[where])
    if len(pos) and pos.min() < 0:
        raise _bad(url, where, f"holds position {int(pos.min())}, below 0")
    return pos


def source_order(url: str, positions: list[np.ndarray], n_rows: int) -> np.ndarray:
    """The store's row positions (blocks' :func:`read_block_positions`, in block order) as
    one array, checked to be a permutation of ``range(n_rows)``: a CorruptStoreError
    otherwise, so that no output is written out of line."""
    pos = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    if len(pos) != n_rows or (n_rows and (pos.max() >= n_rows or
                                          np.bincount(pos, minlength=n_rows).max() != 1)):
        raise CorruptStoreError(f"{url}: the blocks' source positions are not each row once "
                                f"(0 to {n_rows - 1}): the store was damaged")
    return pos


def open_dataset(url: str, storage_options: dict | None = None) -> Dataset:
    """Open a committed dataset; raise a typed error if it is absent, partial or foreign."""
    url = resolve(url)  # the workers read it: absolute, ~ expanded
    _check_header(url, storage_options)
    try:
        g = open_group(url, mode="r", storage_options=storage_options)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError) as exc:
        raise StoreNotFoundError(f"{url}: no distsvm dataset here ({exc})") from exc
    attrs = g.attrs.asdict()
    if "distsvm" not in attrs:
        raise IncompleteStoreError(
            f"{url}: this group has no committed distsvm metadata "
            "(an interrupted ingest or not a distsvm dataset); ingest it again")
    return Dataset(url, DatasetMeta.from_json(url, attrs["distsvm"]), storage_options)


def _check_header(url: str, storage_options: dict | None) -> None:
    """Refuse the store's ``zarr.json`` before Zarr parses it if it is larger or nested
    deeper than any header (:func:`distsvm.storage.bounded.check`); an absent one is Zarr's to
    report."""
    where = f"{url}/zarr.json"
    limit = bounded.MAX_HEADER_BYTES
    try:
        if _is_local(url):
            with open(os.path.join(_local_path(url), "zarr.json"), "rb") as f:
                raw = f.read(limit + 1)
        else:
            import fsspec

            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
            raw = fs.cat_file(f"{path.rstrip('/')}/zarr.json", end=limit + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return
    except OSError as exc:  # an object store's error after its retries: say which, and why
        cause = exc.__cause__ or exc.__context__
        raise StorageError(f"{where}: cannot read the store's header: {exc}"
                           + (f" ({' '.join(str(cause).split())})" if cause else "")) from exc
    bounded.check(raw, where, limit)


# ---------------------------------------------------------------- writing


def staging_url(url: str) -> str:
    """Where an ingest into ``url`` writes before it commits."""
    url = resolve(url)
    if _is_local(url):
        path = os.path.abspath(_local_path(url))
        parent, base = os.path.split(path.rstrip(os.sep))
        return os.path.join(parent, f".{base}.staging-{uuid.uuid4().hex[:12]}")
    return url  # remote stores: written in place, made whole by the metadata written last


def prepare(url: str, overwrite: bool, storage_options: dict | None = None) -> str:
    """Check that ``url`` may be written and create its staging group; return the staging URL."""
    url = resolve(url)
    if not overwrite and _exists(url, storage_options):
        raise StoreExistsError(f"{url}: already exists (pass overwrite / --overwrite to "
                               "replace it)")
    stage = staging_url(url)
    g = open_group(stage, mode="w", storage_options=storage_options)
    g.create_group("rows")
    return stage


def _exists(url: str, storage_options: dict | None) -> bool:
    if _is_local(url):
        return os.path.exists(_local_path(url))
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs.exists(path)


def write_row_block(stage: str, name: str, block: RowBlock,
                    storage_options: dict | None = None,
                    position: np.ndarray | None = None, compression: str = "lz4") -> BlockInfo:
    """Write one row block (one chunk per array, ``weight`` and ``target`` if it has them)
    into a staging group, compressed as ``compression`` says (:data:`COMPRESSIONS`);
    ``position``: its rows' positions in their source (int64)."""
    g = open_group(stage, mode="r+", storage_options=storage_options)
    bg = g["rows"].create_group(name, overwrite=True)
    crcs = {}
    arrays = {k: getattr(block, k) for k in ROW_ARRAYS + (WEIGHT, TARGET)}
    if position is not None:
        if len(position) != block.n_rows:
            raise ValueError(f"block {name}: {len(position)} positions for {block.n_rows} rows")
        arrays[POSITION] = np.asarray(position, dtype=np.int64)
    for k in (k for k, a in arrays.items() if a is not None):
        a = np.ascontiguousarray(arrays[k])
        arr = bg.create_array(k, shape=a.shape, chunks=(max(1, a.shape[0]),), dtype=a.dtype,
                              compressors=COMPRESSIONS[compression], fill_value=0)
        if a.size:
            arr[...] = a
        crcs[k] = _crc(a)
    return BlockInfo(name, block.n_rows, block.nnz, crcs)


def commit(stage: str, url: str, meta: DatasetMeta, overwrite: bool,
           storage_options: dict | None = None) -> Dataset:
    """Write the metadata last, then move the staging group into place."""
    url = resolve(url)
    meta.check(url)
    g = open_group(stage, mode="r+", storage_options=storage_options)
    g.attrs["distsvm"] = meta.to_json()
    if stage != url:
        final = os.path.abspath(_local_path(url))
        trash = None
        if os.path.exists(final):
            if not overwrite:
                raise StoreExistsError(f"{url}: appeared while ingesting; not replaced")
            trash = stage + ".old"
            os.rename(final, trash)
        os.rename(stage, final)
        if trash:
            shutil.rmtree(trash, ignore_errors=True)
    return open_dataset(url, storage_options)


def abort(stage: str, url: str, storage_options: dict | None = None) -> None:
    """Remove a staging group after a failed ingest (best effort)."""
    if stage != str(url):
        shutil.rmtree(stage, ignore_errors=True)
        return
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(stage, **(storage_options or {}))
        fs.rm(path, recursive=True)
    except (OSError, StorageError):  # pragma: no cover - best effort on remote stores
        pass


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def compression_of(dataset: Dataset) -> str:
    """The :data:`COMPRESSIONS` entry ``dataset``'s row blocks are written with, as its first
    block's ``indices`` array says: "none" if uncompressed, else "lz4" (also for a store
    written with zstd before Blosc-LZ4 was the default)."""
    if not dataset.meta.blocks:
        return "lz4"
    array = open_group(dataset.url, mode="r", storage_options=dataset.storage_options)[
        f"rows/{dataset.meta.blocks[0].name}/indices"]
    return "none" if len(array.metadata.codecs) == 1 else "lz4"


def append(url: str, part: Dataset, record: dict, storage_options: dict | None = None,
           lock_timeout: float | None = None) -> Dataset:
    """Append the row blocks of dataset ``part`` to the committed dataset at ``url``; return
    it reopened.  ``record`` (JSON, e.g. the partition file's name and checksum) is added to
    the store's ledger ``source["appended"]``.

    The blocks are read from ``part`` (checked), their labels mapped to the store's class
    indices (``part``'s classes must be among the store's), and written under new block
    names; the metadata, written last in one write (atomic on local disks and object
    stores), commits them.  Until then the new blocks are not in the block table, so an
    interrupted append leaves the store as it was (the next append overwrites the
    orphans).  A column view (``distsvm columnize``) no longer covers every row and is
    dropped; build it again.

    One writer at a time: the append holds the store's lock (:mod:`distsvm.storage.lock`, waiting
    up to ``lock_timeout`` seconds, default 60; re-entrant for a caller holding it), and a
    ``record`` already in the ledger (same ``path`` — or, for records without one, same
    ``partition`` name — and same ``sha256``) is not appended again: the store is returned
    as it is.
    """
    from .lock import DEFAULT_TIMEOUT, Lock

    url = resolve(url)
    with Lock(url, storage_options, what=url,
              timeout=DEFAULT_TIMEOUT if lock_timeout is None else lock_timeout):
        target = open_dataset(url, storage_options)
        if "partition" in record and any(
                r.get("sha256") == record.get("sha256")
                and (r["path"] == record["path"] if "path" in r and "path" in record
                     else r.get("partition") == record["partition"])
                for r in target.meta.source.get("appended", [])):
            return target
        return _append(url, target, part, record, storage_options)


def _append(url: str, target: Dataset, part: Dataset, record: dict,
            storage_options: dict | None) -> Dataset:
    m = target.meta
    from .errors import InputDataError

    if part.meta.task != m.task:
        raise InputDataError(f"{part.url}: a {part.meta.task} part cannot be appended to the "
                             f"{m.task} store {url} (ingest it with"
                             f"{'' if m.regression else 'out'} --regression)")
    unknown = sorted(set(part.meta.classes) - set(m.classes))
    if unknown:
        raise InputDataError(f"{part.url}: labels {listed(unknown)} are not classes of {url} "
                             f"{listed(m.classes)}; an append cannot add classes")
    if part.meta.weighted != m.weighted:
        has = "has" if part.meta.weighted else "has no"
        raise InputDataError(f"{part.url}: {has} instance weights and {url} "
                             f"{'has them' if m.weighted else 'has none'}; a store's blocks all "
                             "carry them or none does")
    if part.meta.dtype != m.dtype:
        raise InputDataError(f"{part.url}: dtype {part.meta.dtype} differs from {url}'s "
                             f"{m.dtype}")
    remap = np.searchsorted(np.asarray(m.classes), np.asarray(part.meta.classes)).astype(np.int32)
    # source positions: the part's rows follow the store's (its positions shifted by the
    # store's rows); if either has none, the store keeps none (its old blocks' are dropped
    # from the block table, so that a predict --output never writes out of line)
    positioned = m.positioned and part.meta.positioned
    old = m.blocks if positioned else tuple(dataclasses.replace(
        b, crc32={k: v for k, v in b.crc32.items() if k != POSITION}) for b in m.blocks)
    infos, compression = [], compression_of(target)  # the store's, whatever the part's
    for i in range(part.n_blocks):
        b = part.read_block(i)
        block = RowBlock(b.indptr, b.indices, b.data,
                         b.y if m.regression else remap[b.y], weight=b.weight, target=b.target)
        position = (read_block_positions(part.url, part.meta.blocks[i], part.storage_options)
                    + m.n_rows if positioned else None)
        infos.append(write_row_block(url, block_name(len(m.blocks) + i), block, storage_options,
                                     position, compression))
    counts = list(m.class_counts)
    for k, c in zip(remap, part.meta.class_counts, strict=True):
        counts[k] += c
    source = {**m.source, "appended": [*m.source.get("appended", []), record]}
    targets = m.targets
    if m.regression:
        t, u, n = m.targets, part.meta.targets, m.n_rows + part.meta.n_rows
        targets = {"min": min(t["min"], u["min"]), "max": max(t["max"], u["max"]),
                   "mean": (t["mean"] * m.n_rows + u["mean"] * part.meta.n_rows) / n}
    meta = dataclasses.replace(m, n_rows=m.n_rows + part.meta.n_rows, targets=targets,
                               n_features=max(m.n_features, part.meta.n_features),
                               nnz=m.nnz + part.meta.nnz, class_counts=tuple(counts),
                               blocks=old + tuple(infos), source=source)
    meta.check(url)
    g = open_group(url, mode="r+", storage_options=storage_options)
    g.attrs.put({"distsvm": meta.to_json()})  # replaces every attribute: drops the column view
    return open_dataset(url, storage_options)
