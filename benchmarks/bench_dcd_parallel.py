"""Benchmark: parallel DCD (--parallel average / add) and block-sequential DCD vs LIBLINEAR
single-thread and liblinear-multicore, time to 1% of the optimum.

Run from the repository root (needs the `bench` extra; pypi-summaries needs ../shared):

    python -m venv /tmp/mc && /tmp/mc/bin/pip install liblinear-multicore numpy scipy
    python benchmarks/bench_dcd_parallel.py --data pypi-summaries --workers 2 --repeats 3 \
        --multicore-python /tmp/mc/bin/python --png docs/img/dcd-parallel-pypi.png

(liblinear-multicore installs a module named `liblinear`, like liblinear-official, so it
lives in its own environment and runs in a child process.)

Protocol (as benchmarks/bench_dcd.py): f* is LIBLINEAR's primal objective at -e 1e-4 (-s 3
hinge, -s 1 squared hinge, C = -c).  LIBLINEAR's time to 1% is the training time of the
loosest -e of a ladder whose model is within 1% of f*; liblinear-multicore the same with
`-m THREADS` (its parallel dual CD), training time measured inside the child, loading
excluded.  distsvm runs on a started local cluster of --workers workers with the data in
the store, block caches emptied first; its time to 1% is the job's set-up plus the elapsed
time to the first round whose logged primal objective is within 1% (each round evaluates
the primal, included).  Medians over --repeats.  --png plots the relative primal gap
against time (log scale): distsvm's rounds from the median run, LIBLINEAR's ladder points.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_dcd import LADDER, LOSSES, gap_plot, liblinear_run, primal  # noqa: E402

MULTICORE_CHILD = """
import json, sys, time, numpy as np, scipy.sparse as sp
from liblinear.liblinearutil import parameter, problem, train
X = sp.load_npz(sys.argv[1]); y = np.load(sys.argv[2])
prob = problem(y, X)
t = time.perf_counter()
m = train(prob, parameter(sys.argv[3]))
dt = time.perf_counter() - t
w = [m.w[i] for i in range(X.shape[1])]
print(json.dumps({"seconds": dt, "w": w if m.get_labels()[0] == max(y) else [-v for v in w]}))
"""


def ladder(run, objective, f_star):
    """``[(eps, seconds, relative gap)]`` down LADDER until a run is within 1% of f*."""
    points = []
    for eps in LADDER:
        w, sec = run(eps)
        points.append((eps, sec, (objective(w) - f_star) / f_star))
        if points[-1][2] <= 0.01:
            break
    return points


def multicore_run(python, tmp, s, C, threads):
    def run(eps):
        out = subprocess.run([python, "-c", MULTICORE_CHILD, f"{tmp}/X.npz", f"{tmp}/y.npy",
                              f"-s {s} -c {C} -e {eps} -m {threads} -q"],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        return np.array(r["w"]), r["seconds"]
    return run


@contextlib.contextmanager
def problem_on_cluster(data, n_workers, block_rows=None, threads_per_worker=1):
    """Yield ``(X, X64, y, tmp, client, store)``: the dataset (float32 and float64), a
    temporary directory with X.npz and y.npy for the multicore child, a started local
    cluster's client (``n_workers`` processes of ``threads_per_worker`` threads) and the
    dataset ingested into a store in ``tmp``."""
    from distributed import Client, LocalCluster

    from distsvm.ingest import ingest
    from tests.conftest import DATA, SHARED, load_xy

    path = DATA / "a9a.xz" if data == "a9a" else SHARED / f"{data}.xz"
    X, y = load_xy(path, 123 if data == "a9a" else None)
    X64 = X.astype(np.float64)
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                         processes=True,
                         host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster) as client:
        sp.save_npz(f"{tmp}/X.npz", X64, compressed=False)
        np.save(f"{tmp}/y.npy", y)
        kw = {"block_rows": block_rows} if block_rows else {}
        yield X, X64, y, tmp, client, ingest((X, y), f"{tmp}/d.zarr", client=client, **kw)


def time_to_1pct(points):
    hit = points[-1]
    return (hit[1], hit[0]) if hit[2] <= 0.01 else (float("nan"), None)


def common_arguments(doc: str, losses) -> argparse.ArgumentParser:
    """The options of the benchmarks that compare with LIBLINEAR and liblinear-multicore on
    a dataset (:func:`problem_on_cluster`)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data", default="a9a")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-threads", type=int, default=1, help="threads per worker")
    ap.add_argument("--block-rows", type=int, help="rows per block (default: ingest's size)")
    ap.add_argument("-c", dest="C", type=float, default=1.0)
    ap.add_argument("--losses", nargs="+", choices=list(losses), default=list(losses))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--multicore-python", help="a Python with liblinear-multicore installed")
    ap.add_argument("--threads", type=int, default=2, help="liblinear-multicore's -m")
    return ap


