"""What a worker process keeps between tasks: a byte-bounded block cache and per-run solver state.

Nothing here talks to Dask: the coordinator decides which worker runs which
block and passes the cache budget in; these are plain process-level tables.
Blocks not in the cache are re-read from the store, so a worker's memory is
bounded by its cache budget plus two blocks, whatever the dataset's size: the
one being solved and, with :func:`stream`, the next one being read and
decompressed by a background thread meanwhile (prefetch; the kernels and the
codecs release the GIL, and a local store's chunks are decoded on that thread itself,
:func:`distsvm.storage.dataset._local_chunk`, so reading overlaps computing: measured
beyond memory, the solver waits for 2-9% of a round — issue 31, docs/benchmarks.md).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import ctypes
import os
import threading

import numpy as np

from distsvm.storage import BlockInfo, RowBlock, read_row_block
from distsvm.storage import checkpoint as files
from distsvm.storage.dataset import Buffers, join_parts

from .kernels.linear import decision_values, row_sqnorms

_lock = threading.Lock()
_cache: collections.OrderedDict = collections.OrderedDict()  # key -> (entry, nbytes)
_cache_bytes = 0
_runs: dict[str, dict] = {}  # run id -> {block name: solver state}
_reads: collections.Counter = collections.Counter()  # (url, block name) -> reads from the store
_bytes_read = 0  # bytes of blocks read from the store since the last take_bytes_read()
PREFETCH = True  # benchmarks measure without it: client.run(set_prefetch, False)


def load(url: str, info: BlockInfo, cache_bytes: int, storage_options: dict | None = None,
         buffers: Buffers | None = None, keep=frozenset(), norms: bool = True):
    """Return ``(block, sqnorm)`` for a row block, from the cache or the store.

    The block is kept if it fits in ``cache_bytes``; least recently used blocks (but those
    in ``keep``) are evicted to make room.  A joined block (:func:`storage.joined_block`,
    e.g. a cross-validation fold's rows of a block) is made from its parts loaded the same
    way, so the folds that take rows of one stored block read it from the store once.
    ``buffers`` and ``keep`` (:func:`stream`'s): where a block read makes its arrays, and the
    cache entries not evicted to keep it (:func:`cached`).  ``norms=False``: a caller that
    does not use ‖xᵢ‖² (sqnorm) gets None for it from a read that no cache of ``cache_bytes``
    could keep (a Newton pass beyond memory: 8 ms a pypi-summaries block, a quarter of its
    read); a block the cache may keep has them, for the callers after it.
    """
    def read():
        global _bytes_read
        if info.parts:
            loaded = [load(url, part, cache_bytes, storage_options, buffers, keep, norms)
                      for part, _ in info.parts]
            block = join_parts([b for b, _ in loaded], info.parts)
            sqnorm = None if any(s is None for _, s in loaded) else np.concatenate(
                [s if rows is None else s[rows] for (_, s), (_, rows) in zip(loaded, info.parts)])
            return (block, sqnorm), block.nbytes + block.n_rows * 8
        block = read_row_block(url, info, storage_options, recheck=False,  # streamed: re-read
                               buffers=buffers)
        with _lock:
            _reads[url, info.name] += 1
            _bytes_read += block.nbytes
        size = block.nbytes + block.n_rows * 8
        if not norms and size > cache_bytes:
            return (block, None), size
        sqnorm = (np.empty if buffers is None else buffers.empty)(block.n_rows, np.float64)
        row_sqnorms(block.indptr, block.data, sqnorm)
        return (block, sqnorm), size

    def kept(entry):  # the cache's now, not the stream's to reuse
        block, sqnorm = entry
        buffers.disown(block.indptr, block.indices, block.data, block.y, block.weight,
                       block.target, sqnorm)

    return cached(_key(url, info), read, cache_bytes, keep, None if buffers is None else kept)


def _key(url: str, info: BlockInfo) -> tuple:
    """A block's cache key: keyed by content too, so that a store overwritten at the same URL
    is never served stale."""
    return url, info.name, tuple(sorted(info.crc32.items())), info.labels  # labels: as targets


def _in_cache(url: str, infos: list[BlockInfo]) -> bool:
    """Whether every block of ``infos`` is in this process's cache now."""
    with _lock:
        return all(_key(url, info) in _cache for info in infos)


# glibc's malloc while a Newton iteration runs on a worker (:func:`vectors_from_heap`)
HEAP_BYTES = 32 << 20  # glibc's own largest dynamic mmap threshold (64-bit)
MMAP_THRESHOLD, TRIM_THRESHOLD = -3, -1  # mallopt's M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
_heap_lock = threading.Lock()
_heap_users = 0  # the calls inside vectors_from_heap now


def _nanny_glibc():
    """glibc, in a process whose malloc Dask's nanny set (:func:`vectors_from_heap`); else
    None."""
    if (not os.environ.get("MALLOC_TRIM_THRESHOLD_", "").isdigit()
            or "MALLOC_MMAP_THRESHOLD_" in os.environ):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None


@contextlib.contextmanager
def vectors_from_heap():
    """While it lasts, glibc's malloc takes allocations below ``HEAP_BYTES`` from its heap, if
    this process is one Dask's nanny started.

    The nanny sets ``MALLOC_TRIM_THRESHOLD_`` (64 KiB, to give memory back to the system),
    which turns glibc's dynamic mmap threshold off: every allocation of 128 KiB or more is a
    fresh mapping, whose pages fault in one by one, and is unmapped when freed. A Newton
    iteration allocates tens of vectors of n_features (3.2 MB on pypi-summaries): measured
    on a 2 × 780 MB cluster's `-s 0`, 277 k page faults a job on each worker, costing ~1.4
    µs each (the time saved over the faults saved; docs/benchmarks.md). The heap holds no
    block: cached blocks are read once, streamed ones into memory of their own
    (:class:`~distsvm.storage.dataset.Buffers`: a streamed block's arrays on the heap raised
    the peak of a 2 × 512 MB `-s 2` job from 330 to 388 MiB, its own mappings to 337–342), so
    it holds vectors, and is reused, not fragmented. At the end the nanny's thresholds come back and
    the heap's free pages go back to the system (``malloc_trim``), and those of the vectors
    a run keeps when it ends (:func:`drop_run`). A process without that variable, or whose
    user set ``MALLOC_MMAP_THRESHOLD_``, or not on glibc, is left as it is."""
    global _heap_users
    libc = _nanny_glibc()
    if libc is None:
        yield
        return
    with _heap_lock:
        _heap_users += 1
        if _heap_users == 1:
            libc.mallopt(MMAP_THRESHOLD, HEAP_BYTES)
            libc.mallopt(TRIM_THRESHOLD, HEAP_BYTES)
    try:
        yield
    finally:
        with _heap_lock:
            _heap_users -= 1
            if _heap_users == 0:  # glibc's default threshold, which the variable fixed
                libc.mallopt(MMAP_THRESHOLD, 128 << 10)
                libc.mallopt(TRIM_THRESHOLD, int(os.environ["MALLOC_TRIM_THRESHOLD_"]))
                libc.malloc_trim(0)


_shared = threading.local()  # .buffers: the Buffers of this thread's streams (repeating)


@contextlib.contextmanager
def repeating():
    """While it lasts, this thread's passes over a worker's blocks repeat (a Newton
    iteration's: a pass a CG step).  Its streams (:func:`stream`) decode their blocks into
    one :class:`~distsvm.storage.dataset.Buffers`, not one each, so each pass's arrays are
    the memory of the last pass's, not fresh pages (in a Dask worker every fresh array is a
    new mapping, faulted in page by page); and a pass over blocks not all cached
    (:func:`each_block`) starts reading the next pass's first block after its last visit,
    while the pass's sums travel and the iteration's algebra runs (not during its kernels:
    on 2 vCPUs a read beside both workers' kernels made trainings slower).  Between passes
    the iteration holds what a pass holds while it runs."""
    outer = getattr(_shared, "buffers", None)
    _shared.buffers = outer or Buffers()
    try:
        yield
    finally:
        _shared.buffers = outer


def stream(url: str, infos: list[BlockInfo], cache_bytes: int,
           storage_options: dict | None = None, then: BlockInfo | None = None,
           norms: bool = True):
    """Yield :func:`load`'s ``(block, sqnorm)`` for ``infos`` in order, with prefetch: while
    the caller works on one block, a background thread loads the next (from the cache, or
    read and decompressed from the store), so at most one block is in flight beyond the
    current one.  Blocks all in the cache are yielded without a thread: nothing to overlap.
    The cache keeps the blocks it holds and takes others only where it has room
    (:func:`cached`'s ``keep``); a block it does not take is decoded into the memory of one
    the caller let go of (:class:`~distsvm.storage.dataset.Buffers`: a caller that keeps
    its blocks gets them all, each in memory of its own).

    ``then``: the block the caller expects to stream first next (dual CD: its next round's,
    in this task or the next one on this worker).  It is read while the caller works on this
    stream's last block and handed to the next stream of this process that starts with it
    (on any thread); this thread's next stream drops it if it starts with another block.  So
    the solver does not wait for the first block of each round (pypi-summaries, 2 blocks, on
    2 × 512 MB workers: 0.89× the train time, docs/benchmarks.md).  ``norms``: :func:`load`'s."""
    handed = _handed(url, infos[0] if infos else None, norms)
    if not PREFETCH or (handed is None and _in_cache(url, infos)):
        yield from (load(url, info, cache_bytes, storage_options, norms=norms) for info in infos)
        return
    buffers = getattr(_shared, "buffers", None) or Buffers()
    keep = frozenset(_key(url, info) for info in infos)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="distsvm-prefetch") as pool:
        ahead = handed or pool.submit(load, url, infos[0], cache_bytes, storage_options,
                                      buffers, keep, norms)
        handed = None  # else its block stays referenced for the whole stream
        for k in range(len(infos)):
            current = ahead.result()
            if k + 1 < len(infos):
                ahead = pool.submit(load, url, infos[k + 1], cache_bytes, storage_options,
                                    buffers, keep, norms)
            else:
                buffers = None  # what no block uses is let go before the caller's last visit
                if then is not None and not _in_cache(url, [then]):
                    _hand(url, then, cache_bytes, storage_options, keep)
            yield current
            del current  # the caller's reference is the only one while the next is read


_handoff: dict = {}  # (_key, norms) of a block handed on -> (the future reading it, the thread)
_handoff_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _hand(url: str, info: BlockInfo, cache_bytes: int, storage_options, keep,
          buffers: Buffers | None = None, norms: bool = True) -> None:
    """Start reading ``info`` for the next :func:`stream` (on a thread of its own, so that
    the stream that asked ends without waiting for it), in place of what this thread handed
    on before: one block a thread (one-vs-rest runs streams on several threads side by side).
    ``keep``: the cache entries not evicted for it (the stream's, :func:`cached`);
    ``buffers``, ``norms``: :func:`load`'s."""
    global _handoff_pool
    me = threading.get_ident()
    with _lock:
        if _handoff_pool is None:
            _handoff_pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="distsvm-handoff")
        _drop_handed(me)
        read = _handoff_pool.submit(load, url, info, cache_bytes, storage_options, buffers, keep,
                                    norms)
        _handoff[_key(url, info), norms] = (read, me)


