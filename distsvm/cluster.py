"""Connecting to Dask: an embedded cluster by default, or an existing scheduler.

The embedded cluster is in this process by default (:func:`embedded_client`): one worker
whose threads are threads of the process, started once and reused by every later job of
the process (the estimators' fits, the CLI's one command), so a job pays no cluster
start, no worker process start and no Numba cache load of its own.  One worker, because
the workers' per-run tables (:mod:`distsvm.workers.blocks`) are per process: a worker is a
process everywhere else.  An explicit worker count (``n_workers``, the CLI's
``--workers``, a job spec's ``cluster.n_workers``) or TLS asks for a cluster of worker
processes instead, started for the job and closed after it, bound to 127.0.0.1 only,
each single-threaded (the kernels are single-threaded and release the GIL) under a
nanny that restarts it over its memory limit.  Tasks that
hold per-block state are pinned to the block's owner; :func:`gather` makes sure
a job whose owner has left the cluster gets a :class:`WorkerLost` error instead of
waiting forever (Dask keeps a task pinned to a departed worker pending, distributed
issue #7346).  A solver that can rebuild the lost state catches it, waits for the
round's other tasks to stop (:func:`settle`), moves the lost blocks to the remaining
workers (:func:`replan`) and carries on; the others let it fail the job.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib.machinery
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
import uuid
import warnings

import dask
import numpy as np
import psutil
from distributed import Client, LocalCluster
from distributed.core import Status

from .errors import ClusterError, MissingDependencyError

# Share of a worker's memory limit that its process may reach with cached blocks, below Dask's
# pause threshold (0.8): the rest is for the blocks in flight and the kernels' buffers.
CACHE_FRACTION = 0.6
# Largest blocks in flight per thread of a worker that streams (its blocks do not all fit its
# cache): the one being solved, evicted but still in use, and the next one being read
# (prefetch, distsvm.workers.blocks.stream), which takes up to ~3x its size (compressed + decoded +
# derived).
IN_FLIGHT = 4
# ... and of a worker whose cache holds every block it reads: only a block's first read is in
# flight, whose arrays are decoded into the memory the cache then keeps (Buffers), so beyond
# it only its compressed chunks (a pypi-summaries block: 52 MiB resident at the read's peak,
# 43 MiB of them the cached block; docs/benchmarks.md).  Two, as before that, streamed a
# 512 MB worker's only block each pass rather than keep it, in more memory (68 MiB a stream).
READ = 1
POLL_SECONDS = 2.0
LEAVING_SECONDS = 30.0  # a worker that does not answer a call is gone by then
# a pinned worker paused this long (over its memory) fails the job (< PAUSED_WAIT)
PAUSED_SECONDS = 60.0


PROBE_SECONDS = 5.0  # a scheduler's port that does not answer a TCP connect within this


def _reachable(scheduler: str) -> None:
    """Fail fast where nothing listens at the scheduler's address (a wrong port: refused at
    once; a filtered one: :data:`PROBE_SECONDS`): Dask's client retries for its whole
    connect timeout, 30 s, before it says so.  Only tcp:// and tls:// addresses are probed."""
    import socket

    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, location = parse_address(scheduler)
        host, port = parse_host_port(location)
    except (ValueError, TypeError):
        return  # Client's own error says what is wrong with the address
    if scheme not in ("tcp", "tls"):
        return
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (
            exc.strerror or str(exc)).lower()
        raise ClusterError(f"cannot connect to the Dask scheduler at {scheduler}: {reason} "
                           f"(nothing listens there; `dask scheduler` prints its "
                           "address)") from None


@contextlib.contextmanager
def connect(scheduler: str | None = None, n_workers: int | None = None,
            client: Client | None = None, progress=None, security=None,
            dashboard: bool | None = None):
    """Yield a Dask ``Client``: the one given, one for ``scheduler``, the process's
    in-process cluster (:func:`embedded_client`: no ``n_workers``, no ``security``), or a
    cluster of ``n_workers`` worker processes started for the job.

    With ``progress`` (a :class:`distsvm.progress.Progress`), a cluster this call connects
    to or starts is announced with its scheduler, workers and dashboard address.  An
    embedded cluster's HTTP server listens on 127.0.0.1, on a free port.  ``security`` (a
    ``distributed.security.Security``) secures the connection to the scheduler, or makes
    the embedded cluster of processes talk TLS (still on 127.0.0.1 only).  ``dashboard``
    (default :data:`DASHBOARD`, the CLI's ``--dashboard``): an embedded cluster serves
    Dask's dashboard (on 127.0.0.1, its URL announced even with a quiet ``progress``),
    which needs bokeh (:func:`need_bokeh`); without it, it serves none.
    """
    if dashboard is None:
        dashboard = DASHBOARD
    if client is not None:
        yield client
        return
    if scheduler:
        _check_tls(scheduler, security)
        _reachable(scheduler)
        try:
            c = Client(scheduler, timeout="30s", security=security)
        except (OSError, TimeoutError, TypeError) as exc:
            raise ClusterError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
        except Exception as exc:  # something else answers there: its bytes are no handshake
            raise ClusterError(f"cannot connect to the Dask scheduler at {scheduler}: what "
                               "answers there is not a Dask scheduler "
                               f"({type(exc).__name__})") from exc
        try:
            _direct(c)
            _announce(c, progress, dashboard, embedded=False)
            yield c
        finally:
            c.close()
        return
    if dashboard:  # an embedded cluster's (a scheduler's own is its business)
        need_bokeh()
    if n_workers is None and security is None:
        c = embedded_client(dashboard)
        _announce(c, progress, dashboard)
        with c.as_current():  # the client of Dask's functions that take none (wait)
            yield c
        return
    with _main_not_reimported():
        with _sigint_ignored():
            cluster = LocalCluster(n_workers=n_workers or default_workers(), threads_per_worker=1,
                                   processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                   scheduler_kwargs={"dashboard": bool(dashboard)},
                                   memory_limit="auto", silence_logs=LOG_LEVEL, security=security,
                                   protocol="tls://" if security else None,
                                   preload=[*dask.config.get("distributed.worker.preload", []),
                                            "distsvm.worker_setup"])
        with cluster, Client(cluster, security=security, direct_to_workers=True) as c:
            _prompt(c)
            _announce(c, progress, dashboard)
            yield c


