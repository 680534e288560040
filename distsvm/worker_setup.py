"""Dask worker preload of the embedded clusters' worker processes (``LocalCluster(...,
preload=[...])``): the worker ignores Ctrl-C (SIGINT), and does not report its last
heartbeat failing once it is closing.

A terminal sends Ctrl-C to every process of the foreground job, the worker processes
included; the command that started them handles it (one ``ERROR: interrupted`` line) and
closes its cluster, which stops them.  Workers started while the command ignored SIGINT
inherit that (:func:`distsvm.cluster._sigint_ignored`); this covers the ones a nanny
starts later (a restart over the memory limit), which would each print a KeyboardInterrupt
traceback.

A worker that closes while a heartbeat is in flight closes that heartbeat's connection
itself, and Dask logs it as an ERROR with two tracebacks ("Failed to communicate with
scheduler during heartbeat"), which reached the terminal of a plain script on 2 worker
processes at the end of a normal run (tests/test_cli_quiet.py, once in CI).  The message
is dropped only while the worker is closing; a scheduler lost while the worker runs is
still reported.
"""

import logging
import signal
import threading

HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"


class ClosingHeartbeat(logging.Filter):
    """Drops ``distributed.worker``'s heartbeat failure of ``worker`` once it is closing."""

    def __init__(self, worker):
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        from distributed.core import Status

        return not (record.getMessage().startswith(HEARTBEAT_FAILED)
                    and self.worker.status in (Status.closing, Status.closing_gracefully,
                                               Status.closed))


def dask_setup(worker) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("distributed.worker").addFilter(ClosingHeartbeat(worker))
