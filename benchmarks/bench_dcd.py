"""Benchmark: DCD vs LIBLINEAR (-s 3 / -s 1) to 1% of the optimum, and ingest vs load_svmlight_file.

Run from the repository root (needs the `bench` extra and ../shared/datasets):

    python benchmarks/bench_dcd.py --datasets a9a pypi-summaries --repeats 3

Protocol (the papers' metric, Hsieh et al. 2008 eq. (20)): the optimum f* is the best
primal objective of a tight LIBLINEAR run (-e 1e-4) and a tight distsvm run (stopped by a
relative duality gap of 1e-4, or 1000 rounds); the distsvm run's dual objective bounds the
true optimum from below, and the table reports how tightly f* is certified by it.  A
solver's time to 1% is the first time its primal objective is within 1% of f*.
* LIBLINEAR: trained with a ladder of tolerances (-e 1, 0.5, 0.2, 0.1, ...); its time to
  1% is the wall time of the loosest run whose model is within 1%.
* distsvm: one run on an already started single-worker cluster with the data in the store
  (block cache emptied first, so blocks are read from disk); its time to 1% is the elapsed
  time of the first round whose logged primal objective is within 1%, plus the job's
  set-up time.  Each round also evaluates the primal objective (one extra pass), which
  LIBLINEAR does not do; that cost is included.
* Ingest: the same plain LIBSVM file parsed by scikit-learn's load_svmlight_file and
  ingested by distsvm on a 2-worker local cluster (parse, shuffle, compress, write).
Times are medians over --repeats runs; peak memory is the peak RSS of the processes doing
the work (LIBLINEAR: a child process that loads and trains; distsvm: the worker).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import lzma
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
LOSSES = {"hinge": 3, "squared_hinge": 1}
LADDER = [10.0, 5.0, 2.0, 1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001]


class PeakRSS:
    """Peak resident memory of some processes (sampled every 20 ms)."""

    def __init__(self, pids):
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(p.memory_info().rss for p in self.procs))
            time.sleep(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def primal(w, X, s, loss, C=1.0):
    xi = np.maximum(0.0, 1.0 - s * (X @ w[: X.shape[1]]))
    return 0.5 * float(w @ w) + C * float(np.sum(xi if loss == "hinge" else xi * xi))


def liblinear_run(X, y, s, eps, C=1.0):
    """LIBLINEAR ``-s s -c C -e eps``: its weights (positive class = the larger label, as
    distsvm) and the training time, problem construction excluded."""
    from liblinear.liblinearutil import parameter, problem, train

    prob = problem(y, X)
    t = time.perf_counter()
    m = train(prob, parameter(f"-s {s} -c {C} -e {eps} -q"))
    dt = time.perf_counter() - t
    w = np.array([m.w[i] for i in range(X.shape[1])])
    return (w if m.get_labels()[0] == np.max(y) else -w), dt


def liblinear_time_to(X, y, s, target, objective):
    """LIBLINEAR ``-s s``'s time to reach ``objective(w) <= target``: the time of the loosest
    ``-e`` of LADDER that gets there, and that ``-e`` (None, None if none does)."""
    for eps in LADDER:
        w, dt = liblinear_run(X, y, s, eps)
        if objective(w) <= target:
            return dt, eps
    return None, None


LIBLINEAR_CHILD = """
import lzma, sys, resource, numpy as np
from sklearn.datasets import load_svmlight_file
from liblinear.liblinearutil import parameter, problem, train
X, y = load_svmlight_file(sys.argv[1])
train(problem(y, X), parameter(f"-s {sys.argv[2]} -c 1 -e {sys.argv[3]} -q"))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def liblinear_peak_rss(path, loss, eps):
    out = subprocess.run([sys.executable, "-c", LIBLINEAR_CHILD, str(path), str(LOSSES[loss]),
                          str(eps)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def bench_dataset(name, tmp, client, repeats, losses, log):
    from sklearn.datasets import load_svmlight_file

    import distsvm.workers.blocks
    from distsvm.ingest import ingest
    from distsvm.jobs import train

    src = SHARED / f"{name}.xz"
    plain = pathlib.Path(tmp) / f"{name}.svm"
    with lzma.open(src) as f, open(plain, "wb") as out:
        shutil.copyfileobj(f, out, 1 << 24)
    size_mb = plain.stat().st_size / 2**20
    res = {"dataset": name, "file_mb": round(size_mb, 1)}

    # --- ingest throughput: load_svmlight_file vs distsvm ingest (2 workers)
    sk, ours = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        X, y = load_svmlight_file(str(plain))
        sk.append(time.perf_counter() - t)
        store = os.path.join(tmp, f"{name}.zarr")
        t = time.perf_counter()
        ingest(str(plain), store, client=client["two"], overwrite=True)
        ours.append(time.perf_counter() - t)
    res["ingest"] = {"sklearn_s": statistics.median(sk), "distsvm_s": statistics.median(ours),
                     "sklearn_mb_s": size_mb / statistics.median(sk),
                     "distsvm_mb_s": size_mb / statistics.median(ours),
                     "speedup": statistics.median(sk) / statistics.median(ours)}
    log(f"{name}: ingest {res['ingest']}")

    X = X.astype(np.float64).tocsr()
    s = np.where(y == np.max(y), 1.0, -1.0)
    one = client["one"]
    worker_pids = list(one.run(os.getpid).values())
    res["losses"] = {}
    for loss in losses:
        # optimum: the better of two tight runs
        w_ll, _ = liblinear_run(X, y, LOSSES[loss], 1e-4)
        tight = train(store, loss=loss, eps=1e-9, gap_tol=1e-4, max_rounds=1000, client=one)
        f_star = min(primal(w_ll, X, s, loss), tight.summary["primal_objective"])
        lower = tight.summary["dual_objective"]  # weak duality: f* >= this
        target = 1.01 * f_star

        ll = [liblinear_time_to(X, y, LOSSES[loss], target, lambda w: primal(w, X, s, loss))
              for _ in range(repeats)]
        ll_times, ll_eps = [t for t, _ in ll], ll[-1][1]
        ds_times, ds_rounds, peaks = [], [], []
        for _ in range(repeats):
            one.run(distsvm.workers.blocks.clear_cache)
            with PeakRSS(worker_pids) as rss:
                t = time.perf_counter()
                model = train(store, loss=loss, eps=1e-6, max_rounds=200, client=one)
                wall = time.perf_counter() - t
            h = model.summary["history"]
            setup = wall - model.summary["train_seconds"]
            hit = next(r for r in h if r["primal"] <= target)
            ds_times.append(hit["seconds"] + setup)
            ds_rounds.append(hit["round"])
            peaks.append(rss.peak)
        ll_peak = liblinear_peak_rss(plain, loss, ll_eps)
        t_ll, t_ds = statistics.median(ll_times), statistics.median(ds_times)
        nnz = X.nnz
        res["losses"][loss] = {
            "f_star": f_star, "f_star_certified_within": (f_star - lower) / f_star,
            "liblinear_s": t_ll, "liblinear_eps": ll_eps,
            "distsvm_s": t_ds, "distsvm_rounds": statistics.median(ds_rounds),
            "ratio": t_ds / t_ll,
            "distsvm_nnz_per_s": nnz * statistics.median(ds_rounds) / t_ds,
            "liblinear_peak_mb": ll_peak / 2**20, "distsvm_worker_peak_mb": max(peaks) / 2**20}
        log(f"{name} {loss}: {res['losses'][loss]}")
    return res


def table(results):
    lines = ["| dataset | loss | f* certified within | LIBLINEAR to 1% (s) | distsvm to 1% (s) | "
             "ratio | rounds | distsvm nnz/s | peak MB LIBLINEAR / distsvm worker |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for loss, v in r["losses"].items():
            lines.append(f"| {r['dataset']} | {loss} | {v['f_star_certified_within']:.1e} | "
                         f"{v['liblinear_s']:.3f} (-e {v['liblinear_eps']}) | "
                         f"{v['distsvm_s']:.3f} | {v['ratio']:.2f} | {v['distsvm_rounds']} | "
                         f"{v['distsvm_nnz_per_s']:.3g} | {v['liblinear_peak_mb']:.0f} / "
                         f"{v['distsvm_worker_peak_mb']:.0f} |")
    lines += ["", "| dataset | file MB | load_svmlight_file MB/s | distsvm ingest MB/s | speedup |",
              "|---|---|---|---|---|"]
    for r in results:
        i = r["ingest"]
        lines.append(f"| {r['dataset']} | {r['file_mb']} | {i['sklearn_mb_s']:.1f} | "
                     f"{i['distsvm_mb_s']:.1f} | {i['speedup']:.2f} |")
    return "\n".join(lines)


@contextlib.contextmanager
def clusters():
    """A temporary directory and two local clusters: {"one": 1 worker, "two": 2 workers}."""
    from distributed import Client, LocalCluster

    kw = dict(threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0")
    with tempfile.TemporaryDirectory(prefix="distsvm-bench-") as tmp, \
            LocalCluster(n_workers=2, **kw) as c2, Client(c2) as two, \
            LocalCluster(n_workers=1, **kw) as c1, Client(c1) as one:
        yield tmp, {"one": one, "two": two}


def gap_plot(panels, xlabel, png):
    """Save ``panels`` — {title: {label: (x, relative gaps)}} — side by side as a PNG, the
    relative primal gap (P(w) − f*)/f* on a log scale, with the 1% line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False,
                             sharey=True)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for label, (x, g) in curves.items():
            ax.semilogy(x, np.maximum(g, 1e-6), "o--" if len(x) < 4 else ".-", label=label, ms=4)
        ax.axhline(0.01, color="grey", lw=0.8, ls=":")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("(P(w) − f*) / f*")
        ax.legend(fontsize=7)
    fig.tight_layout()
    pathlib.Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["a9a", "pypi-summaries"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--losses", nargs="+", choices=list(LOSSES), default=list(LOSSES))
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    results = []
    with clusters() as (tmp, client):
        for name in a.datasets:
            results.append(bench_dataset(name, tmp, client, a.repeats, a.losses, log))
    print(table(results))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
