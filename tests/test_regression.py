"""Regression: stores of real-valued targets, their refusals, and L2-loss SVR (-s 11).

The shipped data is abalone_scale (data/abalone_scale.xz: 4,177 rows x 8 features, integer
ring counts as targets); cpusmall_scale from ../shared is a slow test, skipped when absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from distsvm import params
from distsvm.ingest import ingest
from storage import open_dataset
from storage.dataset import FORMAT_VERSION, append
from storage.errors import InputDataError

from .conftest import DATA, load_xy

ABALONE = DATA / "abalone_scale.xz"
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def cli(*args, ok=True):
    p = subprocess.run([sys.executable, "-m", "distsvm.cli", *map(str, args)],
                       capture_output=True, text=True, env=ENV, timeout=600)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def abalone():
    return load_xy(ABALONE, 8)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """abalone as a regression store of 5 blocks and of 1 block, and dna (classes)."""
    tmp = tmp_path_factory.mktemp("regression")
    many = ingest(str(ABALONE), str(tmp / "ab.zarr"), block_rows=1000, regression=True)
    one = ingest(str(ABALONE), str(tmp / "ab1.zarr"), regression=True)
    dna = ingest(str(DATA / "dna.scale.t.xz"), str(tmp / "dna.zarr"))
    return tmp, many, one, dna


# ---------------------------------------------------------------- stores


def test_a_regression_store_keeps_the_targets(stores, abalone):
    _, many, one, _ = stores
    X, y = abalone
    m = many.meta
    assert m.task == "regression" and m.regression
    assert (m.n_rows, m.n_features, m.nnz, len(m.blocks)) == (4177, 8, 32080, 5)
    assert m.classes == () and m.class_counts == ()
    assert m.targets == pytest.approx({"min": 1.0, "max": 29.0, "mean": y.mean()}, rel=1e-12)
    many.verify()
    blocks = [many.read_block(b) for b in range(many.n_blocks)]
    for b in blocks:
        assert b.target.dtype == np.float64 and not np.any(b.y)  # y: zeros (class index 0)
    # the same multiset of (row, target) pairs as the file: the shuffle moves rows whole
    rows = sorted((tuple(np.round(b.data[b.indptr[i]:b.indptr[i + 1]], 6)), b.target[i])
                  for b in blocks for i in range(b.n_rows))
    ref = sorted((tuple(np.round(X[i].data, 6)), y[i]) for i in range(X.shape[0]))
    assert rows == ref
    assert len(one.meta.blocks) == 1


def test_stores_keep_their_format_versions(stores):
    """Classification stores are still written as version 1 (older readers open them);
    a regression store is version 2, which older readers refuse by its version."""
    tmp, many, _, dna = stores
    assert FORMAT_VERSION == 2
    raw = json.loads((tmp / "dna.zarr" / "zarr.json").read_text())["attributes"]["distsvm"]
    assert raw["format_version"] == 1 and "task" not in raw
    assert dna.meta.task == "classification" and not dna.meta.regression
    raw = json.loads((tmp / "ab.zarr" / "zarr.json").read_text())["attributes"]["distsvm"]
    assert raw["format_version"] == 2 and raw["task"] == "regression"


def test_in_memory_ingest_and_append_keep_the_task(tmp_path, abalone):
    X, y = abalone
    base = ingest((X[:3000], y[:3000]), str(tmp_path / "base.zarr"), block_rows=1000,
                  regression=True)
    part = ingest((X[3000:], y[3000:]), str(tmp_path / "part.zarr"), regression=True)
    d = append(base.url, part, {"partition": "p", "sha256": "x"})
    assert d.meta.task == "regression" and d.meta.n_rows == 4177 and len(d.meta.blocks) == 4
    assert d.meta.targets == pytest.approx({"min": 1.0, "max": 29.0, "mean": y.mean()})
    d.verify()
    assert np.sort(np.concatenate([d.read_block(b).target for b in range(4)])) == \
        pytest.approx(np.sort(y))
    labels = ingest((X[:50], (y[:50] > 9).astype(float)), str(tmp_path / "c.zarr"))
    with pytest.raises(InputDataError, match="a classification part cannot be appended to the "
                                             "regression store .* \\(ingest it with --regression"):
        append(base.url, labels, {})
    with pytest.raises(InputDataError, match="a regression part cannot be appended to the "
                                             "classification store .* \\(ingest it without --regression"):
        append(labels.url, part, {})
    assert open_dataset(base.url).meta == d.meta


def test_cli_ingest_and_info(tmp_path):
    store = tmp_path / "ab.zarr"
    out = json.loads(cli("ingest", ABALONE, store, "--regression", "--serial", "-q",
                         "--json").stdout)
    assert out["task"] == "regression" and out["classes"] == []
    text = cli("info", store).stdout
    assert "labels           targets (regression): 4177, min 1, max 29, mean 9.93368" in text
    assert json.loads(cli("info", store, "--json").stdout)["task"] == "regression"


def test_the_task_of_the_store_and_of_the_loss_must_agree(stores):
    """A classifier on real targets, or SVR on class labels: one clear line, no training."""
    _, many, _, dna = stores
    from distsvm.jobs import train

    with pytest.raises(ValueError, match=r"-s 2 needs a store of class labels; .*ab.zarr is a "
                                         r"regression store \(real-valued targets\)"):
        train(many, solver="newton", loss="squared_hinge")
    with pytest.raises(ValueError, match="solver 'pcd' with loss 'logistic' needs a store of "
                                         "class labels"):
        params.check_task(params.Params(solver="pcd", loss="logistic"), many)
    with pytest.raises(ValueError, match=r"needs a regression store \(ingest --regression\); "
                                         r".*dna.zarr has class labels \[1.0, 2.0, 3.0\]"):
        params.check_task(params.Params(solver="newton", loss="squared_epsilon_insensitive"),
                          dna)
    with pytest.raises(ValueError, match="'class_weight' parameter of train needs classes"):
        params.check_data("train", params.Params(solver="newton",
                                                 loss="squared_epsilon_insensitive",
                                                 class_weight="balanced"), many)
    with pytest.raises(ValueError, match=r"'epsilon' parameter of train must be a float in "
                                         r"the range \[0, inf\)"):
        params.check_params("train", params.Params(epsilon=-1.0))
