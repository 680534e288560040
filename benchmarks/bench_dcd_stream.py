"""Benchmark: out-of-core DCD epochs with and without prefetch, vs the store's read rates.

Run from the repository root (needs the `bench` extra):

    python benchmarks/bench_dcd_stream.py --rows 1000000 --memory-mb 320 --rounds 3 --repeat 2

Generates a synthetic store (`distsvm generate`, 8 MB blocks) in a temporary directory on
a 2-worker cluster, then trains on one worker whose memory limit leaves no block cache, so
every block is read from the store at every use.  Measured in the same run, in this order:

* raw read: every file of the store's row blocks read sequentially (bytes on disk / s; the
  files are in the page cache once generated, so this is a memory-speed upper bound);
* decode: :func:`storage.read_row_block` of every block in this process, one after the
  other (decompression and CRC checks: block bytes in memory / s);
* in process: one pass of the parallel mode's worker task over every block, prefetch on
  and off (best of ``--repeat``), and the CPU seconds of reading alone and of computing
  alone (blocks cached): with both cores free, prefetch brings the pass from their sum
  towards their maximum;
* epochs: ``--rounds`` rounds of parallel DCD with K = 1 (one read of each block per
  round) and of the default sequential block DCD (two reads per round: the visit and the
  loss at the round's final w), with prefetch on and off alternately, ``--repeat`` times
  each; an epoch's time is the shortest difference between consecutive rounds' logged
  times (round 1 is left out: it includes the plan's warm-up).  Rate = block bytes in
  memory read per epoch / epoch time; "vs decode" = that rate / the decode rate.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
import warnings

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_out_of_core import raw_read, store_files  # noqa: E402


def _decode(store) -> float:
    from distsvm.storage import read_row_block

    start = time.perf_counter()
    for info in store.meta.blocks:
        read_row_block(store.url, info, store.storage_options)
    return time.perf_counter() - start


def _in_process(store, repeat: int) -> None:
    """One parallel-mode pass over every block in this process, nothing cached, prefetch on
    and off alternately (best of ``repeat``); and the CPU seconds of its two parts alone."""
    import distsvm.workers.blocks
    import distsvm.workers.dcd
    from distsvm.workers import losses

    infos = list(store.meta.blocks)
    w = np.zeros(store.meta.n_features)

    def one_pass(cache_bytes):
        distsvm.workers.dcd.local_round(w, store.url, infos, list(range(len(infos))), "bench", gamma=1.0,
                                sigma=1.0, bias=-1.0, n_features=store.meta.n_features,
                                loss=losses.HINGE, positive=1, class_cost=np.full(2, 0.1),
                                eps=0.1, n_passes=1,
                                cache_bytes=cache_bytes, storage_options=store.storage_options)

    wall = {True: [], False: []}
    for on in (True, False) * repeat:
        distsvm.workers.blocks.set_prefetch(on)
        start = time.perf_counter()
        one_pass(0)
        wall[on].append(time.perf_counter() - start)
    distsvm.workers.blocks.set_prefetch(True)
    cpu = time.process_time()
    for info in infos:
        distsvm.workers.blocks.load(store.url, info, 0, store.storage_options)
    read_cpu = time.process_time() - cpu
    cpu = time.process_time()
    one_pass(2**62)  # blocks kept in this process's cache: computing only, from round 2 on
    one_pass(2**62)
    cpu_compute = (time.process_time() - cpu) / 2
    distsvm.workers.blocks.clear_cache()
    distsvm.workers.blocks.drop_run("bench")
    print(f"in-process pass (local_round, no cache): prefetch on {min(wall[True]):.2f}s, "
          f"off {min(wall[False]):.2f}s; CPU: read+decode {read_cpu:.2f}s, "
          f"compute {cpu_compute:.2f}s (ideal overlap: {max(read_cpu, cpu_compute):.2f}s)",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=200_000)
    ap.add_argument("--nnz-per-row", type=int, default=100)
    ap.add_argument("--memory-mb", type=int, default=320)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()

    from distributed import Client, LocalCluster

    import distsvm.workers.blocks
    from distsvm.errors import ConvergenceWarning
    from distsvm.generate import generate
    from distsvm.jobs import train

    warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed number of rounds is the point

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
            store = generate(f"{tmp}/s.zarr", rows=a.rows, features=a.features,
                             nnz_per_row=a.nnz_per_row, seed=1, block_mb=8, client=client)
        mem = sum(b.nnz * 8 + b.n_rows * 20 for b in store.meta.blocks)
        disk, raw_s = raw_read(store_files(pathlib.Path(store.url) / "rows"))
        dec_s = _decode(store)
        print(f"store: {a.rows} rows, {store.meta.nnz} non-zeros, {store.n_blocks} blocks, "
              f"{mem / 2**30:.2f} GiB in memory, {disk / 2**30:.2f} GiB on disk; worker "
              f"memory limit {a.memory_mb} MiB")
        print(f"raw read {disk / raw_s / 1e6:8.0f} MB/s on disk ({raw_s:.2f}s)   "
              f"decode {mem / dec_s / 1e6:8.0f} MB/s in memory ({dec_s:.2f}s)")
        _in_process(store, a.repeat)
        print(f"{'mode':12s} {'prefetch':>8s} {'epoch s':>8s} {'MB/s':>8s} {'vs decode':>9s}")
        with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0", memory_limit=a.memory_mb * 2**20) as cluster, \
                Client(cluster) as client:
            for parallel in ("average", None):
                epochs = {True: [], False: []}
                for on in (True, False) * a.repeat:  # alternated, against drifting load
                    client.run(distsvm.workers.blocks.set_prefetch, on)
                    m = train(store, loss="hinge", C=0.1, eps=1e-12, max_rounds=a.rounds + 1,
                              parallel=parallel, client=client)
                    epochs[on] += list(np.diff([h["seconds"] for h in m.summary["history"]]))
                reads = 1 if parallel else 2
                for on in (True, False):
                    epoch = min(epochs[on])
                    print(f"{parallel or 'sequential':12s} {'on' if on else 'off':>8s} "
                          f"{epoch:8.2f} {reads * mem / epoch / 1e6:8.0f} "
                          f"{reads * dec_s / epoch:9.2f}", flush=True)


if __name__ == "__main__":
    main()
