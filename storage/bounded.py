"""Bounded reading of the JSON documents this program reads back: store headers
(``zarr.json``), run files, checkpoint manifests, registry records and pointers.

They are small and shallow when this program writes them, but a reader must expect any
bytes there: a parser asked to read a document nested 100,000 deep recurses until Python
stops it (a RecursionError traceback), and one of gigabytes fills the memory.  So a
document is refused, naming its file, before it is parsed if it is larger than its bound
or nested deeper than :data:`MAX_DEPTH` (counted on the bytes, strings left out), and if
it is not JSON.
"""

from __future__ import annotations

import json
import re

import numpy as np

from .errors import MalformedDocumentError

MAX_HEADER_BYTES = 256 << 20  # a store's zarr.json: ~150 bytes a block, a million blocks
MAX_DOCUMENT_BYTES = 64 << 20  # run files, manifests, registry records: kilobytes
MAX_DEPTH = 64  # what this program writes nests at most ~6 deep
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def check(raw: bytes, where: str, max_bytes: int) -> None:
    """Refuse ``raw`` (the document at ``where``) if it has more than ``max_bytes`` bytes
    or nests deeper than :data:`MAX_DEPTH`, without parsing it."""
    if len(raw) > max_bytes:
        raise MalformedDocumentError(f"{where}: more than {max_bytes} bytes: refused unread")
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return
    codes = np.frombuffer(_STRING.sub(b'""', raw), dtype=np.uint8)
    step = (np.isin(codes, (ord("["), ord("{"))).astype(np.int32)
            - np.isin(codes, (ord("]"), ord("}"))))
    if len(step) and int(np.cumsum(step).max()) > MAX_DEPTH:
        raise MalformedDocumentError(f"{where}: nested more than {MAX_DEPTH} levels deep: "
                                     "refused unparsed")


def loads(raw: bytes, where: str, max_bytes: int = MAX_DOCUMENT_BYTES):
    """The JSON document ``raw`` read from ``where``, checked first (:func:`check`); one
    :class:`MalformedDocumentError` line naming ``where`` if it is not JSON."""
    check(raw, where, max_bytes)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8
        raise MalformedDocumentError(f"{where}: not a JSON document: "
                                     f"{' '.join(str(exc).split())}") from exc