# Dask's log messages shown on stderr (those of the clusters this process starts: its
# scheduler, nannies, in-process worker and client, and its worker processes): ERROR and
# above for the library; the command line shows none unless --log-level asks for them
# (:func:`set_log_level`): its errors are one line, its shutdown silent.
LOG_LEVEL = logging.ERROR
QUIET = logging.CRITICAL + 10  # no message of Dask's
# the loggers Dask's default logging configuration sets, and asyncio's
DASK_LOGGERS = ("distributed", "distributed.client", "distributed.gc", "bokeh", "tornado",
                "tornado.application", "asyncio")


def set_log_level(level: int) -> None:
    """Show Dask's log messages of ``level`` and above (and none of them at :data:`QUIET`)
    on stderr: those of this process (the ``distributed`` logger's handler, which every
    ``distributed.*`` logger goes through, and the loggers of ``DASK_LOGGERS``) and those
    of the worker processes of the clusters it starts later (which read Dask's logging
    configuration from the ``DASK_LOGGING`` variable of the environment they inherit)."""
    global LOG_LEVEL
    import distributed  # noqa: F401 - its logging is set up on import: then change it

    LOG_LEVEL = level
    for name in DASK_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for handler in logging.getLogger("distributed").handlers:
        handler.setLevel(level)
    os.environ["DASK_LOGGING"] = repr({name: level for name in DASK_LOGGERS})


