"""distsvm: distributed, out-of-core training of LIBLINEAR's linear classifiers on Dask and Zarr."""

import sys
import types

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
    if name in ("train", "predict"):
        from . import jobs

        return getattr(jobs, name)
    if name in ("load_model", "save_model"):
        from . import model

        return getattr(model, name)
    if name == "open_dataset":
        from storage import open_dataset

        return open_dataset
    raise AttributeError(f"module 'distsvm' has no attribute {name!r}")


class _Package(types.ModuleType):
    """The package, whose function ``distsvm.ingest`` its submodule of the same name does not
    hide: importing the submodule (the function's first use, or any ``from distsvm.ingest
    import …``) would otherwise bind ``distsvm.ingest`` to the module, and a script's second
    ``distsvm.ingest(...)`` would fail with "'module' object is not callable"."""

    def __setattr__(self, name, value):
        if name == "ingest" and isinstance(value, types.ModuleType):
            return  # the module stays reachable as sys.modules["distsvm.ingest"]
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
