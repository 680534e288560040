"""A quiet command line and plain scripts (issue 20, items 3-6): user errors and Ctrl-C are one
line, a normal end prints nothing from Dask, a script with no ``__main__`` guard works, Dask's
conventions (dashboard on request, scheduler files, an existing client's context).

The CLI runs in real child processes, without the test suite's PYTHONWARNINGS=ignore: what a
newcomer's terminal shows."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from distsvm import cluster
from distsvm.cli import main

from .conftest import DATA, REPO

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}


def cli(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "distsvm", *map(str, args)],
                          capture_output=True, text=True, env=ENV, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def dna(tmp_path_factory):
    """The shipped DNA training set as a store, and a model trained on it (in this process)."""
    import distsvm

    tmp = tmp_path_factory.mktemp("quiet")
    store = distsvm.ingest(str(DATA / "dna.scale.xz"), str(tmp / "dna.zarr"), block_rows=700)
    model = tmp / "dna.model"
    distsvm.save_model(distsvm.train(store, eps=0.5), str(model))
    yield tmp, store.url, model
    cluster.close_embedded()


def test_user_errors_are_one_line_and_predicts_end_silently(dna):
    """A malformed input line: exactly one ERROR line (no worker traceback before it); a
    successful predict (which prints no progress): nothing from Dask on stderr."""
    tmp, store, model = dna
    bad = tmp / "bad.svm"
    bad.write_text("1 1:0.5 2:1\n-1 1:abc\n")
    p = cli("ingest", bad, tmp / "bad.zarr")  # no -q: the in-process cluster is not announced
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.splitlines() == [f"ERROR: {bad}:2: malformed feature value (token '1:abc')"]
    assert not (tmp / "bad.zarr").exists()
    p = cli("predict", store, model)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout == "Accuracy = 99.1000% (1982/2000)\n"


def test_missing_files_name_the_path_and_what_was_expected(dna, tmp_path, capsys):
    tmp, store, model = dna
    assert main(["predict", store, str(tmp_path / "nope.model"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [f"ERROR: {tmp_path / 'nope.model'}: no such file or directory "
                                "(expected a distsvm model or a LIBLINEAR text model file)"]
    assert main(["predict", store, store, "-q"]) == 1  # a store given as the model
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {store}: is a directory (expected a distsvm model")
    assert main(["import", str(tmp_path / "none.txt"), str(tmp_path / "m")]) == 1
    assert "none.txt: no such file or directory (expected a LIBLINEAR text model file)" \
        in capsys.readouterr().err
    assert main(["predict", store, str(model), "--scheduler-file", str(tmp_path / "s.json")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"ERROR: no scheduler file {tmp_path / 's.json'} (expected the JSON file that "
        "`dask scheduler --scheduler-file FILE` writes)"]


def test_predict_warns_of_another_feature_count(dna, tmp_path, capsys):
    """A model of 180 features on a store of 200: a warning and LIBLINEAR's prediction (the
    extra features weigh 0), or with --strict one ERROR line."""
    import distsvm

    tmp, _, model = dna
    wider = distsvm.ingest(str(DATA / "dna.scale.xz"), str(tmp_path / "wide.zarr"),
                           n_features=200)
    assert main(["predict", wider.url, str(model), "-q"]) == 0  # the CLI prints its warnings
    out, err = capsys.readouterr()
    assert out == "Accuracy = 99.1000% (1982/2000)\n"
    assert re.fullmatch(r"WARNING: the model \S+ has 180 features and the store \S+ 200: .*\n",
                        err), err
    assert main(["predict", wider.url, str(model), "-q", "--strict"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ERROR: the model") and err.count("\n") == 1 and "--strict" in err


def test_help_has_no_markup_and_lists_class_weights(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "``" not in top and "The distsvm command" in top
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    train_help = capsys.readouterr().out
    assert re.search(r"^\s*-wi W\b", train_help, re.M), train_help
    assert "--dashboard" in train_help and "--scheduler-file" in train_help
    assert "--log-level" in train_help


def readme_script() -> str:
    """The README's plain-script snippet (the python block after "A plain script")."""
    text = (REPO / "README.md").read_text()
    return text.split("A plain script", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def run_script(source: str, tmp_path, timeout=300):
    script = tmp_path / "script.py"
    for q in "\"'":  # the README's paths in either quotes
        source = source.replace(f"{q}/tmp/", f"{q}{tmp_path}/").replace(f"{q}data/", f"{q}{DATA}/")
    script.write_text(source)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=ENV, timeout=timeout, cwd=tmp_path)


