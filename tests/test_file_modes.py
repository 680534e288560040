"""Files a command writes get the mode the umask gives a new file (issue 29, item 5): the
temp-then-rename writer (:func:`distsvm.storage.checkpoint.atomic_file`, the one helper every
whole-file write goes through) used to leave mkstemp's 0600 whatever the umask, so a serving
process under another user could not read a model or ``current.json``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from .conftest import data_lines

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def distsvm(*args, umask: int, cwd):
    """The CLI in a real subprocess started under ``umask``."""
    p = subprocess.run([sys.executable, "-m", "distsvm", *map(str, args)], cwd=cwd,
                       capture_output=True, text=True, env=ENV, timeout=600,
                       preexec_fn=lambda: os.umask(umask))
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("modes")
    (d / "small.svm").write_text("".join(data_lines("a9a", 400)))
    distsvm("ingest", d / "small.svm", d / "small.zarr", "-q", "--serial", umask=0o022, cwd=d)
    return d / "small.zarr"


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_take_the_umask(tmp_path, store, umask):
    want = 0o666 & ~umask
    model, text, out, run_dir = (tmp_path / "m.model", tmp_path / "m.txt", tmp_path / "p.txt",
                                 tmp_path / "run")
    distsvm("train", store, model, "-q", "--run-dir", run_dir, umask=umask, cwd=tmp_path)
    distsvm("export", model, text, umask=umask, cwd=tmp_path)
    distsvm("import", text, tmp_path / "back.model", umask=umask, cwd=tmp_path)
    distsvm("predict", store, model, "--output", out, "-q", umask=umask, cwd=tmp_path)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"name": "m", "data": {"train": str(store)},
                               "solver": {"max_rounds": 5},
                               "output": {"model": str(tmp_path / "job.model"),
                                          "registry": str(tmp_path / "reg")},
                               "checkpoint": {"every": 1, "runs": str(tmp_path / "runs")}}))
    distsvm("run", job, "-q", umask=umask, cwd=tmp_path)
    reg = tmp_path / "reg" / "m"
    written = [model, text, tmp_path / "back.model", out, run_dir / "summary.json",
               tmp_path / "job.model", reg / "v1" / "model.dsvm", reg / "v1" / "version.json",
               reg / "current.json"]
    runs = list((tmp_path / "runs").rglob("*"))
    written += [p for p in runs if p.is_file()]  # job.json, result.json, checkpoints
    assert len(written) > 12
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in written} == \
        {str(p.relative_to(tmp_path)): oct(want) for p in written}
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temp file left beside them
