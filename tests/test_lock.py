"""One writer at a time (storage/lock.py): the lock object on a local disk and on the S3 test
server (moto), real concurrent processes appending, publishing and running the pipeline, a
SIGKILLed holder's lock recovered; and what a killed ingest leaves, removed by the next one
and listed by ``info`` on the folder."""

from __future__ import annotations

import json
import lzma
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from distsvm import registry
from distsvm.cli import main
from distsvm.storage import open_dataset
from distsvm.storage.leftovers import leftovers_of, scan
from distsvm.storage.lock import Lock, LockHeldError, LockLostError, lock_url, read_lock

from .conftest import DATA, REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
BUCKET = "distsvm-lock"
CREDS = {"key": "testing", "secret": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 (as tests/test_s3.py's): storage options reaching it."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    import s3fs

    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", **CREDS}
    s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir(BUCKET)
    try:
        yield options
    finally:
        server.stop()


def _python(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# a process that takes the lock of argv[1] (storage options argv[2]), says so, and waits
HOLDER = """
    import json, sys, time
    from distsvm.storage.lock import Lock
    lock = Lock(sys.argv[1], json.loads(sys.argv[2]) or None, timeout=0).acquire()
    print("held", flush=True)
    time.sleep(600)
"""


def _killed_holder(url: str, options: dict | None) -> int:
    """Start a process holding the lock of ``url``, SIGKILL it once it holds it; its pid."""
    p = _python(HOLDER, url, json.dumps(options or {}))
    assert p.stdout.readline().strip() == "held", p.stderr.read()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return p.pid


def _contend(url: str, options: dict | None):
    """Lock semantics against one store: exclusive, re-entrant, the holder named after the
    timeout, a dead holder's lock taken over by exactly one of two waiters."""
    with Lock(url, options, timeout=0, run="first") as first:
        with Lock(url, options, timeout=0):  # re-entrant in this thread
            pass
        errors = []

        def other():
            try:
                with Lock(url, options, timeout=0.3):
                    errors.append(None)
            except LockHeldError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert errors[0] is not None and "run first (pid" in errors[0] and "waited 0.3s" in \
            errors[0]
        first.check()
    assert read_lock(lock_url(url), options) is None  # released
    dead = _killed_holder(url, options)
    assert read_lock(lock_url(url), options)["owner"]["pid"] == dead
    won, barrier = [], threading.Barrier(2)

    def waiter(k):
        barrier.wait()
        lock = Lock(url, options, timeout=10, run=f"w{k}").acquire()
        won.append((k, lock.took_over is not None))
        time.sleep(0.3)
        lock.release()

    threads = [threading.Thread(target=waiter, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(k for k, _ in won) == [0, 1]
    assert [took for _, took in won] == [True, False]  # one took over, the other waited
    # a heartbeat that stopped (a hung or partitioned holder elsewhere) goes stale
    hung = Lock(url, options, timeout=0, heartbeat=3600, stale_after=0.5)
    t = threading.Thread(target=hung.acquire)  # another thread: no re-entry below
    t.start()
    t.join()
    hung._stop.set()
    with Lock(url, options, timeout=5) as later:
        assert later.took_over["owner"]["run"] == hung.run
        with pytest.raises(LockLostError, match="taken over by another writer"):
            hung.check()
        hung.release()  # lost: the lock object, now later's, stays
        later.check()
    assert read_lock(lock_url(url), options) is None


def test_lock_on_disk(tmp_path):
    _contend(str(tmp_path / "d.zarr"), None)


@pytest.mark.slow
def test_lock_on_s3(s3):
    _contend(f"s3://{BUCKET}/unit/d.zarr", s3)


# processes publish a model to one registry at once (argv: registry, options, go file)
PUBLISHER = """
    import json, os, sys, time
    import numpy as np
    from distsvm import registry
    from distsvm.model import Model
    m = Model(w=np.ones(3), bias=-1.0, classes=(-1.0, 1.0), solver="dcd", loss="hinge",
              params={"C": 1.0}, summary={}, n_features=3)
    print("ready", flush=True)
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.005)
    print(registry.publish(sys.argv[1], "m", m, metrics={}, lineage={},
                           storage_options=json.loads(sys.argv[2]) or None))
"""


@pytest.mark.parametrize("where", ["disk", pytest.param("s3", marks=pytest.mark.slow)])
def test_concurrent_publishes_get_distinct_versions(tmp_path, where, request):
    options = request.getfixturevalue("s3") if where == "s3" else None
    reg = f"s3://{BUCKET}/registry" if where == "s3" else str(tmp_path / "registry")
    go = tmp_path / "go"
    procs = [_python(PUBLISHER, reg, json.dumps(options or {}), go) for _ in range(2)]
    assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 2
    go.touch()  # both publish at once
    out = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in out]
    assert sorted(int(o) for o, _ in out) == [1, 2]
    assert registry.versions(reg, "m", options) == [1, 2]


def test_killed_ingest_leftovers_listed_and_removed(tmp_path, capsys):
    """An ingest SIGKILLed while writing leaves its staging folder and its lock; ``info`` on
    the folder lists both, and the next ingest to that path removes them and commits."""
    src = tmp_path / "a.svm"
    src.write_text("+1 1:1 2:0.5\n-1 1:-1 3:1\n+1 2:1\n-1 3:-1\n")
    store = tmp_path / "a.zarr"
    p = _python("""
        import os, signal, sys
        from distsvm.ingest import staging
        with staging(sys.argv[1], False, None, None):
            os.kill(os.getpid(), signal.SIGKILL)
    """, store)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    left = leftovers_of(str(store))
    assert len(left) == 1 and ".a.zarr.staging-" in left[0]
    kinds = {f["kind"] for f in scan(str(tmp_path))}
    assert kinds == {"staging folder", "stale lock"}
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 leftover(s)" in out and ".a.zarr.staging-" in out
    assert "stale lock" in out and f"pid {p.pid}" in out
    assert main(["ingest", str(src), str(store), "--serial", "-q"]) == 0
    assert leftovers_of(str(store)) == [] and scan(str(tmp_path)) == []
    assert open_dataset(str(store)).meta.n_rows == 4


@pytest.fixture(scope="module")
def holdout(tmp_path_factory) -> str:
    """A holdout store of 500 a9a rows (and its LIBSVM file beside it, hold.svm)."""
    d = tmp_path_factory.mktemp("holdout")
    with lzma.open(DATA / "a9a.xz", "rt") as f:
        rows = [next(f) for _ in range(1500)][1000:]
    (d / "hold.svm").write_text("".join(rows))
    assert main(["ingest", str(d / "hold.svm"), str(d / "hold.zarr"), "--serial", "-q",
                 "--n-features", "123"]) == 0
    return str(d / "hold.zarr")


def _pipeline(tmp_path, dataset: str, reg: str, holdout: str, options: dict | None = None,
              **extra) -> pathlib.Path:
    """A pipeline spec over two a9a partitions (500 rows each) in ``tmp_path/in``."""
    with lzma.open(DATA / "a9a.xz", "rt") as f:
        rows = [next(f) for _ in range(1000)]
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "p1.svm").write_text("".join(rows[:500]))
    (tmp_path / "in" / "p2.svm").write_text("".join(rows[500:]))
    doc = {"name": "a9a", "dataset": dataset, "partitions": str(tmp_path / "in" / "*.svm"),
           "holdout": holdout, "registry": reg, "ingest": {"block_rows": 250, "n_features": 123},
           "solver": {"solver": "newton", "loss": "squared_hinge"}, **extra}
    if options:
        doc["storage_options"] = options
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(doc))
    return path


def _cli(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "distsvm.cli", *map(str, args)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _two_runs_after_a_killed_one(spec, dataset: str, reg: str, options: dict | None):
    """A run SIGKILLed holding the dataset's lock, then two runs at once: the first takes the
    stale lock over, the other waits for it; each partition is appended once, one version."""
    _killed_holder(dataset, options)
    procs = [_cli("pipeline", "run", spec, "--json") for _ in range(2)]
    out = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in out]
    err = "".join(e for _, e in out)
    assert err.count("took over the stale lock") == 1 and "waiting up to 60s" in err
    ledger = open_dataset(dataset, options).meta.source["appended"]
    assert [r["partition"] for r in ledger] == ["p1.svm", "p2.svm"]  # once each
    assert registry.versions(reg, "a9a", options) == [1]
    assert [json.loads(o)["version"] for o, _ in out] == [1, 1]
    assert read_lock(lock_url(dataset), options) is None


def test_two_pipeline_runs_at_once_on_disk(tmp_path, holdout, capsys):
    dataset, reg = str(tmp_path / "data.zarr"), str(tmp_path / "registry")
    spec = _pipeline(tmp_path, dataset, reg, holdout)
    _two_runs_after_a_killed_one(spec, dataset, reg, None)
    busy = Lock(dataset, run="busy")  # a live holder (another thread): exit 4 at once
    t = threading.Thread(target=busy.acquire)
    t.start()
    t.join()
    try:
        assert main(["pipeline", "run", str(spec), "--lock-timeout", "0", "-q"]) == 4
    finally:
        busy.release()
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"ERROR: pipeline a9a: dataset {dataset}: another writer holds the "
                          "lock") and "run busy (pid" in err


@pytest.mark.slow
def test_two_pipeline_runs_at_once_on_s3(tmp_path, s3, holdout):
    dataset, reg = f"s3://{BUCKET}/pipe/data.zarr", f"s3://{BUCKET}/pipe/registry"
    remote = f"s3://{BUCKET}/pipe/hold.zarr"
    assert main(["ingest", holdout.removesuffix(".zarr") + ".svm", remote, "--serial", "-q",
                 "--n-features", "123",
                 *[f"--storage-option={k}={v}" for k, v in s3.items()]]) == 0
    spec = _pipeline(tmp_path, dataset, reg, remote, s3)
    _two_runs_after_a_killed_one(spec, dataset, reg, s3)


@pytest.mark.slow
def test_killed_ingest_on_s3_is_cleared_by_the_next(tmp_path, s3):
    """On S3 an ingest writes in place: a SIGKILLed one leaves an uncommitted group (and its
    lock); ``info`` on the prefix lists both, the next ingest removes it and commits."""
    src = tmp_path / "a.svm"
    src.write_text("+1 1:1 2:0.5\n-1 1:-1 3:1\n+1 2:1\n-1 3:-1\n")
    store = f"s3://{BUCKET}/killed/a.zarr"
    p = _python("""
        import json, os, signal, sys
        from distsvm.ingest import staging
        with staging(sys.argv[1], False, json.loads(sys.argv[2]), None):
            os.kill(os.getpid(), signal.SIGKILL)
    """, store, json.dumps(s3))
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert leftovers_of(store, s3) == [store]
    assert {f["kind"] for f in scan(f"s3://{BUCKET}/killed", s3)} == {"uncommitted store",
                                                                      "stale lock"}
    so = [f"--storage-option={k}={v}" for k, v in s3.items()]
    assert main(["ingest", str(src), store, "--serial", "-q", *so]) == 0
    assert leftovers_of(store, s3) == [] and scan(f"s3://{BUCKET}/killed", s3) == []
    assert open_dataset(store, s3).meta.n_rows == 4


def test_ingest_append_at_once(tmp_path):
    """Two ``ingest --append`` of one file at once (the first creates the store): appended
    once; again later: skipped; that file changed: refused, store unchanged; a file of that
    name elsewhere: a new partition (the ledger is keyed by path, issue 29.7)."""
    src = tmp_path / "p1.svm"
    src.write_text("+1 1:1 2:0.5\n-1 1:-1 3:1\n+1 2:1\n-1 3:-1\n")
    store = str(tmp_path / "d.zarr")
    p = _cli("ingest", src, store, "--append", "--serial", "-q")
    codes = [main(["ingest", str(src), store, "--append", "--serial", "-q"])]  # meanwhile
    p.communicate(timeout=120)
    codes.append(main(["ingest", str(src), store, "--append", "--serial", "-q"]))  # later
    assert [p.returncode, *codes] == [0, 0, 0]
    meta = open_dataset(store).meta
    assert meta.n_rows == 4 and [r["partition"] for r in meta.source["appended"]] == ["p1.svm"]
    src.write_text("+1 1:2\n-1 2:2\n")
    assert main(["ingest", str(src), store, "--append", "--serial", "-q"]) == 1
    assert open_dataset(store).meta == meta and leftovers_of(store) == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "p1.svm").write_text("+1 1:2\n-1 2:2\n")
    assert main(["ingest", str(tmp_path / "other" / "p1.svm"), store, "--append", "--serial",
                 "-q"]) == 0
    assert open_dataset(store).meta.n_rows == 6 and leftovers_of(store) == []


