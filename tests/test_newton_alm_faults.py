"""Newton and SVM-ALM: checkpoint and resume (a run stopped and resumed ends where an
uninterrupted one does), and a worker SIGKILLed mid-run (the job finishes on the others at
the no-fault optimum)."""

from __future__ import annotations

import io
import time
import warnings

import numpy as np
import pytest

from distsvm import jobs
from distsvm.checkpoint import Checkpointer
from distsvm.errors import ClusterError, ConvergenceWarning
from distsvm.progress import Progress

from .conftest import Killer, local_client, primal_objective

NEWTON = dict(solver="newton", loss="logistic", C=1.0, eps=1e-4, max_rounds=50)


def test_newton_recovers_a_killed_worker(two, small, small_store):
    """Kill a worker (a seeded choice) after Newton iteration 2; the other takes its blocks,
    recomputes z and D from w and reaches the no-fault optimum within 1e-6."""
    two.wait_for_workers(2)
    X, y = small
    ref = jobs.train(small_store, client=two, **NEWTON)
    killer = Killer(two, 2, int(np.random.default_rng(8).integers(2)))
    model = jobs.train(small_store, client=two, progress=killer, **NEWTON)
    log = killer.stream.getvalue()
    assert f"round 3: worker {killer.killed} left the cluster" in log, log[-2000:]
    assert model.summary["converged"] and model.summary["rounds"] > 2
    p = primal_objective(model.w, X, y, "logistic", C=1.0)
    p_ref = primal_objective(ref.w, X, y, "logistic", C=1.0)
    assert abs(p - p_ref) <= 1e-6 * p_ref, (p, p_ref)
    assert p == pytest.approx(model.summary["primal_objective"], rel=1e-9)


def test_newton_resumes_where_it_stopped(tmp_path, small_store, client):
    """A run stopped after iteration 3 and resumed from its iteration-2 checkpoint ends at
    the uninterrupted run's w (z and D are recomputed from w in every evaluation)."""
    params = dict(NEWTON, eps=1e-9, max_rounds=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = jobs.train(small_store, client=client, **params)
        ck = Checkpointer(tmp_path, 2, {"case": "newton"})
        jobs.train(small_store, client=client, checkpoint=ck, **{**params, "max_rounds": 3})
        assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2]
        log = Progress(stream=io.StringIO())
        resumed = jobs.train(small_store, client=client, checkpoint=ck, progress=log, **params)
    lines = log.stream.getvalue().splitlines()
    assert any(x.startswith("resuming from the checkpoint of round 2") for x in lines)
    assert [int(x.split()[1]) for x in lines if x.startswith("iter ")] == [3, 4, 5, 6]
    assert resumed.summary["rounds"] == ref.summary["rounds"] == 6
    np.testing.assert_allclose(resumed.w, ref.w, rtol=0, atol=1e-9)
    assert resumed.summary["primal_objective"] == pytest.approx(
        ref.summary["primal_objective"], rel=1e-12)


ALM = dict(solver="alm", loss="squared_hinge", C=1.0, eps=1e-9, max_rounds=12)


@pytest.fixture(scope="module")
def alm_ref(small_store, client):
    """The uninterrupted ALM run of every ALM test here (on the session's cluster)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return jobs.train(small_store, client=client, **ALM)


def test_alm_resumes_where_it_stopped(tmp_path, small_store, client, alm_ref):
    """A run stopped after iteration 5 and resumed from its iteration-4 checkpoint (w, b, µ,
    and every block's λ and e written by its owner) takes the uninterrupted run's iterates."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = alm_ref
        ck = Checkpointer(tmp_path, 2, {"case": "alm"})
        jobs.train(small_store, client=client, checkpoint=ck, **{**ALM, "max_rounds": 5})
        assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2, 4]
        assert len(list((tmp_path / "checkpoints" / "00000004").glob("block-*.npz"))) == 6
        log = Progress(stream=io.StringIO())
        resumed = jobs.train(small_store, client=client, checkpoint=ck, progress=log, **ALM)
    lines = log.stream.getvalue().splitlines()
    assert any(x.startswith("resuming from the checkpoint of round 4") for x in lines)
    assert [int(x.split()[1]) for x in lines if x.startswith("iter ")] == list(range(5, 13))
    np.testing.assert_array_equal(resumed.w, ref.w)
    assert resumed.summary["primal_objective"] == ref.summary["primal_objective"]


