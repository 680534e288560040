"""The column view: an exact external transpose within its memory bound, and one reader
conformance suite that row blocks and column blocks both pass."""

from __future__ import annotations

import pathlib
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distsvm.cli import main
from distsvm.columns import columnize
from distsvm.ingest import ingest
from distsvm.storage import IncompleteStoreError, open_dataset, read_row_block
from distsvm.storage import columns as cols
from distsvm.testing import ReaderTests

from .test_store import problems


def row_matrix(d):
    """The store's rows as one CSR matrix, in global row order (row blocks in block order)."""
    blocks = [d.read_block(i) for i in range(d.n_blocks)]
    return sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr),
                                    shape=(b.n_rows, d.meta.n_features)) for b in blocks]).tocsr()


def column_matrix(d, cmeta):
    blocks = [cols.read_column_block(d.url, info) for info in cmeta.blocks]
    return sp.hstack([sp.csc_matrix((b.data, b.indices, b.indptr),
                                    shape=(d.meta.n_rows, b.n_cols)) for b in blocks],
                     format="csc")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problems(), st.integers(6, 25), st.floats(0.001, 0.01), st.floats(0.03, 0.2))
def test_transpose_equals_scipy_tocsc(tmp_path, problem, block_rows, block_mb, memory_mb):
    X, y = problem
    d = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=block_rows, overwrite=True)
    cm = columnize(d, memory_mb=memory_mb, block_mb=block_mb)
    expected = row_matrix(d).tocsc()
    got = column_matrix(d, cm)
    # tocsc sorts row indices within a column, as the transpose must
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data)
    assert got.data.dtype == np.float32
    labels = cols.read_labels(d.url, cm)
    np.testing.assert_array_equal(labels, np.concatenate([d.read_block(i).y
                                                          for i in range(d.n_blocks)]))
    assert [b.col_start for b in cm.blocks] == [0] + [b.col_stop for b in cm.blocks[:-1]]


def test_joined_view_is_the_matrix_in_one_block(a9a_rows):
    """A run's joined view (distsvm.workers.pcd.held: one block made in memory from the stored
    ones) holds the same CSC matrix and column norms; a small cache, or too little memory
    beside it to make the joined block, keeps the blocks."""
    from distsvm.workers import blocks
    from distsvm.workers.pcd import held, load_columns

    cm = columnize(a9a_rows, block_mb=0.3)
    assert len(cm.blocks) > 2
    one = held(cm, 1 << 30)
    assert len(one.blocks) == 1 and one.blocks[0].parts == cm.blocks
    # the joined block and its parts, cached side by side: float32 values, int32 indices,
    # int64 indptr and float64 column norms
    both = 2 * (cm.nnz * 8 + cm.n_features * 16 + 8)
    assert held(cm, both) == one and held(cm, both - 1) == cm
    # with the plan's memory for blocks (cache and reads in flight): the joined block in the
    # cache, it and its parts side by side within that memory
    assert held(cm, both // 2, both) == one and held(cm, both - 1, both - 1) == cm
    assert held(cm, both // 2 - 1, 1 << 30) == cm and held(cm, both // 2, both - 1) == cm
    blocks.clear_cache()
    block, colsq = load_columns(a9a_rows.url, one.blocks[0], 1 << 30)
    assert block.nbytes + colsq.nbytes == both // 2  # what the cache counts for it
    got = sp.csc_matrix((block.data, block.indices, block.indptr),
                        shape=(cm.n_rows, cm.n_features))
    expected = column_matrix(a9a_rows, cm)
    for a in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, a), getattr(expected, a))
    np.testing.assert_allclose(colsq, np.asarray(expected.multiply(expected).sum(axis=0)).ravel(),
                               rtol=1e-6)
    assert load_columns(a9a_rows.url, one.blocks[0], 1 << 30)[0] is block  # cached


@pytest.fixture(scope="module")
def a9a_rows(tmp_path_factory, a9a):
    return ingest(a9a, str(tmp_path_factory.mktemp("cols") / "a9a.zarr"), block_rows=2000)


def test_peak_memory_within_bound_on_a_larger_store(a9a_rows):
    d = a9a_rows
    store_bytes = d.meta.nnz * 8 + d.meta.n_rows * 12
    bound_mb = 1.5
    assert store_bytes > 2.4 * bound_mb * 2**20  # the store is larger than the bound
    columnize(d, memory_mb=bound_mb, block_mb=0.25)  # compile the kernels outside the trace
    tracemalloc.start()
    try:
        cm = columnize(d, memory_mb=bound_mb, block_mb=0.25)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= bound_mb * 2**20, peak / 2**20
    assert cm.passes > 2  # it had to take several passes to stay within the bound
    assert (column_matrix(d, cm) != row_matrix(d).tocsc()).nnz == 0


