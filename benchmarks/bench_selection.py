"""Benchmark: cross-validation (``-v 5``) and the C search (``-s 0 -C``) as a user runs them,
distsvm's CLI against LIBLINEAR's, whole commands, interleaved.

    python benchmarks/bench_selection.py --data /work/tmp-race/w8a --store /work/tmp-race/w8a.zarr

LIBLINEAR is liblinear-official in a child ``python -c``: ``svm_read_problem`` then
``train(y, x, "-v 5 -q")`` (or ``"-s 0 -C -q"``), as its ``train`` binary with those options;
the child prints its CV accuracy (or best C and its accuracy) and the time of the
``train`` call.  distsvm is ``distsvm train STORE -v 5`` (or ``-s 0 -C``) on the store
ingested beforehand (``distsvm ingest FILE STORE``, not timed), the whole command and its
printed ``Cross Validation Accuracy`` / ``Best C`` line.  Each row is the median of
``--repeats`` runs of each tool, alternated; the 1-minute load average is printed with
every run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

LIBLINEAR = """
import sys, time
from liblinear.liblinearutil import svm_read_problem, train
y, x = svm_read_problem(sys.argv[1])
t = time.perf_counter()
out = train(y, x, sys.argv[2])
print("RESULT", out, time.perf_counter() - t)
"""

TASKS = {"-v 5": ("-v 5 -q", ["-v", "5"]), "-s 0 -C": ("-s 0 -C -q", ["-s", "0", "-C"])}


def timed(cmd: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, p.stdout + p.stderr


def liblinear(data: str, options: str) -> dict:
    wall, out = timed([sys.executable, "-c", LIBLINEAR, data, options])
    result, seconds = re.search(r"RESULT (.*) (\S+)$", out.strip(), re.M).groups()
    return {"wall": wall, "train": float(seconds), "result": result}


def distsvm(store: str, args: list[str]) -> dict:
    wall, out = timed(["distsvm", "train", store, *args])
    line = re.search(r"^(Cross Validation Accuracy.*|Best C.*)$", out, re.M)
    return {"wall": wall, "result": line.group(1) if line else out[-300:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the LIBSVM file (LIBLINEAR reads it)")
    ap.add_argument("--store", required=True, help="the same data ingested by distsvm")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    a = ap.parse_args()
    for task in a.tasks:
        options, args = TASKS[task]
        runs = {"liblinear": [], "distsvm": []}
        for _ in range(a.repeats):
            for tool in runs:
                load = os.getloadavg()[0]
                r = liblinear(a.data, options) if tool == "liblinear" else distsvm(a.store, args)
                runs[tool].append(r)
                print(f"{task:8s} {tool:9s} wall {r['wall']:7.2f} s"
                      + (f"  train() {r['train']:6.2f} s" if "train" in r else "")
                      + f"  load {load:.2f}  {r['result']}", flush=True)
        walls = {t: statistics.median(r["wall"] for r in rs) for t, rs in runs.items()}
        print(f"{task}: median whole command LIBLINEAR {walls['liblinear']:.2f} s, distsvm "
              f"{walls['distsvm']:.2f} s: {walls['distsvm'] / walls['liblinear']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
