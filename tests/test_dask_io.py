"""Dask collections and tabular files in, predictions out (issue 20, items 1 and 2).

Real 2-worker LocalCluster (the session's), real Parquet/CSV files written with pyarrow and
pandas, the S3 test server (moto).  A dask input gives the store the same matrix in memory
gives (same blocks, same checksums), hence the same model.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm.cli import main
from distsvm.storage import open_dataset
from distsvm.storage.errors import InputDataError

from .conftest import dna_rows
from .test_s3 import CREDS, _free_port, opts

BUCKET = "distsvm-tabular"  # not test_s3's: moto's buckets outlive a server, in one process


@pytest.fixture(scope="module")
def s3():
    """The S3 test server (moto, as tests/test_s3.py's) with an empty bucket of our own."""
    moto_server = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", **CREDS}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **options)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    try:
        yield {"fs": fs, "options": options}
    finally:
        server.stop()

da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def same_store(a, b):
    """Two datasets with the same rows in the same blocks (checksums of every array)."""
    assert (a.meta.n_rows, a.meta.n_features, a.meta.nnz, a.meta.classes) == \
        (b.meta.n_rows, b.meta.n_features, b.meta.nnz, b.meta.classes)
    assert a.meta.blocks == b.meta.blocks


@pytest.fixture(scope="module")
def dna():
    X, y = dna_rows(300)
    return X.toarray(), y


@pytest.fixture(scope="module")
def dna_frame(dna):
    X, y = dna
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    df["y"] = y
    return df


@pytest.fixture(scope="module")
def a9a_small(a9a):
    X, y = a9a
    return X[:1000], y[:1000]


def test_fit_on_dask_arrays_is_the_in_memory_fit(client, dna, a9a_small):
    """Dense chunks (3 classes, LinearSVC) and SciPy-sparse chunks (LogisticRegression): the
    same model to 1e-9, and lazy predictions equal to the in-memory ones."""
    from distsvm import LinearSVC, LogisticRegression

    X, y = dna
    ref = LinearSVC(tol=0.1).fit(X, y)
    est = LinearSVC(tol=0.1).fit(da.from_array(X, chunks=(70, 60)), da.from_array(y, chunks=90))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    Xd = da.from_array(X, chunks=(120, 180))
    dv = est.decision_function(Xd)
    assert isinstance(dv, da.Array) and dv.shape == (300, 3)  # lazy
    np.testing.assert_allclose(dv.compute(), ref.decision_function(X), atol=1e-12)
    pred = est.predict(Xd)
    assert isinstance(pred, da.Array)
    np.testing.assert_array_equal(pred.compute(), ref.predict(X))
    abc = np.array(["a", "b", "c"])  # labels of any type
    names = abc[np.searchsorted(ref.classes_, y)]
    est = LinearSVC(tol=0.1).fit(da.from_array(X, chunks=(70, 180)), da.from_array(names, 90))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-9)
    assert list(est.classes_) == list(abc)
    assert list(est.predict(Xd).compute()) == list(abc[np.searchsorted(ref.classes_,
                                                                       ref.predict(X))])

    X, y = a9a_small
    ref = LogisticRegression(tol=0.1).fit(X, y)
    Xs = da.from_array(X.toarray(), chunks=(300, 123)).map_blocks(sp.csr_matrix)
    est = LogisticRegression(tol=0.1).fit(Xs, y)  # sparse chunks, NumPy labels
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=1e-9)
    proba = est.predict_proba(Xs)
    assert isinstance(proba, da.Array)
    np.testing.assert_allclose(proba.compute(), ref.predict_proba(X), atol=1e-12)


