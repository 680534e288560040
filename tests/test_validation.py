"""``distsvm run`` and ``distsvm pipeline run`` check the whole spec before they connect to a
cluster or create anything: one line naming the spec's key, exit 2 (bad input) in both."""

from __future__ import annotations

import json

import pytest

from distsvm import pipeline
from distsvm.cli import main
from distsvm.ingest import ingest

STORE_ROWS = "+1 1:1 2:0.5\n-1 1:-1 3:1\n+1 2:1\n-1 3:-1\n"


@pytest.fixture(autouse=True, scope="module")
def _close_the_in_process_cluster():
    """The in-process cluster these tests' commands start in pytest's process is closed
    after the module (it would outlive it, and later tests look at this process)."""
    yield
    from distsvm import cluster

    cluster.close_embedded()


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


# ----------------------------------------------------------------- issue 30, class 2
# Every value checked before anything is created or started, by one shared check
# (distsvm.params.check_settings, and params.check_kwargs for the training parameters),
# whether it comes from the command line, a job spec or a pipeline spec: one line naming
# the option or key, exit 2, nothing created, no cluster started.

SVM = STORE_ROWS


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.svm").write_text(SVM)
    return tmp_path


def _refused(capsys, argv, *words, code=2):
    assert main(argv) == code, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ERROR: "), err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("extra, words", [
    (["--block-rows", "0"], ["--block-rows", "Got 0"]),
    (["--block-rows", "-5"], ["--block-rows", "Got -5"]),
    (["--block-mb", "0"], ["--block-mb", "(0, inf)", "Got 0"]),
    (["--block-mb", "inf"], ["--block-mb", "Got inf"]),
    (["--block-mb", "nan"], ["--block-mb", "Got nan"]),
    (["--lock-timeout", "-1"], ["--lock-timeout", "Got -1"]),
    (["--lock-timeout", "nan"], ["--lock-timeout", "Got nan"]),
    (["--workers", "0"], ["--workers", "Got 0"]),
    (["--workers", "1000000"], ["--workers", "Got 1000000"]),
    (["--n-features", "0"], ["--n-features", "Got 0"]),
    (["--seed", "-1"], ["--seed", "Got -1"]),
    (["--append", "--block-mb", "nan"], ["--block-mb"]),
    (["--storage-option", "anon=true"], ["--storage-option", "a.zarr", "local path"]),
])
def test_ingest_options_are_checked_before_anything(files, capsys, extra, words):
    before = _tree(files)
    _refused(capsys, ["ingest", str(files / "a.svm"), str(files / "a.zarr"), "-q", *extra],
             *words)
    assert _tree(files) == before  # no store, no staging folder, no lock


