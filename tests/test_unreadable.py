"""Issue 30 class 3: refuse what cannot be read, at the first look, naming the file.

A store whose arrays do not have the dtype or shape its header gives (CRC and digest
resealed, so every checksum passes), a header nested or sized beyond reason, tabular input
that pandas or pyarrow cannot take as a table of numbers, compressed input with bytes after
its end, and a damaged registry pointer: each is one ``ERROR:`` line naming the file (and
the array, row or column), exit status 1, never a traceback or a silent accept.
"""

from __future__ import annotations

import bz2
import lzma
import shutil

import numpy as np
import pytest
import zarr

from distsvm import cli, registry
from distsvm.columns import columnize
from distsvm.ingest import ingest
from distsvm.model import Model
from distsvm.storage import CorruptStoreError, open_dataset
from distsvm.storage import columns as cols
from distsvm.storage import dataset as ds
from distsvm.storage.errors import InputDataError

from .conftest import dna_rows


@pytest.fixture(autouse=True, scope="module")
def _close_the_in_process_cluster():
    """The in-process cluster these tests' commands start in pytest's process is closed
    after the module (it would outlive it, and later tests look at this process)."""
    yield
    from distsvm import cluster

    cluster.close_embedded()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A sound store of 600 rows (3 row blocks) with a column view, and a model of it."""
    d = tmp_path_factory.mktemp("unreadable")
    X, y = dna_rows(600)
    store = ingest((X, np.where(y == 3, 1.0, -1.0)), str(d / "s.zarr"), block_rows=200)
    columnize(store, memory_mb=16, block_mb=0.01)
    assert cli.main(["train", store.url, str(d / "m.dsvm"), "-s", "2", "-q"]) == 0
    return d


def _copy(pristine, tmp_path) -> str:
    shutil.copytree(pristine / "s.zarr", tmp_path / "s.zarr")
    return str(tmp_path / "s.zarr")


def retype(url: str, path: str, dtype) -> None:
    """Rewrite the one-chunk array ``path`` as ``dtype`` (same values), and record the new
    bytes' CRC-32 in the block table and reseal the header's digest: every checksum passes."""
    g = zarr.open_group(url, mode="r+")
    parent, name = path.rsplit("/", 1)
    a = g[path][...].astype(dtype)
    arr = g[parent].create_array(name, shape=a.shape, chunks=a.shape, dtype=a.dtype,
                                 overwrite=True)
    arr[...] = a
    attrs = g.attrs.asdict()
    key = "distsvm" if path.startswith("rows/") else cols.ATTRIBUTE
    meta = attrs[key]
    if path == "cols/y":
        meta["y_crc32"] = ds._crc(a)
    else:
        block = next(b for b in meta["blocks"] if b["name"] == path.split("/")[1])
        block["crc32"][name] = ds._crc(a)
    ds.seal_metadata(meta)
    g.attrs[key] = meta


def _one_line(capsys, *words) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ERROR: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("array, dtype", [("data", np.float16), ("data", np.float64),
                                          ("indices", np.int64), ("indptr", np.int32),
                                          ("y", np.float32)])
def test_a_row_array_of_another_dtype_is_refused_by_info_and_every_reader(
        tmp_path, pristine, capsys, array, dtype):
    url = _copy(pristine, tmp_path)
    name = open_dataset(url).meta.blocks[1].name
    retype(url, f"rows/{name}/{array}", dtype)
    d = open_dataset(url)
    where = f"rows/{name}/{array}"
    with pytest.raises(CorruptStoreError, match=f"{where} has dtype {np.dtype(dtype).name}, "
                                                "the header says"):
        d.read_block(1)
    assert cli.main(["info", url]) == 1  # not "verified True"
    _one_line(capsys, url, where, np.dtype(dtype).name)
    assert cli.main(["train", url, str(tmp_path / "m"), "-s", "2", "-q"]) == 1
    _one_line(capsys, where, np.dtype(dtype).name)
    assert cli.main(["predict", url, str(pristine / "m.dsvm"), "-q"]) == 1
    _one_line(capsys, where)
    if array == "y":
        with pytest.raises(CorruptStoreError, match=where):
            ds.read_block_labels(url, d.meta.blocks[1])


@pytest.mark.parametrize("array, dtype", [("data", np.float16), ("indices", np.int64),
                                          ("y", np.int16)])
def test_a_column_array_of_another_dtype_is_refused(tmp_path, pristine, capsys, array, dtype):
    url = _copy(pristine, tmp_path)
    d = open_dataset(url)
    cmeta = cols.read_columns_meta(d)
    path = "cols/y" if array == "y" else f"cols/{cmeta.blocks[0].name}/{array}"
    retype(url, path, dtype)
    cmeta = cols.read_columns_meta(open_dataset(url))
    with pytest.raises(CorruptStoreError, match=f"{path} has dtype {np.dtype(dtype).name}"):
        if array == "y":
            cols.read_labels(url, cmeta)
        else:
            cols.read_column_block(url, cmeta.blocks[0])
    assert cli.main(["train", url, str(tmp_path / "m"), "--solver", "pcd", "-q"]) == 1
    _one_line(capsys, path)


def test_a_shape_other_than_the_header_says_is_refused_before_reading(tmp_path, pristine):
    url = _copy(pristine, tmp_path)
    name = open_dataset(url).meta.blocks[0].name
    g = zarr.open_group(url, mode="r+")
    g[f"rows/{name}"].create_array("y", shape=(10 ** 9,), chunks=(10 ** 9,), dtype=np.int32,
                                   overwrite=True)  # no chunk: a read would allocate 4 GB
    with pytest.raises(CorruptStoreError, match=f"rows/{name}/y has shape \\(1000000000,\\), "
                                                "the header says \\(\\d+,\\)"):
        open_dataset(url).read_block(0)


@pytest.mark.parametrize("header", ["[" * 100_000, '{"a":' * 100_000])
def test_a_deeply_nested_header_is_refused_unparsed(tmp_path, pristine, capsys, header):
    url = _copy(pristine, tmp_path)
    (tmp_path / "s.zarr" / "zarr.json").write_text(header)
    for argv in (["info", url], ["train", url, str(tmp_path / "m"), "-q"],
                 ["predict", url, str(pristine / "m.dsvm"), "-q"]):
        assert cli.main(argv) == 1
        _one_line(capsys, f"{url}/zarr.json", "nested more than")


def test_an_oversized_header_is_refused_unread(tmp_path, pristine, capsys, monkeypatch):
    from distsvm.storage import bounded

    url = _copy(pristine, tmp_path)
    size = (tmp_path / "s.zarr" / "zarr.json").stat().st_size
    monkeypatch.setattr(bounded, "MAX_HEADER_BYTES", size - 1)
    assert cli.main(["info", url]) == 1
    _one_line(capsys, f"{url}/zarr.json", f"more than {size - 1} bytes")


# ----------------------------------------------------------------- tabular input

def _parquet(path, columns: dict, names=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_arrays([pa.array(v) for v in columns.values()],
                                        names=names or list(columns)), path)


def _ingest(capsys, source, store, *extra) -> str:
    """Ingest with --label label, serial and on the in-process cluster: one line each."""
    errs = []
    for mode in (["--serial"], []):
        assert cli.main(["ingest", str(source), str(store), "--label", "label", "-q",
                         *mode, *extra]) == 1
        errs.append(_one_line(capsys, str(source)))
        assert not store.exists()
    return errs[0]


def test_parquet_with_a_repeated_column_name(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    path = tmp_path / "dup.parquet"
    _parquet(path, {"a": [1.0, 2.0, 3.0, 4.0], "b": [1.0, 0.0, 1.0, 2.0],
                    "label": [1, -1, 1, -1]}, names=["f0", "f0", "label"])
    err = _ingest(capsys, path, tmp_path / "o.zarr")
    assert "column 'f0' appears 2 times" in err


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_value_beyond_the_store_dtype_is_refused_naming_file_and_row(tmp_path, capsys,
                                                                       dtype):
    pytest.importorskip("pyarrow")
    path = tmp_path / "big.parquet"
    big = 1e39 if dtype == "float32" else 1e300  # float64: finite, so accepted
    _parquet(path, {"f0": [1.0, big, 3.0, 4.0], "label": [1, -1, 1, -1]})
    store = tmp_path / "o.zarr"
    if dtype == "float64":
        assert cli.main(["ingest", str(path), str(store), "--label", "label", "-q",
                         "--serial", "--dtype", "float64"]) == 0
        return
    err = _ingest(capsys, path, store)
    assert "row 2" in err and "float32" in err and "f0" in err
    # the sparse layout, and matrices in memory, go through the same check
    import pandas as pd
    import scipy.sparse as sp

    frame = pd.DataFrame({"i": [[0], [1]], "v": [[1.0], [1e39]], "label": [1, -1]})
    frame.to_parquet(tmp_path / "sparse.parquet")
    err = _ingest(capsys, tmp_path / "sparse.parquet", store, "--indices", "i", "--values", "v")
    assert "row 2" in err and "float32" in err
    X = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1e39], [1.0, 1.0]]))
    with pytest.raises(InputDataError, match="row 2: .*float32"):
        ingest((X, np.array([1.0, -1.0, 1.0])), str(store))
    assert not store.exists()


def test_a_latin1_csv_is_one_line_naming_the_file(tmp_path, capsys):
    path = tmp_path / "lat.csv"
    path.write_bytes("label,f\xe9\n1,2\n-1,3\n1,1\n-1,0\n".encode("latin-1"))
    err = _ingest(capsys, path, tmp_path / "o.zarr")
    assert "UTF-8" in err
    path.write_bytes("label,f0\n1,2\n-1,caf\xe9\n1,1\n-1,0\n".encode("latin-1"))
    err = _ingest(capsys, path, tmp_path / "o.zarr")
    assert "UTF-8" in err


def test_a_file_that_is_not_parquet_is_named(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"not a parquet file at all" * 10)
    err = _ingest(capsys, path, tmp_path / "o.zarr")
    assert "not a Parquet file" in err or "magic bytes" in err


# ----------------------------------------------------------------- compressed input

@pytest.mark.parametrize("ext, compress", [(".xz", lzma.compress), (".bz2", bz2.compress)])
def test_bytes_after_the_end_of_a_compressed_stream_are_refused(tmp_path, capsys, ext,
                                                                compress):
    rows = b"+1 1:1 2:0.5\n-1 1:-1 3:1\n"
    good = tmp_path / f"two{ext}"
    good.write_bytes(compress(rows) + compress(rows) + b"\0" * 8)  # two streams, padding
    assert cli.main(["ingest", str(good), str(tmp_path / "g.zarr"), "--serial", "-q"]) == 0
    assert open_dataset(str(tmp_path / "g.zarr")).meta.n_rows == 4
    bad = tmp_path / f"tail{ext}"
    bad.write_bytes(compress(rows) + b"garbage\n+1 1:1\n")
    assert cli.main(["ingest", str(bad), str(tmp_path / "b.zarr"), "--serial", "-q"]) == 1
    _one_line(capsys, str(bad), "after the end of the compressed stream")
    assert not (tmp_path / "b.zarr").exists()


# ----------------------------------------------------------------- registry documents

def _model() -> Model:
    return Model(w=np.ones(3), bias=-1.0, classes=(-1.0, 1.0), solver="dcd", loss="hinge",
                 params={}, summary={}, n_features=3)


@pytest.mark.parametrize("content", ["{not json", "[" * 100_000, '{"version": "x"}'])
def test_a_damaged_current_pointer_is_named_and_the_rest_still_listed(tmp_path, capsys,
                                                                      content):
    reg = str(tmp_path / "reg")
    for name in ("good", "bad"):
        registry.promote(reg, name, registry.publish(reg, name, _model(), metrics={},
                                                     lineage={}))
    (tmp_path / "reg" / "bad" / "current.json").write_text(content)
    assert cli.main(["registry", "list", reg]) == 1
    out, err = capsys.readouterr()
    assert out == "good: versions v1; current v1\n"
    assert err.count("\n") == 1 and err.startswith(f"ERROR: {reg}/bad/current.json: "), err
    assert cli.main(["registry", "show", reg, "bad"]) == 1
    _one_line(capsys, f"{reg}/bad/current.json")


def test_a_damaged_run_document_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "job.json").write_text("[" * 100_000)
    assert cli.main(["resume", str(run), "-q"]) in (1, 2)
    _one_line(capsys, f"{run}/job.json")
    from distsvm.storage.checkpoint import read_json
    from distsvm.storage.errors import MalformedDocumentError

    with pytest.raises(MalformedDocumentError, match=f"^{run}/job.json: nested more than"):
        read_json(str(run / "job.json"))


def test_an_error_message_is_never_empty(tmp_path, capsys):
    """Whatever an error says, its line says what it is (an exception with an empty
    message printed ``ERROR: `` and nothing else)."""
    from distsvm.errors import message

    assert message(UnicodeError()) == "UnicodeError" and message(ValueError("a\nb")) == "a b"
    bad = tmp_path / "bad.csv"  # what printed an empty line: UnicodeDecodeError via a worker
    bad.write_bytes("label,f0\n1,2\n-1,caf\xe9\n".encode("latin-1"))
    assert cli.main(["ingest", str(bad), str(tmp_path / "o.zarr"), "--label", "label",
                     "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {bad}: ") and err.strip() != "ERROR:"
