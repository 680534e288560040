"""Multi-class: one-vs-rest for every solver against LIBLINEAR's, model files, prediction on
the cluster, probabilities against LIBLINEAR's ``predict -b 1``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distsvm.columns import columnize
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.model import export_liblinear, import_liblinear, load_model, probabilities, save_model
from distsvm.params import Params
from distsvm.prediction import predict

from .conftest import DATA, load_xy, primal_objective, shared_dataset


def liblinear_model(X, y, options):
    """LIBLINEAR's model on (X, y) and its weights (see :func:`liblinear_weights`)."""
    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import train as ll_train

    m = ll_train(problem(y, X.astype(np.float64)), parameter(options + " -q"))
    return m, liblinear_weights(m)


def liblinear_weights(m):
    """A LIBLINEAR model's weights as W (K × n [+1]) in sorted class order (LIBLINEAR orders
    classes by first appearance; its w is feature-major, one weight per class, or one
    vector for label[0] when there are two classes and the solver is not Crammer–Singer)."""
    labels = m.get_labels()
    width = m.get_nr_feature() + (1 if m.bias >= 0 else 0)
    nr_w = 1 if len(labels) == 2 and m.param.solver_type != 4 else len(labels)
    w = np.ctypeslib.as_array(m.w, shape=(width * nr_w,)).reshape(width, nr_w).T.copy()
    if nr_w == 1:
        w = np.vstack([-w[0], w[0]])  # decision values of label[1], label[0]
        labels = [labels[1], labels[0]]
    return w[np.argsort(labels)]


def ovr_objectives(W, X, y, loss, C=1.0, bias=-1.0):
    """The K binary problems' primal objectives: class k (+1, the larger label) vs the rest."""
    classes = np.unique(y)
    return np.array([primal_objective(W[k], X, np.where(y == c, 1.0, 0.0), loss, C, bias)
                     for k, c in enumerate(classes)])


def accuracy(W, X, y, bias=-1.0):
    dv = X.astype(np.float64) @ W[:, : X.shape[1]].T
    if bias >= 0:
        dv += W[:, -1] * bias
    return float(np.mean(np.unique(y)[np.argmax(dv, axis=1)] == y))


@pytest.fixture(scope="module")
def dna():
    """Statlog DNA (LIBSVM's dna.scale, 3 classes, 2000 + 1186 rows × 180 binary features)."""
    return load_xy(DATA / "dna.scale.xz", 180), load_xy(DATA / "dna.scale.t.xz", 180)


@pytest.fixture(scope="module")
def dna_store(tmp_path_factory, dna):
    (X, y), _ = dna
    # one block: problem k's rotated plan puts it on worker k mod 2
    return ingest((X, y), str(tmp_path_factory.mktemp("mc") / "dna.zarr"))


def test_dcd_one_vs_rest_matches_liblinear(client, dna, dna_store, tmp_path):
    """C = 0.1: at C = 1 dual CD needs thousands of passes on dna (LIBLINEAR's -s 1 stops at
    its 300-iteration limit there and falls back to the primal solver)."""
    (X, y), (Xt, yt) = dna
    loss = "squared_hinge"
    _, W_ref = liblinear_model(X, y, "-s 1 -c 0.1 -e 1e-5")
    model = train(dna_store, loss=loss, C=0.1, eps=1e-9, gap_tol=5e-4, max_rounds=1000,
                  client=client)
    assert model.w.shape == (3, 180) and model.classes == (1.0, 2.0, 3.0)
    assert model.summary["converged"] and len(model.summary["per_class"]) == 3
    p = ovr_objectives(model.w, X, y, loss, C=0.1)
    p_ref = ovr_objectives(W_ref, X, y, loss, C=0.1)
    np.testing.assert_allclose(p, p_ref, rtol=1e-3)
    np.testing.assert_allclose([s["primal_objective"] for s in model.summary["per_class"]], p,
                               rtol=1e-9)  # each problem's reported objective is its own
    assert abs(accuracy(model.w, Xt, yt) - accuracy(W_ref, Xt, yt)) <= 0.003
    # prediction on the cluster agrees with the model's in-memory prediction
    test_store = ingest((Xt, yt), str(tmp_path / "dna.t.zarr"), shuffle=False)
    out = predict(test_store, model, client=client, output=tmp_path / "pred.txt")
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "pred.txt"), model.predict(Xt))
    assert out["accuracy"] == pytest.approx(accuracy(model.w, Xt, yt))


