"""The synthetic text-like generator: determinism across worker counts, its statistics,
a store that verifies, and a dataset DCD solves to a certified small gap."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm.cli import main
from distsvm.generate import generate
from distsvm.jobs import train
from distsvm.storage import open_dataset

from .conftest import liblinear_optimum, primal_objective

ROWS, FEATURES, K = 6000, 3000, 25
ARGS = ["--rows", str(ROWS), "--features", str(FEATURES), "--nnz-per-row", str(K),
        "--seed", "7", "--block-rows", "1500"]


def _matrix(d):
    blocks = [d.read_block(i) for i in range(d.n_blocks)]
    X = sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr),
                                 shape=(b.n_rows, d.meta.n_features)) for b in blocks]).tocsr()
    y = np.concatenate([np.asarray(d.meta.classes)[b.y] for b in blocks])
    return X, y


@pytest.fixture(scope="module")
def stores(client, tmp_path_factory):
    """The same dataset made in this process (`distsvm generate --serial`) and on 2 workers."""
    root = tmp_path_factory.mktemp("generate")
    assert main(["generate", str(root / "serial.zarr"), *ARGS, "--serial", "-q"]) == 0
    par = generate(str(root / "par.zarr"), rows=ROWS, features=FEATURES, nnz_per_row=K, seed=7,
                   block_rows=1500, client=client)
    return open_dataset(str(root / "serial.zarr")), par


def test_same_seed_same_data_whatever_the_workers(stores):
    serial, par = stores
    assert serial.meta.blocks == par.meta.blocks  # names, sizes and CRC-32 of every array
    for i in range(serial.n_blocks):
        a, b = serial.read_block(i), par.read_block(i)
        for k in ("indptr", "indices", "data", "y"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k))


def test_other_seed_other_data(client, tmp_path, stores):
    other = generate(str(tmp_path / "o.zarr"), rows=ROWS, features=FEATURES, nnz_per_row=K,
                     seed=8, block_rows=1500)
    assert other.meta.blocks[0].crc32 != stores[0].meta.blocks[0].crc32


def test_text_like_statistics(stores):
    d = stores[0]
    X, y = _matrix(d)
    assert X.shape == (ROWS, FEATURES)
    assert d.n_blocks == 4 and X.nnz == d.meta.nnz
    lengths = np.diff(X.indptr)
    assert abs(lengths.mean() - K) < 0.05 * K  # log-normal lengths with mean K
    assert lengths.std() > 0.3 * K and lengths.min() >= 1  # ... and variable
    np.testing.assert_allclose(sp.linalg.norm(X, axis=1), 1.0, rtol=1e-5)  # unit-norm rows
    assert np.all(X.data > 0)
    for i in range(0, ROWS, 997):  # sorted, distinct columns within each row
        assert np.all(np.diff(X.indices[X.indptr[i]:X.indptr[i + 1]]) > 0)
    # Zipf popularity: document frequency falls with rank roughly as 1/rank (s = 1);
    # the head is flattened by counting each feature once per row, so compare the tail
    df = np.bincount(X.indices, minlength=FEATURES).astype(float)
    ratio = df[100:200].mean() / df[1000:2000].mean()
    assert 5 < ratio < 20, ratio  # 1/rank predicts ~ 10
    assert df[:10].sum() > 0.05 * X.nnz and np.count_nonzero(df) > 0.9 * FEATURES
    assert set(np.unique(y)) == {-1.0, 1.0} and min(d.meta.class_counts) > 0.2 * ROWS


def test_store_verifies_with_info(stores, capsys):
    serial, _ = stores
    assert main(["info", serial.url, "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["verified"] and meta["n_rows"] == ROWS and meta["source"]["seed"] == 7
    assert meta["source"]["input"].startswith("synthetic")


def test_bad_parameters_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="'nnz_per_row' parameter of generate"):
        generate(str(tmp_path / "x.zarr"), rows=10, features=10, nnz_per_row=6)
    assert main(["generate", str(tmp_path / "x.zarr"), "--rows", "10", "--features", "10",
                 "--nnz-per-row", "2", "--noise", "0.7", "--serial"]) == 2  # usage (29.9)
    assert "'noise' parameter" in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_dcd_solves_it_to_a_small_gap(client, stores, loss):
    d = stores[1]
    X, y = _matrix(d)
    model = train(d, loss=loss, C=0.1, eps=1e-9, gap_tol=5e-4, max_rounds=300, client=client)
    s = model.summary
    assert s["converged"] and 0 <= s["duality_gap"] <= 5e-4 * s["primal_objective"]
    assert primal_objective(model.w, X, y, loss, C=0.1) == pytest.approx(s["primal_objective"], rel=1e-9)
    _, p_ref = liblinear_optimum(X, y, loss, C=0.1)
    assert s["dual_objective"] <= p_ref * (1 + 1e-9) <= s["primal_objective"] * (1 + 1e-6)
