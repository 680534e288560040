"""A data file where a store is expected (issue 29, item 2) and predictions in the source's
order (item 6): ``train a9a.xz m.model`` and ``predict a9a.t.xz m.model out`` as LIBLINEAR's
train and predict, the file ingested once beside it and reused while it is unchanged, and
``predict --output`` line i the prediction of the source's row i, whatever ingest's shuffle.
Real files, real Zarr stores, real processes; LIBLINEAR's own predictions as reference."""

from __future__ import annotations

import glob
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm.cli import main
from distsvm.model import load_model
from distsvm.storage import dataset as ds
from distsvm.storage import open_dataset

from .conftest import DATA, load_xy

liblinearutil = pytest.importorskip("liblinear.liblinearutil")


def cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def plain(src, dst, repeat: int = 1):
    """The text of the .xz file ``src`` written to ``dst`` (``repeat`` times over)."""
    with lzma.open(src, "rb") as f:
        text = f.read()
    with open(dst, "wb") as f:
        for _ in range(repeat):
            f.write(text)
    return dst


def liblinear_predictions(train_file, test_file, options: str):
    """LIBLINEAR's predictions of ``test_file``'s rows, in its order (plain text files)."""
    y, x = liblinearutil.svm_read_problem(str(train_file))
    yt, xt = liblinearutil.svm_read_problem(str(test_file))
    model = liblinearutil.train(y, x, options + " -q")
    labels, _, _ = liblinearutil.predict(yt, xt, model, "-q")
    return np.asarray(labels)


def test_train_and_predict_a_libsvm_file_as_liblinear(tmp_path, capsys):
    """``train a9a.xz m.model`` then ``predict a9a.t.xz m.model out.txt`` (LIBLINEAR's
    habit): each file ingested into FILE.zarr beside it, said in one line, and out.txt is
    LIBLINEAR's predictions line for line (measured: 16280 of 16281 rows agree, the other a
    tie at the boundary; the store's shuffled order agreed on 68%)."""
    shutil.copy(DATA / "a9a.xz", tmp_path)
    shutil.copy(DATA / "a9a.t.xz", tmp_path)
    code, _, err = cli(capsys, "train", tmp_path / "a9a.xz", tmp_path / "m.model", "-s", "2",
                       "-e", "0.0001")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "a9a.xz:" in line and "ingested" in line]
    assert len(lines) == 1 and str(tmp_path / "a9a.xz.zarr") in lines[0], err
    assert open_dataset(str(tmp_path / "a9a.xz.zarr")).meta.n_rows == 32561
    code, out, err = cli(capsys, "predict", tmp_path / "a9a.t.xz", tmp_path / "m.model",
                         tmp_path / "out.txt")
    assert code == 0, err
    assert "Accuracy = 84.9" in out
    ours = np.loadtxt(tmp_path / "out.txt")
    ref = liblinear_predictions(plain(DATA / "a9a.xz", tmp_path / "a9a"),
                                plain(DATA / "a9a.t.xz", tmp_path / "a9a.t"), "-s 2 -e 0.0001")
    assert ours.shape == ref.shape == (16281,)
    assert np.mean(ours == ref) > 0.999, np.mean(ours == ref)
    # the same with --output, and both is a usage error
    code, _, err = cli(capsys, "predict", tmp_path / "a9a.t.xz", tmp_path / "m.model",
                       "--output", tmp_path / "out2.txt", "-q")
    assert code == 0 and (tmp_path / "out2.txt").read_text() == (tmp_path / "out.txt").read_text()
    with pytest.raises(SystemExit) as exit_:
        main(["predict", str(tmp_path / "a9a.t.xz"), str(tmp_path / "m.model"), "o1",
              "--output", "o2"])
    assert exit_.value.code == 2


