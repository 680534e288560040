"""Issue 31: row blocks are written with Blosc-LZ4 (byte shuffle), read straight from their
chunk files on a local store; stores written with the previous codec (zstd level 1), or
uncompressed, or with another safe codec, read and train as before."""

from __future__ import annotations

import json
import pathlib
import weakref

import numpy as np
import pytest
import zarr

from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.storage import CorruptStoreError, open_dataset
from distsvm.storage import dataset as ds

ARRAYS = ds.ROW_ARRAYS + (ds.POSITION,)


def _codecs(store: pathlib.Path, block: str, k: str) -> list[dict]:
    return json.loads((store / "rows" / block / k / "zarr.json").read_text())["codecs"]


def _recode(store: pathlib.Path, compressors) -> None:
    """Rewrite every row array of ``store`` with ``compressors`` (the contents, and so the
    block table's CRC-32s, unchanged): a store as an older writer, or another tool, left it."""
    root = zarr.open_group(str(store), mode="r+")
    for name in root["rows"].group_keys():
        g = root["rows"][name]
        for k in list(g.array_keys()):
            a = g[k][...]
            new = g.create_array(k, shape=a.shape, chunks=(max(1, a.shape[0]),), dtype=a.dtype,
                                 compressors=compressors, fill_value=0, overwrite=True)
            if a.size:
                new[...] = a


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(31)
    X = (rng.random((600, 40)) * (rng.random((600, 40)) < 0.3)).astype(np.float32)
    y = np.where(X[:, :20].sum(1) > X[:, 20:].sum(1), 1, -1)
    return X, y


def test_new_row_blocks_are_lz4_with_byte_shuffle(rows, tmp_path):
    store = ingest(rows, str(tmp_path / "new.zarr"), block_rows=200)
    for info in store.meta.blocks:
        for k in ARRAYS:
            bytes_codec, blosc = _codecs(tmp_path / "new.zarr", info.name, k)
            assert bytes_codec == {"name": "bytes", "configuration": {"endian": "little"}}
            assert blosc["name"] == "blosc", blosc
            c = blosc["configuration"]
            assert (c["cname"], c["shuffle"]) == ("lz4", "shuffle"), c
            assert c["typesize"] == np.dtype(ds.row_dtypes("float32").get(k, "int64")).itemsize
    store.verify()


@pytest.mark.parametrize("codec", ["zstd", "none", "gzip"])
def test_stores_of_other_codecs_read_and_train_alike(rows, tmp_path, codec):
    """A store of the previous default (zstd level 1), an uncompressed one (both read by the
    local fast path) and a gzip one (read by Zarr) hold the same blocks and train the same
    model as a store of the new default."""
    new = ingest(rows, str(tmp_path / "new.zarr"), block_rows=200)
    ingest(rows, str(tmp_path / "old.zarr"), block_rows=200)
    compressors = {"zstd": zarr.codecs.ZstdCodec(level=1), "none": None,
                   "gzip": zarr.codecs.GzipCodec()}[codec]
    _recode(tmp_path / "old.zarr", compressors)
    old = open_dataset(str(tmp_path / "old.zarr"))
    names = [c["name"] for c in _codecs(tmp_path / "old.zarr", old.meta.blocks[0].name, "data")]
    assert names == ["bytes"] + ([] if codec == "none" else [codec])
    fast = ds._local_chunk(old.url, f"rows/{old.meta.blocks[0].name}/indices", "int32",
                           old.meta.blocks[0].nnz)
    assert (fast is None) == (codec == "gzip")  # gzip is left to Zarr
    for i in range(new.n_blocks):
        a, b = new.read_block(i), old.read_block(i)
        for k in ds.ROW_ARRAYS:
            x, z = getattr(a, k), getattr(b, k)
            assert x.dtype == z.dtype and x.flags.writeable and z.flags.writeable
            np.testing.assert_array_equal(x, z)
    w_new = train(new, eps=0.01, max_rounds=500, seed=3).w
    w_old = train(old, eps=0.01, max_rounds=500, seed=3).w
    np.testing.assert_array_equal(w_new, w_old)


