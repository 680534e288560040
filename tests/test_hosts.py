"""Several hosts on one machine: a Dask scheduler, two workers, an S3 server (moto) and the
client each in a Linux network namespace of its own, joined by veth pairs to a bridge in a
further namespace (a private LAN, 10.77.0.0/24; the machine's own network is not touched).
Each process runs in a fresh working directory with its own HOME, and on the other hosts
the client's directory (and the repository's data/) is hidden under an empty tmpfs (a
mount namespace of their own): the workers can read nothing of the client's but the code.

From the client, the CLI ingests an uncompressed LIBSVM file of its own into an ``s3://``
store, trains against the scheduler while one worker host is SIGKILLed mid-run (its
nanny and worker process: the host is gone), writes the model to a local file, and
predicts; the model is checked against the same training on an embedded local cluster and
against LIBLINEAR's optimum.  Nothing may rely on a shared filesystem or on localhost: every
address is a LAN address, each host's 127.0.0.1 is its own.  deploy/README.md describes the
topology.  Needs root and ``ip netns`` (skipped otherwise); slow suite.

:func:`distsvm.ingest.workers_see` decides whether workers may read a local input file by
its path; on one machine they may (the first test, default suite).
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import DATA, REPO, liblinear_optimum, load_xy, local_client, primal_objective

SUBNET = "10.77.0"
ADDRESSES = {"client": 1, "scheduler": 2, "worker1": 3, "worker2": 4, "s3": 5}
SCHEDULER = f"tcp://{SUBNET}.2:8786"
ENDPOINT = f"http://{SUBNET}.5:5000"
BUCKET = "hosts"
STORE = f"s3://{BUCKET}/a9a.zarr"
ROWS = 3000  # the first rows of the in-repo a9a, ingested in 6 blocks (3 per worker)
# LIBLINEAR's -s 2 (line-search Newton, squared hinge): every round reads every block, so
# the lost host's blocks must be read again from S3 by the other worker
TRAIN = ["-s", "2", "-c", "1", "-e", "1e-6", "--max-rounds", "100"]
KILL_AT = 2  # SIGKILL worker2's host once this round (Newton iteration) is logged
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "TERM")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Hosts:
    """Network namespaces ``<prefix>-<host>`` on a bridge in ``<prefix>-lan``; processes
    started in them by :meth:`start` (each in its own session, so that a host's processes
    can be killed together) with some directories hidden."""

    def __init__(self, prefix: str):
        self.prefix, self.names, self.procs = prefix, [], {}

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def _add_ns(self, host: str) -> None:
        _ip("netns", "add", self.ns(host))
        self.names.append(self.ns(host))
        _ip("-n", self.ns(host), "link", "set", "lo", "up")

    def lan(self) -> None:
        self._add_ns("lan")
        _ip("-n", self.ns("lan"), "link", "add", "br0", "type", "bridge")
        _ip("-n", self.ns("lan"), "link", "set", "br0", "up")

    def add(self, host: str, address: str) -> None:
        self._add_ns(host)
        port = f"p{len(self.names)}"
        _ip("-n", self.ns("lan"), "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", self.ns(host))
        _ip("-n", self.ns("lan"), "link", "set", port, "master", "br0")
        _ip("-n", self.ns("lan"), "link", "set", port, "up")
        _ip("-n", self.ns(host), "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", self.ns(host), "link", "set", "eth0", "up")

    def command(self, host: str, argv: list[str], hide: list[str] = ()) -> list[str]:
        """``argv`` run in ``host``'s namespace, with each of ``hide`` covered by an empty
        tmpfs in a mount namespace of its own."""
        mounts = " && ".join(f"mount -t tmpfs none '{d}'" for d in hide) or "true"
        return ["ip", "netns", "exec", self.ns(host), "unshare", "--mount", "--", "sh", "-c",
                f'{mounts} && exec "$@"', "sh", *argv]

    def start(self, host: str, argv: list[str], home: str, env: dict, hide=()) -> None:
        with open(os.path.join(home, "log.txt"), "w") as log:
            self.procs[host] = subprocess.Popen(
                self.command(host, argv, hide), cwd=home, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, host: str) -> None:
        """SIGKILL every process of ``host`` (the host is lost)."""
        proc = self.procs[host]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def close(self) -> None:
        for host in list(self.procs):
            self.kill(host)
        for name in reversed(self.names):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def test_workers_see_a_local_file_by_its_absolute_path(client, tmp_path, monkeypatch):
    """On one machine the workers read the client's file themselves, by its absolute path
    (the workers' working directory is not the client's); a file they do not see is streamed
    from the client."""
    from distsvm.ingest import workers_see

    (tmp_path / "f.svm").write_text("+1 1:1\n-1 2:1\n")
    assert workers_see(client, str(tmp_path / "f.svm")) == str(tmp_path / "f.svm")
    monkeypatch.chdir(tmp_path)
    assert workers_see(client, "f.svm") == str(tmp_path / "f.svm")
    assert workers_see(client, "absent.svm") is None


def _can_make_namespaces() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux (network namespaces)"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "needs iproute2's ip and util-linux's unshare"
    name = f"distsvm-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _remove_stale_namespaces() -> None:
    """Delete the namespaces of an earlier run whose process is gone (killed before its
    teardown could run)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (line.split()[0] for line in listed.splitlines() if line.strip()):
        pid = name[len("dsvm"):].split("-")[0]
        if name.startswith("dsvm") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _log(home: str, lines: int = 40) -> str:
    try:
        with open(os.path.join(home, "log.txt")) as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