@pytest.mark.parametrize("argv, words", [
    (["generate", "{t}/g.zarr", "--rows", "10", "--features", "8", "--nnz-per-row", "2",
      "--block-mb", "nan"], ["--block-mb"]),
    (["generate", "{t}/g.zarr", "--rows", "10", "--features", "8", "--nnz-per-row", "2",
      "--block-rows", "0"], ["--block-rows"]),
    (["columnize", "{s}", "--block-mb", "0", "--serial"], ["--block-mb"]),
    (["columnize", "{s}", "--memory-mb", "nan", "--serial"], ["--memory-mb"]),
    (["train", "{s}", "{t}/m", "--workers", "0"], ["--workers", "Got 0"]),
    (["train", "{s}", "-v", "1"], ["-v", "Got 1"]),
    (["train", "{s}", "-v", "3", "--concurrent-folds", "0"], ["--concurrent-folds"]),
    (["predict", "{s}", "{t}/none.model", "--workers", "-2"], ["--workers"]),
    (["run", "{t}/none.yaml", "--lock-timeout", "nan"], ["--lock-timeout"]),
    (["resume", "{t}/none", "--lock-timeout", "-1"], ["--lock-timeout"]),
    (["pipeline", "run", "{t}/none.yaml", "--lock-timeout", "nan"], ["--lock-timeout"]),
    (["info", "{s}", "--storage-option", "anon=true"], ["--storage-option"]),
    (["train", "{s}", "{t}/m", "--storage-option", "anon=true"], ["--storage-option"]),
    (["train", "{s}", "{s}/zarr.json/m", "-s", "2"], ["zarr.json", "not a directory"]),
    (["predict", "{s}", "{t}/m", "--output", "{t}"], ["--output", "is a directory"]),
])
def test_command_options_are_checked_before_anything(tmp_path, store, capsys, argv, words):
    argv = [a.format(t=tmp_path, s=store) for a in argv]
    before = _tree(tmp_path)
    _refused(capsys, [*argv, "-q"] if argv[0] not in ("info",) else argv, *words)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("extra, words", [
    (["-s", "1", "-n", "0.5"], ["'nu'", "oneclass"]),  # nu's default, given: still refused
    (["-s", "2", "--inner-passes", "1"], ["'inner_passes'", "dcd"]),
    (["-s", "2", "--no-join-blocks"], ["'join_blocks'"]),
    (["-s", "1", "--pcd-mode", "exact"], ["'pcd_mode'"]),
    (["-s", "2", "--gap-tol", "0"], ["'gap_tol'"]),
    (["-s", "1", "-p", "0.1"], ["'epsilon'"]),
    (["-s", "2", "--objective", "classification"], ["'objective'"]),
    (["-s", "1", "--mu0", "0.01"], ["mu0"]),
    (["-s", "1", "-n", "0.5", "-v", "3"], ["'nu'"]),  # cross-validation: before its folds
])
def test_an_option_the_solver_does_not_take_is_refused_even_at_its_default(
        tmp_path, store, capsys, extra, words):
    before = _tree(tmp_path)
    _refused(capsys, ["train", store, *([] if "-v" in extra else [str(tmp_path / "m")]), "-q",
                      *extra], *words)
    assert _tree(tmp_path) == before
    # and what the solver takes is still taken
    assert main(["train", store, str(tmp_path / "m"), "-q", "-s", "21", "-n", "0.5"]) == 0


def _job(tmp_path, store, **sections) -> str:
    doc = {"data": {"train": store}, "checkpoint": {"runs": str(tmp_path / "runs")},
           "output": {"model": str(tmp_path / "m.dsvm")}}
    for k, v in sections.items():
        doc[k] = {**doc[k], **v} if isinstance(v, dict) and k in doc else v
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("sections, key, says", [
    ({"solver": {"nu": 0.5}}, "solver.nu", "belongs to solver 'oneclass'"),
    ({"solver": {"solver": "newton", "inner_passes": 1}}, "solver.inner_passes", "dcd"),
    ({"cluster": {"n_workers": 1000000}}, "cluster.n_workers", "Got 1000000"),
    ({"name": "../../x", "output": {"registry": "{t}/reg"}}, "name", "does not match"),
    ({"data": {"storage_options": {"anon": True}}}, "data.storage_options", "local path"),
    ({"name": "m", "output": {"registry": "{t}/file"}}, "output.registry", "is a file"),
    ({"output": {"model": "{t}/file/m.dsvm"}}, "output.model", "not a directory"),
])
def test_a_job_spec_is_checked_whole_before_anything(tmp_path, store, capsys, sections, key,
                                                     says):
    (tmp_path / "file").write_text("a file where a directory is meant")
    sections = json.loads(json.dumps(sections).replace("{t}", str(tmp_path)))
    path = _job(tmp_path, store, **sections)
    before = _tree(tmp_path)
    start = __import__("time").monotonic()
    err = _refused(capsys, ["run", path, "-q"], f"key '{key}'", says)
    assert err.startswith(f"ERROR: {path}: key '{key}'")
    assert _tree(tmp_path) == before and __import__("time").monotonic() - start < 30