# ------------------------------------------------------------------ one identity per store
# Issue 30 class 1: a store spelled relative, through a symlink or absolute is one store,
# with one lock; a process never waits on a lock it holds itself.

def _finish(p: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``p``'s output, or kill it and fail if it has not ended within ``timeout`` seconds."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"still running after {timeout}s (waiting on its own lock?): {err}")


def test_append_to_a_relative_store_path_does_not_wait_on_itself(tmp_path):
    """``ingest --append`` with a relative store path to an existing store: the command's own
    lock is not another writer's (it waited 60 s and exited 4, ignoring --lock-timeout)."""
    (tmp_path / "app").mkdir()
    (tmp_path / "p1.svm").write_text("+1 1:1 2:0.5\n-1 1:-1 3:1\n")
    (tmp_path / "p2.svm").write_text("+1 2:1\n-1 3:-1\n")
    assert main(["ingest", str(tmp_path / "p1.svm"), str(tmp_path / "app" / "ds.zarr"),
                 "--append", "--serial", "-q"]) == 0
    p = subprocess.Popen([sys.executable, "-m", "distsvm.cli", "ingest", "p2.svm", "app/ds.zarr",
                          "--append", "--lock-timeout", "5", "--serial", "-q"], cwd=tmp_path,
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = _finish(p, 40)
    assert p.returncode == 0, err
    meta = open_dataset(str(tmp_path / "app" / "ds.zarr")).meta
    assert [r["partition"] for r in meta.source["appended"]] == ["p1.svm", "p2.svm"]
    assert meta.n_rows == 4 and leftovers_of(str(tmp_path / "app" / "ds.zarr")) == []


def test_pipeline_with_relative_paths_does_not_wait_on_itself(tmp_path, holdout):
    """A scheduled pipeline configured with relative paths (run from its folder) appends,
    trains and publishes; run again, it is a no-op — never exit 4 on its own lock."""
    spec = _pipeline(tmp_path, "data.zarr", "registry", holdout, lock_timeout=5)
    doc = json.loads(spec.read_text())
    doc["partitions"] = "in/*.svm"
    spec.write_text(json.dumps(doc))
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-m", "distsvm.cli", "pipeline", "run",
                              "pipeline.json", "-q"], cwd=tmp_path, env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = _finish(p, 120)
        assert p.returncode == 0, err
    ledger = open_dataset(str(tmp_path / "data.zarr")).meta.source["appended"]
    assert [r["partition"] for r in ledger] == ["p1.svm", "p2.svm"]
    assert registry.versions(str(tmp_path / "registry"), "a9a") == [1]


def test_every_spelling_of_a_store_is_one_lock(tmp_path):
    """A real second process holds the store's lock under one spelling (a symlink to it, or
    a relative path from its own working directory); a writer naming the store another way
    waits for it and exits 4 after --lock-timeout, naming that process."""
    src = tmp_path / "p1.svm"
    src.write_text("+1 1:1 2:0.5\n-1 1:-1 3:1\n")
    (tmp_path / "p2.svm").write_text("+1 2:1\n")
    real = tmp_path / "data" / "ds.zarr"
    real.parent.mkdir()
    assert main(["ingest", str(src), str(real), "--serial", "-q"]) == 0
    (tmp_path / "link.zarr").symlink_to(real)
    (tmp_path / "dir-link").symlink_to(real.parent)
    for spelling, cwd in [(str(tmp_path / "link.zarr"), tmp_path),
                          ("ds.zarr", real.parent),
                          (str(tmp_path / "dir-link" / "ds.zarr"), tmp_path)]:
        holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER), spelling,
                                   "{}"], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held", holder.stderr.read()
            start = time.monotonic()
            p = _cli("ingest", tmp_path / "p2.svm", real, "--append", "--lock-timeout", "1",
                     "--serial", "-q")
            _, err = _finish(p, 60)
            assert p.returncode == 4, (spelling, err)
            assert f"pid {holder.pid} " in err and err.count("\n") == 1, err
            assert time.monotonic() - start < 30
        finally:
            holder.kill()
            holder.wait()
    assert open_dataset(str(real)).meta.n_rows == 2  # nothing appended meanwhile


def test_a_lock_naming_this_process_that_it_does_not_hold_is_taken_over_at_once(tmp_path):
    """A lock object naming this very process (host, PID namespace, pid) with a token none
    of its locks has — a killed writer's whose pid this process now has (containers
    restart with the same pids) — is not another writer's: taken over at once, not waited
    on until its heartbeat ages (30 s)."""
    from distsvm.storage import lock as locks

    url = str(tmp_path / "d.zarr")
    now = time.time()
    doc = {"owner": {"host": socket.gethostname(), "pid": os.getpid(),
                     "pidns": locks._pidns(), "run": "before-restart"},
           "guards": url, "token": "0" * 32, "acquired": locks._iso(now),
           "heartbeat": locks._iso(now), "heartbeat_unix": now, "beat": 0, "stale_after": 30}
    pathlib.Path(lock_url(url)).write_text(json.dumps(doc))
    start = time.monotonic()
    with Lock(url, timeout=2) as again:
        assert again.took_over["owner"]["run"] == "before-restart"
    assert time.monotonic() - start < 1.5
    assert read_lock(lock_url(url)) is None
