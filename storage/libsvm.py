"""LIBSVM / svmlight text: a strict, compiled parser and the file readers that feed it.

Grammar, one example per line::

    <label> <index>:<value> <index>:<value> ... [# comment]

separated by spaces or tabs; ``\\r\\n`` endings, blank lines and comment-only
lines are accepted; a row may have no features.  Indices are 1-based unless
``index_base=0``, strictly increasing within a line.  Anything else — a missing
label, ``3:``, ``:5``, ``3:0.5x``, index 0 in a 1-based file, unsorted or
duplicate indices, NaN/inf values or labels, ``qid:`` — raises
:class:`~distsvm.storage.errors.InputFormatError` naming the file, the line and the token.

The tokenizer is one Numba kernel over the bytes.  Numbers whose significant
digits make an integer below 2⁵³ and a decimal exponent within ±22 are converted exactly
(one correctly rounded multiply or divide of exact float64 values); the rare
others are re-parsed by Python's ``float`` so every value is correctly rounded.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import lzma
import os
import zlib
from typing import BinaryIO, Iterator

import numba
import numpy as np

from .errors import InputFormatError

# Error codes of the kernel, and the reasons they stand for.
OK, MISSING_LABEL, BAD_LABEL, MISSING_COLON, MISSING_INDEX, MISSING_VALUE, BAD_INDEX, \
    INDEX_ZERO, INDEX_TOO_LARGE, UNSORTED, DUPLICATE, BAD_VALUE, QID, NONFINITE, \
    SLOW_FULL = range(15)
REASONS = {
    MISSING_LABEL: "missing label (the line starts with a feature)",
    BAD_LABEL: "malformed label",
    MISSING_COLON: "malformed feature, expected index:value",
    MISSING_INDEX: "missing feature index",
    MISSING_VALUE: "missing feature value",
    BAD_INDEX: "malformed feature index (expected a non-negative integer)",
    INDEX_ZERO: "feature index 0 in a 1-based file (ingest with --zero-based if indices start at 0)",
    INDEX_TOO_LARGE: "feature index too large (at most 2147483647)",
    UNSORTED: "feature indices not in increasing order",
    DUPLICATE: "duplicate feature index",
    BAD_VALUE: "malformed feature value",
    QID: "qid is not supported (ranking files are not classification data)",
    NONFINITE: "non-finite value (NaN or infinity)",
}

_POW10 = np.array([10.0**k for k in range(23)])  # exact in float64
_NL, _CR, _SP, _TAB, _HASH, _COLON = 10, 13, 32, 9, 35, 58


@dataclasses.dataclass(frozen=True)
class ParsedChunk:
    """Rows parsed from a piece of text, in CSR form."""

    indptr: np.ndarray  # int64 (n_rows + 1,)
    indices: np.ndarray  # int32 (nnz,), 0-based
    data: np.ndarray  # float32 or float64 (nnz,)
    labels: np.ndarray  # float64 (n_rows,)
    line_starts: np.ndarray  # int64 (n_rows,), absolute byte offset of each row's line
    n_lines: int  # physical lines consumed, including blank and comment lines
    max_index: int  # largest 0-based column index, -1 if none


@numba.njit(cache=True, nogil=True, inline="always")
def _is_sep(c):
    return c == _SP or c == _TAB or c == _CR


@numba.njit(cache=True, nogil=True)
def _number(buf, a, b):
    """Parse buf[a:b] as a decimal float: (value, status); status 0 ok, 1 malformed,
    2 not exactly representable by the fast path (re-parse in Python), 3 nan/inf word."""
    i = a
    neg = False
    if i < b and (buf[i] == 43 or buf[i] == 45):  # + -
        neg = buf[i] == 45
        i += 1
    if i < b and ((buf[i] | 32) == 105 or (buf[i] | 32) == 110):  # i, n: inf, nan
        return 0.0, 3
    mant = 0
    digits = 0
    exp10 = 0
    seen = False
    while i < b and 48 <= buf[i] <= 57:
        seen = True
        if digits < 18:  # 18 digits < 2**63: 19 could overflow int64 (a silent wrong value)
            if mant or buf[i] != 48:
                mant = mant * 10 + (buf[i] - 48)
                digits += 1
        else:
            exp10 += 1
        i += 1
    if i < b and buf[i] == 46:  # .
        i += 1
        while i < b and 48 <= buf[i] <= 57:
            seen = True
            if digits < 18:
                if mant or buf[i] != 48:
                    mant = mant * 10 + (buf[i] - 48)
                    digits += 1
                exp10 -= 1
            i += 1
    if not seen:
        return 0.0, 1
    if i < b and (buf[i] | 32) == 101:  # e / E
        i += 1
        eneg = False
        if i < b and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        if i >= b:
            return 0.0, 1
        e = 0
        while i < b and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        exp10 += -e if eneg else e
    if i != b:
        return 0.0, 1
    if mant == 0:
        return -0.0 if neg else 0.0, 0
    if mant >= 2**53 or exp10 > 22 or exp10 < -22:
        return 0.0, 2
    v = np.float64(mant)
    v = v * _POW10[exp10] if exp10 >= 0 else v / _POW10[-exp10]
    return -v if neg else v, 0


@numba.njit(cache=True, nogil=True)
def _parse(buf, base, indptr, indices, data, labels, line_starts, slow):
    """Tokenize ``buf`` into the preallocated outputs.

    Returns (n_rows, nnz, n_lines, n_slow, max_index, err, err_line, err_a, err_b);
    ``slow`` receives (array slot, token start, token end, line) of tokens whose
    number needs Python's float, slot -1-r meaning the label of row r.
    """
    n = len(buf)
    pos = 0
    rows = 0
    nnz = 0
    line = 0
    n_slow = 0
    max_index = -1
    indptr[0] = 0
    while pos < n:
        start = pos
        while pos < n and _is_sep(buf[pos]):
            pos += 1
        if pos >= n or buf[pos] == _NL or buf[pos] == _HASH:  # blank or comment line
            while pos < n and buf[pos] != _NL:
                pos += 1
            pos += 1
            line += 1
            continue
        a = pos
        while pos < n and not _is_sep(buf[pos]) and buf[pos] != _NL and buf[pos] != _HASH:
            if buf[pos] == _COLON:
                return rows, nnz, line, n_slow, max_index, MISSING_LABEL, line, a, a
            pos += 1
        v, st = _number(buf, a, pos)
        if st == 1 or st == 3:
            code = BAD_LABEL if st == 1 else NONFINITE
            return rows, nnz, line, n_slow, max_index, code, line, a, pos
        if st == 2:
            if n_slow == len(slow):
                return rows, nnz, line, n_slow, max_index, SLOW_FULL, line, a, pos
            slow[n_slow, 0], slow[n_slow, 1], slow[n_slow, 2], slow[n_slow, 3] = -1 - rows, a, pos, line
            n_slow += 1
        labels[rows] = v
        line_starts[rows] = start
        last = -1
        while True:
            while pos < n and _is_sep(buf[pos]):
                pos += 1
            if pos >= n or buf[pos] == _NL or buf[pos] == _HASH:
                break
            a = pos
            c = -1
            while pos < n and not _is_sep(buf[pos]) and buf[pos] != _NL and buf[pos] != _HASH:
                if buf[pos] == _COLON and c < 0:
                    c = pos
                pos += 1
            b = pos
            if c < 0:
                return rows, nnz, line, n_slow, max_index, MISSING_COLON, line, a, b
            if c - a == 3 and (buf[a] | 32) == 113 and (buf[a + 1] | 32) == 105 and (buf[a + 2] | 32) == 100:
                return rows, nnz, line, n_slow, max_index, QID, line, a, b
            if c == a:
                return rows, nnz, line, n_slow, max_index, MISSING_INDEX, line, a, b
            if c == b - 1:
                return rows, nnz, line, n_slow, max_index, MISSING_VALUE, line, a, b
            idx = 0
            for k in range(a, c):
                d = buf[k] - 48
                if d < 0 or d > 9:
                    return rows, nnz, line, n_slow, max_index, BAD_INDEX, line, a, b
                if idx < 2**40:
                    idx = idx * 10 + d
            idx -= base
            if idx < 0:
                return rows, nnz, line, n_slow, max_index, INDEX_ZERO, line, a, b
            if idx > 2**31 - 1:
                return rows, nnz, line, n_slow, max_index, INDEX_TOO_LARGE, line, a, b
            if idx <= last:
                code = DUPLICATE if idx == last else UNSORTED
                return rows, nnz, line, n_slow, max_index, code, line, a, b
            v, st = _number(buf, c + 1, b)
            if st == 1:
                return rows, nnz, line, n_slow, max_index, BAD_VALUE, line, a, b
            if st == 3:
                return rows, nnz, line, n_slow, max_index, NONFINITE, line, a, b
            if st == 2:
                if n_slow == len(slow):
                    return rows, nnz, line, n_slow, max_index, SLOW_FULL, line, a, b
                slow[n_slow, 0], slow[n_slow, 1], slow[n_slow, 2], slow[n_slow, 3] = nnz, a, b, line
                n_slow += 1
            indices[nnz] = idx
            data[nnz] = v
            nnz += 1
            last = idx
            if idx > max_index:
                max_index = idx
        while pos < n and buf[pos] != _NL:  # a comment to the end of the line
            pos += 1
        pos += 1
        line += 1
        rows += 1
        indptr[rows] = nnz
    return rows, nnz, line, n_slow, max_index, OK, 0, 0, 0


def _as_bytes(buf) -> np.ndarray:
    return buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)


class _LocalError(Exception):
    """A parse error with its line counted from the start of the chunk (0-based)."""

    def __init__(self, line, token, reason):
        self.line, self.token, self.reason = line, token, reason


def _parse_buffer(buf: np.ndarray, chunk_offset: int, dtype, index_base: int) -> ParsedChunk:
    n_nl = int(np.count_nonzero(buf == _NL)) + 1
    n_colon = int(np.count_nonzero(buf == _COLON))
    indptr = np.empty(n_nl + 1, np.int64)
    indices = np.empty(n_colon, np.int32)
    data = np.empty(n_colon, np.float64)
    labels = np.empty(n_nl, np.float64)
    starts = np.empty(n_nl, np.int64)
    slow = np.empty(((n_colon + n_nl) // 64 + 64, 4), np.int64)  # rarely needed: start small
    while True:
        rows, nnz, lines, n_slow, max_index, err, err_line, a, b = _parse(
            buf, index_base, indptr, indices, data, labels, starts, slow)
        if err != SLOW_FULL:
            break
        slow = np.empty((n_colon + n_nl, 4), np.int64)
    token = lambda a, b: bytes(buf[a:b]).decode("utf-8", "replace")  # noqa: E731
    if err != OK:
        if err == MISSING_LABEL:
            end = a
            while end < len(buf) and buf[end] not in (_SP, _TAB, _CR, _NL):
                end += 1
            raise _LocalError(int(err_line), token(a, end), REASONS[err])
        raise _LocalError(int(err_line), token(a, b), REASONS[err])
    for slot, a, b, line in slow[:n_slow].tolist():
        tok = token(a, b)
        try:
            v = float(tok.split(":", 1)[1] if slot >= 0 else tok)
        except ValueError:
            raise _LocalError(line, tok, REASONS[BAD_VALUE]) from None
        if not np.isfinite(v):
            raise _LocalError(line, tok, REASONS[NONFINITE])
        if slot >= 0:
            data[slot] = v
        else:
            labels[-1 - slot] = v
    with np.errstate(over="ignore"):  # checked just below, with the line that overflows
        values = data[:nnz].astype(dtype)
    if not np.all(np.isfinite(values)):  # finite in float64, beyond float32's range
        k = int(np.argmin(np.isfinite(values)))
        row = int(np.searchsorted(indptr[1:rows + 1], k, side="right"))
        line = int(np.count_nonzero(buf[:starts[row]] == _NL))
        raise _LocalError(line, f"{index_base + int(indices[k])}:{float(data[k])!r}",
                          REASONS[NONFINITE] + f" as {np.dtype(dtype).name}")
    return ParsedChunk(indptr[:rows + 1].copy(), indices[:nnz].copy(), values,
                       labels[:rows].copy(), starts[:rows] + chunk_offset, lines, max_index)


def parse_chunk(buf, *, path, chunk_offset: int, first_line: int, dtype=np.float32,
                index_base: int = 1) -> ParsedChunk:
    """Parse whole lines of LIBSVM text; ``first_line`` (1-based) and ``chunk_offset``
    place ``buf`` in its file for error messages and row positions."""
    try:
        return _parse_buffer(_as_bytes(buf), chunk_offset, dtype, index_base)
    except _LocalError as e:
        raise InputFormatError(path, first_line + e.line, e.token, e.reason) from None


# ------------------------------------------------------------------ files

class TrailingBytesError(OSError):
    """Bytes after the last compressed stream of a file that begin no other stream."""


class _Strict(io.RawIOBase):
    """A .xz/.lzma/.bz2 file decompressed as :func:`lzma.open` and :func:`bz2.open` read it
    (streams one after another read as one, null padding between them skipped), except
    that bytes after the last stream that begin no other — which those silently drop —
    are an error: the file was damaged or appended to, and its rows would be lost."""

    def __init__(self, raw, new):
        self._raw, self._new = raw, new
        self._d, self._fresh, self._pending = new(), False, b""  # fresh: a later stream

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            if self._d.eof:  # a stream ended: another one, padding, or the end of the file
                tail = self._d.unused_data
                while not tail.strip(b"\0"):
                    more = self._raw.read(1 << 16)
                    if not more:
                        return 0
                    tail += more
                self._d, self._fresh, self._pending = self._new(), True, tail.lstrip(b"\0")
            if not self._pending and self._d.needs_input:
                self._pending = self._raw.read(1 << 16)
                if not self._pending:
                    raise EOFError("Compressed file ended before the end-of-stream marker "
                                   "was reached")
            try:
                out = self._d.decompress(self._pending, len(b))
            except (lzma.LZMAError, OSError) as exc:
                if self._fresh:  # nothing of it decoded yet: not a stream at all
                    raise TrailingBytesError("bytes after the end of the compressed stream "
                                             "that begin no other (the file was damaged or "
                                             "appended to)") from exc
                raise
            self._pending, self._fresh = b"", False
            if out:
                b[:len(out)] = out
                return len(out)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _strict(new):
    def opener(f, mode="rb"):
        raw = open(f, "rb") if isinstance(f, (str, os.PathLike)) else f
        return io.BufferedReader(_Strict(raw, new))
    return opener


_OPENERS = {".gz": gzip.open, ".bz2": _strict(bz2.BZ2Decompressor),
            ".xz": _strict(lzma.LZMADecompressor), ".lzma": _strict(lzma.LZMADecompressor)}


def is_compressed(path) -> bool:
    return os.path.splitext(os.fspath(path))[1].lower() in _OPENERS


def is_remote(path) -> bool:
    """Whether ``path`` is an fsspec URL other than a local file (``s3://…``)."""
    return "://" in os.fspath(path) and not os.fspath(path).startswith("file://")


def open_binary(path, storage_options: dict | None = None) -> BinaryIO:
    """Open a file for reading bytes, decompressing by its extension (.gz, .bz2, .xz); a
    remote fsspec URL is opened with ``storage_options``."""
    opener = _OPENERS.get(os.path.splitext(os.fspath(path))[1].lower(), open)
    if is_remote(path):
        import fsspec

        raw = fsspec.open(os.fspath(path), "rb", **(storage_options or {})).open()
        return raw if opener is open else opener(raw, "rb")
    return opener(path, "rb")


# What a decompressor raises on truncated or corrupt input: EOFError (a stream cut short),
# lzma.LZMAError, zlib.error, gzip.BadGzipFile and bz2's OSError("Invalid data stream").
_DECODE_ERRORS = (EOFError, lzma.LZMAError, zlib.error, OSError)


def _decode_error(path, line: int, exc: BaseException) -> InputFormatError:
    """The one-line error of a compressed file that cannot be decompressed from ``line`` on."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    return InputFormatError(os.fspath(path), line, None,
                            f"truncated or corrupt {ext} input, cannot decompress beyond "
                            f"this line ({type(exc).__name__}: {exc})")


def iter_chunks(path, chunk_bytes: int,
                storage_options: dict | None = None) -> Iterator[tuple[np.ndarray, int, int]]:
    """Stream a (possibly compressed, possibly remote) file as pieces of about ``chunk_bytes``
    that end at a line end: yields ``(bytes, offset, first_line)``; memory ~2 pieces
    whatever the file.  A compressed stream that is truncated or corrupt raises
    :class:`InputFormatError` naming the file and the first line not fully read."""
    offset, line, rest = 0, 1, b""
    compressed = is_compressed(path)
    with open_binary(path, storage_options) as f:
        while True:
            try:
                piece = f.read(chunk_bytes)
            except _DECODE_ERRORS as exc:
                if not compressed or (type(exc) is OSError and exc.errno is not None):
                    raise  # a plain file's (or the disk's) I/O error: as it is
                raise _decode_error(path, line, exc) from None
            if not piece:
                break
            piece = rest + piece
            cut = piece.rfind(b"\n") + 1
            if cut == 0:  # no line end yet: keep reading
                rest = piece
                continue
            buf = np.frombuffer(piece, dtype=np.uint8, count=cut)
            yield buf, offset, line
            offset += cut
            line += int(np.count_nonzero(buf == _NL))
            rest = piece[cut:]
    if rest:
        yield np.frombuffer(rest, dtype=np.uint8), offset, line


def split_ranges(path, target_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``target_bytes`` covering an uncompressed file, each starting
    at the beginning of a line."""
    size = os.path.getsize(path)
    bounds = [0]
    with open(path, "rb") as f:
        for cut in range(target_bytes, size, max(1, target_bytes)):
            if cut <= bounds[-1]:
                continue
            f.seek(cut - 1)
            tail = b""
            while True:  # the next line start at or after `cut`
                block = f.read(1 << 16)
                if not block:
                    break
                k = block.find(b"\n")
                if k >= 0:
                    tail += block[: k + 1]
                    break
                tail += block
            nxt = cut - 1 + len(tail)
            if nxt < size and nxt > bounds[-1]:
                bounds.append(nxt)
    bounds.append(size)
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def read_range(path, start: int, end: int) -> np.ndarray:
    with open(path, "rb") as f:
        f.seek(start)
        return np.frombuffer(f.read(end - start), dtype=np.uint8)


def line_number_at(path, offset: int) -> int:
    """1-based number of the line that starts at byte ``offset`` of a plain file."""
    count, done = 0, 0
    with open(path, "rb") as f:
        while done < offset:
            block = f.read(min(1 << 24, offset - done))
            if not block:
                break
            count += block.count(b"\n")
            done += len(block)
    return count + 1


def parse_range(path, start: int, end: int, *, dtype=np.float32,
                index_base: int = 1) -> ParsedChunk:
    """Parse the byte range [start, end) of a plain file (see :func:`split_ranges`)."""
    try:
        return _parse_buffer(read_range(path, start, end), start, dtype, index_base)
    except _LocalError as e:  # count lines before the range only when naming an error
        raise InputFormatError(os.fspath(path), line_number_at(path, start) + e.line,
                               e.token, e.reason) from None


def file_identity(path) -> tuple[int, int, int] | None:
    """(size, mtime in ns, inode) of the local file ``path`` as this process sees it, or None
    if it cannot: on a Dask worker, whether the worker reads the same file as the client
    (a shared filesystem mounted at the same place) or none / another one (another machine)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino
