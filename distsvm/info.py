"""The ``info`` command: a store's metadata (its blocks verified unless told not to), or, for
a folder that is no store, what interrupted writers left in it."""

from __future__ import annotations

import json
import sys

from distsvm.storage import open_dataset
from distsvm.storage.errors import StoreNotFoundError, listed
from distsvm.storage.leftovers import leftovers_of, scan

CLASSES_SHOWN = 20  # the text output lists this many classes, then their count


def show(url: str, storage_options=None, *, verify: bool = True, as_json: bool = False) -> None:
    """Print the store at ``url`` (one JSON object with ``as_json``), with a warning for each
    leftover of a killed writer beside it; a folder of leftovers lists them instead."""
    try:
        d = open_dataset(url, storage_options)
    except StoreNotFoundError:
        if not _leftovers_in(url, storage_options, as_json):
            raise
        return
    for path in leftovers_of(url, storage_options):
        print(f"WARNING: {path}: left by an interrupted write to {url} (the next ingest "
              "or append to it removes it)", file=sys.stderr)
    if verify:
        d.verify()
    meta = d.meta.to_json()
    meta["verified"] = verify
    meta["task"] = d.meta.task
    if as_json:
        print(json.dumps(meta))
        return
    blocks = meta.pop("blocks")
    targets = meta.pop("targets", None)
    for k, v in meta.items():
        print(f"{k:16s} {listed(v, CLASSES_SHOWN) if k in ('classes', 'class_counts') else v}")
    if targets is None:
        print(f"{'labels':16s} classes {listed(d.meta.classes, CLASSES_SHOWN)}")
    else:
        print(f"{'labels':16s} targets (regression): {d.meta.n_rows}, min {targets['min']:g}, "
              f"max {targets['max']:g}, mean {targets['mean']:g}")
    sizes = [b["n_rows"] for b in blocks]
    print(f"{'blocks':16s} {len(blocks)} (rows per block: min {min(sizes)}, max {max(sizes)})")


def _leftovers_in(url: str, storage_options, as_json: bool) -> list:
    """A folder that is not a store: the leftovers of killed writers in it
    (:func:`distsvm.storage.leftovers.scan`), printed; [] if there are none."""
    found = scan(url, storage_options)
    if not found:
        return []
    if as_json:
        print(json.dumps({"directory": url, "leftovers": found}))
        return found
    print(f"{url}: not a dataset; {len(found)} leftover(s) of interrupted writes:")
    for f in found:
        print(f"  {f['kind']:18s} {f['path']}: {f['detail']}")
    return found
