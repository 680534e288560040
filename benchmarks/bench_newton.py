"""Benchmark: the Newton solver (LIBLINEAR -s 0 / -s 2) vs LIBLINEAR single-thread and
liblinear-multicore, time to 1% of the optimum, in one run.

Run from the repository root (needs the `bench` extra; pypi-summaries needs ../shared):

    nice -n 10 python benchmarks/bench_newton.py --data pypi-summaries --workers 2 \
        --multicore-python /work/venv-mc/bin/python

(liblinear-multicore installs a module named `liblinear`, like liblinear-official, so it
lives in its own environment and runs in a child process, as in bench_dcd_parallel.py.)

Protocol (as benchmarks/bench_dcd_parallel.py): f* is LIBLINEAR's primal objective at
-e 1e-4 (C = -c).  LIBLINEAR's time to 1% is the training time of the loosest -e of a
ladder whose model is within 1% of f*: its `train()` alone, reading the file and building
its `problem` (the data in its memory format) excluded; liblinear-multicore the same with
`-m THREADS`, timed inside the child.  distsvm runs `solver="newton"` on a started local
cluster of --workers workers with the data in the store (cluster start and ingest
excluded), after one untimed warm-up job that loads the kernels into the worker processes
(Numba's cache, once per process, as in a long-running cluster).  Its time to 1% is the
job's set-up (`train()`'s wall time less its solver time: the worker plan) plus the solver's
elapsed time to the first Newton iteration whose objective (every evaluation computes it)
is within 1%; "cold" with the workers' block caches emptied first, so it includes reading
and decompressing the blocks from the store, "warm" with the blocks already in the
workers' memory, as LIBLINEAR's problem is in its memory.  Medians over --repeats; the
load average is printed before and after.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_dcd import liblinear_run  # noqa: E402
from bench_dcd_parallel import common_arguments, ladder, multicore_run, problem_on_cluster, time_to_1pct  # noqa: E402

TYPES = {"logistic": 0, "squared_hinge": 2}


def main():
    a = common_arguments(__doc__, TYPES).parse_args()

    import distsvm.workers.blocks
    from distsvm.jobs import train
    from tests.conftest import primal_objective

    with problem_on_cluster(a.data, a.workers, a.block_rows, a.worker_threads) as \
            (X, X64, y, tmp, client, store):
        print(f"{a.data}: {X.shape[0]} rows x {X.shape[1]} features, {X.nnz} nnz, "
              f"{store.n_blocks} blocks, {a.workers} workers x {a.worker_threads} threads, "
              f"C={a.C:g}, medians of "
              f"{a.repeats}; load average {os.getloadavg()[0]:.1f}")
        train(store, solver="newton", C=a.C, max_rounds=1, client=client)  # warm-up
        print(f"{'loss':14s} {'solver':24s} {'iters→1%':>9s} {'s→1%':>8s} "
              f"{'/LIBLINEAR':>10s} {'/multicore':>10s}", flush=True)
        for loss in a.losses:
            s = TYPES[loss]
            objective = lambda w: primal_objective(w, X64, y, loss, a.C)  # noqa: E731
            f_star = objective(liblinear_run(X64, y, s, 1e-4, a.C)[0])
            rows = {}
            runs = [ladder(lambda e: liblinear_run(X64, y, s, e, a.C), objective, f_star)
                    for _ in range(a.repeats)]
            rows["LIBLINEAR"] = (None, statistics.median(time_to_1pct(p)[0] for p in runs),
                                 f"-e {time_to_1pct(runs[-1])[1]}")
            if a.multicore_python:
                run = multicore_run(a.multicore_python, tmp, s, a.C, a.threads)
                runs = [ladder(run, objective, f_star) for _ in range(a.repeats)]
                rows[f"multicore -m {a.threads}"] = (
                    None, statistics.median(time_to_1pct(p)[0] for p in runs),
                    f"-e {time_to_1pct(runs[-1])[1]}")
            for cold in (True, False):
                hits = []
                for _ in range(a.repeats):
                    if cold:
                        client.run(distsvm.workers.blocks.clear_cache)
                    t = time.perf_counter()
                    m = train(store, solver="newton", loss=loss, C=a.C, eps=1e-3,
                              max_rounds=100, client=client)
                    setup = time.perf_counter() - t - m.summary["train_seconds"]
                    hit = next((r for r in m.summary["history"]
                                if r["primal"] <= 1.01 * f_star), None)
                    hits.append((hit["seconds"] + setup if hit else float("nan"),
                                 hit["round"] if hit else None))
                hits.sort(key=lambda x: x[0])
                sec, iters = hits[len(hits) // 2]
                rows[f"distsvm newton {'cold' if cold else 'warm'}"] = (iters, sec, "")
            ll = rows["LIBLINEAR"][1]
            mc = rows.get(f"multicore -m {a.threads}", (None, float("nan")))[1]
            for name, (iters, sec, note) in rows.items():
                print(f"{loss:14s} {(name + ' ' + note).strip():24s} "
                      f"{'–' if iters is None else iters:>9} {sec:8.3f} {sec / ll:10.2f} "
                      f"{sec / mc:10.2f}", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
