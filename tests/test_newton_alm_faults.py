"""Newton and SVM-ALM beyond the conformance suite (tests/test_solvers.py, which kills a
worker and resumes a run of each): SVM-ALM without a checkpoint restarts its multipliers,
losing every worker fails promptly, job specs take Newton with checkpoints."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from distsvm import jobs
from distsvm.errors import ClusterError, ConvergenceWarning

from .conftest import Killer, local_client

NEWTON = dict(solver="newton", loss="logistic", C=1.0, eps=1e-4, max_rounds=50)


ALM = dict(solver="alm", loss="squared_hinge", C=1.0, eps=1e-9, max_rounds=12)


@pytest.fixture(scope="module")
def alm_ref(small_store, client):
    """The uninterrupted ALM run of every ALM test here (on the session's cluster)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return jobs.train(small_store, client=client, **ALM)


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
