"""One-vs-rest runs survive faults: a worker SIGKILLed at a random round of
``dcd.solve_ovr`` is recovered for every problem; a killed `distsvm run` of a multi-class
job resumes from its checkpoint to the same W; so does a generic one-vs-rest run (newton),
each problem from its own checkpoints."""

from __future__ import annotations

import io
import os
import random
import re
import signal
import time
import warnings

import numpy as np
import pytest

from distsvm.checkpoint import Checkpointer
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.progress import Progress
from distsvm.solvers import dcd

from .conftest import dna_rows
from .test_checkpoint import EVERY, ROUND_LINE, _kill_and_resume
from .test_multiclass import ovr_objectives

C = 0.001  # about 20 rounds to a duality gap of 5e-7 on 1,000 rows of dna
GAP = 5e-7  # both runs certified to this: their objectives differ by < 1e-6 relative


@pytest.fixture(scope="module")
def dna():
    """The first 1,000 rows of Statlog DNA (3 classes, 180 binary features)."""
    return dna_rows(1000)


@pytest.fixture(scope="module")
def store(tmp_path_factory, dna):
    """5 row blocks: both workers of a 2-worker cluster own some."""
    return ingest(dna, str(tmp_path_factory.mktemp("ovr-faults") / "dna.zarr"), block_rows=200)


class KillAt(io.StringIO):
    """A log stream that SIGKILLs worker process ``victim`` (its index among the cluster's
    sorted addresses) when the first problem's line of round ``at`` is written: in the
    coordinator, after that round's results came back and before the next round starts.
    (The problems log through their own :class:`distsvm.solvers.ovr.Tagged` progress, which
    writes to this stream.)"""

    def __init__(self, client, at: int, victim: int):
        super().__init__()
        self.client, self.at, self.victim, self.killed = client, at, victim, None

    def write(self, text):
        found = re.search(ROUND_LINE, text)
        if found and int(found.group(1)) == self.at and self.killed is None:
            pids = self.client.run(os.getpid)
            self.killed = sorted(pids)[self.victim]
            os.kill(pids[self.killed], signal.SIGKILL)
        return super().write(text)


def _faulty(client, store, at, victim, **kw):
    """Train with worker ``victim`` killed after round ``at``: (model, log)."""
    client.wait_for_workers(2)  # a worker killed by an earlier run is back
    log = KillAt(client, at, victim)
    model = train(store, client=client, progress=Progress(stream=log), **kw)
    return model, log


@pytest.fixture(scope="module")
def fault(two, store):
    """A no-fault run, and a run with one of the two workers killed at a random round (seeded),
    each batch of rounds one round long: (the no-fault model, the faulty model, its log, the
    training parameters)."""
    rng = np.random.default_rng(8)
    at, victim = int(rng.integers(2, 9)), int(rng.integers(2))
    kw = dict(loss="squared_hinge", C=C, eps=1e-9, gap_tol=GAP, max_rounds=1000, seed=1,
              join_blocks=False)  # round by round over the blocks: more rounds to kill in
    ref = train(store, client=two, **kw)
    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dcd, "BATCH_SECONDS", 0.0)
        model, log = _faulty(two, store, at, victim, **kw)
    assert time.perf_counter() - start < 120  # the loss is noticed, never waited on forever
    return ref, model, log, kw


def test_a_killed_worker_is_recovered_for_every_problem(fault, dna):
    """The job finishes on the other worker: the killed worker's problems restart from
    alpha = 0 and take their no-fault path again, so W is the no-fault run's exactly, each
    problem certified by its duality gap, its reported objective the NumPy one."""
    X, y = dna
    ref, model, log, _ = fault
    text = log.getvalue()
    found = re.search(rf"^round \d+: worker {log.killed} left the cluster; its \d+ blocks go to "
                      r"the other 1 worker\(s\), the problems of class ([\d, ]+) restart from "
                      "alpha = 0 there", text, re.M)
    assert found, text[-2000:]
    assert model.summary["converged"]
    np.testing.assert_array_equal(model.w, ref.w)
    assert [s["rounds"] for s in model.summary["per_class"]] == \
        [s["rounds"] for s in ref.summary["per_class"]]
    p = ovr_objectives(model.w, X, y, "squared_hinge", C)  # in NumPy, per problem
    np.testing.assert_allclose(p, [s["primal_objective"] for s in model.summary["per_class"]],
                               rtol=1e-9)