@contextlib.contextmanager
def _sigint_ignored():
    """Worker processes started in this block ignore Ctrl-C (SIGINT, which a terminal sends
    to every process of the foreground job): the process that started them handles it and
    closes its cluster, which stops them, instead of each printing its KeyboardInterrupt
    traceback.  A signal ignored at exec stays ignored, and Python then installs no handler
    of its own.  Main thread only (elsewhere, nothing changes); a Ctrl-C while the cluster
    starts is lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _main_not_reimported():
    """While a cluster of worker processes lives: its (nanny's) worker processes do not run
    the script that started it.  Python's ``spawn`` start method, Dask's default, runs the
    ``__main__`` script of the parent again in every child (as ``__mp_main__``); a script
    with no ``if __name__ == "__main__":`` guard around its fit then starts a cluster inside
    the worker, which fails ("Nanny failed to start", hundreds of lines).  A child skips
    ``__main__`` when its spec names it "__main__" (``multiprocessing.spawn``'s
    ``_fixup_main_from_name``): a plain script (no spec, a file) gets that spec for the
    cluster's lifetime, restarts by the nanny included, then its own spec back.  The
    workers import what their tasks need by module name (distsvm, workers, storage); a
    function of the script itself reaches them by value (cloudpickle), as before.  (A
    ``spawn`` pool the script itself starts meanwhile, in another thread, would not see the
    script's functions either.)"""
    main = sys.modules.get("__main__")
    plain = (main is not None and getattr(main, "__spec__", None) is None
             and getattr(main, "__file__", None) is not None)
    if not plain:
        yield
        return
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = None


TLS_HELP = ("--tls-ca-file and --tls-cert (and --tls-key unless the certificate file holds "
            "the key), a job spec's cluster.tls, or Dask's distributed.comm.tls configuration")


def _check_tls(scheduler: str, security) -> None:
    """ClusterError, one line, unless a ``tls://`` scheduler has the client's TLS files (from
    ``security`` or, as Dask's Client does without one, from Dask's configuration): Dask's
    Client fails with a TypeError traceback without them."""
    if not scheduler.startswith("tls://"):
        return
    from distributed.security import Security

    try:
        context = (security or Security()).get_connection_args("client")["ssl_context"]
    except (OSError, ValueError) as exc:  # unreadable or malformed PEM files
        raise ClusterError(f"cannot use the TLS files for {scheduler}: {exc}") from exc
    if context is None:
        raise ClusterError(f"the Dask scheduler {scheduler} talks TLS: give the client's "
                           f"certificates: {TLS_HELP}")


def tls_config(scheduler: str | None, ca_file: str | None = None, cert: str | None = None,
               key: str | None = None) -> dict:
    """Dask configuration of the CLI's TLS options for a ``tls://`` scheduler, named as
    ``dask worker``'s (``--tls-ca-file``, ``--tls-cert``, ``--tls-key``): the files of the
    client's ``distributed.security.Security`` (:func:`tls_security`), which Dask's Client
    reads from its configuration.  ``{}`` without them; ValueError (one line) for options
    without a ``tls://`` scheduler, without the CA or the certificate, or a missing file."""
    given = {opt: path for opt, path in (("--tls-ca-file", ca_file), ("--tls-cert", cert),
                                         ("--tls-key", key)) if path}
    if not given:
        return {}
    if not (scheduler or "").startswith("tls://"):
        raise ValueError(f"{', '.join(given)} are for a TLS scheduler (--scheduler "
                         f"tls://HOST:PORT), got --scheduler {scheduler or '(none)'}")
    missing = [opt for opt in ("--tls-ca-file", "--tls-cert") if opt not in given]
    if missing:
        raise ValueError(f"--scheduler {scheduler}: TLS needs {' and '.join(missing)} too")
    for opt, path in given.items():
        if not os.path.isfile(os.path.expanduser(path)):
            raise ValueError(f"{opt} {path}: no such file")
    files = {k: os.path.abspath(os.path.expanduser(v)) for k, v in given.items()}
    return {"distributed.comm.tls.ca-file": files["--tls-ca-file"],
            "distributed.comm.tls.client.cert": files["--tls-cert"],
            "distributed.comm.tls.client.key": files.get("--tls-key"),
            "distributed.comm.require-encryption": True}


def tls_security(config: dict):
    """The ``distributed.security.Security`` of a :func:`tls_config` (what a Client builds
    from it)."""
    from distributed.security import Security

    with dask.config.set(config):
        return Security()


def default_workers() -> int:
    """Worker processes of an embedded cluster, and threads of the in-process one's worker:
    one per physical core, at most 4."""
    return max(1, min(psutil.cpu_count(logical=False) or 1, 4))


_embedded: tuple[LocalCluster, Client] | None = None  # this process's in-process cluster
_embedded_lock = threading.Lock()
_embedded_dashboard = False  # whether it serves the dashboard


def embedded_client(dashboard: bool = False) -> Client:
    """The client of this process's in-process cluster, started on first use: a scheduler
    and one worker of :func:`default_workers` threads, all in this process (Dask's
    ``inproc://`` transport, nothing listens on the network), closed at interpreter exit or
    by :func:`close_embedded`.  Every later job of the process reuses it, with its Numba
    kernels loaded and its blocks cached.  It is not Dask's default client, so that a job
    that asks for a cluster of processes (``n_workers``) gets one.

    Dask enforces no memory limit on an in-process worker; its limit (Dask's "auto": the
    machine's memory) sizes its block cache (:func:`plan`), which is how a job on data
    larger than memory stays within it, as on worker processes.

    It serves no dashboard unless ``dashboard`` (then one started without is replaced)."""
    global _embedded, _embedded_dashboard
    with _embedded_lock:
        if (_embedded is None or _embedded[1].status != "running"
                or (dashboard and not _embedded_dashboard)):
            close_embedded()
            # no statistical profiler: it samples the stacks of every thread of the worker's
            # process 100 times a second, and in-process that is the job's process
            with dask.config.set({"distributed.worker.profile.enabled": False}):
                cluster = LocalCluster(n_workers=1, threads_per_worker=default_workers(),
                                       processes=False, dashboard_address="127.0.0.1:0",
                                       worker_dashboard_address="127.0.0.1:0",
                                       scheduler_kwargs={"dashboard": bool(dashboard)},
                                       memory_limit="auto", silence_logs=LOG_LEVEL)
            try:
                client = Client(cluster, set_as_default=False, direct_to_workers=True)
            except BaseException:
                cluster.close()
                raise
            _prompt(client, cluster)
            _embedded, _embedded_dashboard = (cluster, client), bool(dashboard)
        return _embedded[1]


@atexit.register
def close_embedded() -> None:
    """Close this process's in-process cluster, if it has one (the next job starts another)."""
    global _embedded
    started, _embedded = _embedded, None
    if started is None:
        return
    # Closing, the cluster puts back the log level it had silenced, and its comms then log
    # their closing (INFO, with tracebacks) to stderr: nothing the user should see.
    disabled = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        for part in reversed(started):  # the client, then the cluster
            with contextlib.suppress(Exception):
                part.close()
    finally:
        logging.disable(disabled)


# Dask batches the messages of a stream, sending at most one batch per interval: 10 ms
# for a client's, 2-5 ms for the scheduler's and the workers' (distributed 2026.8).  The
# solvers' rounds are a few tasks each, one after the other, so every round waited out
# these intervals: ~11 ms a task, as long as a round on a 30 000-row block.
STREAM_INTERVAL = 0.0005  # seconds


def _prompt(client: Client, cluster: LocalCluster | None = None) -> None:
    """Shorten the batching interval (``STREAM_INTERVAL``) of ``client``'s stream to the
    scheduler and, for an in-process ``cluster``, of the scheduler's streams and the
    workers' (no such attribute in another Dask version: left as it is)."""
    streams = [getattr(client, "scheduler_comm", None)]
    if cluster is not None:
        scheduler = cluster.scheduler
        streams += [*getattr(scheduler, "stream_comms", {}).values(),
                    *getattr(scheduler, "client_comms", {}).values(),
                    *(getattr(w, "batched_stream", None) for w in cluster.workers.values())]
    for stream in streams:
        if hasattr(stream, "interval"):
            stream.interval = STREAM_INTERVAL


DIRECT_PROBE_SECONDS = 5.0


def _direct(client: Client) -> None:
    """Have ``client`` (connected to an existing scheduler) fetch results straight from the
    workers where it reaches them, as the clusters started here do: one hop instead of two
    through the scheduler, ~10 ms of a pass that returns a 3.2 MB vector from each worker
    (docs/benchmarks.md, "Scale out").  Tried once on a small task; a client that cannot
    reach a worker within ``DIRECT_PROBE_SECONDS`` goes through the scheduler, Dask's
    default."""
    if not workers_info(client):
        return
    client.direct_to_workers = True
    try:
        client.submit(int, 0, pure=False).result(timeout=DIRECT_PROBE_SECONDS)
    except Exception:  # noqa: BLE001 - unreachable workers: the scheduler relays, as by default
        client.direct_to_workers = False


def dashboard_link(client: Client) -> str | None:
    """The address of the scheduler's Dask dashboard, or None if it serves none (its HTTP
    server serves the dashboard only where bokeh is installed: for a scheduler on this
    machine, that can be told)."""
    try:
        if "dashboard" not in client.scheduler_info().get("services", {}):
            return None
        local = client.scheduler.address.startswith(("tcp://127.0.0.1:", "inproc://"))
        if local and importlib.util.find_spec("bokeh") is None:
            return None
        return client.dashboard_link
    except Exception:  # noqa: BLE001 - only informative
        return None


# Whether the embedded clusters serve Dask's dashboard when :func:`connect` is not told
# (the CLI's --dashboard sets it).
DASHBOARD = False
DASHBOARD_EXTRA = "pip install 'distsvm[dashboard]' (bokeh>=3.1)"


def need_bokeh() -> None:
    """MissingDependencyError unless bokeh, which Dask's dashboard needs, is installed."""
    if importlib.util.find_spec("bokeh") is None:
        raise MissingDependencyError(f"the Dask dashboard needs bokeh, which is not "
                                     f"installed: {DASHBOARD_EXTRA}")


def _announce(client: Client, progress, dashboard: bool = False, embedded: bool = True) -> None:
    """The cluster line on ``progress``; with ``dashboard`` asked, its URL on stderr even
    with no ``progress`` or a quiet one."""
    if progress is None and not dashboard:
        return
    # an embedded cluster's HTTP server serves the dashboard only where asked
    link = dashboard_link(client) if dashboard or not embedded else None
    server = getattr(getattr(getattr(client, "cluster", None), "scheduler", None),
                     "http_server", None)
    if link and embedded and getattr(server, "port", None):
        # its own address: Dask's link names the machine's for an inproc:// scheduler
        link = f"http://127.0.0.1:{server.port}/status"
    if progress is None:
        print(f"dashboard: {link or 'none (the scheduler serves none)'}", file=sys.stderr,
              flush=True)
        return
    info = client.scheduler_info()
    text = (f"cluster: scheduler {info.get('address', client.scheduler.address)}, "
            f"{len(info.get('workers', {}))} workers, dashboard "
            + (link or ("off (the scheduler serves none)" if dashboard
                        else "off (--dashboard serves one)")))
    if dashboard and progress.quiet and not progress.json:
        progress.always(f"dashboard: {link or 'none (the scheduler serves none)'}")
    progress.note(text, event="cluster", scheduler=info.get("address"), dashboard=link)


def scheduler_address(scheduler_file: str) -> str:
    """The address in a Dask scheduler file (``dask scheduler --scheduler-file FILE``)."""
    import json

    try:
        with open(scheduler_file) as f:
            return json.load(f)["address"]
    except FileNotFoundError:
        raise ClusterError(f"no scheduler file {scheduler_file} (expected the JSON file that "
                           "`dask scheduler --scheduler-file FILE` writes)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{scheduler_file} is not a Dask scheduler file (JSON with the "
                           f"scheduler's 'address'): {exc!r}") from None


def workers_info(client: Client) -> dict:
    """The scheduler's current workers, {address: info}, asked for now.

    Not ``client.scheduler_info(n_workers=-1)["workers"]``: that returns the client's
    cached copy, which its periodic refresh (every 2 s, without per-worker details) may
    replace between the fetch and the return, and then lists no workers at all.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """Which worker owns which block, each worker's block-cache budget in bytes, and its
    threads (used by the Newton and SVM-ALM passes and by one-vs-rest DCD's slots).
    ``budgets``: each worker's budget before its process's own memory (:func:`plan`), the
    same in every run on the same cluster and data: what sizes a cache that changes a
    solver's path (streamed DCD's informative rows), so that a seed gives one result."""

    owners: tuple[str, ...]  # owners[b] = worker address of block b
    cache_bytes: dict[str, int]
    threads: dict[str, int] = dataclasses.field(default_factory=dict)  # default 1
    budgets: dict[str, int] = dataclasses.field(default_factory=dict)  # default cache_bytes
    # what each worker's cache and blocks in flight may take (CACHE_FRACTION of its limit less
    # its process's memory), the bytes of each block in worker memory, and of the largest
    # stored block (the unit of a read); empty: a plan given whole, whose caches stay as given
    free: dict[str, int] = dataclasses.field(default_factory=dict)
    sizes: tuple[int, ...] = ()
    read_bytes: int = 0

    def budget(self) -> int:
        """The smallest of the workers' ``budgets`` (their ``cache_bytes`` where unset)."""
        return min(self.budgets.get(a, self.cache_bytes[a]) for a in self.workers)

    @property
    def workers(self) -> list[str]:
        return sorted(self.cache_bytes)

    def blocks_of(self, worker: str) -> list[int]:
        return [b for b, w in enumerate(self.owners) if w == worker]

    def shares(self, blocks: list) -> list[tuple[str, list]]:
        """(worker, its items of ``blocks``) of each worker that owns some, in worker order
        (``blocks``: the store's, one a block of the plan)."""
        return [(a, [blocks[b] for b in bs]) for a in self.workers if (bs := self.blocks_of(a))]

    def holds(self, worker: str, nbytes: int) -> bool:
        """Whether ``worker``'s cache can hold a joined block of ``nbytes`` (and its memory
        the block's parts beside it while it is being joined)."""
        if not self.free:
            return nbytes <= self.cache_bytes[worker]
        return 2 * nbytes <= self.free[worker] and nbytes <= cache_budget(
            self.free[worker], [nbytes], self.read_bytes, self.threads.get(worker, 1))


_warmed = False  # on a worker: whether _warm_rss has read a block in this process


def _warm_rss(url: str | None, block, storage_options) -> int:
    """On a worker: load the kernels and read one block without caching it (the
    libraries and the store reader's machinery are most of a worker's footprint),
    then return the process's resident memory apart from its block cache (which the new
    job's budget covers: earlier jobs' blocks are kept or evicted within it).  The block is
    read once per worker process: once the machinery is loaded, reading another adds
    nothing that stays."""
    global _warmed
    import distsvm.workers.blocks
    import distsvm.workers.dcd  # noqa: F401

    if url is not None and not _warmed:
        distsvm.workers.blocks.load(url, block, 0, storage_options)
        _warmed = True
    return psutil.Process().memory_info().rss - distsvm.workers.blocks.cached_bytes()


def block_sizes(meta) -> list[int]:
    """Bytes of each block in worker memory: CSR arrays, labels and row norms."""
    itemsize = np.dtype(meta.dtype).itemsize
    return [b.nnz * (itemsize + 4) + b.n_rows * 20 + 8 for b in meta.blocks]


def block_bytes(meta) -> int:
    """Bytes of the largest block in worker memory (:func:`block_sizes`)."""
    return max(block_sizes(meta), default=0)


# The CLI's jobs on a store larger than this share of the machine's memory (decoded) run
# on worker processes: out-of-core data, where a nanny that restarts a worker over its
# memory limit (and the solvers' recovery from it) is worth the start of the processes.
IN_PROCESS_SHARE = 0.25


def workers_for(meta, scheduler: str | None, n_workers: int | None,
                parallel: bool = False) -> int | None:
    """The worker count a CLI job on a store with metadata ``meta`` asks for: ``n_workers``
    as given; with neither it nor ``scheduler``, None (the in-process cluster) for a store
    of at most ``IN_PROCESS_SHARE`` of the machine's memory, and :func:`default_workers`
    (worker processes) for a larger one or for ``parallel`` DCD, whose K is the number of
    workers (the in-process cluster has one)."""
    if scheduler or n_workers is not None:
        return n_workers
    small = sum(block_sizes(meta)) <= IN_PROCESS_SHARE * psutil.virtual_memory().total
    return None if small and not parallel else default_workers()


def plan(client: Client, n_blocks: int, n_workers: int | None = None,
         dataset=None) -> WorkerPlan:
    """Assign blocks to workers round-robin and size each worker's block cache.

    A worker's cache and blocks in flight may take ``CACHE_FRACTION`` of its memory limit,
    less what the process uses once the kernels are loaded and a block of ``dataset`` has
    been read (``free``); the cache gets that less the blocks in flight (:func:`assign`).
    Its ``budgets`` entry is the streaming cache without the process's own memory, which
    varies from run to run.
    """
    info = workers_info(client)
    if not info:
        raise ClusterError("the Dask cluster has no workers")
    addrs = sorted(info)[: n_workers or None]
    if dataset is not None and dataset.meta.blocks:
        warm = (dataset.url, dataset.meta.blocks[0], dataset.storage_options)
        in_flight = IN_FLIGHT * block_bytes(dataset.meta)
    else:
        warm, in_flight = (None, None, None), 0
    used = client.run(_warm_rss, *warm, workers=addrs)
    total = psutil.virtual_memory().total
    free, budgets = {}, {}
    threads = {a: max(1, int(info[a].get("nthreads") or 1)) for a in addrs}
    for a in addrs:
        limit = info[a].get("memory_limit") or total // len(addrs)
        budgets[a] = max(0, int(CACHE_FRACTION * limit) - in_flight * threads[a])
        free[a] = max(0, int(CACHE_FRACTION * limit) - used[a])
    sizes = tuple(block_sizes(dataset.meta)) if dataset is not None else ()
    owners = tuple(addrs[b % len(addrs)] for b in range(n_blocks))
    return assign(WorkerPlan(owners, {a: 0 for a in addrs}, threads, budgets, free, sizes,
                             max(sizes, default=0)), owners)


def cache_budget(free: int, held, read_bytes: int, threads: int = 1) -> int:
    """A worker's block cache, of ``free`` bytes for the cache and the blocks in flight, that
    reads blocks of ``held`` bytes (stored blocks of at most ``read_bytes``) on ``threads``
    threads: where they all fit beside a first read in flight per thread (``READ``), all but
    that, so that they stay decoded in its memory across passes and rounds; else it streams,
    and the cache is what ``IN_FLIGHT`` blocks per thread leave."""
    cache = free - READ * read_bytes * threads
    if sum(held) <= cache:
        return max(0, cache)
    return max(0, free - IN_FLIGHT * read_bytes * threads)


def assign(plan: WorkerPlan, owners, sizes=None, every: bool = False) -> WorkerPlan:
    """``plan`` with block b owned by ``owners[b]`` (``sizes``: its blocks' bytes in worker
    memory, where the blocks changed, e.g. joined), each worker's cache sized for the blocks
    it then reads (:func:`cache_budget`): its own, or with ``every`` all of them (problems
    side by side on rotated plans).  A plan given whole (no ``free``) keeps its caches."""
    owners = tuple(owners)
    if not plan.free:
        return dataclasses.replace(plan, owners=owners)
    sizes = plan.sizes if sizes is None else tuple(sizes)
    cache = {a: cache_budget(plan.free[a], sizes if every else
                             [s for s, o in zip(sizes, owners) if o == a],
                             plan.read_bytes, plan.threads.get(a, 1))
             for a in plan.workers}
    return dataclasses.replace(plan, owners=owners, sizes=sizes, cache_bytes=cache)


# Task arguments larger than this in all are scattered to the workers first rather than sent
# inside the tasks, through the scheduler, whose client warns of a "large graph" above 10 MiB
# on the user's terminal (Newton's one-task iteration sends w, ∇f, diag(∇²f) and the
# regularization; ingest sends 32 MB pieces of a compressed file).
SCATTER_BYTES = 4 << 20


def scattered(client: Client, args: tuple, kwargs: dict, workers=None) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` of a task, their bytes and array values sent to ``workers``
    (or to a worker Dask picks) by ``client.scatter`` where they exceed ``SCATTER_BYTES``
    in all, so that the task's graph stays small."""
    def big(v):
        return isinstance(v, (bytes, bytearray, memoryview, np.ndarray))

    def size(v):
        return v.nbytes if isinstance(v, (memoryview, np.ndarray)) else len(v)

    if sum(size(v) for v in (*args, *kwargs.values()) if big(v)) <= SCATTER_BYTES:
        return args, kwargs

    def send(v):
        return client.scatter(v, workers=workers, broadcast=workers is not None,
                              hash=False) if big(v) else v

    return tuple(send(v) for v in args), {k: send(v) for k, v in kwargs.items()}


class WorkerLost(ClusterError):
    """Workers ``gone`` left the cluster while a job's tasks on them were pending."""

    def __init__(self, gone: list[str], rows: list | None = None):
        super().__init__(
            f"worker {', '.join(gone)} left the Dask cluster during the job (killed, or "
            "restarted by its nanny, e.g. over its memory limit); the solver state of its "
            "blocks is lost: run the job again")
        self.gone = gone
        self.rows = rows or []  # the rounds the step did complete on the other workers


def alive(client: Client) -> set[str]:
    """Addresses of the workers the scheduler knows now."""
    return set(workers_info(client))


# A Ctrl-C in an actor call's wait (Call.result) leaves Dask's coroutine for its result
# unawaited, and Python says so at exit: not the user's concern
warnings.filterwarnings("ignore", message="coroutine 'ActorFuture._result' was never awaited",
                        category=RuntimeWarning)

# On each worker process: the calls its Runners ran, by function name (tests count a pass's
# work with runner_calls); a call waits at most PAUSED_WAIT for a paused worker to resume
RUNNER_CALLS: collections.Counter = collections.Counter()
PAUSED_WAIT = 65.0  # just over PAUSED_SECONDS (60 s)
# Held while a Runner's call or group member computes, whichever job or problem it is of; a
# member waiting for its peers' parts lets go: the worker computes one thing at a time, as
# its memory was planned, and yet groups that reach it in any order all move on
BUSY = threading.Lock()


class Runner:
    """A worker's endpoint for a job's map-reduce passes: a Dask actor whose calls go straight
    from the coordinator to the worker and back, not as tasks through the scheduler.

    A pass is one call on each worker that owns blocks (:class:`distsvm.solvers.driver.Passes`).
    As a task, its arguments go coordinator → scheduler → worker, and the reply waits for the
    scheduler to hear that the task ended before the coordinator fetches it; a call is one round
    trip (on this machine's 2-worker LocalCluster with a 3.2 MB vector each way to both
    workers, tasks and calls interleaved: 17.8–18.6 ms a task pass, 11.6–11.8 ms a call,
    docs/benchmarks.md).  ``RUNNER_CALLS`` counts the calls on a worker by function name, for
    the tests that count a pass's work.

    A worker runs the calls it gets one at a time, on Dask's actor thread: a call shares its
    blocks among the worker's threads itself (:func:`distsvm.workers.blocks.each_block`). Calls
    in a pool of the worker's threads instead, so that problems side by side (one-vs-rest) would
    run side by side as their tasks did, were measured and not kept, the simpler code being as
    fast: letter ``-s 0`` one-vs-rest on 2 workers × 2 threads 2.85–3.29 s against 2.80–2.94 s
    (docs/benchmarks.md); Newton ``-s 2`` on pypi-summaries within the machine's noise. A worker
    that Dask has paused (its memory over the pause threshold) starts no call, as it starts no
    task: the call waits until the worker resumes, at most ``PAUSED_WAIT`` seconds (the
    coordinator gives up on a worker paused for ``distsvm.cluster.PAUSED_SECONDS``, less than
    this, and the call then ends without running instead of changing the state of a job that has
    ended).

    :meth:`together` runs a function on each of a group of workers at once, which add up
    their replies among themselves (:class:`AllReduce`) instead of through the coordinator.
    """

    def __init__(self):
        from distributed import get_worker

        self.worker = get_worker()
        # the members' messages go to the worker, not to a job's Runner, which Dask drops
        # when its client goes (a Ctrl-C) while the members finish their iteration
        self.mail = mailbox(self.worker.address)
        self.worker.handlers.setdefault(GROUP_OP, _group_handler(self.mail))

    def _unpaused(self, name: str) -> None:
        until = time.monotonic() + PAUSED_WAIT
        while self.worker.status == Status.paused:
            if time.monotonic() > until:
                raise RuntimeError(f"worker paused for {PAUSED_WAIT:.0f}s: {name} not run")
            time.sleep(0.05)
        RUNNER_CALLS[name] += 1

    def call(self, fn, *args, **kwargs):
        self._unpaused(fn.__name__)
        with BUSY:
            return fn(*args, **kwargs)

    async def together(self, group: str, rank: int, peers: list, fn, *args, **kwargs):
        """``fn(*args, reduce=…, **kwargs)`` as worker ``rank`` of ``peers`` (the workers'
        addresses), all of which run it at once (:meth:`Passes.together
        <distsvm.solvers.driver.Passes.together>`); ``reduce`` is their :class:`AllReduce`.

        It runs in a thread of its own, not on the actor thread that runs :meth:`call` one at
        a time: two groups (problems side by side, or jobs) that reached two workers in
        different orders would otherwise each wait there for the other.  It computes while
        holding ``BUSY``, as :meth:`call` does, and lets go while it waits for its peers.  If
        ``fn`` fails, the others' waits are ended (:meth:`abort`), as the coordinator also
        does."""
        reduce = AllReduce(self, group, rank, peers)
        self.mail.start(group)

        def run():
            self._unpaused(fn.__name__)
            try:
                with BUSY:
                    out = fn(*args, reduce=reduce, **kwargs)
                reduce.delivered()
                return out
            except BaseException:
                reduce.abort()
                raise
            finally:
                self.mail.forget(group)

        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="distsvm-group")
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, run)
        finally:
            pool.shutdown(wait=False)

    async def abort(self, group: str) -> None:
        """End the waits of group ``group`` here with an error (a member failed or left)."""
        self.mail.abort(group)


# The Dask worker handler of the members' messages (:func:`_group_handler`)
GROUP_OP = "distsvm_group"


def _group_handler(mail):
    """The worker handler of group members' messages to a worker whose mailbox is ``mail``."""

    async def group_message(kind: str, key=None, value=None) -> bool:
        """``put`` a part ``value`` of step ``key``, ``abort`` group ``key``, or ``ping``:
        whether group ``key`` has a member here (its call has come)."""
        if kind == "put":
            mail.put(key, value)
        elif kind == "abort":
            mail.abort(key)
        return kind != "ping" or key in mail.started

    return group_message


class Mailbox:
    """This worker's parts from its peers in groups, by ``(group, step, rank)``, the groups
    with a member here, and the groups aborted here (:func:`mailbox`)."""

    def __init__(self):
        self.parts: dict = {}
        self.started: set = set()
        self.aborted: set = set()
        self.cv = threading.Condition()

    def start(self, group: str) -> None:
        with self.cv:
            self.started.add(group)

    def put(self, key: tuple, value) -> None:
        with self.cv:
            if key[0] not in self.aborted:
                self.parts[key] = value
                self.cv.notify_all()

    def abort(self, group: str) -> None:
        with self.cv:
            self.aborted.add(group)
            self.forget(group)
            self.cv.notify_all()

    def forget(self, group: str) -> None:
        with self.cv:
            self.started.discard(group)
            for key in [k for k in self.parts if k[0] == group]:
                del self.parts[key]

    def wait(self, group: str, keys: list, seconds: float) -> bool:
        """Whether the parts ``keys`` are all here, after waiting at most ``seconds``;
        :class:`GroupAborted` if ``group`` is aborted."""
        with self.cv:
            self.cv.wait_for(lambda: group in self.aborted or all(k in self.parts for k in keys),
                             seconds)
            self.check(group)
            return all(k in self.parts for k in keys)

    def check(self, group: str) -> None:
        """:class:`GroupAborted` if ``group`` is aborted here."""
        with self.cv:
            if group in self.aborted:
                raise GroupAborted.of(group)

    def take(self, keys: list) -> list:
        with self.cv:
            return [self.parts.pop(k) for k in keys]


_MAILS: dict[str, Mailbox] = {}
_MAILS_LOCK = threading.Lock()


def mailbox(address: str) -> Mailbox:
    """The :class:`Mailbox` of the worker at ``address`` in this process (one per worker:
    an in-process cluster has several in one process)."""
    with _MAILS_LOCK:
        return _MAILS.setdefault(address, Mailbox())


class GroupAborted(RuntimeError):
    """A group's call ended because another member failed or left (:meth:`Runner.abort`)."""

    @classmethod
    def of(cls, group: str) -> GroupAborted:
        return cls(f"group {group} aborted: another worker of the pass failed or left")


# An AllReduce that waits this long for a peer's part asks whether the peer still answers
# and has a member of the group; one that does not twice in a row ends the wait
PING_SECONDS = 10.0


class AllReduce:
    """``reduce(part)``: the sum of the parts of every worker of a :meth:`Runner.together`
    group at this step, added in rank order on each of them, so that every member holds the
    same bits (:func:`distsvm.workers.blocks.add_replies`).
    Each member sends its part to each other member: K − 1 messages each, for the few
    workers (``distsvm.solvers.driver.TREE_MIN``) this is used for.

    A step does not wait for the peers' receipts of this member's parts: they are checked
    at its next step or at the end of the call (:meth:`delivered`).  The peers' parts of
    the step have come, so its own are there or on their way; waiting for the receipts took
    1–4 ms of a ~50 ms Newton pass on pypi-summaries (measured on the workers)."""

    def __init__(self, runner: Runner, group: str, rank: int, peers: list):
        self.worker, self.mail = runner.worker, runner.mail
        self.group, self.rank, self.peers = group, rank, peers
        self.step = 0
        self.sent: list = []  # the last step's messages, not yet known to be delivered

    def _send(self, address: str, kind: str, key=None, value=None) -> concurrent.futures.Future:
        """A message (:func:`_group_handler`) to the worker at ``address``, sent from this
        worker's event loop."""
        from distributed.protocol import to_serialize

        rpc = self.worker.rpc(address)

        async def send():
            return await getattr(rpc, GROUP_OP)(kind=kind, key=key, value=to_serialize(value))

        return asyncio.run_coroutine_threadsafe(send(), self.worker.loop.asyncio_loop)

    def __call__(self, part):
        self.step += 1
        others = [j for j in range(len(self.peers)) if j != self.rank]
        sent = [self._send(self.peers[j], "put", (self.group, self.step, self.rank), part)
                for j in others]
        keys = [(self.group, self.step, j) for j in others]
        mail = self.mail
        absent = collections.Counter()  # pings a peer answered without a member of the group
        BUSY.release()
        try:
            self.delivered()
            self.sent = sent
            while not mail.wait(self.group, keys, PING_SECONDS):
                for j, k in zip(others, keys):  # a peer silent this long: is it still there?
                    if k not in mail.parts:
                        try:
                            here = self._send(self.peers[j], "ping", self.group)
                            absent[j] = 0 if here.result(LEAVING_SECONDS) else absent[j] + 1
                        except Exception:
                            absent[j] = 2
                        if absent[j] >= 2:  # gone, or its call never came (its sender died)
                            raise GroupAborted.of(self.group)
            parts = dict(zip(others, mail.take(keys)))
        finally:
            BUSY.acquire()
        from distsvm.workers.blocks import add_replies  # (workers only: it loads kernels)

        parts[self.rank] = part  # (a part may be another's too: an in-process cluster's)
        return functools.reduce(add_replies, (parts[j] for j in range(len(self.peers))))

    def delivered(self) -> None:
        """Wait until the last step's parts have reached the peers; the error of one that
        did not (the peer left: the others are told by the coordinator), or
        :class:`GroupAborted`."""
        for f in self.sent:
            while True:
                self.mail.check(self.group)
                try:
                    f.result(POLL_SECONDS)
                    break
                except TimeoutError:
                    continue
        self.sent = []

    def abort(self) -> None:
        """Tell the other members to stop waiting for this one."""
        for address in self.peers:
            if address != self.worker.address:
                self._send(address, "abort", self.group)


def runner_calls() -> dict:
    """``RUNNER_CALLS`` of this worker (for ``client.run``)."""
    return dict(RUNNER_CALLS)


class Call:
    """A call of ``fn(*args, **kwargs)`` on worker ``worker``'s
    :class:`Runner` (``runner``, a Dask actor): sent straight to the
    worker, not a task through the scheduler.  It has a future's ``result(timeout)``; it
    cannot be cancelled (:func:`settle` waits for it instead)."""

    def __init__(self, runner, worker: str, method: str, *args, **kwargs):
        self.worker = worker
        try:
            self.future = getattr(runner, method)(*args, **kwargs)
        except RuntimeError:  # Dask: "Worker holding Actor was lost"
            self.future = None

    def result(self, timeout=None):
        """The call's result; :class:`Unreachable` if its worker could not be reached."""
        if self.future is None:
            raise Unreachable(self.worker)
        try:
            return self.future.result(timeout=timeout)
        except OSError as e:  # Dask's words for a call that found no worker, not fn's errors
            if str(e) == "Unable to contact Actor's worker":
                raise Unreachable(self.worker) from None
            raise

    def finish(self, client: Client) -> None:
        """Wait until the call has ended or its worker has left the cluster; its result
        (or error) is dropped.  Unlike :func:`gather`, a paused worker is waited for: its
        call ends when it resumes, or when the Runner gives up (``PAUSED_WAIT``)."""
        while True:
            try:
                self.result(timeout=POLL_SECONDS)
                return
            except TimeoutError:
                if self.worker not in alive(client):
                    return
            except Exception:
                return


class Unreachable(Exception):
    """A :class:`Call`'s worker did not answer."""


class Runners:
    """A job's :class:`Runner` on each worker it calls, made at the
    first call there (a Dask actor, gone with this object)."""

    def __init__(self, client: Client):
        self.client = client
        self.handles: dict = {}

    def call(self, worker: str, fn, *args, **kwargs) -> Call:
        """``fn(*args, **kwargs)`` on ``worker`` as a :class:`Call`; :class:`WorkerLost` if
        the worker leaves before its Runner is made."""
        return Call(self.handle(worker), worker, "call", fn, *args, **kwargs)

    def together(self, workers: list, fn, args: list[tuple], kwargs: list[dict]) -> list[Call]:
        """``fn(*args[j], reduce=…, **kwargs[j])`` on each worker ``workers[j]`` at once, as a
        group whose members add up their replies among themselves (:meth:`Runner.together`);
        their :class:`Call`s in order.  :meth:`abort` ends them if one fails or leaves."""
        self.make(workers)
        group = f"group-{uuid.uuid4().hex}"
        calls = [Call(self.handles[a], a, "together", group, j, list(workers), fn, *args[j],
                      **kwargs[j]) for j, a in enumerate(workers)]
        for call in calls:
            call.group = group
        return calls

    def abort(self, calls: list[Call]) -> None:
        """End the waits of the group of ``calls`` (:meth:`together`) on their workers."""
        for call in calls:
            if call.future is not None and call.worker in self.handles:
                with contextlib.suppress(Exception):
                    self.handles[call.worker].abort(call.group)

    def handle(self, worker: str):
        """The job's Runner on ``worker``, made on first use."""
        self.make([worker])
        return self.handles[worker]

    def make(self, workers: list) -> None:
        """Make the Runners of ``workers`` that are not made yet, side by side (a pass's
        first calls then leave together)."""
        new = [a for a in workers if a not in self.handles]
        futures = [self.client.submit(Runner, actor=True, workers=[a], pure=False) for a in new]
        for a, future, handle in zip(new, futures, gather(self.client, futures, new)):
            # Dask binds a handle to the process's default client, which need not be ours
            # (whose scheduler knows the worker): calls through another never return
            handle._client, handle._future = self.client, future
            self.handles[a] = handle

    def keep(self, workers) -> None:
        """Drop the Runners of workers not in ``workers`` (gone from the job's plan)."""
        self.handles = {a: h for a, h in self.handles.items() if a in set(workers)}


def gather(client: Client, futures: list, workers) -> list:
    """The results of ``futures``, tasks pinned to ``workers``; raises :class:`WorkerLost`
    (a ClusterError) if one of those workers leaves the cluster before every result has
    arrived.

    Each result is fetched with a timeout: a finished task whose worker then dies goes back
    to waiting for that worker, so neither ``wait`` nor a plain ``gather`` may be trusted to
    return.  A worker that Dask has paused (its memory over the pause threshold, 80% of its
    limit) runs no task (nor :class:`Call`, :class:`Runner`), and holding
    its blocks' state it does not recover by itself: after ``PAUSED_SECONDS`` of that the
    job fails with a ClusterError instead of waiting forever.
    """
    results = []
    for f in futures:
        result, gone = _result(client, f, workers)
        if gone:
            client.cancel([f for f in futures if not isinstance(f, Call)])
            raise WorkerLost(gone)
        results.append(result)
    return results


def gather_each(client: Client, futures: list, workers: list) -> tuple[list, list[str]]:
    """The results of ``futures``, each pinned to one of ``workers`` (in order), as far as
    they arrive: (results, None for a task whose worker left first; the workers that left)."""
    results, gone = [], []
    for f, a in zip(futures, workers):
        if a in gone:
            results.append(None)
            continue
        result, left = _result(client, f, [a])
        results.append(None if left else result)
        gone += left
    return results, gone


def _result(client: Client, f, workers) -> tuple[object, list[str]]:
    """(f's result, []) or (None, the workers among ``workers`` that left before it came);
    see :func:`gather`."""
    paused_since: dict[str, float] = {}
    while True:
        try:
            return f.result(timeout=POLL_SECONDS), []
        except Unreachable:
            return None, [_leaving(client, f.worker)]
        except TimeoutError:
            info = workers_info(client)
            gone = sorted(set(workers) - set(info))
            if gone:
                return None, gone
            now = time.monotonic()
            for a in workers:
                if info[a].get("status") == "paused":
                    paused_since.setdefault(a, now)
                else:
                    paused_since.pop(a, None)
            stuck = sorted(a for a, t in paused_since.items() if now - t >= PAUSED_SECONDS)
            if stuck:
                client.cancel(f)
                raise ClusterError(
                    f"worker {', '.join(stuck)} has been paused by Dask for "
                    f"{PAUSED_SECONDS:.0f}s: its memory is over the pause threshold of its "
                    "memory_limit with the job's blocks and solver state; give the workers "
                    "more memory, add workers, or use smaller blocks") from None


def _running(keys: set, dask_worker=None) -> bool:
    """On a worker: whether one of ``keys`` is running in a thread (a cancelled task runs
    on to its end: Dask cannot interrupt it)."""
    return any(ts.key in keys for ts in dask_worker.state.all_running_tasks)


def _leaving(client: Client, worker: str) -> str:
    """``worker``, which did not answer a :class:`Call`, once the scheduler too has seen it
    leave (it may hear of it later than the caller); ClusterError if it stays."""
    deadline = time.monotonic() + LEAVING_SECONDS
    while worker in alive(client):
        if time.monotonic() > deadline:
            raise ClusterError(f"worker {worker} does not answer, yet the Dask scheduler "
                               f"still lists it after {LEAVING_SECONDS:.0f}s") from None
        time.sleep(0.1)
    return worker


def settle(client: Client, futures: list, workers) -> None:
    """Cancel ``futures`` and wait until none of them runs on any of ``workers`` still
    alive, so that the state their tasks change is at rest (a :class:`Call`: until it has
    ended or its worker has left)."""
    for call in [f for f in futures if isinstance(f, Call)]:
        call.finish(client)
    futures = [f for f in futures if not isinstance(f, Call)]
    client.cancel(futures)
    keys = {f.key for f in futures}
    while keys:
        live = sorted(set(workers) & alive(client))
        try:
            if not any(client.run(_running, keys, workers=live).values()):
                return
        except Exception:
            if not set(live) - alive(client):
                raise
            continue  # a worker left while we asked: ask the others
        time.sleep(0.05)


def replan(plan: WorkerPlan, gone) -> WorkerPlan:
    """``plan`` without the workers ``gone``: each keeps its blocks, and the blocks of the
    departed ones go round-robin (in block order) to the others; ClusterError if none is left."""
    left = [a for a in plan.workers if a not in set(gone)]
    if not left:
        raise ClusterError(f"every worker of the job left the Dask cluster "
                           f"(last: {', '.join(sorted(gone))}); nothing is left to train on")
    owners = list(plan.owners)
    lost = [b for b, a in enumerate(owners) if a not in left]
    for k, b in enumerate(lost):
        owners[b] = left[k % len(left)]
    return assign(dataclasses.replace(plan, cache_bytes={a: plan.cache_bytes[a] for a in left}),
                  owners)
