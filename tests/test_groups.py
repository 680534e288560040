"""Groups of calls that add up their parts among the workers (:meth:`distsvm.cluster.Runner.
together`, :class:`distsvm.cluster.AllReduce`), on real LocalClusters: every member gets the
same sum, groups in any order all finish, a failing or lost member ends the others' waits."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from distsvm import cluster, jobs
from distsvm.ingest import ingest

from .conftest import Killer, local_client


def _steps(rank: int, steps: int, fail_at: int = 0, *, reduce):
    """``steps`` reductions of an array, a dict and a number that depend on the rank; fails
    at step ``fail_at`` on rank 1.  Returns every step's sums."""
    out = []
    for t in range(1, steps + 1):
        if rank == 1 and t == fail_at:
            raise ValueError(f"member 1 fails at step {t}")
        part = {"v": np.arange(5.0) * (rank + 1) + t / 3, "n": rank + 0.1 * t}
        out.append(reduce(part))
        out.append(reduce(np.full(3, 1 / (rank + 3) + t)))
    return out


def _in_order(parts):
    total = parts[0]
    for p in parts[1:]:
        total = {k: total[k] + p[k] for k in total} if isinstance(total, dict) else total + p
    return total


def _expected(k: int, steps: int) -> list:
    out = []
    for t in range(1, steps + 1):
        out.append(_in_order([{"v": np.arange(5.0) * (r + 1) + t / 3, "n": r + 0.1 * t}
                              for r in range(k)]))
        out.append(_in_order([np.full(3, 1 / (r + 3) + t) for r in range(k)]))
    return out


def test_every_member_gets_the_sum_in_rank_order():
    """Three workers: each step's sum is the parts added in rank order, the same bits on
    every member, for dicts, arrays and numbers."""
    with local_client(3) as c:
        workers = sorted(cluster.workers_info(c))
        runners = cluster.Runners(c)
        calls = runners.together(workers, _steps, [(j, 4) for j in range(3)], [{}] * 3)
        got = cluster.gather(c, calls, workers)
        want = _expected(3, 4)
        assert len(want) == 8
        for member in got:
            assert len(member) == 8
            for mine, expected in zip(member, want):
                if isinstance(expected, dict):
                    np.testing.assert_array_equal(mine["v"], expected["v"])
                    assert mine["n"] == expected["n"]
                else:
                    np.testing.assert_array_equal(mine, expected)


def test_groups_that_reach_the_workers_in_opposite_orders_both_finish(client):
    """Group 1 reaches worker A before group 2 does, and worker B after it: were a group's
    calls run one at a time on a worker's actor thread, A would wait in group 1 for B,
    and B in group 2 for A.  Both finish, with their sums."""
    a, b = sorted(cluster.workers_info(client))
    runners = cluster.Runners(client)
    peers = [a, b]

    def call(group, w, rank):
        time.sleep(0.3)  # the calls reach the workers in the order they are made
        return cluster.Call(runners.handle(w), w, "together", group, rank, peers, _steps,
                            rank, 6)

    first = [call("g1", a, 0)]
    second = [call("g2", b, 1), call("g2", a, 0)]
    first.append(call("g1", b, 1))
    start = time.perf_counter()
    for calls in (first, second):
        done = [c.result(timeout=60) for c in calls]
        assert len(done[0]) == 12
        np.testing.assert_array_equal(done[0][-1], done[1][-1])
    assert time.perf_counter() - start < 20


def test_a_member_that_fails_ends_the_others_waits(client):
    """Member 1 raises in the middle of a group: member 0, waiting for its part, ends at once
    (member 1 aborts the group on its way out) with an error that says so, the coordinator
    gets member 1's error, and the workers then run another group."""
    workers = sorted(cluster.workers_info(client))
    runners = cluster.Runners(client)
    calls = runners.together(workers, _steps, [(0, 6, 3), (1, 6, 3)], [{}, {}])
    start = time.perf_counter()
    with pytest.raises(ValueError, match="member 1 fails at step 3"):
        calls[1].result(timeout=30)
    with pytest.raises(cluster.GroupAborted, match="another worker of the pass failed or left"):
        calls[0].result(timeout=30)
    assert time.perf_counter() - start < cluster.PING_SECONDS
    again = runners.together(workers, _steps, [(0, 2), (1, 2)], [{}, {}])
    assert len(cluster.gather(client, again, workers)[0]) == 4


def _mail_size(dask_worker) -> int:
    mail = cluster.mailbox(dask_worker.address)
    return len(mail.parts) + len(mail.started)


def _ping_every(seconds: float) -> None:
    cluster.PING_SECONDS = seconds


def test_a_member_whose_peer_never_got_its_call_stops_waiting():
    """A group whose second call was never sent (its coordinator died between the two): the
    first member asks the silent peer, which answers but has no member of the group, and
    after two such answers ends with GroupAborted instead of waiting forever."""
    with local_client(2) as c:
        workers = sorted(cluster.workers_info(c))
        c.run(_ping_every, 0.5)
        runners = cluster.Runners(c)
        runners.make(workers)
        alone = cluster.Call(runners.handles[workers[0]], workers[0], "together", "lonely", 0,
                             workers, _steps, 0, 3)
        start = time.perf_counter()
        with pytest.raises(cluster.GroupAborted):
            alone.result(timeout=30)
        assert time.perf_counter() - start < 10
        assert c.run(_mail_size) == {a: 0 for a in workers}  # the part sent was dropped too


