"""Cutting-plane solver (Joachims 2006): kernels against NumPy, optima against LIBLINEAR and DCD,
ordinal regression / ROC area against a brute-force O(n²)-pair problem, ranking models
(thresholds, metrics, CLI) on an ordinal problem made from a9a: the age quintile."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm import cluster
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.model import ModelFormatError, export_liblinear, load_model, save_model
from distsvm.params import Params
from distsvm.prediction import predict
from distsvm.solvers import cutting_plane
from distsvm.workers.kernels import cutting_plane as kernel

from .conftest import liblinear_optimum, load_xy, primal_objective, shared_dataset
from .test_cli import run

C = 0.01  # C_OP = 0.01·n; iterations grow as √C_OP (the paper's §4.1 used 0.05·n on Adult)
EPS = 1e-3  # the paper's ε


@pytest.fixture(scope="module")
def a9a_store(tmp_path_factory, a9a):
    """a9a in 5 blocks, so that both workers of the session cluster hold some."""
    return ingest(a9a, str(tmp_path_factory.mktemp("cp") / "a9a.zarr"), block_rows=7000)


def test_hinge_cut_kernel_equals_numpy(a9a):
    X, y = a9a
    X, y = X[:3000], y[:3000]
    s = np.where(y > 0, 1.0, -1.0)
    rng = np.random.default_rng(0)
    w = rng.normal(size=124) * 0.3
    out = np.zeros(124)
    count, loss = kernel.hinge_cut(X.indptr.astype(np.int64), X.indices, X.data,
                                   (y > 0).astype(np.int32), 1, w, 1.0, 123, out)
    Xb = sp.hstack([X.astype(np.float64), np.ones((X.shape[0], 1))]).tocsr()
    margin = s * (Xb @ w)
    c = margin < 1
    assert count == c.sum() and 0 < count < len(y)
    np.testing.assert_allclose(loss, np.sum(1 - margin[c]), rtol=1e-12)
    np.testing.assert_allclose(out, Xb.T @ (c * s), rtol=1e-12, atol=1e-9)


def _brute_counts(scores, ranks):
    """c⁺ᵢ = |{j: rᵢ > rⱼ, sᵢ − sⱼ < 1}|, c⁻ᵢ = |{j: rⱼ > rᵢ, sⱼ − sᵢ < 1}| by enumerating pairs."""
    violated = (ranks[:, None] > ranks[None, :]) & (scores[:, None] - scores[None, :] < 1)
    return violated.sum(axis=1), violated.sum(axis=0)


@pytest.mark.parametrize("n_ranks,n", [(2, 500), (3, 400), (5, 300)])
def test_pair_counts_equal_brute_force(n_ranks, n):
    rng = np.random.default_rng(n_ranks)
    scores = np.round(rng.normal(size=n) * 2, 1)  # many ties, and gaps of exactly 1
    ranks = rng.integers(0, n_ranks, n).astype(np.int32)
    if n_ranks == 5:
        ranks[ranks == 2] = 3  # an empty rank in the middle
    order = np.argsort(-scores, kind="stable")
    cplus, cminus = np.zeros(n, np.int64), np.zeros(n, np.int64)
    total = kernel.pair_counts(scores, ranks, order, n_ranks, cplus, cminus)
    ref_plus, ref_minus = _brute_counts(scores, ranks)
    np.testing.assert_array_equal(cplus, ref_plus)
    np.testing.assert_array_equal(cminus, ref_minus)
    assert total == ref_plus.sum() == ref_minus.sum() > 0


def test_classification_matches_liblinear_and_dcd(client, a9a, a9a_store, tmp_path):
    """Theorem 3: P(w) ≤ P* + C_OP·ε with C_OP = C·n, and the QP's dual value bounds P* below."""
    X, y = a9a
    _, p_ref = liblinear_optimum(X, y, "hinge", C=C)
    model = train(a9a_store, solver="cutting_plane", loss="hinge", C=C, eps=EPS, client=client)
    s = model.summary
    p = primal_objective(model.w, X, y, "hinge", C=C)
    assert abs(p - s["primal_objective"]) <= 1e-9 * p  # the reported objective is the true one
    bound = C * len(y) * EPS
    assert s["converged"] and p_ref * (1 - 1e-9) <= p <= p_ref + 1.01 * bound, (p, p_ref, bound)
    assert s["dual_objective"] <= p_ref * (1 + 1e-9) and s["duality_gap"] >= p - p_ref - 1e-6
    last = s["history"][-1]
    assert last["violation"] <= EPS and last["working_set"] == s["rounds"] - 1
    assert model.solver == "cutting_plane" and model.params["objective"] == "classification"
    # the same problem by DCD (its own duality gap certifies it), on one block: it needs
    # many more rounds on several (docs/solvers/dcd.md)
    one_block = ingest(a9a, str(tmp_path / "a9a1.zarr"))
    dcd = train(one_block, solver="dcd", loss="hinge", C=C, eps=1e-3, client=client)
    assert dcd.summary["converged"] and dcd.summary["duality_gap"] <= bound
    p_dcd = primal_objective(dcd.w, X, y, "hinge", C=C)
    assert abs(p - p_dcd) <= 1.01 * bound + dcd.summary["duality_gap"], (p, p_dcd)