def test_alm_recovers_a_killed_worker_from_its_checkpoint(tmp_path, two, small_store,
                                                          alm_ref):
    """Kill a worker (a seeded choice) once iteration 5 is logged: the survivor takes its
    blocks with λ and e of the iteration-4 checkpoint and the run continues from there to the
    no-fault iterates."""
    two.wait_for_workers(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = alm_ref
        killer = Killer(two, 5, int(np.random.default_rng(9).integers(2)))
        model = jobs.train(small_store, client=two, progress=killer,
                           checkpoint=Checkpointer(tmp_path, 2, {"case": "alm"}), **ALM)
    log = killer.stream.getvalue()
    assert (f"round 6: worker {killer.killed} left the cluster; its 3 blocks go to the other 1 "
            "worker(s), every block's lambda and e come from the checkpoint of round 4"
            in log), log[-2000:]
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9 * np.abs(ref.w).max())
    assert model.summary["rounds"] == 12


def test_alm_without_a_checkpoint_restarts_the_multipliers_at_the_current_w(two, small_store,
                                                                            alm_ref):
    """Without a checkpoint a lost worker's λ and e are gone: every block restarts from
    λ = 0, e = 0 at the iteration's w, so that iteration's objective (a function of w
    alone) is the no-fault run's, and the iterations go on from there."""
    two.wait_for_workers(2)
    params = {**ALM, "max_rounds": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        killer = Killer(two, 4, int(np.random.default_rng(10).integers(2)))
        model = jobs.train(small_store, client=two, progress=killer, **params)
    log = killer.stream.getvalue()
    assert f"round 5: worker {killer.killed} left the cluster" in log, log[-2000:]
    assert "there is no checkpoint, so every block restarts from lambda = 0, e = 0" in log
    rows = model.summary["history"]
    assert [r["round"] for r in rows] == list(range(1, 9))
    ref_rows = alm_ref.summary["history"]
    assert rows[4]["primal"] == pytest.approx(ref_rows[4]["primal"], rel=1e-9)  # iteration 5
    assert rows[4]["mu"] == ref_rows[4]["mu"]
    assert np.all(np.isfinite(model.w)) and rows[-1]["primal"] < rows[0]["primal"]


def test_losing_every_worker_fails_promptly(small_store):
    """With no worker of the job left, Newton and ALM fail with ClusterError (the nanny's
    replacement worker is not the job's), within seconds."""
    with local_client(1) as c:
        for params in (NEWTON, ALM):
            c.wait_for_workers(1)
            start = time.perf_counter()
            with pytest.raises(ClusterError, match="every worker of the job left"):
                jobs.train(small_store, client=c, progress=Killer(c, 2, 0),
                           **{**params, "eps": 1e-12, "max_rounds": 1000})
            assert time.perf_counter() - start < 30


def test_job_specs_take_newton_with_checkpoints(tmp_path):
    """`distsvm run` specs accept solver newton (and -R) with a checkpoint policy."""
    from distsvm import spec

    path = tmp_path / "job.yaml"
    path.write_text("data: {train: s}\nsolver: {solver: newton, loss: logistic, bias: 1, "
                    "regularize_bias: false}\ncheckpoint: {every: 2}\n")
    assert spec.load_spec(path)["solver"] == {"solver": "newton", "loss": "logistic",
                                              "bias": 1, "regularize_bias": False}
