"""The conformance suite of a store's block readers (row blocks, column blocks, a new one).

A subclass says how to list and read the blocks (``blocks``, ``read``, ``as_matrix``) and
gives the rows to store (the fixture ``rows``: (X, y), at least 3000 rows); the suite
checks what every reader guarantees: the blocks tile the matrix, with the dtypes of the
format (indptr int64, indices int32, data float32); a missing or damaged chunk is an error
naming the array, and only that block's; a wrong table entry is an error.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import numpy as np
import pytest

from distsvm.storage import CorruptStoreError

from ..columns import columnize
from ..ingest import ingest


class ReaderTests:
    """What every block reader guarantees; subclasses say how to list and read blocks and
    what each block must equal."""

    def blocks(self, d):  # -> list of (info, path prefix, expected scipy matrix)
        raise NotImplementedError

    def read(self, d, info, verify=True):
        raise NotImplementedError

    def as_matrix(self, block, d):
        raise NotImplementedError

    @pytest.fixture()
    def store(self, tmp_path, rows):
        """The first 3000 ``rows`` in blocks of 1000 rows, with a column view of small
        column blocks."""
        X, y = rows
        d = ingest((X[:3000], y[:3000]), str(tmp_path / "r.zarr"), block_rows=1000)
        columnize(d, memory_mb=64, block_mb=0.05)
        return d

    def test_blocks_tile_the_matrix(self, store):
        blocks = self.blocks(store)
        assert len(blocks) >= 3
        for info, _, expected in blocks:
            b = self.read(store, info)
            assert b.indptr.dtype == np.int64 and b.indices.dtype == np.int32
            assert b.data.dtype == np.float32
            got = self.as_matrix(b, store)
            assert got.shape == expected.shape and (got != expected).nnz == 0

    @pytest.mark.parametrize("damage", ["delete", "corrupt"])
    def test_missing_or_damaged_chunk_names_the_array(self, store, damage):
        blocks = self.blocks(store)
        info, prefix, _ = blocks[1]
        chunk = pathlib.Path(store.url) / prefix / "indices" / "c" / "0"
        if damage == "delete":
            os.remove(chunk)
        else:
            raw = bytearray(chunk.read_bytes())
            raw[len(raw) // 2] ^= 0xFF
            chunk.write_bytes(bytes(raw))
        self.read(store, blocks[0][0])  # other blocks are unaffected
        with pytest.raises(CorruptStoreError, match=f"{prefix}/indices"):
            self.read(store, info)

    def test_wrong_table_entry_is_an_error(self, store):
        info, prefix, _ = self.blocks(store)[0]
        with pytest.raises(CorruptStoreError, match=f"{prefix}/(indptr|indices)"):
            self.read(store, dataclasses.replace(info, nnz=info.nnz + 1), verify=False)
