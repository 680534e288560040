"""Every input error is one line (issue 19, item 4): corrupt compressed input, non-finite
models, relative and ``~`` paths, TLS options of the CLI."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from distsvm import cli
from storage import InputFormatError, libsvm

from .conftest import DATA

COMPRESS = {".xz": lzma.compress, ".gz": gzip.compress, ".bz2": bz2.compress}


@pytest.fixture(scope="module")
def raw_text():
    raw = lzma.decompress((DATA / "a9a.t.xz").read_bytes())[:120_000]
    return raw[: raw.rfind(b"\n") + 1]


def _damaged(raw: bytes, ext: str, how: str) -> bytes:
    c = COMPRESS[ext](raw)
    if how == "truncated":
        return c[: len(c) * 2 // 3]
    if how == "corrupt":  # flip bytes in the middle of the stream
        b = bytearray(c)
        for k in range(len(b) // 2, len(b) // 2 + 8):
            b[k] ^= 0xA5
        return bytes(b)
    return raw[:500]  # "plain": not compressed at all, despite the extension


@pytest.mark.parametrize("ext", sorted(COMPRESS))
@pytest.mark.parametrize("how", ["truncated", "corrupt", "plain"])
def test_damaged_compressed_input_names_the_file(tmp_path, raw_text, ext, how):
    path = tmp_path / f"bad{ext}"
    path.write_bytes(_damaged(raw_text, ext, how))
    with pytest.raises(InputFormatError) as e:
        for _ in libsvm.iter_chunks(path, 4096):
            pass
    assert e.value.path == str(path) and f"truncated or corrupt {ext} input" in str(e.value)
    if how == "truncated" and ext != ".bz2":  # the pieces before the cut were read: the
        # line says where (bz2 decodes whole 900 kB blocks: nothing before the cut here)
        assert e.value.line > 100
    # the command: one ERROR line naming the file, exit status 1
    code = cli.main(["ingest", str(path), str(tmp_path / "s"), "--serial", "-q"])
    assert code == 1


def test_damaged_compressed_input_cli_line(tmp_path, raw_text, capsys):
    path = tmp_path / "cut.xz"
    path.write_bytes(_damaged(raw_text, ".xz", "truncated"))
    assert cli.main(["ingest", str(path), str(tmp_path / "s"), "--serial", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ERROR: {path}:1: truncated or corrupt .xz")
    assert not (tmp_path / "s").exists()
