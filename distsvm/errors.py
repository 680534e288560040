"""Warnings and errors of the coordinator and the public API (those of the dataset format and
of input files are :mod:`distsvm.storage.errors`'), and how a command prints an error."""

import contextlib
import datetime
import json
import logging
import signal
import sys
import threading

# Set by the command's SIGINT handler (distsvm.cli): a KeyboardInterrupt that Python
# swallowed (raised inside a callback or a finalizer, "Exception ignored in ...") still
# stops the command at its next check_interrupted(), and its exit status is 130.
INTERRUPTED = threading.Event()
# The command's --log-format: "json" prints its errors as JSON lines too (print_error).
LOG_FORMAT = {"format": "text"}


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


def check_interrupted() -> None:
    """Raise KeyboardInterrupt if the command was interrupted (:data:`INTERRUPTED`): called
    before what must not happen after a Ctrl-C (a registry publish, a promotion)."""
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


def print_error(text: str) -> None:
    """A command's error on stderr: one ``ERROR: text`` line, or with ``--log-format json``
    one JSON line (``{"time", "event": "error", "message"}``) like its progress lines."""
    if LOG_FORMAT["format"] == "json":
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        print(json.dumps({"time": now, "event": "error", "message": text}), file=sys.stderr)
    else:
        print(f"ERROR: {text}", file=sys.stderr)


def _unraisable(info) -> None:
    """After Ctrl-C, what Python can only swallow is not printed: the KeyboardInterrupt raised
    in a GC or finalizer callback of Dask's (INTERRUPTED stops the command), and what the
    finalizers of objects it left half-built say (llvmlite's ``OutputString.__del__``: "no
    attribute '_ptr'", seen once in 100 Ctrl-Cs 0.4-1.6 s into a pipeline run)."""


def on_interrupt(signum, frame):
    """The command's SIGINT handler (:func:`quiet_interrupt`; :mod:`distsvm.cli` installs it
    before its imports)."""
    logging.disable(logging.CRITICAL)  # for good: the process is on its way out
    INTERRUPTED.set()  # seen even if Python swallows the KeyboardInterrupt (main)
    sys.unraisablehook = _unraisable  # ... and then without its "Exception ignored" text
    raise KeyboardInterrupt


@contextlib.contextmanager
def quiet_interrupt():
    """The command's SIGINT handler (:mod:`distsvm.cli`): Ctrl-C silences logging before it
    raises KeyboardInterrupt: the job's Dask calls then unwind, and Dask's threads log the
    calls cancelled under them (tracebacks of its internals, e.g. distributed.utils.sync's
    cancel) after the command's one ``ERROR:`` line.  Installed in the main thread only,
    over Python's default handler only."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
