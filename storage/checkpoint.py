"""Files of a run directory: whole-file writes that never leave a torn file, checksummed
array bundles, and JSON documents — on a local path or any fsspec URL.  (What a
checkpoint of a training run holds, and when it is taken, is :mod:`distsvm.checkpoint`'s.)

A local file is written into a temp file beside it, fsynced and renamed into place
(``os.replace``); on an object store (``s3://…``) one PUT is already all or nothing.
Arrays are ``.npz`` bundles read with ``allow_pickle=False``: no pickle anywhere a file
of a run is read.  Readers check a bundle against the SHA-256 its writer returned
(:class:`~distsvm.storage.errors.CorruptStoreError` naming the file otherwise).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import zipfile

import numpy as np

from . import bounded
from .dataset import _is_local, _local_path
from .errors import CorruptStoreError


def join(url: str, *parts: str) -> str:
    return "/".join([str(url).rstrip("/"), *parts])


def _fs(url: str, storage_options: dict | None):
    import fsspec

    return fsspec.core.url_to_fs(url, **(storage_options or {}))


def write_bytes(url: str, data: bytes, storage_options: dict | None = None) -> None:
    """Write ``data`` at ``url`` whole or not at all."""
    url = str(url)
    if _is_local(url):
        path = _local_path(url)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, lambda f: f.write(data))
        return
    fs, path = _fs(url, storage_options)
    fs.pipe_file(path, data)


def atomic_write(path, write) -> None:
    """Write a local file through ``write(fileobj)`` whole or not at all
    (:func:`atomic_file`)."""
    with atomic_file(path) as f:
        write(f)


@contextlib.contextmanager
def atomic_file(path, mode: str = "wb"):
    """A file object for writing the local file ``path``: a temp file beside it, fsynced and
    renamed into place when the block ends, removed if it fails — never a partial file at
    ``path``, even on a full disk.  The file gets the mode ``open()`` gives a new file
    (0666 less the umask), not ``mkstemp``'s 0600.  An OSError that names no file (a
    write's ENOSPC) or the temp file is raised naming ``path``."""
    path = os.fspath(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                   prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:  # named by the temp file's name: name the file meant instead
        raise OSError(exc.errno, exc.strerror, path) from exc
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp's 0600: the mode open() would give it
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status`` on Linux; else
    set and restored at once, which another thread creating a file at that instant could
    see)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def read_bytes(url: str, storage_options: dict | None = None, limit: int | None = None) -> bytes:
    """The bytes at ``url`` (at most ``limit``); FileNotFoundError if there are none."""
    if _is_local(str(url)):
        with open(_local_path(str(url)), "rb") as f:
            return f.read(-1 if limit is None else limit)
    fs, path = _fs(url, storage_options)
    return fs.cat_file(path, end=limit)


def write_json(url: str, doc, storage_options: dict | None = None) -> None:
    data = json.dumps(doc, indent=1, allow_nan=True, default=json_default)
    write_bytes(url, data.encode(), storage_options)


def json_default(o):
    """NumPy scalars and arrays as JSON numbers and lists."""
    if isinstance(o, (np.generic, np.ndarray)):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def read_json(url: str, storage_options: dict | None = None,
              max_bytes: int = bounded.MAX_DOCUMENT_BYTES):
    """The JSON document at ``url``, read and parsed within bounds (:mod:`distsvm.storage.bounded`:
    one line naming ``url`` if it is larger, deeper or not JSON); FileNotFoundError if
    there is none."""
    return bounded.loads(read_bytes(url, storage_options, max_bytes + 1), str(url), max_bytes)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path) -> str:
    """The SHA-256 of the local file ``path``, read 4 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_arrays(url: str, arrays: dict[str, np.ndarray],
                 storage_options: dict | None = None) -> str:
    """Write named arrays as one ``.npz`` file; return its SHA-256."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    data = buf.getvalue()
    write_bytes(url, data, storage_options)
    return sha256(data)


def read_arrays(url: str, digest: str, storage_options: dict | None = None) -> dict:
    """The arrays of a bundle written by :func:`write_arrays`, checked against ``digest``."""
    try:
        data = read_bytes(url, storage_options)
    except FileNotFoundError as exc:
        raise CorruptStoreError(f"{url}: checkpoint file is missing") from exc
    if sha256(data) != digest:
        raise CorruptStoreError(f"{url}: checkpoint file fails its SHA-256 check "
                                "(torn or damaged)")
    try:  # write_arrays stores its members uncompressed: they hold at most the file's bytes
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            check_npy_members(z, url, len(data))
    except zipfile.BadZipFile as exc:
        raise CorruptStoreError(f"{url}: checkpoint file is not an .npz archive: {exc}") from exc
    except ValueError as exc:
        raise CorruptStoreError(str(exc)) from exc
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def npy_header(z: zipfile.ZipFile, info: zipfile.ZipInfo, where: str):
    """``(shape, dtype)`` of the ``.npy`` member ``info``, read from its first bytes only
    (at most a few KiB decompressed), checked against the member's declared size: the
    header must describe exactly the bytes the member holds, so that no header can make a
    reader allocate more than the archive declares.  ValueError naming it otherwise."""
    fmt = np.lib.format
    try:
        with z.open(info) as f:
            version = fmt.read_magic(f)
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
            if version not in read:
                raise ValueError(f"npy version {version}")
            shape, _, dtype = read[version](f, max_header_size=10000)
            offset = f.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{where}: member {info.filename} is not a readable .npy array: "
                         f"{exc}") from exc
    if dtype.hasobject or dtype.kind not in "biuf":
        raise ValueError(f"{where}: member {info.filename} has dtype {dtype}, not a number")
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if offset + nbytes != info.file_size:
        raise ValueError(f"{where}: member {info.filename} declares shape {shape} of {dtype} "
                         f"({nbytes} bytes) but holds {info.file_size - offset} bytes")
    return shape, dtype


def check_npy_members(z: zipfile.ZipFile, where: str, limit: int) -> dict:
    """Check every member of an ``.npz`` archive before any is decompressed: each an
    ``.npy`` array whose header matches its declared size (:func:`npy_header`), all of
    them together at most ``limit`` bytes decompressed.  Returns {name: (shape, dtype)}."""
    out, total = {}, 0
    for info in z.infolist():
        total += info.file_size
        if total > limit:
            raise ValueError(f"{where}: the archive's members declare more than {limit} "
                             "bytes decompressed: refused unread")
        if not info.filename.endswith(".npy"):
            raise ValueError(f"{where}: member {info.filename} is not an .npy array")
        out[info.filename[:-4]] = npy_header(z, info, where)
    return out


def listdir(url: str, storage_options: dict | None = None) -> list[str]:
    """Names of the entries directly under ``url`` (none if it does not exist)."""
    if _is_local(str(url)):
        path = _local_path(str(url))
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    fs, path = _fs(url, storage_options)
    if not fs.exists(path):
        return []
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))


def remove(url: str, storage_options: dict | None = None) -> None:
    """Remove a file or directory tree (best effort)."""
    if _is_local(str(url)):
        import shutil

        path = _local_path(str(url))
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.unlink(path)
        return
    fs, path = _fs(url, storage_options)
    if fs.exists(path):
        fs.rm(path, recursive=True)