def test_fast_path_reads_what_zarr_reads(rows, tmp_path):
    store = ingest(rows, str(tmp_path / "s.zarr"), block_rows=250)  # a short last block
    root = zarr.open_group(store.url, mode="r")
    dtypes = ds.row_dtypes(store.meta.dtype)
    for info in store.meta.blocks:
        for k in ARRAYS:
            z = root["rows"][info.name][k][...]
            a = ds._local_chunk(store.url, f"rows/{info.name}/{k}", dtypes.get(k, "int64"),
                                len(z))
            assert a is not None and a.dtype == z.dtype
            np.testing.assert_array_equal(a, z)
            # what the metadata does not say is not read by hand
            assert ds._local_chunk(store.url, f"rows/{info.name}/{k}", "float64"
                                   if a.dtype != np.float64 else "int64", len(z)) is None
            assert ds._local_chunk(store.url, f"rows/{info.name}/{k}", str(a.dtype),
                                   len(z) + 1) is None
    assert ds._local_chunk("memory://x.zarr", "rows/000000/y", "int32", 250) is None


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("damage", ["truncated", "size", "missing"])
def test_a_damaged_chunk_is_an_error_as_through_zarr(rows, tmp_path, codec, damage):
    """A chunk that the fast path cannot decode to the array's size is left to Zarr: the
    error names the array (and says a missing chunk is missing), as before."""
    store = ingest(rows, str(tmp_path / "s.zarr"), block_rows=200)
    if codec == "zstd":
        _recode(tmp_path / "s.zarr", zarr.codecs.ZstdCodec(level=1))
    info = store.meta.blocks[1]
    chunk = tmp_path / "s.zarr" / "rows" / info.name / "indices" / "c" / "0"
    raw = chunk.read_bytes()
    if damage == "truncated":
        chunk.write_bytes(raw[: len(raw) // 2])
    elif damage == "size":  # a sound chunk of one value fewer
        import numcodecs

        assert ds._decoded_size("blosc" if codec == "lz4" else codec, raw) == info.nnz * 4
        short = store.read_block(1).indices[:-1]
        chunk.write_bytes(numcodecs.Blosc(cname="lz4", shuffle=1, typesize=4).encode(short)
                          if codec == "lz4" else numcodecs.Zstd(level=1).encode(short))
    else:
        chunk.unlink()
    assert ds._local_chunk(store.url, f"rows/{info.name}/indices", "int32", info.nnz) is None
    match = "is missing" if damage == "missing" else f"rows/{info.name}/indices"
    with pytest.raises(CorruptStoreError, match=match):
        store.read_block(1)
    store.read_block(0)  # the other blocks read as ever


def test_zstd_frame_sizes():
    import numcodecs

    for n in (0, 1, 255, 256, 300, 65791, 65792, 10**6):  # each width of the size field
        raw = numcodecs.Zstd(level=1).encode(np.zeros(n, np.uint8))
        assert ds._decoded_size("zstd", raw) == n, n
    assert ds._decoded_size("zstd", b"not a frame") is None


def _crc_calls(monkeypatch) -> list:
    """The arrays whose CRC-32 read_row_block computes from now on."""
    calls = []
    crc = ds._crc
    monkeypatch.setattr(ds, "_crc", lambda a: calls.append(len(a)) or crc(a))
    return calls


def _verified_once(monkeypatch, read) -> list:
    """``read()`` (a worker's read, recheck=False) of a block whose files have settled, twice:
    the second computes no CRC-32 (asserted); returns the CRC-32s computed from then on."""
    import time

    monkeypatch.setattr(ds, "SETTLED_NS", 50_000_000)
    time.sleep(0.1)
    read()  # verified and remembered
    calls = _crc_calls(monkeypatch)
    read()
    assert calls == []
    return calls


def test_an_unchanged_block_is_verified_once_by_the_workers_reads(rows, tmp_path, monkeypatch):
    """recheck=False (what the workers' block reads ask): a block whose files have settled,
    once verified, is not checksummed again while they are unchanged — but a store's
    ``verify`` and a plain read still check every time, and files changed less than
    SETTLED_NS before their verification are verified again at each read."""
    import time

    store = ingest(rows, str(tmp_path / "s.zarr"), block_rows=200)
    info = store.meta.blocks[0]
    calls = _crc_calls(monkeypatch)
    monkeypatch.setattr(ds, "SETTLED_NS", 10**18)  # "just written", however slow the machine
    ds.read_row_block(store.url, info, recheck=False)
    ds.read_row_block(store.url, info, recheck=False)
    assert len(calls) == 2 * len(ds.ROW_ARRAYS)  # just written: not remembered
    monkeypatch.setattr(ds, "SETTLED_NS", 50_000_000)
    time.sleep(0.1)
    calls.clear()
    first = ds.read_row_block(store.url, info, recheck=False)
    again = ds.read_row_block(store.url, info, recheck=False)
    assert len(calls) == len(ds.ROW_ARRAYS)  # the first read only
    for k in ds.ROW_ARRAYS:
        np.testing.assert_array_equal(getattr(first, k), getattr(again, k))
    calls.clear()
    store.verify()
    ds.read_row_block(store.url, info)
    assert len(calls) == (store.n_blocks + 1) * len(ds.ROW_ARRAYS)


@pytest.mark.parametrize("how", ["same size", "replaced"])
def test_a_block_changed_after_its_verification_is_verified_again(rows, tmp_path, monkeypatch,
                                                                   how):
    """A verified block whose chunk is then damaged — written over in place with as many
    bytes, its modification time put back, or replaced by a new file — is refused at its
    next read."""
    import os

    store = ingest(rows, str(tmp_path / "s.zarr"), block_rows=200)
    if how == "same size":  # uncompressed: a changed value keeps the chunk's size
        _recode(tmp_path / "s.zarr", None)
    info = store.meta.blocks[1]
    _verified_once(monkeypatch, lambda: ds.read_row_block(store.url, info, recheck=False))
    chunk = tmp_path / "s.zarr" / "rows" / info.name / "data" / "c" / "0"
    bad = store.read_block(1).data.copy()
    bad[0] += 1.0  # a sound chunk of other values: only the CRC-32 tells
    st = chunk.stat()
    if how == "same size":
        with open(chunk, "r+b") as f:
            f.write(bad.tobytes())
        os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert chunk.stat().st_size == st.st_size and chunk.stat().st_mtime_ns == st.st_mtime_ns
    else:
        import numcodecs

        new = chunk.with_name("0.new")
        new.write_bytes(numcodecs.Blosc(cname="lz4", shuffle=1, typesize=4).encode(bad))
        os.replace(new, chunk)
    with pytest.raises(CorruptStoreError, match=f"rows/{info.name}/data"):
        ds.read_row_block(store.url, info, recheck=False)


def test_buffers_reuse_only_memory_that_no_array_refers_to():
    """Buffers.empty makes an array in a held buffer only once no array made in it lives (a
    view of one keeps it), lets go of one passed over IDLE_TAKES times in a row, and of one
    disowned; arrays under MIN_BYTES are plain new ones; an array is not made in a buffer
    more than a quarter larger than it."""
    b = ds.Buffers()
    n = ds.Buffers.MIN_BYTES // 4 + 1000
    a = b.empty(n, np.float32)
    a[:] = 7.0
    where = a.ctypes.data
    other = b.empty(n, np.float32)  # a lives: other memory
    assert other.ctypes.data != where
    other[:] = 1.0
    view = a[10:]
    del a
    c = b.empty(n, "float32")  # a view of a lives: its buffer is not free
    assert c.ctypes.data != where and np.all(view == 7.0)
    del view
    d = b.empty(n - 500, np.int32)  # free now, and the smallest that fits
    assert d.ctypes.data == where and d.dtype == np.int32 and d.shape == (n - 500,)
    assert np.all(other == 1.0) and b.empty(10, np.float64).base is None  # small: plain
    held = b.held_bytes()
    del c  # free, then passed over by arrays that take d's buffer again and again
    for _ in range(ds.Buffers.IDLE_TAKES):
        del d
        d = b.empty(n - 500, np.int32)
        assert d.ctypes.data == where
    assert b.held_bytes() == held
    del d
    d = b.empty(n - 500, np.int32)
    assert b.held_bytes() < held  # c's buffer went: IDLE_TAKES + 1 arrays passed it over
    held = b.held_bytes()
    b.disown(d)  # (a block cache keeps it): no longer held, so freed with its last array
    assert b.held_bytes() == held - d.base.nbytes
    buffer = weakref.ref(d.base)
    del d
    assert buffer() is None
    big = b.empty(4 * n, np.float32)
    where = big.ctypes.data
    del big  # free, but 4 times what a small array needs: it would keep all of it alive
    assert b.empty(n, np.float32).ctypes.data != where
    assert b.empty(4 * n - n // 8, np.float32).ctypes.data == where  # within a quarter


def _compressions(store: pathlib.Path) -> set[str]:
    """The compressions of every row array of ``store``: "none" or the codec after bytes."""
    found = set()
    for block in (b for b in (store / "rows").iterdir() if b.is_dir()):
        for array in block.iterdir():
            if array.is_dir():
                codecs = _codecs(store, block.name, array.name)
                found.add(codecs[1]["name"] if len(codecs) > 1 else "none")
    return found


def test_compression_none_writes_blocks_that_read_and_train_alike(rows, tmp_path):
    """ingest(..., compression="none") and generate(..., compression="none") write every row
    array uncompressed; such a store holds the same blocks and trains the same model as
    the LZ4 one, and a wrong name is one ValueError naming the choices."""
    from distsvm.generate import generate

    lz4 = ingest(rows, str(tmp_path / "lz4.zarr"), block_rows=200)
    none = ingest(rows, str(tmp_path / "none.zarr"), block_rows=200, compression="none")
    assert _compressions(tmp_path / "lz4.zarr") == {"blosc"}
    assert _compressions(tmp_path / "none.zarr") == {"none"}
    assert (ds.compression_of(lz4), ds.compression_of(none)) == ("lz4", "none")
    for i in range(lz4.n_blocks):
        for k in ds.ROW_ARRAYS:
            np.testing.assert_array_equal(getattr(lz4.read_block(i), k),
                                          getattr(none.read_block(i), k))
    none.verify()
    np.testing.assert_array_equal(train(lz4, eps=0.01, seed=3).w, train(none, eps=0.01, seed=3).w)
    kw = dict(rows=2000, features=500, nnz_per_row=10, seed=1, block_rows=700)
    g_lz4 = generate(str(tmp_path / "g.zarr"), **kw)
    g_none = generate(str(tmp_path / "gn.zarr"), **kw, compression="none")
    assert _compressions(tmp_path / "gn.zarr") == {"none"}
    assert g_lz4.meta.blocks == g_none.meta.blocks  # the same rows: the same CRC-32s
    with pytest.raises(ValueError, match=r"'compression'.*one of \['lz4', 'none'\].*'zip'"):
        ingest(rows, str(tmp_path / "zip.zarr"), block_rows=200, compression="zip")
    assert not (tmp_path / "zip.zarr").exists()


def test_the_cli_and_appends_keep_a_store_s_compression(tmp_path, capsys):
    """`ingest --compression none` and `generate --compression none` write uncompressed
    blocks; `ingest --append` creates a store as its --compression says and then appends
    blocks as the store's are written, whatever the later call's option; a typo is
    argparse's one line, naming the choices; a pipeline spec's ingest.compression is
    checked by the schema."""
    from distsvm import pipeline
    from distsvm.cli import main
    from distsvm.spec import SpecError

    from .conftest import data_lines

    src = tmp_path / "a.svm"
    src.write_text("".join(data_lines("a9a", 300)))
    assert main(["ingest", str(src), str(tmp_path / "n.zarr"), "--compression", "none",
                 "--serial", "-q"]) == 0
    assert _compressions(tmp_path / "n.zarr") == {"none"}
    assert main(["generate", str(tmp_path / "g.zarr"), "--rows", "500", "--features", "100",
                 "--nnz-per-row", "5", "--compression", "none", "--serial", "-q"]) == 0
    assert _compressions(tmp_path / "g.zarr") == {"none"}
    for store, first in (("an.zarr", "none"), ("al.zarr", "lz4")):
        for part, option in enumerate((first, "lz4" if first == "none" else "none")):
            part_file = tmp_path / f"{store}-{part}.svm"
            part_file.write_text("".join(data_lines("a9a", 300 * (part + 1))[300 * part:]))
            assert main(["ingest", str(part_file), str(tmp_path / store), "--append",
                         "--compression", option, "--serial", "-q"]) == 0
        appended = open_dataset(str(tmp_path / store))
        assert appended.meta.n_rows == 600 and len(appended.meta.source["appended"]) == 2
        assert _compressions(tmp_path / store) == {"none" if first == "none" else "blosc"}
        appended.verify()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(src), str(tmp_path / "z.zarr"), "--compression", "zip"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'zip'" in err[0] and "'lz4', 'none'" in err[0], err
    spec = tmp_path / "p.yaml"
    spec.write_text(f"name: m\ndataset: {tmp_path / 'd.zarr'}\npartitions: {src}\n"
                    f"holdout: {tmp_path / 'h.zarr'}\nregistry: {tmp_path / 'reg'}\n"
                    "ingest: {compression: zip}\n")
    with pytest.raises(SpecError, match="compression"):
        pipeline.load_pipeline(spec)
    spec.write_text(spec.read_text().replace("zip", "none"))
    assert pipeline.load_pipeline(spec)["ingest"] == {"compression": "none"}


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_column_views_are_written_as_the_rows_and_read_by_hand(rows, tmp_path, monkeypatch,
                                                               compression):
    """A store's column view is written with its row blocks' compression and read straight
    from its chunk files, the same arrays as through Zarr; a worker's read (recheck=False)
    of an unchanged verified block skips its CRC-32s, and one whose chunk then changes is
    refused."""
    import os

    from distsvm.columns import columnize
    from distsvm.storage import columns as cols

    store = ingest(rows, str(tmp_path / "s.zarr"), block_rows=200, compression=compression)
    cmeta = columnize(store, memory_mb=64, block_mb=0.001)
    assert len(cmeta.blocks) > 1
    want = {"lz4": "blosc", "none": "none"}[compression]
    for info in cmeta.blocks:
        for k in cols.COL_ARRAYS:
            codecs = json.loads((tmp_path / "s.zarr" / "cols" / info.name / k / "zarr.json")
                                .read_text())["codecs"]
            assert (codecs[1]["name"] if len(codecs) > 1 else "none") == want
    root = zarr.open_group(store.url, mode="r")
    for info in cmeta.blocks:
        files: list = []
        for k in cols.COL_ARRAYS:
            z = root["cols"][info.name][k][...]
            a = ds._local_chunk(store.url, f"cols/{info.name}/{k}", str(z.dtype), len(z), files)
            assert a is not None
            np.testing.assert_array_equal(a, z)
    info = cmeta.blocks[1]
    calls = _verified_once(monkeypatch, lambda: cols.read_column_block(store.url, info,
                                                                       recheck=False))
    cols.read_column_block(store.url, info)  # a plain read checks every time
    assert len(calls) == len(cols.COL_ARRAYS)
    chunk = tmp_path / "s.zarr" / "cols" / info.name / "data" / "c" / "0"
    bad = cols.read_column_block(store.url, info).data.copy()
    bad[0] += 1.0  # a sound chunk of other values: only the CRC-32 tells
    new = chunk.with_name("0.new")
    if compression == "none":
        new.write_bytes(bad.tobytes())
    else:
        import numcodecs

        new.write_bytes(numcodecs.Blosc(cname="lz4", shuffle=1, typesize=4).encode(bad))
    os.replace(new, chunk)
    with pytest.raises(CorruptStoreError, match=f"cols/{info.name}/data"):
        cols.read_column_block(store.url, info, recheck=False)
