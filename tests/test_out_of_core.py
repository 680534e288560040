"""Out of core: a store 8× the worker's memory limit trains in bounded memory, streamed with
prefetch; blocks whose rows are all shrunk are not read again."""

from __future__ import annotations

import gc
import os
import shutil
import threading
import time
import weakref

import numpy as np
import psutil
import pytest
import scipy.sparse as sp

import distsvm.workers.blocks
from distsvm.cluster import WorkerPlan, workers_info
from distsvm.generate import generate
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.params import Params
from distsvm.solvers import dcd

from .conftest import liblinear_optimum, primal_objective

MEMORY_LIMIT = 512 * 2**20  # above the ~190 MiB of a worker with the libraries, plus JIT compiling


class PeakRSS:
    """Samples the resident memory of some processes every 50 ms; keeps the peak."""

    def __init__(self, pids):
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, max(p.memory_info().rss for p in self.procs))
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _reads(client, url: str) -> dict[str, int]:
    """Store reads of each block of ``url`` on all workers so far."""
    out: dict[str, int] = {}
    for counts in client.run(distsvm.workers.blocks.read_counts).values():
        for (u, name), n in counts.items():
            if u == url:
                out[name] = out.get(name, 0) + n
    return out


@pytest.mark.slow
def test_store_8x_memory_trains_in_bounded_memory(client, tmp_path):
    """The issue's memory test: ≥ 8× the worker's memory_limit of blocks, generated on the
    session cluster, trained to a loose certified gap by one 512 MiB worker (parallel mode
    with K = 1: one read of each block per round), never restarted, peak RSS < 0.8·limit."""
    from distributed import Client, LocalCluster

    path = tmp_path / "big.zarr"
    try:
        store = generate(str(path), rows=2_700_000, features=200_000, nnz_per_row=200, seed=3,
                         block_mb=8, client=client)
        data_bytes = sum(b.nnz * 8 + b.n_rows * 12 for b in store.meta.blocks)
        assert data_bytes >= 8 * MEMORY_LIMIT
        with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0", memory_limit=MEMORY_LIMIT) as cluster, \
                Client(cluster) as c:
            pids = list(c.run(os.getpid).values())
            cpu = sum(psutil.Process(p).cpu_times().user for p in pids)
            with PeakRSS(pids) as rss:
                model = train(store, loss="hinge", C=0.1, gap_tol=0.02, max_rounds=6,
                              parallel="average", client=c)
            assert list(c.run(os.getpid).values()) == pids  # never restarted by its nanny
            cpu = sum(psutil.Process(p).cpu_times().user for p in pids) - cpu
            cached = sum(c.run(distsvm.workers.blocks.cached_bytes).values())
            reads = _reads(c, store.url)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    s = model.summary
    print(f"\nout-of-core: {data_bytes / 2**30:.2f} GiB of blocks, worker limit "
          f"{MEMORY_LIMIT / 2**20:.0f} MiB, peak RSS {rss.peak / 2**20:.0f} MiB, "
          f"{s['rounds']} rounds in {s['train_seconds']:.1f}s ({cpu:.1f}s user CPU on the "
          "worker's main thread and prefetch thread)")
    assert s["converged"] and s["duality_gap"] <= 0.02 * s["primal_objective"]
    assert cached < data_bytes / 8  # the blocks stream from the store...
    # one read of each block per round (block 0 once more: cluster.plan's warm-up), except
    # that a block still in the worker's small cache when the next round starts with it is
    # not read again: at most a few such hits a round
    first = store.meta.blocks[0].name
    n_blocks = len(store.meta.blocks)
    assert all(reads[b.name] <= s["rounds"] + (b.name == first) for b in store.meta.blocks)
    assert sum(reads.values()) >= 0.95 * s["rounds"] * n_blocks
    # each round's log shows the bytes it read: every block about once (round 1: and the
    # warm-up's)
    block_bytes = [b.nnz * 8 + b.n_rows * 12 + 8 for b in store.meta.blocks]  # CSR + labels
    per_round = [h["bytes_read"] for h in s["history"]]
    assert per_round[0] <= sum(block_bytes) + block_bytes[0]
    assert all(0.95 * sum(block_bytes) <= b <= sum(block_bytes) for b in per_round[1:])
    assert rss.peak < 0.8 * MEMORY_LIMIT, f"peak RSS {rss.peak / 2**20:.0f} MiB"


