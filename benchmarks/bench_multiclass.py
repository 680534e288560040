"""Benchmark: one-vs-rest on news20 (20 classes) with 2 workers vs LIBLINEAR, in one run.

Run from the repository root (needs the `bench` extra and ../shared/datasets):

    nice -n 10 python benchmarks/bench_multiclass.py --s 1 --eps 0.1

Protocol: news20 (LIBSVM's term counts, 15,935 rows × 62,061 features; the shared copy
has no test split) with every row scaled to unit length (as news20.binary and LIBLINEAR's
guide for documents; on the raw counts LIBLINEAR's own dual solver stops at its
300-iteration limit and falls back to the primal one, ``--raw`` keeps them), split 80/20 by
a fixed random permutation.  Both
train the 20 binary problems (class k against the rest, LIBLINEAR ``-s S -c C -e EPS``;
distsvm ``LIBLINEAR_TYPES[S]`` with the same C and eps) on the 80% and predict the 20%.
* LIBLINEAR: the Python binding of liblinear-official, single thread, in this process
  (``train`` of the 80%, timed without loading the data).
* distsvm: a 2-worker local cluster started beforehand, the 80% already in a store (two
  blocks), blocks cached by a warm-up run (each worker reads both: its problems' rounds
  visit every block; the figure is the training time once the data is in the workers'
  memory, the cold read of 8 MB adds well under a second).
Reported: the median wall time of ``--repeats`` runs of each, the ratio distsvm /
LIBLINEAR, test accuracy, and the sum over the 20 problems of the primal objectives (each
solver's own stopping point at the same eps; relative difference to LIBLINEAR's).
"""

from __future__ import annotations

import argparse
import lzma
import pathlib
import sys
import tempfile
import time
import warnings

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
sys.path.insert(0, str(REPO))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--s", type=int, default=1, choices=(1, 3, 7))
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--raw", action="store_true", help="keep the raw term counts")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each; medians")
    args = ap.parse_args()

    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import train as ll_train
    from sklearn.datasets import load_svmlight_file
    from sklearn.preprocessing import normalize

    from distsvm.ingest import ingest
    from distsvm.jobs import train
    from distsvm.solvers.registry import LIBLINEAR_TYPES
    from tests.conftest import local_client, primal_objective
    from tests.test_multiclass import liblinear_weights

    with lzma.open(SHARED / "news20.xz") as f:
        X, y = load_svmlight_file(f, n_features=62061)
    X = (X if args.raw else normalize(X)).astype(np.float32).tocsr()
    perm = np.random.default_rng(0).permutation(X.shape[0])
    cut = int(0.8 * len(perm))
    Xtr, ytr, Xte, yte = X[perm[:cut]], y[perm[:cut]], X[perm[cut:]], y[perm[cut:]]
    classes = np.unique(ytr)
    solver, loss = LIBLINEAR_TYPES[args.s]

    prob = problem(ytr, Xtr.astype(np.float64))
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        W_ll = liblinear_weights(ll_train(prob, parameter(
            f"-s {args.s} -c {args.C} -e {args.eps} -q")))
        times.append(time.perf_counter() - t)
    t_ll = float(np.median(times))
    print(f"LIBLINEAR: {t_ll:.2f} s (median of {times})", flush=True)

    with tempfile.TemporaryDirectory() as tmp, local_client(2) as client:
        store = ingest((Xtr, ytr), str(pathlib.Path(tmp) / "news20.zarr"),
                       block_rows=(cut + 1) // 2, client=client)
        opts = dict(solver=solver, loss=loss, C=args.C, eps=args.eps, client=client)
        with warnings.catch_warnings():  # warm-up: JIT on the workers, block caches
            warnings.simplefilter("ignore")
            train(store, **{**opts, "max_rounds": 1})
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            model = train(store, **opts)
            times.append(time.perf_counter() - t)
        t_ds = float(np.median(times))
        print(f"distsvm: {t_ds:.2f} s (median of {times})", flush=True)

    def acc(W):
        return float(np.mean(classes[np.argmax(Xte.astype(np.float64) @ W.T, axis=1)] == yte))

    def obj(W):
        return sum(primal_objective(W[k], Xtr, np.where(ytr == c, 1.0, 0.0), loss, args.C)
                   for k, c in enumerate(classes))

    o_ds, o_ll = obj(model.w), obj(W_ll)
    print(f"news20 one-vs-rest, 20 classes, -s {args.s} -c {args.C:g} -e {args.eps:g}, "
          f"{Xtr.shape[0]} training / {Xte.shape[0]} test rows")
    print(f"{'':12s} {'seconds':>8s} {'accuracy':>9s} {'sum of objectives':>18s}")
    print(f"{'LIBLINEAR':12s} {t_ll:8.2f} {100 * acc(W_ll):8.2f}% {o_ll:18.6g}")
    print(f"{'distsvm 2w':12s} {t_ds:8.2f} {100 * acc(model.w):8.2f}% {o_ds:18.6g}")
    print(f"ratio distsvm/LIBLINEAR {t_ds / t_ll:.2f}x; objectives differ by "
          f"{(o_ds - o_ll) / o_ll:+.2e} relative; rounds per class "
          f"{[s['rounds'] for s in model.summary['per_class']]}")


if __name__ == "__main__":
    main()
