"""Issue 19 item 1: workers never trust a block's contents.

Each test rewrites one chunk of a real store *together with its checksum* (what anyone who
can write the bucket can do: the CRC then passes) and checks that every read path — the
row blocks (train, predict, cross-validation, columnize) and the column view (PCD, L1) —
refuses it with one CorruptStoreError line naming the array and its chunk, and that the
shared cluster's workers survive it (a kernel's out-of-bounds access would kill them).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
import zarr

from distsvm.columns import columnize
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.prediction import predict
from distsvm.selection import cross_validate
from distsvm.storage import CorruptStoreError, Dataset, open_dataset
from distsvm.storage import columns as cols
from distsvm.storage import dataset as ds

from .conftest import REPO, dna_rows

N = 600  # rows: three row blocks of 200


@pytest.fixture(scope="module")
def data():
    X, y = dna_rows(N)
    return X, np.where(y == 3, 1.0, -1.0)  # binary: one problem per job


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, data):
    """A sound store with a column view: three row blocks and several column blocks."""
    d = ingest(data, str(tmp_path_factory.mktemp("pristine") / "s.zarr"), block_rows=N // 3)
    columnize(d, memory_mb=16, block_mb=0.01)
    return d.url


def copy_of(url: str, tmp_path) -> Dataset:
    """A copy of the store at ``url`` for one test to damage."""
    shutil.copytree(url, tmp_path / "s.zarr")
    return open_dataset(str(tmp_path / "s.zarr"))


def rewrite(url: str, path: str, change) -> None:
    """Rewrite the one-chunk array ``path`` of the store with ``change(a)`` (an edited copy)
    and record the new content's CRC-32 where the store keeps it: the checksum passes."""
    g = zarr.open_group(url, mode="r+")
    arr = g[path]
    a = change(arr[...].copy())
    arr[...] = a
    crc = ds._crc(a)
    attrs = g.attrs.asdict()
    parts = path.split("/")
    if parts[0] == "rows":
        meta = attrs["distsvm"]
        entry = next(b for b in meta["blocks"] if b["name"] == parts[1])
        entry["crc32"][parts[2]] = crc
        ds.seal_metadata(meta)
        g.attrs["distsvm"] = meta
    elif path == "cols/y":
        c = attrs[cols.ATTRIBUTE]
        c["y_crc32"] = crc
        ds.seal_metadata(c)
        g.attrs[cols.ATTRIBUTE] = c
    else:
        c = attrs[cols.ATTRIBUTE]
        entry = next(b for b in c["blocks"] if b["name"] == parts[1])
        entry["crc32"][parts[2]] = crc
        ds.seal_metadata(c)
        g.attrs[cols.ATTRIBUTE] = c


def _set(i, v):
    def change(a):
        a[i] = v
        return a
    return change


def _swap(a):
    a[1], a[2] = a[2], a[1] + 1 if a[1] == a[2] else a[1]
    return a


ROW_DEFECTS = {  # kind: (array, change, words of the message)
    "index_too_large": ("indices", _set(3, 180), "column index 180, outside \\[0, 180\\)"),
    "index_negative": ("indices", _set(3, -5), "column index -5"),
    "indptr_decreasing": ("indptr", _swap, "decreases"),
    "indptr_end": ("indptr", lambda a: _set(-1, a[-1] - 1)(a), "from 0 to"),
    "indptr_start": ("indptr", _set(0, 1), "from 0 to"),
    "label": ("y", _set(5, 2), "class index 2, outside \\[0, 2\\)"),
    "nan_value": ("data", _set(7, np.nan), "not finite"),
    "inf_value": ("data", _set(7, -np.inf), "not finite"),
}


@pytest.mark.parametrize("kind", sorted(ROW_DEFECTS))
def test_row_block_defect_is_refused_naming_array_and_chunk(tmp_path, pristine, kind):
    d = copy_of(pristine, tmp_path)
    name = d.meta.blocks[1].name
    array, change, words = ROW_DEFECTS[kind]
    rewrite(d.url, f"rows/{name}/{array}", change)
    d = open_dataset(d.url)
    d.read_block(0)  # the other blocks still read
    with pytest.raises(CorruptStoreError, match=f"rows/{name}/{array} \\(its chunk 0, "
                                                f"rows/{name}/{array}/c/0\\) .*{words}") as e:
        d.read_block(1)
    assert "\n" not in str(e.value)
    with pytest.raises(CorruptStoreError):
        d.verify()
    if array == "y":  # the label-only reader (cross-validation's fold planning) too
        with pytest.raises(CorruptStoreError, match=f"rows/{name}/y"):
            ds.read_block_labels(d.url, d.meta.blocks[1])


COL_DEFECTS = {
    "row_index_too_large": ("indices", _set(2, N), f"row index {N}, outside \\[0, {N}\\)"),
    "row_index_negative": ("indices", _set(2, -1), "row index -1"),
    "indptr_decreasing": ("indptr", _swap, "decreases"),
    "indptr_end": ("indptr", lambda a: _set(-1, a[-1] + 1)(a), "from 0 to"),
    "nan_value": ("data", _set(0, np.nan), "not finite"),
}