def _pipeline_doc(tmp_path, store) -> dict:
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "p1.svm").write_text(SVM)
    return {"name": "m", "dataset": str(tmp_path / "d.zarr"),
            "partitions": str(tmp_path / "in" / "*.svm"), "holdout": store,
            "registry": str(tmp_path / "reg")}


@pytest.mark.parametrize("change, key, says", [
    ({"registry": "{t}/file"}, "registry", "must be a directory to write"),
    ({"holdout": "{t}/d.zarr"}, "holdout", "the dataset itself"),
    ({"storage_options": {"anon": True}}, "storage_options", "local path"),
    ({"cluster": {"n_workers": 1000000}}, "cluster.n_workers", "Got 1000000"),
    ({"lock_timeout": float("nan")}, "lock_timeout", "Got nan"),
    ({"ingest": {"block_mb": float("inf")}}, "ingest.block_mb", "Got inf"),
    ({"ingest": {"block_rows": 5, "block_mb": 1}}, "ingest", "not both"),
    ({"solver": {"nu": 0.5}}, "solver.nu", "oneclass"),
])
def test_a_pipeline_spec_is_checked_whole_before_anything(tmp_path, store, capsys, change,
                                                          key, says):
    (tmp_path / "file").write_text("a file where a directory is meant")
    doc = {**_pipeline_doc(tmp_path, store),
           **json.loads(json.dumps(change).replace("{t}", str(tmp_path)))}
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(doc))
    before = _tree(tmp_path)
    err = _refused(capsys, ["pipeline", "run", str(path), "-q"], f"key '{key}'", says)
    assert err.startswith(f"ERROR: {path}: key '{key}'")
    assert _tree(tmp_path) == before


def test_a_pipeline_whose_holdout_is_its_dataset_by_another_spelling(tmp_path, store, capsys,
                                                                     monkeypatch):
    """The holdout named relative, through a symlink: still the dataset, still refused —
    the holdout keeps its rows (it grew by the partition before)."""
    doc = _pipeline_doc(tmp_path, store)
    assert main(["ingest", str(tmp_path / "in" / "p1.svm"), doc["dataset"], "-q",
                 "--serial"]) == 0
    (tmp_path / "link.zarr").symlink_to(doc["dataset"])
    monkeypatch.chdir(tmp_path)
    for holdout in ("d.zarr", "link.zarr", "./x/../d.zarr"):
        (tmp_path / "pipeline.json").write_text(json.dumps({**doc, "holdout": holdout}))
        _refused(capsys, ["pipeline", "run", "pipeline.json", "-q"], "key 'holdout'",
                 "the dataset itself")
    from distsvm.storage import open_dataset

    assert open_dataset(doc["dataset"]).meta.n_rows == 4


def test_the_python_api_checks_as_the_command_line(tmp_path, store):
    """distsvm.train / ingest / a lock refuse what the command line refuses: an option
    the solver does not take (even at its default), a block size of 0, a NaN timeout
    (which never timed out)."""
    import math

    import distsvm
    from distsvm.storage.lock import Lock

    with pytest.raises(ValueError, match="The 'nu' parameter of train belongs to solver"):
        distsvm.train(store, solver="newton", loss="squared_hinge", nu=0.5)
    with pytest.raises(ValueError, match="The 'inner_passes' parameter of train"):
        distsvm.train(store, solver="newton", loss="logistic", inner_passes=1)
    for bad in (0, -5):
        with pytest.raises(ValueError, match="The 'block_rows' parameter of ingest"):
            ingest(str(tmp_path / "a.svm"), str(tmp_path / "x.zarr"), block_rows=bad)
    with pytest.raises(ValueError, match="The 'block_mb' parameter of ingest"):
        ingest(str(tmp_path / "a.svm"), str(tmp_path / "x.zarr"), block_mb=math.inf)
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        Lock(str(tmp_path / "x.zarr"), timeout=math.nan)
    assert not (tmp_path / "x.zarr").exists()
