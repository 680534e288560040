"""LIBLINEAR parity (issue 7): every ``-s`` this version trains, on multi-class datasets.

For each LIBLINEAR type (``jobs.LIBLINEAR_TYPES``: 0, 1, 2, 3, 4, 7) and dataset, the
summed one-vs-rest primal objectives (Crammer–Singer: its own objective) are within 1e-3
relative of LIBLINEAR's optimum with the same options, and the test accuracy within 0.3
points of LIBLINEAR's — or lower: LIBLINEAR's dual solvers stop at their iteration limit
short of the optimum on some of these sets (on dna.scale ``-s 3`` ends 0.9% above the
optimum we certify).  pendigits, letter.scale and news20 (rows scaled to unit length, an
80/20 split of its training file) come from ``../shared/datasets`` and are skipped without
it; the shipped dna.scale is covered by test_multiclass, test_crammer_singer and
test_dcd_lr.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm.ingest import ingest
from distsvm.jobs import LIBLINEAR_TYPES, train

from .conftest import load_xy, shared_dataset
from .test_crammer_singer import cs_primal
from .test_multiclass import accuracy, liblinear_model, ovr_objectives

DATASETS = {"pendigits": 16, "letter.scale": 16, "news20": None}
TYPES = sorted(LIBLINEAR_TYPES)
# tight enough for 1e-3 of the optimum: LIBLINEAR's rule with a small eps, and for the dual
# solvers a duality-gap certificate
OPTIONS = {"newton": dict(eps=1e-4), "dcd": dict(eps=1e-9, gap_tol=5e-4),
           "crammer_singer": dict(eps=1e-9, gap_tol=5e-4)}


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


# Known failure (issue 7 stays open for it): on pendigits, whose features are unscaled
# (0–100), the dual solvers stop at the 1000-round limit 15–60% above LIBLINEAR's objective
# (projected gradient still 5–8) while LIBLINEAR's dual CD gets there; the primal ones pass.
UNCONVERGED = {("pendigits", 1), ("pendigits", 3), ("pendigits", 4), ("pendigits", 7)}


@pytest.mark.slow
@pytest.mark.parametrize("name, s", [
    pytest.param(name, s, marks=pytest.mark.xfail(strict=True, reason="dual CD stalls on "
                                                  "unscaled pendigits (issue 7)"))
    if (name, s) in UNCONVERGED else (name, s) for name in DATASETS for s in TYPES])
def test_every_type_matches_liblinear(client, stores, name, s):
    (X, y), (Xt, yt), store = stores(name)
    solver, loss = LIBLINEAR_TYPES[s]
    _, W_ref = liblinear_model(X, y, f"-s {s} -c 1 -e 1e-5")
    model = train(store, solver=solver, loss=loss, C=1.0, max_rounds=1000, client=client,
                  **OPTIONS[solver])
    W = np.atleast_2d(model.w)
    if solver == "crammer_singer":
        got, ref = cs_primal(W, X, y, 1.0), cs_primal(W_ref, X, y, 1.0)
    else:
        got = ovr_objectives(W, X, y, loss).sum()
        ref = ovr_objectives(W_ref, X, y, loss).sum()
    assert got <= ref * (1 + 1e-3), (got, ref)
    assert abs(accuracy(W, Xt, yt) - accuracy(W_ref, Xt, yt)) <= 0.003
