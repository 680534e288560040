"""Benchmark: the user's race — what a user waits for, each tool with its default options and
its own stopping rule, side by side in one run (issue 16, item 5).

Run from the repository root (needs the `bench` extra, dask-ml and vowpalwabbit in the same
environment, and liblinear-multicore in its own one; datasets from ../shared/datasets):

    nice -n 5 python benchmarks/race.py --data a9a w8a news20 pypi-summaries \
        --multicore-python /work/venv-mc/bin/python --work /work/tmp-race \
        --json-out /work/tmp-race/race.json --png docs/img/race.png
    python benchmarks/race.py --data a9a --s 1                      # a quick run
    python benchmarks/race.py --beyond-memory --work /work/tmp-race  # the beyond-memory run
    python benchmarks/race.py --from-json A.json B.json --png docs/img/race.png  # tables, PNG

Regression (`--data abalone_scale cpusmall_scale`, from ../shared/datasets/regression, `-s 11`,
`12`, `13`):
liblinear and distsvm only, ingested with `--regression`; the objective is the SVR primal
(-p 0.1) and the accuracy column holds the mean squared error on the training rows.

For each dataset and LIBLINEAR solver type -s (0, 1, 2, 3 and 4 on news20 only), every tool
runs as a user runs it, in a child process (`python -c …` or the `distsvm` command), with
C = 1 and otherwise its defaults:

* liblinear: liblinear-official from PyPI, `svm_read_problem` + `problem` + `train(-s N)` +
  `save_model` (what the `train` binary does); training time timed around `train()` on the
  built `problem` (LIBLINEAR's own format: the conversion, 9–14 s on pypi-summaries from
  Python lists, is not training).
* multicore: liblinear-multicore `-m 2` (own environment: it installs a module also named
  `liblinear`), the same way; -s 0..3 only.
* sklearn: `load_svmlight_file` + fit; LogisticRegression(C=1) (lbfgs) for -s 0, LinearSVC(C=1,
  loss, dual) matching -s 1/2/3, LinearSVC(multi_class="crammer_singer") for -s 4; its default
  fit_intercept=True is kept (a user's default), the setting is recorded.  scikit-learn 1.9's
  `load_svmlight_file` returns int64 indices, which its LinearSVC refuses ("Only sparse
  matrices with 32-bit integer indices are accepted"): the child converts them to int32.
* dask-ml: LogisticRegression(C=1) (admm, fit_intercept=True) on a local Dask cluster started
  by the child, -s 0 only, on a dense dask array (so only where the dense matrix fits: a9a,
  w8a); its labels are given as 0/1 (dask-glm's logistic loss wants them so).
* vw1 / vw5: Vowpal Wabbit (the `vowpalwabbit` Python package, `Workspace("-d FILE …")`, which
  runs the `vw` driver), 1 pass, or 5 passes with its own cache file (`-c --cache_file F -k`,
  written during the run) and VW's default holdout early stopping; `--loss_function hinge` for
  -s 1/2/3 and `logistic` for -s 0; binary data only.  `--l2 λ` with λ = 1/(C·l): VW's update
  is an online gradient step on loss_i(w) + (λ/2)‖w‖² per example, i.e. a pass minimizes
  Σ_i loss_i + (l·λ/2)‖w‖², which is LIBLINEAR's ½‖w‖² + C·Σ loss scaled by 1/C when
  λ = 1/(C·l).  The LIBSVM file is converted to VW's text format once, untimed.  VW hashes
  features into 2^18 weights by default (pypi-summaries has 403,797 features: collisions).
* distsvm: the CLI: `distsvm ingest FILE STORE` once (timed apart), then
  `distsvm train STORE MODEL -s N --json` (whole command; its JSON gives train_seconds and
  rounds), then `distsvm predict TEST_STORE MODEL --json` for the accuracy.  `distsvm` uses
  the default cluster (in the process when the store fits, else one worker per core);
  `distsvm-1w` and `distsvm-2w` add `--workers 1` / `--workers 2`; `distsvm-1w2t` (-s 0/2)
  runs on one 2-thread worker of a LocalCluster this script starts (`--scheduler`, so that
  row's command excludes the cluster start); `distsvm-cluster` on a LocalCluster of 2
  single-threaded workers of `--cluster-memory` each (default 780MB: each holds a share of
  pypi-summaries, not all of it), the Dask user's case (benchmarks/scale.py --real).

Measured per tool: the whole command's wall time (process start to exit), the training time,
rounds/iterations where the tool says them (LIBLINEAR: its `#iter` / Newton `iter` lines,
summed over one-vs-rest problems), the final primal objective's relative distance to f*, and
the test accuracy (a9a.t, w8a.t, pypi-summaries.t; news20 has no test file: training
accuracy).  The objective is LIBLINEAR's ½‖w‖² + C·Σ loss(y·(wᵀx + b)) computed here from each
model's coefficients, with the tool's intercept b in the margins (not in the norm) where it has
one (sklearn, dask-ml, VW's constant); one-vs-rest: the sum of the K binary objectives;
-s 4: Crammer–Singer's.  For VW, ‖w‖² is over its hashed weight table (`--readable_model`)
and the margins are its raw predictions on the training file (`-t -r`).  f* is LIBLINEAR's
objective at -e 1e-5 (C = 1, no bias), computed once and cached in the work directory.
Medians of --repeats runs (tools interleaved within a repeat); the 1-minute load average is
printed beside each row.

--beyond-memory: `distsvm generate` writes a store of ≥ 8× a worker's memory limit; distsvm
trains on it (default options, -s 1) on a LocalCluster of --bm-workers workers with
--bm-memory-limit each (via --scheduler), against VW (5 passes from its cache file, and
1 pass) streaming the same rows, exported once to VW's text format (untimed); test accuracy on
held-out rows from the same generator (same seed, hence the same ground truth, block indices
beyond the training store's).  It is issue 31's anytime race: VW runs first, then distsvm to
its own stop, with early stopping (--bm-n-iter-no-change, on a validation store of
--bm-valid-rows rows from the same generator) and with time budgets of 1x and 2x VW's
one-pass wall time (less the default run's wall time outside training, so that the
whole commands compare); --png plots test accuracy against wall time.
--anytime DATA...: the same race on a dataset of the race (-s 3, the validation rows held out
of the training store: --bm-validation-fraction), e.g.

    python benchmarks/race.py --anytime pypi-summaries --bm-workers 1 --bm-memory-limit 4GB \
        --work /work/tmp-race --png docs/img/anytime-pypi.png
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATASETS = {  # name: (train file, test file or None, default -s list)
    "a9a": ("a9a.xz", "a9a.t.xz", [0, 1, 2, 3]),
    "w8a": ("w8a.xz", "w8a.t.xz", [0, 1, 2, 3]),
    "news20": ("news20.xz", None, [1, 4, 5, 6]),
    "pypi-summaries": ("pypi-summaries.xz", "pypi-summaries.t.xz", [1, 3, 0, 2, 5, 6]),
    # regression (real targets, `ingest --regression`): the SVR types; MSE instead of accuracy
    "abalone_scale": ("regression/abalone_scale.xz", None, [11, 12, 13]),
    "cpusmall_scale": ("regression/cpusmall_scale.xz", None, [11, 12, 13]),
}
REGRESSION_TYPES = (11, 12, 13)  # LIBLINEAR's SVR types (epsilon -p 0.1 by default)
SVR_P = 0.1
L1_TYPES = (5, 6)  # L1-regularized (‖w‖₁ for ½‖w‖²); they read the store's column view
TOOLS = ["liblinear", "multicore", "sklearn", "daskml", "vw1", "vw5", "distsvm", "distsvm-1w",
         "distsvm-2w", "distsvm-1w2t", "distsvm-cluster"]
DEFAULT_TOOLS = ["liblinear", "multicore", "sklearn", "daskml", "vw1", "vw5", "distsvm",
                 "distsvm-1w"]
F_STAR_EPS = 1e-5
# tools that run on a LocalCluster this script starts: (workers, threads, memory limit; None:
# --cluster-memory)
CLUSTER_TOOLS = {"distsvm-1w2t": (1, 2, "auto"), "distsvm-cluster": (2, 1, None)}


def load() -> float:
    return os.getloadavg()[0]


def run(cmd, env=None, timeout=None) -> tuple[float, str, str]:
    """Run a command; (wall seconds from start to exit, stdout, stderr).  Raises on failure."""
    t = time.perf_counter()
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))[:200]} failed ({p.returncode}): "
                           f"{(p.stderr or p.stdout).strip()[-600:]}")
    return wall, p.stdout, p.stderr


# ----------------------------------------------------------------------------- the children

LIBLINEAR_CHILD = """
import sys, time
from liblinear.liblinearutil import parameter, problem, save_model, svm_read_problem, train
y, x = svm_read_problem(sys.argv[1], return_scipy=True)
prob, param = problem(y, x), parameter(sys.argv[3])  # LIBLINEAR's own format, as `train`'s
t = time.perf_counter()
m = train(prob, param)
t = time.perf_counter() - t
save_model(sys.argv[2], m)
print("RACE_TRAIN_SECONDS", t, flush=True)
"""

SKLEARN_CHILD = """
import sys, time, json, warnings
import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.svm import LinearSVC
from sklearn.linear_model import LogisticRegression
X, y = load_svmlight_file(sys.argv[1])
X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)  # see docstring
s = int(sys.argv[3])
if s == 0:
    est = LogisticRegression(C=1.0)