def test_a_killed_worker_s_problems_restart_from_the_checkpoint(fault, two, store, tmp_path):
    """With checkpoints every 2 rounds, a worker killed after round 5 loses its problems'
    state, which restart from the checkpoint of round 4 (not from alpha = 0) and end at the
    no-fault W."""
    ref, _, log, kw = fault
    ck = Checkpointer(tmp_path, 2, {"case": "ovr-lost-worker"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dcd, "BATCH_SECONDS", 0.0)
        model, log = _faulty(two, store, 5, log.victim, checkpoint=ck, **kw)
    assert re.search(rf"^round \d+: worker {log.killed} left the cluster; its \d+ blocks go to "
                     r"the other 1 worker\(s\), the problems of class [\d, ]+ restart from the "
                     "checkpoint of round 4 there",
                     log.getvalue(), re.M), log.getvalue()[-2000:]
    np.testing.assert_array_equal(model.w, ref.w)
    assert [s["rounds"] for s in model.summary["per_class"]] == \
        [s["rounds"] for s in ref.summary["per_class"]]


def test_kill_a_multiclass_run_then_resume(tmp_path, store, client):
    """A `distsvm run` of sequential DCD one-vs-rest (3 problems, each with its shrinking
    state, thresholds and stopping test) SIGKILLed at a random round after the first problem
    stopped, then `distsvm resume`: at most k rounds lost, a checkpoint holds the block
    states of the running problems only, and W is the uninterrupted run's."""
    params = dict(loss="squared_hinge", C=C, eps=1e-9, gap_tol=GAP / 100, max_rounds=100,
                  seed=3, join_blocks=False)  # the problems stop at different rounds
    ref = train(store.url, client=client, **params)
    stops = [s["rounds"] for s in ref.summary["per_class"]]  # 12, 13 and 11 rounds
    target = random.randint(min(stops), max(stops) - 1)  # kill once this round is logged,
    delay = random.uniform(0.0, 0.05)  # and a little later: mid-round or mid-checkpoint

    def wait_for(run, log):
        rounds = re.findall(ROUND_LINE, log.read_text(), re.M)
        if rounds and int(rounds[-1]) >= target:
            time.sleep(delay)
            return True
        return False

    model, logged, resumed, _ = _kill_and_resume(tmp_path, store.url, 1, wait_for, **params)
    assert logged - resumed <= EVERY  # at most k rounds lost
    held = {p.name.split("-")[0] for p in
            (tmp_path / "runs" / "r" / "checkpoints" / f"{resumed:08d}").glob("*.npz")}
    assert held == {f"class{k}" for k in range(3) if stops[k] > resumed} | {"coordinator.npz"}
    assert [s["rounds"] for s in model.summary["per_class"]] == stops
    assert model.summary["converged"]
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9)


def test_generic_one_vs_rest_resumes_each_problem(tmp_path, store, client):
    """Newton one-vs-rest (one binary solver per problem): a run stopped after iteration 3
    and resumed continues each problem from its own iteration-2 checkpoint in
    problems/<k>/ and ends at the uninterrupted run's W."""
    params = dict(solver="newton", loss="squared_hinge", C=1.0, eps=1e-12, max_rounds=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = train(store.url, client=client, **params)
        ck = Checkpointer(tmp_path, 2, {"case": "newton-ovr"})
        train(store.url, client=client, checkpoint=ck, **{**params, "max_rounds": 3})
        for k in range(3):
            assert [p.name for p in (tmp_path / "problems" / str(k) / "checkpoints").iterdir()] \
                == ["00000002"]
        log = Progress(stream=io.StringIO())
        resumed = train(store.url, client=client, checkpoint=ck, progress=log, **params)
    text = log.stream.getvalue()
    for c in ("1", "2", "3"):
        assert f"[class {c}] resuming from the checkpoint of round 2" in text, text
    assert resumed.summary["rounds"] == ref.summary["rounds"] == 6
    np.testing.assert_allclose(resumed.w, ref.w, rtol=0, atol=1e-12)
