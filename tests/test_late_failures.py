"""Failures found before the work, not after it (issue 29, item 8): an output that cannot be
written is refused before training (every command that writes one), ``score`` on dask
dataframes, and job and pipeline specs that take the command line's spellings and class
weights."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from .conftest import DATA, data_lines, load_xy

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def distsvm(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "distsvm", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=ENV, timeout=600)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("late")
    rows = data_lines("a9a", 1500)
    (d / "small.svm").write_text("".join(rows[:1000]))
    (d / "hold.svm").write_text("".join(rows[1000:]))
    for name in ("small", "hold"):
        p = distsvm("ingest", d / f"{name}.svm", d / f"{name}.zarr", "--n-features", 123,
                    "--serial", "-q")
        assert p.returncode == 0, p.stderr
    p = distsvm("train", d / "small.zarr", d / "m.model", "-q")
    assert p.returncode == 0, p.stderr
    return d


@contextlib.contextmanager
def immutable(*folders):
    """``folders`` made immutable (``chattr +i``: nothing can be created in them, even by
    root, whom a mode of 0555 does not stop)."""
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["chattr", "+i", str(f)], capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"chattr +i: {p.stderr.strip()}")
    try:
        yield
    finally:
        for f in folders:
            subprocess.run(["chattr", "-i", str(f)], check=True)


def _refused(p, path) -> None:
    """Exit 2 and one line naming ``path``: nothing ran (no progress line, no cluster)."""
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("ERROR: "), p.stderr
    assert str(path) in p.stderr and ".tmp" not in p.stderr, p.stderr


def test_unwritable_outputs_are_refused_before_any_work(work, tmp_path):
    ro = tmp_path / "ro"
    reg = tmp_path / "reg"
    job = {"name": "m", "data": {"train": str(work / "small.zarr")},
           "output": {"registry": str(reg)}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    assert distsvm("run", tmp_path / "job.json", "-q").returncode == 0  # reg/m/v1
    (tmp_path / "pipeline.json").write_text(json.dumps({
        "name": "m", "dataset": str(tmp_path / "data.zarr"), "partitions": str(work / "small.svm"),
        "holdout": str(work / "hold.zarr"), "registry": str(reg),
        "ingest": {"n_features": 123}}))
    with immutable(ro, reg / "m"):
        # the model was written after the whole training: exit 1 naming it, late
        _refused(distsvm("train", work / "small.zarr", ro / "m.model"), ro / "m.model")
        _refused(distsvm("train", work / "small.zarr", ro / "new" / "m.model"),
                 ro / "new" / "m.model")
        _refused(distsvm("train", work / "small.zarr", tmp_path / "m.model", "--run-dir",
                         ro / "run"), ro / "run")
        _refused(distsvm("predict", work / "hold.zarr", work / "m.model", "--output",
                         ro / "p.txt"), ro / "p.txt")
        _refused(distsvm("predict", work / "hold.zarr", work / "m.model", "--output",
                         ro / "p.parquet"), ro / "p.parquet")  # named its temp folder
        _refused(distsvm("export", work / "m.model", ro / "m.txt"), ro / "m.txt")
        _refused(distsvm("ingest", work / "small.svm", ro / "s.zarr"), ro / "s.zarr")
        _refused(distsvm("registry", "promote", reg, "m", "1"), reg / "m")
        p = distsvm("run", tmp_path / "job.json")  # the publish would fail after training
        _refused(p, reg / "m")
        assert "job.json: key 'output.registry'" in p.stderr
        p = distsvm("pipeline", "run", tmp_path / "pipeline.json")
        _refused(p, reg / "m")
        assert not (tmp_path / "data.zarr").exists()
    assert distsvm("registry", "promote", reg, "m", "1").returncode == 0  # writable again
    p = distsvm("train", work / "small.zarr", tmp_path, "-q")  # a folder: was refused too
    _refused(p, tmp_path)
    assert sorted(os.listdir(ro)) == []  # no probe or temp file left behind


def test_score_on_dask_dataframes(client):
    """``score`` on a dask dataframe and series: scikit-learn's accuracy_score of lazy
    predictions of unknown chunk sizes raised a broadcasting error."""
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    import distsvm

    X, y = load_xy(DATA / "a9a.xz", 123)
    X, y = X[:3000].toarray(), y[:3000]
    cols = [f"f{i}" for i in range(X.shape[1])]
    frame = dd.from_pandas(pd.DataFrame(X, columns=cols), npartitions=4)
    labels = dd.from_pandas(pd.Series(y), npartitions=3)  # other partitions than X's
    weights = np.linspace(0.5, 2.0, len(y))
    with client.as_current():
        clf = distsvm.LinearSVC().fit(X, y)
        assert clf.score(frame, labels) == pytest.approx(clf.score(X, y), abs=1e-12)
        assert clf.score(frame, labels, sample_weight=dd.from_pandas(
            pd.Series(weights), npartitions=2)) == pytest.approx(
            clf.score(X, y, sample_weight=weights), abs=1e-12)
        assert clf.score(frame.to_dask_array(), y) == pytest.approx(clf.score(X, y), abs=1e-12)
        target = X @ np.linspace(-1, 1, X.shape[1])
        reg = distsvm.LinearSVR().fit(X, target)
        assert reg.score(frame, dd.from_pandas(pd.Series(target), npartitions=5)) == \
            pytest.approx(reg.score(X, target), rel=1e-9)
        with pytest.raises(ValueError, match="inconsistent numbers of samples"):
            clf.score(frame, y[:10])


def test_specs_take_the_command_lines_spellings_and_class_weights(work, tmp_path):
    """A job spec may say what the command line says (``cutting-plane``, ``squared-hinge``)
    and set class weights (``-wi``); a pipeline with class weights stays idempotent (the
    YAML's numeric labels are JSON strings in the lineage it compares against)."""
    spelled = tmp_path / "spelled.yaml"
    spelled.write_text(f"name: cp\ndata: {{train: {work / 'small.zarr'}}}\n"
                       f"solver: {{solver: cutting-plane, loss: hinge}}\n"
                       f"output: {{model: {tmp_path / 'cp.model'}}}\n")
    p = distsvm("run", spelled, "-q", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["solver"] == "cutting_plane"

    weighted = tmp_path / "weighted.yaml"
    weighted.write_text(f"name: w\ndata: {{train: {work / 'small.zarr'}}}\n"
                        "solver: {loss: squared-hinge, class_weight: {1: 2, -1: 0.5}}\n"
                        f"output: {{model: {tmp_path / 'w.model'}}}\n")
    assert distsvm("run", weighted, "-q").returncode == 0
    p = distsvm("train", work / "small.zarr", tmp_path / "cli.model", "-w1", "2", "-w-1", "0.5",
                "-q")
    assert p.returncode == 0, p.stderr
    from distsvm.model import load_model

    spec_w, cli_w = load_model(tmp_path / "w.model").w, load_model(tmp_path / "cli.model").w
    plain = load_model(work / "m.model").w
    assert np.array_equal(spec_w, cli_w) and not np.allclose(spec_w, plain)

    pipe = tmp_path / "pipeline.yaml"
    pipe.write_text(f"name: w\ndataset: {tmp_path / 'data.zarr'}\n"
                    f"partitions: {work / 'small.svm'}\nholdout: {work / 'hold.zarr'}\n"
                    f"registry: {tmp_path / 'reg'}\ningest: {{n_features: 123}}\n"
                    "solver: {solver: dcd, loss: squared-hinge, class_weight: {1: 2}}\n")
    for _ in range(2):
        p = distsvm("pipeline", "run", pipe, "--json", "-q")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["version"] == 1  # the second run trained nothing new
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: b\ndata: {{train: {work / 'small.zarr'}}}\n"
                   "solver: {class_weight: {one: 2}}\n")
    p = distsvm("run", bad, "-q")
    assert p.returncode == 2 and "key 'solver.class_weight'" in p.stderr
    assert p.stderr.count("\n") == 1
