"""Job specs: schema validation with errors naming the file and key, the three formats,
a full `distsvm run` into a model registry, and TLS for the cluster connection."""

from __future__ import annotations

import importlib.util
import json
import lzma
import os
import subprocess
import sys

import psutil
import pytest
from distributed import Client

from distsvm import cluster, registry, spec
from distsvm.ingest import ingest
from distsvm.model import load_model
from distsvm.progress import Progress
from distsvm.storage import open_dataset

from .conftest import DATA


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("data: {train: s}\nsolver: {C: 1, tolerance: 0.1}\n",
     "unknown key 'solver.tolerance' (allowed here: C, bias,"),
    ("data: {train: s}\ncluster: {tls: {ca_file: a, cert_file: b, key_file: c, pem: d}}\n",
     "unknown key 'cluster.tls.pem'"),
    ("data: {train: s}\nbogus: 1\n", "unknown key 'bogus'"),
    ("data: {train: s}\nsolver: {C: one}\n", "key 'solver.C': 'one' is not of type 'number'"),
    ("data: {test: s}\n", "key 'data': 'train' is a required property"),
    ("data: {train: s}\ncheckpoint: {every: 0}\n", "key 'checkpoint.every': 0 is less than"),
    ("data: {train: s}\ncluster: {scheduler: 'tcp://h:1', jobqueue: {type: slurm}}\n",
     "key 'cluster': give at most one of scheduler, jobqueue and kubernetes"),
    ("data: {train: s}\nsolver: {solver: newtonian}\n", "key 'solver.solver': 'newtonian' is not"),
    ("data: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ("- a\n- b\n", "key '(top level)': ['a', 'b'] is not of type 'object'"),
])
def test_invalid_specs_name_the_file_and_key(tmp_path, text, message):
    path = _write(tmp_path, "job.yaml", text)
    with pytest.raises(spec.SpecError) as e:
        spec.load_spec(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_a_spec_s_type_is_liblinear_s(tmp_path):
    """``solver.type`` is LIBLINEAR's -s, read from the registry's table as the command
    line's: its solver, loss and (-s 1, 7, 12) switch to the primal solver; a solver that
    contradicts it is refused, naming the key."""
    path = _write(tmp_path, "job.yaml", "data: {train: s}\nsolver: {type: 7, C: 0.5}\n")
    assert spec.train_params(spec.load_spec(path)) == {
        "C": 0.5, "solver": "dcd", "loss": "logistic", "primal_switch": 300}
    path = _write(tmp_path, "bad.yaml", "data: {train: s}\nsolver: {type: 2, solver: dcd}\n")
    with pytest.raises(spec.SpecError, match=r"bad.yaml: key 'solver': type 2 means solver "
                                              r"newton, which contradicts solver dcd"):
        spec.check_solver_section(spec.load_spec(path), str(path))
    with pytest.raises(spec.SpecError, match="key 'solver.type': 8 is not one of"):
        spec.load_spec(_write(tmp_path, "no.yaml", "data: {train: s}\nsolver: {type: 8}\n"))


def test_yaml_toml_and_json_specs_are_the_same_job(tmp_path):
    doc = {"name": "j", "data": {"train": "s"}, "solver": {"C": 0.5, "loss": "hinge"},
           "cluster": {"n_workers": 2}, "checkpoint": {"every": 5}}
    y = _write(tmp_path, "job.yml", "name: j\ndata: {train: s}\nsolver: {C: 0.5, loss: hinge}\n"
               "cluster: {n_workers: 2}\ncheckpoint: {every: 5}\n")
    t = _write(tmp_path, "job.toml", 'name = "j"\n[data]\ntrain = "s"\n[solver]\nC = 0.5\n'
               'loss = "hinge"\n[cluster]\nn_workers = 2\n[checkpoint]\nevery = 5\n')
    j = _write(tmp_path, "job.json", json.dumps(doc))
    for path in (y, t, j):
        got = spec.load_spec(path)
        assert got.pop("source") == str(path) and got == doc
    with pytest.raises(spec.SpecError, match="unknown spec format '.ini'"):
        spec.load_spec(_write(tmp_path, "job.ini", ""))
    with pytest.raises(spec.SpecError, match="job2.toml: not valid TOML"):
        spec.load_spec(_write(tmp_path, "job2.toml", "data = ["))


def test_cli_spec_error_exits_2(tmp_path):
    path = _write(tmp_path, "job.yaml", "data: {train: s}\nsolver: {C: 1, tolerance: 0.1}\n")
    r = subprocess.run([sys.executable, "-m", "distsvm.cli", "run", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and f"ERROR: {path}: unknown key 'solver.tolerance'" in r.stderr


@pytest.mark.skipif(importlib.util.find_spec("dask_jobqueue") is not None,
                    reason="dask-jobqueue is installed")
def test_jobqueue_cluster_without_the_package(tmp_path):
    with pytest.raises(spec.SpecError, match="key 'cluster.jobqueue' needs the dask-jobqueue "
                                             "package, which is not installed"):
        with spec.cluster_client({"jobqueue": {"type": "slurm"}}, "job.yaml"):
            pass


def test_run_writes_the_model_and_a_registry_version(tmp_path, client):
    with lzma.open(DATA / "a9a.xz", "rt") as f:
        rows = [next(f) for _ in range(1500)]
    _write(tmp_path, "a.svm", "".join(rows))
    ingest(str(tmp_path / "a.svm"), str(tmp_path / "a.zarr"), block_rows=500, n_features=123)
    path = _write(tmp_path, "job.yaml", f"""
name: a9a-small
data: {{train: {tmp_path / 'a.zarr'}, test: {tmp_path / 'a.zarr'}}}
solver: {{loss: hinge, C: 0.5, eps: 0.5, max_rounds: 30}}
output: {{model: {tmp_path / 'm.dsvm'}, registry: {tmp_path / 'reg'}}}
""")
    result = spec.run(spec.load_spec(path), run_id="r1", progress=Progress(quiet=True),
                      client=client)
    assert result["solver"] == "dcd" and result["registry_version"] == 1
    assert 0.7 < result["test_accuracy"] <= 1
    model = load_model(tmp_path / "m.dsvm")
    assert model.params["C"] == 0.5 and model.loss == "hinge"
    rec = registry.show(str(tmp_path / "reg"), "a9a-small")
    assert rec["current"] and rec["version"] == 1
    assert rec["lineage"]["dataset_fingerprint"] == registry.fingerprint(
        open_dataset(str(tmp_path / "a.zarr")))
    assert rec["lineage"]["params"] == {"loss": "hinge", "C": 0.5, "eps": 0.5, "max_rounds": 30}
    run = tmp_path / "a.zarr" / "runs" / "r1"
    assert json.loads((run / "result.json").read_text())["registry_version"] == 1
    r = subprocess.run([sys.executable, "-m", "distsvm.cli", "resume", str(run), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "has finished; nothing to do" in r.stderr
    assert json.loads(r.stdout)["registry_version"] == 1
    nameless = _write(tmp_path, "nameless.yaml", f"data: {{train: {tmp_path / 'a.zarr'}}}\n"
                      f"output: {{registry: {tmp_path / 'reg'}}}\n")
    with pytest.raises(spec.SpecError, match="key 'output.name' .* is required"):
        spec.run(spec.load_spec(nameless), client=client)
    with pytest.raises(spec.SpecError, match="this run already exists"):
        spec.run(spec.load_spec(path), run_id="r1", client=client)
    bad = _write(tmp_path, "bad.yaml", f"data: {{train: {tmp_path / 'a.zarr'}}}\n"
                 "solver: {C: -1}\n")
    runs = sorted((tmp_path / "a.zarr" / "runs").iterdir())
    with pytest.raises(spec.SpecError, match=f"{bad}: key 'solver.C': must be a float in the "
                                             r"range \(0, inf\)\. Got -1 instead\."):
        spec.run(spec.load_spec(bad), client=client)
    assert sorted((tmp_path / "a.zarr" / "runs").iterdir()) == runs  # checked before a run dir


@pytest.fixture(scope="module")
def tls_spec(tls_files):
    """A spec's cluster.tls for the self-signed certificate (its own CA)."""
    cert, key = tls_files
    return {"ca_file": cert, "cert_file": cert, "key_file": key}


def test_tls_embedded_cluster_on_localhost_and_scheduler_connection(tls_spec):
    with spec.cluster_client({"n_workers": 1, "tls": tls_spec}, "job.yaml") as c:
        address = c.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert all(w.startswith("tls://127.0.0.1:") for w in cluster.workers_info(c))
        for pid in [os.getpid(), *c.run(os.getpid).values()]:  # dashboard and nannies too
            listening = [s.laddr.ip for s in psutil.Process(pid).net_connections("tcp")
                         if s.status == psutil.CONN_LISTEN]
            assert listening and set(listening) == {"127.0.0.1"}
        with spec.cluster_client({"scheduler": address, "tls": tls_spec}, "job.yaml") as c2:
            assert c2.submit(sum, [1, 2]).result() == 3
        with pytest.raises(TypeError, match="TLS expects a `ssl_context`"):  # no certificate
            Client(address, timeout="5s")
    with pytest.raises(spec.SpecError, match="key 'cluster.tls.key_file': no file"):
        with spec.cluster_client({"tls": {**tls_spec, "key_file": "/nonexistent"}}, "j"):
            pass


def test_the_documented_example_spec_is_valid(tmp_path):
    import pathlib
    import re

    docs = pathlib.Path(__file__).resolve().parents[1] / "docs" / "jobs.md"
    example = re.search(r"```yaml\n(.*?)```", docs.read_text(), re.S).group(1)
    got = spec.load_spec(_write(tmp_path, "job.yaml", example))
    assert got["checkpoint"]["every"] == 10 and got["solver"]["loss"] == "squared_hinge"
