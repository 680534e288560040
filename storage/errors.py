"""Typed errors for the dataset format and for input files.  (The coordinator's and the
public API's warnings and errors are :mod:`distsvm.errors`'.)

Each error carries a message that names the thing that is wrong (the store, the
block, the array, the file and line) so that the CLI can print it as one line.
"""


class StorageError(Exception):
    """Base class of every error raised by :mod:`storage`."""


class StoreNotFoundError(StorageError):
    """No dataset exists at the given location."""


class IncompleteStoreError(StorageError):
    """A location holds a dataset that was never committed (an interrupted ingest)."""


class FormatVersionError(StorageError):
    """The dataset was written by an incompatible version of the format."""


class CorruptStoreError(StorageError):
    """An array of the dataset is missing, has the wrong shape, or fails its checksum."""


class StoreExistsError(StorageError):
    """Refusing to overwrite an existing dataset without ``overwrite=True``."""


class InputFormatError(StorageError, ValueError):
    """A malformed input file: the message names the file, the line and the token."""

    def __init__(self, path, line, token, reason):
        self.path, self.line, self.token, self.reason = path, line, token, reason
        where = f"{path}:{line}" if line is not None else str(path)
        tok = f" (token {token!r})" if token is not None else ""
        super().__init__(f"{where}: {reason}{tok}")

    def __reduce__(self):  # survive pickling between Dask workers and the client
        return type(self), (self.path, self.line, self.token, self.reason)


class InputDataError(StorageError, ValueError):
    """Input that parses but cannot be trained on (empty, one class, bad shapes)."""


class MalformedDocumentError(StorageError, ValueError):
    """A JSON document (a store's header, a run's or the registry's files) that cannot be
    parsed, or is larger or more deeply nested than any this program writes."""


LISTED = 5  # how many items an error message shows of a list (listed())


def listed(values, limit: int = LISTED, fmt=None) -> str:
    """``values`` for an error message, bounded: all of them if there are at most ``limit``
    (``[-1.0, 1.0]``), else the first ``limit`` and the count (``[1.0, 2.0, 3.0, 4.0, 5.0,
    … (2000 in all)]``): an error is one line, whatever the data.  ``fmt`` formats an item
    (default: as Python's list shows it, a NumPy number as Python's)."""
    return f"[{shown(values, limit, fmt)}]"


def shown(values, limit: int = LISTED, fmt=None) -> str:
    """:func:`listed` without its brackets: ``a, b, … (N in all)``."""
    values = list(values)
    if fmt is None:
        def fmt(v):
            return repr(v.item() if hasattr(v, "item") and hasattr(v, "dtype") else v)
    text = ", ".join(fmt(v) for v in values[:limit])
    if len(values) > limit:
        text += f", … ({len(values)} in all)"
    return text
