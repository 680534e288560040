"""Benchmark: SVM-ALM vs LIBLINEAR (-s 3, -s 2, -s 1) and distsvm's DCD to 1% of the optimum;
SVM-ALM's training time vs n.

Run from the repository root (needs the `bench` extra; datasets from ../shared/datasets,
a9a also from data/):

    python benchmarks/bench_alm.py --datasets a9a w8a --scaling w8a

Protocol (the paper's §4.3 metric, as benchmarks/bench_dcd.py): the problem is the one all
solvers share, LIBLINEAR's ½‖w‖² + C Σ loss with C = 1 and *no bias* (SVM-ALM with
--no-bias), hinge (p = 1) and squared hinge (p = 2).  f* is the best primal objective of
tight LIBLINEAR, DCD and SVM-ALM runs; a solver's time to 1% is the first time its primal
objective is within 1% of f*.
* LIBLINEAR: a ladder of tolerances (-e 2 … 0.001); the wall time of the loosest run whose
  model is within 1%.
* DCD and SVM-ALM: one run each on an already started single-worker cluster (the block
  cache emptied first); the elapsed time of the first round/iteration whose logged primal
  objective is within 1%, plus the job's set-up time.  Both evaluate the objective every
  round (SVM-ALM inside its first pass at no extra pass).
Scaling: SVM-ALM on the first 10%, 25%, 50%, 100% of a dataset's rows (random order),
squared hinge, no bias, one run of up to --alm-iters iterations: the time of the first 100
iterations (fixed work: the per-iteration cost) and the time to 1% of that subset's f*
(tight LIBLINEAR -s 2, or the run's best if lower); slopes of log time vs log n by least
squares, as the paper's Figure 1.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_dcd import PeakRSS, liblinear_time_to, primal  # noqa: E402
from bench_dcd import liblinear_run as liblinear  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
LIBLINEAR_S = {"hinge": (3,), "squared_hinge": (2, 1)}


def load(name, max_rows):
    from sklearn.datasets import load_svmlight_file

    path = SHARED / f"{name}.xz"
    if not path.exists():
        path = REPO / "data" / f"{name}.xz"
    with lzma.open(path) as f:
        X, y = load_svmlight_file(f)
    if max_rows and X.shape[0] > max_rows:
        idx = np.random.default_rng(0).permutation(X.shape[0])[:max_rows]
        X, y = X[idx], y[idx]
    return X.astype(np.float64).tocsr(), y



def first_within(history, key, target, setup):
    hit = next((r for r in history if r[key] <= target), None)
    return (None, None) if hit is None else (hit["seconds"] + setup,
                                             hit.get("round", hit.get("iteration")))


def timed_train(client, store, **kw):
    import workers.blocks
    from distsvm.jobs import train

    client.run(workers.blocks.clear_cache)
    pids = list(client.run(os.getpid).values())
    with PeakRSS(pids) as rss:
        t = time.perf_counter()
        model = train(store, client=client, **kw)
        wall = time.perf_counter() - t
    return model, wall - model.summary["train_seconds"], rss.peak


def bench_dataset(name, X, y, tmp, client, alm_iters, log):
    import warnings

    from distsvm.ingest import ingest

    store = ingest((X.astype(np.float32), y), os.path.join(tmp, f"{name}.zarr"), overwrite=True)
    s = np.where(y == np.max(y), 1.0, -1.0)
    res = {"dataset": name, "n": X.shape[0], "d": X.shape[1], "nnz": X.nnz, "losses": {}}
    for loss, p in (("hinge", 1.0), ("squared_hinge", 2.0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alm, alm_setup, alm_peak = timed_train(client, store, solver="alm", loss=loss,
                                                   bias=-1.0, max_rounds=alm_iters, rtol=0.0,
                                                   eps=1e-6)
            dcd, dcd_setup, dcd_peak = timed_train(client, store, loss=loss, eps=1e-6,
                                                   max_rounds=300)
        tight = [primal(liblinear(X, y, s_, 1e-4)[0], X, s, loss) for s_ in LIBLINEAR_S[loss]]
        f_star = min(tight + [alm.summary["primal_objective"],
                              min(r["primal"] for r in dcd.summary["history"])])
        target = 1.01 * f_star
        row = {"f_star": f_star,
               "alm_final_rel": alm.summary["primal_objective"] / f_star - 1}
        row["alm_s"], row["alm_iters"] = first_within(alm.summary["history"], "objective",
                                                      target, alm_setup)
        row["alm_passes_per_iter"] = 2
        row["dcd_s"], row["dcd_rounds"] = first_within(dcd.summary["history"], "primal", target,
                                                       dcd_setup)
        row["alm_worker_peak_mb"] = alm_peak / 2**20
        row["dcd_worker_peak_mb"] = dcd_peak / 2**20
        for s_ in LIBLINEAR_S[loss]:
            dt, eps = liblinear_time_to(X, y, s_, target, lambda w: primal(w, X, s, loss))
            if dt is not None:
                row[f"liblinear_s{s_}_s"], row[f"liblinear_s{s_}_eps"] = dt, eps
        res["losses"][loss] = row
        log(f"{name} {loss}: {row}")
    return res


def scaling(name, X, y, tmp, client, alm_iters, log):
    import warnings

    from distsvm.ingest import ingest

    out = []
    for frac in (0.1, 0.25, 0.5, 1.0):
        n = int(round(frac * X.shape[0]))
        Xn, yn = X[:n], y[:n]
        store = ingest((Xn.astype(np.float32), yn), os.path.join(tmp, f"{name}-{n}.zarr"),
                       overwrite=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m, setup, _ = timed_train(client, store, solver="alm", loss="squared_hinge",
                                      bias=-1.0, max_rounds=max(alm_iters, 100), rtol=0.0,
                                      eps=1e-9)
        h = m.summary["history"]
        sn = np.where(yn == np.max(y), 1.0, -1.0)
        f_star = min(primal(liblinear(Xn, yn, 2, 1e-4)[0], Xn, sn, "squared_hinge"),
                     min(r["objective"] for r in h))
        t1, it1 = first_within(h, "objective", 1.01 * f_star, setup)
        row = {"n": n, "t_100_iters": h[99]["seconds"], "t_to_1pct": t1, "iters_to_1pct": it1}
        out.append(row)
        log(f"scaling {name}: {row}")
    ln = np.log([r["n"] for r in out])
    slopes = {k: float(np.polyfit(ln, np.log([r[k] for r in out]), 1)[0])
              for k in ("t_100_iters", "t_to_1pct") if all(r[k] for r in out)}
    return {"dataset": name, "rows": out, "slopes": slopes}


def fmt(v, spec=".3f"):
    return "—" if v is None else format(v, spec)


def table(results, scale):
    lines = ["| dataset | loss | SVM-ALM to 1% (s, iters) | DCD to 1% (s, rounds) | "
             "LIBLINEAR -s 3 / -s 2 / -s 1 to 1% (s) | ALM/best LIBLINEAR | ALM/DCD | "
             "ALM final vs f* | peak MB ALM / DCD worker |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for loss, v in r["losses"].items():
            ll = [v.get(f"liblinear_s{s}_s") for s in (3, 2, 1)]
            best = min(x for x in ll if x is not None)
            ratio = lambda a, b: fmt(a / b if a and b else None, ".2f")  # noqa: E731
            lines.append(
                f"| {r['dataset']} | {loss} | {fmt(v['alm_s'])} ({v['alm_iters']}) | "
                f"{fmt(v['dcd_s'])} ({v['dcd_rounds']}) | {' / '.join(fmt(x) for x in ll)} | "
                f"{ratio(v['alm_s'], best)} | {ratio(v['alm_s'], v['dcd_s'])} | "
                f"{v['alm_final_rel']:.1e} | {v['alm_worker_peak_mb']:.0f} / "
                f"{v['dcd_worker_peak_mb']:.0f} |")
    if scale:
        lines += ["", f"Training time vs n ({scale['dataset']}, squared hinge, no bias):", "",
                  "| n | 100 iterations (s) | to 1% (s, iters) |", "|---|---|---|"]
        for r in scale["rows"]:
            lines.append(f"| {r['n']} | {r['t_100_iters']:.3f} | {fmt(r['t_to_1pct'])} "
                         f"({r['iters_to_1pct']}) |")
        lines.append("\nlog-log slopes: " + ", ".join(f"{k} {v:.2f}"
                                                       for k, v in scale["slopes"].items()))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["a9a", "w8a"])
    p.add_argument("--max-rows", type=int, default=0,
                   help="random subset of at most this many rows per dataset (0: all)")
    p.add_argument("--alm-iters", type=int, default=300)
    p.add_argument("--scaling", metavar="DATASET", help="also measure time vs n on DATASET")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    from distributed import Client, LocalCluster

    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    results, scale = [], None
    with tempfile.TemporaryDirectory(prefix="distsvm-bench-alm-") as tmp, \
            LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                         dashboard_address=None) as lc, Client(lc) as client:
        for name in a.datasets:
            X, y = load(name, a.max_rows)
            results.append(bench_dataset(name, X, y, tmp, client, a.alm_iters, log))
        if a.scaling:
            X, y = load(a.scaling, a.max_rows)
            scale = scaling(a.scaling, X, y, tmp, client, a.alm_iters, log)
    print(table(results, scale))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"results": results, "scaling": scale},
                                                   indent=1))


if __name__ == "__main__":
    main()