def main():
    ap = common_arguments(__doc__, LOSSES)
    ap.add_argument("--max-rounds", type=int, default=300)
    ap.add_argument("--inner-passes", type=int, default=1)
    ap.add_argument("--png")
    a = ap.parse_args()

    import distsvm.workers.blocks
    from distsvm.jobs import train

    curves = {}
    with problem_on_cluster(a.data, a.workers, a.block_rows) as (X, X64, y, tmp, client, store):
        s = np.where(y == np.max(y), 1.0, -1.0)
        print(f"{a.data}: {X.shape[0]} rows, {store.n_blocks} blocks, {a.workers} workers, "
              f"C={a.C:g}, H={a.inner_passes}, medians of {a.repeats}")
        print(f"{'loss':14s} {'solver':22s} {'rounds→1%':>10s} {'s→1%':>8s} "
              f"{'/LIBLINEAR':>10s} {'/multicore':>10s}")
        for loss in a.losses:
            code = LOSSES[loss]
            w_star, _ = liblinear_run(X64, y, code, 1e-4, a.C)
            objective = lambda w: primal(w, X64, s, loss, a.C)  # noqa: E731
            f_star = objective(w_star)

            rows = {}
            runs = [ladder(lambda e: liblinear_run(X64, y, code, e, a.C),
                           objective, f_star) for _ in range(a.repeats)]
            rows["LIBLINEAR"] = (None, statistics.median(time_to_1pct(p)[0] for p in runs),
                                 f"-e {time_to_1pct(runs[-1])[1]}")
            curves[loss, "LIBLINEAR"] = [(t, g) for _, t, g in runs[-1]]
            if a.multicore_python:
                run = multicore_run(a.multicore_python, tmp, code, a.C, a.threads)
                runs = [ladder(run, objective, f_star) for _ in range(a.repeats)]
                name = f"multicore -m {a.threads}"
                rows[name] = (None, statistics.median(time_to_1pct(p)[0] for p in runs),
                              f"-e {time_to_1pct(runs[-1])[1]}")
                curves[loss, name] = [(t, g) for _, t, g in runs[-1]]
            for parallel in (None, "average", "add"):
                hits = []
                for _ in range(a.repeats):
                    client.run(distsvm.workers.blocks.clear_cache)
                    t = time.perf_counter()
                    m = train(store, loss=loss, C=a.C, eps=1e-9, max_rounds=a.max_rounds,
                              gap_tol=1e-3, inner_passes=a.inner_passes, parallel=parallel,
                              client=client)
                    setup = time.perf_counter() - t - m.summary["train_seconds"]
                    h = m.summary["history"]
                    hit = next((r for r in h if r["primal"] <= 1.01 * f_star), None)
                    hits.append((hit["seconds"] + setup if hit else float("nan"),
                                 hit["round"] if hit else None, setup, h))
                hits.sort(key=lambda x: x[0])
                sec, rounds, setup, h = hits[len(hits) // 2]
                name = f"distsvm {parallel or 'sequential'}"
                rows[name] = (rounds, sec, "")
                curves[loss, name] = [(setup + r["seconds"], (r["primal"] - f_star) / f_star)
                                      for r in h]
            ll = rows["LIBLINEAR"][1]
            mc = rows.get(f"multicore -m {a.threads}", (None, float("nan")))[1]
            for name, (rounds, sec, note) in rows.items():
                print(f"{loss:14s} {(name + ' ' + note).strip():22s} {str(rounds or '–'):>10s} "
                      f"{sec:8.3f} {sec / ll:10.2f} {sec / mc:10.2f}", flush=True)
    if a.png:
        gap_plot({f"{a.data}, {loss}": {name: tuple(zip(*pts)) for (lo, name), pts in
                                        curves.items() if lo == loss} for loss in a.losses},
                 "seconds", a.png)

if __name__ == "__main__":
    main()
