"""Benchmark: an out-of-core DCD epoch on a large generated store vs the raw read rate of its files.

Run from the repository root (about 20 GB of disk; generating takes a while):

    python benchmarks/bench_out_of_core.py --store /tmp/gen20.zarr --rows 24000000 \
        --nnz-per-row 100 --workers 2 --memory-limit 2GB --rounds 2

1. Generates the store with `distsvm generate` (synthetic text-like data) unless it exists.
2. Raw rate: reads every file of the store once, sequentially, in one thread, 16 MiB at a
   time, after dropping the page cache (when allowed: root on Linux); bytes / seconds.
3. Epochs: trains DCD for --rounds rounds on a local cluster of --workers workers, each with
   --memory-limit (so the blocks cannot all be cached), dropping the page cache first.  For
   each round: the bytes the workers read (psutil's read_chars, all reads by the worker
   processes), its seconds, the bytes-per-second rate, and the workers' CPU use (CPU
   seconds / wall seconds per worker; near 1.0 means the round is compute-bound).
Prints the rate of each round as a share of the raw rate.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
import warnings

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def drop_page_cache() -> bool:
    try:
        os.sync()
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def store_files(store: pathlib.Path):
    return sorted(p for p in store.rglob("*") if p.is_file())


def raw_read(files) -> tuple[int, float]:
    buf = bytearray(16 << 20)
    total, t = 0, time.perf_counter()
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--rows", type=int, default=24_000_000)
    ap.add_argument("--features", type=int, default=1_000_000)
    ap.add_argument("--nnz-per-row", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="2GB")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parallel", choices=["average", "add"])
    a = ap.parse_args()

    import psutil
    from distributed import Client, LocalCluster

    from distsvm.generate import generate
    from distsvm.jobs import train
    from distsvm.progress import Progress
    from distsvm.storage import open_dataset

    store = pathlib.Path(a.store)
    kw = dict(threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0")
    if not store.exists():
        t = time.perf_counter()
        with LocalCluster(n_workers=2, **kw) as c, Client(c) as client:
            generate(str(store), rows=a.rows, features=a.features, nnz_per_row=a.nnz_per_row,
                     client=client, progress=Progress())
        print(f"generated in {time.perf_counter() - t:.0f}s")
    ds = open_dataset(str(store))
    files = store_files(store)
    disk = sum(p.stat().st_size for p in files)
    nnz = sum(b.nnz for b in ds.meta.blocks)
    print(f"store: {ds.meta.n_rows} rows, {nnz} non-zeros, {ds.n_blocks} blocks, "
          f"{disk / 1e9:.2f} GB on disk ({nnz * 8 / 1e9:.2f} GB of CSR values+indices)")

    dropped = drop_page_cache()
    n, sec = raw_read(files)
    raw = n / sec
    print(f"raw sequential read: {n / 1e9:.2f} GB in {sec:.1f}s = {raw / 1e6:.0f} MB/s "
          f"(page cache {'dropped' if dropped else 'NOT dropped'})")

    with LocalCluster(n_workers=a.workers, memory_limit=a.memory_limit, **kw) as c, \
            Client(c) as client:
        procs = [psutil.Process(p) for p in client.run(os.getpid).values()]
        marks = []

        def sample():  # read bytes and CPU seconds of the workers at each round's end
            return (sum(p.io_counters().read_chars for p in procs),
                    sum(sum(p.cpu_times()[:2]) for p in procs), time.perf_counter())

        class Marks(Progress):
            def round(self, row):
                marks.append(sample())
                super().round(row)

        drop_page_cache()
        marks.append(sample())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the round limit is the point here
            train(ds, loss="hinge", max_rounds=a.rounds, parallel=a.parallel, client=client,
                  progress=Marks())
        restarted = [p.pid for p in procs if not p.is_running()]
    print(f"{a.workers} workers x {a.memory_limit}, "
          f"{'parallel ' + a.parallel if a.parallel else 'sequential'} DCD; workers restarted: "
          f"{restarted or 'none'}")
    print(f"{'round':>5s} {'GB read':>8s} {'s':>7s} {'MB/s':>7s} {'/raw':>6s} {'CPU/worker':>10s}")
    # marks[0] is before set-up; round 1's interval includes the job's set-up.
    for r, (m0, m1) in enumerate(zip(marks, marks[1:]), 1):
        b, cpu, wall = m1[0] - m0[0], m1[1] - m0[1], m1[2] - m0[2]
        print(f"{r:5d} {b / 1e9:8.2f} {wall:7.1f} {b / wall / 1e6:7.0f} {b / wall / raw:6.2f} "
              f"{cpu / wall / a.workers:10.2f}")


if __name__ == "__main__":
    main()
