"""Class and instance weights in every solver that takes them (LIBLINEAR's -wi and -W):
row i costs Cᵢ = C·class_weight[yᵢ]·sample_weightᵢ.  Checked two independent ways:
integer instance weights equal the problem with duplicated rows, and class weights reach
LIBLINEAR's -wi optimum."""

from __future__ import annotations

import numpy as np
import pytest

from distsvm import params
from distsvm.columns import columnize
from distsvm.ingest import ingest
from distsvm.jobs import train

from .conftest import weighted_stores
from .test_multiclass import DATA, liblinear_model, load_xy

# (solver, loss, parallel) and LIBLINEAR's -s of the same problem
CASES = [("dcd", "hinge", None, 3), ("dcd", "squared_hinge", None, 1),
         ("dcd", "squared_hinge", "add", 1), ("dcd", "logistic", None, 7),
         ("crammer_singer", "crammer_singer", None, 4), ("pcd", "squared_hinge", None, 2),
         ("pcd", "logistic", None, 0)]
IDS = ["dcd-hinge", "dcd-squared_hinge", "dcd-squared_hinge-add", "dcd-logistic", "crammer_singer",
       "pcd-squared_hinge", "pcd-logistic"]
C = 0.05


def objective(W, X, y, loss, cost):
    """½‖W‖² + Σ Cᵢ ξᵢ in NumPy; W has one row per class in sorted label order (binary
    losses: its last row is the +1 class's w, the larger label)."""
    W = np.atleast_2d(W)
    scores = X.astype(np.float64) @ W.T
    if loss == "crammer_singer":
        k = np.searchsorted(np.unique(y), y)
        rows = np.arange(len(y))
        margin = 1.0 + scores - scores[rows, k][:, None]
        margin[rows, k] = 0.0
        xi = np.maximum(margin.max(axis=1), 0.0)
    else:
        m = np.where(y == y.max(), 1.0, -1.0) * scores[:, -1]
        xi = {"hinge": np.maximum(0.0, 1.0 - m), "squared_hinge": np.maximum(0.0, 1.0 - m) ** 2,
              "logistic": np.logaddexp(0.0, -m)}[loss]
        W = W[-1]
    return 0.5 * float(np.sum(W * W)) + float(cost @ xi)


@pytest.fixture(scope="module")
def weighted(tmp_path_factory, a9a):
    """1000 a9a rows with integer instance weights 1–3, as a weighted store (2 blocks) and
    as a store with each row repeated weight times."""
    X, y = a9a
    X, y = X[:1000], y[:1000]
    tmp = tmp_path_factory.mktemp("weights")
    sw, store, dup = weighted_stores(tmp, X, y, 5, 500, 1100)
    plain = ingest((X, y), str(tmp / "p.zarr"), block_rows=500)
    for d in (store, dup, plain):  # for pcd
        columnize(d, memory_mb=64, block_mb=0.5)
    return X, y, sw, store, dup, plain


def _fit(store, client, solver, loss, parallel, gap_tol, max_rounds=500, **kw):
    """Stop on the duality gap ≤ gap_tol relative (10 DCD passes a block visit); pcd,
    which has no gap, on its rule (max |D′ᵢ(0)| relative to w = 0) at gap_tol / 1000."""
    extra = {"parallel": parallel} if parallel else {}
    if solver == "pcd":
        extra["eps"] = gap_tol / 1000
    else:  # eps reachable, so the shrunken rows are checked again before the end
        extra.update(eps=1e-8, gap_tol=gap_tol)
        if params.takes(solver, "inner_passes"):  # another solver refuses it
            extra["inner_passes"] = 10
    return train(store, solver=solver, loss=loss, C=C, max_rounds=max_rounds, client=client,
                 **extra,
                 **kw)


@pytest.mark.filterwarnings("ignore::distsvm.errors.ConvergenceWarning")
@pytest.mark.parametrize("solver, loss, parallel, s", [  # the dual solvers need many rounds
    c if c[0] == "pcd" else pytest.param(*c, marks=pytest.mark.slow) for c in CASES], ids=IDS)
