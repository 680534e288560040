"""The conformance suite of the solvers (as zarr-python's ``StoreTests``): every solver × loss of
the registry, on the same small real data, meets the same contract —

* its optimum is LIBLINEAR's where LIBLINEAR solves the same problem;
* one block and many blocks give the same optimum;
* a run is repeatable: the same seed gives the same w, bit for bit;
* a worker SIGKILLed mid-run: the job ends on the other worker at the no-fault optimum
  (under the solver's recovery policy, :mod:`distsvm.solvers.driver`);
* a run stopped after round 3 resumes from its round-2 checkpoint to the uninterrupted w.

A subclass parametrizes ``case`` over its :class:`Case` es, gives the fixtures ``data``
({name: (X, y)}) and ``client`` (a session's cluster), names its regression data
(``regression_data``) and says what LIBLINEAR's optimum and a model's objective are
(:meth:`SolverTests.optimum`, :meth:`SolverTests.objective`).  Each case states its
tolerances: a case whose recovery or resume takes the no-fault path exactly checks w
itself; the others check the objective to what their stopping rule certifies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import signal
import warnings

import numpy as np
import pytest

from .. import jobs
from ..checkpoint import Checkpointer
from ..columns import columnize
from ..errors import ConvergenceWarning
from ..ingest import ingest
from ..progress import Progress
from ..solvers import registry


@dataclasses.dataclass(frozen=True)
class Case:
    """A solver × loss with the parameters of a short run on the small data, and what its
    contract checks: ``liblinear`` — LIBLINEAR's options for the same problem (None: it has
    none) and ``opt_rtol`` the objective's distance allowed (``below``: LIBLINEAR's optimum
    bounds it from below, to 1e-9; else either side); ``exact`` — a fault and a resume end
    at the no-fault w (else at its objective to ``rtol``); ``blocks_rtol`` the objective's
    agreement between 1 block and many."""

    id: str
    params: dict
    data: str = "a9a"
    liblinear: str | None = None
    opt_rtol: float = 1e-4
    below: bool = True
    rtol: float = 1e-6
    exact: bool = False
    blocks_rtol: float = 1e-6
    kill_at: int = 2
    victim: int | None = None  # the killed worker's index (None: seeded by the id)
    slow: bool = False  # run in the slow suite only (the CI budget)


@contextlib.contextmanager
def local_client(n_workers: int, threads_per_worker: int = 1, **kwargs):
    """A Client of a fresh LocalCluster of ``n_workers`` worker processes (single-threaded
    unless ``threads_per_worker``; ``kwargs``: LocalCluster's others, e.g. memory_limit)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                      processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      **kwargs) as cluster, Client(cluster) as c:
        yield c


class Killer(Progress):
    """Logs to a buffer and SIGKILLs worker process ``victim`` (its index among the
    cluster's sorted addresses) when round (or iteration) ``at`` is first logged; the
    coordinator goes on to submit the next round at once, so the loss lands during a round."""

    def __init__(self, client, at: int, victim: int):
        super().__init__(stream=io.StringIO())
        self.client, self.at, self.victim, self.killed = client, at, victim, None

    def round(self, row, text=None, show=True):
        super().round(row, text, show)
        if row["round"] == self.at and self.killed is None:
            pids = self.client.run(os.getpid)
            self.killed = sorted(pids)[self.victim]
            os.kill(pids[self.killed], signal.SIGKILL)


def train(case: Case, store, client, **kw):
    """The case's run on ``store`` (its round limit's warning silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # e.g. ALM stops at its rounds
        return jobs.train(store, client=client, **{**case.params, **kw})


class SolverTests:
    """The contract every solver of the registry meets; subclassed with its cases."""

    regression_data: frozenset = frozenset()  # names of ``data`` of real-valued targets

    def optimum(self, case: Case, X, y) -> float:
        """LIBLINEAR's optimal objective of the case's problem on (X, y)."""
        raise NotImplementedError

    def objective(self, case: Case, model, X, y) -> float:
        """The case's primal objective of ``model`` on (X, y), computed independently."""
        raise NotImplementedError

    @pytest.fixture(scope="class")
    def two(self):
        """A 2-worker cluster of the suite's own, for the fault tests: the session's would
        lose a worker to them."""
        with local_client(2) as c:
            yield c

    @pytest.fixture(scope="class")
    def stores(self, tmp_path_factory, data):
        """``get(name, blocks)``: ``data[name]`` in a store of that many blocks, with a column
        view, made once."""
        made = {}

        def get(name: str, blocks: int):
            if (name, blocks) not in made:
                X, y = data[name]
                d = ingest((X, y), str(tmp_path_factory.mktemp("conformance") / f"{name}.zarr"),
                           block_rows=-(-X.shape[0] // blocks),
                           regression=name in self.regression_data)
                columnize(d, block_mb=0.02)
                made[name, blocks] = d
            return made[name, blocks]

        return get

    @pytest.fixture(scope="class")
    def refs(self, two, stores):
        """``get(case)``: the case's uninterrupted run on the 6-block store, made once."""
        made = {}

        def get(case: Case):
            if case.id not in made:
                made[case.id] = train(case, stores(case.data, 6), two)
            return made[case.id]

        return get

    def test_optimum_is_liblinears(self, case, data, refs):
        if case.liblinear is None:
            pytest.skip(f"{case.id}: LIBLINEAR has no solver of this problem")
        X, y = data[case.data]
        f_star = self.optimum(case, X, y)
        model = refs(case)
        f = self.objective(case, model, X, y)
        assert f == pytest.approx(model.summary["primal_objective"], rel=1e-9)
        assert f == pytest.approx(f_star, rel=case.opt_rtol), (f, f_star)
        if case.below:
            assert f >= f_star * (1 - 1e-9), (f, f_star)

    def test_one_block_equals_many(self, case, client, stores, refs):
        one = train(case, stores(case.data, 1), client)
        many = refs(case)
        assert one.summary["primal_objective"] == pytest.approx(
            many.summary["primal_objective"], rel=case.blocks_rtol)

    def test_repeatable_with_a_seed(self, case, two, stores, refs):
        again = train(case, stores(case.data, 6), two)
        np.testing.assert_array_equal(again.w, refs(case).w)

    def test_a_killed_worker_ends_at_the_same_optimum(self, case, stores, refs, tmp_path,
                                                      monkeypatch):
        for solver in registry.SOLVERS.values():  # a kill lands between batches
            if hasattr(solver.module(), "BATCH_SECONDS"):
                monkeypatch.setattr(solver.module(), "BATCH_SECONDS", 0.0)
        ref = refs(case)
        kw = {}
        if case.params["solver"] == "alm":  # RELOAD: the no-fault path from a checkpoint
            kw["checkpoint"] = Checkpointer(tmp_path, 2, {"case": case.id})
        with local_client(2) as c:  # its own: a nanny does not always bring a worker back
            victim = case.victim
            if victim is None:
                victim = int(np.random.default_rng(len(case.id)).integers(2))
            killer = Killer(c, case.kill_at, victim)
            model = train(case, stores(case.data, 6), c, progress=killer, **kw)
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
        train(case, store, client, checkpoint=ck, max_rounds=3)
        log = Progress(stream=io.StringIO())
        resumed = train(case, store, client, checkpoint=ck, progress=log)
        assert "resuming from the checkpoint of round 2" in log.stream.getvalue()
        assert resumed.summary["rounds"] == ref.summary["rounds"]
        np.testing.assert_allclose(resumed.w, ref.w, rtol=0, atol=1e-9 * np.abs(ref.w).max())