def test_dataframe_with_label_column(client, tmp_path, dna, dna_frame):
    """A dask dataframe (features + label column) ingests to the matrix's store, and fits
    (X frame, y series) to the matrix's model; LinearSVR on dask targets too."""
    from distsvm import LinearSVC, ingest

    X, y = dna
    ddf = dd.from_pandas(dna_frame, npartitions=4)
    ref = ingest((X, y), str(tmp_path / "m.zarr"), block_rows=100)
    got = ingest(ddf, str(tmp_path / "d.zarr"), label="y", block_rows=100, client=client)
    same_store(ref, got)
    ref_m = LinearSVC(tol=0.1).fit(X, y)
    est = LinearSVC(tol=0.1).fit(ddf.drop(columns="y"), ddf["y"])
    np.testing.assert_allclose(est.coef_, ref_m.coef_, rtol=0, atol=1e-9)


@pytest.mark.slow
def test_svr_and_one_class_on_dask_arrays(client, dna):
    """LinearSVR on dask targets and LinearOneClassSVM on a dask array: the in-memory models."""
    from distsvm import LinearOneClassSVM, LinearSVR

    X, _ = dna
    t = X[:, :5] @ np.arange(1.0, 6.0)
    ref_r = LinearSVR(tol=0.1).fit(X, t)
    est_r = LinearSVR(tol=0.1).fit(da.from_array(X, chunks=(150, 180)), da.from_array(t, 150))
    np.testing.assert_allclose(est_r.coef_, ref_r.coef_, rtol=0, atol=1e-9)
    assert isinstance(est_r.predict(da.from_array(X, chunks=100)), da.Array)
    ref_o = LinearOneClassSVM(nu=0.3).fit(X)
    est_o = LinearOneClassSVM(nu=0.3).fit(da.from_array(X, chunks=(70, 180)))
    np.testing.assert_allclose(est_o.coef_, ref_o.coef_, rtol=0, atol=1e-9)
    assert abs(est_o.offset_ - ref_o.offset_) <= 1e-9
    np.testing.assert_array_equal(est_o.predict(da.from_array(X, chunks=100)).compute(),
                                  ref_o.predict(X))


@pytest.mark.parametrize("bad, needle", [
    ({"f3": np.nan}, "dask dataframe partition 2, row 5: missing, NaN or infinite value in "
                     "column 'f3'"),
    ({"y": np.nan}, "dask dataframe partition 2, row 5: missing, NaN or infinite label"),
    ({"f7": "x"}, "dask dataframe partition 2, row 5: value 'x' in column 'f7' is not a number"),
    ({"y": "pos"}, "dask dataframe partition 2, row 5: label 'pos' in column 'y' is not a number"),
])
def test_bad_partition_is_one_error_naming_partition_and_row(client, tmp_path, dna_frame, bad,
                                                             needle):
    df = dna_frame.copy()
    for col, value in bad.items():
        df[col] = df[col].astype(object)
        df.loc[154, col] = value  # partitions of 75 rows: the 5th row of partition 2
    with pytest.raises(InputDataError) as err:
        from distsvm import ingest

        ingest(dd.from_pandas(df, npartitions=4), str(tmp_path / "s.zarr"), label="y",
               client=client)
    assert str(err.value) == needle
    assert os.listdir(tmp_path) == []  # the staging group is removed


def _parquet_dir(path, df, files=3, row_group=70):
    os.makedirs(path)
    for k, part in enumerate(np.array_split(np.arange(len(df)), files)):
        df.iloc[part].to_parquet(path / f"part-{k}.parquet", row_group_size=row_group,
                                 index=False)