def test_train_without_a_model_path_writes_liblinear_s(tmp_path, capsys, monkeypatch):
    """``train FILE`` (no MODEL) writes FILE's name and .model in the current folder, as
    LIBLINEAR's train does; with -v it writes none."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    data = plain(DATA / "dna.scale.xz", tmp_path / "data" / "dna")
    code, _, err = cli(capsys, "train", data, "-s", "2", "-q")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["data", "dna.model"]
    assert load_model(str(tmp_path / "dna.model")).n_features == 180
    code, out, err = cli(capsys, "train", data, "-v", "3", "-s", "2", "-q")
    assert code == 0 and "Cross Validation Accuracy" in out, err
    assert sorted(os.listdir(tmp_path)) == ["data", "dna.model"]


def test_reused_while_unchanged_ingested_again_when_changed(tmp_path, capsys):
    """The store is reused while the file's size and time are the same, or its bytes are
    (a touched file); a changed file is ingested again; --cache-dir puts the store there."""
    src = plain(DATA / "dna.scale.xz", tmp_path / "dna")
    model = tmp_path / "m.model"
    code, _, err = cli(capsys, "train", src, model)
    assert code == 0 and "ingested into" in err, err
    created = open_dataset(str(src) + ".zarr").meta.created
    code, _, err = cli(capsys, "train", src, model)
    assert code == 0 and "unchanged: same size and modification time" in err, err
    assert "ingested" not in err
    os.utime(src, ns=(time.time_ns(), time.time_ns() + 10**9))  # touched: the same bytes
    code, _, err = cli(capsys, "train", src, model)
    assert code == 0 and "unchanged: same size and SHA-256" in err, err
    assert open_dataset(str(src) + ".zarr").meta.created == created
    text = src.read_bytes()
    src.write_bytes(text[:text.index(b"\n", len(text) // 2) + 1])  # half the rows
    code, _, err = cli(capsys, "train", src, model)
    assert code == 0 and "ingested again (it changed)" in err, err
    assert open_dataset(str(src) + ".zarr").meta.n_rows < 2000
    code, _, err = cli(capsys, "train", src, model, "--cache-dir", tmp_path / "cache")
    stores = glob.glob(str(tmp_path / "cache" / "dna-*.zarr"))
    assert code == 0 and len(stores) == 1 and stores[0] in err, err


def test_a_path_at_the_cache_name_is_never_replaced(tmp_path, capsys):
    """A folder (not a store) or a store of other data where FILE.zarr would go: one line,
    nothing replaced."""
    src = plain(DATA / "dna.scale.t.xz", tmp_path / "dna.t")
    (tmp_path / "dna.t.zarr").mkdir()
    (tmp_path / "dna.t.zarr" / "mine.txt").write_text("keep")
    code, _, err = cli(capsys, "train", src, tmp_path / "m.model")
    assert code == 1 and err.count("\n") == 1 and "not a distsvm store" in err, err
    assert (tmp_path / "dna.t.zarr" / "mine.txt").read_text() == "keep"
    shutil.rmtree(tmp_path / "dna.t.zarr")
    code, _, err = cli(capsys, "ingest", DATA / "a9a.t.xz", tmp_path / "dna.t.zarr", "-q")
    assert code == 0, err
    code, _, err = cli(capsys, "train", src, tmp_path / "m.model")
    assert code == 1 and err.count("\n") == 1 and "not made from" in err, err
    assert open_dataset(str(tmp_path / "dna.t.zarr")).meta.n_rows == 16281


def _distsvm(*args):
    return subprocess.Popen([sys.executable, "-m", "distsvm", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_runs_ingest_once(tmp_path):
    """Two train commands on one new file at once: the store's lock serializes them, one
    ingests and the other reuses its store (never two ingests, never a half store)."""
    src = plain(DATA / "a9a.xz", tmp_path / "a9a", repeat=2)
    procs = [_distsvm("train", src, tmp_path / f"m{i}.model", "--max-rounds", "3")
             for i in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    ingested = [e for e in errs if "ingested into" in e]
    reused = [e for e in errs if "its store" in e and "unchanged" in e]
    assert len(ingested) == 1 and len(reused) == 1, errs
    assert open_dataset(str(src) + ".zarr").meta.n_rows == 2 * 32561


def test_an_interrupted_ingest_is_never_taken_for_a_store(tmp_path, capsys):
    """A train killed (SIGKILL) while it ingests leaves its staging folder, never FILE.zarr;
    the next train ingests the file whole and removes the leftover."""
    src = plain(DATA / "a9a.xz", tmp_path / "a9a", repeat=6)
    proc = _distsvm("train", src, tmp_path / "m.model", "--max-rounds", "1")
    deadline = time.monotonic() + 120
    while not glob.glob(str(tmp_path / ".a9a.zarr.staging-*")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not os.path.exists(str(src) + ".zarr")
    code, _, err = cli(capsys, "train", src, tmp_path / "m.model", "--max-rounds", "1")
    assert code == 0 and "ingested into" in err, err
    assert open_dataset(str(src) + ".zarr").meta.n_rows == 6 * 32561
    assert not glob.glob(str(tmp_path / ".a9a.zarr.staging-*"))


def test_a_parquet_file_with_its_label_column(tmp_path, capsys):
    """A Parquet file given to train and predict with --label: ingested and reused as a
    text file; predict's output follows the file's rows."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    X, y = load_xy(DATA / "dna.scale.xz")
    frame = pd.DataFrame(X.toarray(), columns=[f"f{j}" for j in range(X.shape[1])])
    frame["y"] = y
    frame.to_parquet(tmp_path / "dna.parquet")
    code, _, err = cli(capsys, "train", tmp_path / "dna.parquet", tmp_path / "m.model",
                       "--label", "y", "-s", "2")
    assert code == 0 and "ingested into" in err, err
    code, out, err = cli(capsys, "predict", tmp_path / "dna.parquet", tmp_path / "m.model",
                         tmp_path / "out.txt", "--label", "y")
    assert code == 0 and "unchanged" in err, err
    from distsvm.model import load_model

    model = load_model(tmp_path / "m.model")
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "out.txt"), model.predict(X))
    code, _, err = cli(capsys, "train", tmp_path / "dna.parquet", tmp_path / "m.model")
    assert code == 1 and err.count("\n") == 1 and "--label" in err, err


