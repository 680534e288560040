"""Bounded parsing of the small documents users hand us (job and pipeline specs).

A spec is a few hundred bytes of nested keys, yet a YAML parser will happily read a
"billion laughs" file (anchors and aliases that expand exponentially once anything walks
the document: the schema validator hangs), a document nested thousands deep, or the same
key twice (the last one silently wins).  These loaders refuse all three quickly, each
with one :class:`ValueError` line naming what was refused:

* a file larger than :data:`MAX_BYTES`;
* YAML aliases (``*name``, and so ``<<`` merges): refused at the first one, before
  anything is expanded — a spec has no need of them;
* nesting deeper than :data:`MAX_DEPTH` (YAML: counted while composing, before Python
  recursion gets deep; JSON: counted by the parser's own hook on every object);
* a key given twice in one mapping (YAML and JSON; TOML's parser already refuses it).
"""

from __future__ import annotations

import json

MAX_BYTES = 1 << 20  # 1 MiB: a spec is a few hundred bytes
MAX_DEPTH = 32  # a spec nests 4 deep


class DocumentError(ValueError):
    """A document refused before (or while) it is parsed; the message is one line."""


def read_bounded(path: str) -> bytes:
    """The bytes of ``path``, refused if there are more than :data:`MAX_BYTES`."""
    with open(path, "rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise DocumentError(f"the file is larger than {MAX_BYTES} bytes: not a spec")
    return raw


def _safe_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader without aliases, with a depth limit and unique keys."""

        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.events.AliasEvent):
                mark = self.peek_event().start_mark
                raise DocumentError(f"line {mark.line + 1}: YAML aliases (*name, << merges) "
                                    "are not accepted in a spec")
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise DocumentError(f"line {mark.line + 1}: nested more than {MAX_DEPTH} "
                                    "levels deep")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: the base class says so
                    break
                if duplicate:
                    raise DocumentError(f"line {key_node.start_mark.line + 1}: key {key!r} "
                                        "is given twice")
                seen.add(key)
            return super().construct_mapping(node, deep)

    return Loader


def load_yaml(raw: bytes):
    """YAML through a SafeLoader that refuses aliases, deep nesting and repeated keys."""
    loader = _safe_loader()(raw)  # what yaml.load does, with our SafeLoader subclass
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_json(raw: bytes):
    """JSON that refuses repeated keys and nesting deeper than :data:`MAX_DEPTH`."""
    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise DocumentError(f"key {k!r} is given twice")
            out[k] = v
        return out

    doc = json.loads(raw, object_pairs_hook=pairs)
    check_depth(doc)
    return doc


def check_depth(doc, limit: int = MAX_DEPTH) -> None:
    """Refuse a parsed document nested deeper than ``limit`` (iterative: no recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise DocumentError(f"nested more than {limit} levels deep")
        stack.extend((c, depth + 1) for c in children)
