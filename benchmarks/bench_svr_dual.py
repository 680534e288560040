"""Benchmark: L1-/L2-loss SVR by dual CD (-s 13, -s 12), distsvm on one worker against
LIBLINEAR 2.50, each with its default options (C = 1, p = 0.1, eps = 0.1), on the regression
sets of ../shared/datasets/regression (benchmarks/race.py has no regression rows yet).

    nice python benchmarks/bench_svr_dual.py --data abalone_scale cpusmall_scale --repeats 5

Per dataset and type: LIBLINEAR's training time (``train()`` on the built ``problem``, as
race.py times it) and iterations (its ``#iter`` line); distsvm's ``train_seconds`` and
rounds from ``distsvm train STORE MODEL -s N --workers 1 --json`` (the store ingested once,
untimed), and the whole command's wall time; each one's primal objective relative to f*
(LIBLINEAR at -e 1e-6; for -s 13 its 300-iteration cap may leave f* short) and training MSE.
Medians of --repeats runs, the tools interleaved.  ``--replicate K`` trains on each set's
rows repeated K times (a larger problem of the same shape, to see the fixed costs
amortize).  Then "where the time goes" in distsvm's
train_seconds: the kernel's passes alone on the same rows (in this process, after a warm-up),
against the rest (Dask tasks, the joined block's read, the final loss pass).
"""

from __future__ import annotations

import argparse
import json
import lzma
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
LOSSES = {12: "squared_epsilon_insensitive", 13: "epsilon_insensitive"}


def load(path):
    from sklearn.datasets import load_svmlight_file

    with lzma.open(path) as f:
        X, y = load_svmlight_file(f)
    return X.astype(np.float32).tocsr(), y


def objective(w, X, y, s, C=1.0, p=0.1):
    r = X.astype(np.float64) @ w[:X.shape[1]] - y
    d = np.maximum(0.0, np.abs(r) - p)
    return 0.5 * float(w @ w) + C * float((d if s == 13 else d * d).sum()), float(np.mean(r * r))


def liblinear(X, y, s, eps=None):
    """(seconds of train(), w, #iter)."""
    from liblinear.liblinearutil import parameter, problem, train

    prob = problem(y, X.astype(np.float64))
    param = parameter(f"-s {s} -q" + (f" -e {eps}" if eps else ""))
    t = time.perf_counter()
    m = train(prob, param)
    seconds = time.perf_counter() - t
    return seconds, np.array([m.w[i] for i in range(X.shape[1])])


def liblinear_iters(path, s, replicate=1):
    """LIBLINEAR's #iter line for -s s at its defaults (a child process: it prints to fd 1)."""
    code = (f"from benchmarks.bench_svr_dual import load; from liblinear.liblinearutil import *;"
            f"import scipy.sparse as sp, numpy as np; X, y = load({str(path)!r}); "
            f"X, y = sp.vstack([X] * {replicate}).tocsr(), np.tile(y, {replicate}); "
            f"train(y, X.astype(float), '-s {s}')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO).stdout
    return int(re.search(r"#iter = (\d+)", out).group(1))


def distsvm_train(store, s, model):
    """(train_seconds, rounds, wall seconds, w) of the CLI on one worker."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "distsvm.cli", "train", store, model, "-s",
                          str(s), "--workers", "1", "--json", "-q"], capture_output=True,
                         text=True, cwd=REPO)
    wall = time.perf_counter() - t
    if out.returncode:
        raise RuntimeError(out.stderr)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    from distsvm.model import load_model

    return j["train_seconds"], j["rounds"], wall, load_model(model).w


def kernel_seconds(X, y, s, rounds, seed=1):
    """The SVR kernel's passes alone, ``rounds`` of them as one call each (warm)."""
    from distsvm.workers import losses
    from distsvm.workers.kernels import svr_dual
    from distsvm.workers.kernels.linear import row_sqnorms

    n, d = X.shape
    sq = np.empty(n)
    row_sqnorms(X.indptr, X.data, sq)
    best = np.inf
    for _ in range(3):
        w, beta = np.zeros(d), np.zeros(n)
        state, index = svr_dual.new_state(n)
        t = time.perf_counter()
        for r in range(rounds):
            svr_dual.svr_passes(X.indptr, X.indices, X.data, y, sq, w, -1.0, d, beta, index,
                                state, losses.code(LOSSES[s]), np.ones(n), 0.1, 0.1, 1,
                                seed + r, False)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["abalone_scale", "cpusmall_scale"])
    ap.add_argument("--s", nargs="+", type=int, default=[12, 13])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--replicate", type=int, default=1)
    ap.add_argument("--datasets", default=str(REPO.parent / "shared" / "datasets" / "regression"))
    args = ap.parse_args()
    from distsvm.ingest import ingest

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-svr-"))
    print("| data | -s | LIBLINEAR train s | iters | rel f* | MSE | distsvm-1w train s | rounds "
          "| rel f* | MSE | ratio | wall s | kernel s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.data:
        path = pathlib.Path(args.datasets) / f"{name}.xz"
        X, y = load(path)
        if args.replicate > 1:
            import scipy.sparse as sp
            from sklearn.datasets import dump_svmlight_file

            X, y = sp.vstack([X] * args.replicate).tocsr(), np.tile(y, args.replicate)
            name = f"{name}x{args.replicate}"
            dump_svmlight_file(X, y, str(work / f"{name}.svm"), zero_based=False)
        store = str(work / f"{name}.zarr")
        ingest(str(work / f"{name}.svm") if args.replicate > 1 else str(path), store,
               regression=True)
        for s in args.s:
            f_star = objective(liblinear(X, y, s, eps=1e-6)[1], X, y, s)[0]
            iters = liblinear_iters(path, s, args.replicate)
            ll, ds = [], []
            for _ in range(args.repeats):
                ll.append(liblinear(X, y, s))
                ds.append(distsvm_train(store, s, str(work / f"{name}-{s}.json")))
            t_ll = statistics.median(r[0] for r in ll)
            t_ds = statistics.median(r[0] for r in ds)
            wall = statistics.median(r[2] for r in ds)
            rounds = ds[-1][1]
            f_ll, mse_ll = objective(ll[-1][1], X, y, s)
            f_ds, mse_ds = objective(ds[-1][3], X, y, s)
            k = kernel_seconds(X, y, s, rounds)
            print(f"| {name} | {s} | {t_ll:.4f} | {iters} | {f_ll / f_star - 1:.1e} | "
                  f"{mse_ll:.4f} | {t_ds:.4f} | {rounds} | {f_ds / f_star - 1:.1e} | "
                  f"{mse_ds:.4f} | {t_ds / t_ll:.1f}x | {wall:.2f} | {k:.4f} |", flush=True)


if __name__ == "__main__":
    main()