def test_fully_shrunk_block_is_not_read(client, a9a, tmp_path):
    """Sequential block DCD, nothing cached: a block of rows far outside the margin shrinks
    entirely (16), after which it is not read again until (17) reactivates every row; the
    optimum is LIBLINEAR's (those rows have α = 0 there, so they do not change it)."""
    X, y = a9a
    X, y = X[:2100], y[:2100]
    w_ref, _ = liblinear_optimum(X, y, "hinge", C=0.03)
    margin = np.where(y == 1, 1.0, -1.0) * (X @ w_ref)
    easy = np.flatnonzero(margin > 1.5)[:700]
    assert len(easy) == 700
    X2, y2 = sp.vstack([X, X[easy]]).tocsr(), np.concatenate([y, y[easy]])
    _, p_ref = liblinear_optimum(X2, y2, "hinge", C=0.03)
    store = ingest((X2, y2), str(tmp_path / "easy.zarr"), shuffle=False, block_rows=700)
    assert [b.n_rows for b in store.meta.blocks] == [700] * 4  # the easy rows are block 3
    addrs = sorted(workers_info(client))
    plan = WorkerPlan(tuple(addrs[b % len(addrs)] for b in range(4)), {a: 0 for a in addrs})
    p = Params(loss="hinge", C=0.03, eps=0.01, bias=-1.0, max_rounds=300, seed=0)
    result = dcd.solve(client, store, plan, p, cost=np.full(2, 0.03))
    assert result.converged  # by (17) on a round with every row active
    assert primal_objective(result.w, X2, y2, "hinge", C=0.03) <= p_ref * (1 + 1e-3)
    stale = [h["stale_blocks"] for h in result.history]
    assert max(stale) == 1 and stale[-1] == 0 and sum(stale) > result.rounds / 2
    reads = _reads(client, store.url)
    R = result.rounds
    assert [reads[b.name] for b in store.meta.blocks[:3]] == [2 * R] * 3  # visit + loss
    assert reads[store.meta.blocks[3].name] == 2 * (R - sum(stale))


@pytest.mark.parametrize("prefetch", [True, False])
def test_stream_yields_each_block_in_order_read_once(a9a, tmp_path, prefetch):
    X, y = a9a
    store = ingest((X[:4000], y[:4000]), str(tmp_path / "s.zarr"), block_rows=1000)
    before = distsvm.workers.blocks.read_counts()
    distsvm.workers.blocks.set_prefetch(prefetch)
    try:
        got = list(distsvm.workers.blocks.stream(store.url, list(store.meta.blocks), 0))
    finally:
        distsvm.workers.blocks.set_prefetch(True)
    assert len(got) == store.n_blocks == 4
    for i, (block, sqnorm) in enumerate(got):
        ref = store.read_block(i)
        for k in ("indptr", "indices", "data", "y"):
            np.testing.assert_array_equal(getattr(block, k), getattr(ref, k))
        np.testing.assert_allclose(sqnorm, np.add.reduceat(ref.data.astype(np.float64) ** 2,
                                                          ref.indptr[:-1]))
    after = distsvm.workers.blocks.read_counts()
    assert [after[store.url, b.name] - before.get((store.url, b.name), 0)
            for b in store.meta.blocks] == [1] * 4