def test_ovr_problems_follow_their_binary_runs(client, dna, tmp_path):
    """dcd's one-vs-rest job (the problems dealt to the workers, each worker's problems
    sharing each block read, rounds batched on the worker) follows, problem by problem,
    exactly the path of K binary runs, over three blocks on two workers.  The binary runs
    take the batched path too: a plan whose blocks one worker owns (with blocks on several
    owners a binary run chains w from owner to owner, without the cache of informative
    rows that batched block-wise rounds keep)."""
    import dataclasses

    from distsvm import cluster
    from distsvm.solvers import dcd

    (X, y), _ = dna
    store = ingest((X, y), str(tmp_path / "dna3.zarr"), block_rows=700)
    plan = cluster.plan(client, len(store.meta.blocks), None, store)
    single = dataclasses.replace(plan, owners=(plan.workers[0],) * len(plan.owners))
    p = Params(loss="squared_hinge", C=0.1, eps=0.3, bias=1.0, max_rounds=40, seed=3)
    cost = np.full(3, 0.1)  # C = 0.1, no class weights
    with warnings.catch_warnings():  # both may stop at the round limit, identically
        warnings.simplefilter("ignore", ConvergenceWarning)
        shared = dcd.solve_ovr(client, store, plan, p, costs=[cost] * 3)
        for k in range(3):
            alone = dcd.solve(client, store, single, p, positive=k, cost=cost)
            np.testing.assert_array_equal(shared[k].w, alone.w)
            assert shared[k].rounds == alone.rounds
            assert shared[k].primal_objective == pytest.approx(alone.primal_objective, rel=1e-12)


def test_model_files_and_liblinear_round_trip(client, dna, dna_store, tmp_path):
    """K-class models survive save/load and LIBLINEAR's text format both ways: LIBLINEAR
    loads the exported model and predicts what distsvm predicts."""
    from liblinear.liblinearutil import load_model as ll_load
    from liblinear.liblinearutil import predict as ll_predict
    from liblinear.liblinearutil import save_model as ll_save

    (X, y), (Xt, yt) = dna
    model = train(dna_store, loss="squared_hinge", C=0.1, bias=1.0, eps=0.5, client=client)
    assert model.w.shape == (3, 181) and model.intercept_.shape == (3,)
    assert model.decision_function(Xt).shape == (len(yt), 3)
    save_model(model, tmp_path / "m")
    back = load_model(tmp_path / "m")
    np.testing.assert_array_equal(back.w, model.w)
    assert back.classes == model.classes
    export_liblinear(model, tmp_path / "m.txt")
    labels, _, _ = ll_predict(yt, Xt.astype(np.float64), ll_load(str(tmp_path / "m.txt")), "-q")
    np.testing.assert_array_equal(labels, model.predict(Xt))
    # LIBLINEAR's own multi-class model, in its label order, imports to the same predictions
    m, W_ref = liblinear_model(X, y, "-s 1 -c 1 -B 1")
    ll_save(str(tmp_path / "ref.txt"), m)
    imported = import_liblinear(tmp_path / "ref.txt")
    np.testing.assert_allclose(imported.w, W_ref, rtol=1e-12, atol=1e-15)
    labels, _, _ = ll_predict(yt, Xt.astype(np.float64), m, "-q")
    np.testing.assert_array_equal(imported.predict(Xt), labels)


