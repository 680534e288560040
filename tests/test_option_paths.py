"""Every training option has the same effect on every path (issue 29.4).

A path is where the job's blocks live and who computes: **in-process** (the embedded
cluster: one worker, in this process), **several
workers** (three workers, each holding its share of the store and none all of it — where
dual CD of a loss the primal Newton solver also minimizes runs as Newton,
``jobs.primal_where_spread``) and **streamed** (two workers with no block cache: every
block read again at each visit).  Each case sets one option of :class:`distsvm.params.Params`
away from its default and checks its effect on each path against an independent
reference — LIBLINEAR's optimum with the same option, the objective recomputed in NumPy,
the round count or the log — not against the other paths' results.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from distsvm import cluster, params
from distsvm.columns import columnize
from distsvm.ingest import ingest
from distsvm.jobs import train

from .conftest import DATA, load_xy, local_client, primal_objective, svr_objective

pytestmark = pytest.mark.slow
# (one worker process: the in-process path is one worker too, in this process; a fourth
# path of a worker process cost ~1 min of CI's 30 and is left out)
PATHS = ("in-process", "several workers", "streamed")


@pytest.fixture(scope="module")
def data(tmp_path_factory, a9a):
    """3,000 rows of a9a in 6 blocks with its column view, the next 1,000 as a validation
    store; abalone (regression) in 6."""
    tmp = tmp_path_factory.mktemp("paths")
    X, y = a9a[0][:3000], a9a[1][:3000]
    store = ingest((X, y), str(tmp / "a9a.zarr"), block_rows=500)
    columnize(store)
    Xr, yr = load_xy(DATA / "abalone_scale.xz")
    reg = ingest((Xr, yr), str(tmp / "abalone.zarr"), block_rows=Xr.shape[0] // 6 + 1,
                 regression=True)
    Xv, yv = a9a[0][3000:4000], a9a[1][3000:4000]
    held_out = ingest((Xv, yv), str(tmp / "held_out.zarr"), block_rows=250)
    return {"a9a": (X, y, store), "abalone": (Xr, yr, reg), "held out": (Xv, yv, held_out)}


@pytest.fixture(scope="module")
def clusters():
    with local_client(3) as three, local_client(2) as two:
        yield {"several workers": three, "streamed": two}


def _where(path: str, clusters: dict, store) -> dict:
    """train's keywords for ``path``."""
    if path == "in-process":
        return {}
    c = clusters[path]
    plan = cluster.plan(c, len(store.meta.blocks), None, store)
    size = max(cluster.block_sizes(store.meta))
    free = 5 * size if path == "several workers" else 0  # a share each, or no cache at all
    return {"client": c, "plan": cluster.assign(
        dataclasses.replace(plan, free={a: free for a in plan.workers}), plan.owners)}


_REFERENCES: dict = {}
_HELD_OUT: dict = {}  # the validation store's (X, y, url), set by the test
_TRAINING: dict = {}  # the case's training store, set by the test


def reference(X, y, options: str) -> np.ndarray:
    """LIBLINEAR's w for ``options`` (a classifier's with the positive class the larger
    label, as distsvm's), computed once per data and options."""
    key = (id(X), options)
    if key not in _REFERENCES:
        from liblinear.liblinearutil import parameter, problem
        from liblinear.liblinearutil import train as ll_train

        m = ll_train(problem(y, X.astype(np.float64)), parameter(options + " -q"))
        w = np.array([m.w[i] for i in range(X.shape[1] + (1 if "-B 1" in options else 0))])
        classifier = options.split()[1] in ("0", "1", "2", "3", "5", "6", "7")
        _REFERENCES[key] = -w if classifier and m.get_labels()[0] != np.max(y) else w
    return _REFERENCES[key]


def _weighted_objective(w, X, y, weights: dict, C=1.0):
    s = np.where(y == np.max(y), 1.0, -1.0)
    cost = C * np.array([weights.get(int(v), 1.0) for v in y])
    xi = np.maximum(0.0, 1.0 - s * (X.astype(np.float64) @ w))
    return 0.5 * float(w @ w) + float(np.sum(cost * xi * xi))


def _unregularized_bias_objective(w, X, y):
    s = np.where(y == np.max(y), 1.0, -1.0)
    xi = np.maximum(0.0, 1.0 - s * (X.astype(np.float64) @ w[:-1] + w[-1]))
    return 0.5 * float(w[:-1] @ w[:-1]) + float(np.sum(xi * xi))


