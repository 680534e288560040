"""Every input error is one line (issue 19, item 4): corrupt compressed input, non-finite
models, relative and ``~`` paths, TLS options of the CLI."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from distsvm import cli
from distsvm.storage import InputFormatError, libsvm

from .conftest import DATA

COMPRESS = {".xz": lzma.compress, ".gz": gzip.compress, ".bz2": bz2.compress}


@pytest.fixture(scope="module")
def raw_text():
    raw = lzma.decompress((DATA / "a9a.t.xz").read_bytes())[:120_000]
    return raw[: raw.rfind(b"\n") + 1]


def _damaged(raw: bytes, ext: str, how: str) -> bytes:
    c = COMPRESS[ext](raw)
    if how == "truncated":
        return c[: len(c) * 2 // 3]
    if how == "corrupt":  # flip bytes in the middle of the stream
        b = bytearray(c)
        for k in range(len(b) // 2, len(b) // 2 + 8):
            b[k] ^= 0xA5
        return bytes(b)
    return raw[:500]  # "plain": not compressed at all, despite the extension


@pytest.mark.parametrize("ext", sorted(COMPRESS))
@pytest.mark.parametrize("how", ["truncated", "corrupt", "plain"])
def test_damaged_compressed_input_names_the_file(tmp_path, raw_text, ext, how):
    path = tmp_path / f"bad{ext}"
    path.write_bytes(_damaged(raw_text, ext, how))
    with pytest.raises(InputFormatError) as e:
        for _ in libsvm.iter_chunks(path, 4096):
            pass
    assert e.value.path == str(path) and f"truncated or corrupt {ext} input" in str(e.value)
    if how == "truncated" and ext != ".bz2":  # the pieces before the cut were read: the
        # line says where (bz2 decodes whole 900 kB blocks: nothing before the cut here)
        assert e.value.line > 100
    # the command: one ERROR line naming the file, exit status 1
    code = cli.main(["ingest", str(path), str(tmp_path / "s"), "--serial", "-q"])
    assert code == 1


def test_damaged_compressed_input_cli_line(tmp_path, raw_text, capsys):
    path = tmp_path / "cut.xz"
    path.write_bytes(_damaged(raw_text, ".xz", "truncated"))
    assert cli.main(["ingest", str(path), str(tmp_path / "s"), "--serial", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ERROR: {path}:1: truncated or corrupt .xz")
    assert not (tmp_path / "s").exists()


# ----------------------------------------------------------------- TLS options of the CLI

def test_tls_options_build_a_security(tls_files):
    from distsvm import cluster

    cert, key = tls_files
    config = cluster.tls_config("tls://127.0.0.1:8786", cert, cert, key)
    security = cluster.tls_security(config)
    assert security.require_encryption
    assert (security.tls_ca_file, security.tls_client_cert, security.tls_client_key) == \
        (cert, cert, key)
    assert security.get_connection_args("client")["ssl_context"] is not None
    assert cluster.tls_config("tcp://h:1") == {}
    for args, message in [
            (("tcp://h:1", cert, cert, key), "are for a TLS scheduler"),
            ((None, cert, cert, None), r"got --scheduler \(none\)"),
            (("tls://h:1", None, cert, key), "TLS needs --tls-ca-file too"),
            (("tls://h:1", cert, None, None), "TLS needs --tls-cert too"),
            (("tls://h:1", cert, cert, "/nonexistent.pem"), "--tls-key /nonexistent.pem: no")]:
        with pytest.raises(ValueError, match=message):
            cluster.tls_config(*args)


def test_cli_against_a_tls_scheduler(tmp_path, tls_files, capsys):
    """A real TLS scheduler (in this process): the CLI connects with the options, and
    without them (or with them for a tcp:// address) says so in one line."""
    from distributed import LocalCluster
    from distributed.security import Security

    cert, key = tls_files
    security = Security(tls_ca_file=cert, tls_scheduler_cert=cert, tls_scheduler_key=key,
                        tls_worker_cert=cert, tls_worker_key=key, tls_client_cert=cert,
                        tls_client_key=key, require_encryption=True)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tls://",
                      host="127.0.0.1", dashboard_address=":0", security=security) as lc:
        address = lc.scheduler_address
        assert address.startswith("tls://")
        generate = ["generate", "--rows", "60", "--features", "8", "--nnz-per-row", "3",
                    "--scheduler", address, "-q"]
        tls = ["--tls-ca-file", cert, "--tls-cert", cert, "--tls-key", key]
        assert cli.main([*generate, str(tmp_path / "ok"), *tls]) == 0
        assert (tmp_path / "ok").exists()
        capsys.readouterr()
        assert cli.main([*generate, str(tmp_path / "no")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"ERROR: the Dask scheduler {address} "
                                                   "talks TLS: give the client's certificates")
    assert cli.main([*generate[:-3], "--scheduler", "tcp://127.0.0.1:1", "-q", *tls,
                     str(tmp_path / "tcp")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "are for a TLS scheduler" in err[0]
    assert not (tmp_path / "no").exists() and not (tmp_path / "tcp").exists()


# ----------------------------------------------------------------- paths

def test_relative_and_home_paths_are_resolved_before_workers_see_them(tmp_path, monkeypatch,
                                                                      client):
    """The session cluster's worker processes work in the directory pytest started in: the
    client, in another one, names the input, the store and the home-relative paths as it
    sees them, and the workers must open the same files."""
    import numpy as np

    from distsvm import prediction
    from distsvm.ingest import ingest
    from distsvm.model import Model
    from distsvm.storage import open_dataset

    raw = lzma.decompress((DATA / "a9a.t.xz").read_bytes())[:60_000]
    (tmp_path / "rel.svm").write_bytes(raw[: raw.rfind(b"\n") + 1])
    monkeypatch.chdir(tmp_path)
    worker_dirs = set(client.run(__import__("os").getcwd).values())
    assert str(tmp_path) not in worker_dirs
    # parsed by the workers (an uncompressed file is split into byte ranges they read)
    d = ingest("rel.svm", "rel.zarr", client=client, block_rows=100, chunk_mb=0.01)
    assert d.url == str(tmp_path / "rel.zarr") and (tmp_path / "rel.zarr").is_dir()
    assert open_dataset("rel.zarr").url == str(tmp_path / "rel.zarr")
    # predicted by the workers: a model that says -1 everywhere (a9a's majority)
    model = Model(np.zeros(d.meta.n_features), -1.0, (-1.0, 1.0), "dcd", "hinge", {}, {},
                  d.meta.n_features)
    counts = dict(zip(d.meta.classes, d.meta.class_counts))
    got = prediction.predict("rel.zarr", model, client=client)
    assert got["accuracy"] == counts[-1.0] / d.meta.n_rows
    monkeypatch.setenv("HOME", str(tmp_path))
    d = ingest("~/rel.svm", "~/home.zarr", client=client, block_rows=100, chunk_mb=0.01)
    assert d.url == str(tmp_path / "home.zarr") and (tmp_path / "home.zarr").is_dir()
    assert np.array_equal(open_dataset("~/home.zarr").meta.class_counts, d.meta.class_counts)
    # a damaged compressed input, streamed from here to the workers: one error, no store
    (tmp_path / "cut.gz").write_bytes(gzip.compress(raw)[:-20])
    with pytest.raises(InputFormatError, match=f"^{tmp_path}/cut.gz:1: truncated or corrupt"):
        ingest("cut.gz", "cut.zarr", client=client, block_rows=100)
    assert not [p for p in tmp_path.iterdir() if "cut.zarr" in p.name]

    from distsvm.checkpoint import Checkpointer
    from distsvm.storage.paths import resolve

    assert resolve("s3://b/k") == "s3://b/k" and resolve("file://x") == f"file://{tmp_path}/x"
    # where the workers write their blocks' state at a checkpoint
    assert Checkpointer("~/runs/r1", 5).run_dir == str(tmp_path / "runs" / "r1")
    assert Checkpointer("s3://b/runs/r1", 5).run_dir == "s3://b/runs/r1"


def test_spec_paths_are_resolved_when_the_job_runs(tmp_path, monkeypatch):
    from distsvm import pipeline, spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "job.yaml").write_text(
        "data: {train: s.zarr, test: ~/t.zarr}\noutput: {model: m.model, registry: s3://b/r}\n"
        "checkpoint: {runs: ../runs}\n")
    loaded = spec.load_spec("job.yaml")
    got = spec.resolve_paths(loaded, spec.JOB_PATHS)  # as spec.run does, before job.json
    assert loaded["data"]["train"] == "s.zarr"  # a copy
    assert got["data"] == {"train": str(tmp_path / "s.zarr"),
                           "test": str(tmp_path / "home" / "t.zarr")}
    assert got["output"] == {"model": str(tmp_path / "m.model"), "registry": "s3://b/r"}
    assert got["checkpoint"]["runs"] == str(tmp_path.parent / "runs")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "p1.svm").write_text("1 1:1\n")
    (tmp_path / "p.yaml").write_text("name: p\ndataset: d.zarr\npartitions: '~/p*.svm'\n"
                                     "holdout: ~/h.zarr\nregistry: reg\n")
    assert pipeline._partitions(pipeline.load_pipeline("p.yaml")) == [
        str(tmp_path / "home" / "p1.svm")]
