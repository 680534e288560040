"""Crammer–Singer (``-s 4``) with worker faults and checkpoints: a worker SIGKILLed mid-run is
recovered (the job reaches LIBLINEAR's optimum within 1e-6, and its checkpoints resume to
the same W), the per-block rollback rebuilds W from α, and a real `distsvm run` job
SIGKILLed between a checkpoint's data and its manifest resumes (`distsvm resume`) to the
uninterrupted run's W."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import distsvm.workers.blocks
import distsvm.workers.crammer_singer
from distsvm import jobs
from distsvm.checkpoint import PAUSE_ENV, Checkpointer
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.progress import Progress
from distsvm.solvers import dcd

from .conftest import Killer, dna_rows
from .test_checkpoint import EVERY, PARAMS, _kill_and_resume, _spec
from .test_crammer_singer import cs_primal
from .test_joined import _KillOwner
from .test_multiclass import liblinear_model

CS = dict(solver="crammer_singer", loss="crammer_singer")
FAULT_C = 0.003  # ~60 rounds to a duality gap of 1e-6 on 600 rows


@pytest.fixture(scope="module")
def dna600():
    """600 rows of dna (3 classes) in 6 blocks: each of 2 workers owns 3."""
    return dna_rows(600)


@pytest.fixture(scope="module")
def dna_store(tmp_path_factory, dna600):
    return ingest(dna600, str(tmp_path_factory.mktemp("cs_faults") / "dna.zarr"), block_rows=100)


def test_a_killed_worker_is_recovered(tmp_path, two, dna600, dna_store):
    """Kill one of two workers at a seeded round; its blocks restart from α = 0 on the other,
    the survivor rolls back to the round's start, and the run's duality gap certifies it
    within 1e-6 of LIBLINEAR's optimum (-e 1e-10).  The run checkpoints every 10 rounds, also
    after the loss (one owner); resumed from its last checkpoint on both workers again, it
    ends at the same W."""
    two.wait_for_workers(2)
    X, y = dna600
    rng = np.random.default_rng(4)
    at, victim = int(rng.integers(2, 15)), int(rng.integers(2))
    killer = Killer(two, at, victim)
    params = dict(C=FAULT_C, bias=1.0, eps=1e-12, gap_tol=1e-6, max_rounds=1000, seed=1,
                  join_blocks=False, **CS)  # the block-wise path: each worker owns blocks
    ck = Checkpointer(tmp_path, 10, {"case": "cs-fault"})
    model = jobs.train(dna_store, client=two, progress=killer, checkpoint=ck, **params)
    log = killer.stream.getvalue()
    assert f"round {at + 1}: worker {killer.killed} left the cluster; its 3 blocks" in log \
        or f"round {at + 2}: worker {killer.killed} left the cluster; its 3 blocks" in log, \
        log[-2000:]
    s = model.summary
    assert s["converged"] and s["rounds"] > at + 1
    p = cs_primal(model.w, X, y, FAULT_C, 1.0)
    assert p == pytest.approx(s["primal_objective"], rel=1e-9)  # W = W(α) held after the loss
    _, W_ref = liblinear_model(X, y, f"-s 4 -c {FAULT_C} -B 1 -e 1e-10")
    p_ref = cs_primal(W_ref, X, y, FAULT_C, 1.0)
    assert s["dual_objective"] <= p_ref * (1 + 1e-12)  # weak duality: the dual is a true one
    assert p_ref * (1 - 1e-9) <= p <= p_ref * (1 + 1e-6), (p, p_ref)

    last = 10 * ((s["rounds"] - 1) // 10)
    assert last > at + 2  # a checkpoint written after the loss
    two.wait_for_workers(2)  # the nanny's replacement: the blocks load on two owners again
    resumed_log = Progress(stream=io.StringIO())
    resumed = jobs.train(dna_store, client=two, progress=resumed_log, checkpoint=ck, **params)
    assert f"resuming from the checkpoint of round {last}" in resumed_log.stream.getvalue()
    assert resumed.summary["rounds"] == s["rounds"]
    np.testing.assert_allclose(resumed.w, model.w, rtol=0, atol=1e-9)


def test_a_killed_owner_of_the_joined_block_is_recovered(two, dna600, dna_store, monkeypatch):
    """The joined block's rounds run in batches on its worker (one round each here); that
    worker is killed mid-run: the block restarts from α = 0 on the other, the batch's rounds
    run again from there, and the run's duality gap certifies it within 1e-6 of LIBLINEAR's
    optimum (-e 1e-10), W = W(α) kept."""
    monkeypatch.setattr(dcd, "BATCH_SECONDS", 0.0)
    two.wait_for_workers(2)
    two.run(distsvm.workers.blocks.clear_cache)
    X, y = dna600
    killer = _KillOwner(two, 5, 0)
    model = jobs.train(dna_store, client=two, progress=killer, C=FAULT_C, bias=1.0, eps=1e-12,
                       gap_tol=1e-6, seed=1, **CS)
    log = killer.stream.getvalue()
    assert killer.killed is not None
    assert f"worker {killer.killed} left the cluster; its 1 blocks go to the other 1 " \
        "worker(s), with alpha = 0" in log, log[-2000:]
    s = model.summary
    assert s["converged"] and s["rounds"] > 6
    p = cs_primal(model.w, X, y, FAULT_C, 1.0)
    assert p == pytest.approx(s["primal_objective"], rel=1e-9)
    _, W_ref = liblinear_model(X, y, f"-s 4 -c {FAULT_C} -B 1 -e 1e-10")
    p_ref = cs_primal(W_ref, X, y, FAULT_C, 1.0)
    assert s["dual_objective"] <= p_ref * (1 + 1e-12)
    assert p_ref * (1 - 1e-9) <= p <= p_ref * (1 + 1e-6), (p, p_ref)


def test_restore_rolls_back_to_the_round_start_and_rebuilds_w(dna_store):
    """In this process: two rounds of segment over every block (with a bias feature), then
    restore for round 2 gives back round 1's α and W = Σ αᵢᵐx̂ᵢ, again when repeated (a loss
    during the recovery), and drops the shrinking state for the next visit to rebuild."""
    d = dna_store
    infos, run = list(d.meta.blocks), "test-cs-restore"
    kw = dict(bias=1.0, n_features=d.meta.n_features, cache_bytes=0)
    W = np.zeros((d.meta.n_features + 1, 3))
    try:
        for tag in (1, 2):
            W, _ = distsvm.workers.crammer_singer.segment(W, d.url, infos, list(range(len(infos))), run,
                                                  unshrink=tag == 1,
                                                  class_cost=np.full(3, 0.1), tag=tag, **kw)
            if tag == 1:
                W1 = W.copy()
                alpha1 = [distsvm.workers.blocks.run_state(run, i.name, dict)["alpha"].copy()
                          for i in infos]
        assert np.abs(W - W1).max() > 1e-3  # round 2 moved W and α
        for _ in range(2):
            rebuilt = distsvm.workers.crammer_singer.restore(d.url, infos, run, 2, n_classes=3, **kw)
            np.testing.assert_allclose(rebuilt, W1, rtol=1e-9, atol=1e-10)
            for info, a1 in zip(infos, alpha1):
                s = distsvm.workers.blocks.run_state(run, info.name, dict)
                np.testing.assert_array_equal(s["alpha"], a1)
                assert "state" not in s and "active_i" not in s
    finally:
        distsvm.workers.blocks.drop_run(run)


def test_job_killed_mid_checkpoint_resumes_to_the_same_w(tmp_path, dna_store, client):
    """A `distsvm run` job spec with solver crammer_singer and a checkpoint every 3 rounds,
    SIGKILLed (with its embedded cluster) between the second checkpoint's data and its
    manifest: `distsvm resume` skips the torn checkpoint, goes on from the first (α and
    shrinking state per block, W, the RNG, eps_shrink) and ends at the uninterrupted run's W."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = jobs.train(dna_store.url, client=client, **{**PARAMS, **CS})

    def torn(run, log):  # the second checkpoint's data are written, its manifest is not
        d = run / "checkpoints" / f"{2 * EVERY:08d}"
        return (d / "coordinator.npz").exists() and not (d / "manifest.json").exists()

    model, logged, resumed, err = _kill_and_resume(tmp_path, dna_store.url, 1, torn,
                                                   env={PAUSE_ENV: "1"}, **CS)
    assert resumed == EVERY and logged == 2 * EVERY
    assert "incomplete or damaged, not used" in err and "cannot be resumed" not in err
    assert model.solver == "crammer_singer" and model.w.shape == (3, 180)
    assert model.summary["rounds"] == ref.summary["rounds"] == PARAMS["max_rounds"]
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9)
    assert model.summary["primal_objective"] == pytest.approx(ref.summary["primal_objective"],
                                                              rel=1e-9)


def test_a_crammer_singer_job_spec_with_a_checkpoint_policy_is_valid(tmp_path):
    from distsvm.spec import load_spec

    path = _spec(tmp_path, tmp_path / "d.zarr", 2, **CS)
    spec = load_spec(path)
    assert spec["solver"]["solver"] == "crammer_singer" and spec["checkpoint"]["every"] == EVERY