def _lp_objective(w, X, y, p, C=1.0):
    s = np.where(y == np.max(y), 1.0, -1.0)
    xi = np.maximum(0.0, 1.0 - s * (X.astype(np.float64) @ w))
    return 0.5 * float(w @ w) + C * float(np.sum(xi ** p))


def _near(value, best, rel):
    """``value`` is at most ``rel`` (relative) above the optimum ``best``."""
    assert value <= best + rel * abs(best), (value, best)


# --- the cases: (option, train's keywords, data, check(model, X, y, again, path)) -------------
# ``again(**kw)`` trains once more on the same path, the case's keywords updated by ``kw``.

def c_check(m, X, y, again, path):
    _hinge_near(m, X, y, 1e-3)  # C = 1's optimum is 6.2% above it there (LIBLINEAR, measured)


def epsilon_check(m, X, y, again, path):
    ref = reference(X, y, "-s 11 -p 0.5 -e 1e-8")
    _near(svr_objective(m.w, X, y, p=0.5), svr_objective(ref, X, y, p=0.5), 1e-3)


def nu_check(m, X, y, again, path):
    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import train as ll_train

    ll = ll_train(problem(y, X.astype(np.float64)), parameter("-s 21 -n 0.2 -q"))
    ours = np.sign(X @ m.w[: X.shape[1]] - m.rho)
    theirs = np.sign(X @ np.array([ll.w[i] for i in range(X.shape[1])]) - ll.rho)
    assert np.mean(ours == theirs) >= 0.99
    assert np.mean(ours < 0) <= 0.2 + 0.02  # ν bounds the fraction outside


def eps_check(m, X, y, again, path):
    """Stopped by its rule at 0.01 (the default 0.1 stops earlier: tests/test_dcd.py)."""
    assert m.summary["converged"] and m.summary["stopped_by"] == "eps"
    assert m.summary["history"][-1]["pg_violation"] <= 0.01


def bias_check(m, X, y, again, path):
    assert m.w.shape == (X.shape[1] + 1,)
    ref = reference(X, y, "-s 0 -B 1 -e 1e-8")
    _near(primal_objective(m.w, X, y, "logistic", bias=1.0),
          primal_objective(ref, X, y, "logistic", bias=1.0), 1e-5)


def regularize_bias_check(m, X, y, again, path):
    ref = reference(X, y, "-s 2 -B 1 -R -e 1e-8")
    _near(_unregularized_bias_objective(m.w, X, y), _unregularized_bias_objective(ref, X, y),
          1e-5)


def class_weight_check(m, X, y, again, path):
    ref = reference(X, y, "-s 2 -w1 3 -e 1e-8")
    _near(_weighted_objective(m.w, X, y, {1: 3.0}), _weighted_objective(ref, X, y, {1: 3.0}),
          1e-4)


def max_rounds_check(m, X, y, again, path):
    assert m.summary["rounds"] == 2 and not m.summary["converged"]
    assert m.summary["stopped_by"] == "round limit"


def seed_check(m, X, y, again, path):
    assert m.params["seed"] == 7
    assert not np.array_equal(m.w, again(seed=0).w)  # another permutation of the rows


def inner_passes_check(m, X, y, again, path):
    assert m.summary["converged"] and m.params["inner_passes"] == 4
    assert m.summary["rounds"] < again(inner_passes=1).summary["rounds"]


def gap_tol_check(m, X, y, again, path):
    s = m.summary
    assert s["stopped_by"] == "gap" and s["duality_gap"] <= 0.05 * s["primal_objective"]


def _hinge_near(m, X, y, rel):
    _near(primal_objective(m.w, X, y, "hinge", C=0.1),
          primal_objective(reference(X, y, "-s 3 -c 0.1 -e 1e-6"), X, y, "hinge", C=0.1), rel)


def parallel_check(m, X, y, again, path):
    assert m.params["parallel"] == "line" and m.summary["converged"]
    _hinge_near(m, X, y, 1e-2)


def join_blocks_check(m, X, y, again, path):
    """Where one worker holds the store (in one process) its rows are one
    permutation a round unless join_blocks=False: other iterates, the same optimum.  (Where
    none holds it, True streams the blocks through one worker and False chains them over
    their owners: other iterates too, the same optimum.)"""
    assert m.summary["converged"]
    _hinge_near(m, X, y, 1e-2)
    joined = again(join_blocks=True)
    _hinge_near(joined, X, y, 1e-2)
    if path == "in-process":
        assert not np.array_equal(m.w, joined.w)