@pytest.mark.parametrize("kind", sorted(COL_DEFECTS))
def test_column_block_defect_is_refused_naming_array_and_chunk(tmp_path, pristine, kind):
    d = copy_of(pristine, tmp_path)
    cmeta = cols.read_columns_meta(d)
    assert len(cmeta.blocks) > 2
    info = cmeta.blocks[1]
    array, change, words = COL_DEFECTS[kind]
    rewrite(d.url, f"cols/{info.name}/{array}", change)
    cmeta = cols.read_columns_meta(open_dataset(d.url))
    cols.read_column_block(d.url, cmeta.blocks[0])
    path = f"cols/{info.name}/{array}"
    with pytest.raises(CorruptStoreError, match=f"{path} \\(its chunk 0, {path}/c/0\\) .*{words}"):
        cols.read_column_block(d.url, cmeta.blocks[1])


def test_column_view_labels_out_of_range(tmp_path, pristine):
    d = copy_of(pristine, tmp_path)
    rewrite(d.url, "cols/y", _set(4, 7))
    cmeta = cols.read_columns_meta(open_dataset(d.url))
    with pytest.raises(CorruptStoreError, match="cols/y .*class index 7, outside \\[0, 2\\)"):
        cols.read_labels(d.url, cmeta)


@pytest.fixture(scope="module")
def weighted(tmp_path_factory, data):
    return ingest(data, str(tmp_path_factory.mktemp("w") / "w.zarr"), block_rows=N // 3,
                  sample_weight=np.linspace(0.5, 2, N)).url


@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf])
def test_instance_weights_must_be_finite_and_non_negative(tmp_path, weighted, bad):
    d = copy_of(weighted, tmp_path)
    name = d.meta.blocks[2].name
    rewrite(d.url, f"rows/{name}/weight", _set(0, bad))
    with pytest.raises(CorruptStoreError, match=f"rows/{name}/weight .*finite and >= 0"):
        open_dataset(d.url).read_block(2)


def test_regression_targets_must_be_finite(tmp_path, data):
    X, _ = data
    d = ingest((X, np.linspace(-1, 1, N)), str(tmp_path / "r.zarr"), block_rows=N // 3,
               regression=True)
    name = d.meta.blocks[0].name
    rewrite(d.url, f"rows/{name}/target", _set(1, np.nan))
    with pytest.raises(CorruptStoreError, match=f"rows/{name}/target .*targets that are not"):
        open_dataset(d.url).read_block(0)
    rewrite(d.url, f"rows/{name}/y", _set(1, 1))  # a regression store's y is all 0
    with pytest.raises(CorruptStoreError, match=f"rows/{name}/y .*outside \\[0, 1\\)"):
        open_dataset(d.url).read_block(0)


# ---------------------------------------------------------------- through the cluster


def _alive(client) -> int:
    return len(client.scheduler_info()["workers"])


@pytest.fixture(scope="module")
def damaged(tmp_path_factory, pristine):
    """One store, three defects in three places: block 1's column index past n_features,
    block 2's label outside the classes, column block 1's row index past n_rows."""
    d = copy_of(pristine, tmp_path_factory.mktemp("damaged"))
    rewrite(d.url, f"rows/{d.meta.blocks[1].name}/indices", _set(0, 10**6))
    rewrite(d.url, f"rows/{d.meta.blocks[2].name}/y", _set(0, 9))
    info = cols.read_columns_meta(d).blocks[1]
    rewrite(d.url, f"cols/{info.name}/indices", _set(0, 10**6))
    return open_dataset(d.url)


@pytest.mark.parametrize("job", ["train_dcd", "train_pcd", "train_l1", "predict", "cv"])
def test_cluster_jobs_fail_with_one_line_and_workers_survive(client, damaged, data, job):
    before = _alive(client)
    kw = dict(client=client, eps=0.1, max_rounds=5)
    with pytest.raises(CorruptStoreError) as e:
        if job == "train_dcd":
            train(damaged, solver="dcd", **kw)
        elif job == "train_pcd":
            train(damaged, solver="pcd", **kw)
        elif job == "train_l1":
            train(damaged, solver="l1", loss="squared_hinge", **kw)
        elif job == "predict":
            good = ingest(data, damaged.url + ".good", block_rows=N // 3)
            predict(damaged, train(good, solver="dcd", **kw), client=client)
        else:
            cross_validate(damaged, 3, solver="dcd", **kw)
    msg = str(e.value)
    assert "\n" not in msg and "its chunk 0" in msg, msg
    assert _alive(client) == before


def test_workers_still_train_after_the_refusals(client, pristine):
    """After the jobs above, the same workers train the sound store to LIBLINEAR's accuracy
    range (not a crashed or poisoned cluster)."""
    m = train(pristine, client=client, solver="dcd", eps=0.01)
    assert predict(pristine, m, client=client)["accuracy"] > 0.9


@pytest.mark.slow  # a subprocess (~4 s); the in-process tests above assert the one line too
def test_cli_prints_one_error_line(client, damaged, tmp_path):
    p = subprocess.run([sys.executable, "-m", "distsvm.cli", "train", damaged.url,
                        str(tmp_path / "m.model"), "--scheduler", client.scheduler.address],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    errors = [ln for ln in p.stderr.splitlines() if "ERROR" in ln or "Traceback" in ln]
    assert p.returncode != 0 and len(errors) == 1, p.stderr
    assert errors[0].startswith("ERROR: ") and "rows/" in errors[0] and "its chunk 0" in errors[0]
