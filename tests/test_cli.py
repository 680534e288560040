"""The distsvm command end to end: real files, real stores, the embedded local cluster."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys

import numpy as np
import pytest

from .conftest import DATA, liblinear_optimum, load_xy

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def run(*args, ok=True):
    p = subprocess.run([sys.executable, "-m", "distsvm.cli", *map(str, args)],
                       capture_output=True, text=True, env=ENV, timeout=600)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    train_store, test_store = tmp / "a9a.zarr", tmp / "a9a.t.zarr"
    run("ingest", DATA / "a9a.xz", train_store, "-q", "--workers", "2")
    run("ingest", DATA / "a9a.t.xz", test_store, "-q", "--serial", "--no-shuffle")
    return tmp, train_store, test_store


def test_ingest_info(stores):
    _, train_store, test_store = stores
    info = json.loads(run("info", train_store, "--json").stdout)
    assert (info["n_rows"], info["n_features"], info["nnz"]) == (32561, 123, 451592)
    assert info["classes"] == [-1.0, 1.0] and info["class_counts"] == [24720, 7841]
    assert info["verified"] and info["format_version"] == 1
    text = run("info", test_store).stdout
    assert "n_rows" in text and "16281" in text


@pytest.mark.parametrize("s,loss", [(3, "hinge"), (1, "squared_hinge")])
def test_train_predict_json_matches_liblinear(stores, a9a, s, loss):
    tmp, train_store, test_store = stores
    model = tmp / f"m{s}.model"
    p = run("train", train_store, model, "-s", s, "-c", 1, "-e", 0.01, "--max-rounds", 300, "--json",
            "--workers", 2)
    out = json.loads(p.stdout)
    for key in ("solver", "loss", "C", "rounds", "primal_objective", "dual_objective",
                "duality_gap", "train_seconds", "n_rows", "n_features"):
        assert key in out
    assert out["loss"] == loss and out["n_rows"] == 32561 and out["C"] == 1.0
    assert "round" in p.stderr and "primal" in p.stderr  # per-round progress lines
    X, y = a9a
    _, p_ref = liblinear_optimum(X, y, loss)
    assert out["primal_objective"] <= p_ref * 1.01

    pred = json.loads(run("predict", test_store, model, "--json", "--output",
                          tmp / "pred.txt").stdout)
    assert pred["n_rows"] == 16281 and 0.83 < pred["accuracy"] < 0.86
    labels = np.loadtxt(tmp / "pred.txt")
    Xt, yt = load_xy(DATA / "a9a.t.xz", n_features=123)
    assert np.mean(labels == yt) == pytest.approx(pred["accuracy"])  # --no-shuffle keeps order


def test_quiet_prints_nothing_but_results(stores):
    tmp, train_store, _ = stores
    p = run("train", train_store, tmp / "q.model", "-q", "-e", 0.5)
    assert p.stdout == "" and p.stderr == ""


def test_liblinear_export_import_round_trip(stores):
    from liblinear.liblinearutil import load_model, predict

    tmp, train_store, test_store = stores
    model = tmp / "rt.model"
    run("train", train_store, model, "-s", 1, "-B", 1, "-q")
    run("export", model, tmp / "rt.liblinear")
    Xt, yt = load_xy(DATA / "a9a.t.xz", n_features=123)
    labels, (acc, _, _), _ = predict(yt, Xt.astype(np.float64), load_model(str(tmp / "rt.liblinear")), "-q")
    ours = json.loads(run("predict", test_store, model, "--json").stdout)
    assert acc / 100 == pytest.approx(ours["accuracy"], abs=1e-12)
    run("import", tmp / "rt.liblinear", tmp / "back.model")
    back = json.loads(run("predict", test_store, tmp / "back.model", "--json").stdout)
    assert back["accuracy"] == ours["accuracy"]


BAD_LINES = [
    ("3:1 4:1", "missing label"),
    ("+1 3:", "3:"),
    ("+1 :5", ":5"),
    ("+1 3:0.5x", "3:0.5x"),
    ("+1 0:1", "index 0"),
    ("+1 4:1 2:1", "increasing"),
    ("+1 2:1 2:1", "duplicate"),
    ("+1 2:nan", "non-finite"),
    ("nan 2:1", "nan"),
    ("+1 2:inf", "non-finite"),
]


@pytest.mark.parametrize("line,needle", BAD_LINES)
def test_bad_input_names_file_line_token_and_leaves_no_store(tmp_path, line, needle):
    src = tmp_path / "bad.svm"
    src.write_text(f"+1 1:0.5 3:1\n-1 2:1\n{line}\n-1 1:1\n")
    store = tmp_path / "bad.zarr"
    p = run("ingest", src, store, "--serial", ok=False)
    assert p.returncode != 0
    err = p.stderr.strip()
    assert err.startswith("ERROR:") and len(err.splitlines()) == 1, err
    assert f"{src}:3" in err and needle in err, err
    assert sorted(os.listdir(tmp_path)) == ["bad.svm"]  # nothing left behind


def test_a_file_of_one_label_ingests(tmp_path):
    """A one-class SVM's data: every row +1 (tests/test_store.py trains on such a store)."""
    src = tmp_path / "f.svm"
    src.write_text("+1 1:1\n+1 2:1\n")
    run("ingest", src, tmp_path / "s.zarr", "--serial", "-q")
    info = json.loads(run("info", tmp_path / "s.zarr", "--json").stdout)
    assert info["classes"] == [1.0] and info["n_rows"] == 2


