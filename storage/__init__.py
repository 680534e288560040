"""The distsvm dataset format (Zarr v3), its readers and the ingest pipeline.

Imports neither ``workers`` nor ``distsvm``: dependencies point one way,
``distsvm → workers → storage``.
"""

from .dataset import (
    FORMAT_VERSION,
    BlockInfo,
    Dataset,
    DatasetMeta,
    RowBlock,
    open_dataset,
    read_block_labels,
    read_row_block,
)
from .errors import (
    CorruptStoreError,
    FormatVersionError,
    IncompleteStoreError,
    InputDataError,
    InputFormatError,
    StorageError,
    StoreExistsError,
    StoreNotFoundError,
)

__all__ = [
    "FORMAT_VERSION", "BlockInfo", "Dataset", "DatasetMeta", "RowBlock", "open_dataset",
    "read_block_labels", "read_row_block", "CorruptStoreError", "FormatVersionError", "IncompleteStoreError",
    "InputDataError", "InputFormatError", "StorageError", "StoreExistsError",
    "StoreNotFoundError",
]