elif s == 4:
    est = LinearSVC(C=1.0, multi_class="crammer_singer")
else:
    est = LinearSVC(C=1.0, loss="hinge" if s == 3 else "squared_hinge", dual=s != 2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    t = time.perf_counter()
    est.fit(X, y)
    t = time.perf_counter() - t
np.savez(sys.argv[2], coef=est.coef_, intercept=np.atleast_1d(est.intercept_),
         classes=est.classes_)
p = est.get_params()
print("RACE_TRAIN_SECONDS", t)
print("RACE_INFO", json.dumps({"iters": int(np.max(est.n_iter_)), "warnings":
      sorted({type(w.message).__name__ for w in caught}),
      "setting": {k: p.get(k) for k in ("solver", "dual", "loss", "fit_intercept",
                                       "intercept_scaling", "tol", "max_iter", "multi_class")
                  if k in p}}))
"""

DASKML_CHILD = """
import sys, time, json
import numpy as np
import dask.array as da
from distributed import Client, LocalCluster
from sklearn.datasets import load_svmlight_file
from dask_ml.linear_model import LogisticRegression
if __name__ == "__main__":
    with LocalCluster(dashboard_address="127.0.0.1:0") as cluster, Client(cluster):
        X, y = load_svmlight_file(sys.argv[1])
        Xd = da.from_array(X.toarray(), chunks=(max(1, X.shape[0] // 4), X.shape[1]))
        yd = da.from_array((y > 0).astype(np.float64), chunks=(max(1, X.shape[0] // 4),))
        est = LogisticRegression(C=1.0)
        t = time.perf_counter()
        est.fit(Xd, yd)
        t = time.perf_counter() - t
        np.savez(sys.argv[2], coef=np.ravel(est.coef_), intercept=np.atleast_1d(est.intercept_),
                 classes=np.array([-1.0, 1.0]))
        p = est.get_params()
        print("RACE_TRAIN_SECONDS", t)
        print("RACE_INFO", json.dumps({"setting": {k: p[k] for k in
              ("solver", "C", "fit_intercept", "max_iter", "tol")}}))
"""

VW_CHILD = """
import sys, time
from vowpalwabbit import Workspace
t = time.perf_counter()
ws = Workspace(sys.argv[1])
ws.finish()
print("RACE_TRAIN_SECONDS", time.perf_counter() - t, flush=True)
"""


def child_seconds(out: str) -> float:
    return float(re.search(r"RACE_TRAIN_SECONDS (\S+)", out).group(1))


def child_info(out: str) -> dict:
    m = re.search(r"RACE_INFO (.*)", out)
    return json.loads(m.group(1)) if m else {}


def liblinear_iters(out: str):
    dual = [int(v) for v in re.findall(r"#iter\s*=\s*(\d+)", out)]
    if dual:
        return sum(dual)
    newton = re.findall(r"^iter\s+\d+", out, flags=re.MULTILINE)
    return len(newton) or None


# ----------------------------------------------------------------------------- models

class Lin:
    """A linear model in the parent: coef (n,) or (K, n), intercept, sorted classes; binary:
    decision > 0 means classes[1] (distsvm's Model convention)."""

    def __init__(self, coef, intercept, classes, n):
        coef = np.asarray(coef, dtype=np.float64)
        if coef.ndim == 2 and coef.shape[0] == 1:
            coef = coef[0]
        width = coef.shape[-1]
        if width < n:
            pad = [(0, 0)] * (coef.ndim - 1) + [(0, n - width)]
            coef = np.pad(coef, pad)
        self.coef = coef[..., :n]
        self.extra_sq = float(np.sum(coef[..., n:] ** 2))  # features the test has, train not
        b = np.asarray(intercept, dtype=np.float64).ravel()
        self.b = (b[0] if b.size == 1 else b) if coef.ndim == 1 or b.size > 1 else np.zeros(
            coef.shape[0]) + b[0]
        self.classes = np.asarray(classes, dtype=np.float64)

    def decision(self, X):
        return np.asarray(X @ self.coef.T) + self.b

    def predict(self, X):
        dv = self.decision(X)
        if dv.ndim == 1:
            return self.classes[(dv > 0).astype(np.int64)]
        return self.classes[np.argmax(dv, axis=1)]


def from_distsvm(path, n) -> Lin:
    from distsvm.model import load_model

    m = load_model(path)
    return Lin(m.coef_, m.intercept_, m.classes, n)


def from_npz(path, n) -> Lin:
    z = np.load(path)
    return Lin(z["coef"], z["intercept"], z["classes"], n)


def binary_loss(m, s):
    if s in (0, 6):
        return np.logaddexp(0.0, -m)
    h = np.maximum(0.0, 1.0 - m)
    return h if s == 3 else h * h


def objective(model: Lin, X, y, s, C=1.0, norm_sq=None, dv=None) -> float:
    """LIBLINEAR's primal objective of the model on (X, y)."""
    dv = model.decision(X) if dv is None else dv
    nsq = float(np.sum(model.coef ** 2)) if norm_sq is None else norm_sq
    if s in L1_TYPES:  # ½‖w‖² below is then ‖w‖₁ (the race trains without a bias)
        nsq = 2.0 * float(np.sum(np.abs(model.coef)))
    if s in REGRESSION_TYPES:  # SVR: ξ(wᵀx − y) = max(0, |r| − p), squared but for -s 13
        xi = np.maximum(0.0, np.abs(dv - y) - SVR_P)
        return 0.5 * nsq + C * float(np.sum(xi if s == 13 else xi * xi))
    if s == 21:  # one-class, ν = 0.5 (the default): ½‖w‖² − νlρ + Σ max(0, ρ − wᵀx), b = −ρ
        return 0.5 * nsq + 0.5 * len(y) * float(model.b) + float(np.sum(np.maximum(0.0, -dv)))
    if dv.ndim == 1:
        yy = np.where(y == model.classes[1], 1.0, -1.0)
        return 0.5 * nsq + C * float(np.sum(binary_loss(yy * dv, s)))
    idx = np.searchsorted(model.classes, y)
    if s == 4:  # Crammer–Singer: max_m (e_im + w_mᵀx_i) − w_yᵢᵀx_i
        e = np.ones_like(dv)
        e[np.arange(len(y)), idx] = 0.0
        loss = np.max(dv + e, axis=1) - dv[np.arange(len(y)), idx]
        return 0.5 * nsq + C * float(np.sum(loss))
    total = 0.5 * nsq
    for k in range(dv.shape[1]):
        yy = np.where(idx == k, 1.0, -1.0)
        total += C * float(np.sum(binary_loss(yy * dv[:, k], s)))
    return total


# ----------------------------------------------------------------------------- datasets

class Data:
    def __init__(self, name, a):
        from sklearn.datasets import load_svmlight_file

        self.name = name
        tr, te, self.solvers = DATASETS[name]
        work = pathlib.Path(a.work)
        work.mkdir(parents=True, exist_ok=True)
        self.train_file = self._plain(pathlib.Path(a.datasets) / tr, work)
        self.test_file = self._plain(pathlib.Path(a.datasets) / te, work) if te else None
        self.X, self.y = load_svmlight_file(str(self.train_file))
        self.n = self.X.shape[1]
        if self.test_file:
            self.Xt, self.yt = load_svmlight_file(str(self.test_file), n_features=None)
            if self.Xt.shape[1] < self.n:
                self.Xt.resize((self.Xt.shape[0], self.n))
            self.Xt = self.Xt[:, :self.n].tocsr()
        else:
            self.Xt, self.yt = self.X, self.y
        self.regression = self.solvers[0] in REGRESSION_TYPES
        self.binary = len(np.unique(self.y)) == 2 and not self.regression
        self.work = work
        self.store = work / f"{name}.zarr"
        self.test_store = work / f"{name}.t.zarr" if self.test_file else self.store
        self.vw_file = work / f"{name}.vw"
        self.vw_test = work / f"{name}.t.vw"
        self.ingest_seconds = None

    @staticmethod
    def _plain(xz: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
        out = work / xz.name.removesuffix(".xz")
        if not out.exists():
            with lzma.open(xz, "rb") as f, open(out.with_suffix(".part"), "wb") as g:
                shutil.copyfileobj(f, g, 16 << 20)
            out.with_suffix(".part").rename(out)
        return out

    def ingest(self, distsvm):
        """`distsvm ingest` of the training (and test) file, once; its time is recorded (and
        kept in the work directory: a later run with the stores there reuses them)."""
        record = self.work / f"{self.name}.ingest.json"
        if record.exists() and self.store.exists() and self.test_store.exists():
            self.ingest_seconds = json.loads(record.read_text())
            return self.ingest_seconds
        rec = {}
        task = ["--regression"] if self.regression else []
        for src, store, extra in ((self.train_file, self.store, task),
                                  (self.test_file, self.test_store, ["--no-shuffle", *task])):
            if src is None:
                continue
            la = load()
            wall, _, _ = run([distsvm, "ingest", str(src), str(store), "--overwrite", "-q",
                                *extra])
            rec[pathlib.Path(src).name] = {"wall_seconds": wall, "load": la}
        self.ingest_seconds = rec
        record.write_text(json.dumps(rec))
        return rec

    def columnize(self, distsvm):
        """`distsvm columnize` of the training store, once (its time recorded apart)."""
        record = self.work / f"{self.name}.columnize.json"
        if record.exists() and (self.store / "cols").exists():
            return
        la = load()
        wall, _, _ = run([distsvm, "columnize", str(self.store)])
        record.write_text(json.dumps({"wall_seconds": wall, "load": la}))
        print(f"  distsvm columnize: {wall:.1f}s (load {la:.2f})", flush=True)

    def vw_export(self):
        for src, dst in ((self.train_file, self.vw_file), (self.test_file, self.vw_test)):
            if src is None or dst.exists():
                continue
            with open(src) as f, open(dst.with_suffix(".part"), "w") as g:
                for line in f:
                    lab, _, rest = line.rstrip("\n").partition(" ")
                    g.write(f"{lab} | {rest}\n")
            dst.with_suffix(".part").rename(dst)


def f_star(d: Data, s: int) -> float:
    cache = d.work / "fstar.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    key = f"{d.name} -s {s} -e {F_STAR_EPS:g}"
    if key not in known:
        from liblinear.liblinearutil import parameter, problem, save_model, train

        t = time.perf_counter()
        m = train(problem(d.y, d.X), parameter(f"-s {s} -c 1 -e {F_STAR_EPS:g} -q"))
        path = d.work / f"fstar-{d.name}-{s}.model"
        save_model(str(path), m)
        known[key] = objective(from_distsvm(path, d.n), d.X, d.y, s)
        print(f"  f* {key}: {known[key]:.10g} ({time.perf_counter() - t:.1f}s, load "
              f"{load():.1f})", flush=True)
        cache.write_text(json.dumps(known, indent=1))
    return known[key]


# ----------------------------------------------------------------------------- one run

def supports(tool: str, d: Data, s: int) -> str | None:
    """None if the tool runs this cell, else why not."""
    if s in REGRESSION_TYPES and tool not in ("liblinear", "distsvm", "distsvm-1w", "distsvm-2w"):
        return "regression: liblinear and distsvm here"
    if s == 21 and not (tool == "liblinear" or tool.startswith("distsvm")):
        return "one-class (-s 21): LIBLINEAR and distsvm only"
    if tool == "multicore" and s == 4:
        return "liblinear-multicore: no -m for -s 4"
    if tool == "daskml" and (s != 0 or d.name not in ("a9a", "w8a")):
        return "dask-ml: -s 0 on dense-fitting data only"
    if tool.startswith("vw") and (s == 4 or not d.binary):
        return "VW: binary data only here"
    if tool == "distsvm-1w2t" and s not in (0, 2):
        return "2 threads: newton (-s 0/2) only"
    return None


def run_tool(tool, d: Data, s, a, rep, cluster_addr=None) -> dict:
    py = sys.executable
    tag = f"{d.name}-s{s}-{tool}-{rep}"
    out_model = d.work / f"{tag}.model"
    rec = {"tool": tool, "load": load()}
    if tool in ("liblinear", "multicore"):
        opts = f"-s {s}" + (f" -m {a.threads}" if tool == "multicore" else "")
        exe = a.multicore_python if tool == "multicore" else py
        wall, out, _ = run([exe, "-c", LIBLINEAR_CHILD, str(d.train_file), str(out_model), opts])
        rec.update(wall=wall, train=child_seconds(out), iters=liblinear_iters(out),
                   options=opts)
        model = from_distsvm(out_model, d.n)
    elif tool in ("sklearn", "daskml"):
        npz = d.work / f"{tag}.npz"
        wall, out, _ = run([py, "-c", SKLEARN_CHILD if tool == "sklearn" else DASKML_CHILD,
                            str(d.train_file), str(npz), str(s)])
        info = child_info(out)
        rec.update(wall=wall, train=child_seconds(out), iters=info.get("iters"),
                   options=info.get("setting"), warnings=info.get("warnings"))
        model = from_npz(npz, d.n)
    elif tool.startswith("vw"):
        return run_vw(tool, d, s, a, tag, rec)
    else:
        if s in L1_TYPES:
            d.columnize(a.distsvm)
        cmd = [a.distsvm, "train", str(d.store), str(out_model), "-s", str(s), "--json"]
        if tool in ("distsvm-1w", "distsvm-2w"):
            cmd += ["--workers", tool[-2]]
        if tool in CLUSTER_TOOLS:
            cmd += ["--scheduler", cluster_addr]
        wall, out, _ = run(cmd)
        j = json.loads(out.strip().splitlines()[-1])
        rec.update(wall=wall, train=j["train_seconds"], iters=j["rounds"],
                   converged=j["converged"], reported_objective=j["primal_objective"],
                   options=" ".join(cmd[4:]))
        model = from_distsvm(out_model, d.n)
        if rep == 0:  # the user's accuracy, as `distsvm predict` reports it
            pcmd = [a.distsvm, "predict", str(d.test_store), str(out_model), "--json", "-q"]
            if tool in CLUSTER_TOOLS:
                pcmd += ["--scheduler", cluster_addr]
            pw, pout, _ = run(pcmd)
            pj = json.loads(pout.strip().splitlines()[-1])
            rec["predict_accuracy"] = pj.get("accuracy", pj.get("mean_squared_error"))
            rec["predict_wall"] = pw
    rec["objective"] = objective(model, d.X, d.y, s)
    if d.regression:  # the mean squared error in the "accuracy" slot (metric() says which)
        rec["accuracy"] = float(np.mean((model.decision(d.Xt) - d.yt) ** 2))
    else:
        rec["accuracy"] = float(np.mean(model.predict(d.Xt) == d.yt))
    return rec


def run_vw(tool, d: Data, s, a, tag, rec) -> dict:
    model = d.work / f"{tag}.vw.model"
    passes = 1 if tool == "vw1" else 5
    wall, train, args = vw_train(d.vw_file, d.X.shape[0], "logistic" if s == 0 else "hinge",
                                 model, passes)
    rec.update(wall=wall, train=train, iters=passes, options=args.replace(str(d.work) + "/", ""))
    rec.update(vw_scores(d, s, model))
    return rec


def vw_train(train_file, n_rows: int, loss: str, model: pathlib.Path, passes: int) -> tuple:
    """VW on ``train_file`` (``loss``, ``--l2`` 1/l; more passes than one from its own cache
    file, deleted after), its model at ``model`` and its readable weights beside it (.txt):
    (wall seconds, its own train seconds, its options)."""
    args = (f"-d {train_file} --loss_function {loss} --l2 {1.0 / n_rows:.10g} -f {model} "
            f"--readable_model {model.with_suffix('.txt')} --quiet")
    cache = model.with_suffix(".cache")
    if passes > 1:
        args += f" -c --cache_file {cache} -k --passes {passes}"
    wall, out, _ = run([sys.executable, "-c", VW_CHILD, args])
    cache.unlink(missing_ok=True)
    return wall, child_seconds(out), args


def vw_raw(model: pathlib.Path, path, which: str) -> np.ndarray:
    """VW's raw predictions of ``model`` on the rows of ``path``."""
    raw = model.with_suffix(f".{which}.raw")
    run([sys.executable, "-c", VW_CHILD, f"-d {path} -t -i {model} -r {raw} --quiet"])
    dv = np.loadtxt(raw, usecols=0, ndmin=1)
    raw.unlink()
    return dv


def vw_accuracy(model: pathlib.Path, test_file, y=None) -> float:
    """Test accuracy of VW's ``model`` on ``test_file`` (labels ``y``, else read from it):
    the sign of its raw predictions."""
    y = vw_labels(test_file) if y is None else y
    dv = vw_raw(model, test_file, "test")
    return float(np.mean(np.where(dv > 0, 1.0, -1.0) == np.where(y > 0, 1, -1)))


def vw_scores(d, s, model):
    """Objective (hashed ‖w‖² + C·Σ loss of VW's raw predictions on the training file) and
    test accuracy (:func:`vw_accuracy`)."""
    weights = []
    with open(model.with_suffix(".txt")) as f:
        body = False
        for line in f:
            if body:
                weights.append(float(line.rsplit(":", 1)[1]))
            elif line.strip() == ":0":
                body = True
    yy = np.where(d.y > 0, 1.0, -1.0)
    objective = 0.5 * float(np.sum(np.square(weights))) + float(
        np.sum(binary_loss(yy * vw_raw(model, d.vw_file, "train"), s)))
    return {"objective": objective, "accuracy": vw_accuracy(model, d.vw_test, d.yt)}


def vw_labels(path) -> np.ndarray:
    with open(path) as f:
        return np.array([float(line.split(" ", 1)[0]) for line in f])


def med(rs, key):
    v = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(v) if v else None


def race(a):
    from distributed import Client, LocalCluster

    rows = []
    clusters = {}  # tool: the LocalCluster it runs on (CLUSTER_TOOLS)
    for name in a.data:
        d = Data(name, a)
        solvers = [s for s in (a.s or d.solvers) if s in DATASETS[name][2] or (
            s == 4 and name == "news20") or s == 21 or s in L1_TYPES]
        tools = [t for t in a.tools]
        print(f"\n{name}: {d.X.shape[0]} rows x {d.n} features, {d.X.nnz} nnz; test "
              f"{'training accuracy (no test file)' if not d.test_file else d.test_file.name}; "
              f"load {load():.2f}", flush=True)
        if any(t.startswith("distsvm") for t in tools):
            ing = d.ingest(a.distsvm)
            print("  distsvm ingest: " + ", ".join(
                f"{k} {v['wall_seconds']:.1f}s (load {v['load']:.2f})" for k, v in ing.items()),
                flush=True)
        if any(t.startswith("vw") for t in tools) and d.binary:
            d.vw_export()
        for t in tools:
            if t in CLUSTER_TOOLS and t not in clusters:
                workers, threads, memory = CLUSTER_TOOLS[t]
                clusters[t] = LocalCluster(n_workers=workers, threads_per_worker=threads,
                                           host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                           memory_limit=memory or a.cluster_memory)
                Client(clusters[t])
        for s in solvers:
            fs = f_star(d, s)
            runs = {t: [] for t in tools}
            skipped = {t: supports(t, d, s) for t in tools}
            reps = a.repeats_pypi if name == "pypi-summaries" and a.repeats_pypi else a.repeats
            for rep in range(reps):
                for t in tools:
                    if skipped[t] or (t == "daskml" and rep >= a.daskml_repeats):
                        continue
                    try:
                        runs[t].append(run_tool(t, d, s, a, rep, clusters[t].scheduler_address
                                                if t in clusters else None))
                    except Exception as exc:  # noqa: BLE001 - record and go on
                        print(f"  {t} -s {s}: FAILED: {exc}", flush=True)
                        skipped[t] = f"failed: {str(exc)[:300]}"
            for t in tools:
                rs = runs[t]
                if not rs:
                    if skipped[t] and skipped[t].startswith("failed"):
                        rows.append({"data": name, "s": s, "tool": t, "skipped": skipped[t]})
                    continue
                row = {"data": name, "s": s, "tool": t, "repeats": len(rs),
                       "wall": med(rs, "wall"), "train": med(rs, "train"),
                       "iters": med(rs, "iters"), "objective": med(rs, "objective"),
                       "f_star": fs, "accuracy": med(rs, "accuracy"),
                       "load": med(rs, "load"), "loads": [round(r["load"], 2) for r in rs],
                       "options": rs[0].get("options"), "runs": rs,
                       "ingest": d.ingest_seconds if t.startswith("distsvm") else None,
                       "predict_accuracy": rs[0].get("predict_accuracy")}
                row["rel"] = (row["objective"] - fs) / abs(fs)
                rows.append(row)
                print_row(row, flush=True)
    for cluster in clusters.values():
        cluster.close()
    return rows


HEAD = (f"{'data':15s} {'-s':>2s} {'tool':13s} {'wall s':>8s} {'train s':>8s} {'iters':>6s} "
        f"{'(f-f*)/f*':>10s} {'acc %/MSE':>7s} {'load':>5s}")


def metric(r) -> str:
    """A row's accuracy in %, or a regression row's mean squared error ("MSE …")."""
    if r["s"] in REGRESSION_TYPES:
        return f"MSE {r['accuracy']:.5g}"
    return f"{100 * r['accuracy']:.2f}"


def print_row(r, flush=False):
    it = "" if r["iters"] is None else f"{r['iters']:g}"
    print(f"{r['data']:15s} {r['s']:2d} {r['tool']:13s} {r['wall']:8.2f} {r['train']:8.2f} "
          f"{it:>6s} {r['rel']:10.2e} {metric(r):>7s} {r['load']:5.2f}", flush=flush)


# ----------------------------------------------------------------------------- beyond memory

def beyond_memory(a):
    from distsvm.storage import open_dataset
    from distsvm.storage.generate import block_seed, generate_rows

    work = pathlib.Path(a.work) / "beyond"
    work.mkdir(parents=True, exist_ok=True)
    store, test_store = work / "train.zarr", work / "test.zarr"
    limit = a.bm_memory_limit
    res = {"rows": a.bm_rows, "features": a.bm_features, "nnz_per_row": a.bm_nnz,
           "seed": a.bm_seed, "memory_limit": limit, "workers": a.bm_workers,
           "test_rows": a.bm_test_rows}
    if not store.exists():
        la = load()
        wall, _, _ = run([a.distsvm, "generate", str(store), "--rows", str(a.bm_rows),
                          "--features", str(a.bm_features), "--nnz-per-row", str(a.bm_nnz),
                          "--seed", str(a.bm_seed), "--block-rows", str(a.bm_block_rows), "-q"])
        print(f"generated {store} in {wall:.0f}s (load {la:.2f})", flush=True)
    ds = open_dataset(str(store))
    data_bytes = sum(b.nnz * 8 + b.n_rows * 12 for b in ds.meta.blocks)
    limit_bytes = int(float(limit.upper().removesuffix("MB")) * 1e6)
    res["data_bytes"] = data_bytes
    print(f"store: {ds.meta.n_rows} rows, {sum(b.nnz for b in ds.meta.blocks)} nnz, "
          f"{ds.n_blocks} blocks, {data_bytes / 1e9:.2f} GB of CSR = "
          f"{data_bytes / limit_bytes:.1f}x the worker memory limit {limit}", flush=True)
    # the held-out rows: same seed (same ground truth), block indices past the store's
    vw_train, vw_test = work / "train.vw", work / "test.vw"

    def write_rows(indptr, indices, data, labels, g_vw, g_svm=None):
        for i in range(len(labels)):
            a0, a1 = indptr[i], indptr[i + 1]
            feats = " ".join(f"{j + 1}:{v:.7g}" for j, v in zip(indices[a0:a1].tolist(),
                                                               data[a0:a1].tolist()))
            lab = "1" if labels[i] > 0 else "-1"
            g_vw.write(f"{lab} | {feats}\n")
            if g_svm is not None:
                g_svm.write(f"{lab} {feats}\n")

    args = (a.bm_features, a.bm_nnz, 1.0, 0.1, 0.05, np.uint64(a.bm_seed))
    valid_store = work / "valid.zarr"  # early stopping's and the budgets' validation rows
    for path, store_, rows, first in ((vw_test, test_store, a.bm_test_rows, 10**6),
                                      (work / "valid.vw", valid_store, a.bm_valid_rows, 2 * 10**6)):
        if path.exists():
            continue
        with open(path, "w") as g, open(path.with_suffix(".svm"), "w") as h:
            left, b = rows, first  # block seeds past the store's: held-out rows
            while left > 0:
                k = min(left, a.bm_block_rows)
                write_rows(*generate_rows(k, *args, block_seed(a.bm_seed, b)), g, h)
                left, b = left - k, b + 1
        run([a.distsvm, "ingest", str(path.with_suffix(".svm")), str(store_), "--overwrite",
             "-q", "--no-shuffle", "--n-features", str(a.bm_features)])
    if not vw_train.exists():
        t = time.perf_counter()
        with open(vw_train.with_suffix(".part"), "w") as g:
            for b, blk in enumerate(ds.meta.blocks):
                write_rows(*generate_rows(blk.n_rows, *args, block_seed(a.bm_seed, b)), g)
        vw_train.with_suffix(".part").rename(vw_train)
        print(f"exported to VW text in {time.perf_counter() - t:.0f}s (untimed)", flush=True)
    res.update(anytime_race(a, store, test_store, ["--validation", str(valid_store)],
                            vw_train, vw_test, 1, ds.meta.n_rows, work))
    return res


def anytime_race(a, store, test_store, held, vw_train_file, vw_test, s, n_rows, work) -> dict:
    """Issue 31's anytime race: VW one pass and five (hinge loss, --l2 1/l), then on a
    LocalCluster of ``--bm-workers`` x ``--bm-memory-limit`` distsvm ``-s s`` to its stop,
    with early stopping, and with budgets of 1x and 2x VW's one-pass wall time (less the
    default run's wall time outside training), the last three validated by ``held``."""
    from distributed import Client, LocalCluster

    out, limit = [], a.bm_memory_limit
    for _ in range(a.bm_repeats):  # VW first: its one-pass time sets distsvm's budgets
        for passes in (1, 5):
            la = load()
            wall, train, _ = vw_train(vw_train_file, n_rows, "hinge", work / "vw.model", passes)
            r = {"tool": f"vw {passes} pass{'es' if passes > 1 else ''}", "load": la,
                 "wall": wall, "train": train, "iters": passes,
                 "accuracy": vw_accuracy(work / "vw.model", vw_test)}
            out.append(r)
            print(f"  {r['tool']}: wall {wall:.1f}s, test acc {100 * r['accuracy']:.2f}% "
                  f"(load {la:.2f})", flush=True)
    vw1 = med([r for r in out if r["tool"] == "vw 1 pass"], "wall")
    with LocalCluster(n_workers=a.bm_workers, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", memory_limit=limit) as cluster, Client(cluster):
        addr = cluster.scheduler_address
        for _ in range(a.bm_repeats):
            overhead = None  # the default run's wall time outside training: budgets leave it
            runs = [(f"distsvm -s {s}", []),
                    (f"distsvm -s {s} early stopping ({a.bm_n_iter_no_change} rounds)",
                     held + ["--n-iter-no-change", str(a.bm_n_iter_no_change)])]
            runs += [(f"distsvm -s {s} budget {k}x vw 1 pass", held + ["--time-budget", k])
                     for k in ("1", "2")]
            for tool, extra in runs:
                if "--time-budget" in extra:
                    extra = extra[:-1] + [f"{max(0.5, float(extra[-1]) * vw1 - overhead):.2f}"]
                la = load()
                model = work / "distsvm.model"
                wall, o, _ = run([a.distsvm, "train", str(store), str(model), "-s", str(s),
                                  "--json", "--scheduler", addr, *extra])
                j = json.loads(o.strip().splitlines()[-1])
                _, po, _ = run([a.distsvm, "predict", str(test_store), str(model), "--json",
                                "-q", "--scheduler", addr])
                overhead = wall - j["train_seconds"] if overhead is None else overhead
                r = {"tool": tool, "options": " ".join(extra), "load": la, "wall": wall,
                     "train": j["train_seconds"], "iters": j["rounds"],
                     "converged": j["converged"], "objective": j["primal_objective"],
                     "stopped_by": j.get("stopped_by"), "kept_model": j.get("kept_model"),
                     "accuracy": json.loads(po.strip().splitlines()[-1])["accuracy"]}
                out.append(r)
                print(f"  {tool} (workers {a.bm_workers} x {limit}; {r['options']}): wall "
                      f"{wall:.1f}s, train {r['train']:.1f}s, {r['iters']} rounds, stopped by "
                      f"{r['stopped_by']}{', kept the SGD start' if r['kept_model'] else ''}, "
                      f"test acc {100 * r['accuracy']:.2f}% (load {la:.2f})", flush=True)
    return {"runs": out, "median": {t: {k: med([r for r in out if r["tool"] == t], k)
                                        for k in ("wall", "train", "accuracy", "load", "iters")}
                                    for t in dict.fromkeys(r["tool"] for r in out)}}


def anytime_data(a, name) -> dict:
    """:func:`anytime_race` on a dataset of the race (``-s 3``; validation rows held out of
    the training store: ``--bm-validation-fraction``)."""
    d = Data(name, a)
    d.ingest(a.distsvm)
    d.vw_export()
    res = {"data": name, "rows": d.X.shape[0], "workers": a.bm_workers,
           "memory_limit": a.bm_memory_limit,
           "data_bytes": d.X.nnz * 8 + d.X.shape[0] * 12}
    res.update(anytime_race(a, d.store, d.test_store,
                            ["--validation-fraction", str(a.bm_validation_fraction)],
                            d.vw_file, d.vw_test, 3, d.X.shape[0], d.work))
    return res


def plot_anytime(res, png):
    """Test accuracy against whole-command wall time, one point a tool (medians)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    placed: list[float] = []
    for tool, m in res["median"].items():
        acc = 100 * m["accuracy"]
        ax.plot(m["wall"], acc, "s" if tool.startswith("vw") else "o")
        below = any(abs(acc - p) < 0.02 for p in placed)  # a point at that height has its label above
        placed.append(acc)
        ax.annotate(tool, (m["wall"], acc), fontsize=7, xytext=(4, -10 if below else 4),
                    textcoords="offset points")
    ax.set_xlabel("whole command, wall time (s)")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.set_title(f"{res.get('data', 'Beyond memory')}: {res['rows']} rows, "
                 f"{res['data_bytes'] / 1e9:.2f} GB of CSR, {res['workers']} worker(s) x "
                 f"{res['memory_limit']}", fontsize=9)
    fig.tight_layout()
    pathlib.Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"plot written to {png}")


# ----------------------------------------------------------------------------- plot

def plot(rows, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "wall" in r]
    cells = list(dict.fromkeys((r["data"], r["s"]) for r in rows))
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.1 * len(cells) + 4), 5.5))
    width = 0.8 / max(1, len(tools))
    for ax, key, title in ((axes[0], "wall", "whole command (s, log)"),
                           (axes[1], "train", "training time (s, log)")):
        for k, t in enumerate(tools):
            xs, hs = [], []
            for c, (dn, s) in enumerate(cells):
                r = next((r for r in rows if r["data"] == dn and r["s"] == s and r["tool"] == t),
                         None)
                if r is not None and r[key]:
                    xs.append(c + (k - (len(tools) - 1) / 2) * width)
                    hs.append(r[key])
            ax.bar(xs, hs, width=width, label=t)
        ax.set_yscale("log")
        ax.set_xticks(range(len(cells)))
        ax.set_xticklabels([f"{dn.removesuffix('-summaries')}\n-s {s}" for dn, s in cells],
                           fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("The user's race: default options, each tool's own stopping rule "
                 "(medians of the repeats; lower is better)", fontsize=9)
    fig.tight_layout()
    pathlib.Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"plot written to {png}")


def markdown(rows) -> str:
    """The results as a Markdown table (for docs/benchmarks.md)."""
    head = ("| data | -s | tool | whole command (s) | train (s) | rounds/iters | (f − f\\*)/f\\* | "
            "test acc. % (regression: MSE) | load (1-min avg. per repeat) |")
    out = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "wall" not in r:
            out.append(f"| {r['data']} | {r['s']} | {r['tool']} | {r['skipped']} | | | | | |")
            continue
        it = "" if r["iters"] is None else f"{r['iters']:g}"
        out.append(f"| {r['data']} | {r['s']} | {r['tool']} | {r['wall']:.2f} | {r['train']:.2f} "
                   f"| {it} | {r['rel']:.2e} | {metric(r)} | "
                   f"{' / '.join(f'{v:.1f}' for v in r['loads'])} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["a9a", "w8a"], choices=list(DATASETS))
    ap.add_argument("--s", nargs="+", type=int, help="solver types (default: per dataset)")
    ap.add_argument("--tools", nargs="+", default=DEFAULT_TOOLS, choices=TOOLS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repeats-pypi", type=int, help="repeats for pypi-summaries (default: "
                    "--repeats)")
    ap.add_argument("--daskml-repeats", type=int, default=1,
                    help="repeats of dask-ml (default 1: about 80 s a run on a9a)")
    ap.add_argument("--threads", type=int, default=2, help="liblinear-multicore -m (2)")
    ap.add_argument("--cluster-memory", default="780MB",
                    help="memory limit of each worker of distsvm-cluster (780MB)")
    ap.add_argument("--datasets", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--work", default="/tmp/race", help="decompressed files, stores, models")
    ap.add_argument("--multicore-python", default="/work/venv-mc/bin/python")
    ap.add_argument("--distsvm", default=str(pathlib.Path(sys.executable).parent / "distsvm"))
    ap.add_argument("--json-out")
    ap.add_argument("--png")
    ap.add_argument("--beyond-memory", action="store_true", help="run only the beyond-memory race")
    ap.add_argument("--bm-rows", type=int, default=1_200_000)
    ap.add_argument("--bm-features", type=int, default=100_000)
    ap.add_argument("--bm-nnz", type=int, default=100)
    ap.add_argument("--bm-seed", type=int, default=7)
    ap.add_argument("--bm-block-rows", type=int, default=20_000)
    ap.add_argument("--bm-test-rows", type=int, default=100_000)
    ap.add_argument("--bm-workers", type=int, default=2)
    ap.add_argument("--bm-memory-limit", default="300MB")
    ap.add_argument("--bm-repeats", type=int, default=1)
    ap.add_argument("--bm-valid-rows", type=int, default=20_000,
                    help="rows of the validation store of early stopping and the budgets")
    ap.add_argument("--bm-n-iter-no-change", type=int, default=3)
    ap.add_argument("--bm-validation-fraction", type=float, default=0.1,
                    help="--anytime: rows held out of the training store to validate on (0.1)")
    ap.add_argument("--anytime", nargs="+", choices=list(DATASETS), metavar="DATA",
                    help="run only the anytime race (as --beyond-memory's) on these datasets")
    ap.add_argument("--from-json", nargs="+", metavar="FILE",
                    help="no run: print the Markdown table of these --json-out files (and "
                         "--png)")
    a = ap.parse_args()
    if a.from_json:
        rows = [r for f in a.from_json for r in json.loads(pathlib.Path(f).read_text())["rows"]]
        print(markdown(rows))
        if a.png:
            plot(rows, a.png)
        return
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"started {started}; load average {os.getloadavg()}; argv {' '.join(sys.argv[1:])}",
          flush=True)
    if a.beyond_memory or a.anytime:
        result = {"anytime": [anytime_data(a, name) for name in a.anytime or []]}
        if a.beyond_memory:
            result["anytime"].insert(0, beyond_memory(a))
        for k, res in enumerate(result["anytime"]) if a.png else ():
            plot_anytime(res, a.png if not k else a.png.replace(".png", f"-{k}.png"))
    else:
        rows = race(a)
        print("\n" + HEAD)
        for r in rows:
            if "wall" in r:
                print_row(r)
            else:
                print(f"{r['data']:15s} {r['s']:2d} {r['tool']:13s} {r['skipped']}")
        result = {"rows": rows}
        if a.png:
            plot(rows, a.png)
    result.update(started=started, finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  argv=sys.argv[1:], f_star_eps=F_STAR_EPS)
    print(f"finished {result['finished']}; load average {os.getloadavg()}")
    if a.json_out:
        pathlib.Path(a.json_out).write_text(json.dumps(result, indent=1, default=float))


if __name__ == "__main__":
    main()