def _dies_at_product(n: int) -> None:
    """On a worker: SIGKILL this process at its ``n``-th Hessian-vector product (the nanny
    starts a new worker, which has not this)."""
    import distsvm.workers.newton as newton

    real, count = newton.hess_vec, [0]

    def product(*args, **kwargs):
        count[0] += 1
        if count[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    product.__name__ = "hess_vec"
    newton.hess_vec = product


def test_a_worker_killed_inside_a_newton_iteration(a9a, tmp_path):
    """Newton on 2 workers, one killed in the middle of an iteration's CG (its 7th product),
    while the other waits for its part: the job goes on on the other worker from the
    iteration's start and ends at the uninterrupted run's objective (to its tolerance: the
    single owner adds the blocks' sums in another order), without waiting for a ping (the
    coordinator ends the survivor's wait)."""
    X, y = a9a
    store = ingest((X[:8000], y[:8000]), str(tmp_path / "s.zarr"), block_rows=2000)
    params = dict(solver="newton", loss="logistic", eps=1e-4)
    with local_client(2) as c:
        ref = jobs.train(store, client=c, **params)
        victim = sorted(cluster.workers_info(c))[1]
        c.run(_dies_at_product, 7, workers=[victim])
        log = Killer(c, 10**6, 0)  # kills nobody: a progress that keeps the log
        start = time.perf_counter()
        model = jobs.train(store, client=c, progress=log, **params)
        seconds = time.perf_counter() - start
    text = log.stream.getvalue()
    assert f"worker {victim} left the cluster" in text, text[-2000:]
    assert model.summary["primal_objective"] == pytest.approx(
        ref.summary["primal_objective"], rel=1e-6)
    assert model.summary["converged"]
    assert seconds < cluster.PING_SECONDS


def test_a_newton_group_over_tls(tls_files, a9a, tmp_path):
    """On a cluster that requires TLS, the owners' parts go worker to worker over it: Newton
    on 2 worker processes ends at the objective of the session's plain cluster, to the bit
    (the same parts, added in the same order)."""
    from distributed import Client, LocalCluster
    from distributed.security import Security

    cert, key = tls_files
    security = Security(tls_ca_file=cert, tls_scheduler_cert=cert, tls_scheduler_key=key,
                        tls_worker_cert=cert, tls_worker_key=key, tls_client_cert=cert,
                        tls_client_key=key, require_encryption=True)
    X, y = a9a
    store = ingest((X[:6000], y[:6000]), str(tmp_path / "s.zarr"), block_rows=3000)
    params = dict(solver="newton", loss="squared_hinge", eps=1e-4)
    with local_client(2) as plain:
        ref = jobs.train(store, client=plain, **params)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tls://",
                      host="127.0.0.1", dashboard_address=":0", security=security) as lc, \
            Client(lc, security=security) as c:
        calls = c.run(cluster.runner_calls)
        model = jobs.train(store, client=c, **params)
        done = c.run(cluster.runner_calls)
    assert all(a.startswith("tls://") for a in done)
    assert all(done[a]["iteration"] - calls[a].get("iteration", 0)
               == model.summary["rounds"] for a in done)
    assert model.summary["primal_objective"] == ref.summary["primal_objective"]


def test_a_ctrl_c_in_a_newton_iteration_leaves_the_cluster_ready_and_quiet(tmp_path, capfd):
    """`distsvm train --scheduler` interrupted while its workers are in an iteration: one
    line and exit 130; the members finish the iteration by themselves, the workers print
    no error, no group thread is left, and the next job trains.  (A message to a Runner
    that Dask has dropped made the workers print errors only now and then: this does not
    catch that reliably.)"""
    import subprocess
    import sys

    from distsvm.generate import generate

    store = generate(str(tmp_path / "g.zarr"), rows=200_000, features=20_000,
                     nnz_per_row=20, seed=1, block_rows=100_000)
    with local_client(2, memory_limit="1GB") as c:
        address = c.scheduler.address
        cmd = [sys.executable, "-m", "distsvm", "train", store.url, str(tmp_path / "m"),
               "-s", "0", "-e", "0.00001", "--scheduler", address]
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            if line.startswith("iter    1"):
                break
        p.send_signal(signal.SIGINT)
        err = p.stderr.read().strip().splitlines()
        assert p.wait(timeout=60) == 130 and err == ["ERROR: interrupted"], err
        assert not (tmp_path / "m").exists()
        deadline = time.monotonic() + 30
        while any(c.run(_group_threads).values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(c.run(_group_threads).values())
        done = subprocess.run(cmd[:-4] + ["--scheduler", address, "-q"], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    logs = capfd.readouterr().err  # the workers' (and nannies') own output
    assert "Exception" not in logs and "Traceback" not in logs, logs[-3000:]


def _group_threads() -> list:
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("distsvm-group")]


def test_a_newton_group_on_an_in_process_cluster_of_two_workers(a9a, tmp_path):
    """Two workers in one process (a notebook's `LocalCluster(processes=False)`): each has a
    mailbox of its own, and a part passed by reference is not changed by the other's sum;
    Newton ends at the process cluster's objective."""
    from distributed import Client, LocalCluster

    X, y = a9a
    store = ingest((X[:6000], y[:6000]), str(tmp_path / "s.zarr"), block_rows=3000)
    params = dict(solver="newton", loss="logistic", eps=1e-4)
    with local_client(2) as c:
        ref = jobs.train(store, client=c, **params)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc) as c:
        model = jobs.train(store, client=c, **params)
    assert model.summary["rounds"] == ref.summary["rounds"]
    assert model.summary["primal_objective"] == ref.summary["primal_objective"]
