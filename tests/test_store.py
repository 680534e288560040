"""The dataset format: round trips, the commit protocol, checksums, typed errors."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distsvm.ingest import ingest
from distsvm.storage import (
    CorruptStoreError,
    FormatVersionError,
    IncompleteStoreError,
    InputDataError,
    StoreExistsError,
    StoreNotFoundError,
    open_dataset,
)


def to_csr(dataset):
    """All blocks of a dataset as one CSR matrix and label vector (block order)."""
    blocks = [dataset.read_block(i) for i in range(dataset.n_blocks)]
    X = sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr),
                                 shape=(b.n_rows, dataset.meta.n_features)) for b in blocks])
    y = np.asarray(dataset.meta.classes)[np.concatenate([b.y for b in blocks])]
    return X.tocsr(), y


def rows_multiset(X, y):
    return sorted((float(y[i]), tuple(X.indices[X.indptr[i]:X.indptr[i + 1]]),
                   tuple(X.data[X.indptr[i]:X.indptr[i + 1]])) for i in range(X.shape[0]))


@st.composite
def problems(draw):
    n = draw(st.integers(2, 60))
    d = draw(st.integers(1, 40))
    density = draw(st.floats(0.0, 1.0))
    seed = draw(st.integers(0, 2**31 - 1))
    X = sp.random(n, d, density=density, format="csr", dtype=np.float32,
                  random_state=seed)
    rng = np.random.default_rng(seed)
    y = rng.choice([-1.0, 1.0, 3.0], size=n)
    y[:2] = [-1.0, 1.0]
    return X, y


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problems(), st.integers(1, 25), st.booleans())
def test_matrix_round_trip(tmp_path, problem, block_rows, shuffle):
    X, y = problem
    d = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=block_rows, shuffle=shuffle,
               overwrite=True)
    m = d.meta
    assert (m.n_rows, m.n_features, m.nnz) == (X.shape[0], X.shape[1], X.nnz)
    assert m.classes == tuple(sorted(set(y)))
    assert sum(m.class_counts) == X.shape[0]
    X2, y2 = to_csr(d)
    if shuffle:
        assert rows_multiset(X2, y2) == rows_multiset(X, y)
    else:
        assert (X2 != X).nnz == 0 and np.array_equal(y2, y)
    d.verify()


def test_blocks_bounded_and_balanced(tmp_path, a9a):
    d = ingest(a9a, str(tmp_path / "a.zarr"), block_rows=5000)
    sizes = [b.n_rows for b in d.meta.blocks]
    assert len(sizes) == 7 and sum(sizes) == 32561
    assert max(sizes) - min(sizes) < 0.2 * 5000  # shuffled keys split rows evenly
    y = np.concatenate([d.read_block(i).y for i in range(d.n_blocks)])
    # a9a is 24% positive; shuffling spreads labels over every block
    for i in range(d.n_blocks):
        assert 0.15 < d.read_block(i).y.mean() < 0.33
    assert y.sum() == 7841


def test_block_mb_sizes_blocks(tmp_path, a9a):
    d = ingest(a9a, str(tmp_path / "a.zarr"), block_mb=1.0)
    # 451,592 nnz * 8 B + 32,561 rows * 12 B = 3.82 MiB of CSR
    assert len(d.meta.blocks) == 4
    for b in d.meta.blocks:
        assert b.nnz * 8 + b.n_rows * 12 <= 1.05 * 2**20


def test_existing_store_is_not_overwritten(tmp_path, a9a):
    path = str(tmp_path / "a.zarr")
    ingest(a9a, path, block_rows=20000)
    with pytest.raises(StoreExistsError, match="already exists"):
        ingest(a9a, path)
    d = ingest(a9a, path, block_rows=10000, overwrite=True)
    assert len(d.meta.blocks) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["a.zarr"]  # no staging debris


def test_failed_ingest_leaves_nothing(tmp_path, a9a):
    X, y = a9a
    path = tmp_path / "narrow.zarr"
    with pytest.raises(InputDataError, match="exceeds n_features=100"):
        ingest((X, y), str(path), n_features=100)  # a9a has 123
    assert list(tmp_path.iterdir()) == []


def test_one_label_is_a_store_that_classifiers_refuse(tmp_path, client, a9a):
    """A file of one label (a one-class SVM's data) ingests; a classifier on it is one
    clear error, the one-class SVM trains."""
    from distsvm import jobs

    X = a9a[0][:500]
    d = ingest((X, np.ones(X.shape[0])), str(tmp_path / "one.zarr"))
    assert d.meta.classes == (1.0,) and d.meta.class_counts == (500,)
    with pytest.raises(ValueError, match=r"one class \(label 1\); a classifier needs"):
        jobs.train(d, client=client, solver="dcd", loss="squared_hinge")
    model = jobs.train(d, client=client, solver="oneclass", loss="oneclass", nu=0.5)
    assert model.rho is not None and model.summary["converged"]


def test_uncommitted_store_is_refused(tmp_path, a9a):
    d = ingest(a9a, str(tmp_path / "a.zarr"), block_rows=20000)
    meta_file = pathlib.Path(d.url) / "zarr.json"
    doc = json.loads(meta_file.read_text())
    doc["attributes"].pop("distsvm")  # what an ingest killed before its commit leaves
    meta_file.write_text(json.dumps(doc))
    with pytest.raises(IncompleteStoreError, match="interrupted ingest"):
        open_dataset(d.url)


def test_missing_and_foreign_stores(tmp_path, a9a):
    with pytest.raises(StoreNotFoundError):
        open_dataset(str(tmp_path / "nothing"))
    d = ingest(a9a, str(tmp_path / "a.zarr"), block_rows=20000)
    meta_file = pathlib.Path(d.url) / "zarr.json"
    doc = json.loads(meta_file.read_text())
    doc["attributes"]["distsvm"]["format_version"] = 99
    meta_file.write_text(json.dumps(doc))
    with pytest.raises(FormatVersionError, match="version 99"):
        open_dataset(d.url)


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_missing_or_damaged_chunk_is_an_error_naming_it(tmp_path, a9a, damage):
    d = ingest(a9a, str(tmp_path / "a.zarr"), block_rows=20000)
    name = d.meta.blocks[1].name
    chunk = pathlib.Path(d.url) / "rows" / name / "data" / "c" / "0"
    assert chunk.exists()
    if damage == "delete":
        os.remove(chunk)  # zarr would read fill values (zeros) here
    else:
        raw = bytearray(chunk.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        chunk.write_bytes(bytes(raw))
    d.read_block(0)  # other blocks are unaffected
    with pytest.raises(CorruptStoreError, match=f"rows/{name}/data"):
        d.read_block(1)
    with pytest.raises(CorruptStoreError):
        d.verify()


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_fsspec_urls(tmp_path, a9a, scheme):
    """Stores at fsspec URLs: written in place, committed by the metadata written last."""
    X, y = a9a
    X, y = X[:3000], y[:3000]
    url = f"memory://distsvm-{tmp_path.name}/a.zarr" if scheme == "memory" \
        else f"file://{tmp_path}/a.zarr"
    d = ingest((X, y), url, block_rows=1000, shuffle=False)
    back = open_dataset(url)
    assert back.meta == d.meta and back.n_blocks == 3
    Xb, yb = to_csr(back)
    assert (Xb != X).nnz == 0 and np.array_equal(yb, y)
    with pytest.raises(StoreExistsError):
        ingest((X, y), url)
