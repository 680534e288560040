"""LIBLINEAR parity (issue 7): every ``-s`` this version trains, on multi-class datasets.

For each L2-regularized classifier among LIBLINEAR's types (``registry.LIBLINEAR_TYPES``: 0,
1, 2, 3, 4, 7; the others have their own reference tests on ``../shared/datasets``: -s 5/-s 6
in test_l1, -s 11/12/13 on regression sets in test_regression and test_svr_dual, -s 21 in
test_oneclass) and dataset, the
summed one-vs-rest primal objectives (Crammer–Singer: its own objective) are within 1e-3
relative of LIBLINEAR's optimum with the same options, and the test accuracy within 0.3
points of LIBLINEAR's — or lower: LIBLINEAR's dual solvers stop at their iteration limit
short of the optimum on some of these sets (on dna.scale ``-s 3`` ends 0.9% above the
optimum we certify).  pendigits, letter.scale and news20 (rows scaled to unit length, an
80/20 split of its training file) come from ``../shared/datasets`` and are skipped without
it; the shipped dna.scale is covered by test_multiclass, test_crammer_singer and
test_dcd_lr.

LIBLINEAR's reference is read from its log too (issue 7, pendigits, whose features are
unscaled, 0–100): its dual solvers stop at their iteration limits there (``-s 1``, ``-s 3``,
``-s 7``: 300; ``-s 4``: 100000).  ``-s 1`` and ``-s 7`` then switch to the primal Newton
solver (-s 2, -s 0) and end at the optimum; we run them as LIBLINEAR does
(``primal_switch``, :data:`distsvm.solvers.registry.LIBLINEAR_DUAL_ROUNDS`) and the comparison is the
usual one.  ``-s 3`` and ``-s 4`` have no primal solver: LIBLINEAR returns a point far from
the optimum (pendigits ``-s 3``: Σ primal 7880 against a dual 26; ``-s 4``: 1627–2362 by the
random order, dual 648), whose objective and accuracy are not a reference.  Then the test
checks what both solvers certify, the dual objective (a lower bound of the optimum, that
LIBLINEAR logs as "Objective value" = −D): ours is below LIBLINEAR's primal (weak duality)
and, when our round limit covers LIBLINEAR's iterations, at least LIBLINEAR's (our dual CD
is the same method, and went as far).  Where our run converges, the usual comparison
applies whatever LIBLINEAR did (letter.scale ``-s 3``: LIBLINEAR stops at 300 there too).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.solvers.registry import LIBLINEAR_DUAL_ROUNDS, LIBLINEAR_TYPES, REGRESSION_LOSSES

from .conftest import load_xy, shared_dataset
from .test_crammer_singer import cs_primal
from .test_multiclass import accuracy, liblinear_weights, ovr_objectives

DATASETS = {"pendigits": 16, "letter.scale": 16, "news20": None}
# tight enough for 1e-3 of the optimum: LIBLINEAR's rule with a small eps, and for the dual
# solvers a duality-gap certificate
OPTIONS = {"newton": dict(eps=1e-4), "dcd": dict(eps=1e-9, gap_tol=5e-4),
           "crammer_singer": dict(eps=1e-9, gap_tol=5e-4)}
TYPES = [s for s, (solver, loss) in sorted(LIBLINEAR_TYPES.items())
         if solver in OPTIONS and loss not in REGRESSION_LOSSES]


def _load(name):
    """(train, test) of a dataset; news20: unit-length rows, 80/20 split (seeded)."""
    if name != "news20":
        n = DATASETS[name]
        return load_xy(shared_dataset(name), n), load_xy(shared_dataset(f"{name}.t"), n)
    X, y = load_xy(shared_dataset(name))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    X = sp.csr_matrix(X, dtype=np.float32)
    order = np.random.default_rng(0).permutation(X.shape[0])
    cut = int(0.8 * len(order))
    return (X[order[:cut]], y[order[:cut]]), (X[order[cut:]], y[order[cut:]])


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """{dataset: ((X, y), (Xt, yt), store)}, each ingested once (one block each)."""
    cache = {}

    def get(name):
        if name not in cache:
            (X, y), test = _load(name)
            store = ingest((X, y), str(tmp_path_factory.mktemp("parity") / f"{name}.zarr"))
            cache[name] = ((X, y), test, store)
        return cache[name]

    return get


MAX_ROUNDS = 1000


def _liblinear(X, y, s, capfd):
    """LIBLINEAR's W with the test's options and, from its log, (the largest iteration count
    of its dual solver if it stopped at its limit without switching to a primal solver,
    else None; Σ of the dual objectives D it reached, one per problem)."""
    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import train as ll_train

    capfd.readouterr()
    W = liblinear_weights(ll_train(problem(y, X.astype(np.float64)),
                                   parameter(f"-s {s} -c 1 -e 1e-5")))
    log = capfd.readouterr().out
    stopped = "reaching max number of iterations" in log and "Switching" not in log
    iters = max(int(n) for n in re.findall(r"#iter = (\d+)", log)) if stopped else None
    return W, iters, -sum(float(v) for v in re.findall(r"Objective value = (\S+)", log))


@pytest.mark.slow
@pytest.mark.parametrize("name, s", [(name, s) for name in DATASETS for s in TYPES])
def test_every_type_matches_liblinear(client, stores, capfd, name, s):
    (X, y), (Xt, yt), store = stores(name)
    solver, loss = LIBLINEAR_TYPES[s]
    W_ref, stopped, dual_ref = _liblinear(X, y, s, capfd)
    options = dict(OPTIONS[solver])
    if s in (1, 7):  # LIBLINEAR's switch to its primal solver
        options["primal_switch"] = LIBLINEAR_DUAL_ROUNDS
    model = train(store, solver=solver, loss=loss, C=1.0, max_rounds=MAX_ROUNDS, client=client,
                  **options)
    W = np.atleast_2d(model.w)
    if solver == "crammer_singer":
        got, ref = cs_primal(W, X, y, 1.0), cs_primal(W_ref, X, y, 1.0)
    else:
        got = ovr_objectives(W, X, y, loss).sum()
        ref = ovr_objectives(W_ref, X, y, loss).sum()
    if stopped is None or model.summary["converged"]:
        assert got <= ref * (1 + 1e-3), (got, ref)
        assert abs(accuracy(W, Xt, yt) - accuracy(W_ref, Xt, yt)) <= 0.003
        return
    # neither reached the optimum; LIBLINEAR's w is no reference (module docstring): the duals
    dual = model.summary["dual_objective"]
    assert dual <= min(got, ref), (dual, got, ref)
    if stopped <= MAX_ROUNDS:
        assert dual >= dual_ref, (dual, dual_ref)