def test_readme_plain_script_runs_as_written(tmp_path):
    """The README's snippet, with no ``if __name__ == "__main__":`` guard, as ``python
    script.py``: it ingests twice (``distsvm.ingest`` stays the function after its submodule
    is imported), trains, prints the accuracy and exits 0 with nothing on stderr."""
    source = readme_script()
    assert "__main__" not in source and source.count("distsvm.ingest(") == 2
    p = run_script(source, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.fullmatch(r"Accuracy = 84\.\d\d%\n", p.stdout), p.stdout
    assert p.stderr == ""


@pytest.mark.slow
def test_plain_script_with_worker_processes(tmp_path):
    """The same script with ``n_workers=2``: worker processes that do not run the script
    again (spawn would, and the script would start a cluster in each worker)."""
    source = readme_script().replace("LinearSVC(C=1.0)", "LinearSVC(C=1.0, n_workers=2)")
    assert "n_workers=2" in source
    p = run_script(source, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.fullmatch(r"Accuracy = 84\.\d\d%\n", p.stdout), p.stdout
    assert "Nanny failed" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]


def test_a_closing_worker_s_heartbeat_failure_is_not_reported():
    """The worker processes' preload drops Dask's "Failed to communicate with scheduler
    during heartbeat" (an ERROR with tracebacks) once its worker is closing, which a
    heartbeat in flight at a normal close logs; while the worker runs it is reported."""
    import logging

    from distributed import LocalCluster

    from distsvm.worker_setup import HEARTBEAT_FAILED, ClosingHeartbeat

    record = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1,
                               HEARTBEAT_FAILED + ".", None, None)
    other = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1,
                              "Unexpected exception during heartbeat. Closing worker.", None,
                              None)
    lc = LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    worker = next(iter(lc.workers.values()))
    keep = ClosingHeartbeat(worker).filter
    assert keep(record) and keep(other)  # running: reported
    lc.close()
    assert not keep(record) and keep(other)  # closed: only the heartbeat's failure dropped