def primal_switch_check(m, X, y, again, path):
    h = m.summary["history"]
    assert m.summary["converged"] and "grad_norm" in h[-1]  # Newton's rows at the end
    assert all("pg_violation" in r for r in h[:2]) or "grad_norm" in h[0]  # ≤ 2 dual rounds
    assert not any("pg_violation" in r for r in h[2:])
    _near(primal_objective(m.w, X, y, "squared_hinge"),
          primal_objective(reference(X, y, "-s 2 -e 1e-8"), X, y, "squared_hinge"), 1e-4)


def pcd_mode_check(m, X, y, again, path):
    """At eps 1e-3 (max |D'(0)| relative to w = 0's) exact mode ends 1.4e-3 above f*."""
    assert m.params["pcd_mode"] == "parallel" and m.summary["converged"]
    _near(primal_objective(m.w, X, y, "squared_hinge"),
          primal_objective(reference(X, y, "-s 2 -e 1e-8"), X, y, "squared_hinge"), 3e-3)


def objective_check(m, X, y, again, path):
    """Two labels: a ranking model of them, whose ROC area is the classifier's or more."""
    from sklearn.metrics import roc_auc_score

    assert m.is_ranking and len(m.thresholds) == 1 and m.params["objective"] == "ordinal"
    classifier = again(objective="classification")
    assert not classifier.is_ranking
    assert roc_auc_score(y, X @ m.w) >= roc_auc_score(y, X @ classifier.w)


def c_perf_check(m, X, y, again, path):
    assert m.params["c_perf"] == pytest.approx(1.0)
    assert m.params["C"] == pytest.approx(100 * 1.0 / X.shape[0])


def p_check(m, X, y, again, path):
    assert m.params["p"] == 3.0
    assert m.summary["primal_objective"] == pytest.approx(_lp_objective(m.w, X, y, 3.0),
                                                         rel=1e-6)


def method_check(m, X, y, again, path):
    assert m.params["method"] == "exact" and m.summary["rounds"] == 3
    # Algorithm 1 (LSQR to convergence each iteration) is ahead of Algorithm 2's one step
    assert m.summary["primal_objective"] < again(method="inexact").summary["primal_objective"]


def mu0_check(m, X, y, again, path):
    assert m.summary["history"][0]["mu"] == pytest.approx(0.5)


def rho_check(m, X, y, again, path):
    h = m.summary["history"]
    assert h[1]["mu"] == pytest.approx(1.5 * h[0]["mu"])


def rtol_check(m, X, y, again, path):
    assert m.summary["converged"] and m.summary["rounds"] < 40
    assert again(rtol=1e-9).summary["rounds"] == 40


def warm_start_check(m, X, y, again, path):
    assert m.summary["rounds"] <= 2 < again(warm_start=None).summary["rounds"]


HINGE = dict(solver="dcd", loss="hinge", C=0.1)  # -s 3 at a C where it converges in tens of rounds
HELD_OUT = "the held-out store"  # a validation store: data["held out"]


def _held_out_scores(m):
    Xv, yv, _ = _HELD_OUT["data"]
    dv = Xv.astype(np.float64) @ m.w
    return dv, yv, float(np.mean(np.where(dv > 0, np.max(yv), np.min(yv)) == yv))


def validation_check(m, X, y, again, path):
    """The score of each round, on the workers that hold the validation store, is the kept
    model's accuracy there, computed here."""
    s = m.summary
    assert s["validation_accuracy"] == pytest.approx(_held_out_scores(m)[2], abs=1e-12)
    assert all("validation_accuracy" in row for row in s["history"])


def validation_fraction_check(m, X, y, again, path):
    s = m.summary
    assert s["n_rows"] == 2400 and 0.7 < s["validation_accuracy"] <= 1.0
    assert all("validation_accuracy" in row for row in s["history"])


def validation_metric_check(m, X, y, again, path):
    from sklearn.metrics import roc_auc_score

    dv, yv, _ = _held_out_scores(m)
    assert m.summary["validation_auc"] == pytest.approx(roc_auc_score(yv, dv), abs=1e-9)


