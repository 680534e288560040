"""Out of core: a store several times larger than the worker's memory limit trains, in bounded memory."""

from __future__ import annotations

import threading
import time

import numpy as np
import psutil
import pytest
import scipy.sparse as sp

from distsvm.ingest import ingest
from distsvm.jobs import train

MEMORY_LIMIT = 400 * 2**20


def synthetic(rows, nnz_per_row, seed=0):
    """Sparse rows with distinct increasing indices, labels from a sparse ground truth with noise."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(1, 200, size=(rows, nnz_per_row), dtype=np.int32)
    indices = np.cumsum(gaps, axis=1, dtype=np.int32).ravel()
    data = rng.random(rows * nnz_per_row, dtype=np.float32) / np.sqrt(nnz_per_row / 3)
    indptr = np.arange(0, rows * nnz_per_row + 1, nnz_per_row, dtype=np.int64)
    X = sp.csr_matrix((data, indices, indptr), shape=(rows, int(indices.max()) + 1))
    truth = np.where(rng.random(X.shape[1]) < 0.05, rng.normal(size=X.shape[1]), 0.0)
    margin = X @ truth
    y = np.where(margin + 0.1 * rng.normal(size=rows) > np.median(margin), 1.0, -1.0)
    return X, y


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


@pytest.mark.slow
def test_store_larger_than_memory_trains_in_bounded_memory(tmp_path):
    import os

    from distributed import Client, LocalCluster

    import workers.blocks

    X, y = synthetic(rows=320_000, nnz_per_row=500)
    store = ingest((X, y), str(tmp_path / "big.zarr"), block_mb=8)
    data_bytes = sum(b.nnz * 8 + b.n_rows * 12 for b in store.meta.blocks)
    assert data_bytes >= 3 * MEMORY_LIMIT
    del X

    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None, memory_limit=MEMORY_LIMIT) as cluster, \
            Client(cluster) as c:
        pids = list(c.run(os.getpid).values())
        with PeakRSS(pids) as rss:
            model = train(store, loss="squared_hinge", eps=0.05, gap_tol=1e-3, max_rounds=60,
                          client=c)
        assert list(c.run(os.getpid).values()) == pids  # never restarted by its nanny
        cached = sum(c.run(workers.blocks.cached_bytes).values())
    assert cached < data_bytes / 3  # most blocks are re-read from the store every round
    s = model.summary
    assert s["converged"]
    assert s["duality_gap"] <= 1e-3 * s["primal_objective"]  # optimal, by the certificate
    assert rss.peak < 0.8 * MEMORY_LIMIT, f"peak RSS {rss.peak / 2**20:.0f} MiB"
    print(f"\nout-of-core: {data_bytes / 2**30:.2f} GiB of blocks, worker limit "
          f"{MEMORY_LIMIT / 2**20:.0f} MiB, peak RSS {rss.peak / 2**20:.0f} MiB, "
          f"{s['rounds']} rounds in {s['train_seconds']:.1f}s")
