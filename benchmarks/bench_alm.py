"""Benchmark: SVM-ALM vs LIBLINEAR (-s 3, -s 2, -s 1) and distsvm's DCD to 1% of the optimum;
SVM-ALM's training time vs n.

Run from the repository root (needs the `bench` extra; datasets from ../shared/datasets,
a9a also from data/):

    python benchmarks/bench_alm.py --datasets a9a w8a pendigits-lt5 pendigits-0 pypi-summaries \
        --repeats 3 --alm-iters 150
    python benchmarks/bench_alm.py --datasets --scaling pypi-summaries \
        --generated 1000000 3000000 10000000 --alm-iters 130

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
* Times are medians of --repeats runs for datasets under 5·10⁶ non-zeros (f* is then the
  best over all runs), one run for larger ones.
* pendigits (10 digits, features 0…100) is made binary and scaled to [0, 1] (÷100, as the
  LIBSVM "scale" sets): ``pendigits-lt5`` is digits 0-4 (−1) vs 5-9 (+1),
  ``pendigits-D`` digit D (+1) vs the rest (−1).
Scaling: SVM-ALM on the first 10%, 30%, 100% of a dataset's rows (random order),
squared hinge, no bias, one run of up to --alm-iters iterations: the time of the first
--fixed-iters iterations (fixed work: the per-iteration cost) and the time to 1% of that
subset's f* (tight LIBLINEAR -s 2, or the run's best if lower); slopes of log time vs log n
by least squares, as the paper's Figure 1.  --generated N…: the same on stores written by
`distsvm generate` (N rows, 100,000 features, 10 non-zeros a row, seed 0; each deleted after
its run); LIBLINEAR cannot load 10⁷ rows here, so f* is the run's own best objective.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import pathlib
import shutil
import statistics
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
    """A dataset by name; ``pendigits-lt5`` / ``pendigits-D`` are binary splits of pendigits."""
    from sklearn.datasets import load_svmlight_file

    base, _, split = name.partition("-") if name.startswith("pendigits-") else (name, "", "")
    path = SHARED / f"{base}.xz"
    if not path.exists():
        path = REPO / "data" / f"{base}.xz"
    with lzma.open(path) as f:
        X, y = load_svmlight_file(f)
    if split:
        X = X / 100.0
        y = np.where(y >= 5, 1.0, -1.0) if split == "lt5" else np.where(y == int(split), 1.0, -1.0)
    if max_rows and X.shape[0] > max_rows:
        idx = np.random.default_rng(0).permutation(X.shape[0])[:max_rows]
        X, y = X[idx], y[idx]
    return X.astype(np.float64).tocsr(), y


def first_within(history, key, target, setup):
    hit = next((r for r in history if r[key] <= target), None)
    return (None, None) if hit is None else (hit["seconds"] + setup,
                                             hit.get("round", hit.get("iteration")))


def timed_train(client, store, **kw):
    import distsvm.workers.blocks
    from distsvm.jobs import train

    client.run(distsvm.workers.blocks.clear_cache)
    pids = list(client.run(os.getpid).values())
    with PeakRSS(pids) as rss:
        t = time.perf_counter()
        model = train(store, client=client, **kw)
        wall = time.perf_counter() - t
    return model, wall - model.summary["train_seconds"], rss.peak


def median_within(runs, key, target):
    """Median over runs of (time, iterations) to ``target`` (None if a run never gets there)."""
    hits = [first_within(m.summary["history"], key, target, setup) for m, setup, _ in runs]
    if any(t is None for t, _ in hits):
        return None, None
    return statistics.median(t for t, _ in hits), statistics.median(i for _, i in hits)


def bench_dataset(name, X, y, tmp, client, alm_iters, repeats, log):
    import warnings

    from distsvm.ingest import ingest

    store = ingest((X.astype(np.float32), y), os.path.join(tmp, f"{name}.zarr"), overwrite=True)
    s = np.where(y == np.max(y), 1.0, -1.0)
    repeats = repeats if X.nnz < 5e6 else 1
    res = {"dataset": name, "n": X.shape[0], "d": X.shape[1], "nnz": X.nnz, "repeats": repeats,
           "losses": {}}
    for loss in ("hinge", "squared_hinge"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alm = [timed_train(client, store, solver="alm", loss=loss, bias=-1.0,
                               max_rounds=alm_iters, rtol=0.0, eps=1e-6) for _ in range(repeats)]
            dcd = [timed_train(client, store, loss=loss, eps=1e-6, max_rounds=300)
                   for _ in range(repeats)]
        tight = [primal(liblinear(X, y, s_, 1e-4)[0], X, s, loss) for s_ in LIBLINEAR_S[loss]]
        f_star = min(tight + [m.summary["primal_objective"] for m, _, _ in alm]
                     + [min(r["primal"] for r in m.summary["history"]) for m, _, _ in dcd])
        target = 1.01 * f_star
        row = {"f_star": f_star,
               "alm_final_rel": alm[0][0].summary["primal_objective"] / f_star - 1}
        row["alm_s"], row["alm_iters"] = median_within(alm, "objective", target)
        row["alm_passes_per_iter"] = 2
        row["dcd_s"], row["dcd_rounds"] = median_within(dcd, "primal", target)
        row["alm_worker_peak_mb"] = max(r for _, _, r in alm) / 2**20
        row["dcd_worker_peak_mb"] = max(r for _, _, r in dcd) / 2**20
        for s_ in LIBLINEAR_S[loss]:
            hits = [liblinear_time_to(X, y, s_, target, lambda w: primal(w, X, s, loss))
                    for _ in range(repeats)]
            if all(dt is not None for dt, _ in hits):
                row[f"liblinear_s{s_}_s"] = statistics.median(dt for dt, _ in hits)
                row[f"liblinear_s{s_}_eps"] = hits[0][1]
        res["losses"][loss] = row
        log(f"{name} {loss}: {row}")
    return res


def scaling_run(client, store, alm_iters, fixed_iters, f_ref):
    """One SVM-ALM run for the scaling table: (time of ``fixed_iters`` iterations, time and
    iterations to 1% of min(f_ref, the run's best))."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m, setup, _ = timed_train(client, store, solver="alm", loss="squared_hinge", bias=-1.0,
                                  max_rounds=max(alm_iters, fixed_iters), rtol=0.0, eps=1e-9)
    h = m.summary["history"]
    f_star = min([f_ref, *(r["objective"] for r in h)])
    t1, it1 = first_within(h, "objective", 1.01 * f_star, setup)
    return {"n": m.summary["n_rows"],
            "t_fixed_iters": h[fixed_iters - 1]["seconds"], "t_to_1pct": t1,
            "iters_to_1pct": it1}


def slopes(rows):
    ln = np.log([r["n"] for r in rows])
    return {k: float(np.polyfit(ln, np.log([r[k] for r in rows]), 1)[0])
            for k in ("t_fixed_iters", "t_to_1pct") if all(r[k] for r in rows)}


def scaling(name, X, y, tmp, client, alm_iters, fixed_iters, log):
    from distsvm.ingest import ingest

    out = []
    for frac in (0.1, 0.3, 1.0):
        n = int(round(frac * X.shape[0]))
        Xn, yn = X[:n], y[:n]
        store = ingest((Xn.astype(np.float32), yn), os.path.join(tmp, f"{name}-{n}.zarr"),
                       overwrite=True)
        sn = np.where(yn == np.max(y), 1.0, -1.0)
        f_ll = primal(liblinear(Xn, yn, 2, 1e-4)[0], Xn, sn, "squared_hinge")
        out.append(scaling_run(client, store, alm_iters, fixed_iters, f_ll))
        shutil.rmtree(store.url, ignore_errors=True)
        log(f"scaling {name}: {out[-1]}")
    return {"dataset": name, "rows": out, "slopes": slopes(out)}


def scaling_generated(sizes, tmp, client, alm_iters, fixed_iters, log):
    """The scaling runs on `distsvm generate` stores (f* = each run's own best objective)."""
    from distsvm.generate import generate

    out = []
    for n in sizes:
        path = os.path.join(tmp, f"generated-{n}.zarr")
        t = time.perf_counter()
        store = generate(path, rows=n, features=100_000, nnz_per_row=10, seed=0, client=client)
        log(f"generated {n} rows, {store.meta.nnz} non-zeros in {time.perf_counter() - t:.0f}s")
        try:
            out.append(scaling_run(client, store, alm_iters, fixed_iters, np.inf))
        finally:
            shutil.rmtree(path, ignore_errors=True)
        log(f"scaling generated: {out[-1]}")
    return {"dataset": "generated (distsvm generate, 100k features, 10 nnz/row)", "rows": out,
            "slopes": slopes(out)}


def fmt(v, spec=".3f"):
    return "—" if v is None else format(v, spec)


def table(results, scales, fixed_iters):
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
    for scale in scales:
        lines += ["", f"Training time vs n ({scale['dataset']}, squared hinge, no bias):", "",
                  f"| n | {fixed_iters} iterations (s) | to 1% (s, iters) |", "|---|---|---|"]
        for r in scale["rows"]:
            lines.append(f"| {r['n']} | {r['t_fixed_iters']:.3f} | {fmt(r['t_to_1pct'])} "
                         f"({r['iters_to_1pct']}) |")
        lines.append("\nlog-log slopes: " + ", ".join(f"{k} {v:.2f}"
                                                       for k, v in scale["slopes"].items()))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="*", default=["a9a", "w8a"],
                   help="datasets of the time-to-1%% table (pendigits-lt5, pendigits-D: splits)")
    p.add_argument("--max-rows", type=int, default=0,
                   help="random subset of at most this many rows per dataset (0: all)")
    p.add_argument("--alm-iters", type=int, default=300)
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per solver (median) on datasets under 5e6 non-zeros")
    p.add_argument("--scaling", metavar="DATASET", help="also measure time vs n on DATASET")
    p.add_argument("--generated", nargs="*", type=int, default=[], metavar="N",
                   help="also measure time vs n on generated stores of N rows")
    p.add_argument("--fixed-iters", type=int, default=100,
                   help="the scaling tables' fixed-work column: time of this many iterations")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    from distributed import Client, LocalCluster

    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    results, scales = [], []
    with tempfile.TemporaryDirectory(prefix="distsvm-bench-alm-") as tmp, \
            LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                         dashboard_address="127.0.0.1:0") as lc, Client(lc) as client:
        for name in a.datasets:
            X, y = load(name, a.max_rows)
            results.append(bench_dataset(name, X, y, tmp, client, a.alm_iters, a.repeats,
                                         log))
        if a.scaling:
            X, y = load(a.scaling, a.max_rows)
            scales.append(scaling(a.scaling, X, y, tmp, client, a.alm_iters, a.fixed_iters,
                                  log))
        if a.generated:
            scales.append(scaling_generated(a.generated, tmp, client, a.alm_iters,
                                            a.fixed_iters, log))
    print(table(results, scales, a.fixed_iters))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"results": results, "scaling": scales},
                                                   indent=1))


if __name__ == "__main__":
    main()
