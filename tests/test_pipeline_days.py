"""The pipeline run day after day as it is deployed (issue 29, item 7): the documented per-day
layout whose file names repeat, the shipped cron line and systemd unit (their ``{{ ds }}``), and
Ctrl-C — each through real ``distsvm`` subprocesses."""

from __future__ import annotations

import configparser
import datetime
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import pytest

from distsvm.storage import open_dataset

from .conftest import data_lines

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}
DISTSVM = [sys.executable, "-m", "distsvm"]


def distsvm(*args, cwd=None):
    return subprocess.run([*DISTSVM, *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def rows():
    return data_lines("a9a", 3000)


def _layout(tmp_path, rows, days, solver=None) -> pathlib.Path:
    """/incoming/{{ ds }}/part-0.svm for each day (the same name every day), a holdout store
    and a spec whose partitions are the documented glob."""
    for k, day in enumerate(days):
        d = tmp_path / "incoming" / day
        d.mkdir(parents=True)
        (d / "part-0.svm").write_text("".join(rows[600 * k:600 * (k + 1)]))
    (tmp_path / "hold.svm").write_text("".join(rows[2400:]))
    p = distsvm("ingest", tmp_path / "hold.svm", tmp_path / "hold.zarr", "--n-features", 123,
                "--serial", "-q")
    assert p.returncode == 0, p.stderr
    spec = {"name": "a9a", "dataset": str(tmp_path / "data.zarr"),
            "partitions": str(tmp_path / "incoming" / "{{ ds }}" / "*.svm"),
            "holdout": str(tmp_path / "hold.zarr"), "registry": str(tmp_path / "registry"),
            "ingest": {"block_rows": 200, "n_features": 123},
            "solver": solver or {"solver": "newton", "loss": "squared_hinge"}}
    (tmp_path / "pipeline.json").write_text(json.dumps(spec))
    return tmp_path / "pipeline.json"


def _ledger(tmp_path) -> list[dict]:
    return open_dataset(str(tmp_path / "data.zarr")).meta.source["appended"]


def test_daily_partitions_of_one_name_are_new_partitions(tmp_path, rows):
    days = ["2026-11-25", "2026-11-26"]
    spec = _layout(tmp_path, rows, days)
    for day in days:  # day 2's part-0.svm was refused: "partitions are immutable", exit 2
        p = distsvm("pipeline", "run", spec, "--ds", day, "-q")
        assert p.returncode == 0, p.stderr
    ledger = _ledger(tmp_path)
    assert [(r["partition"], r["path"]) for r in ledger] == [
        ("part-0.svm", str(tmp_path / "incoming" / day / "part-0.svm")) for day in days]
    d = open_dataset(str(tmp_path / "data.zarr"))
    assert d.meta.n_rows == 1200
    d.verify()

    p = distsvm("pipeline", "run", spec, "--ds", days[1], "-q")  # day 2 again: nothing new
    assert p.returncode == 0 and open_dataset(str(tmp_path / "data.zarr")).meta.n_rows == 1200

    # same path, other content: the immutable refusal, one line naming the file, exit 2
    changed = tmp_path / "incoming" / days[1] / "part-0.svm"
    changed.write_text(changed.read_text() + rows[2999])
    p = distsvm("pipeline", "run", spec, "--ds", days[1], "-q")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and str(changed) in p.stderr and "immutable" in p.stderr
    assert _ledger(tmp_path) == ledger

    # ingest --append keys by path too: day 1's name from a third folder is appended
    third = tmp_path / "elsewhere"
    third.mkdir()
    (third / "part-0.svm").write_text("".join(rows[1200:1300]))
    for _ in range(2):
        p = distsvm("ingest", third / "part-0.svm", tmp_path / "data.zarr", "--append", "-q",
                    "--serial", "--block-rows", 200)
        assert p.returncode == 0, p.stderr
    assert open_dataset(str(tmp_path / "data.zarr")).meta.n_rows == 1300


def test_bad_ds_is_a_usage_error(tmp_path, rows):
    p = distsvm("pipeline", "run", tmp_path / "none.yaml", "--ds", "2026-13-40")
    assert p.returncode == 2 and p.stderr.startswith("ERROR: ") and p.stderr.count("\n") == 1


def _shipped(tmp_path, command: str, spec) -> str:
    """A shipped command line with this machine's paths."""
    bindir = os.path.dirname(sys.executable)
    return (command.replace("/opt/distsvm/venv/bin/distsvm", f"{bindir}/distsvm")
            .replace("/etc/distsvm/pipeline.yaml", str(spec))
            .replace("/var/lock/distsvm-pipeline.lock", str(tmp_path / "run.lock"))
            .replace("/var/log/distsvm/pipeline.log", str(tmp_path / "pipeline.log")))


def test_shipped_cron_line_and_systemd_unit_expand_the_date(tmp_path, rows):
    """They passed the spec as it is: ``{{ ds }}`` stayed in the glob and matched nothing."""
    today = datetime.date.today().isoformat()  # what `date +%F` prints
    spec = _layout(tmp_path, rows, [today])
    root = REPO / "deploy" / "pipeline"
    line = next(x for x in (root / "crontab").read_text().splitlines()
                if x and not x.startswith("#") and "=" not in x.split()[0])
    command = line.split(None, 5)[5]
    assert "%" not in command.replace("\\%", "")  # cron: an unescaped % ends the command
    command = _shipped(tmp_path, command.replace("\\%", "%"), spec)  # as cron hands it to sh
    p = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=ENV,
                       timeout=600)
    assert p.returncode == 0 and p.stdout == "", p.stdout  # `|| echo` speaks on failure
    log = (tmp_path / "pipeline.log").read_text()
    assert "ERROR" not in log, log
    assert [r["path"] for r in _ledger(tmp_path)] == [
        str(tmp_path / "incoming" / today / "part-0.svm")]

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((root / "distsvm-pipeline.service").read_text())
    exec_start = unit.get("Service", "ExecStart").replace("%%", "%")
    assert "%" not in exec_start  # no systemd specifier left unexpanded by this test
    new = tmp_path / "incoming" / today / "part-1.svm"
    new.write_text("".join(rows[1800:2400]))
    p = subprocess.run(shlex.split(_shipped(tmp_path, exec_start, spec)), capture_output=True,
                       text=True, env=ENV, timeout=600)
    assert p.returncode == 0, p.stderr
    assert [r["path"] for r in _ledger(tmp_path)][-1] == str(new)


def _interrupt(spec, when) -> subprocess.CompletedProcess:
    """``pipeline run`` interrupted as a terminal's Ctrl-C does (SIGINT to its process
    group) ``when`` seconds after it starts, or once a stderr line contains ``when``."""
    p = subprocess.Popen([*DISTSVM, "pipeline", "run", str(spec)],
                         stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True,
                         # Ctrl-C at its default even where the suite runs as a background
                         # job, whose children inherit SIGINT ignored (tests/test_start.py)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    if isinstance(when, str):
        for line in p.stderr:
            seen.append(line)
            if when in line:
                break
    else:
        time.sleep(when)
    os.killpg(p.pid, signal.SIGINT)
    rest = p.stderr.read()
    p.wait(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, "", "".join(seen) + rest)


@pytest.mark.parametrize("when", [0.7, 1.5, "cluster:", "round   10"])
def test_ctrl_c_is_one_line_exit_130_and_the_next_run_completes(tmp_path, rows, when):
    spec = _layout(tmp_path, rows, ["2026-11-25", "2026-11-26"],
                   solver={"solver": "dcd", "loss": "hinge", "eps": 1e-5, "max_rounds": 3000})
    doc = json.loads(spec.read_text())
    spec.write_text(json.dumps({**doc, "partitions": doc["partitions"].replace("{{ ds }}",
                                                                               "2026-11-25")}))
    p = _interrupt(spec, when)
    progress = ("round ", "ingest:", "cluster:", "train:", "pipeline:")
    errors = [x for x in p.stderr.splitlines() if x.strip() and not x.startswith(progress)]
    assert (p.returncode, errors) == (130, ["ERROR: interrupted"]), p.stderr
    q = distsvm("pipeline", "run", spec, "-q")  # nothing half-done
    assert q.returncode == 0, q.stderr  # is taken for whole: the run ends as one never cut
    d = open_dataset(str(tmp_path / "data.zarr"))
    assert d.meta.n_rows == 600 and len(d.meta.source["appended"]) == 1
    d.verify()
    version = json.loads(distsvm("registry", "show", tmp_path / "registry", "a9a",
                                 "--json").stdout)
    assert version["current"] and version["metrics"]["promote"]