def test_cli_ingests_parquet_and_csv_directories_and_globs(client, tmp_path, capsys, dna,
                                                           dna_frame):
    """The dense layout from a directory of Parquet files (several row groups each), a glob
    of CSV files and the sparse layout (list columns): each the matrix's store."""
    X, y = dna
    sched = ["-q", "--block-rows", "100"]  # the session's cluster: the default client
    from distsvm import ingest

    ref = ingest((X, y), str(tmp_path / "ref.zarr"), block_rows=100)
    _parquet_dir(tmp_path / "pq", dna_frame)
    code, _, err = cli(capsys, "ingest", tmp_path / "pq", tmp_path / "a.zarr", "--label", "y",
                       *sched)
    assert code == 0, err
    same_store(ref, open_dataset(str(tmp_path / "a.zarr")))
    os.makedirs(tmp_path / "csv")
    for k, part in enumerate(np.array_split(np.arange(300), 2)):
        dna_frame.iloc[part].to_csv(tmp_path / "csv" / f"p{k}.csv", index=False)
    code, _, err = cli(capsys, "ingest", tmp_path / "csv" / "*.csv", tmp_path / "b.zarr",
                       "--label", "y", "--serial", "-q", "--block-rows", "100")
    assert code == 0, err
    same_store(ref, open_dataset(str(tmp_path / "b.zarr")))
    S = sp.csr_matrix(X)
    rows = [slice(S.indptr[i], S.indptr[i + 1]) for i in range(S.shape[0])]
    sparse = pd.DataFrame({"label": y, "idx": [S.indices[r].astype(np.int32) for r in rows],
                           "val": [S.data[r] for r in rows]})
    sparse.to_parquet(tmp_path / "sparse.parquet", row_group_size=120, index=False)
    code, _, err = cli(capsys, "ingest", tmp_path / "sparse.parquet", tmp_path / "c.zarr",
                       "--label", "label", "--indices", "idx", "--values", "val",
                       "--n-features", "180", *sched)
    assert code == 0, err
    same_store(ref, open_dataset(str(tmp_path / "c.zarr")))
    code, _, err = cli(capsys, "ingest", tmp_path / "pq" / "part-*.parquet", tmp_path / "r.zarr",
                       "--label", "y", "--regression", *sched)
    assert code == 0, err
    meta = open_dataset(str(tmp_path / "r.zarr")).meta
    assert meta.regression and meta.targets["max"] == 3 and meta.nnz == ref.meta.nnz


@pytest.mark.parametrize("column, value, needle", [
    ("f9", "oops", "part-1.parquet (row group 1), row 10: value 'oops' in column 'f9' is not "
                   "a number"),
    ("y", None, "part-1.parquet (row group 1), row 10: missing, NaN or infinite label"),
])
def test_cli_bad_parquet_row_is_one_line(client, tmp_path, capsys, dna_frame, column, value,
                                         needle):
    df = dna_frame.copy()
    df[column] = df[column].astype(str if value else object)
    df.loc[100 + 70 + 9, column] = value  # file 1 starts at row 100; row group 1 at +70
    _parquet_dir(tmp_path / "pq", df)
    code, out, err = cli(capsys, "ingest", tmp_path / "pq", tmp_path / "s.zarr", "--label", "y",
                         "-q")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("ERROR: ") and needle in err, err
    assert not glob.glob(str(tmp_path / "*.zarr")) and not glob.glob(str(tmp_path / ".s.zarr*"))
    code, _, err = cli(capsys, "ingest", tmp_path / "pq", tmp_path / "s.zarr", "-q", "--serial")
    assert code == 1 and err.count("\n") == 1 and "--label COLUMN" in err
    code, _, err = cli(capsys, "ingest", tmp_path / "pq", tmp_path / "s.zarr", "-q", "--serial",
                       "--label", "nope")
    assert code == 1 and err.count("\n") == 1 and "no column 'nope'" in err