def test_the_block_a_stream_hands_on_is_read_once_and_only_for_the_stream_it_starts(a9a,
                                                                                    tmp_path):
    """``stream(..., then=b)`` (dual CD's next round): b is read during the stream's last
    block and the next stream that starts with b takes it — one read of b, not two; the
    thread's next stream that starts with another block drops it (and reads its own), another
    thread's does not; drop_run drops it."""
    B = distsvm.workers.blocks
    X, y = a9a
    store = ingest((X[:4000], y[:4000]), str(tmp_path / "s.zarr"), block_rows=1000)
    b0, b1, b2, b3 = store.meta.blocks

    def reads():
        counts = B.read_counts()
        return [counts.get((store.url, b.name), 0) for b in store.meta.blocks]

    start = reads()
    list(B.stream(store.url, [b0, b1], 0, then=b3))
    B._handoff_pool.submit(lambda: None).result()  # the hand-on read has ended
    assert [n - m for n, m in zip(reads(), start)] == [1, 1, 0, 1]
    got = list(B.stream(store.url, [b3, b2], 0))
    assert [n - m for n, m in zip(reads(), start)] == [1, 1, 1, 1]  # b3: the handed read
    ref = store.read_block(3)
    for k in ("indptr", "indices", "data", "y"):
        np.testing.assert_array_equal(getattr(got[0][0], k), getattr(ref, k))
    list(B.stream(store.url, [b0], 0, then=b1))
    list(B.stream(store.url, [b2], 0))  # not b1: it is dropped, b2 read
    assert not B._handoff
    list(B.stream(store.url, [b1], 0))
    B._handoff_pool.submit(lambda: None).result()  # the dropped read has ended too
    assert [n - m for n, m in zip(reads(), start)] == [2, 3, 2, 1]
    # another thread's stream (one-vs-rest problems side by side) leaves this one's be
    list(B.stream(store.url, [b0], 0, then=b1))
    other = threading.Thread(target=lambda: list(B.stream(store.url, [b2], 0)))
    other.start()
    other.join()
    list(B.stream(store.url, [b1], 0))
    B._handoff_pool.submit(lambda: None).result()
    assert [n - m for n, m in zip(reads(), start)] == [3, 4, 3, 1]  # b1 once more, not twice
    # the handed block is let go once used, as any streamed block (memory: two blocks)
    list(B.stream(store.url, [b0], 0, then=b1))
    it = B.stream(store.url, [b1, b2], 0)
    first = weakref.ref(next(it)[0])
    gc.collect()
    next(it)
    gc.collect()
    assert first() is None
    it.close()
    list(B.stream(store.url, [b0], 0, then=b1))
    B.drop_run("nothing")
    assert not B._handoff


def test_streams_in_repeated_passes_reuse_one_memory_and_unused_norms_are_not_computed(
        tmp_path):
    """Inside ``repeating`` (a Newton iteration: a stream a pass), the next stream over a
    block the cache does not keep decodes it into the memory of the last one's; outside it,
    a stream's memory goes with the stream.  ``norms=False`` (Newton's and ALM's passes): a
    block no cache of that size could keep comes without ‖xᵢ‖², one the cache keeps with
    them, for the dual CD passes after it; the blocks read as the store holds them."""
    B = distsvm.workers.blocks
    B.clear_cache()
    store = generate(str(tmp_path / "s.zarr"), rows=12_000, features=2000, nnz_per_row=60,
                     block_rows=6000, seed=3)  # data, indices: 1.4 MB a block (≥ MIN_BYTES)
    infos, ref = list(store.meta.blocks), store.read_block(0)
    assert B.Buffers.MIN_BYTES <= ref.data.nbytes

    def first(norms=True, cache=0):  # block 0 streamed: its data's memory, and its norms
        (block, sqnorm), = B.stream(store.url, infos[:1], cache, norms=norms)
        for k in ("indptr", "indices", "data", "y"):
            np.testing.assert_array_equal(getattr(block, k), getattr(ref, k))
        base = block.data.base
        assert base is not None and base.dtype == np.uint8  # made in a Buffers' buffer
        return weakref.ref(base), sqnorm

    memory, _ = first()
    gc.collect()
    assert memory() is None  # the stream's Buffers went with it
    with B.repeating():
        memory, _ = first()
        again, _ = first()
        assert again() is memory() is not None
    gc.collect()
    assert memory() is None
    assert first(norms=False)[1] is None
    assert not B._in_cache(store.url, infos[:1])
    sqnorm = first(norms=False, cache=1 << 30)[1]  # kept by the cache: with its norms
    assert B._in_cache(store.url, infos[:1])
    np.testing.assert_allclose(sqnorm, np.add.reduceat(ref.data.astype(np.float64) ** 2,
                                                      ref.indptr[:-1]))
    B.clear_cache()


