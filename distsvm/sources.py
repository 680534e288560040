"""A data file where a store is expected: ``train a9a m.model``, ``predict a9a.t m.model out``.

LIBLINEAR's ``train`` and ``predict`` read a LIBSVM text file.  Given one (plain, .gz, .bz2,
.xz: whatever ``distsvm ingest`` reads) or Parquet/CSV files (a file, a directory; with
``--label``), ``train`` and ``predict`` ingest it into a store beside it (``FILE.zarr``), or
in ``--cache-dir DIR`` (``DIR/NAME-<hash of its path>.zarr``), and train or predict on that
store.  The store records the source's fingerprint (path, size, modification time, SHA-256
of its bytes) and is reused while the source is unchanged: size and modification time
equal, or, if the time changed, the same bytes; otherwise it is ingested again.  What
happened is one line (``-q`` silences it).

One writer at a time: the check and the ingest hold the store's lock
(:mod:`distsvm.storage.lock`), so two commands on one source ingest it once and the second
reuses it; the ingest is the ordinary one (staged and renamed into place), so an
interrupted one leaves no store that opens as whole, and the next command ingests again.
A path at the cache's name that is not a store this made from this source is never
replaced: one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time

from distsvm.storage import Dataset, open_dataset
from distsvm.storage.checkpoint import file_sha256
from distsvm.storage.errors import StorageError, StoreNotFoundError
from distsvm.storage.lock import DEFAULT_TIMEOUT, Lock
from distsvm.storage.paths import resolve

from .progress import Progress

SUFFIX = ".zarr"
KEY = "fingerprint"  # the store's source["fingerprint"]: what it was ingested from


def is_source(path) -> bool:
    """Whether ``path`` names data to ingest rather than a store: a local file, or a local
    directory that is not a Zarr group (a folder of Parquet/CSV files)."""
    s = os.fspath(path)
    if "://" in s and not s.startswith("file://"):
        return False  # remote: a store (or open_dataset's error)
    s = resolve(s).removeprefix("file://")
    if os.path.isfile(s):
        return True
    if os.path.isdir(s) and not os.path.exists(os.path.join(s, "zarr.json")):
        from distsvm.storage.tabular import tabular_format

        return any(tabular_format(name) for _, _, names in os.walk(s) for name in names)
    return False


def cache_store(source: str, cache_dir: str | None = None) -> str:
    """Where ``source`` is ingested: ``SOURCE.zarr`` beside it, or in ``cache_dir`` under its
    name and a hash of its absolute path (two sources of one name in one cache)."""
    source = resolve(source).removeprefix("file://").rstrip(os.sep)
    if cache_dir is None:
        return source + SUFFIX
    tag = hashlib.sha256(source.encode()).hexdigest()[:8]
    return os.path.join(resolve(cache_dir), f"{os.path.basename(source)}-{tag}{SUFFIX}")


def _files(source: str) -> list[str]:
    if os.path.isfile(source):
        return [source]
    from .ingest import expand

    return [p for p, _ in expand(source, None)]


def fingerprint(source: str, label: str | None = None, content: bool = True) -> dict:
    """The source's path, size and modification time (the sum and the latest over a
    folder's files), the SHA-256 of its bytes (``content``; of a folder: of its files'
    names and hashes) and the label column given."""
    files = _files(source)
    stats = [os.stat(p) for p in files]
    out = {"path": source, "size": sum(st.st_size for st in stats),
           "mtime_ns": max(st.st_mtime_ns for st in stats), "files": len(files),
           "label": label}
    if content:
        if len(files) == 1 and files[0] == source:
            out["sha256"] = file_sha256(source)
        else:
            h = hashlib.sha256()
            for p in files:
                h.update(f"{os.path.relpath(p, source)}\0{file_sha256(p)}\n".encode())
            out["sha256"] = h.hexdigest()
    return out


def _unchanged(recorded: dict, source: str, label: str | None) -> str | None:
    """Why the store of ``recorded`` still holds ``source`` (a phrase), or None."""
    now = fingerprint(source, label, content=False)
    same = {k: recorded.get(k) == now[k] for k in ("path", "size", "mtime_ns", "files", "label")}
    if not all(same[k] for k in ("path", "size", "files", "label")):
        return None
    if same["mtime_ns"]:
        return "unchanged: same size and modification time"
    if recorded.get("sha256") == fingerprint(source, label)["sha256"]:
        return "unchanged: same size and SHA-256, a newer modification time"
    return None


def dataset(path, *, cache_dir: str | None = None, label: str | None = None,
            storage_options: dict | None = None, lock_timeout: float | None = None,
            progress: Progress | None = None, connect=None, owner: str = "train") -> Dataset:
    """The dataset ``path`` names: the store itself, or a data file's store
    (:func:`cache_store`), ingested now or reused (see the module's doc).  ``connect()``: a
    context manager yielding the Dask client to ingest with (None: in this process)."""
    if not is_source(path):
        if cache_dir is not None or label is not None:
            flag = "--cache-dir" if cache_dir is not None else "--label"
            raise ValueError(f"distsvm {owner}: {flag} applies to a data file (LIBSVM text, "
                             f"Parquet, CSV); {path} is not one")
        return open_dataset(os.fspath(path), storage_options)
    progress = progress or Progress(quiet=True)
    source = resolve(os.fspath(path)).removeprefix("file://").rstrip(os.sep)
    store = cache_store(source, cache_dir)
    if cache_dir is not None:
        os.makedirs(store.rsplit(os.sep, 1)[0], exist_ok=True)
    timeout = DEFAULT_TIMEOUT if lock_timeout is None else lock_timeout
    folder = os.path.dirname(store)
    if not os.access(folder, os.W_OK):  # no lock, no ingest here: its store as it is, or
        held = _cached(store, source)  # one line
        why = held and _unchanged(held.meta.source[KEY], source, label)
        if not why:
            raise ValueError(f"{path}: its store would be {store}, but {folder} is not "
                             "writable: give --cache-dir DIR (a folder this can write)")
        progress.note(f"{owner}: {path}: its store {store} ({why}; {held.meta.n_rows} rows)")
        return held
    with Lock(store, None, what=store, timeout=timeout, progress=progress):
        held = _cached(store, source)
        if held is not None:
            why = _unchanged(held.meta.source[KEY], source, label)
            if why is not None:
                progress.note(f"{owner}: {path}: its store {store} ({why}; "
                              f"{held.meta.n_rows} rows)")
                return held
        start = time.perf_counter()
        fp = fingerprint(source, label)
        from .ingest import ingest

        with (connect() if connect is not None else contextlib.nullcontext()) as client:
            d = ingest(source, store, client=client, overwrite=held is not None, label=label,
                       lock_timeout=timeout, provenance={KEY: fp})
        again = "ingested again (it changed)" if held is not None else "ingested"
        progress.note(f"{owner}: {path}: {again} into {store}: {d.meta.n_rows} rows, "
                      f"{d.meta.n_features} features, {len(d.meta.blocks)} blocks, "
                      f"{time.perf_counter() - start:.1f}s (reused while {path} is unchanged)")
        return d


def _cached(store: str, source: str) -> Dataset | None:
    """The store at ``store`` if this module made it from ``source``; None if there is
    nothing there; a ValueError (one line) for anything else, which is never replaced."""
    if not os.path.lexists(store):
        return None
    try:
        d = open_dataset(store)
    except StoreNotFoundError:
        raise ValueError(f"{store}: exists and is not a distsvm store; it is where the data "
                         f"file {source} would be ingested: move it, or give --cache-dir "
                         "DIR") from None
    except StorageError as exc:
        raise ValueError(f"{store}: the store of {source} cannot be read ({exc}); remove "
                         "it to ingest the file again") from exc
    recorded = d.meta.source.get(KEY)
    if not isinstance(recorded, dict) or recorded.get("path") != source:
        raise ValueError(f"{store}: a distsvm store not made from {source} by train or "
                         "predict; it is where that file would be ingested: move it, or give "
                         "--cache-dir DIR")
    return d
