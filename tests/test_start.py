"""The cheap start: the in-process cluster (threads of this process, started once) trains the
same models as a cluster of worker processes, and later jobs of a process reuse it."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import psutil
import pytest

from distsvm import cluster
from distsvm.ingest import ingest
from distsvm.jobs import train

from .conftest import DATA

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """a9a in 5 row blocks, so that both workers of either cluster own blocks."""
    path = tmp_path_factory.mktemp("start") / "a9a.zarr"
    yield ingest(str(DATA / "a9a.xz"), str(path), block_rows=7000)
    cluster.close_embedded()


@pytest.mark.parametrize("kw", [{"solver": "dcd", "loss": "squared_hinge", "C": 0.1, "seed": 3},
                                {"solver": "newton", "loss": "logistic", "bias": 1.0}])
def test_in_process_and_process_clusters_train_the_same_model(store, kw):
    embedded = cluster.embedded_client()
    assert embedded.scheduler.address.startswith("inproc://")
    cheap = train(store, client=embedded, **kw)
    with cluster.connect(n_workers=2) as c:  # worker processes, as --workers 2
        assert c.scheduler.address.startswith("tcp://127.0.0.1:")
        processes = train(store, client=c, **kw)
    assert cheap.summary["rounds"] == processes.summary["rounds"]
    np.testing.assert_allclose(cheap.w, processes.w, rtol=0, atol=1e-9)  # Newton: sums of
    # the blocks' vectors by the in-process worker's 2 threads, rounding apart


FITS = """
import sys, warnings
import numpy as np
import distsvm
from distsvm import cluster

warnings.simplefilter("ignore")
rng = np.random.default_rng(0)
X = rng.standard_normal((2000, 22))
y = np.where(X @ rng.standard_normal(22) > 0, 1, -1)
addresses = []
for est in (distsvm.LinearSVC(verbose=1), distsvm.LinearSVC(dual=True, tol=1e-2, verbose=1),
            distsvm.LogisticRegression(verbose=1)):
    est.fit(X, y)
    addresses.append(cluster.embedded_client().scheduler.address)
print(" ".join(addresses))
"""


def test_fits_in_one_process_start_one_cluster():
    """Three estimator fits (no client, no scheduler): each announces the same in-process
    scheduler, which is the process's embedded cluster after the fits."""
    p = subprocess.run([sys.executable, "-c", FITS], check=False, capture_output=True, text=True,
                       env=ENV, timeout=600)
    assert p.returncode == 0, p.stderr
    announced = [line.split()[2].rstrip(",") for line in p.stderr.splitlines()
                 if line.startswith("cluster: scheduler")]
    assert len(announced) == 3 and len(set(announced)) == 1
    assert announced[0].startswith("inproc://")
    assert p.stdout.split() == announced


def run(*args):
    """The CLI in a child process, with Ctrl-C (SIGINT) at its default even where the tests
    run in a background job (whose children inherit SIGINT ignored, and Python then keeps
    ignoring it)."""
    return subprocess.Popen([sys.executable, "-m", "distsvm.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_cli_in_process_error_and_interrupt_are_one_line(store, tmp_path):
    p = run("train", store.url, tmp_path / "m", "-w9", "2", "-q")  # no class 9
    out, err = p.communicate(timeout=600)
    assert p.returncode == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ERROR:") and "class_weight" in err

    p = run("train", store.url, tmp_path / "m", "-e", "1e-12", "--max-rounds", "100000")
    lines = []
    for line in p.stderr:  # interrupt it once it trains
        lines.append(line)
        if line.startswith("round"):
            break
    assert lines[0].startswith("cluster: scheduler inproc://"), lines
    p.send_signal(signal.SIGINT)
    # the rest from the same buffered reader as the loop (communicate() reads the pipe
    # itself and would cut the line the loop's buffer had begun); a stuck child is killed
    watchdog = threading.Timer(120, p.kill)
    watchdog.start()
    err, out = p.stderr.read(), p.stdout.read()
    p.wait()
    watchdog.cancel()
    assert p.returncode == 130 and out == ""
    assert [line for line in err.splitlines() if not line.startswith("round")] == \
        ["ERROR: interrupted"]


def test_cli_workers_option_starts_worker_processes(store, tmp_path):
    p = run("train", store.url, tmp_path / "m", "--workers", "2", "-e", "0.5")
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert err.startswith("cluster: scheduler tcp://127.0.0.1:") and ", 2 workers," in err
    p = run("predict", store.url, tmp_path / "m", "--json")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert json.loads(out)["n_rows"] == 32561


def test_large_stores_run_on_worker_processes(store):
    """The CLI's rule: a store over a quarter of the memory, or parallel DCD (K = workers),
    gets worker processes."""
    meta = store.meta
    assert cluster.workers_for(meta, None, None) is None
    assert cluster.workers_for(meta, None, 3) == 3
    assert cluster.workers_for(meta, "tcp://somewhere:8786", None) is None
    assert cluster.workers_for(meta, None, None, parallel=True) == cluster.default_workers()
    copies = psutil.virtual_memory().total // cluster.block_bytes(meta)  # > all the memory
    huge = dataclasses.replace(meta, blocks=meta.blocks * copies)
    assert cluster.workers_for(huge, None, None) == cluster.default_workers()

