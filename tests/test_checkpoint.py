"""Checkpoint and resume: SIGKILL a real `distsvm run` (and its embedded cluster) at a random
moment or in the middle of writing a checkpoint, then `distsvm resume` must reach the same
w as an uninterrupted run, lose at most k rounds, and never load a torn checkpoint."""

from __future__ import annotations

import io
import json
import lzma
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from distsvm import jobs
from distsvm.checkpoint import PAUSE_ENV, Checkpointer
from distsvm.columns import columnize
from distsvm.errors import ConvergenceWarning
from distsvm.ingest import ingest
from distsvm.model import load_model
from distsvm.progress import Progress

from .conftest import DATA

EVERY = 3
ROUND_LINE = r"^(?:\[class \S+\] )?round\s+(\d+)\s+primal"  # a round's log line (one-vs-rest: K)
PARAMS = dict(loss="squared_hinge", C=1.0, eps=1e-9, max_rounds=12, seed=7)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """2000 rows of a9a in 5 row blocks, with a column view."""
    d = tmp_path_factory.mktemp("ckpt")
    with lzma.open(DATA / "a9a.xz", "rt") as f:
        lines = [next(f) for _ in range(2000)]
    (d / "a9a-2000.txt").write_text("".join(lines))
    columnize(ingest(str(d / "a9a-2000.txt"), str(d / "a9a.zarr"), block_rows=400,
                     n_features=123, seed=1), block_mb=0.02)  # the column view: for pcd
    return d / "a9a.zarr"


