"""No pickle where a user file is read: the code base never unpickles, and a store whose
metadata asks for numcodecs' pickle codec (Zarr v2) is refused before a chunk is decoded."""

from __future__ import annotations

import json
import pathlib
import pickle
import re

import numpy as np
import pytest
import zarr

from distsvm.storage import open_dataset
from distsvm.storage.errors import CorruptStoreError

ROOT = pathlib.Path(__file__).resolve().parent.parent
# unpickling calls, and loaders that unpickle unless told not to
FORBIDDEN = re.compile(r"allow_pickle\s*=\s*True|\b(c?pickle|dill|joblib|cloudpickle|marshal|"
                       r"shelve)\.(load|loads|Unpickler|open)\b|\byaml\.(load|unsafe_load)\(")
NP_LOAD = re.compile(r"\b(np|numpy)\.load\(")


def test_no_unpickling_in_the_code_base():
    sources = [p for d in ("distsvm", "workers", "storage") for p in (ROOT / d).rglob("*.py")]
    assert len(sources) > 10
    found = []
    for path in sources:
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in FORBIDDEN.finditer(text)]
        found += [f"{path.relative_to(ROOT)}: {text[m.start():m.start() + 60]}"
                  for m in NP_LOAD.finditer(text)  # its call, within the next two lines
                  if "allow_pickle=False" not in "\n".join(
                      text[m.start():].split("\n")[:3])]
    assert not found, "unpickling of files: " + "; ".join(found)


class _Payload:
    """Unpickling this creates the file ``marker``: proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_store_with_a_pickle_codec_is_refused_unread(tmp_path):
    """A dataset whose arrays are Zarr v2 with the pickle compressor (the header otherwise
    valid) fails with an error naming the array, and the payload never runs."""
    from distsvm.ingest import ingest

    good = ingest((np.eye(4, dtype=np.float32), np.array([0, 1, 0, 1])), str(tmp_path / "g.zarr"),
                  block_rows=4)
    meta = good.meta.to_json()
    evil = tmp_path / "evil.zarr"
    root = zarr.open_group(str(evil), mode="w", zarr_format=2)
    root.attrs["distsvm"] = meta
    block = root.create_group("rows").create_group(meta["blocks"][0]["name"])
    import numcodecs

    for k in ("indptr", "indices", "data", "y"):
        a = good.read_block(0).__getattribute__(k)
        block.create_array(k, shape=a.shape, chunks=a.shape, dtype=a.dtype,
                           compressor=numcodecs.Pickle(), fill_value=0)
    marker = tmp_path / "payload-ran"
    chunk = evil / "rows" / meta["blocks"][0]["name"] / "indptr" / "0"
    chunk.write_bytes(pickle.dumps(_Payload(marker)))
    assert json.loads((chunk.parent / ".zarray").read_text())["compressor"]["id"] == "pickle"

    d = open_dataset(str(evil))  # the header is JSON: reading it is safe
    with pytest.raises(CorruptStoreError, match=r"array rows/000000/indptr"):
        d.read_block(0)  # Zarr itself, or checked_array, refuses it
    with pytest.raises(CorruptStoreError):
        d.verify()
    assert not marker.exists()


def test_zarr_v2_arrays_are_refused(tmp_path):
    """Any Zarr v2 array in a store is refused by ``checked_array`` before it is read (v2
    metadata can name numcodecs' pickle codec)."""
    from distsvm.storage.dataset import checked_array

    a = zarr.create_array(str(tmp_path / "v2"), shape=(3,), dtype="float32", zarr_format=2)
    with pytest.raises(CorruptStoreError, match="x.zarr: array rows/b/data is a Zarr v2 array"):
        checked_array("x.zarr", "rows/b/data", a)
    v3 = zarr.create_array(str(tmp_path / "v3"), shape=(3,), dtype="float32",
                           compressors=zarr.codecs.GzipCodec())
    assert checked_array("x.zarr", "rows/b/data", v3) is v3
