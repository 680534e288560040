"""What a killed writer leaves behind, found and removed.

An ingest into ``DIR/NAME`` on a local disk writes into ``DIR/.NAME.staging-<12 hex>`` and
renames it into place (:func:`distsvm.storage.dataset.staging_url`); a pipeline run ingests each
partition into ``DIR/.NAME.part-<random>``; every writer holds the lock ``DIR/.NAME.lock``
(:mod:`distsvm.storage.lock`).  A SIGKILLed writer leaves them there.  On an object store an
ingest writes in place, so a killed one leaves an uncommitted group at ``NAME`` itself.

The next writer to ``NAME``, holding its lock (so no live writer can be using them),
removes them (:func:`remove_leftovers`); ``distsvm info DIR`` lists them (:func:`scan`).
"""

from __future__ import annotations

import re

from . import lock as locks
from .dataset import _is_local, _local_path

LEFTOVER = re.compile(r"^\.(?P<store>.+)\.(?P<kind>staging-[0-9a-f]{12}(\.old)?|part-[A-Za-z0-9_]+)$")
LOCK = re.compile(r"^\.(?P<store>.+)\.lock$")


def _fs(url: str, storage_options):
    import fsspec

    return fsspec.core.url_to_fs(url, **(storage_options or {}))


def _split(url: str) -> tuple[str, str]:
    url = str(url).rstrip("/")
    if _is_local(url):
        import os

        path = os.path.abspath(_local_path(url))
        return os.path.dirname(path), os.path.basename(path)
    parent, _, base = url.rpartition("/")
    return parent, base


def _entries(directory: str, storage_options) -> list[str]:
    import os

    if _is_local(directory):
        path = _local_path(directory)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    fs, path = _fs(directory, storage_options)
    try:
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _uncommitted(url: str, storage_options) -> bool:
    """A remote group an ingest started and never committed (``rows`` or ``_parts``, no
    distsvm metadata): never a foreign Zarr group or other files."""
    from .dataset import open_group

    try:
        g = open_group(url, mode="r", storage_options=storage_options)
        return "distsvm" not in g.attrs.asdict() and any(
            k in ("rows", "_parts") for k in g.group_keys())
    except Exception:  # not a Zarr group at all
        return False


def leftovers_of(url: str, storage_options: dict | None = None) -> list[str]:
    """The leftovers of killed writers of the store at ``url`` (URLs)."""
    parent, base = _split(url)
    out = [f"{parent}/{e}" for e in _entries(parent, storage_options)
           if (m := LEFTOVER.match(e)) and m["store"] == base]
    if not _is_local(url) and _uncommitted(url, storage_options):
        out.append(str(url))
    return out


def remove_leftovers(url: str, storage_options: dict | None = None, progress=None) -> list[str]:
    """Remove :func:`leftovers_of` ``url``; call it holding the store's lock."""
    from .checkpoint import remove

    found = leftovers_of(url, storage_options)
    for path in found:
        remove(path, storage_options)
        if progress is not None:
            progress.note(f"ingest: removed {path}, left by an interrupted write to {url}")
    return found


def scan(directory: str, storage_options: dict | None = None) -> list[dict]:
    """The leftovers in ``directory``: one ``{"path", "store", "kind", "detail"}`` each —
    staging folders and partition folders of killed writers, locks (held, or stale: their
    holder is gone) and, on object stores, uncommitted groups."""
    directory = str(directory).rstrip("/")
    out = []
    for e in _entries(directory, storage_options):
        path = f"{directory}/{e}"
        if m := LEFTOVER.match(e):
            kind = "staging folder" if m["kind"].startswith("staging") else "partition folder"
            out.append({"path": path, "store": m["store"], "kind": kind,
                        "detail": "left by an interrupted write; the next write to "
                                  f"{m['store']} removes it"})
        elif m := LOCK.match(e):
            doc = locks.read_lock(path, storage_options)
            if doc is None:
                continue
            stale = locks.is_stale(doc)
            out.append({"path": path, "store": m["store"],
                        "kind": "stale lock" if stale else "lock",
                        "detail": ("held by " if not stale else "of a writer that is gone: ")
                                  + locks.describe(doc)})
        elif not _is_local(directory) and _uncommitted(path, storage_options):
            out.append({"path": path, "store": e, "kind": "uncommitted store",
                        "detail": "an interrupted ingest; the next ingest to it removes it"})
    return out
