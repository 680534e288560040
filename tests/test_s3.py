"""Remote storage against a real S3-compatible server: moto's standalone server over HTTP on
127.0.0.1 (``moto.server.ThreadedMotoServer``), reached through s3fs exactly as a bucket on
AWS or MinIO would be, with the commands run as ``distsvm.cli.main`` on the session's
2-worker LocalCluster (the workers read the blocks from the server themselves).

Transient errors are injected by :class:`FaultyProxy`, a small HTTP proxy in front of moto
that answers chosen requests with ``503 ServiceUnavailable`` instead of forwarding them;
botocore retries those up to ``config_kwargs={"retries": {"max_attempts": N}}`` attempts.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import json
import os
import socket
import threading

import numpy as np
import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from distsvm.cli import main  # noqa: E402
from distsvm.model import load_model, save_model  # noqa: E402

from .conftest import DATA  # noqa: E402

BUCKET = "distsvm-test"
STORE = f"s3://{BUCKET}/a9a.zarr"  # the first 2000 rows of a9a in 3 blocks, made by the fixture
CREDS = {"key": "testing", "secret": "testing"}
SERVICE_UNAVAILABLE = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable'
                       b'</Code><Message>injected by the test proxy</Message></Error>')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultyProxy(http.server.ThreadingHTTPServer):
    """Forwards every HTTP request to ``upstream``, except that it answers 503 to the next
    ``fail_next`` requests and, if ``fail_every`` = k > 0, to every k-th request."""

    daemon_threads = True

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.faults()
        super().__init__(("127.0.0.1", _free_port()), _ProxyHandler)

    def faults(self, fail_next: int = 0, fail_every: int = 0) -> None:
        with self.lock:
            self.fail_next, self.fail_every, self.requests, self.failed = (
                fail_next, fail_every, 0, 0)
            self.seen = collections.Counter()  # "METHOD /path?query" -> attempts

    def should_fail(self, request: str) -> bool:
        with self.lock:
            self.requests += 1
            self.seen[request] += 1
            fail = self.fail_next > 0 or (self.fail_every and self.requests % self.fail_every == 0)
            self.fail_next = max(0, self.fail_next - 1)
            self.failed += bool(fail)
            return bool(fail)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self):
        body = self._body()
        if self.server.should_fail(f"{self.command} {self.path}"):
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(SERVICE_UNAVAILABLE)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(SERVICE_UNAVAILABLE)
            return
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=30)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection", "date",
                                 "server"):
                self.send_header(k, v)
        # a HEAD response tells the object's size, which its (empty) body does not
        self.send_header("Content-Length", resp.getheader("Content-Length", "0")
                         if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The server's endpoint, storage options for it and for the faulty proxy in front, an
    s3fs filesystem, and a small LIBSVM file (the first 2000 rows of a9a)."""
    import lzma

    import s3fs

    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = FaultyProxy(port)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{port}"
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True,
                           use_listings_cache=False, **CREDS)
    fs.mkdir(BUCKET)
    tmp = tmp_path_factory.mktemp("s3")
    small = tmp / "small.svm"
    with lzma.open(DATA / "a9a.xz", "rt") as f, open(small, "w") as out:
        out.writelines(line for _, line in zip(range(2000), f))
    options = {"endpoint_url": endpoint, **CREDS}
    # --serial: the cluster-side ingest tasks are the same functions, and take 4x as long
    # against moto's server (one store is enough for these tests)
    fs.put(str(small), f"{BUCKET}/small.svm")
    assert main(["ingest", f"s3://{BUCKET}/small.svm", STORE, "--serial", "--block-rows", "700",
                 "-q", *opts(options)]) == 0  # the source file on S3 too
    try:
        yield {"endpoint": endpoint, "fs": fs, "proxy": proxy, "tmp": tmp, "source": small,
               "options": options,
               "proxied": {"endpoint_url": f"http://127.0.0.1:{proxy.server_address[1]}",
                           **CREDS}}
    finally:
        proxy.shutdown()
        server.stop()


