"""Where a streamed round's time goes, and what a row block's codec costs (issue 31).

Two measurements:

``codecs STORE...`` — per row block of each store (e.g. one store written per codec, same
rows): bytes on disk, and the time to read and decode a block (read_row_block: chunk
files, decode, CRC-32s, content checks, plus the per-row ‖xᵢ‖² a visit needs), both
through the local fast path and through Zarr, warm (page cache) and cold (the block's files
dropped from the page cache with posix_fadvise first), interleaved; medians of wall and
process CPU time (all threads: Zarr decodes on threads of its own).

``rounds STORE`` — trains ``-s 1`` with ``distsvm train --scheduler`` against a
LocalCluster this script starts (``--workers``, ``--memory-limit``, one thread each) after
putting timers into its workers: per round (one ``blocks.stream`` of the worker's blocks)
its span, the loader's time reading and decoding the blocks (the prefetch thread:
``read_row_block`` and ``row_sqnorms``; wall, and its thread's CPU time), the time the
solver waited for the next block, the solver's CPU time between blocks (the kernels), and
the worker process's CPU time (all threads: Zarr decodes on threads of its own), whose
part not spent by the solver is the reading and decoding (and Dask's own few ms).
The last stream of a run is the final pass that measures the primal objective.
``--zarr`` reads through Zarr instead of the local fast path (the code before issue 31).

    python benchmarks/bench_block_reads.py codecs s-zstd.zarr s-lz4.zarr s-none.zarr
    python benchmarks/bench_block_reads.py rounds s.zarr --rounds 3 --memory-limit 512MB
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np


def _drop(url: str, name: str) -> None:
    """Drop a block's chunk files from the page cache (this process's files only)."""
    for p in (pathlib.Path(url) / "rows" / name).rglob("c/0"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def codecs(a) -> None:
    from distsvm.storage import dataset as ds
    from distsvm.storage import open_dataset, read_row_block
    from distsvm.workers.kernels.linear import row_sqnorms

    fast = ds._local_chunk
    stores = {s: open_dataset(s) for s in a.stores}
    n = min(a.blocks, *(len(d.meta.blocks) for d in stores.values()))
    cases = [(s, path, cold) for s in stores for path in ("fast", "zarr") for cold in (0, 1)]
    wall = {c: [] for c in cases}
    cpu = {c: [] for c in cases}
    for rep in range(a.repeats):
        for b in range(n):
            order = cases if (b + rep) % 2 == 0 else cases[::-1]
            for s, path, cold in order:
                info = stores[s].meta.blocks[b]
                if cold:
                    _drop(s, info.name)
                ds._local_chunk = fast if path == "fast" else (lambda *_: None)
                t, c = time.perf_counter(), time.process_time()
                block = read_row_block(s, info)
                q = np.empty(block.n_rows)
                row_sqnorms(block.indptr, block.data, q)
                wall[s, path, cold].append(time.perf_counter() - t)
                cpu[s, path, cold].append(time.process_time() - c)
    ds._local_chunk = fast
    print("| store | codec | MB on disk / block | MB decoded / block | path | warm ms (CPU ms) "
          "| cold ms (CPU ms) |")
    print("|---|---|---|---|---|---|---|")
    for s, d in stores.items():
        info = d.meta.blocks[0]
        codec = json.loads((pathlib.Path(s) / "rows" / info.name / "data" / "zarr.json")
                           .read_text())["codecs"][1:]
        name = "none" if not codec else codec[0]["name"] + (
            f"-{codec[0]['configuration']['cname']}" if codec[0]["name"] == "blosc" else "")
        read = ds.ROW_ARRAYS + (ds.WEIGHT, ds.TARGET)  # what a block read reads
        disk = sum(p.stat().st_size for p in (pathlib.Path(s) / "rows").rglob("c/0")
                   if p.parent.parent.name in read) / len(d.meta.blocks)
        dec = sum(b.nbytes for b in [read_row_block(s, d.meta.blocks[0])])
        for path in ("fast", "zarr"):
            med = [f"{np.median(wall[s, path, c]) * 1e3:.1f} ({np.median(cpu[s, path, c]) * 1e3:.1f})"
                   for c in (0, 1)]
            print(f"| {s} | {name} | {disk / 1e6:.2f} | {dec / 1e6:.2f} | {path} | {med[0]} | "
                  f"{med[1]} |")
    print(f"load {open('/proc/loadavg').read().strip()}; {n} blocks x {a.repeats}")


def install(zarr_path: bool) -> str:
    """In a worker: timers around the block reads and the solver's use of each block."""
    import time as t

    import distsvm.workers.blocks as B
    from distsvm.storage import dataset as DS

    if not hasattr(DS, "_bench_fast"):
        DS._bench_fast = DS._local_chunk
    DS._local_chunk = (lambda *_: None) if zarr_path else DS._bench_fast
    if hasattr(B, "_bench"):
        B._bench.clear()
        return "reset"
    B._bench = []
    read, sqn, stream = B.read_row_block, B.row_sqnorms, B.stream

    def add(k, v):
        if B._bench:
            B._bench[-1][k] = B._bench[-1].get(k, 0.0) + v

    def timed(f, name):
        def g(*x, **kw):
            w, c = t.perf_counter(), t.thread_time()
            r = f(*x, **kw)
            add(name, t.perf_counter() - w)
            add("loader_cpu", t.thread_time() - c)
            return r
        return g

    def timed_stream(url, infos, *x, **kw):
        B._bench.append({"blocks": len(infos), "start": t.perf_counter(), "p0": t.process_time()})
        g, cpu = stream(url, infos, *x, **kw), None
        while True:
            if cpu is not None:
                add("solver_cpu", t.thread_time() - cpu)
            w = t.perf_counter()
            try:
                item = next(g)
            except StopIteration:
                return
            add("wait", t.perf_counter() - w)
            B._bench[-1].update(end=t.perf_counter(), p1=t.process_time())  # the last block
            cpu = t.thread_time()  # arrived (its visit is not counted: consumers stop here)
            yield item
            del item  # as the solvers do: the block is not kept while the next is read

    B.read_row_block, B.row_sqnorms = timed(read, "read"), timed(sqn, "sqnorm")
    B.stream = timed_stream
    return "installed"