def test_instance_weights_equal_duplicated_rows(client, weighted, solver, loss, parallel, s):
    """The weighted run's reported objective is ½‖w‖² + C Σ swᵢ lossᵢ, the duplicated rows'
    objective, at its w (1e-9); both runs approach the same optimum P*: each objective P lies
    in [P*, P* + its duality gap], so the two differ by at most the larger gap, and the gaps
    are small (≤ 1e-2 relative after at most 100 rounds, 5e-2 for the hinge loss and CoCoA+;
    the dual methods need ~1000 rounds on this a9a subset for a gap of 5e-7, too long for the
    suite); pcd (no gap) stops at a gradient 1e-7 of its value at 0 and is compared within
    1e-6."""
    X, y, sw, store, dup, _ = weighted
    a = _fit(store, client, solver, loss, parallel, 1e-6, max_rounds=100)
    b = _fit(dup, client, solver, loss, parallel, 1e-6, max_rounds=100)
    assert a.params["sample_weight"] is True
    p = objective(a.w, X, y, loss, C * sw)
    assert a.summary["primal_objective"] == pytest.approx(p, rel=1e-9)
    if solver == "pcd":
        assert p == pytest.approx(b.summary["primal_objective"], rel=1e-6)
    else:
        gaps = a.summary["duality_gap"], b.summary["duality_gap"]
        assert max(gaps) <= (5e-2 if parallel or loss == "hinge" else 1e-2) * p  # slower ones
        assert abs(p - b.summary["primal_objective"]) <= max(gaps)


@pytest.mark.parametrize("solver, loss, parallel, s", CASES, ids=IDS)
def test_class_weights_match_liblinear_wi(client, weighted, solver, loss, parallel, s):
    """class_weight={1: 2, -1: 0.5} reaches LIBLINEAR's -w1 2 -w-1 0.5 optimum (1e-3)."""
    X, y, _, _, _, plain = weighted
    model = _fit(plain, client, solver, loss, parallel, 5e-4, class_weight={1: 2.0, -1: 0.5})
    cost = C * np.where(y > 0, 2.0, 0.5)
    _, W_ref = liblinear_model(X, y, f"-s {s} -c {C} -e 1e-6 -w1 2 -w-1 0.5")
    p = objective(model.w, X, y, loss, cost)
    assert model.summary["primal_objective"] == pytest.approx(p, rel=1e-9)
    assert p == pytest.approx(objective(W_ref, X, y, loss, cost), rel=1e-3)
    assert model.params["class_weight"] == {"-1": 0.5, "1": 2.0}


def test_one_vs_rest_class_weights_match_liblinear(client, tmp_path):
    """dna (3 classes), dcd -s 1 with -w1 2 -w2 0.5: problem k's rows of class k cost their
    weighted C and the rest C, as LIBLINEAR's one-vs-rest."""
    X, y = load_xy(DATA / "dna.scale.xz", 180)
    store = ingest((X, y), str(tmp_path / "dna.zarr"))
    model = train(store, loss="squared_hinge", C=C, eps=1e-9, gap_tol=5e-4, max_rounds=1000,
                  class_weight={1: 2.0, 2: 0.5}, client=client)
    _, W_ref = liblinear_model(X, y, f"-s 1 -c {C} -e 1e-5 -w1 2 -w2 0.5")
    weight = {1.0: 2.0, 2.0: 0.5, 3.0: 1.0}
    for k, c in enumerate((1.0, 2.0, 3.0)):
        cost = C * np.where(y == c, weight[c], 1.0)
        yk = np.where(y == c, 1.0, 0.0)
        p = objective(model.w[k], X, yk, "squared_hinge", cost)
        assert model.summary["per_class"][k]["primal_objective"] == pytest.approx(p, rel=1e-9)
        assert p == pytest.approx(objective(W_ref[k], X, yk, "squared_hinge", cost), rel=1e-3)


@pytest.mark.parametrize("solver", ["alm", "cutting_plane"])
def test_solvers_without_weights_refuse_them(client, weighted, solver):
    _, _, _, store, _, plain = weighted
    with pytest.raises(ValueError, match=f"weights of train are not taken by solver '{solver}'"):
        train(store, solver=solver, loss="hinge", client=client)
    with pytest.raises(ValueError, match="LIBLINEAR has no such solver"):
        train(plain, solver=solver, loss="hinge", class_weight="balanced", client=client)
