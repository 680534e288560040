"""The LIBSVM parser and readers: edge cases, property round trips, compressed streams."""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from distsvm.ingest import ingest
from distsvm.storage import InputFormatError, libsvm

from .conftest import DATA, SHARED
from .test_store import to_csr


def parse(text: bytes, **kw):
    return libsvm.parse_chunk(text, path="t.svm", chunk_offset=0, first_line=1, **kw)


def test_edge_cases():
    text = (b"# a comment line\n"
            b"+1 1:0.5 3:1e-3\t7:-2E+02 # trailing comment\r\n"
            b"\n"
            b"-1\n"
            b"2.0 2:0 4:.25 5:1.\n"
            b"-1 1:3")  # no final newline
    c = parse(text)
    assert c.labels.tolist() == [1.0, -1.0, 2.0, -1.0]
    assert c.indptr.tolist() == [0, 3, 3, 6, 7]
    assert c.indices.tolist() == [0, 2, 6, 1, 3, 4, 0]
    np.testing.assert_array_equal(c.data, np.float32([0.5, 1e-3, -200, 0, 0.25, 1, 3]))
    assert c.n_lines == 6 and c.max_index == 6
    line_offsets = [0] + [i + 1 for i, ch in enumerate(text) if ch == 10]
    assert c.line_starts.tolist() == [line_offsets[k] for k in (1, 3, 4, 5)]


def test_zero_based():
    c = parse(b"1 0:1 2:2\n-1 1:1\n", index_base=0)
    assert c.indices.tolist() == [0, 2, 1]


@pytest.mark.parametrize("bad,token,reason", [
    ("-2:1", "-2:1", "malformed feature index"),
    ("a:1", "a:1", "malformed feature index"),
    ("3.5:1", "3.5:1", "malformed feature index"),
    ("3", "3", "expected index:value"),
    ("qid:4", "qid:4", "qid"),
    ("5:1e99999", "5:1e99999", "non-finite"),
    ("2147483649:1", "2147483649:1", "too large"),
])
def test_more_bad_tokens(bad, token, reason):
    with pytest.raises(InputFormatError) as e:
        parse(f"+1 1:1\n-1 2:1\n+1 {bad}\n".encode())
    assert e.value.line == 3 and e.value.token == token and reason in e.value.reason
    assert str(e.value).startswith("t.svm:3:")


def test_bad_label_and_float32_overflow():
    with pytest.raises(InputFormatError, match="malformed label"):
        parse(b"+1 1:1\nabc 2:1\n")
    with pytest.raises(InputFormatError, match="non-finite value .* as float32"):
        parse(b"+1 1:1e300\n")
    assert parse(b"+1 1:1e300\n", dtype=np.float64).data[0] == 1e300


def _to_text(X, y, fmt):
    lines = []
    for i in range(X.shape[0]):
        a, b = X.indptr[i], X.indptr[i + 1]
        feats = " ".join(f"{j + 1}:{fmt(v)}" for j, v in zip(X.indices[a:b], X.data[a:b]))
        lines.append(f"{y[i]:g} {feats}".rstrip())
    return ("\n".join(lines) + "\n").encode()


values32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def csr_problems(draw, elements):
    n = draw(st.integers(1, 30))
    d = draw(st.integers(1, 30))
    mask = draw(st.lists(st.lists(st.booleans(), min_size=d, max_size=d), min_size=n, max_size=n))
    rows, cols = np.nonzero(np.array(mask, dtype=bool))
    vals = draw(st.lists(elements, min_size=len(rows), max_size=len(rows)))
    X = sp.csr_matrix((np.array(vals), (rows, cols)), shape=(n, d))
    X.sort_indices()
    y = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0, 2.0, 7.0]), min_size=n, max_size=n)))
    return X, y


@settings(max_examples=60, deadline=None)
@given(csr_problems(values32))
def test_float32_text_round_trip_is_exact(problem):
    X, y = problem
    X = X.astype(np.float32)
    c = parse(_to_text(X, y, lambda v: "%.9g" % v))
    np.testing.assert_array_equal(c.indptr, X.indptr)
    np.testing.assert_array_equal(c.indices, X.indices)
    np.testing.assert_array_equal(c.data, X.data)  # exact in float32
    np.testing.assert_array_equal(c.labels, y)


