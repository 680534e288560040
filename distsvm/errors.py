"""Warnings and errors of the coordinator and the public API (those of the dataset format and
of input files are :mod:`distsvm.storage.errors`')."""


class ConvergenceWarning(UserWarning):
    """A solver stopped at its round limit before meeting its stopping rule."""


class ClusterError(RuntimeError):
    """The Dask cluster could not be reached or lost the workers a job needs."""


class UsageError(ValueError):
    """A command's options or parameters refused before anything started (exit status 2)."""


class MissingDependencyError(RuntimeError):
    """An optional dependency a command needs is not installed (the message says which extra)."""


def message(exc: BaseException) -> str:
    """An error's message as the one line a command prints after ``ERROR:``: its text on
    one line, never empty (else the exception's type)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def need_tabular(what: str) -> None:
    """Raise :class:`MissingDependencyError` naming the extra unless pandas and pyarrow import."""
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(f"{what} needs pandas and pyarrow: pip install "
                                     f"'distsvm[parquet]' ({exc})") from exc
