"""The solver conformance suite (:class:`distsvm.testing.SolverTests`, as zarr-python's
``StoreTests``) on every solver × loss of the registry: the cases, their small real data,
LIBLINEAR's optima and the objectives computed in NumPy.  The contract itself (LIBLINEAR's
optimum, one block = many, repeatable, a killed worker, a resumed run) is the suite's."""

from __future__ import annotations

import numpy as np
import pytest

from distsvm.testing import Case, SolverTests

from .conftest import (
    DATA,
    dna_rows,
    liblinear_optimum,
    liblinear_svr_optimum,
    load_xy,
    primal_objective,
    svr_objective,
)
from .test_crammer_singer import cs_primal
from .test_l1 import l1_objective, liblinear_l1
from .test_multiclass import liblinear_model, ovr_objectives
from .test_svr_dual import abalone_rows

DCD = dict(solver="dcd", C=0.003, eps=1e-9, gap_tol=4e-5, max_rounds=2000, seed=1,
           join_blocks=False)  # the block-wise path: both workers own blocks
CASES = [
    Case("dcd-l2", {**DCD, "loss": "squared_hinge"}, liblinear="-s 1", rtol=1e-4,
         blocks_rtol=1e-4),
    Case("dcd-l1", {**DCD, "loss": "hinge"}, liblinear="-s 3", rtol=1e-4, blocks_rtol=1e-4),
    # eps 1e-2: 110 rounds, (f - f*)/f* = 1e-6 on these rows (1e-4 took 240 rounds, 2.7e-9)
    Case("dcd-lr", dict(DCD, loss="logistic", gap_tol=0.0, eps=1e-2, C=0.1),
         liblinear="-s 7", rtol=1e-5, opt_rtol=1e-5, blocks_rtol=1e-5),
    Case("dcd-add", {**DCD, "loss": "squared_hinge", "parallel": "add"}, liblinear="-s 1",
         rtol=1e-4, blocks_rtol=1e-4),
    Case("newton-lr", dict(solver="newton", loss="logistic", C=1.0, eps=1e-4, max_rounds=50),
         liblinear="-s 0", opt_rtol=1e-6, kill_at=3),
    Case("newton-l2", dict(solver="newton", loss="squared_hinge", C=1.0, eps=1e-4,
                           max_rounds=50), liblinear="-s 2", opt_rtol=1e-6, kill_at=3),
    Case("pcd-exact", dict(solver="pcd", loss="squared_hinge", C=0.001, eps=1e-5,
                           max_rounds=1000, seed=3), liblinear="-s 2", exact=True),
    Case("pcd-parallel", dict(solver="pcd", loss="logistic", C=0.001, eps=1e-5,
                              max_rounds=1000, seed=3, pcd_mode="parallel"),
         liblinear="-s 0", kill_at=4),
    Case("cutting-plane", dict(solver="cutting_plane", loss="hinge", C=0.1, eps=1e-4,
                               max_rounds=200), liblinear="-s 3", opt_rtol=1e-3, exact=True,
         kill_at=3),
    Case("alm", dict(solver="alm", loss="squared_hinge", C=1.0, eps=1e-9, max_rounds=12),
         exact=True, blocks_rtol=1e-9, kill_at=5),  # its stop is not LIBLINEAR's problem
    Case("crammer-singer", dict(solver="crammer_singer", loss="crammer_singer", C=0.003,
                                bias=1.0, eps=1e-12, gap_tol=1e-6, max_rounds=1000, seed=1,
                                join_blocks=False), data="dna", liblinear="-s 4 -B 1",
         opt_rtol=1e-6),
    Case("dcd-ovr", dict(solver="dcd", loss="squared_hinge", C=0.001, eps=1e-9, gap_tol=5e-7,
                         max_rounds=1000, seed=1, join_blocks=False), data="dna",
         liblinear="-s 1", exact=True),
    Case("newton-svr", dict(solver="newton", loss="squared_epsilon_insensitive", C=1.0,
                            eps=1e-6, max_rounds=50), data="abalone", liblinear="-s 11",
         opt_rtol=1e-6, kill_at=3),
    Case("oneclass", dict(solver="oneclass", loss="oneclass", nu=0.5, eps=1e-6,
                          max_rounds=1000, join_blocks=False), liblinear="-s 21", below=False,
         rtol=1e-6, blocks_rtol=1e-9),  # a loss restarts the lost blocks' alpha: not exact
    Case("dcd-svr-l2", {**DCD, "loss": "squared_epsilon_insensitive", "C": 0.01},
         data="abalone-1500", liblinear="-s 12", rtol=1e-4, blocks_rtol=1e-4),
    Case("dcd-svr-l1", {**DCD, "loss": "epsilon_insensitive", "C": 0.01},
         data="abalone-1500", liblinear="-s 13", rtol=1e-4, blocks_rtol=1e-4),
    # exact mode runs on the plan's first worker: the kill must hit it to be a fault
    Case("l1-cdn", dict(solver="l1", loss="squared_hinge", C=0.01, eps=1e-4, max_rounds=1000,
                       seed=3), liblinear="-s 5", victim=0),
    Case("l1-glmnet", dict(solver="l1", loss="logistic", C=0.1, eps=1e-6, max_rounds=1000,
                       seed=3), liblinear="-s 6", kill_at=3, victim=0),
    # parallel mode: the column blocks on both workers (tests/test_l1.py has the quick ones)
    Case("l1-cdn-parallel", dict(solver="l1", loss="squared_hinge", C=0.01, eps=1e-4,
                                 max_rounds=1000, seed=3, pcd_mode="parallel"),
         liblinear="-s 5", kill_at=4, slow=True),
    Case("l1-glmnet-parallel", dict(solver="l1", loss="logistic", C=0.1, eps=1e-6,
                                    max_rounds=1000, seed=3, pcd_mode="parallel"),
         liblinear="-s 6", kill_at=4, slow=True),
]
REGRESSION_DATA = {"abalone", "abalone-1500"}  # stores of real-valued targets (regression=True)
L1_TYPES = ("-s 5", "-s 6")  # L1-regularized: ‖w‖₁ for ½‖w‖² (tests/test_l1.py)


