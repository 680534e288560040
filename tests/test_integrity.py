"""Issue 19 item 5: what a run resumes from, and a store's metadata, are sealed by a digest.

An edited checkpoint manifest (its round, its state) is refused — the run continues from
the previous complete checkpoint, never from the edited one; an edited store header or
column-view header is refused with one line, and appends (which rewrite the header) keep
working.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from distsvm.checkpoint import MANIFEST, Checkpointer
from distsvm.columns import columnize
from distsvm.ingest import ingest
from distsvm.storage import CorruptStoreError, open_dataset
from distsvm.storage import columns as cols
from distsvm.storage import dataset as ds


def _run(tmp_path) -> Checkpointer:
    ck = Checkpointer(str(tmp_path / "run"), every=1, params={"C": 1.0}, keep=3)
    for r in (1, 2, 3):
        ck.save(r, "dcd", {"w": np.full(4, float(r))}, {"rng": [r, 7], "best": float(r)})
    return ck


def _manifest(ck: Checkpointer, r: int) -> pathlib.Path:
    return pathlib.Path(ck.directory(r)) / MANIFEST


def _edit(path: pathlib.Path, change) -> None:
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))


def test_sound_checkpoints_resume_from_the_newest(tmp_path):
    ck = _run(tmp_path)
    c = ck.latest("dcd")
    assert c.round == 3 and c.state["best"] == 3.0 and c.arrays["w"][0] == 3.0
    assert json.loads(_manifest(ck, 3).read_text())["digest"].startswith("sha256:")


@pytest.mark.parametrize("edit", ["round", "state", "params", "digest"])
def test_an_edited_manifest_is_never_resumed_from(tmp_path, edit):
    ck = _run(tmp_path)

    def change(m):
        if edit == "round":
            m["round"] = 1
        elif edit == "state":
            m["state"]["best"] = 99.0
        elif edit == "params":
            m["params"]["C"] = 2.0
        else:
            del m["digest"]

    _edit(_manifest(ck, 3), change)
    c = ck.latest("dcd")
    assert c.round == 2 and c.state["best"] == 2.0  # the previous, sound checkpoint


def test_a_round_edited_with_a_recomputed_digest_is_still_refused(tmp_path):
    """The round must be its directory's: a manifest moved or re-sealed with another round
    does not make a run resume from the wrong round."""
    ck = _run(tmp_path)
    _edit(_manifest(ck, 3), lambda m: (m.__setitem__("round", 1), ds.seal_metadata(m)))
    assert ck.latest("dcd").round == 2


def test_version_2_manifests_without_a_digest_still_resume(tmp_path):
    ck = _run(tmp_path)
    _edit(_manifest(ck, 3), lambda m: (m.pop("digest"), m.__setitem__("format_version", 2)))
    assert ck.latest("dcd").round == 3


def test_a_manifest_naming_files_outside_its_directory_is_refused(tmp_path):
    ck = _run(tmp_path)
    _edit(_manifest(ck, 3), lambda m: (m["files"].__setitem__("../../x.npz", "0" * 64),
                                       ds.seal_metadata(m)))
    assert ck.latest("dcd").round == 2


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = (rng.random((300, 20)) < 0.3).astype(np.float32) * rng.random((300, 20),
                                                                      dtype=np.float32)
    y = np.where(rng.random(300) < 0.5, 1.0, -1.0)
    root = tmp_path_factory.mktemp("integrity")
    d = ingest((X, y), str(root / "s.zarr"), block_rows=100)
    columnize(d, memory_mb=16, block_mb=1)
    part = ingest((X[:50], y[:50]), str(root / "p.zarr"), block_rows=50)
    return d.url, part


def _zarr_json(url) -> pathlib.Path:
    return pathlib.Path(url) / "zarr.json"


@pytest.mark.parametrize("key", ["n_features", "nnz_block", "classes", "digest"])
def test_an_edited_store_header_is_refused(tmp_path, store, key):
    import shutil

    url = str(tmp_path / "s.zarr")
    shutil.copytree(store[0], url)

    def change(doc):
        meta = doc["attributes"]["distsvm"]
        if key == "n_features":
            meta["n_features"] = 10
        elif key == "nnz_block":  # consistent otherwise: only the digest tells
            meta["blocks"][0]["nnz"] += 1
            meta["blocks"][1]["nnz"] -= 1
        elif key == "classes":
            meta["classes"] = [-1.0, 2.0]
        else:
            meta["digest"] = "sha256:" + "0" * 64

    _edit(_zarr_json(url), change)
    with pytest.raises(CorruptStoreError, match="dataset metadata .* fails its SHA-256 digest"):
        open_dataset(url)


def test_an_edited_column_view_header_is_refused(tmp_path, store):
    import shutil

    url = str(tmp_path / "s.zarr")
    shutil.copytree(store[0], url)
    _edit(_zarr_json(url), lambda doc: doc["attributes"][cols.ATTRIBUTE].__setitem__(
        "passes", 5))
    with pytest.raises(CorruptStoreError, match="column view metadata .* SHA-256 digest"):
        cols.read_columns_meta(open_dataset(url))


def test_headers_without_a_digest_are_read_and_appends_reseal(tmp_path, store):
    """A store written before headers were sealed opens as before; an append (which
    rewrites the header) seals it again, and the appended store verifies."""
    import shutil

    url = str(tmp_path / "s.zarr")
    shutil.copytree(store[0], url)
    _edit(_zarr_json(url), lambda doc: doc["attributes"]["distsvm"].pop("digest"))
    assert open_dataset(url).meta.n_rows == 300
    d = ds.append(url, store[1], {"file": "p"})
    assert d.meta.n_rows == 350
    assert json.loads(_zarr_json(url).read_text())["attributes"]["distsvm"]["digest"] == \
        ds.metadata_digest(json.loads(_zarr_json(url).read_text())["attributes"]["distsvm"])
    d.verify()


def test_a_forged_block_state_is_refused_on_resume(tmp_path, store, client):
    """A block file of a checkpoint rewritten with a row index past its block, its SHA-256
    put in the manifest and the manifest sealed again (what anyone who can write the run
    directory can do): resume refuses it with one line; the workers survive."""
    import io
    import warnings

    from distsvm.errors import ConvergenceWarning
    from distsvm.jobs import train
    from distsvm.storage import checkpoint as files

    ck = Checkpointer(str(tmp_path / "run"), every=2, params={"job": "forged"})
    kw = dict(client=client, solver="dcd", eps=1e-12, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        train(store[0], checkpoint=ck, max_rounds=3, **kw)
    c = ck.latest("dcd-batched")  # the driver's name of DCD's default (batched) mode
    assert c is not None and c.round == 2
    name = next(f for f in c.files if "block-" in f)  # class0-block-…: a problem's block
    path = pathlib.Path(c.directory) / name
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["index"] = arrays["index"].copy()
    arrays["index"][0] = 10**6
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    _edit(_manifest(ck, 2), lambda m: (m["files"].__setitem__(name, files.sha256(
        buf.getvalue())), ds.seal_metadata(m)))
    before = len(client.scheduler_info()["workers"])
    with pytest.raises(CorruptStoreError, match=f"{name}: array index holds values outside") as e:
        train(store[0], checkpoint=ck, max_rounds=6, **kw)
    assert "\n" not in str(e.value)
    assert len(client.scheduler_info()["workers"]) == before
