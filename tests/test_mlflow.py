"""Publishing to MLflow (a spec's ``mlflow`` section, :mod:`distsvm.mlflow_registry`), checked
against a real ``mlflow server`` (SQLite backend, local artifact root) on 127.0.0.1: the
run's metrics and parameters, the registered versions, the alias moved on promotion (and
only then), the pyfunc flavour predicting as distsvm does without a cluster, and the
failures (server down, a bad URI) as one line that loses neither the model nor the built-in
registry's version.  ``distsvm run`` and ``distsvm pipeline run`` run as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

mlflow = pytest.importorskip("mlflow", reason="mlflow is not installed (the mlflow extra: "
                                              "pip install 'distsvm[mlflow]')")

from .conftest import data_lines  # noqa: E402

DNA_FEATURES = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real MLflow tracking server and model registry: SQLite, local artifacts."""
    d = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    log = open(d / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
         f"sqlite:///{d / 'mlflow.db'}", "--default-artifact-root", str(d / "artifacts"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: "
                                   f"{(d / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """dna.scale (3 classes) as a training store and two partition files, and dna.scale.t as
    a test store in its file's order."""
    d = tmp_path_factory.mktemp("mlflow-data")
    rows = data_lines("dna.scale")
    (d / "train.svm").write_text("".join(rows))
    (d / "in").mkdir()
    (d / "in" / "part-1.svm").write_text("".join(rows[:1000]))
    (d / "part-2.svm").write_text("".join(rows[1000:]))
    (d / "test.svm").write_text("".join(data_lines("dna.scale.t")))
    _cli("ingest", str(d / "train.svm"), str(d / "train.zarr"), "--n-features",
         str(DNA_FEATURES))
    _cli("ingest", str(d / "test.svm"), str(d / "test.zarr"), "--no-shuffle", "--n-features",
         str(DNA_FEATURES))
    return d


def _cli(*args, env=None, check=True, cwd=None):
    p = subprocess.run([sys.executable, "-m", "distsvm", *args, "-q"], capture_output=True,
                       text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def _job(tmp_path, data, mlflow_section, name="dna", **output) -> str:
    spec = {"name": name, "data": {"train": str(data / "train.zarr"),
                                   "test": str(data / "test.zarr")},
            "solver": {"type": 2, "C": 0.5},
            "output": {"registry": str(tmp_path / "registry"), **output},
            "checkpoint": {"runs": str(tmp_path / "runs")}}
    if mlflow_section is not None:
        spec["mlflow"] = mlflow_section
    path = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.json"
    path.write_text(json.dumps(spec))
    return str(path)


def _client(uri):
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def _test_matrix(data):
    from sklearn.datasets import load_svmlight_file

    X, _ = load_svmlight_file(str(data / "test.svm"), n_features=DNA_FEATURES)
    return X.tocsr()


def test_run_logs_registers_and_moves_the_alias_and_pyfunc_predicts_as_distsvm(
        tmp_path, data, server):
    name = f"dna-job-{os.getpid()}"
    section = {"tracking_uri": server, "registered_model": name, "experiment": "distsvm-tests"}
    p = _cli("run", _job(tmp_path, data, section, model=str(tmp_path / "dna.dsvm")), "--json")
    first = json.loads(p.stdout)  # stdout is the result alone (no MLflow URL printed)
    assert first["mlflow"]["version"] == 1 and first["mlflow"]["alias"] == "champion"

    client = _client(server)
    run = client.get_run(first["mlflow"]["run_id"])
    assert run.data.metrics["test_accuracy"] == pytest.approx(first["test_accuracy"])
    assert run.data.metrics["rounds"] == first["rounds"]
    assert run.data.params["C"] == "0.5" and run.data.params["solver"] == "newton"
    assert run.data.params["loss"] == "squared_hinge"
    assert run.data.tags["distsvm.run"] == first["run"]
    assert client.get_experiment(run.info.experiment_id).name == "distsvm-tests"
    v1 = client.get_model_version(name, "1")
    assert v1.run_id == run.info.run_id
    assert client.get_model_version_by_alias(name, "champion").version == "1"
    # result.json has the MLflow version too; the model is kept in the run directory
    assert json.loads((tmp_path / "runs").joinpath(
        os.path.basename(first["run"]), "result.json").read_text())["mlflow"] == first["mlflow"]

    # the pyfunc flavour: distsvm's own file inside, loaded and predicting without a cluster
    mlflow.set_tracking_uri(server)
    model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    local = mlflow.artifacts.download_artifacts(f"models:/{name}@champion")
    mlmodel = open(os.path.join(local, "MLmodel")).read()
    assert "distsvm:" in mlmodel and "loader_module: distsvm.mlflow_registry" in mlmodel
    assert not [f for _, _, fs in os.walk(local) for f in fs if f.endswith((".pkl", ".pickle"))]
    from distsvm.model import load_model

    inside = load_model(os.path.join(local, "data", "model.dsvm"))  # distsvm's format
    written = load_model(str(tmp_path / "dna.dsvm"))
    np.testing.assert_array_equal(inside.w, written.w)
    assert (inside.classes, inside.solver, inside.params) == \
        (written.classes, written.solver, written.params)
    own = _cli("predict", str(data / "test.zarr"), str(tmp_path / "dna.dsvm"), "--output",
               str(tmp_path / "labels.txt"))
    assert own.returncode == 0
    labels = np.loadtxt(tmp_path / "labels.txt")
    X = _test_matrix(data)
    import pandas as pd

    for given in (X, X.toarray(), pd.DataFrame(X.toarray())):
        np.testing.assert_array_equal(np.asarray(model.predict(given), dtype=float), labels)
    np.testing.assert_array_equal(load_model(str(tmp_path / "dna.dsvm")).predict(X), labels)

    # the next promotion moves the alias; a version published unpromoted does not
    second = json.loads(_cli("run", _job(tmp_path, data, section), "--json").stdout)
    assert second["mlflow"]["version"] == 2 and second["registry_version"] == 2
    assert client.get_model_version_by_alias(name, "champion").version == "2"
    third = json.loads(_cli("run", _job(tmp_path, data, section, promote=False),
                            "--json").stdout)
    assert third["mlflow"]["version"] == 3 and third["mlflow"]["alias"] is None
    assert client.get_model_version_by_alias(name, "champion").version == "2"
    assert {v.version for v in client.search_model_versions(f"name = '{name}'")} == \
        {"1", "2", "3"}


def test_server_down_is_one_line_and_loses_nothing_then_resume_publishes(
        tmp_path, data, server):
    name = f"dna-down-{os.getpid()}"
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    t = time.monotonic()
    p = _cli("run", _job(tmp_path, data, {"registered_model": name}),
             env={"MLFLOW_TRACKING_URI": dead}, check=False)
    took = time.monotonic() - t
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: MLflow {dead}: cannot publish "
                                                   f"{name}"), p.stderr
    assert "the model is kept" in lines[0] and "distsvm resume" in lines[0]
    assert took < 90, took  # not MLflow's minutes of retries
    # the built-in registry has the version, the run its model and result
    assert json.loads((tmp_path / "registry" / "dna" / "current.json").read_text())["version"] == 1
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "model.dsvm").is_file()
    assert "mlflow" not in json.loads((run / "result.json").read_text())

    # resumed with the server up: the kept model is published, once
    out = json.loads(_cli("resume", str(run), "--json", env={"MLFLOW_TRACKING_URI": server})
                     .stdout)
    assert out["mlflow"]["version"] == 1 and out["registry_version"] == 1
    again = json.loads(_cli("resume", str(run), "--json",
                            env={"MLFLOW_TRACKING_URI": server}).stdout)
    assert again["mlflow"] == out["mlflow"]
    client = _client(server)
    assert [v.version for v in client.search_model_versions(f"name = '{name}'")] == ["1"]
    assert client.get_model_version_by_alias(name, "champion").run_id == out["mlflow"]["run_id"]


@pytest.mark.parametrize("section, key", [
    ({"tracking_uri": "htp://127.0.0.1:5000"}, "mlflow.tracking_uri"),
    ({"tracking_uri": "http://"}, "mlflow.tracking_uri"),
    ({"tracking_uri": "http://127.0.0.1:1", "alias": "latest"}, "mlflow.alias"),
    ({"tracking_uri": "http://127.0.0.1:1", "alias": "a b"}, "mlflow.alias"),
    ({"tracking_uri": "http://127.0.0.1:1", "model": "x"}, "mlflow.model"),
])
def test_a_bad_section_is_refused_before_training(tmp_path, data, section, key):
    p = _cli("run", _job(tmp_path, data, section), check=False)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"key '{key}'" in lines[0], p.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "registry").exists()