def _handed(url: str, info: BlockInfo | None, norms: bool = True):
    """The read of ``info`` a stream handed on (:func:`_hand`, on any thread) with the norms
    a stream with ``norms`` takes (a block read without its ‖xᵢ‖² is none for dual CD), or
    None; what this thread handed on is dropped either way (its next stream did not start
    with it)."""
    me = threading.get_ident()
    with _lock:
        got = None
        if info is not None:
            got = _handoff.pop((_key(url, info), True), None)  # with norms: for any stream
            if got is None and not norms:
                got = _handoff.pop((_key(url, info), False), None)
        _drop_handed(me)
    return got[0] if got else None


def _drop_handed(thread: int) -> None:
    """Forget what ``thread`` handed on (the caller holds ``_lock``)."""
    for key in [k for k, (_, who) in _handoff.items() if who == thread]:
        del _handoff[key]


def each_block(url: str, infos: list[BlockInfo], cache_bytes: int,
               storage_options: dict | None, threads: int, visit, make) -> dict:
    """``visit(info, block, acc, rows)`` for every block of ``infos``, streamed with
    prefetch (:func:`stream`, without ‖xᵢ‖²: no pass of this kind takes them), each block
    cut into ``threads`` pieces of rows (``rows``, a slice; :func:`pieces`) computed side by
    side on the task's worker's threads — so that every thread works whatever the number of
    blocks — piece j adding into accumulator j (``make()``, a dict of numbers and arrays);
    returns their sum, key by key, in piece order (the same sums in every run).  Blocks all
    in the cache: each thread takes its piece of every block without waiting for the others;
    else the threads take their pieces of each block as it arrives.  The kernels release the
    GIL; a visit reads the piece's rows through :func:`rows_of`.  Memory: the block being
    computed and the next one being read, beyond the cache."""
    n = max(1, threads)
    accs = [make() for _ in range(n)]

    def piece(j, info, block):
        cuts = pieces(block.indptr, n)
        visit(info, block, accs[j], slice(cuts[j], cuts[j + 1]))

    def share(j):  # piece j of every block, the blocks from the cache: no thread waits
        for info in infos:
            piece(j, info, load(url, info, cache_bytes, storage_options)[0])

    if n == 1:
        for info, (block, _) in zip(infos, stream(url, infos, cache_bytes, storage_options,
                                                  norms=False)):
            piece(0, info, block)
            del block
    elif _in_cache(url, infos):
        with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="distsvm-blocks") as pool:
            list(pool.map(share, range(n)))
    else:  # streamed: the threads take their pieces of each block as it arrives
        with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="distsvm-blocks") as pool:
            for info, (block, _) in zip(infos, stream(url, infos, cache_bytes, storage_options,
                                                      norms=False)):
                list(pool.map(lambda j: piece(j, info, block), range(n)))
                del block
    shared = getattr(_shared, "buffers", None)
    if shared is not None and PREFETCH and not _in_cache(url, infos):  # the next pass's
        _hand(url, infos[0], cache_bytes, storage_options,
              frozenset(_key(url, info) for info in infos), shared, False)
    total, *others = accs
    for part in others:
        for k in total:
            total[k] += part[k]
    return total