@pytest.mark.parametrize("name", ["w8a", "phishing"])
def test_shared_datasets_match_liblinear(client, tmp_path, name):
    X, y = load_xy(shared_dataset(name))
    store = ingest((X, y), str(tmp_path / f"{name}.zarr"), block_rows=len(y) // 3 + 1)
    _, p_ref = liblinear_optimum(X, y, "hinge", C=C)
    model = train(store, solver="cutting_plane", loss="hinge", C=C, eps=EPS, client=client)
    p = primal_objective(model.w, X, y, "hinge", C=C)
    assert p_ref * (1 - 1e-9) <= p <= p_ref + 1.01 * C * len(y) * EPS, (name, p, p_ref)


def test_c_perf_is_svmperf_scaling_and_round_limit_warns(client, a9a, a9a_store):
    """--c-perf C_perf means C = 100·C_perf/n: the same run as -c C, iterate for iterate."""
    n = a9a[0].shape[0]
    kw = dict(solver="cutting_plane", loss="hinge", max_rounds=4, client=client)
    with pytest.warns(ConvergenceWarning, match="round limit"):
        m1 = train(a9a_store, C=C, **kw)
    with pytest.warns(ConvergenceWarning, match="round limit"):
        m2 = train(a9a_store, c_perf=0.01 * C * n, **kw)
    assert m2.params["C"] == pytest.approx(C, rel=1e-12)
    assert m1.params["c_perf"] == pytest.approx(0.01 * C * n, rel=1e-12)
    np.testing.assert_allclose(m1.w, m2.w, rtol=1e-9, atol=1e-12)
    assert m1.summary["rounds"] == 4 and not m1.summary["converged"]
    for bad, match in [(dict(loss="squared_hinge"), r"one of \['hinge'\] with solver='cutting_plane'"),
                       (dict(c_perf=-1.0), "'c_perf' parameter"),
                       (dict(objective="rank"), "'objective' parameter")]:
        with pytest.raises(ValueError, match=match):
            train(a9a_store, **{**kw, "loss": "hinge", **bad})
    with pytest.raises(ValueError, match="cutting_plane solver only"):
        train(a9a_store, solver="dcd", loss="hinge", c_perf=1.0, client=client)


def _pairs_problem(X, ranks):
    """OP4 as a LIBLINEAR problem: one row xᵢ − xⱼ per pair with rᵢ > rⱼ; every other row is
    negated with label −1 (same hinge loss) so that LIBLINEAR sees two classes."""
    hi, lo = np.nonzero(ranks[:, None] > ranks[None, :])
    D = (X[hi] - X[lo]).astype(np.float64).tocsr()
    sign = np.where(np.arange(len(hi)) % 2 == 0, 1.0, -1.0)
    return sp.diags(sign) @ D, sign


@pytest.mark.parametrize("n_ranks", [2, 3])
def test_ordinal_objective_matches_brute_force_pairs(client, a9a, tmp_path, n_ranks):
    """Algorithm 2 on a small subsample against LIBLINEAR -s 3 on all O(n²) pair differences."""
    X, y = a9a
    X, y = X[:240], y[:240]
    if n_ranks == 3:  # ranks from a noisy linear score, so the order is learnable
        rng = np.random.default_rng(3)
        z = X @ rng.normal(size=123) + rng.normal(size=240)
        y = np.digitize(z, np.quantile(z, [0.3, 0.7])).astype(np.float64)
    store = ingest((X, y), str(tmp_path / "small.zarr"), block_rows=100)
    ranks = np.searchsorted(np.unique(y), y)
    D, sign = _pairs_problem(X, ranks)
    m = D.shape[0]
    c_pair = 20.0 / m  # C_OP = 20
    _, p_ref = liblinear_optimum(D, sign, "hinge", C=c_pair, eps=1e-6)
    ds = store
    p = Params(solver="cutting_plane", loss="hinge", C=c_pair, eps=1e-4, bias=-1.0,
               max_rounds=1000, objective="ordinal")
    result = cutting_plane.solve(client, ds, cluster.plan(client, len(ds.meta.blocks)), p)
    assert result.converged
    w = result.w
    p = 0.5 * w @ w + c_pair * np.sum(np.maximum(0, 1 - sign * (D @ w)))
    assert abs(p - result.primal_objective) <= 1e-9 * p
    assert p_ref * (1 - 1e-6) <= p <= p_ref + 1.01 * 20.0 * 1e-4, (p, p_ref)


def test_roc_area_at_least_the_classifiers(client, a9a, tmp_path):
    """With two labels, OP5 optimizes the ROC area: on the training data it does at least as
    well as the error-rate SVM with the same C_OP."""
    from sklearn.metrics import roc_auc_score

    X, y = a9a
    X, y = X[:6000], y[:6000]
    store = ingest((X, y), str(tmp_path / "a9a6k.zarr"), block_rows=2500)
    c_perf = 3.0  # C_OP = 300 for both
    cls = train(store, solver="cutting_plane", loss="hinge", c_perf=c_perf, client=client)
    roc = train(store, solver="cutting_plane", loss="hinge", c_perf=c_perf, objective="ordinal",
                client=client)
    assert roc.summary["converged"] and roc.params["objective"] == "ordinal"
    auc_cls, auc_roc = roc_auc_score(y, X @ cls.w), roc_auc_score(y, X @ roc.w)
    assert auc_roc >= auc_cls, (auc_roc, auc_cls)


def test_cli_trains_and_reports_iterations(tmp_path, a9a):
    store = tmp_path / "a.zarr"
    ingest((a9a[0][:5000], a9a[1][:5000]), str(store), block_rows=2000)
    p = run("train", store, tmp_path / "m", "--solver", "cutting-plane", "--c-perf", 2.5,
            "--json", "--workers", 1)
    out = json.loads(p.stdout)
    assert out["solver"] == "cutting_plane" and out["loss"] == "hinge" and out["converged"]
    assert out["C"] == pytest.approx(0.05) and out["eps"] == 1e-3
    assert "|W|" in p.stderr and "xi'" in p.stderr  # per-iteration progress
    bad = run("train", store, tmp_path / "m2", "--solver", "cutting-plane", "--loss",
              "squared-hinge", ok=False)
    assert bad.returncode == 2 and "ERROR" in bad.stderr and "hinge" in bad.stderr


# --- ranking models: R ordered ranks through jobs.train / predict and the CLI ------------------

def age_ranks(X):
    """A real ordinal problem from a9a: UCI Adult's age, which a9a's binarization stores as its
    quintile in features 1-5 (exactly one set per row).  Ranks 1-5 = the quintile; X keeps
    the other 118 features (marital status, relationship, education, income, …)."""
    ranks = X[:, :5].toarray().argmax(axis=1) + 1.0
    assert np.all(X[:, :5].sum(axis=1) == 1)
    return X[:, 5:].tocsr(), ranks


def _rank_error_brute(scores, ranks, n_ranks):
    """min over sorted thresholds at all candidate cuts of Σ |#{k: s > θ_k} − r|."""
    import itertools

    u = np.unique(scores)
    cuts = np.concatenate([[u[0] - 1], (u[1:] + u[:-1]) / 2, [u[-1] + 1]])
    return min(np.sum(np.abs(np.searchsorted(np.array(t), scores) - ranks))
               for t in itertools.combinations_with_replacement(cuts, n_ranks - 1))


@pytest.mark.parametrize("n_ranks,n", [(2, 60), (3, 50), (4, 30)])
def test_rank_thresholds_minimize_absolute_rank_error(n_ranks, n):
    rng = np.random.default_rng(n)
    ranks = rng.integers(0, n_ranks, n).astype(np.int32)
    scores = np.round(ranks + rng.normal(size=n) * 1.5, 1)  # overlapping, with ties
    out = np.empty(n_ranks - 1)
    total = kernel.rank_thresholds(scores, ranks, np.argsort(scores, kind="stable"), n_ranks, out)
    assert np.all(np.diff(out) >= 0)
    assert total == np.sum(np.abs(np.searchsorted(out, scores) - ranks))  # what it claims
    assert total == _rank_error_brute(scores, ranks, n_ranks) > 0  # and the minimum


@pytest.mark.parametrize("n_ranks", [2, 3, 5])
def test_concordant_pairs_equal_brute_force(n_ranks):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(n_ranks)
    ranks = rng.integers(0, n_ranks, 300).astype(np.int32)
    scores = np.round(ranks * 0.3 + rng.normal(size=300), 1)  # many ties
    got = kernel.concordant_pairs(scores, ranks, np.argsort(scores, kind="stable"), n_ranks)
    higher = ranks[:, None] > ranks[None, :]
    diff = scores[:, None] - scores[None, :]
    assert got == np.sum(higher & (diff > 0)) + 0.5 * np.sum(higher & (diff == 0))
    m = cutting_plane.ranking_metrics(scores, ranks, np.array([0.0] * (n_ranks - 1)), n_ranks)
    assert m["n_pairs"] == higher.sum() and m["pairwise_accuracy"] == got / higher.sum()
    if n_ranks == 2:  # Harrell's C for two ranks is the ROC area
        assert m["pairwise_accuracy"] == pytest.approx(roc_auc_score(ranks, scores), rel=1e-12)


def _numpy_metrics(scores, ranks, thresholds):
    pred = np.searchsorted(thresholds, scores)
    higher = ranks[:, None] > ranks[None, :]
    diff = scores[:, None] - scores[None, :]
    return {"rank_accuracy": np.mean(pred == ranks),
            "mean_abs_rank_error": np.mean(np.abs(pred - ranks)),
            "pairwise_accuracy": (np.sum(higher & (diff > 0)) + 0.5 * np.sum(higher & (diff == 0)))
            / higher.sum()}


def test_ranking_model_age_quintiles_matches_brute_force(client, a9a, tmp_path):
    """R = 5 ranks through jobs.train: OP4's optimum against LIBLINEAR -s 3 on all O(n²) pair
    differences; thresholds that minimize the training absolute rank error; predict's
    metrics against NumPy; the model file keeps the ranks and thresholds."""
    X, r = age_ranks(a9a[0][:240])
    store = ingest((X, r), str(tmp_path / "age.zarr"), block_rows=100)
    ranks = (r - 1).astype(np.int32)
    D, sign = _pairs_problem(X, ranks)
    c_pair = 20.0 / D.shape[0]  # C_OP = 20
    _, p_ref = liblinear_optimum(D, sign, "hinge", C=c_pair, eps=1e-6)
    model = train(store, solver="cutting_plane", loss="hinge", objective="ordinal", C=c_pair,
                  eps=1e-4, client=client)
    w = model.w
    p = 0.5 * w @ w + c_pair * np.sum(np.maximum(0, 1 - sign * (D @ w)))
    assert model.summary["converged"] and abs(p - model.summary["primal_objective"]) <= 1e-9 * p
    assert p_ref * (1 - 1e-6) <= p <= p_ref + 1.01 * 20.0 * 1e-4, (p, p_ref)

    assert model.is_ranking and model.classes == (1.0, 2.0, 3.0, 4.0, 5.0)
    scores = X @ w
    t = np.asarray(model.thresholds)
    assert len(t) == 4 and np.all(np.diff(t) >= 0)
    err = np.sum(np.abs(np.searchsorted(t, scores) - ranks))
    for k in range(4):  # no single threshold can move to lower the training rank error
        for cand in np.concatenate([scores - 1e-9, scores + 1e-9]):
            moved = np.sort(np.concatenate([np.delete(t, k), [cand]]))
            assert np.sum(np.abs(np.searchsorted(moved, scores) - ranks)) >= err
    ref = _numpy_metrics(scores, ranks, t)
    assert model.summary["train_mean_abs_rank_error"] == pytest.approx(err / 240, rel=1e-12)
    out = predict(store, model, client=client, output=tmp_path / "ranks.txt")
    for k, v in ref.items():
        assert out[k] == pytest.approx(v, rel=1e-12) and model.summary[f"train_{k}"] == \
            pytest.approx(v, rel=1e-12)
    assert out["accuracy"] == out["rank_accuracy"] and out["ranks"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert 0.6 < out["pairwise_accuracy"] < 1  # age is learnable from the other features
    assert sorted(set(np.loadtxt(tmp_path / "ranks.txt"))) <= [1.0, 2.0, 3.0, 4.0, 5.0]

    save_model(model, tmp_path / "m")
    back = load_model(tmp_path / "m")
    assert back.thresholds == model.thresholds and back.classes == model.classes
    np.testing.assert_array_equal(back.predict(X), np.asarray(model.classes)[
        np.searchsorted(t, scores)])
    with pytest.raises(ModelFormatError, match="ranking"):
        export_liblinear(back, tmp_path / "m.liblinear")
    other = ingest((X[:20], np.where(r[:20] > 3, 6.0, 1.0)), str(tmp_path / "six.zarr"))
    with pytest.raises(ValueError, match=r"labels \[6.0\] are not ranks of the model"):
        predict(other, model, client=client)


def test_cli_ranking_round_trip(client, tmp_path, a9a):
    """train --objective ordinal on 4,000 rows of age quintiles, predict 2,000 held-out rows
    (on the session cluster, --scheduler): the printed metrics, --output's ranks equal the
    saved model's, export refuses."""
    X, r = age_ranks(a9a[0][:6000])
    ingest((X[:4000], r[:4000]), str(tmp_path / "age.zarr"), block_rows=1500)
    ingest((X[4000:], r[4000:]), str(tmp_path / "age.t.zarr"), shuffle=False)
    model, cluster_ = tmp_path / "age.model", ("--scheduler", client.scheduler.address)
    p = run("train", tmp_path / "age.zarr", model, "--solver", "cutting-plane", "--objective",
            "ordinal", "--c-perf", 0.1, "--json", *cluster_)
    out = json.loads(p.stdout)
    assert out["ranks"] == [1.0, 2.0, 3.0, 4.0, 5.0] and len(out["thresholds"]) == 4
    assert out["converged"] and "thresholds" in p.stderr and "|W|" in p.stderr
    p = run("predict", tmp_path / "age.t.zarr", model, "--json", "--output",
            tmp_path / "pred.txt", *cluster_)
    assert "Rank accuracy" in p.stderr and "Mean absolute rank error" in p.stderr
    assert "Pairwise ordering accuracy" in p.stderr and "1599009 pairs" in p.stderr
    pred = json.loads(p.stdout)
    labels = np.loadtxt(tmp_path / "pred.txt")
    np.testing.assert_array_equal(labels, load_model(model).predict(X[4000:]))
    assert pred["rank_accuracy"] == pytest.approx(np.mean(labels == r[4000:]))
    assert pred["mean_abs_rank_error"] == pytest.approx(np.mean(np.abs(labels - r[4000:])))
    # held out: better than always predicting the middle rank (1.2 on uniform quintiles)
    assert pred["pairwise_accuracy"] > 0.7 and pred["mean_abs_rank_error"] < 1.0
    bad = run("export", model, tmp_path / "x.liblinear", ok=False)
    assert bad.returncode == 1 and "ranking" in bad.stderr and bad.stderr.startswith("ERROR:")