@pytest.fixture(scope="module")
def lan(tmp_path_factory):
    """The hosts with their processes running: yields (hosts, client's dir, client's env,
    {host: dir})."""
    why = _can_make_namespaces()
    if why:
        pytest.skip(why)
    _remove_stale_namespaces()
    hosts = Hosts(f"dsvm{os.getpid()}")
    homes = {h: str(tmp_path_factory.mktemp(h)) for h in ADDRESSES}
    client_dir = homes["client"]
    hidden = [client_dir, str(DATA)]
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_DEFAULT_REGION": "us-east-1"}

    def env(host: str) -> dict:
        return {**{k: os.environ[k] for k in ENV_KEEP if k in os.environ}, **creds,
                "HOME": homes[host], "TMPDIR": homes[host], "PYTHONPATH": str(REPO),
                "PYTHONUNBUFFERED": "1"}

    dask = [sys.executable, "-m", "dask"]
    try:
        hosts.lan()
        for h, i in ADDRESSES.items():
            hosts.add(h, f"{SUBNET}.{i}")
        hosts.start("s3", [sys.executable, "-m", "moto.server", "-H", f"{SUBNET}.5", "-p",
                           "5000"], homes["s3"], env("s3"), hidden)
        hosts.start("scheduler", [*dask, "scheduler", "--host", f"{SUBNET}.2", "--port",
                                  "8786", "--no-dashboard"], homes["scheduler"],
                    env("scheduler"), hidden)
        for h in ("worker1", "worker2"):
            hosts.start(h, [*dask, "worker", SCHEDULER, "--host", f"{SUBNET}.{ADDRESSES[h]}",
                            "--nthreads", "1", "--memory-limit", "2GiB", "--no-dashboard",
                            "--local-directory", homes[h]], homes[h], env(h), hidden)
        # from the client's host: the scheduler has both workers, the server a bucket
        ready = subprocess.run(hosts.command("client", [sys.executable, "-c", READY]),
                               cwd=client_dir, env=env("client"), capture_output=True,
                               text=True, timeout=180)
        assert ready.returncode == 0, ready.stderr + "".join(
            f"\n--- {h}:\n{_log(homes[h])}" for h in homes if h != "client")
        yield hosts, client_dir, env("client"), homes
    finally:
        hosts.close()


READY = f"""
import time
from distributed import Client
import s3fs
with Client({SCHEDULER!r}, timeout=60) as c:
    c.wait_for_workers(2, timeout=120)
start = time.monotonic()
while True:
    try:
        s3fs.S3FileSystem(endpoint_url={ENDPOINT!r}).mkdir({BUCKET!r})
        break
    except Exception:
        if time.monotonic() - start > 60:
            raise
        time.sleep(0.5)
"""


def _distsvm(*args) -> list[str]:
    return [sys.executable, "-m", "distsvm.cli", *map(str, args)]