def column_holdout_check(m, X, y, again, path):
    """-s 5 over the column view: the rows the seed holds out (the row solvers' rows) cost
    0, so the model is LIBLINEAR's on the others (the store is shuffled: its rows' source
    positions name them)."""
    from distsvm.storage.dataset import read_block_positions
    from distsvm.workers.validation import held_out

    from .test_l1 import l1_objective

    store = _TRAINING["store"]
    source = np.concatenate([read_block_positions(store.url, info)
                             for info in store.meta.blocks])
    kept = np.sort(source[~held_out(len(source), 0.2, 0)])
    ref = reference(X[kept], y[kept], "-s 5 -c 0.01 -e 1e-10")
    f, f_ref = (l1_objective(w, X[kept], y[kept], "squared_hinge", 0.01) for w in (m.w, ref))
    assert m.summary["n_rows"] == 2400 and f_ref * (1 - 1e-9) <= f <= f_ref * (1 + 1e-4)


def oneclass_metric_check(m, X, y, again, path):
    """A one-class model's AUC: of its decision values for the rows labelled +1."""
    from sklearn.metrics import roc_auc_score

    Xv, yv, _ = _HELD_OUT["data"]
    dv = Xv.astype(np.float64) @ m.w - m.rho
    assert m.summary["validation_auc"] == pytest.approx(roc_auc_score(yv == 1, dv), abs=1e-9)


def ranking_metric_check(m, X, y, again, path):
    """A ranking model's pairwise accuracy: the share of the pairs of held-out rows of
    different rank whose scores are in order (ties ½) — with two ranks, the ROC area."""
    from sklearn.metrics import roc_auc_score

    dv, yv, _ = _held_out_scores(m)
    assert m.summary["validation_pairwise_accuracy"] == pytest.approx(roc_auc_score(yv, dv),
                                                                      abs=1e-9)


def _round_scores(s) -> list[float]:
    """Each round's validation score: its w's, or its SGD start's where that is better (the
    batched dual CD's, docs/anytime.md)."""
    return [max(row["validation_accuracy"], row.get("sgd_validation_accuracy", -1.0))
            for row in s["history"]]


def n_iter_no_change_check(m, X, y, again, path):
    """Stopped 3 rounds after the best score, with the best round's model."""
    s = m.summary
    seen = _round_scores(s)
    assert s["stopped_by"] == "no improvement" and s["rounds"] == s["best_round"] + 3
    assert s["validation_accuracy"] == max(seen) == _held_out_scores(m)[2]


def validation_tol_check(m, X, y, again, path):
    """No improvement of 0.5 is possible: the run ends 2 rounds after the first (keeping the
    best of the 3, as scikit-learn's ``tol`` counts rounds but keeps the best score)."""
    s = m.summary
    seen = _round_scores(s)
    assert s["stopped_by"] == "no improvement" and s["rounds"] == 3
    assert s["best_round"] == int(np.argmax(seen)) + 1


def time_budget_check(m, X, y, again, path):
    """C = 10 at eps 1e-12 needs far more than 0.5 s: the budget ends it, with a model."""
    s = m.summary
    assert s["stopped_by"] == "time budget" and not s["converged"]
    assert s["train_seconds"] < 0.5 + 1.0 and np.all(np.isfinite(m.w)) and np.any(m.w)