def test_a_repeated_pass_reads_the_next_ones_first_block_after_its_last_visit(tmp_path):
    """Inside ``repeating``, a pass over blocks not cached (``each_block``) hands its first
    block on to the next pass, which takes it rather than reading it again: 2 passes over
    2 blocks read block 0 three times (the last pass's hand-on included), not twice plus
    a wait; the sums are those of passes outside it; the job's end drops what was handed on,
    and a dual CD stream does not take a block handed on without its ‖xᵢ‖² (the other way
    round it does)."""
    B = distsvm.workers.blocks
    B.clear_cache()
    store = generate(str(tmp_path / "s.zarr"), rows=12_000, features=2000, nnz_per_row=60,
                     block_rows=6000, seed=3)
    infos = list(store.meta.blocks)

    def visit(info, block, acc, rows):
        acc["sum"] += float(block.data[block.indptr[rows.start]:block.indptr[rows.stop]]
                            .astype(np.float64).sum())

    def reads():
        counts = B.read_counts()
        return [counts.get((store.url, b.name), 0) for b in infos]

    def passes(n):
        return [B.each_block(store.url, infos, 0, None, 1, visit, lambda: {"sum": 0.0})["sum"]
                for _ in range(n)]

    plain = passes(1)[0]
    start = reads()
    with B.repeating():
        sums = passes(2)
    B._handoff_pool.submit(lambda: None).result()  # the last hand-on's read has ended
    assert sums == [plain, plain]
    assert [n - m for n, m in zip(reads(), start)] == [3, 2]
    assert B._handoff
    B.drop_run("the job")
    assert not B._handoff
    with B.repeating():  # a block handed on without its norms is not one for dual CD
        passes(1)
    (block, sqnorm), = B.stream(store.url, infos[:1], 0)
    np.testing.assert_allclose(sqnorm, np.add.reduceat(block.data.astype(np.float64) ** 2,
                                                      block.indptr[:-1]))
    B._handoff_pool.submit(lambda: None).result()
    assert [n - m for n, m in zip(reads(), start)] == [6, 3]  # read again, not taken
    list(B.stream(store.url, infos[:1], 0, then=infos[1]))  # dual CD's hand-on, with norms
    (block, sqnorm), = B.stream(store.url, infos[1:], 0, norms=False)  # taken all the same
    assert sqnorm is not None
    assert [n - m for n, m in zip(reads(), start)] == [7, 4]