@pytest.mark.slow
def test_ctrl_c_on_worker_processes_is_one_line(dna, tmp_path):
    """Ctrl-C as a terminal sends it (to the whole process group: the command and its worker
    processes) mid-training on 2 worker processes: exactly ``ERROR: interrupted``, no worker's
    KeyboardInterrupt traceback; then a malformed file and a predict on worker processes."""
    _, store, model = dna
    p = subprocess.Popen([sys.executable, "-m", "distsvm", "train", store, tmp_path / "m",
                          "--workers", "2", "-e", "1e-12", "--max-rounds", "100000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         start_new_session=True)
    for line in p.stderr:
        if line.startswith(("[class", "round")):
            break
    os.killpg(p.pid, signal.SIGINT)
    watchdog = threading.Timer(120, lambda: os.killpg(p.pid, signal.SIGKILL))
    watchdog.start()
    err, out = p.stderr.read(), p.stdout.read()
    p.wait()
    watchdog.cancel()
    assert p.returncode == 130 and out == ""
    assert [line for line in err.splitlines() if not line.startswith(("[class", "round"))] == \
        ["ERROR: interrupted"], err[-3000:]

    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5\n-1 2:1 1:1\n")
    p = cli("ingest", bad, tmp_path / "bad.zarr", "--workers", "2")
    assert p.returncode == 1
    assert p.stderr.splitlines()[-1].startswith(f"ERROR: {bad}:2:")
    assert [line for line in p.stderr.splitlines() if not line.startswith("cluster:")] == \
        p.stderr.splitlines()[-1:], p.stderr
    p = cli("predict", store, model, "--workers", "2", "-q")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    p = cli("ingest", bad, tmp_path / "bad.zarr", "-q", "--log-level", "error")  # shown on request
    assert p.returncode == 1 and "distributed.worker - ERROR - Compute Failed" in p.stderr


@pytest.mark.slow
def test_an_error_while_unwinding_from_ctrl_c_is_not_a_second_line(tmp_path, capsys):
    """An error raised after a Ctrl-C (distsvm.errors.INTERRUPTED, set by the command's
    handler) comes of what the interrupt cut short (once, in the suite, an EBADF 1.5 s into
    a pipeline run): the command's one line is still ``ERROR: interrupted``, exit 130, for
    a job and for a pipeline run; without the Ctrl-C the same errors are printed."""
    from distsvm.errors import INTERRUPTED

    commands = [["train", str(tmp_path / "none.zarr"), str(tmp_path / "m")],
                ["pipeline", "run", str(tmp_path / "none.json")]]
    plain = [main(c) for c in commands]
    said = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ERROR")]
    assert 130 not in plain and 0 not in plain and len(said) == 2, said
    assert "interrupted" not in " ".join(said)
    INTERRUPTED.set()
    try:
        codes = [main(c) for c in commands]
    finally:
        INTERRUPTED.clear()
    said = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ERROR")]
    assert (codes, said) == ([130, 130], ["ERROR: interrupted"] * 2)


def test_dashboard_on_request(dna, tmp_path):
    """``--dashboard``: served on 127.0.0.1 and its URL printed (bokeh installed), or one
    line naming the extra (bokeh missing); without it, no dashboard and no bokeh advice."""
    import importlib.util

    _, store, model = dna
    p = cli("predict", store, model, "--dashboard", "-q")
    if importlib.util.find_spec("bokeh") is None:
        assert p.returncode == 1
        assert p.stderr.splitlines() == [
            "ERROR: the Dask dashboard needs bokeh, which is not installed: "
            "pip install 'distsvm[dashboard]' (bokeh>=3.1)"]
    else:
        assert p.returncode == 0, p.stderr
        assert re.fullmatch(r"dashboard: http://127\.0\.0\.1:\d+/status\n", p.stderr)
    p = cli("train", store, tmp_path / "m", "-e", "0.5")
    assert p.returncode == 0 and "bokeh" not in p.stderr
    assert "dashboard off (--dashboard serves one)" in p.stderr.splitlines()[0]


def test_jobs_run_on_an_existing_clients_cluster(dna, tmp_path, capsys):
    """Inside ``with Client(...)``, train and predict use that client's cluster and start
    no embedded one; ``--scheduler-file`` (as ``dask scheduler`` writes it) reaches it too."""
    from distributed import Client, LocalCluster

    import distsvm

    _, store, model = dna
    cluster.close_embedded()
    with LocalCluster(n_workers=1, processes=False,
                                            dashboard_address="127.0.0.1:0") as lc, \
            Client(lc) as c:
        m = distsvm.train(store, eps=0.5)
        result = distsvm.predict(store, m)
        assert cluster._embedded is None
        assert any(k.startswith("block_predictions") for k in
                   map(str, c.run_on_scheduler(lambda dask_scheduler:
                                               list(dask_scheduler.task_prefixes))))
        c.write_scheduler_file(str(tmp_path / "scheduler.json"))
        assert main(["predict", store, str(model), "--scheduler-file",
                     str(tmp_path / "scheduler.json"), "-q", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["n_rows"] == 2000
        assert cluster._embedded is None
    assert result["n_rows"] == 2000


def test_multiclass_training_logs_one_line_a_round(dna, tmp_path, capsys):
    """3 classes one-vs-rest by sequential DCD (one job for all classes, side by side): one
    ``round r  …  classes n of 3 …`` line a round, the classes' rows in the run log;
    ``--verbose`` shows the ``[class …]`` lines.  By Newton (a problem per class, up to one
    per worker at a time): each class's own ``[class …]`` lines as it runs, its rounds in
    order."""
    _, store, _ = dna
    run_dir = tmp_path / "run"
    assert main(["train", store, str(tmp_path / "m"), "-e", "0.5", "--run-dir",
                 str(run_dir)]) == 0
    err = capsys.readouterr().err
    rounds = [line for line in err.splitlines() if line.startswith("round")]
    assert not any(line.startswith("[class") for line in err.splitlines()), err
    numbers = [int(line.split()[1]) for line in rounds]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), err
    assert all(re.search(r"  classes [123] of 3 \([012] stopped\)", line)
               for line in rounds), err
    logged = [json.loads(line) for line in (run_dir / "rounds.jsonl").open()]
    assert {row["class"] for row in logged} == {"1", "2", "3"}
    assert max(row["round"] for row in logged) == numbers[-1]
    assert main(["train", store, str(tmp_path / "m"), "-e", "0.5", "--verbose"]) == 0
    err = capsys.readouterr().err
    assert {line.split("]")[0] for line in err.splitlines() if line.startswith("[class")} == \
        {"[class 1", "[class 2", "[class 3"}

    assert main(["train", store, str(tmp_path / "m"), "-s", "2"]) == 0
    err = capsys.readouterr().err
    assert not any(line.startswith("round") for line in err.splitlines()), err
    lines = [line for line in err.splitlines() if line.startswith("[class")]
    classes = [line.split("]")[0] for line in lines]
    assert set(classes) == {"[class 1", "[class 2", "[class 3"}
    for c in set(classes):  # each class's rounds in order, from its first
        numbers = [int(re.search(r"(?:round|iter) +(\d+)", line).group(1))
                   for line in lines if line.startswith(c)]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), err


def test_a_ctrl_c_that_surfaces_as_another_error_is_one_line(monkeypatch, capsys):
    """A Ctrl-C that cuts short an import of a C extension reaches the command as an
    ImportError, not a KeyboardInterrupt (numba's: "numba._devicearray failed to import",
    once in a CI run, 0.7 s into a pipeline run, where ``arguments.check`` imports the
    kernels): still ``ERROR: interrupted`` and exit 130; without the Ctrl-C the error is
    raised as it is."""
    from distsvm import arguments, errors

    def check(a):  # what the handler does, then the import it cut short
        errors.INTERRUPTED.set()
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("numba._devicearray failed to import") from exc

    monkeypatch.setattr(arguments, "check", check)
    try:
        code = main(["train", "none.zarr", "m"])
    finally:
        errors.INTERRUPTED.clear()
    assert (code, capsys.readouterr().err) == (130, "ERROR: interrupted\n")

    def fails(a):
        raise ImportError("not an interrupt")

    monkeypatch.setattr(arguments, "check", fails)
    with pytest.raises(ImportError, match="not an interrupt"):
        main(["train", "none.zarr", "m"])
