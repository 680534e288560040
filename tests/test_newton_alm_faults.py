"""Newton and SVM-ALM: checkpoint and resume (a run stopped and resumed ends where an
uninterrupted one does), and a worker SIGKILLed mid-run (the job finishes on the others at
the no-fault optimum)."""

from __future__ import annotations

import io
import os
import signal
import warnings

import numpy as np
import pytest

from distsvm import jobs
from distsvm.checkpoint import Checkpointer
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.progress import Progress

from .conftest import local_client, primal_objective


@pytest.fixture(scope="module")
def two():
    """A 2-worker cluster of our own: the session's would lose a worker to these tests."""
    with local_client(2) as c:
        yield c


@pytest.fixture(scope="module")
def small(a9a):
    X, y = a9a
    return X[:2000], y[:2000]


@pytest.fixture(scope="module")
def store(tmp_path_factory, small):
    """2000 rows of a9a in 4 blocks: each of 2 workers owns 2."""
    return ingest(small, str(tmp_path_factory.mktemp("nf") / "s.zarr"), block_rows=500)


class Killer(Progress):
    """Logs to a buffer and SIGKILLs worker process ``victim`` (its index among the
    cluster's sorted addresses) when round ``at`` has been logged: the loss lands during
    the next one."""

    def __init__(self, client, at: int, victim: int):
        super().__init__(stream=io.StringIO())
        self.client, self.at, self.victim, self.killed = client, at, victim, None

    def round(self, row, text=None):
        super().round(row, text)
        if row.get("round", row.get("iteration")) == self.at and self.killed is None:
            pids = self.client.run(os.getpid)
            self.killed = sorted(pids)[self.victim]
            os.kill(pids[self.killed], signal.SIGKILL)


NEWTON = dict(solver="newton", loss="logistic", C=1.0, eps=1e-4, max_rounds=50)


def test_newton_recovers_a_killed_worker(two, small, store):
    """Kill a worker (a seeded choice) after Newton iteration 2; the other takes its blocks,
    recomputes z and D from w and reaches the no-fault optimum within 1e-6."""
    two.wait_for_workers(2)
    X, y = small
    ref = jobs.train(store, client=two, **NEWTON)
    killer = Killer(two, 2, int(np.random.default_rng(8).integers(2)))
    model = jobs.train(store, client=two, progress=killer, **NEWTON)
    log = killer.stream.getvalue()
    assert f"iter 3: worker {killer.killed} left the cluster" in log, log[-2000:]
    assert model.summary["converged"] and model.summary["rounds"] > 2
    p = primal_objective(model.w, X, y, "logistic", C=1.0)
    p_ref = primal_objective(ref.w, X, y, "logistic", C=1.0)
    assert abs(p - p_ref) <= 1e-6 * p_ref, (p, p_ref)
    assert p == pytest.approx(model.summary["primal_objective"], rel=1e-9)


def test_newton_resumes_where_it_stopped(tmp_path, store, client):
    """A run stopped after iteration 3 and resumed from its iteration-2 checkpoint ends at
    the uninterrupted run's w (z and D are recomputed from w in every evaluation)."""
    params = dict(NEWTON, eps=1e-9, max_rounds=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = jobs.train(store, client=client, **params)
        ck = Checkpointer(tmp_path, 2, {"case": "newton"})
        jobs.train(store, client=client, checkpoint=ck, **{**params, "max_rounds": 3})
        assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2]
        log = Progress(stream=io.StringIO())
        resumed = jobs.train(store, client=client, checkpoint=ck, progress=log, **params)
    lines = log.stream.getvalue().splitlines()
    assert any(x.startswith("resuming from the checkpoint of iteration 2") for x in lines)
    assert [int(x.split()[1]) for x in lines if x.startswith("iter ")] == [3, 4, 5, 6]
    assert resumed.summary["rounds"] == ref.summary["rounds"] == 6
    np.testing.assert_allclose(resumed.w, ref.w, rtol=0, atol=1e-9)
    assert resumed.summary["primal_objective"] == pytest.approx(
        ref.summary["primal_objective"], rel=1e-12)


ALM = dict(solver="alm", loss="squared_hinge", C=1.0, eps=1e-9, max_rounds=12)


def test_alm_resumes_where_it_stopped(tmp_path, store, client):
    """A run stopped after iteration 5 and resumed from its iteration-4 checkpoint (w, b, µ,
    and every block's λ and e written by its owner) takes the uninterrupted run's iterates."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = jobs.train(store, client=client, **ALM)
        ck = Checkpointer(tmp_path, 2, {"case": "alm"})
        jobs.train(store, client=client, checkpoint=ck, **{**ALM, "max_rounds": 5})
        assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2, 4]
        assert len(list((tmp_path / "checkpoints" / "00000004").glob("block-*.npz"))) == 4
        log = Progress(stream=io.StringIO())
        resumed = jobs.train(store, client=client, checkpoint=ck, progress=log, **ALM)
    lines = log.stream.getvalue().splitlines()
    assert any(x.startswith("resuming from the checkpoint of iteration 4") for x in lines)
    assert [int(x.split()[1]) for x in lines if x.startswith("iter ")] == list(range(5, 13))
    np.testing.assert_array_equal(resumed.w, ref.w)
    assert resumed.summary["primal_objective"] == ref.summary["primal_objective"]


def test_alm_recovers_a_killed_worker_from_its_checkpoint(tmp_path, two, store):
    """Kill a worker (a seeded choice) once iteration 5 is logged: the survivor takes its blocks with
    λ and e of the iteration-4 checkpoint and the run continues from there to the
    no-fault iterates."""
    two.wait_for_workers(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = jobs.train(store, client=two, **ALM)
        killer = Killer(two, 5, int(np.random.default_rng(9).integers(2)))
        model = jobs.train(store, client=two, progress=killer,
                           checkpoint=Checkpointer(tmp_path, 2, {"case": "alm"}), **ALM)
    log = killer.stream.getvalue()
    assert (f"iter 5: worker {killer.killed} left the cluster; its 2 blocks go to the other 1 "
            "worker(s); every block's lambda and e come from the checkpoint of iteration 4"
            in log), log[-2000:]
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9 * np.abs(ref.w).max())
    assert model.summary["rounds"] == 12