def collect() -> list:
    import distsvm.workers.blocks as B

    return list(B._bench)


def rounds(a) -> None:
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=a.workers, threads_per_worker=1, memory_limit=a.memory_limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(install, a.zarr)
        with tempfile.TemporaryDirectory() as tmp:
            cmd = ["distsvm", "train", a.store, os.path.join(tmp, "m.model"), "-s", "1",
                   "--json", "--log-format", "json", "--scheduler", cluster.scheduler_address,
                   "--max-rounds", str(a.rounds), *a.train_args]
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t
        if p.returncode:
            sys.exit(p.stderr[-3000:])
        log = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
        secs = [r["seconds"] for r in log if "round" in r and "seconds" in r]
        print(f"$ {' '.join(cmd[:3])} ... ({'zarr' if a.zarr else 'fast'} path)")
        print(f"wall {wall:.1f} s, train {json.loads(p.stdout)['train_seconds']:.1f} s, "
              f"round ends (s) {[round(s, 2) for s in secs]}")
        print("| worker | stream | blocks | span s | read+decode s (CPU s) | share of span "
              "| solver waited s | solver CPU s | process CPU s | other CPU share |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for w, rows in client.run(collect).items():
            for i, r in enumerate(rows):
                span = r.get("end", r["start"]) - r["start"]
                load = r.get("read", 0.0) + r.get("sqnorm", 0.0)
                print(f"| {w.rsplit(':', 1)[-1]} | {i} | {r['blocks']} | {span:.2f} | "
                      f"{load:.2f} ({r.get('loader_cpu', 0.0):.2f}) | "
                      f"{100 * load / max(span, 1e-9):.0f}% | {r.get('wait', 0.0):.2f} | "
                      f"{r.get('solver_cpu', 0.0):.2f} | {r.get('p1', 0) - r['p0']:.2f} | "
                      f"{100 * (1 - r.get('solver_cpu', 0.0) / max(r.get('p1', 0) - r['p0'], 1e-9)):.0f}% |")
        print(f"load {open('/proc/loadavg').read().strip()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("codecs")
    c.add_argument("stores", nargs="+")
    c.add_argument("--blocks", type=int, default=10)
    c.add_argument("--repeats", type=int, default=3)
    r = sub.add_parser("rounds")
    r.add_argument("store")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--memory-limit", default="512MB")
    r.add_argument("--zarr", action="store_true", help="read through Zarr (before issue 31)")
    r.add_argument("train_args", nargs="*", help="more `distsvm train` options (after --)")
    a = ap.parse_args()
    codecs(a) if a.what == "codecs" else rounds(a)


if __name__ == "__main__":
    main()
