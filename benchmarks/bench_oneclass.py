"""Benchmark: the one-class SVM's iterations (LIBLINEAR -s 21) against LIBLINEAR's, in one process.

Run from the repository root (../shared/datasets; a9a and the other in-repo data work too):

    python benchmarks/bench_oneclass.py --data ../shared/datasets/pypi-summaries.xz --repeats 4

What it separates from the race (benchmarks/race.py, whole commands on a cluster): the
solver's own work.  The file is ingested once into a store (one block per --block-rows) and
its blocks joined as a worker joins them; then, interleaved per repeat, LIBLINEAR's
``train(problem, '-s 21 -n NU -e EPS')`` on the problem built once (LIBLINEAR's timing, as
the race's) and :func:`distsvm.workers.oneclass.batch` in this process on the joined block, from
the start to ρ, with the block in this process's cache after the first repeat (the first
also loads the Numba kernels).  Prints both times, the iterations and the ratio, and the
two objectives ½‖w‖².
"""

from __future__ import annotations

import argparse
import lzma
import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(REPO / "data" / "a9a.xz"))
    ap.add_argument("--nu", type=float, default=0.5)
    ap.add_argument("--eps", type=float, default=0.01)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--block-rows", type=int, default=100_000)
    a = ap.parse_args()

    from liblinear.liblinearutil import parameter, problem, train
    from sklearn.datasets import load_svmlight_file

    from distsvm.ingest import ingest
    from distsvm.storage.dataset import join_infos
    from distsvm.workers import oneclass as tasks

    with lzma.open(a.data) if a.data.endswith(".xz") else open(a.data, "rb") as f:
        X, y = load_svmlight_file(f)
    prob, param = problem(y, X), parameter(f"-s 21 -n {a.nu} -e {a.eps} -q")
    with tempfile.TemporaryDirectory() as tmp:
        d = ingest((X.astype(np.float32), y), f"{tmp}/s.zarr", block_rows=a.block_rows,
                   shuffle=False)
        meta = d.meta
        info = join_infos(list(meta.blocks)) if len(meta.blocks) > 1 else meta.blocks[0]
        common = dict(offsets={info.name: 0}, cache_bytes=1 << 40, storage_options=None)
        print(f"{a.data}: {meta.n_rows} rows, {meta.n_features} features, {meta.nnz} nnz, "
              f"{len(meta.blocks)} blocks joined")
        for rep in range(a.repeats):
            t = time.perf_counter()
            m = train(prob, param)
            t_ll = time.perf_counter() - t
            w_ll = np.array([m.w[i] for i in range(X.shape[1])])
            fill = {info.name: tasks.masses([meta.n_rows], a.nu * meta.n_rows)[0]}
            t = time.perf_counter()
            w, _, out = tasks.batch(np.zeros(meta.n_features), d.url, [info], f"r{rep}", None,
                                    first=1, max_rounds=1000, every=None, seconds=1e9,
                                    eps=a.eps, n_rows=meta.n_rows, common=common, fill=fill)
            t_us = time.perf_counter() - t
            print(f"repeat {rep}: liblinear {t_ll:.3f} s, distsvm {t_us:.3f} s "
                  f"({len(out['rows'])} rounds), ratio {t_us / t_ll:.2f}; 0.5|w|^2 "
                  f"{0.5 * w_ll @ w_ll:.10g} vs {0.5 * w @ w:.10g}", flush=True)


if __name__ == "__main__":
    main()
