"""Where a path given on the client points, before any worker sees it.

A worker resolves a relative path against its own working directory and does not expand
``~``: from another directory, an external cluster's workers opened a different store than
the client (issue 19).  So every local path is made absolute, with ``~`` expanded, where it
enters (:func:`storage.open_dataset`, an ingest's source and store, a spec's paths); an
fsspec URL (``s3://…``) is left as it is, a ``file://`` URL gets an absolute path.
"""

from __future__ import annotations

import os


def resolve(url) -> str:
    """``url`` as this process means it, for any other process: a local path absolute and
    ``~``-expanded (also after ``file://``); other URLs unchanged."""
    s = os.fspath(url)
    if s.startswith("file://"):
        return "file://" + os.path.abspath(os.path.expanduser(s[len("file://"):]))
    if "://" in s:
        return s
    return os.path.abspath(os.path.expanduser(s))


def canonical(url) -> str:
    """The one identity of a store or file, whatever the spelling: a local path absolute,
    ``~``-expanded, with every symlink resolved and no ``file://`` (``a.zarr``,
    ``./x/../a.zarr``, a symlink to it and ``file:///…/a.zarr`` are one path); another URL
    without trailing slashes.  Locks are taken on it and paths compared by it, so a process
    never mistakes its own lock, taken under one spelling, for another writer's."""
    s = os.fspath(url)
    if s.startswith("file://"):
        s = s[len("file://"):]
    elif "://" in s:
        return s.rstrip("/")
    return os.path.realpath(os.path.expanduser(s))