@pytest.fixture(scope="module")
def data(a9a):
    """{name: ((X, y), store of 6 blocks, store of 1 block)}: 3,000 rows of a9a (with a
    column view for pcd), 600 rows of dna (3 classes), abalone (regression) and its first
    1,500 rows."""
    return {"a9a": (a9a[0][:3000], a9a[1][:3000]), "dna": dna_rows(600),
            "abalone": load_xy(DATA / "abalone_scale.xz", 8), "abalone-1500": abalone_rows(1500)}


def _objective(case: Case, w, X, y) -> float:
    """LIBLINEAR's primal objective of w on (X, y), computed in NumPy."""
    p = case.params
    if case.data in REGRESSION_DATA:
        return svr_objective(w, X, y, p["loss"], p["C"], p.get("epsilon", 0.1), p.get("bias", -1.0))
    if p["loss"] == "crammer_singer":
        return cs_primal(w, X, y, p["C"], p.get("bias", -1.0))
    if len(np.unique(y)) > 2:
        return float(np.sum(ovr_objectives(w, X, y, p["loss"], p["C"])))
    if case.liblinear in L1_TYPES:
        return l1_objective(w, X, y, p["loss"], p["C"], p.get("bias", -1.0))
    if p["solver"] == "alm":  # its intercept is unregularized: not LIBLINEAR's objective
        return float("nan")
    return primal_objective(w, X, y, p["loss"], C=p["C"], bias=p.get("bias", -1.0))


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.slow else c
                                  for c in CASES], ids=[c.id for c in CASES])
class TestSolvers(SolverTests):
    regression_data = frozenset(REGRESSION_DATA)

    def optimum(self, case, X, y):
        p = case.params
        if p["loss"] == "oneclass":  # (w, rho): its primal, negative (tests/test_oneclass.py)
            from .test_oneclass import liblinear_oneclass, oneclass_primal

            w_star, rho_star = liblinear_oneclass(X, p["nu"], 1e-8)
            return oneclass_primal(w_star, rho_star, X, p["nu"])
        if case.data in REGRESSION_DATA:
            return liblinear_svr_optimum(X, y, f"{case.liblinear} -e 1e-10", p["loss"], p["C"],
                                         p.get("epsilon", 0.1), p.get("bias", -1.0))[1]
        if len(np.unique(y)) > 2 or p["loss"] == "crammer_singer":
            _, W = liblinear_model(X, y, f"{case.liblinear} -c {p['C']} -e 1e-10")
            return _objective(case, W, X, y)
        if case.liblinear in L1_TYPES:
            ref, _ = liblinear_l1(X, y, f"{case.liblinear} -c {p['C']} -e 1e-10")
            return _objective(case, ref, X, y)
        loss = {"-s 7": "logistic"}.get(case.liblinear, p["loss"])
        return liblinear_optimum(X, y, loss, C=p["C"], eps=1e-8)[1]

    def objective(self, case, model, X, y):
        if case.params["loss"] == "oneclass":
            from .test_oneclass import oneclass_primal

            return oneclass_primal(model.w, model.rho, X, case.params["nu"])
        return _objective(case, model.w, X, y)


# The registry's solver × loss pairs without a case of their own, and why.
SAME_PATH = {("alm", "hinge"): "alm's exponent p = 1: the alm case's code path",
             ("alm", "lp"): "alm's exponent p: the alm case's code path (tests/test_alm.py)"}


def test_every_solver_and_loss_of_the_registry_has_a_case():
    from distsvm.solvers import registry

    covered = {(c.params["solver"], c.params["loss"]) for c in CASES}
    pairs = {(s.name, loss) for s in registry.SOLVERS.values() for loss in s.losses}
    assert pairs - covered == set(SAME_PATH), pairs - covered
    assert covered <= pairs