@settings(max_examples=40, deadline=None)
@given(csr_problems(st.floats(allow_nan=False, allow_infinity=False)))
def test_float64_text_round_trip_is_exact(problem):
    X, y = problem
    c = parse(_to_text(X, y, lambda v: repr(float(v))), dtype=np.float64)
    np.testing.assert_array_equal(c.data, X.data)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(csr_problems(values32), st.sampled_from(["", ".gz", ".bz2", ".xz"]), st.integers(1, 50))
def test_csr_text_store_csr_round_trip(tmp_path, problem, ext, block_rows):
    """random CSR → LIBSVM text (compressed or not) → store → CSR, exact to float32."""
    X, y = problem
    X = X.astype(np.float32)
    assume(len(set(y)) >= 2)  # a store needs two classes
    text = _to_text(X, y, lambda v: "%.9g" % v)
    path = tmp_path / f"p{ext}.svm{ext}"
    opener = {"": open, ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}[ext]
    with opener(path, "wb") as f:
        f.write(text)
    d = ingest(str(path), str(tmp_path / "s.zarr"), block_rows=block_rows, shuffle=False,
               n_features=X.shape[1], overwrite=True, chunk_mb=64 / 2**20)
    X2, y2 = to_csr(d)
    assert (X2 != X).nnz == 0 and X2.dtype == np.float32
    np.testing.assert_array_equal(X2.data, X.data)
    np.testing.assert_array_equal(y2, y)


@pytest.mark.parametrize("ext", ["", ".gz", ".bz2", ".xz"])
def test_streamed_pieces_equal_one_parse(tmp_path, ext):
    raw = lzma.decompress((DATA / "a9a.t.xz").read_bytes())[:200_000]
    raw = raw[: raw.rfind(b"\n") + 1]
    path = tmp_path / f"f{ext}"
    opener = {"": open, ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}[ext]
    with opener(path, "wb") as f:
        f.write(raw)
    whole = parse(raw)
    pieces = [libsvm.parse_chunk(b, path=str(path), chunk_offset=o, first_line=ln)
              for b, o, ln in libsvm.iter_chunks(path, 97)]
    assert sum(p.n_lines for p in pieces) == whole.n_lines
    np.testing.assert_array_equal(np.concatenate([p.labels for p in pieces]), whole.labels)
    np.testing.assert_array_equal(np.concatenate([p.line_starts for p in pieces]),
                                  whole.line_starts)
    np.testing.assert_array_equal(np.concatenate([p.data for p in pieces]), whole.data)


def test_ranges_cover_the_file_and_name_global_lines(tmp_path):
    raw = lzma.decompress((DATA / "a9a.t.xz").read_bytes())
    lines = raw.split(b"\n")
    lines[12345] = b"+1 5:1 3:1"  # unsorted on line 12346
    path = tmp_path / "f.svm"
    path.write_bytes(b"\n".join(lines))
    ranges = libsvm.split_ranges(path, 100_000)
    assert ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
    assert all(b == c for (_, b), (c, _) in zip(ranges[:-1], ranges[1:]))
    content = path.read_bytes()
    assert all(content[a - 1:a] == b"\n" for a, _ in ranges[1:])
    with pytest.raises(InputFormatError) as e:
        for a, b in ranges:
            libsvm.parse_range(path, a, b)
    assert e.value.line == 12346 and e.value.token == "3:1"


def test_matches_sklearn_on_shared_a9a():
    from sklearn.datasets import load_svmlight_file

    path = SHARED / "w8a.xz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    raw = lzma.decompress(path.read_bytes())
    c = parse(raw)
    with lzma.open(path) as f:
        X, y = load_svmlight_file(f)
    np.testing.assert_array_equal(c.indptr, X.indptr)
    np.testing.assert_array_equal(c.indices, X.indices)
    np.testing.assert_array_equal(c.data, X.data.astype(np.float32))
    np.testing.assert_array_equal(c.labels, y)
