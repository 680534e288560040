"""Dual CD's SGD start (issue 31): one AdaGrad pass a block beside the dual passes while a
validation set watches, whose model the driver keeps where it scores better than the dual
iterate's (distsvm.workers.kernels.adaptive, distsvm.solvers.driver)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm import jobs, prediction
from distsvm.cluster import embedded_client
from distsvm.ingest import ingest
from distsvm.workers import losses
from distsvm.workers.kernels.adaptive import adaptive_pass

from .conftest import DATA, load_xy
from .test_anytime import _streamed


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "logistic"])
@pytest.mark.parametrize("bias", [-1.0, 1.0])
def test_the_pass_is_adagrad(loss, bias):
    """The pass's w and squared-gradient sums equal a NumPy loop of the update of Duchi et
    al. (2011) in the kernel's row order, with ξ′ written out for each loss, a per-row cost
    (a class weight) and λw on the row's features (the bias's too)."""
    x = np.array([0.5, 0.0, -1.0, 2.0], dtype=np.float32)
    n, d, C, eta = 7, 4, 2.0, 0.5
    X = sp.csr_matrix(np.tile(x, (n, 1)))
    y = np.array([1, 0, 1, 1, 0, 1, 0], dtype=np.int32)  # class index; positive = 1
    cost = np.where(y == 1, C, 3.0 * C)  # a class weight of 3 on the negatives
    dim = d + (bias >= 0)
    w, G = np.zeros(dim), np.zeros(dim)
    code = losses.code(loss)
    lam = 1.0 / (C * n)
    adaptive_pass(X.indptr, X.indices, X.data, y, 1, cost, 1.0 / C, lam, bias, d, code, w, G,
                  eta, 3)
    # the kernel's order: Numba's np.random.permutation after np.random.seed(3) is NumPy's
    np.random.seed(3)
    ref_order = np.random.permutation(n)
    rw, rG = np.zeros(dim), np.zeros(dim)
    xb = np.append(x.astype(np.float64), bias) if bias >= 0 else x.astype(np.float64)
    for i in ref_order:
        yi = 1.0 if y[i] == 1 else -1.0
        m = yi * float(rw @ xb)
        if loss == "hinge":
            dxi = -1.0 if m < 1 else 0.0
        elif loss == "squared_hinge":
            dxi = -2.0 * (1.0 - m) if m < 1 else 0.0
        else:
            dxi = -1.0 / (1.0 + math.exp(m))
        for j in np.flatnonzero(xb):
            g = lam * rw[j] + cost[i] / C * dxi * yi * xb[j]
            if g != 0.0:
                rG[j] += g * g
                rw[j] -= eta * g / math.sqrt(rG[j])
    np.testing.assert_allclose(w, rw, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(G, rG, rtol=1e-12, atol=1e-15)
    assert np.any(w != 0)


@pytest.fixture(scope="module")
def a9a_split(tmp_path_factory):
    """8,000 rows of a9a in 4 blocks, and 4,000 rows of a9a.t to validate on."""
    root = tmp_path_factory.mktemp("sgd_start")
    X, y = load_xy(DATA / "a9a.xz", 123)
    Xt, yt = load_xy(DATA / "a9a.t.xz", 123)
    return (ingest((X[:8000], y[:8000]), str(root / "train.zarr"), block_rows=2000),
            ingest((Xt[:4000], yt[:4000]), str(root / "valid.zarr"), block_rows=2000))


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_early_stopping_keeps_the_sgd_start_where_it_scores_better(a9a_split, loss):
    """Streamed (a worker whose cache holds two blocks of four): on a9a the dual iterate's
    validation accuracy after rounds 1 and 2 (measured: 0.821 and 0.643 with the hinge loss)
    is below the SGD start's (0.834, 0.840): early stopping keeps the start's model, whose
    score in the result is ``predict``'s on the validation store and the best of every score
    in the log; it reports no objective (they are the iterate's); the start stops once it
    no longer improves."""
    train, valid = a9a_split
    c = embedded_client()
    m = jobs.train(train, loss=loss, C=1.0, validation=valid.url, n_iter_no_change=2,
                   client=c, plan=_streamed(c, train), join_blocks=False)
    s, h = m.summary, m.summary["history"]
    assert s["stopped_by"] == "no improvement" and s["kept_model"] == "sgd start"
    assert "sgd_validation_accuracy" in h[0] and "sgd_validation_accuracy" not in h[-1]
    seen = [row[k] for row in h for k in ("validation_accuracy", "sgd_validation_accuracy")
            if k in row]
    assert s["validation_accuracy"] == max(seen) > max(row["validation_accuracy"] for row in h)
    assert prediction.predict(valid, m, client=c)["accuracy"] == s["validation_accuracy"]
    assert math.isnan(s["primal_objective"])


def test_no_sgd_start_where_the_store_stays_in_memory(a9a_split):
    """In one process, whose cache holds the store: no SGD start (its pass would cost more
    than another dual round, :func:`distsvm.solvers.dcd.streamed`), the model is the dual
    iterate, the same w as without a validation set."""
    train, valid = a9a_split
    c = embedded_client()
    m = jobs.train(train, loss="hinge", C=1.0, validation=valid.url, n_iter_no_change=2,
                   client=c)
    assert all(not any(k.startswith("sgd_") for k in row) for row in m.summary["history"])
    assert "kept_model" not in m.summary and m.summary["stopped_by"] == "no improvement"


def test_a_watching_validation_set_leaves_the_solver_alone(a9a_split):
    """Without early stopping or a budget the validation set only watches: the SGD start
    runs beside the dual passes (streamed), and the model is the dual iterate, the same w as
    without a validation set (same seed, same path)."""
    train, valid = a9a_split
    c = embedded_client()
    where = dict(client=c, plan=_streamed(c, train), join_blocks=False)
    watched = jobs.train(train, loss="hinge", C=1.0, validation=valid.url, **where)
    alone = jobs.train(train, loss="hinge", C=1.0, **where)
    assert "sgd_validation_accuracy" in watched.summary["history"][0]
    assert "kept_model" not in watched.summary
    np.testing.assert_array_equal(watched.w, alone.w)


@pytest.mark.parametrize("what", ["chained", "regression"])
def test_no_sgd_start_off_the_batched_classifier_path(a9a_split, client, tmp_path, what):
    """Chained rounds over several owners and SVR have no SGD start: the log has no score
    of one."""
    train, valid = a9a_split
    kw = {"client": client, "join_blocks": False}
    if what == "regression":  # abalone's ages as targets, 3,000 rows to train, 1,000 to score
        X, y = load_xy(DATA / "abalone_scale.xz", 8)
        train, valid = (ingest((X[a:b], y[a:b]), str(tmp_path / f"{a}.zarr"), block_rows=500,
                               regression=True) for a, b in ((0, 3000), (3000, 4000)))
        kw = {"client": embedded_client(), "loss": "squared_epsilon_insensitive"}
    m = jobs.train(train, validation=valid.url, max_rounds=3, **kw)
    assert len(m.summary["history"]) == 3
    assert all(not any(k.startswith("sgd_") for k in row) for row in m.summary["history"])


@pytest.mark.slow
def test_the_command_line_says_which_model_it_kept(tmp_path):
    """``train --scheduler --json`` on a generated store that one 512 MB worker streams
    reports ``kept_model``; the text line names it beside the round."""
    import json
    import subprocess
    import sys

    from distsvm import cluster
    from distsvm.generate import generate
    from distsvm.solvers.dcd import streamed
    from distsvm.storage.generate import block_seed, generate_rows
    from distsvm.testing import local_client

    features, nnz = 50_000, 40
    train = generate(str(tmp_path / "train.zarr"), rows=1_000_000, features=features,
                     nnz_per_row=nnz, block_rows=100_000, seed=1)
    indptr, indices, data, labels = generate_rows(20_000, features, nnz, 1.0, 0.1, 0.05,
                                                  np.uint64(1), block_seed(1, 10**6))
    valid = ingest((sp.csr_matrix((data, indices, indptr), shape=(20_000, features)), labels),
                   str(tmp_path / "valid.zarr"))
    with local_client(1, memory_limit="512MB") as c:
        assert streamed(train.meta, cluster.plan(c, len(train.meta.blocks), None, train).budget())
        args = [sys.executable, "-m", "distsvm", "train", train.url, str(tmp_path / "m"), "-s",
                "3", "--validation", valid.url, "--n-iter-no-change", "2", "--scheduler",
                c.scheduler.address]
        out = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        j = json.loads(out.stdout.strip().splitlines()[-1])
        assert j["kept_model"] == "sgd start" and j["stopped_by"] == "no improvement"
        text = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert f"best round {j['best_round']} (its sgd start)" in text.stderr + text.stdout
