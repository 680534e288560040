"""``distsvm run`` and ``distsvm pipeline run`` check the whole spec before they connect to a
cluster or create anything: one line naming the spec's key, exit 2 (bad input) in both."""

from __future__ import annotations

import json

import pytest

from distsvm import pipeline
from distsvm.cli import main
from distsvm.ingest import ingest

STORE_ROWS = "+1 1:1 2:0.5\n-1 1:-1 3:1\n+1 2:1\n-1 3:-1\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("validation")
    (d / "a.svm").write_text(STORE_ROWS)
    return ingest(str(d / "a.svm"), str(d / "a.zarr")).url


def _tree(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("section, key, says", [
    ({"solver": {"C": -1}}, "solver.C", "must be a float in the range (0, inf). Got -1"),
    ({"solver": {"eps": 0}}, "solver.eps", "must be a float in the range (0, inf). Got 0"),
    ({"solver": {"max_rounds": 0}}, "solver.max_rounds", "must be an int in the range [1,"),
    ({"solver": {"solver": "dcd", "loss": "squared_epsilon_insensitive"}}, "solver",
     "needs a regression store"),
    ({"solver": {"nu": 0.3}}, "solver.nu", "belongs to solver 'oneclass'"),
    ({"data": {"test": "/nonexistent/t.zarr"}}, "data.test", "no distsvm dataset here"),
    ({"cluster": {"n_workers": 2, "tls": {"ca_file": "/no/ca.pem", "cert_file": "/no/c.pem",
                                          "key_file": "/no/k.pem"}}},
     "cluster.tls.ca_file", "no file /no/ca.pem"),
])
def test_run_checks_the_whole_spec_first(tmp_path, store, capsys, section, key, says):
    doc = {"data": {"train": store}, "checkpoint": {"runs": str(tmp_path / "runs")},
           "cluster": {"n_workers": 2}, "output": {"model": str(tmp_path / "m.dsvm")}}
    for k, v in section.items():
        doc[k] = {**doc.get(k, {}), **v}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    before = _tree(tmp_path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ERROR: {path}: key '{key}'"), err
    assert says in err and "tol" not in err.replace("tolerance", "")
    assert _tree(tmp_path) == before  # no run directory, no model, no cluster log


def test_pipeline_checks_the_whole_spec_first(tmp_path, store, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p1.svm").write_text(STORE_ROWS)
    doc = {"name": "m", "dataset": str(tmp_path / "d.zarr"),
           "partitions": str(tmp_path / "in" / "*.svm"), "holdout": store,
           "registry": str(tmp_path / "reg"), "cluster": {"n_workers": 2}}
    path = tmp_path / "pipeline.json"
    before = _tree(tmp_path)
    for extra, key, says in [
            ({"solver": {"C": 0}}, "solver.C", "(0, inf). Got 0"),
            ({"solver": {"loss": "hinge"}, "ingest": {"regression": True}}, "solver.loss",
             "an SVR loss"),
            ({"holdout": str(tmp_path / "none.zarr")}, "holdout", "no distsvm dataset")]:
        path.write_text(json.dumps({**doc, **extra}))
        assert pipeline.main(str(path), pipeline.Progress(quiet=True)) == (
            pipeline.EXIT_BAD_INPUT, None)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"ERROR: {path}: key '{key}'"), err
        assert says in err
        assert _tree(tmp_path) == sorted([*before, "pipeline.json"])  # nothing ingested
