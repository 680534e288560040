"""The solver conformance suite (as zarr-python's ``StoreTests``): every solver × loss of the
registry, on the same small real data, meets the same contract —

* its optimum is LIBLINEAR's where LIBLINEAR solves the same problem;
* one block and many blocks give the same optimum;
* a run is repeatable: the same seed gives the same w, bit for bit;
* a worker SIGKILLed mid-run: the job ends on the other worker at the no-fault optimum
  (under the solver's recovery policy, :mod:`distsvm.solvers.driver`);
* a run stopped after round 3 resumes from its round-2 checkpoint to the uninterrupted w.

Each case states its tolerances: a case whose recovery or resume takes the no-fault path
exactly checks w itself; the others check the objective to what their stopping rule
certifies.  Solver-specific fault behaviour stays in the solvers' own fault tests.
"""

from __future__ import annotations

import dataclasses
import io
import warnings

import numpy as np
import pytest

from distsvm import jobs
from distsvm.checkpoint import Checkpointer
from distsvm.columns import columnize
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.progress import Progress
from distsvm.solvers import dcd, l1, pcd

from .conftest import (
    DATA,
    Killer,
    dna_rows,
    liblinear_optimum,
    liblinear_svr_optimum,
    load_xy,
    local_client,
    primal_objective,
    svr_objective,
)
from .test_crammer_singer import cs_primal
from .test_l1 import l1_objective, liblinear_l1
from .test_multiclass import liblinear_model, ovr_objectives
from .test_svr_dual import abalone_rows


@dataclasses.dataclass(frozen=True)
class Case:
    """A solver × loss with the parameters of a short run on the small data, and what its
    contract checks: ``liblinear`` — LIBLINEAR's options for the same problem (None: it has
    none) and ``opt_rtol`` the objective's distance allowed; ``exact`` — a fault and a
    resume end at the no-fault w (else at its objective to ``rtol``); ``blocks_rtol`` the
    objective's agreement between 1 block and many."""

    id: str
    params: dict
    data: str = "a9a"
    liblinear: str | None = None
    opt_rtol: float = 1e-4
    rtol: float = 1e-6
    exact: bool = False
    blocks_rtol: float = 1e-6
    kill_at: int = 2
    victim: int | None = None  # the killed worker's index (None: seeded by the id)
    slow: bool = False  # run in the slow suite only (the CI budget)


DCD = dict(solver="dcd", C=0.003, eps=1e-9, gap_tol=4e-5, max_rounds=2000, seed=1,
           join_blocks=False)  # the block-wise path: both workers own blocks