@pytest.mark.slow
def test_ingest_train_with_a_host_lost_and_predict_across_hosts(lan, tmp_path):
    hosts, client_dir, env, homes = lan
    remote = ["--scheduler", SCHEDULER, "--storage-option", f"endpoint_url={ENDPOINT}"]

    def client(*args, timeout=300):
        out = subprocess.run(hosts.command("client", _distsvm(*args)), cwd=client_dir,
                             env=env, capture_output=True, text=True, timeout=timeout)
        with open(os.path.join(client_dir, f"{args[0]}.log"), "w") as f:
            f.write(out.stderr)
        assert out.returncode == 0, out.stderr + "".join(
            f"\n--- {h}:\n{_log(homes[h])}" for h in homes if h != "client")
        return json.loads(out.stdout)

    # the client's own uncompressed file, by a relative path: the workers cannot read it
    with lzma.open(DATA / "a9a.xz", "rt") as f, open(os.path.join(client_dir, "a9a.svm"),
                                                     "w") as out:
        out.writelines(line for _, line in zip(range(ROWS), f))
    t0 = time.monotonic()
    info = client("ingest", "a9a.svm", STORE, "--block-rows", 500, "--json", *remote)
    assert info["n_rows"] == ROWS and info["n_blocks"] == 6

    t1 = time.monotonic()
    # train; worker2's host is SIGKILLed once round KILL_AT is logged
    argv = hosts.command("client", _distsvm("train", STORE, "a9a.model", *TRAIN, "--json",
                                            *remote))
    proc = subprocess.Popen(argv, cwd=client_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err, killed = [], None
    deadline = time.monotonic() + 600
    try:
        for line in proc.stderr:
            err.append(line)
            words = line.split()
            if killed is None and words[:1] in (["round"], ["iter"]) and int(words[1]) >= KILL_AT:
                hosts.kill("worker2")
                killed = int(words[1])
            assert time.monotonic() < deadline, "".join(err[-20:])
        out = proc.stdout.read()
        with open(os.path.join(client_dir, "train.log"), "w") as f:
            f.writelines(err)
        notes = [line for line in err if not line.startswith(("round", "iter"))]
        assert proc.wait(timeout=60) == 0, "".join(notes + err[-5:]) + "".join(
            f"\n--- {h}:\n{_log(homes[h])}" for h in homes if h != "client")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed is not None, "".join(err)
    result = json.loads(out)
    assert result["converged"] and result["rounds"] > killed, result
    assert any("left the cluster" in line for line in err), "".join(err)  # noticed mid-run
    model_path = os.path.join(client_dir, "a9a.model")
    assert os.path.isfile(model_path)  # written by the client, to its own directory

    t2 = time.monotonic()
    pred = client("predict", STORE, "a9a.model", "--json", *remote)

    # the same training on a local cluster of this host, from local files
    from distsvm.ingest import ingest
    from distsvm.jobs import train
    from distsvm.model import load_model
    from distsvm.prediction import predict

    model = load_model(model_path)
    t3 = time.monotonic()
    with local_client(2) as c:
        d = ingest(os.path.join(client_dir, "a9a.svm"), str(tmp_path / "local.zarr"), client=c,
                   block_rows=500)
        local_model = train(d, client=c, solver="newton", loss="squared_hinge", C=1.0,
                            eps=1e-6, max_rounds=100)
        local_pred = predict(d, local_model, client=c)
    t4 = time.monotonic()
    X, y = load_xy(DATA / "a9a.xz", 123)
    X, y = X[:ROWS, :model.n_features], y[:ROWS]  # the file's features (122 in these rows)
    w, w_local = model.w, local_model.w
    _, best = liblinear_optimum(X, y, "squared_hinge", eps=1e-8)
    f, f_local = (primal_objective(v, X, y, "squared_hinge") for v in (w, w_local))
    assert abs(f - best) <= 1e-4 * best, (f, best)
    assert abs(f - f_local) <= 1e-4 * f_local, (f, f_local)
    assert abs(pred["accuracy"] - local_pred["accuracy"]) <= 2 / ROWS, (pred, local_pred)
    print(f"\nhosts: killed worker2 at round {killed} of {result['rounds']}; objective "
          f"{f:.8g} (local cluster {f_local:.8g}, LIBLINEAR {best:.8g}); accuracy "
          f"{pred['accuracy']:.4f} (local {local_pred['accuracy']:.4f}); seconds: ingest "
          f"{t1 - t0:.1f}, train {t2 - t1:.1f}, predict {t3 - t2:.1f}, local {t4 - t3:.1f}")