def test_two_passes_when_the_view_fits(a9a_rows):
    cm = columnize(a9a_rows, memory_mb=64, block_mb=8)
    assert cm.passes == 2 and len(cm.blocks) == 1


def test_missing_interrupted_and_rebuilt_views(tmp_path, a9a):
    d = ingest(a9a, str(tmp_path / "a.zarr"), block_rows=20000)
    with pytest.raises(IncompleteStoreError, match="distsvm columnize"):
        cols.read_columns_meta(d)
    columnize(d, memory_mb=64, block_mb=0.5)
    assert len(cols.read_columns_meta(d).blocks) > 1
    cols.begin(d)  # what a columnize interrupted after its first step leaves
    with pytest.raises(IncompleteStoreError):
        cols.read_columns_meta(d)
    columnize(d, memory_mb=64, block_mb=64)
    assert len(cols.read_columns_meta(d).blocks) == 1


def test_cli_ingest_columns_and_columnize(tmp_path, capsys):
    store = str(tmp_path / "a.zarr")
    src = str(pathlib.Path(__file__).resolve().parents[1] / "data" / "a9a.xz")
    assert main(["ingest", src, store, "--serial", "--columns", "--block-rows", "10000",
                 "--memory-mb", "16", "-q"]) == 0
    d = open_dataset(store)
    assert cols.read_columns_meta(d).passes == 2
    assert main(["columnize", store, "--serial", "--memory-mb", "4", "--block-mb", "0.5",
                 "--json", "-q"]) == 0
    out = capsys.readouterr().out
    assert '"n_column_blocks": ' in out and cols.read_columns_meta(d).passes > 2
    assert main(["columnize", store, "--serial", "--memory-mb", "0.1", "-q"]) == 1
    assert "does not hold one row block" in capsys.readouterr().err


# ---------------------------------------------------------------- reader conformance
# The suite is distsvm.testing.ReaderTests; these are the store's two readers.


@pytest.fixture()
def rows(a9a):
    """The rows the reader suite stores: a9a's."""
    return a9a


class TestRowReader(ReaderTests):
    def blocks(self, d):
        X = row_matrix(d)
        out, start = [], 0
        for info in d.meta.blocks:
            out.append((info, f"rows/{info.name}", X[start:start + info.n_rows]))
            start += info.n_rows
        return out

    def read(self, d, info, verify=True):
        return read_row_block(d.url, info, verify=verify)

    def as_matrix(self, b, d):
        return sp.csr_matrix((b.data, b.indices, b.indptr), shape=(b.n_rows, d.meta.n_features))


class TestColumnReader(ReaderTests):
    def blocks(self, d):
        X = row_matrix(d).tocsc()
        return [(info, f"cols/{info.name}", X[:, info.col_start:info.col_stop])
                for info in cols.read_columns_meta(d).blocks]

    def read(self, d, info, verify=True):
        return cols.read_column_block(d.url, info, verify=verify)

    def as_matrix(self, b, d):
        return sp.csc_matrix((b.data, b.indices, b.indptr), shape=(d.meta.n_rows, b.n_cols))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=40), st.integers(60, 3000))
def test_column_blocks_are_as_few_as_the_bound_allows_and_even(counts, block_bytes):
    """``plan_blocks``: consecutive ranges covering every column, each within ``block_bytes``
    (or a single column), as few as filling each block in turn makes, and the largest of
    them as small as any split into that many ranges allows (a brute-force search)."""
    counts = np.array(counts)
    n = len(counts)

    def size(s, e):
        return cols.column_bytes(e - s, int(counts[s:e].sum()), 4)

    bounds = cols.plan_blocks(counts, 4, block_bytes)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:])) and all(s < e for s, e in bounds)
    assert all(size(s, e) <= block_bytes or e - s == 1 for s, e in bounds)
    filled, start = 0, 0  # filling each block in turn
    while start < n:
        stop = start + 1
        while stop < n and size(start, stop + 1) <= block_bytes:
            stop += 1
        filled, start = filled + 1, stop
    assert len(bounds) == filled
    best = {(0, 0): 0}  # the smallest largest range of a split of columns [0, e) into k
    for k in range(1, filled + 1):
        for e in range(1, n + 1):
            options = [max(best[k - 1, s], size(s, e)) for s in range(e) if (k - 1, s) in best]
            if options:
                best[k, e] = min(options)
    assert max(size(s, e) for s, e in bounds) == best[filled, n]