def test_python_takes_a_data_file_too(tmp_path):
    """distsvm.train, the estimators and distsvm.predict take the file's path as the CLI
    does (the same store beside it, reused)."""
    import distsvm

    src = plain(DATA / "dna.scale.xz", tmp_path / "dna")
    model = distsvm.train(str(src), loss="squared_hinge", solver="newton")
    store = open_dataset(str(src) + ".zarr")
    assert store.meta.n_rows == 2000 and model.w.shape == (3, 180)  # -B -1
    clf = distsvm.LinearSVC(dual=False).fit(str(src))
    assert clf.coef_.shape == (3, 180)
    assert open_dataset(str(src) + ".zarr").meta.created == store.meta.created  # reused
    X, y = load_xy(DATA / "dna.scale.xz", 180)
    assert clf.score(str(src)) == pytest.approx(np.mean(clf.predict(X) == y))


# ---------------------------------------------------------------- item 6: the source's order


@pytest.fixture(scope="module")
def a9a_test():
    return load_xy(DATA / "a9a.t.xz", n_features=123)


@pytest.fixture(scope="module")
def model_a9a(tmp_path_factory):
    from distsvm import train

    path = tmp_path_factory.mktemp("m")
    code = main(["ingest", str(DATA / "a9a.xz"), str(path / "a9a.zarr"), "-q"])
    assert code == 0
    model = train(str(path / "a9a.zarr"), loss="logistic", solver="newton", eps=1e-3)
    from distsvm.model import save_model

    save_model(model, path / "m.model")
    return model, path / "m.model"


