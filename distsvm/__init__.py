"""distsvm: distributed, out-of-core training of LIBLINEAR's linear classifiers on Dask and Zarr."""

__version__ = "0.1.0"
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
        from storage import open_dataset

        return open_dataset
    raise AttributeError(f"module 'distsvm' has no attribute {name!r}")