def test_predict_writes_parquet_and_zarr_in_the_store_row_order(client, tmp_path, capsys,
                                                                a9a_small):
    """predict --output .parquet/.zarr: labels, decision values and -b 1 probabilities of
    every row in the store's row order, with each row's source position (``row``: the text
    output's line, which follows the source's order), written on the workers."""
    import zarr

    from distsvm import ingest, train
    from distsvm.model import save_model

    X, y = a9a_small
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=300)
    model = train(store, loss="logistic", eps=1e-3, client=client)
    save_model(model, tmp_path / "m.model")
    ordered = sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr), shape=(b.n_rows, 123))
                         for b in map(store.read_block, range(store.n_blocks))])
    sched = ["-q", "-b", "1"]
    code, out_txt, err = cli(capsys, "predict", store.url, tmp_path / "m.model", "--output",
                             tmp_path / "p.txt", *sched)
    assert code == 0, err
    text = np.loadtxt(tmp_path / "p.txt", skiprows=1)
    code, out, err = cli(capsys, "predict", store.url, tmp_path / "m.model", "--output",
                         tmp_path / "p.parquet", *sched)
    assert code == 0 and out == out_txt, err  # the same accuracy line
    got = pd.read_parquet(tmp_path / "p.parquet")
    assert list(got.columns) == ["label", "decision", "probability_1", "probability_-1", "row"]
    assert sorted(got["row"]) == list(range(len(y)))  # shuffled by ingest: rows out of order
    assert (got["row"].to_numpy() != np.arange(len(y))).any()
    by_row = got.sort_values("row")
    np.testing.assert_array_equal(by_row["label"], text[:, 0])
    np.testing.assert_allclose(by_row[["probability_1", "probability_-1"]], text[:, 1:],
                               atol=1e-5)
    np.testing.assert_allclose(got["decision"], model.decision_function(ordered), atol=1e-9)
    np.testing.assert_allclose(by_row["decision"], model.decision_function(X), atol=1e-9)
    code, out, err = cli(capsys, "predict", store.url, tmp_path / "m.model", "--output",
                         tmp_path / "p.zarr", *sched)
    assert code == 0 and out == out_txt, err
    g = zarr.open_group(str(tmp_path / "p.zarr"), mode="r")
    np.testing.assert_array_equal(g["row"][:], got["row"])
    np.testing.assert_array_equal(g["label"][:], got["label"])
    np.testing.assert_allclose(g["decision"][:], got["decision"], atol=0)
    np.testing.assert_allclose(g["probability"][:][np.argsort(g["row"][:])], text[:, 1:],
                               atol=1e-5)
    assert g.attrs["distsvm_predictions"]["probability"] == ["probability_1", "probability_-1"]
    code, _, err = cli(capsys, "predict", store.url, tmp_path / "m.model", "--output",
                       tmp_path / "p.zarr", *sched)
    assert code == 1 and err.count("\n") == 1 and "exists" in err
    from distsvm import predict  # Python: the same, by the output's suffix

    result = predict(store, model, output=tmp_path / "q.parquet", client=client)
    assert result["accuracy"] == predict(store, model, client=client)["accuracy"]
    assert pd.read_parquet(tmp_path / "q.parquet")["label"].tolist() == got["label"].tolist()


@pytest.mark.slow
def test_s3_parquet_ingest(client, s3, tmp_path, capsys, dna, dna_frame):
    """An s3:// directory of Parquet files on the S3 test server, read by the workers, into
    an s3:// store: the matrix's store."""
    from distsvm import ingest

    X, y = dna
    ref = ingest((X, y), str(tmp_path / "ref.zarr"), block_rows=100)
    _parquet_dir(tmp_path / "pq", dna_frame, files=2, row_group=80)
    s3["fs"].put(str(tmp_path / "pq") + "/", f"{BUCKET}/pq/", recursive=True)
    code, _, err = cli(capsys, "ingest", f"s3://{BUCKET}/pq/", f"s3://{BUCKET}/dna.zarr",
                       "--label", "y", "--block-rows", "100", "-q", *opts(s3["options"]))
    assert code == 0, err
    store = open_dataset(f"s3://{BUCKET}/dna.zarr", s3["options"])
    same_store(ref, store)
    from distsvm import train
    from distsvm.model import save_model

    save_model(train(ref, eps=0.1, client=client), tmp_path / "m.model")
    code, text, err = cli(capsys, "predict", ref.url, tmp_path / "m.model", "--output",
                          tmp_path / "p.txt", "-q")
    assert code == 0, err
    for name in ("p.parquet", "p.zarr"):  # predictions written to the bucket by the workers
        code, out, err = cli(capsys, "predict", f"s3://{BUCKET}/dna.zarr", tmp_path / "m.model",
                             "--output", f"s3://{BUCKET}/{name}", "-q", *opts(s3["options"]))
        assert code == 0 and out == text, err
    got = pd.read_parquet(f"s3://{BUCKET}/p.parquet", storage_options=s3["options"])
    # the table keeps the store's order with each row's source position; the text, source order
    np.testing.assert_array_equal(got.sort_values("row")["label"], np.loadtxt(tmp_path / "p.txt"))