CASES = [
    Case("dcd-l2", {**DCD, "loss": "squared_hinge"}, liblinear="-s 1", rtol=1e-4,
         blocks_rtol=1e-4),
    Case("dcd-l1", {**DCD, "loss": "hinge"}, liblinear="-s 3", rtol=1e-4, blocks_rtol=1e-4),
    Case("dcd-lr", dict(DCD, loss="logistic", gap_tol=0.0, eps=1e-4, C=0.1),
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
                          max_rounds=1000, join_blocks=False), liblinear="-s 21",
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


@pytest.fixture(scope="module")
def stores(tmp_path_factory, data):
    made = {}

    def get(name: str, blocks: int):
        if (name, blocks) not in made:
            X, y = data[name]
            d = ingest((X, y), str(tmp_path_factory.mktemp("conformance") / f"{name}.zarr"),
                       block_rows=-(-X.shape[0] // blocks), regression=name in REGRESSION_DATA)
            columnize(d, block_mb=0.02)
            made[name, blocks] = d
        return made[name, blocks]

    return get


@pytest.fixture(scope="module")
def refs(two, stores):
    """``get(case)``: the case's uninterrupted run on the 6-block store, made once."""
    made = {}

    def get(case: Case):
        if case.id not in made:
            made[case.id] = _train(case, stores(case.data, 6), two)
        return made[case.id]

    return get


def _train(case: Case, store, client, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # ALM stops at its 12 rounds
        return jobs.train(store, client=client, **{**case.params, **kw})


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


class SolverTests:
    """The contract every solver of the registry meets; subclassed once, parametrized over
    the cases."""

    def test_optimum_is_liblinears(self, case, data, refs):
        if case.liblinear is None:
            pytest.skip(f"{case.id}: LIBLINEAR has no solver of this problem")
        X, y = data[case.data]
        p = case.params
        if p["loss"] == "oneclass":  # (w, rho): its primal, negative (tests/test_oneclass.py)
            from .test_oneclass import liblinear_oneclass, oneclass_primal

            w_star, rho_star = liblinear_oneclass(X, p["nu"], 1e-8)
            f_star = oneclass_primal(w_star, rho_star, X, p["nu"])
            model = refs(case)
            f = oneclass_primal(model.w, model.rho, X, p["nu"])
            assert f == pytest.approx(model.summary["primal_objective"], rel=1e-9)
            assert f == pytest.approx(f_star, rel=case.opt_rtol)
            return
        if case.data in REGRESSION_DATA:
            f_star = liblinear_svr_optimum(X, y, f"{case.liblinear} -e 1e-10", p["loss"], p["C"],
                                           p.get("epsilon", 0.1), p.get("bias", -1.0))[1]
        elif len(np.unique(y)) > 2 or p["loss"] == "crammer_singer":
            _, W = liblinear_model(X, y, f"{case.liblinear} -c {p['C']} -e 1e-10")
            f_star = _objective(case, W, X, y)
        elif case.liblinear in L1_TYPES:
            ref, _ = liblinear_l1(X, y, f"{case.liblinear} -c {p['C']} -e 1e-10")
            f_star = _objective(case, ref, X, y)
        else:
            loss = {"-s 7": "logistic"}.get(case.liblinear, p["loss"])
            f_star = liblinear_optimum(X, y, loss, C=p["C"], eps=1e-8)[1]
        model = refs(case)
        f = _objective(case, model.w, X, y)
        assert f == pytest.approx(model.summary["primal_objective"], rel=1e-9)
        assert f_star * (1 - 1e-9) <= f <= f_star * (1 + case.opt_rtol), (f, f_star)

    def test_one_block_equals_many(self, case, client, stores, refs):
        one = _train(case, stores(case.data, 1), client)
        many = refs(case)
        assert one.summary["primal_objective"] == pytest.approx(
            many.summary["primal_objective"], rel=case.blocks_rtol)

    def test_repeatable_with_a_seed(self, case, two, stores, refs):
        again = _train(case, stores(case.data, 6), two)
        np.testing.assert_array_equal(again.w, refs(case).w)

    def test_a_killed_worker_ends_at_the_same_optimum(self, case, stores, refs, tmp_path,
                                                      monkeypatch):
        monkeypatch.setattr(dcd, "BATCH_SECONDS", 0.0)  # a kill lands between batches
        monkeypatch.setattr(pcd, "BATCH_SECONDS", 0.0)
        monkeypatch.setattr(l1, "BATCH_SECONDS", 0.0)
        ref = refs(case)
        kw = {}
        if case.params["solver"] == "alm":  # RELOAD: the no-fault path from a checkpoint
            kw["checkpoint"] = Checkpointer(tmp_path, 2, {"case": case.id})
        with local_client(2) as c:  # its own: a nanny does not always bring a worker back
            victim = case.victim
            if victim is None:
                victim = int(np.random.default_rng(len(case.id)).integers(2))
            killer = Killer(c, case.kill_at, victim)
            model = _train(case, stores(case.data, 6), c, progress=killer, **kw)
        assert f"worker {killer.killed} left the cluster" in killer.stream.getvalue(), \
            killer.stream.getvalue()[-2000:]
        if case.exact:
            np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9 * np.abs(ref.w).max())
            assert model.summary["rounds"] == ref.summary["rounds"]
        else:
            assert model.summary["primal_objective"] == pytest.approx(
                ref.summary["primal_objective"], rel=case.rtol)

    def test_a_stopped_run_resumes_to_the_same_w(self, case, client, stores, refs, tmp_path):
        ref, store = refs(case), stores(case.data, 6)
        ck = Checkpointer(tmp_path, 2, {"case": case.id})
        _train(case, store, client, checkpoint=ck, max_rounds=3)
        log = Progress(stream=io.StringIO())
        resumed = _train(case, store, client, checkpoint=ck, progress=log)
        assert "resuming from the checkpoint of round 2" in log.stream.getvalue()
        assert resumed.summary["rounds"] == ref.summary["rounds"]
        np.testing.assert_allclose(resumed.w, ref.w, rtol=0, atol=1e-9 * np.abs(ref.w).max())


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.slow else c
                                  for c in CASES], ids=[c.id for c in CASES])
class TestSolvers(SolverTests):
    pass


# The registry's solver × loss pairs without a case of their own, and why.
SAME_PATH = {("alm", "hinge"): "alm's exponent p = 1: the alm case's code path",
             ("alm", "lp"): "alm's exponent p: the alm case's code path (tests/test_alm.py)"}


def test_every_solver_and_loss_of_the_registry_has_a_case():
    from distsvm.solvers import registry

    covered = {(c.params["solver"], c.params["loss"]) for c in CASES}
    pairs = {(s.name, loss) for s in registry.SOLVERS.values() for loss in s.losses}
    assert pairs - covered == set(SAME_PATH), pairs - covered
    assert covered <= pairs