def test_predict_output_follows_the_source_on_a_shuffled_store(tmp_path, capsys, a9a_test,
                                                               model_a9a):
    """ingest shuffles the rows over 9 blocks; predict --output (text, and -b 1) writes
    line i for the file's row i: the model's own predictions of the file's rows in order
    (before: the store's order, 68% agreement with LIBLINEAR's output)."""
    X, _ = a9a_test
    model, path = model_a9a
    code, _, err = cli(capsys, "ingest", DATA / "a9a.t.xz", tmp_path / "t.zarr", "--block-rows",
                       "2000", "-q")
    assert code == 0, err
    store = open_dataset(str(tmp_path / "t.zarr"))
    assert len(store.meta.blocks) == 9 and store.meta.positioned
    order = np.concatenate([ds.read_block_positions(store.url, b) for b in store.meta.blocks])
    assert sorted(order) == list(range(X.shape[0]))
    assert np.mean(order == np.arange(X.shape[0])) < 0.01  # shuffled: rows out of the file's order
    code, _, err = cli(capsys, "predict", tmp_path / "t.zarr", path, "--output",
                       tmp_path / "out.txt", "-q")
    assert code == 0, err
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "out.txt"), model.predict(X))
    code, _, err = cli(capsys, "predict", tmp_path / "t.zarr", path, "--output",
                       tmp_path / "p.txt", "-b", "1", "-q")
    assert code == 0, err
    got = np.loadtxt(tmp_path / "p.txt", skiprows=1)
    np.testing.assert_array_equal(got[:, 0], model.predict(X))
    np.testing.assert_allclose(got[:, 1], model.predict_proba(X)[:, 1], atol=1e-5)


def test_predict_output_in_source_order_on_a_two_worker_cluster(tmp_path, client, a9a_test,
                                                                model_a9a):
    """The same on a LocalCluster of two worker processes (blocks on both), and after an
    append (the part's rows follow the store's)."""
    from distsvm import predict
    from distsvm.ingest import ingest

    X, y = a9a_test
    model, _ = model_a9a
    half = X.shape[0] // 2
    store = ingest((X[:half], y[:half]), str(tmp_path / "s.zarr"), block_rows=1500,
                   client=client)
    part = ingest((X[half:], y[half:]), str(tmp_path / "p.zarr"), block_rows=1500, seed=3)
    store = ds.append(store.url, part, {"partition": "p"})
    assert store.meta.positioned and len(store.meta.blocks) == 12
    predict(store, model, client=client, output=tmp_path / "out.txt")
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "out.txt"), model.predict(X))


def test_a_store_without_positions_refuses_output_in_one_line(tmp_path, capsys, model_a9a):
    """A shuffled store ingested before positions were kept (made here by taking them out
    of its header): predict still reports, but --output is one line, nothing written; a
    --no-shuffle one (in the file's order) writes as before."""
    _, path = model_a9a
    for name, extra in (("old.zarr", []), ("ordered.zarr", ["--no-shuffle"])):
        code, _, err = cli(capsys, "ingest", DATA / "a9a.t.xz", tmp_path / name, "--block-rows",
                           "4000", "--n-features", "123", "-q", *extra)
        assert code == 0, err
        g = ds.open_group(str(tmp_path / name), "r+")
        header = dict(g.attrs["distsvm"])
        header["blocks"] = [{**b, "crc32": {k: v for k, v in b["crc32"].items()
                                            if k != ds.POSITION}} for b in header["blocks"]]
        g.attrs["distsvm"] = ds.seal_metadata(header)
        assert not open_dataset(str(tmp_path / name)).meta.positioned
    code, out, err = cli(capsys, "predict", tmp_path / "old.zarr", path, "--output",
                         tmp_path / "out.txt")
    assert code == 1 and err.count("\n") == 1 and "kept no source positions" in err, err
    assert not (tmp_path / "out.txt").exists()
    code, out, err = cli(capsys, "predict", tmp_path / "old.zarr", path)
    assert code == 0 and "Accuracy" in out
    code, out, err = cli(capsys, "predict", tmp_path / "ordered.zarr", path, "--output",
                         tmp_path / "out.txt")
    assert code == 0, err
    X, _ = load_xy(DATA / "a9a.t.xz", n_features=123)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "out.txt"),
                                  model_a9a[0].predict(sp.csr_matrix(X)))