def test_pipeline_publishes_each_version_once_and_moves_the_alias_on_promotion(
        tmp_path, data, server):
    name = f"dna-pipe-{os.getpid()}"
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "part-1.svm").write_bytes((data / "in" / "part-1.svm").read_bytes())
    spec = {"name": name, "dataset": str(tmp_path / "dna.zarr"),
            "partitions": str(inbox / "*.svm"), "holdout": str(data / "test.zarr"),
            "registry": str(tmp_path / "registry"),
            "ingest": {"n_features": DNA_FEATURES, "block_rows": 500},
            # newton takes a warm start, but not of a 3-class model: the second interval
            # starts cold (it failed: "warm_start must be 180 finite weights")
            "solver": {"solver": "newton", "loss": "squared_hinge", "C": 0.5},
            "mlflow": {"tracking_uri": server, "alias": "prod"}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    client = _client(server)

    p = _cli("pipeline", "run", str(path), "--json")
    out = json.loads(p.stdout)
    assert out["version"] == 1 and out["promoted"] and out["mlflow"]["version"] == 1
    run = client.get_run(out["mlflow"]["run_id"])
    assert run.data.metrics["holdout_accuracy"] == pytest.approx(out["holdout_accuracy"])
    assert run.data.params["C"] == "0.5" and run.data.params["solver"] == "newton"
    assert client.get_experiment(run.info.experiment_id).name == name
    assert client.get_model_version_by_alias(name, "prod").version == "1"

    again = json.loads(_cli("pipeline", "run", str(path), "--json").stdout)  # the same interval
    assert again["mlflow"] == out["mlflow"]
    assert len(client.search_model_versions(f"name = '{name}'")) == 1

    (inbox / "part-2.svm").write_bytes((data / "part-2.svm").read_bytes())
    p = subprocess.run([sys.executable, "-m", "distsvm", "pipeline", "run", str(path), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 3), p.stderr
    assert "one-vs-rest (3 classes), which takes no warm start; cold start" in p.stderr
    out = json.loads(p.stdout)
    assert out["version"] == 2 and out["mlflow"]["version"] == 2
    champion = client.get_model_version_by_alias(name, "prod").version
    assert champion == ("2" if p.returncode == 0 else "1"), (p.returncode, out)
    mlflow.set_tracking_uri(server)
    from distsvm import registry

    X = _test_matrix(data)
    current = registry.load(str(tmp_path / "registry"), name)
    np.testing.assert_array_equal(mlflow.pyfunc.load_model(f"models:/{name}@prod").predict(X),
                                  current.predict(X))


@pytest.mark.slow  # the job's test above checks the same failure path
def test_pipeline_with_the_server_down_keeps_its_version_and_the_next_run_publishes_it(
        tmp_path, data, server):
    name = f"dna-pipe-down-{os.getpid()}"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-1.svm").write_bytes((data / "in" / "part-1.svm").read_bytes())
    spec = {"name": name, "dataset": str(tmp_path / "dna.zarr"),
            "partitions": str(tmp_path / "in" / "*.svm"), "holdout": str(data / "test.zarr"),
            "registry": str(tmp_path / "registry"), "ingest": {"n_features": DNA_FEATURES},
            "solver": {"type": 1}, "mlflow": {}}  # the URI from MLFLOW_TRACKING_URI
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps(spec))
    dead = f"http://127.0.0.1:{_free_port()}"
    p = _cli("pipeline", "run", str(path), env={"MLFLOW_TRACKING_URI": dead}, check=False)
    assert p.returncode == 1, p.stderr  # a failure: retry later
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: MLflow {dead}: cannot publish "
                                                   f"{name}"), p.stderr
    assert "running the pipeline again publishes it" in lines[0]
    assert json.loads((tmp_path / "registry" / name / "current.json").read_text())["version"] == 1

    out = json.loads(_cli("pipeline", "run", str(path), "--json",
                          env={"MLFLOW_TRACKING_URI": server}).stdout)
    assert (out["version"], out["promoted"], out["mlflow"]["version"]) == (1, True, 1)
    assert _client(server).get_model_version_by_alias(name, "champion").version == "1"


def test_mlflow_is_imported_only_for_a_spec_with_the_section():
    code = ("import sys, distsvm.cli, distsvm.spec, distsvm.pipeline, distsvm.mlflow_registry; "
            "assert 'mlflow' not in sys.modules, 'mlflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