def opts(options: dict, **extra) -> list[str]:
    """``--storage-option`` arguments for a dict of storage options."""
    out = []
    for k, v in {**options, **extra}.items():
        out += ["--storage-option", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
    return out


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def retries(n: int) -> dict:
    return {"config_kwargs": {"retries": {"max_attempts": n, "mode": "standard"}}}


def test_ingest_train_predict_export_round_trip_on_s3(client, s3, capsys):
    """Every command on s3:// URLs, and the model trained from the bucket is the one trained
    from a local copy of the same store (same blocks, same seed)."""
    o, tmp = opts(s3["options"]), s3["tmp"]
    model = f"s3://{BUCKET}/models/a9a.model"
    assert s3["fs"].exists(f"{BUCKET}/a9a.zarr/rows/000002/data/c/0")  # ingested by the fixture
    code, out, err = cli(capsys, "info", STORE, "--json", *o)
    assert code == 0, err
    info = json.loads(out)
    assert info["verified"] and info["n_rows"] == 2000 and len(info["blocks"]) == 3
    code, out, err = cli(capsys, "train", STORE, model, "--solver", "newton", "--json", *o)
    assert code == 0, err
    assert json.loads(out)["model"] == model and s3["fs"].exists(f"{BUCKET}/models/a9a.model")
    assert s3["fs"].ls(f"{BUCKET}/models") == [f"{BUCKET}/models/a9a.model"]  # no temp key
    code, out, err = cli(capsys, "predict", STORE, model, "--json", *o)
    assert code == 0 and 0.8 < json.loads(out)["accuracy"] < 0.9, err

    local, local_model = tmp / "local.zarr", tmp / "local.model"
    assert cli(capsys, "ingest", s3["source"], local, "--block-rows", 700, "-q")[0] == 0
    assert cli(capsys, "train", local, local_model, "--solver", "newton", "-q")[0] == 0
    remote = load_model(model, s3["options"])
    np.testing.assert_array_equal(remote.w, load_model(local_model).w)

    text = f"s3://{BUCKET}/models/a9a.liblinear"
    assert cli(capsys, "export", model, text, *o)[0] == 0
    assert s3["fs"].cat(f"{BUCKET}/models/a9a.liblinear").startswith(b"solver_type")
    assert cli(capsys, "import", text, f"s3://{BUCKET}/models/back.model", *o)[0] == 0
    back = load_model(f"s3://{BUCKET}/models/back.model", s3["options"])
    np.testing.assert_allclose(back.w, remote.w, rtol=1e-15)

    code, _, err = cli(capsys, "info", f"s3://{BUCKET}/nothing.zarr", *o)
    assert code == 1 and "ERROR:" in err and "nothing.zarr" in err


def test_model_write_is_atomic_on_s3(s3):
    """A model written over an existing one is replaced whole; a write that fails midway
    (the server refuses the upload) leaves the old model readable and nothing else behind."""
    from distsvm.model import Model

    so, fs = s3["options"], s3["fs"]
    url = f"s3://{BUCKET}/atomic/m.model"

    def model(v):
        return Model(w=np.full(5, float(v)), bias=-1.0, classes=(-1.0, 1.0), solver="dcd",
                     loss="hinge", params={}, n_features=5,
                     summary={"converged": np.bool_(True), "primal": np.float64(v)})

    save_model(model(1), url, so)
    save_model(model(2), url, so)
    np.testing.assert_array_equal(load_model(url, so).w, np.full(5, 2.0))
    assert load_model(url, so).summary == {"converged": True, "primal": 2.0}  # NumPy scalars

    proxy = s3["proxy"]
    proxy.faults(fail_next=10**6)  # the upload fails (every attempt answered 503)
    with pytest.raises(Exception):  # noqa: B017 - whichever error s3fs gives up with
        save_model(model(3), url, {**s3["proxied"], **retries(2)})
    proxy.faults()
    np.testing.assert_array_equal(load_model(url, so).w, np.full(5, 2.0))
    assert fs.ls(f"{BUCKET}/atomic") == [f"{BUCKET}/atomic/m.model"]


def test_transient_errors_are_retried_within_the_bound(client, s3, capsys):
    """503s from the server: a command succeeds while every request needs no more attempts
    than botocore's ``max_attempts``, and fails with a clear error after exactly that many."""
    proxy = s3["proxy"]
    o = opts(s3["proxied"], **retries(3))
    proxy.faults(fail_next=2)  # the first request succeeds at its 3rd and last attempt
    code, out, err = cli(capsys, "info", STORE, "--json", *o)
    assert code == 0 and json.loads(out)["verified"], err
    assert proxy.failed == 2
    model = f"s3://{BUCKET}/flaky.model"
    proxy.faults(fail_every=5)  # the workers' block reads fail now and then, each retried
    code, out, err = cli(capsys, "train", STORE, model, "--max-rounds", 10, "-q", "--json", *o)
    assert code == 0, err
    assert proxy.failed >= 2 and json.loads(out)["rounds"] == 10

    proxy.faults(fail_next=10**6)  # the server is down: bounded, then a one-line error
    code, out, err = cli(capsys, "info", STORE, *o)
    attempts = dict(proxy.seen)
    proxy.faults()
    assert code == 1
    assert err.startswith("ERROR:") and len(err.strip().splitlines()) == 1, err
    assert "503" in err or "ServiceUnavailable" in err or "Service Unavailable" in err, err
    # requests were retried up to max_attempts times, and then no more (zarr, looking for the
    # group's metadata under its v3 and v2 names, may ask for one key twice; lookups still
    # in flight when another fails are abandoned, so some keys see fewer attempts)
    assert 3 <= max(attempts.values()) <= 2 * 3, attempts


@pytest.mark.parametrize("where", ["local", "s3"])
def test_missing_or_damaged_chunk_fails_naming_array_and_chunk(client, s3, tmp_path, capsys,
                                                              where):
    """A chunk object deleted (Zarr would read it as zeros) or overwritten with garbage fails
    info and train with an error naming the array and the chunk; nothing is trained."""
    if where == "s3":
        fs, o = s3["fs"], opts(s3["options"])
        root = f"{BUCKET}/damaged.zarr"
        store = f"s3://{root}"
        fs.copy(STORE[len("s3://"):], root, recursive=True)
    else:
        import fsspec

        fs, o = fsspec.filesystem("file"), []
        root = store = str(tmp_path / "damaged.zarr")
        assert cli(capsys, "ingest", s3["source"], store, "--block-rows", 700, "-q")[0] == 0
    fs.rm(f"{root}/rows/000001/data/c/0")
    code, _, err = cli(capsys, "info", store, *o)
    assert code == 1 and "rows/000001/data" in err and "chunk 0" in err and "missing" in err
    code, _, err = cli(capsys, "train", store, tmp_path / "never.model", "--max-rounds", 5, *o)
    assert code == 1 and "rows/000001/data" in err and "missing" in err
    assert not os.path.exists(tmp_path / "never.model")

    fs.pipe(f"{root}/rows/000001/data/c/0", b"\x28\xb5\x2f\xfd garbage, not zstd")
    code, _, err = cli(capsys, "info", store, *o)
    assert code == 1 and "rows/000001/data" in err, err
    with fs.open(f"{root}/rows/000002/y/c/0", "rb") as f:  # a valid chunk of another array
        other = f.read()
    fs.pipe(f"{root}/rows/000001/data/c/0", other)
    code, _, err = cli(capsys, "info", store, *o)
    assert code == 1 and "rows/000001/data" in err and "chunk 0" in err, err


def test_storage_option_values(capsys):
    from distsvm.arguments import build_parser
    from distsvm.arguments import storage_options as _so

    a = build_parser().parse_args(["info", "s3://b/x.zarr", "--storage-option", "anon=false",
                                   "--storage-option", 'config_kwargs={"retries": {"mode": "x"}}',
                                   "--storage-option", "endpoint_url=http://h:9000"])
    assert _so(a) == {"anon": False, "config_kwargs": {"retries": {"mode": "x"}},
                      "endpoint_url": "http://h:9000"}
    assert _so(build_parser().parse_args(["info", "x.zarr"])) is None
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["info", "x.zarr", "--storage-option", "endpoint_url"])
    assert exit_.value.code == 2 and "expected KEY=VALUE" in capsys.readouterr().err