CASES = {  # option: (train's keywords, data, check)
    "C": (dict(solver="dcd", loss="hinge", C=0.1, eps=1e-3), "a9a", c_check),
    "epsilon": (dict(solver="dcd", loss="squared_epsilon_insensitive", epsilon=0.5, eps=1e-6,
                     primal_switch=300), "abalone", epsilon_check),
    "nu": (dict(solver="oneclass", loss="oneclass", nu=0.2), "a9a", nu_check),
    "eps": (dict(HINGE, eps=0.01), "a9a", eps_check),
    "bias": (dict(solver="newton", loss="logistic", bias=1.0, eps=1e-5), "a9a", bias_check),
    "regularize_bias": (dict(solver="newton", loss="squared_hinge", bias=1.0,
                             regularize_bias=False, eps=1e-4), "a9a", regularize_bias_check),
    "class_weight": (dict(solver="dcd", loss="squared_hinge", class_weight={1: 3.0}, eps=1e-4,
                          primal_switch=300), "a9a", class_weight_check),
    "max_rounds": (dict(solver="dcd", loss="hinge", max_rounds=2), "a9a", max_rounds_check),
    "seed": (dict(solver="dcd", loss="hinge", max_rounds=2, seed=7), "a9a", seed_check),
    "inner_passes": (dict(HINGE, inner_passes=4), "a9a",
                     inner_passes_check),
    "gap_tol": (dict(HINGE, eps=1e-9, gap_tol=0.05), "a9a",
                gap_tol_check),
    "parallel": (dict(HINGE, parallel="line", eps=0.01), "a9a",
                 parallel_check),
    "join_blocks": (dict(HINGE, join_blocks=False, seed=2), "a9a",
                    join_blocks_check),
    "primal_switch": (dict(solver="dcd", loss="squared_hinge", primal_switch=2, eps=1e-3),
                      "a9a", primal_switch_check),
    "pcd_mode": (dict(solver="pcd", loss="squared_hinge", pcd_mode="parallel", eps=1e-3),
                 "a9a", pcd_mode_check),
    "objective": (dict(solver="cutting_plane", loss="hinge", objective="ordinal", c_perf=1.0),
                  "a9a",
                  objective_check),
    "c_perf": (dict(solver="cutting_plane", loss="hinge", c_perf=1.0), "a9a", c_perf_check),
    "p": (dict(solver="alm", loss="lp", p=3.0, max_rounds=20), "a9a", p_check),
    "method": (dict(solver="alm", loss="squared_hinge", method="exact", max_rounds=3), "a9a",
               method_check),
    "mu0": (dict(solver="alm", loss="squared_hinge", mu0=0.5, max_rounds=3), "a9a", mu0_check),
    "rho": (dict(solver="alm", loss="squared_hinge", rho=1.5, max_rounds=3), "a9a", rho_check),
    "rtol": (dict(solver="alm", loss="squared_hinge", rtol=0.05, max_rounds=40), "a9a",
             rtol_check),
    "warm_start": (dict(solver="newton", loss="squared_hinge", warm_start="optimum"), "a9a",
                   warm_start_check),
    "validation": (dict(HINGE, validation=HELD_OUT), "a9a", validation_check),
    "validation_fraction": (dict(HINGE, validation_fraction=0.2), "a9a",
                            validation_fraction_check),
    "validation_fraction: column view": (dict(solver="l1", loss="squared_hinge", C=0.01,
                                              eps=1e-6, validation_fraction=0.2), "a9a",
                                         column_holdout_check),
    "validation_metric": (dict(HINGE, validation=HELD_OUT, validation_metric="auc"), "a9a",
                          validation_metric_check),
    "validation_metric: one-class": (dict(solver="oneclass", loss="oneclass",
                                          validation=HELD_OUT, validation_metric="auc"), "a9a",
                                     oneclass_metric_check),
    "validation_metric: ranking": (dict(solver="cutting_plane", loss="hinge", c_perf=1.0,
                                        objective="ordinal", validation=HELD_OUT,
                                        validation_metric="pairwise_accuracy"), "a9a",
                                   ranking_metric_check),
    "n_iter_no_change": (dict(HINGE, eps=1e-9, validation=HELD_OUT, n_iter_no_change=3,
                              validation_tol=0.0), "a9a", n_iter_no_change_check),
    "validation_tol": (dict(HINGE, eps=1e-9, validation=HELD_OUT, n_iter_no_change=2,
                            validation_tol=0.5), "a9a", validation_tol_check),
    "time_budget": (dict(HINGE, C=10.0, eps=1e-12, max_rounds=10**6, time_budget=0.5), "a9a",
                    time_budget_check),
}
# Not an option of one solver's: chosen by every case (solver, loss).
EVERY_CASE = {"solver", "loss"}


def test_every_option_has_a_case():
    """A new option of Params needs its case here (its effect on every path; "option: what"
    names a further case of it)."""
    options = {case.split(":")[0] for case in CASES}
    assert options | EVERY_CASE == set(params.OPTIONS), set(params.OPTIONS) ^ options


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("option", sorted(CASES))
def test_an_option_has_its_effect_on_every_path(data, clusters, option, path):
    kw, which, check = CASES[option]
    X, y, store = data[which]
    _TRAINING["store"] = store
    if kw.get("validation") == HELD_OUT:
        _HELD_OUT["data"] = data["held out"]
        kw = {**kw, "validation": data["held out"][2].url}
    if kw.get("warm_start") == "optimum":
        kw = {**kw, "warm_start": reference(X, y, "-s 2 -e 1e-8")}
    where = _where(path, clusters, store)

    def again(**changed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return train(store, **where, **{**kw, **changed})

    model = again()
    recorded = [k for k in kw if k not in ("warm_start", "class_weight", "solver", "loss",
                                           "primal_switch")
                and not (k == "eps" and model.solver != kw["solver"])]  # Newton's own eps
    assert {k: model.params.get(k, kw[k]) for k in recorded} == {k: kw[k] for k in recorded}
    check(model, X, y, again, path)
