"""Benchmark: parallel DCD (--parallel average / add) vs block-sequential DCD vs LIBLINEAR.

Run from the repository root (needs the `bench` extra):

    python benchmarks/bench_dcd_parallel.py --workers 2 --block-rows 4096 -c 1

On a9a (the shipped data/a9a.xz) or a ../shared dataset (--data NAME): f* is LIBLINEAR's
primal objective at -e 1e-5.  distsvm runs on a started local cluster (--workers) with the
store already written; its time and rounds to 1% are those of the first round whose logged
primal objective is within 1% of f* (each round also evaluates the primal, included).
LIBLINEAR (single thread, in this process) is timed over a ladder of -e values; its time
to 1% is that of the loosest run within 1%.  Prints one table row per solver and ratios.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LADDER = [1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.001]


def _liblinear(X, y, loss, C, f_star):
    from liblinear.liblinearutil import parameter, problem, train

    from tests.conftest import primal_objective

    prob = problem(y, X.astype("float64"))
    s = 3 if loss == "hinge" else 1
    for e in LADDER:
        t = time.perf_counter()
        m = train(prob, parameter(f"-s {s} -c {C} -e {e} -q"))
        sec = time.perf_counter() - t
        w = np.array([m.w[i] for i in range(X.shape[1])])
        if m.get_labels()[0] != max(y):
            w = -w
        if primal_objective(w, X, y, loss, C) <= 1.01 * f_star:
            return sec, e
    return float("nan"), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="a9a")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--block-rows", type=int, default=4096)
    ap.add_argument("-c", dest="C", type=float, default=1.0)
    ap.add_argument("--max-rounds", type=int, default=300)
    ap.add_argument("--inner-passes", type=int, default=1)
    a = ap.parse_args()

    from distributed import Client, LocalCluster

    from distsvm.ingest import ingest
    from distsvm.jobs import train
    from tests.conftest import DATA, SHARED, liblinear_optimum, load_xy

    path = DATA / "a9a.xz" if a.data == "a9a" else SHARED / f"{a.data}.xz"
    X, y = load_xy(path, 123 if a.data == "a9a" else None)
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                         host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        store = ingest((X, y), f"{tmp}/d.zarr", block_rows=a.block_rows, client=client)
        print(f"{a.data}: {X.shape[0]} rows, {store.n_blocks} blocks, {a.workers} workers, "
              f"C={a.C:g}, H={a.inner_passes}")
        print(f"{'loss':14s} {'solver':12s} {'rounds→1%':>10s} {'s→1%':>8s} {'vs LIBLINEAR':>12s}")
        for loss in ("hinge", "squared_hinge"):
            _, f_star = liblinear_optimum(X, y, loss, C=a.C)
            ll_sec, ll_e = _liblinear(X, y, loss, a.C, f_star)
            print(f"{loss:14s} {'liblinear':12s} {'-e ' + str(ll_e):>10s} {ll_sec:8.3f} {1.0:12.2f}")
            for parallel in (None, "average", "add"):
                m = train(store, loss=loss, C=a.C, eps=1e-9, max_rounds=a.max_rounds,
                          gap_tol=1e-3, inner_passes=a.inner_passes, parallel=parallel,
                          client=client)
                hit = next((h for h in m.summary["history"] if h["primal"] <= 1.01 * f_star),
                           None)
                r, sec = (hit["round"], hit["seconds"]) if hit else (None, float("nan"))
                print(f"{loss:14s} {parallel or 'sequential':12s} {str(r):>10s} {sec:8.3f} "
                      f"{sec / ll_sec:12.2f}")


if __name__ == "__main__":
    main()
