"""Issue 19 item 3: every resource a file can make us spend is bounded before it is spent.

Model and checkpoint archives are checked (member sizes, ``.npy`` headers against the
declared sizes and the expected shapes) before anything is decompressed; specs refuse
YAML aliases (billion laughs), deep nesting and repeated keys quickly; a feature count
whose weight vectors cannot fit a worker is refused at ingest and before training, with
the estimate.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

from distsvm import model as model_module
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.model import Model, ModelFormatError, load_model, save_model
from distsvm.spec import SpecError, read_document
from distsvm.storage import CorruptStoreError, InputDataError, open_dataset
from distsvm.storage import checkpoint as files
from distsvm.storage import dataset as ds

from .conftest import REPO


def _npy(a: np.ndarray, shape=None) -> bytes:
    """``a`` as .npy bytes, its header declaring ``shape`` (default: its own)."""
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    raw = buf.getvalue()
    if shape is None:
        return raw
    head = np.lib.format.header_data_from_array_1_0(a)
    head["shape"] = shape
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, head)
    return out.getvalue() + raw[len(out.getvalue()):]


def _model_file(tmp_path, w_bytes: bytes, **header) -> str:
    m = Model(w=np.zeros(11), bias=1.0, classes=(-1.0, 1.0), solver="dcd",
              loss="squared_hinge", params={}, summary={}, n_features=10)
    path = tmp_path / "m.model"
    save_model(m, path)
    with zipfile.ZipFile(path) as z:
        doc = json.loads(z.read("model.json"))
    doc.update(header)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("model.json", json.dumps(doc))
        z.writestr("w.npy", w_bytes)
    return str(path)


def test_a_sound_model_loads(tmp_path):
    m = load_model(_model_file(tmp_path, _npy(np.arange(11.0))))
    assert m.w[3] == 3.0


def test_a_weight_header_larger_than_its_member_is_refused(tmp_path):
    """A header declaring 2⁴⁰ doubles in a member of 88 bytes: NumPy would allocate 8 TiB."""
    path = _model_file(tmp_path, _npy(np.zeros(11), shape=(2**40,)))
    t = time.perf_counter()
    with pytest.raises(ModelFormatError, match="declares shape .* but holds"):
        load_model(path)
    assert time.perf_counter() - t < 2


def test_weights_larger_than_the_header_allows_are_refused_unread(tmp_path):
    """A small archive whose w.npy really decompresses to 8 MB for a 10-feature model."""
    path = _model_file(tmp_path, _npy(np.zeros(10**6)))
    assert (tmp_path / "m.model").stat().st_size < 50_000
    with pytest.raises(ModelFormatError, match="more than the 2 x 11"):
        load_model(path)


def test_a_huge_declared_model_is_refused_with_its_size(tmp_path):
    """n_features and w.npy agree on 2³⁶ weights (512 GiB): refused by the memory check,
    from the header alone (the member's declared size is patched, never written)."""
    n = 2**36
    head = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    head["shape"] = (n + 1,)
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, head)
    body = out.getvalue() + b"\0" * 64
    path = _model_file(tmp_path, body, n_features=n, w_shape=[n + 1])
    with zipfile.ZipFile(path) as src:
        header = src.read("model.json")
    declared = len(out.getvalue()) + 8 * (n + 1)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model.json", header)
        with z.open("w.npy", "w", force_zip64=True) as f:
            f.write(body)
        z.filelist[-1].file_size = declared  # the central directory declares 512 GiB
    with zipfile.ZipFile(path) as z:
        assert z.getinfo("w.npy").file_size == declared
    t = time.perf_counter()
    with pytest.raises(ModelFormatError, match="GiB in memory, more than this machine's"):
        load_model(path)
    assert time.perf_counter() - t < 2


def test_a_huge_model_header_member_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(model_module, "MAX_HEADER_BYTES", 100)
    with pytest.raises(ModelFormatError, match="model.json declares .* bytes, more than 100"):
        load_model(_model_file(tmp_path, _npy(np.zeros(11))))


def test_object_arrays_are_refused(tmp_path):
    head = np.lib.format.header_data_from_array_1_0(np.zeros(11))
    head["descr"] = "|O"
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, head)
    with pytest.raises(ModelFormatError, match="not a number"):
        load_model(_model_file(tmp_path, out.getvalue() + b"\0" * 88))


