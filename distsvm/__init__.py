"""distsvm: distributed, out-of-core training of LIBLINEAR's linear classifiers on Dask and Zarr."""

import os as _os

__version__ = "0.1.0"

# Installed, workers/ and storage/ are subpackages: distsvm.workers, distsvm.storage
# (pyproject's package-dir). In a source checkout they sit beside distsvm/ — the repository's
# layout — so the checkout's root joins this package's path and the same names import.
if not _os.path.isdir(_os.path.join(__path__[0], "workers")):
    __path__.append(_os.path.dirname(__path__[0]))
__all__ = ["LinearSVC", "LinearSVR", "LogisticRegression", "LinearOneClassSVM", "ingest",
           "open_dataset", "train", "predict", "load_model", "save_model"]


def __getattr__(name):  # lazy, so that `import distsvm` (and the CLI's --help) stays fast
    if name in ("LinearSVC", "LinearSVR", "LogisticRegression", "LinearOneClassSVM"):
        from . import api

        return getattr(api, name)
    if name == "ingest":
        from .ingest import ingest

        return ingest
    if name == "train":
        from .jobs import train

        return train
    if name == "predict":
        from .prediction import predict

        return predict
    if name in ("load_model", "save_model"):
        from . import model

        return getattr(model, name)
    if name == "open_dataset":
        from distsvm.storage import open_dataset

        return open_dataset
    raise AttributeError(f"module 'distsvm' has no attribute {name!r}")
