"""Small frictions of the command line (issue 29, item 9), each through real ``distsvm``
subprocesses: registry look-ups that name what is there, usage errors that exit 2, a wrong
scheduler address that fails in seconds, help and docs that say which commands take
``--scheduler``, JSON errors with ``--log-format json``, a short ``train --help``, the image's
Parquet extra and the feature-count warning's wording."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from .conftest import data_lines

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}
COMMANDS = ("ingest", "columnize", "generate", "info", "train", "predict", "report", "export",
            "import", "run", "resume", "registry", "pipeline")


def distsvm(*args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "distsvm", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=ENV, timeout=timeout)


def one_line(p, code) -> str:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("ERROR: "), p.stderr
    assert "Traceback" not in p.stderr
    return p.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("frictions")
    (d / "small.svm").write_text("".join(data_lines("a9a", 500)))
    for args in (("ingest", d / "small.svm", d / "s.zarr", "--serial", "-q"),
                 ("ingest", d / "small.svm", d / "wide.zarr", "--n-features", 130, "--serial",
                  "-q"),
                 ("train", d / "s.zarr", d / "m.model", "-q")):
        p = distsvm(*args)
        assert p.returncode == 0, p.stderr
    return d


def test_registry_lookups_name_what_is_there(work, tmp_path):
    one_line(distsvm("registry", "list", tmp_path / "nonexistent"), 1)  # was: exit 0, silent
    one_line(distsvm("registry", "show", tmp_path / "nonexistent", "a9a"), 1)
    reg = tmp_path / "reg"
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"name": "m00", "data": {"train": str(work / "s.zarr")},
                               "output": {"registry": str(reg)}}))
    assert distsvm("run", job, "-q").returncode == 0
    err = one_line(distsvm("registry", "show", reg, "nosuch"), 1)  # was "promote one first"
    assert "no model 'nosuch'" in err and "m00" in err and "promote" not in err
    for k in range(1, 15):  # a registry of 15 models: the list in the error is bounded
        shutil.copytree(reg / "m00", reg / f"m{k:02d}")
    err = one_line(distsvm("registry", "show", reg, "nosuch"), 1)
    assert "m09" in err and "m10" not in err and "(15 in all)" in err
    err = one_line(distsvm("registry", "show", reg, "m00", "7"), 1)
    assert "v7" in err and "versions v1" in err
    (reg / "empty").mkdir()
    p = distsvm("registry", "list", reg / "empty")
    assert p.returncode == 0 and p.stdout == f"{reg / 'empty'}: no models\n"


@pytest.mark.parametrize("args", [
    ("train", "{s}", "{m}", "-c", "-1"),
    ("train", "{s}", "{m}", "-w1", "x"),  # was exit 1
    ("train", "{s}", "{m}", "--workers", "0"),
    ("generate", "{g}", "--rows", "0", "--features", "10", "--nnz-per-row", "2"),  # was 1
    ("generate", "{g}", "--rows", "10", "--features", "10", "--nnz-per-row", "2", "--noise",
     "2"),  # was 1
    ("registry", "show", "{r}", "a", "0"),  # was exit 1: "no complete version v0"
    ("registry", "promote", "{r}", "a", "-1"),
    ("predict", "{s}", "{m}", "-b", "2"),
    ("pipeline", "run", "{r}/p.yaml", "--ds", "yesterday"),
])
def test_invalid_option_values_exit_2(work, tmp_path, args):
    paths = {"s": work / "s.zarr", "m": tmp_path / "m.model", "g": tmp_path / "g.zarr",
             "r": tmp_path / "reg"}
    one_line(distsvm(*[a.format(**paths) for a in args]), 2)
    assert not (tmp_path / "g.zarr").exists() and not (tmp_path / "m.model").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_wrong_scheduler_address_fails_in_seconds(work, tmp_path):
    start = time.monotonic()
    err = one_line(distsvm("train", work / "s.zarr", tmp_path / "m.model", "--scheduler",
                           f"tcp://127.0.0.1:{_free_port()}"), 1)
    took = time.monotonic() - start  # Dask's client retried for 30 s
    assert took < 20 and "cannot connect to the Dask scheduler" in err, (took, err)
    # something that is not a Dask scheduler answers: one line, not a MemoryError traceback
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer():
        with contextlib_suppress():
            while True:
                conn, _ = server.accept()
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 64)
                conn.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        err = one_line(distsvm("predict", work / "s.zarr", work / "m.model", "--scheduler",
                               f"tcp://127.0.0.1:{server.getsockname()[1]}", timeout=120), 1)
        assert "not a Dask scheduler" in err
    finally:
        server.close()


def contextlib_suppress():
    import contextlib

    return contextlib.suppress(OSError)


def test_docs_name_exactly_the_commands_that_take_scheduler():
    """The README claimed ``--scheduler`` for every command; info, export, run, ... lack it."""
    takes = {c for c in COMMANDS if "--scheduler" in distsvm(c, "--help").stdout}
    assert takes == {"ingest", "columnize", "generate", "train", "predict"}
    for doc, pattern in ((REPO / "README.md", r"The commands that compute on a cluster \(([^)]*)\)"),
                         (REPO / "docs" / "deploy.md", r"The commands that compute \(([^)]*)\)"),
                         (REPO / "deploy" / "README.md", r"With no `--scheduler` \(taken by ([^;]*);")):
        text = " ".join(doc.read_text().split())
        named = set(re.findall(r"`([a-z]+)`", re.search(pattern, text)[1]))
        assert named == takes, (doc, named)
        assert "Every command takes `--scheduler" not in text


def test_errors_are_json_lines_with_log_format_json(work, tmp_path):
    for args in (("train", work / "s.zarr", tmp_path / "m.model", "-c", "-1"),  # a check
                 ("train", work / "s.zarr", tmp_path / "m.model", "--bogus"),  # argparse's
                 ("train", work / "s.zarr", tmp_path / "m.model", "-w1", "x"),
                 ("train", tmp_path / "none.zarr", tmp_path / "m.model"),  # at run time
                 ("pipeline", "run", tmp_path / "none.yaml")):
        for form in (["--log-format", "json"], ["--log-format=json"]):
            p = distsvm(*args, *form)
            assert p.returncode in (1, 2) and p.stderr.count("\n") == 1, p.stderr
            doc = json.loads(p.stderr)
            assert doc["event"] == "error" and doc["message"] and "time" in doc
            assert not doc["message"].startswith("ERROR")


def test_train_help_is_liblinears_short_list(work):
    short = distsvm("train", "--help").stdout
    full = distsvm("train", "--help-all").stdout
    assert len(short.splitlines()) <= 60 < len(full.splitlines())  # 205 lines before
    for flag in ("-s TYPE", "-c C", "-e EPS", "-B BIAS", "-wi W", "-v N"):
        assert re.search(rf"^\s+{re.escape(flag)}\b", short, re.M), flag
    flags = set(re.findall(r"^ {2}(?:-\w+ ?[A-Z_]*, )?(--[a-z][a-z-]*[a-z])", full, re.M))
    listed = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", short))
    assert flags <= listed, flags - listed  # each named in its group's line
    for group in ("--solver dcd", "--solver alm", "training", "TLS"):
        assert re.search(rf"^  {re.escape(group)}\b.*: --", short, re.M), group
    assert "--parallel {average,add,line}" in full and "--parallel {" not in short


def test_the_image_installs_the_parquet_extra():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    text = re.sub(r"\\\n", " ", (REPO / "deploy" / "Dockerfile").read_text())
    installed = set()
    for m in re.finditer(r"pip install [^\n]*?\"\.\[([a-z0-9,]+)\]\"", text):
        installed |= set(m[1].split(","))
    assert installed <= set(extras) and {"parquet", "s3", "report", "dashboard"} <= installed


def test_the_feature_count_warning_is_worded(work):
    p = subprocess.run([sys.executable, "-m", "distsvm", "predict", str(work / "wide.zarr"),
                        str(work / "m.model"), "-q"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert p.returncode == 0 and p.stderr.startswith("WARNING: the model")
    assert "has weigh 0" not in p.stderr and "a feature only one of them has gets weight 0" \
        in p.stderr, p.stderr


CLIENT_ONLY = """
import json, sys
import numba
from distributed import Client, LocalCluster
import distsvm.workers as W
from distsvm import jobs
from distsvm.solvers.registry import type_params
if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        for s in sys.argv[2:]:
            jobs.train(sys.argv[1], client=c, max_rounds=2, **type_params(int(s)))
    loaded = [f"{m.__name__}.{k}" for m in list(sys.modules.values())
              if m is not None and m.__name__.startswith(W.__name__)
              for k, f in vars(m).items()
              if isinstance(f, numba.core.dispatcher.Dispatcher) and f.signatures]
    print(json.dumps(loaded))
"""


def test_the_coordinator_runs_no_dual_cd_kernel(work, tmp_path):
    """Dual CD on a cluster whose workers are other processes loads no compiled kernel in
    the coordinator's process: calling one there (a loss-code test, once) cost each ``train
    --scheduler`` 0.5-1 s of Numba's cache loading before its first round, out of a time
    budget.  (Newton's coordinator still sums its vectors with the compiled ``dot``, in
    order: with NumPy's pairwise einsum a 1-block run stopped an iteration before a 6-block
    one, the test of that equality failed.)"""
    store = work / "s.zarr"
    p = subprocess.run([sys.executable, "-c", CLIENT_ONLY, str(store), "1", "3", "7"],
                       capture_output=True, text=True, env=ENV, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []
