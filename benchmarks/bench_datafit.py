"""Benchmark: one pass of every kernel that evaluates a loss, on a9a (or ``--data``) in
float32, against the same kernels of another source tree in the same process.

Written to check that moving ξ, ξ′, ξ″, Dᵢᵢ and U into ``workers/losses.py`` (issue 17,
item 5) costs nothing: Numba must inline the datafit functions into the kernels; used again
for the prefetching of rows and columns (``distsvm.workers.kernels.linear.prefetch_ahead``), whose
gain shows on data larger than the caches (``--data .../pypi-summaries.xz``).  Run from
the repository root, with the tree to compare against unpacked somewhere:

    git archive <commit> workers | tar -x -C /tmp/before
    nice python benchmarks/bench_datafit.py --against /tmp/before

Protocol: a9a (32,561 rows × 123 features, 451,592 non-zeros) as float32 CSR, int64
indptr and int32 indices as in the store (float32 CSC for PCD), bias feature 1.0, C = 1,
y = +1 for the larger label.  The other tree's ``workers`` package is imported under
another name, so both trees' kernels run in one process and their repeats alternate:
both see the same load.  Each stateful kernel first runs a few untimed passes (the warm-up
also compiles it or loads it from Numba's cache), so one pass is timed at a mid-solve
state; every repeat starts from a copy of that state, made outside the timing, so each
repeat does the same work.  ``w`` for the stateless kernels is the squared-hinge DCD
iterate after 10 passes (a mix of margins on both sides of 1).  Figures are medians of
``--repeats`` runs in milliseconds, and the ratio of the two trees' medians; the ratio of
their minima is printed too, as the figure least disturbed by other load.  The load
average is printed before and after.

``--inlined`` compiles every kernel afresh (an empty Numba cache) and lists, per kernel, the
calls to a ``losses`` function left in its optimized LLVM IR: none when Numba inlined them.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import lzma
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = pathlib.Path("/work/shared/datasets/a9a.xz")
BIAS = 1.0
SEED = 7
KERNELS = ("alm", "cutting_plane", "dcd", "dcd_lr", "linear", "newton", "pcd")


def load(path):
    """A LIBSVM file (xz-compressed or plain) as float32 CSR, y = 1 for labels > 0."""
    from sklearn.datasets import load_svmlight_file

    with (lzma.open(path) if str(path).endswith(".xz") else open(path, "rb")) as f:
        X, labels = load_svmlight_file(f, dtype=np.float32)
    y = (labels > 0).astype(np.int32)
    X.indptr = X.indptr.astype(np.int64)
    X.indices = X.indices.astype(np.int32)
    return X, y


def load_workers(tree: pathlib.Path, name: str) -> dict:
    """The ``workers`` package of ``tree`` imported as ``name``: its losses and kernels."""
    spec = importlib.util.spec_from_file_location(
        name, tree / "workers" / "__init__.py", submodule_search_locations=[str(tree / "workers")])
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    mods = {k: importlib.import_module(f"{name}.kernels.{k}") for k in KERNELS}
    mods["losses"] = importlib.import_module(f"{name}.losses")
    return mods


def cases(k, X, y):
    """{case: (fn, setup)} for the kernels ``k``: ``fn(*setup())`` is one timed pass."""
    losses, dcd, dcd_lr, pcd = k["losses"], k["dcd"], k["dcd_lr"], k["pcd"]
    newton, linear, alm, cutting_plane = k["newton"], k["linear"], k["alm"], k["cutting_plane"]
    n, d = X.shape
    Xc = X.tocsc()
    Xc.indptr = Xc.indptr.astype(np.int64)
    Xc.indices = Xc.indices.astype(np.int32)
    csr, csc = (X.indptr, X.indices, X.data), (Xc.indptr, Xc.indices, Xc.data)
    dim = d + 1
    cost = np.ones(n)
    sqnorm, colsq = np.empty(n), np.empty(d)
    linear.row_sqnorms(X.indptr, X.data, sqnorm)
    linear.row_sqnorms(Xc.indptr, Xc.data, colsq)
    out = {}

    def dcd_state(loss, passes):
        w, alpha = np.zeros(dim), np.zeros(n)
        state, index = dcd.new_state(n)
        dcd.dcd_passes(*csr, y, 1, sqnorm, w, BIAS, d, alpha, index, state, loss, cost, 0.1,
                       passes, SEED)
        return w, alpha, state, index

    w_mid = dcd_state(losses.SQUARED_HINGE, 10)[0]
    for name in ("hinge", "squared_hinge"):
        code = losses.code(name)
        w0, a0, s0, i0 = dcd_state(code, 3)
        out[f"dcd.dcd_passes {name}"] = (
            lambda w, a, s, i, code=code: dcd.dcd_passes(*csr, y, 1, sqnorm, w, BIAS, d, a, i, s,
                                                         code, cost, 0.1, 1, SEED),
            lambda w0=w0, a0=a0, s0=s0, i0=i0: (w0.copy(), a0.copy(), s0.copy(), i0.copy()))
        out[f"dcd.dual_stats {name}"] = (
            lambda w0=w0, a0=a0, code=code: dcd.dual_stats(*csr, y, 1, w0, BIAS, d, a0, code,
                                                           cost), tuple)

    w0, a0, ac0 = np.zeros(dim), np.zeros(n), np.zeros(n)
    i0 = np.arange(n, dtype=np.int32)
    innereps = dcd_lr.lr_passes(*csr, y, 1, sqnorm, w0, BIAS, d, a0, ac0, cost, i0, 1e-2, 0.01,
                                3, SEED)[3]
    out["dcd_lr.lr_passes logistic"] = (
        lambda w, a, ac, i: dcd_lr.lr_passes(*csr, y, 1, sqnorm, w, BIAS, d, a, ac, cost, i,
                                             innereps, 0.01, 1, SEED),
        lambda: (w0.copy(), a0.copy(), ac0.copy(), i0.copy()))

    db = np.sin(np.arange(n))
    for name in ("squared_hinge", "logistic"):
        code = losses.code(name)
        w1, b1 = np.zeros(dim), np.ones(n)
        for s in range(3):
            pcd.pcd_columns(*csc, 0, colsq, y, 1, b1, w1, code, cost, SEED + s, s == 0,
                            pcd.new_stats())
        out[f"pcd.pcd_columns {name}"] = (
            lambda w, b, code=code: pcd.pcd_columns(*csc, 0, colsq, y, 1, b, w, code, cost, SEED,
                                                    False, pcd.new_stats()),
            lambda w1=w1, b1=b1: (w1.copy(), b1.copy()))
        out[f"pcd.loss_sum {name}"] = (
            lambda b1=b1, code=code: pcd.loss_sum(b1, db, 0.5, code, cost), tuple)

    z, D, t = np.empty(n), np.empty(n), np.sin(np.arange(n))
    z_mid = np.empty(n)
    linear.decision_values(*csr, w_mid, BIAS, d, z_mid)
    for name in ("logistic", "squared_hinge"):
        code = losses.code(name)
        out[f"newton.fun_grad {name}"] = (
            lambda wgd, code=code: newton.fun_grad(*csr, y, 1, cost, wgd, BIAS, d, code, z, D),
            lambda: (newton.side_by_side(w_mid, None, None),))
        out[f"newton.loss_along {name}"] = (
            lambda code=code: newton.loss_along(y, 1, cost, z_mid, t, 0.5, code), tuple)

    W = np.stack([w_mid, -w_mid])
    positives = np.array([1, 0], dtype=np.int32)
    totals, correct = np.zeros(2), np.zeros(2, dtype=np.int64)
    for name in ("hinge", "squared_hinge", "logistic"):
        code = losses.code(name)
        out[f"linear.loss_sums {name}"] = (
            lambda code=code: linear.loss_sums(*csr, y, positives, W, BIAS, d, code,
                                               np.ones((2, 2)), np.empty(0), totals, correct),
            tuple)

    for p in (1.0, 2.0, 1.5):
        lam, e = np.zeros(n), np.zeros(n)
        alm.alm_pass(*csr, y, 1, w_mid, BIAS, d, lam, e, 0.0, 0.01, 1.0, p, np.zeros(d),
                     np.zeros(d))
        out[f"alm.alm_pass p={p:g}"] = (
            lambda la, ee, xtr, gl, p=p: alm.alm_pass(*csr, y, 1, w_mid, BIAS, d, la, ee, 0.01,
                                                      0.0102, 1.0, p, xtr, gl),
            lambda lam=lam, e=e: (lam.copy(), e.copy(), np.zeros(d), np.zeros(d)))

    out["cutting_plane.hinge_cut hinge"] = (
        lambda o: cutting_plane.hinge_cut(*csr, y, 1, w_mid, BIAS, d, o),
        lambda: (np.zeros(dim),))
    return out


def calls_to_losses(mods) -> dict:
    """{kernel: names of the ``losses`` functions it still calls} over the compiled kernels."""
    left = {}
    for name in KERNELS:
        for attr, f in vars(mods[name]).items():
            for ir in getattr(f, "inspect_llvm", dict)().values():
                called = set(re.findall(r"call [^\n]*@\"?_ZN\w*?6losses\d+(\w+?)B\d", ir))
                if called:
                    left[f"{name}.{attr}"] = sorted(called)
    return left


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=str(REPO), help="the tree to measure (default: this one)")
    ap.add_argument("--against", help="a tree to compare with, e.g. the commit before a change")
    ap.add_argument("--data", default=str(DATA), help="a LIBSVM file (default: a9a)")
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--only", default="", help="time only the cases whose name contains this")
    ap.add_argument("--inlined", action="store_true",
                    help="compile afresh and list the calls to losses functions left in the kernels")
    a = ap.parse_args()
    # before Numba is imported: a cache of its own — the trees' workers are imported under
    # other names, and their compiled kernels must not land in the trees' own caches (a
    # later import as ``workers`` would load them and fail) — and an empty one with
    # --inlined, so that inspect_llvm has the IR
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_datafit_")
    trees = {"this": a.tree} | ({"against": a.against} if a.against else {})
    X, y = load(a.data)
    runs = {label: cases(load_workers(pathlib.Path(tree), f"workers_{label}"), X, y)
            for label, tree in trees.items()}
    for label in runs:  # compile or load from the cache what the set-up has not run
        for fn, setup in runs[label].values():
            fn(*setup())
    print(f"trees {trees}; load average before {os.getloadavg()}", flush=True)
    times = {label: {case: [] for case in runs[label] if a.only in case} for label in runs}
    for _ in range(a.repeats):  # repeat by repeat, case by case, tree by tree
        for case in times["this"]:
            for label in runs:
                fn, setup = runs[label][case]
                args = setup()
                t0 = time.perf_counter()
                fn(*args)
                times[label][case].append((time.perf_counter() - t0) * 1e3)
    print(f"load average after {os.getloadavg()}")
    if a.inlined:
        for label in runs:
            left = calls_to_losses({k: sys.modules[f"workers_{label}.kernels.{k}"] for k in KERNELS})
            print(f"{label}: calls to losses functions left in the kernels: {left or 'none'}")
    print(f"{'kernel, loss':34s} {'this ms':>9s}" + (f" {'against ms':>10s}  ratio  ratio of minima"
                                                      if a.against else ""))
    for case, ts in times["this"].items():
        line = f"{case:34s} {statistics.median(ts):9.3f}"
        if a.against:
            ref = times["against"][case]
            line += (f" {statistics.median(ref):10.3f}  {statistics.median(ts) / statistics.median(ref):5.2f}"
                     f"  {min(ts) / min(ref):5.2f}")
        print(line)


if __name__ == "__main__":
    main()