def test_a_stream_larger_than_the_cache_keeps_its_first_blocks_and_reuses_memory(tmp_path):
    """A stream over more blocks than the cache holds: the cache keeps the blocks it took
    first (a second stream in the same order reads only the others — least recently used
    eviction would read them all again); the blocks it does not keep are decoded into the
    memory of blocks the caller let go of, and every block reads as the store holds it,
    whether the caller lets go of each block or keeps them all; a stream of another store
    may still evict the first one's blocks."""
    B = distsvm.workers.blocks
    B.clear_cache()
    store = generate(str(tmp_path / "s.zarr"), rows=36_000, features=2000, nnz_per_row=60,
                     block_rows=6000, seed=3)  # data, indices: 1.4 MB a block (≥ MIN_BYTES)
    other = generate(str(tmp_path / "o.zarr"), rows=12_000, features=2000, nnz_per_row=60,
                     block_rows=6000, seed=4)
    infos = list(store.meta.blocks)
    refs = [store.read_block(i) for i in range(6)]
    budget = int(2.5 * max(b.nbytes + 8 * b.n_rows for b in refs))  # two blocks

    def check(i, block, sqnorm):
        for k in ("indptr", "indices", "data", "y"):
            np.testing.assert_array_equal(getattr(block, k), getattr(refs[i], k))
        np.testing.assert_allclose(sqnorm, np.add.reduceat(
            refs[i].data.astype(np.float64) ** 2, refs[i].indptr[:-1]))

    reads = []
    for _ in range(2):
        before, places = B.read_counts(), set()
        for i, (block, sqnorm) in enumerate(B.stream(store.url, infos, budget)):
            check(i, block, sqnorm)
            if i >= 2:  # not cached: made in a buffer of the stream's Buffers
                assert block.data.base is not None and block.data.base.dtype == np.uint8
                places.add(block.data.ctypes.data)
            del block, sqnorm
        after = B.read_counts()
        reads.append(sum(after[store.url, b.name] - before.get((store.url, b.name), 0)
                         for b in infos))
    assert reads == [6, 4]  # the two blocks cached first stay: 4 reads, not 6
    assert len(places) < 4  # 4 blocks read, their data in fewer places than that
    assert B.Buffers.MIN_BYTES <= refs[2].data.nbytes
    kept = list(B.stream(store.url, infos, budget))  # the caller keeps every block
    for i, (block, sqnorm) in enumerate(kept):
        check(i, block, sqnorm)
    assert len({block.data.ctypes.data for block, _ in kept}) == 6
    del kept
    list(B.stream(other.url, list(other.meta.blocks), budget))
    assert B._in_cache(other.url, list(other.meta.blocks))
    assert not B._in_cache(store.url, infos[:1])
    B.clear_cache()


def test_a_job_with_a_smaller_cache_evicts_what_an_earlier_job_cached(tmp_path):
    """A worker's cache holds at most the budget of the job reading from it: the blocks an
    earlier job kept (its plan gave the worker room for them) go when a job that streams, or
    caches less, reads — not kept beside that job's blocks in flight (a 2 x 512 MB cluster's
    -s 1 after -s 2 peaked at 464 MiB of 488 this way, its -s 3 then had a worker restarted),
    the block it reads too."""
    B = distsvm.workers.blocks
    B.clear_cache()
    store = generate(str(tmp_path / "s.zarr"), rows=8000, features=500, nnz_per_row=20,
                     block_rows=2000, seed=3)
    other = generate(str(tmp_path / "o.zarr"), rows=4000, features=500, nnz_per_row=20,
                     block_rows=2000, seed=4)
    infos, others = list(store.meta.blocks), list(other.meta.blocks)
    list(B.stream(store.url, infos, 1 << 30))  # the earlier job: its 4 blocks cached
    held = B.cached_bytes()
    assert B._in_cache(store.url, infos) and held > 0
    list(B.stream(other.url, others, 0))  # a job that streams
    assert B.cached_bytes() == 0
    list(B.stream(store.url, infos, 1 << 30))
    list(B.stream(other.url, others[:1], held // 2))  # one that caches less: ≤ its budget
    assert 0 < B.cached_bytes() <= held // 2
    assert B._in_cache(other.url, others[:1])  # the block it reads is what it keeps
    list(B.stream(store.url, infos, 1 << 30))
    before = B.read_counts()
    (block, _), = B.stream(store.url, infos[:1], 0)  # a stream that hits an earlier job's
    assert B.cached_bytes() == 0 and block.n_rows == 2000  # block: it has it, the cache not
    assert B.read_counts() == before
    B.clear_cache()