def test_checkpoint_bundles_are_checked_before_decompression(tmp_path):
    url = str(tmp_path / "c.npz")
    digest = files.write_arrays(url, {"w": np.arange(5.0)})
    assert files.read_arrays(url, digest)["w"][4] == 4.0
    for name, body, compress in [("lying.npz", _npy(np.zeros(5), shape=(2**40,)), 0),
                                 ("bomb.npz", _npy(np.zeros(10**6)), zipfile.ZIP_DEFLATED)]:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compress or zipfile.ZIP_STORED) as z:
            z.writestr("w.npy", body)
        path = str(tmp_path / name)
        files.write_bytes(path, buf.getvalue())
        with pytest.raises(CorruptStoreError, match=name):
            files.read_arrays(path, files.sha256(buf.getvalue()))


# ---------------------------------------------------------------- specs

BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
train: *i
"""

SPECS = {  # name: (text, words of the message)
    "bomb.yaml": (BOMB, "aliases"),
    "deep.yaml": ("train: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than"),
    "deep_block.yaml": ("".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "x\n",
                        "nested more than"),
    "dup.yaml": ("train: a.zarr\nmodel: m\ntrain: b.zarr\n", "'train' is given twice"),
    "deep.json": ('{"train": ' + "[" * 500 + "]" * 500 + "}", "nested more than"),
    "deeper.json": ('{"train": ' + "[" * 100000 + "]" * 100000 + "}", "JSON"),
    "dup.json": ('{"train": "a.zarr", "train": "b.zarr"}', "'train' is given twice"),
    "deep.toml": ("train = " + "[" * 100 + "]" * 100 + "\n", "nested more than"),
    "big.yaml": ("# " + "x" * (2 << 20) + "\n", "larger than"),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hostile_specs_are_refused_quickly(tmp_path, name):
    text, words = SPECS[name]
    path = tmp_path / name
    path.write_text(text)
    t = time.perf_counter()
    with pytest.raises(SpecError, match=words) as e:
        read_document(path)
    assert time.perf_counter() - t < 2 and "\n" not in str(e.value)


def test_sound_specs_still_read(tmp_path):
    (tmp_path / "ok.yaml").write_text("train: a.zarr\nsolver: {C: 2, eps: 0.1}\n"
                                      "cluster: {embedded: {workers: 2}}\n")
    assert read_document(tmp_path / "ok.yaml")["solver"]["C"] == 2
    (tmp_path / "ok.json").write_text('{"train": "a.zarr", "solver": {"C": 2}}')
    assert read_document(tmp_path / "ok.json")["solver"] == {"C": 2}


def test_cli_refuses_a_billion_laughs_spec_with_one_line(tmp_path):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "distsvm.cli", "run", str(tmp_path / "bomb.yaml")],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert time.perf_counter() - t < 30
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("ERROR: "), p.stderr
    assert "aliases" in lines[0]


# ---------------------------------------------------------------- memory


def test_a_feature_index_of_2_to_the_31_is_refused_at_ingest(tmp_path):
    src = tmp_path / "big.svm"
    src.write_text("1 1:1 2147483648:1\n-1 2:1\n1 3:0.5\n-1 1:2\n")
    with pytest.raises(InputDataError, match=r"2147483648 features .* 32\.0 GiB"):
        ingest(str(src), str(tmp_path / "b.zarr"))
    assert not list(tmp_path.glob("*.zarr")) and not list(tmp_path.glob(".*staging*"))


def test_a_store_too_wide_for_the_workers_is_refused_before_training(tmp_path, client):
    """A header that declares 2³¹ features (sealed again, as a writer would): refused before
    any task, with the estimate; the cluster is untouched."""
    import zarr

    d = ingest((np.eye(4, dtype=np.float32), np.array([1, -1, 1, -1])),
               str(tmp_path / "w.zarr"), block_rows=4)
    g = zarr.open_group(d.url, mode="r+")
    meta = g.attrs["distsvm"]
    meta["n_features"] = 2**31
    g.attrs["distsvm"] = ds.seal_metadata(meta)
    with pytest.raises(InputDataError, match="GiB in each worker .* a worker's memory limit"):
        train(open_dataset(d.url), client=client, solver="dcd")


def test_a_block_larger_than_a_worker_is_refused_with_the_estimate(client):
    """The block-size half of the floor: a worker holds two decoded blocks."""
    from distsvm import resources

    limit, what = resources.worker_memory(client)
    assert what == "a worker's memory limit" and limit > 0
    resources.check_fits("s.zarr", 123, limit // 4, client)  # fits: two blocks of a quarter
    with pytest.raises(InputDataError, match=r"blocks of up to .* [GM]iB need at least"):
        resources.check_fits("s.zarr", 123, limit, client)