def test_piece_checks_name_the_row():
    """The checks of distsvm.storage.tabular, without a cluster: dask array chunks and the sparse
    layout's list columns."""
    from distsvm.storage import tabular as tab

    X = np.ones((4, 3))
    X[2, 1] = np.inf
    with pytest.raises(InputDataError, match=r"^chunk 1, row 3: NaN or infinite value$"):
        tab.chunk_to_csr(X, "chunk 1", "float32")
    with pytest.raises(InputDataError, match=r"^chunk 1, row 3: NaN or infinite value$"):
        tab.chunk_to_csr(sp.csr_matrix(X), "chunk 1", "float32")
    with pytest.raises(InputDataError, match=r"^c, row 2: missing, NaN or infinite label$"):
        tab.check_labels([1.0, np.nan], 2, "c")

    def frame(idx, val):
        return pd.DataFrame({"y": np.ones(len(idx)), "i": idx, "v": val})

    ok = frame([np.array([3, 0]), np.array([], np.int64)], [np.array([2.0, 1.0]), np.array([])])
    ptr, ind, dat, y, n = tab.frame_to_csr(ok, "f", label="y", indices="i", values="v")
    assert (list(ptr), list(ind), list(dat), n) == ([0, 2, 2], [0, 3], [1.0, 2.0], 4)
    for idx, val, needle in [
        ([np.array([1]), np.array([2, 2])], [np.array([1.0]), np.array([1.0, 1.0])],
         "f, row 2: repeated feature index"),
        ([np.array([1]), np.array([-1])], [np.array([1.0]), np.array([1.0])],
         "f, row 2: negative feature index"),
        ([np.array([1]), np.array([0, 1])], [np.array([1.0]), np.array([1.0])],
         "f, row 2: 2 indices in 'i' but 1 values in 'v'"),
    ]:
        with pytest.raises(InputDataError) as err:
            tab.frame_to_csr(frame(idx, val), "f", label="y", indices="i", values="v")
        assert str(err.value) == needle


def test_a_csv_file_is_read_in_pieces(tmp_path, monkeypatch, dna, dna_frame):
    """An uncompressed CSV file is cut at line ends into pieces of about CSV_PIECE_BYTES, each
    read (header + its bytes) and written as one part: memory bounded by a piece, the store
    the matrix's; a bad value names its piece and row."""
    from distsvm import ingest
    from distsvm.storage import tabular as tab

    X, y = dna
    ref = ingest((X, y), str(tmp_path / "ref.zarr"), block_rows=100)
    path = str(tmp_path / "all.csv")
    dna_frame.to_csv(path, index=False)
    monkeypatch.setattr(tab, "CSV_PIECE_BYTES", 20_000)
    header, ranges = tab.csv_pieces(path)
    size = os.path.getsize(path)
    assert len(ranges) == -(-(size - len(header)) // 20_000) > 3
    assert ranges[0][0] == len(header) and ranges[-1][1] == size
    assert all(a == b for (_, a), (b, _) in zip(ranges, ranges[1:]))
    counts = tab.count_rows(path, "csv")
    assert len(counts) == len(ranges) and sum(counts) == 300
    d = ingest(path, str(tmp_path / "a.zarr"), label="y", block_rows=100)
    same_store(ref, d)
    bad = dna_frame.astype({"f3": object})
    bad.loc[250, "f3"] = "oops"
    bad.to_csv(path, index=False)
    piece = next(g for g, c in enumerate(np.cumsum(tab.count_rows(path, "csv"))) if c > 250)
    row = 250 - int(np.sum(tab.count_rows(path, "csv")[:piece])) + 1
    with pytest.raises(InputDataError, match=rf"all\.csv \(piece {piece + 1}\), row {row}: "
                                             r"value 'oops' in column 'f3' is not a number"):
        ingest(path, str(tmp_path / "b.zarr"), label="y", block_rows=100, overwrite=True)