def test_pcd_logistic_probabilities_match_liblinear(client, dna, tmp_path):
    """PCD (the -s 0 problem) one-vs-rest, and predict_proba against LIBLINEAR's -b 1."""
    from liblinear.liblinearutil import predict as ll_predict

    (X, y), (Xt, yt) = dna
    store = ingest((X, y), str(tmp_path / "dna.zarr"))
    columnize(store, memory_mb=64, block_mb=64)
    m, W_ref = liblinear_model(X, y, "-s 0 -c 1 -e 1e-4")
    model = train(store, solver="pcd", loss="logistic", eps=1e-4, client=client)
    np.testing.assert_allclose(ovr_objectives(model.w, X, y, "logistic"),
                               ovr_objectives(W_ref, X, y, "logistic"), rtol=1e-3)
    proba = model.predict_proba(Xt)
    _, _, ref = ll_predict(yt, Xt.astype(np.float64), m, "-b 1 -q")
    ref = np.asarray(ref)[:, np.argsort(m.get_labels())]
    assert proba.shape == (len(yt), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(proba, ref, atol=2e-3)
    np.testing.assert_array_equal(np.asarray(model.classes)[proba.argmax(axis=1)],
                                  model.predict(Xt))


def test_binary_probabilities_and_refusal(client, a9a, tmp_path):
    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import predict as ll_predict
    from liblinear.liblinearutil import train as ll_train

    X, y = a9a[0][:3000], a9a[1][:3000]
    m = ll_train(problem(y, X.astype(np.float64)), parameter("-s 0 -c 1 -e 1e-6 -q"))
    w = np.array([m.w[i] for i in range(X.shape[1])])
    dv = X.astype(np.float64) @ (w if m.get_labels()[0] == 1 else -w)  # for class +1
    _, _, ref = ll_predict(y, X.astype(np.float64), m, "-b 1 -q")
    ref = np.asarray(ref)[:, np.argsort(m.get_labels())]
    np.testing.assert_allclose(probabilities(dv), ref, rtol=1e-12)
    np.testing.assert_allclose(probabilities(np.array([-800.0, 800.0])),
                               [[1.0, 0.0], [0.0, 1.0]])  # no overflow
    store = ingest((X, y), str(tmp_path / "a.zarr"))
    svm = train(store, loss="hinge", eps=0.5, client=client)
    with pytest.raises(ValueError, match="only supported for logistic regression"):
        svm.predict_proba(X)


@pytest.mark.slow
@pytest.mark.parametrize("name,n_features,solver,loss,s", [
    ("pendigits", 16, "pcd", "squared_hinge", 2), ("letter.scale", 16, "pcd", "logistic", 0)])
def test_shared_datasets_one_vs_rest(client, tmp_path, name, n_features, solver, loss, s):
    X, y = load_xy(shared_dataset(name), n_features)
    _, W_ref = liblinear_model(X, y, f"-s {s} -c 1 -e 1e-4")
    store = ingest((X, y), str(tmp_path / f"{name}.zarr"))
    if solver == "pcd":
        columnize(store, memory_mb=64, block_mb=64)
    model = train(store, solver=solver, loss=loss, eps=1e-6, max_rounds=3000, client=client)
    np.testing.assert_allclose(ovr_objectives(model.w, X, y, loss),
                               ovr_objectives(W_ref, X, y, loss), rtol=1e-3)
    Xt, yt = load_xy(shared_dataset(f"{name}.t"), n_features)
    assert abs(accuracy(model.w, Xt, yt) - accuracy(W_ref, Xt, yt)) <= 0.003


def test_cli_s7_and_predict_b1_match_liblinear(client, dna, tmp_path):
    """``train -s 7`` and ``predict -b 1 --output``: LIBLINEAR's probability file format and
    values; ``-b 1`` refused for an SVM model, as LIBLINEAR does."""
    import subprocess
    import sys

    from liblinear.liblinearutil import predict as ll_predict

    def run(*args, ok=True):
        p = subprocess.run([sys.executable, "-m", "distsvm.cli", *map(str, args), "-q",
                            "--scheduler", client.scheduler.address],
                           capture_output=True, text=True, timeout=300)
        assert (p.returncode == 0) == ok, p.stderr
        return p

    (X, y), (Xt, yt) = dna
    ingest((X, y), str(tmp_path / "tr.zarr"))
    ingest((Xt, yt), str(tmp_path / "te.zarr"), shuffle=False)
    run("train", tmp_path / "tr.zarr", tmp_path / "lr.model", "-s", 7, "-c", 0.1, "-e", 1e-4)
    run("predict", tmp_path / "te.zarr", tmp_path / "lr.model", "-b", 1,
        "--output", tmp_path / "p.txt")
    lines = (tmp_path / "p.txt").read_text().splitlines()
    assert lines[0] == "labels 1 2 3" and len(lines) == 1 + len(yt)
    got = np.array([[float(v) for v in line.split()] for line in lines[1:]])
    m, _ = liblinear_model(X, y, "-s 7 -c 0.1 -e 1e-4")
    labels, _, ref = ll_predict(yt, Xt.astype(np.float64), m, "-b 1 -q")
    np.testing.assert_allclose(got[:, 1:], np.asarray(ref)[:, np.argsort(m.get_labels())],
                               atol=2e-3)
    assert np.mean(got[:, 0] == labels) > 0.99
    save_model(train(tmp_path / "tr.zarr", C=0.1, client=client), tmp_path / "svm.model")
    p = run("predict", tmp_path / "te.zarr", tmp_path / "svm.model", "-b", 1, ok=False)
    assert "only supported for logistic regression" in p.stderr