def test_empty_file(tmp_path):
    src = tmp_path / "f.svm"
    src.write_text("")
    p = run("ingest", src, tmp_path / "s.zarr", "--serial", ok=False)
    assert p.returncode != 0 and "empty" in p.stderr and str(src) in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["f.svm"]


def test_parallel_ingest_equals_serial(tmp_path):
    from distsvm.storage import open_dataset

    src = tmp_path / "a9a.svm"
    src.write_bytes(lzma.decompress((DATA / "a9a.xz").read_bytes()))
    # a tiny chunk size forces many byte ranges on two workers
    from distsvm.ingest import ingest
    from distsvm.jobs import client_for

    with client_for(n_workers=2) as c:
        par = ingest(str(src), str(tmp_path / "p.zarr"), client=c, chunk_mb=0.25, block_rows=6000)
    ser = ingest(str(src), str(tmp_path / "s.zarr"), chunk_mb=1, block_rows=6000)
    assert par.meta.blocks == ser.meta.blocks  # same rows, same order, same checksums
    for i in range(par.n_blocks):
        a, b = par.read_block(i), ser.read_block(i)
        for k in ("indptr", "indices", "data", "y"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert open_dataset(str(tmp_path / "p.zarr")).meta.n_rows == 32561


def test_errors_are_one_line(tmp_path):
    p = run("train", tmp_path / "missing.zarr", tmp_path / "m", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("ERROR:") and "missing.zarr" in p.stderr
    p = run("train", "x", "y", "-c", "-1", ok=False)
    assert p.returncode == 1 or p.returncode == 2
    assert p.stderr.startswith("ERROR:")
    p = run("train", "--bogus", ok=False)
    assert p.returncode == 2 and p.stderr.startswith("ERROR:")


def test_column_view_solver_on_a_store_without_one_builds_it(stores, tmp_path):
    """-s 5 (and pcd) read the column view: on a store without one (plain ingest) train
    builds it, says so in one line and keeps it (issue 29.3; it was an error naming
    distsvm columnize); an error of the data is still one line before a cluster starts."""
    import shutil

    _, train_store, _ = stores
    store = tmp_path / "a9a.zarr"
    shutil.copytree(train_store, store)
    p = run("train", store, tmp_path / "m5", "-s", "5")
    assert sum("had no column view" in line for line in p.stderr.splitlines()) == 1, p.stderr
    info = json.loads(run("info", store, "--json", "--no-verify").stdout)
    assert info["n_rows"] == 32561
    assert "had no column view" not in run("train", store, tmp_path / "m5", "-s", "5").stderr
    p = run("train", store, tmp_path / "m5", "-s", "5", "-w9", "2", ok=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("ERROR:"), p.stderr


def test_c_parameter_error_in_sklearn_wording(stores):
    _, train_store, _ = stores
    p = run("train", train_store, "m", "-c", "-1", ok=False)
    assert "The 'C' parameter" in p.stderr and "Got -1.0 instead" in p.stderr


def test_scheduler_option_runs_on_an_existing_cluster(client, stores):
    """--scheduler: the job's blocks land in the existing cluster's worker caches."""
    import distsvm.workers.blocks

    tmp, train_store, test_store = stores
    before = sum(client.run(distsvm.workers.blocks.cached_bytes).values())
    addr = client.scheduler.address
    out = json.loads(run("train", train_store, tmp / "sch.model", "-q", "--json",
                         "--scheduler", addr).stdout)
    assert out["n_rows"] == 32561 and out["converged"]
    assert sum(client.run(distsvm.workers.blocks.cached_bytes).values()) > before
    pred = json.loads(run("predict", test_store, tmp / "sch.model", "--json",
                          "--scheduler", addr).stdout)
    assert 0.83 < pred["accuracy"] < 0.86
