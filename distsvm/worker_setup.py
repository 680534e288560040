"""Dask worker preload of the embedded clusters' worker processes (``LocalCluster(...,
preload=[...])``): the worker ignores Ctrl-C (SIGINT).

A terminal sends Ctrl-C to every process of the foreground job, the worker processes
included; the command that started them handles it (one ``ERROR: interrupted`` line) and
closes its cluster, which stops them.  Workers started while the command ignored SIGINT
inherit that (:func:`distsvm.cluster._sigint_ignored`); this covers the ones a nanny
starts later (a restart over the memory limit), which would each print a KeyboardInterrupt
traceback.
"""

import signal
import threading


def dask_setup(worker) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