def _reference(store, client, **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return jobs.train(str(store), client=client, **PARAMS, **extra)


def _spec(tmp_path, store, n_workers, **extra) -> pathlib.Path:
    spec = {"data": {"train": str(store)}, "solver": {**PARAMS, **extra},
            "cluster": {"n_workers": n_workers},
            "output": {"model": str(tmp_path / "model.dsvm")},
            "checkpoint": {"every": EVERY, "runs": str(tmp_path / "runs")}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    return path


def _distsvm(*args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "distsvm.cli", *args], env=env,
                            start_new_session=True, **kw)


def _manifests(run: pathlib.Path) -> list[int]:
    return sorted(int(p.parent.name) for p in run.glob("checkpoints/*/manifest.json"))


def _kill_and_resume(tmp_path, store, n_workers, wait_for, env=None, **extra):
    """Start a run, SIGKILL its process group once ``wait_for(run, log)`` holds, resume it;
    return (the resumed model, the last round logged before the kill, the round resumed
    from (0: from scratch), the resume's log)."""
    spec = _spec(tmp_path, store, n_workers, **extra)
    run = tmp_path / "runs" / "r"
    log = tmp_path / "run.log"
    with open(log, "w") as err:
        p = _distsvm("run", str(spec), "--run-id", "r", stderr=err,
                     env={**os.environ, **(env or {})})
        try:
            deadline = time.monotonic() + 60
            while not wait_for(run, log):
                assert p.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the kill condition did not come in time"
                time.sleep(0.02)
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    logged = max(int(m) for m in re.findall(ROUND_LINE, log.read_text(), re.M))
    complete = _manifests(run)
    assert not (tmp_path / "model.dsvm").exists()
    r = subprocess.run([sys.executable, "-m", "distsvm.cli", "resume", str(run)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    found = re.search(r"resuming from the checkpoint of round (\d+)", r.stderr)
    resumed = int(found.group(1)) if found else 0
    assert resumed == max(complete, default=0)  # the newest complete checkpoint
    return load_model(tmp_path / "model.dsvm"), logged, resumed, r.stderr


def test_kill_at_a_random_round_then_resume(tmp_path, store, client):
    """Sequential DCD (shrinking state, RNG of the block order): same w as without the kill."""
    ref = _reference(store, client)
    rng = random.Random()
    target = rng.randint(EVERY, PARAMS["max_rounds"] - 1)  # kill once this round is logged,
    delay = rng.uniform(0.0, 0.05)  # and a little later: mid-round or mid-checkpoint

    def wait_for(run, log):
        rounds = re.findall(r"^round\s+(\d+)\s+primal", log.read_text(), re.M)
        if rounds and int(rounds[-1]) >= target:
            time.sleep(delay)
            return True
        return False

    model, logged, resumed, _ = _kill_and_resume(tmp_path, store, 1, wait_for)
    assert logged - resumed <= EVERY  # at most k rounds lost
    assert model.summary["rounds"] == ref.summary["rounds"] == PARAMS["max_rounds"]
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9)
    assert model.summary["primal_objective"] == pytest.approx(ref.summary["primal_objective"],
                                                              rel=1e-6)


def test_kill_mid_checkpoint_falls_back_to_the_previous_one(tmp_path, store, client):
    """Parallel DCD (CoCoA+), killed between a checkpoint's data and its manifest: the torn
    checkpoint is skipped, the previous one used, and the optimum is the same."""
    ref = _reference(store, client, parallel="add", n_workers=1)  # K = 1, as the runs below

    def torn(run, log):  # the second checkpoint's data are written, its manifest is not
        d = run / "checkpoints" / f"{2 * EVERY:08d}"
        return (d / "coordinator.npz").exists() and not (d / "manifest.json").exists()

    model, logged, resumed, err = _kill_and_resume(tmp_path, store, 1, torn,
                                                   env={PAUSE_ENV: "2"}, parallel="add")
    assert resumed == EVERY and logged == 2 * EVERY
    assert "incomplete or damaged, not used" in err
    np.testing.assert_allclose(model.w, ref.w, rtol=0, atol=1e-9)
    assert model.summary["primal_objective"] == pytest.approx(ref.summary["primal_objective"],
                                                              rel=1e-6)


def test_damaged_checkpoint_is_never_loaded(tmp_path):
    """A block file that fails its checksum makes the checkpoint unusable; a job with other
    parameters may not continue a run."""
    ck = Checkpointer(tmp_path, 1, {"C": 1.0})
    for r in (1, 2):
        d = ck.directory(r)
        from distsvm.storage import checkpoint as files

        digest = files.write_arrays(f"{d}/block-000000.npz", {"alpha": np.full(3, float(r))})
        ck.save(r, "dcd", {"w": np.arange(4.0) * r}, {"x": r}, {"block-000000.npz": digest})
    assert ck.latest("dcd").round == 2
    block = pathlib.Path(ck.directory(2)) / "block-000000.npz"
    data = bytearray(block.read_bytes())
    data[-5] ^= 0xFF
    block.write_bytes(bytes(data))
    found = ck.latest("dcd")
    assert found.round == 1 and found.state == {"x": 1}
    np.testing.assert_array_equal(found.arrays["w"], np.arange(4.0))
    with pytest.raises(ValueError, match="C=1.0, this job has C=2.0"):
        Checkpointer(tmp_path, 1, {"C": 2.0}).latest("dcd")
    with pytest.raises(ValueError, match="checkpoint is of solver 'dcd'"):
        ck.latest("pcd")


@pytest.mark.parametrize("solver, loss, prefix, extra, atol", [
    ("cutting_plane", "hinge", "iter ", {}, 0.0),
    ("pcd", "squared_hinge", "round ", {"pcd_mode": "exact"}, 1e-9),
    ("pcd", "squared_hinge", "round ", {"pcd_mode": "parallel"}, 1e-9)],
    ids=["cutting_plane", "pcd-exact", "pcd-parallel"])
def test_resume_where_it_stopped(tmp_path, store, client, solver, loss, prefix, extra, atol):
    """cutting_plane (state all the coordinator's: w, the working set, ξ) and pcd in both
    modes (state a function of w: the residuals b are rebuilt from w, so the resumed run
    agrees to rounding): a run stopped after round 5 and resumed from its round-4 checkpoint
    ends where an uninterrupted run does."""
    params = dict(solver=solver, loss=loss, C=1.0, eps=1e-9, max_rounds=12, **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = jobs.train(str(store), client=client, **params)
        ck = Checkpointer(tmp_path, 2, {"case": solver})
        jobs.train(str(store), client=client, checkpoint=ck, **{**params, "max_rounds": 5})
        assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2, 4]
        log = Progress(stream=io.StringIO())
        resumed = jobs.train(str(store), client=client, checkpoint=ck, progress=log, **params)
    lines = log.stream.getvalue().splitlines()
    assert any(x.startswith("resuming from the checkpoint of round 4") for x in lines)
    assert [int(x.split()[1]) for x in lines if x.startswith(prefix)] == list(range(5, 13))
    assert resumed.summary["rounds"] == ref.summary["rounds"] == 12
    np.testing.assert_allclose(resumed.w, ref.w, rtol=0, atol=max(atol, 1e-12))
    assert resumed.summary["primal_objective"] == pytest.approx(
        ref.summary["primal_objective"], rel=atol)