def add_replies(a, b):
    """The sum of two replies of a pass (numbers, arrays, or dicts of them key by key): a
    node of a reduction tree (:meth:`distsvm.solvers.driver.Passes.total`) or a step of an
    all-reduce (:class:`distsvm.cluster.AllReduce`)."""
    return {k: a[k] + b[k] for k in a} if isinstance(a, dict) else a + b


def pieces(indptr: np.ndarray, n: int) -> list[int]:
    """Row bounds of ``n`` consecutive pieces of a CSR block with about the same number of
    non-zeros each (a piece may be empty)."""
    nnz = int(indptr[-1])
    return [0, *(int(np.searchsorted(indptr, nnz * j // n)) for j in range(1, n)),
            len(indptr) - 1]


def rows_of(block: RowBlock, rows: slice) -> RowBlock:
    """The rows ``rows`` of ``block`` as views: the row pointers sliced, not rebased (the
    kernels index the block's whole entry arrays with them)."""
    def cut(a):
        return None if a is None else a[rows]

    return RowBlock(block.indptr[rows.start:rows.stop + 1], block.indices, block.data,
                    block.y[rows], cut(block.weight), cut(block.target))


def cached(key, read, cache_bytes: int, keep=frozenset(), kept=None):
    """The cache entry ``key``, or ``read()``'s ``(entry, nbytes)``, kept if it fits: room is
    made by evicting the least recently used entries but those in ``keep`` (a stream's
    blocks: a stream larger than the cache keeps the blocks it cached first, where LRU would
    evict each block before its next visit).  ``kept(entry)`` is called when it is kept.
    The cache never holds more than ``cache_bytes`` after the call: what an earlier job's
    plan let it keep beyond that goes (the others' entries first, then ``keep``'s, ``key``
    too), not held beside this job's blocks in flight."""
    global _cache_bytes
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
        _evict(_cache_bytes - cache_bytes, keep, whole=False)
        if hit is not None:
            return hit[0]
    entry, size = read()
    with _lock:
        if size <= cache_bytes and key not in _cache and _evict(
                _cache_bytes + size - cache_bytes, keep):
            _cache[key] = (entry, size)
            _cache_bytes += size
            if kept is not None:
                kept(entry)
    return entry


def _evict(over: int, keep, whole: bool = True) -> bool:
    """Evict the least recently used entries not in ``keep`` until ``over`` bytes are gone
    (the caller holds ``_lock``); whether they could be.  With ``whole``, none is evicted
    where they could not; without, ``keep``'s entries go next where the others are not
    enough."""
    global _cache_bytes
    victims = []
    for kept in (False,) if whole else (False, True):  # others' entries, then keep's
        for k, (_, size) in _cache.items():  # least recently used first
            if over <= 0:
                break
            if (k in keep) == kept:
                victims.append(k)
                over -= size
    if over > 0 and whole:
        return False
    for k in victims:
        _cache_bytes -= _cache.pop(k)[1]
    return over <= 0


def cached_bytes() -> int:
    """Bytes of block data this process holds in its cache."""
    return _cache_bytes


def set_prefetch(on: bool) -> None:
    """Turn :func:`stream`'s prefetch on or off in this process (benchmarks)."""
    global PREFETCH
    PREFETCH = bool(on)


def read_counts() -> dict:
    """How many times this process has read each block from the store: {(url, name): n}."""
    with _lock:
        return dict(_reads)


def take_bytes_read() -> int:
    """Bytes of blocks (decoded) this process has read from the store since the last call
    (or since :func:`begin_reads`); a solver's per-round report takes it, so the round's
    log shows what was read."""
    global _bytes_read
    with _lock:
        n, _bytes_read = _bytes_read, 0
    return n


def begin_reads(*runs: str) -> None:
    """At the start of a task of ``runs`` that reports its reads (:func:`take_bytes_read`):
    if none of them has state in this process yet, what was read before is not theirs — an
    earlier job's, or a solver's that does not take its reads (Newton): forgotten.  (Two
    such jobs on one worker at once share one count.)"""
    global _bytes_read
    with _lock:
        if not any(run in _runs for run in runs):
            _bytes_read = 0


def run_state(run: str, name: str, make):
    """The state of block ``name`` in run ``run``, created by ``make()`` on first use."""
    with _lock:
        blocks = _runs.setdefault(run, {})
        if name not in blocks:
            blocks[name] = make()
        return blocks[name]


def drop_run(*runs: str) -> int:
    """Forget the state of ``runs``, and any block read ahead for them (:func:`stream`'s
    ``then``); return how many blocks they held."""
    with _lock:
        _handoff.clear()
        held = sum(len(_runs.pop(run, {})) for run in runs)
    libc = _nanny_glibc()
    if libc is not None:  # the heap's pages of the run's kept vectors (vectors_from_heap)
        libc.malloc_trim(0)
    return held


def write_states(run: str, infos: list[BlockInfo], directory: str, arrays,
                 storage_options: dict | None = None, prefix: str = "") -> dict[str, str]:
    """Checkpoint: write ``arrays(state, info)`` (the arrays of block ``info``'s state in run
    ``run``) into ``directory``, one ``<prefix>block-<name>.npz`` per block, each whole or not
    at all; return {file name: SHA-256} for the checkpoint's manifest.  ``prefix`` tells
    apart the runs of one checkpoint (the problems of a one-vs-rest job)."""
    out = {}
    for info in infos:
        name = f"{prefix}block-{info.name}.npz"
        out[name] = files.write_arrays(files.join(directory, name),
                                       arrays(run_state(run, info.name, dict), info),
                                       storage_options)
    return out


def read_states(run: str, infos: list[BlockInfo], directory: str, digests: dict[str, str],
                storage_options: dict | None = None, prefix: str = ""):
    """Resume: for each block of ``infos``, its state in run ``run`` emptied and the arrays
    :func:`write_states` wrote for it with ``prefix`` (checked against ``digests``): yields
    (state, arrays) for the solver to fill the one from the other."""
    for info in infos:
        name = f"{prefix}block-{info.name}.npz"
        a = files.read_arrays(files.join(directory, name), digests[name], storage_options)
        s = run_state(run, info.name, dict)
        s.clear()
        yield s, a


def clear_cache() -> None:
    """Empty the block cache (tests and benchmarks that measure cold reads)."""
    global _cache_bytes
    with _lock:
        _cache.clear()
        _handoff.clear()
        _cache_bytes = 0


def column_rows(url: str, cmeta, row_infos: list[BlockInfo] | None,
                storage_options: dict | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The class index yⱼ and the instance weight of every row of a column view (primal CD,
    L1), in the view's row order: the labels from the view, the weights (a weighted store)
    from the row blocks ``row_infos``, all of them in order; None: unweighted."""
    from distsvm.storage.columns import read_labels

    y = read_labels(url, cmeta, storage_options)
    weight = None if row_infos is None else np.concatenate(
        [read_row_block(url, info, storage_options).weight for info in row_infos])
    return y, weight


def block_decisions(url: str, info: BlockInfo, w: np.ndarray, bias: float, n_features: int,
                    cache_bytes: int, storage_options: dict | None = None):
    """Decision values wᵀxᵢ of one block and its class indices: (float64 array, int32 array)
    — a regression block's targets (float64) instead of its class indices.
    With one weight vector per class (``w`` of shape (K, n [+1])), the values are (n_rows, K)."""
    block, _ = load(url, info, cache_bytes, storage_options)
    W = np.atleast_2d(w)
    out = np.empty((len(W), block.n_rows))
    for k in range(len(W)):
        decision_values(block.indptr, block.indices, block.data, W[k], bias, n_features, out[k])
    return (out[0] if w.ndim == 1 else out.T), (block.y if block.target is None else block.target)


def block_stats(url: str, info: BlockInfo, n_classes: int, groups: np.ndarray, n_groups: int,
                cache_bytes: int, storage_options: dict | None = None):
    """Per group of rows of one block (``groups``: each row's group, e.g. its fold, in
    ``[0, n_groups)``), the class counts (int64, (n_groups, n_classes)) and the non-zeros
    (int64, (n_groups,)), and the block's largest ‖xᵢ‖² (model selection: the folds' views
    and LIBLINEAR's start C); the block stays cached for training."""
    block, sqnorm = load(url, info, cache_bytes, storage_options)
    groups = np.asarray(groups, dtype=np.int64)
    counts = np.bincount(groups * n_classes + block.y, minlength=n_groups * n_classes)
    nnz = np.bincount(groups, weights=np.diff(block.indptr), minlength=n_groups)
    return (counts.reshape(n_groups, n_classes), nnz.astype(np.int64),
            float(sqnorm.max(initial=0.0)))


__all__ = ["RowBlock", "add_replies", "load", "stream", "cached", "cached_bytes", "read_counts",
           "set_prefetch", "take_bytes_read", "begin_reads", "run_state", "column_rows", "drop_run",
           "clear_cache", "block_decisions", "block_stats"]
