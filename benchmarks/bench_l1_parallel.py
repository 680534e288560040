"""Benchmark: L1-regularized -s 5 / -s 6 (``--solver l1``), exact mode against parallel mode
(the feature blocks on their owners), against LIBLINEAR 2.50, at the default eps = 0.01, and
what crosses the network per round in parallel mode.

Run from the repository root (needs ../shared/datasets):

    python benchmarks/bench_l1_parallel.py --data news20 --classes 1 --work /tmp/l1-bench

Problem: news20, class ``--classes`` against the rest (one binary problem; ``--classes all``:
the 20 one-vs-rest problems, as the race), C = 1, no bias.  Each distsvm run is on an already
started LocalCluster (1 or 2 single-threaded worker processes) with the store and its column
view on disk, the block cache emptied first; "train s" is the job's ``train_seconds``,
LIBLINEAR's the ``train()`` call.  Network, parallel mode: the workers' own counter of bytes
sent to other workers (``Worker.transfer_outgoing_bytes_total``) over the run, per round; the
reports the coordinator gathers (pickled size of one round's report); and the arguments the
coordinator sends with each round's tasks (pickled size of the column table and the options).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import pathlib
import pickle
import sys
import warnings

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_dcd import liblinear_run  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
TYPES = {5: "squared_hinge", 6: "logistic"}


def l1_objective(w, X, s, loss, C=1.0):
    m = s * (X @ w[:X.shape[1]])
    data = np.logaddexp(0.0, -m) if loss == "logistic" else np.maximum(0.0, 1.0 - m) ** 2
    return float(np.abs(w).sum() + C * data.sum())


def sent(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total)
               .values())


def run(store, client, s, mode):
    import distsvm.workers.blocks
    from distsvm.jobs import train
    from distsvm.storage.columns import read_columns_meta

    client.run(distsvm.workers.blocks.clear_cache)
    before = sent(client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = train(store, client=client, solver="l1", loss=TYPES[s], pcd_mode=mode)
    w2w = sent(client) - before
    rounds = sum(h[-1]["round"] for h in _histories(model))
    cmeta = read_columns_meta(store)
    args = len(pickle.dumps((cmeta, np.ones(len(store.meta.classes)))))
    n = store.meta.n_features  # nnz: of one problem's w (the mean over one-vs-rest's)
    nnz = int(np.count_nonzero(model.w)) // (model.w.shape[0] if model.w.ndim == 2 else 1)
    if mode == "parallel":  # w by its non-zeros, the active set as bits, statistics
        report = 12 * nnz + (-(-(n + 1) // 8)) + 200
    else:  # per batch: w, CDN's active set
        report = 8 * (n + 1) + ((n + 1) if s == 5 else 0) + 200
    return model, {"train_s": model.summary["train_seconds"], "rounds": rounds,
                   "column_blocks": len(cmeta.blocks),
                   "sent_bytes_per_round": w2w / max(rounds, 1),
                   "report_bytes": report, "args_bytes_per_task": args}


def _histories(model):
    per = model.summary.get("per_class")
    return [p["history"] for p in per] if per else [model.summary["history"]]


def main():
    from distributed import Client, LocalCluster
    from sklearn.datasets import load_svmlight_file

    from distsvm.columns import columnize
    from distsvm.ingest import ingest
    from distsvm.storage import open_dataset

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="news20")
    ap.add_argument("--classes", default="1", help="a class against the rest, or 'all'")
    ap.add_argument("--s", type=int, nargs="+", default=[5, 6])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--work", default="/tmp/l1-bench")
    ap.add_argument("--block-mb", type=float, default=1.0,
                    help="column block size (the default's one block has one owner)")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    with lzma.open(SHARED / f"{a.data}.xz") as f:
        X, y = load_svmlight_file(f)
    X = X.astype(np.float64).tocsr()
    if a.classes != "all":
        y = np.where(y == float(a.classes), 1.0, -1.0)
    path = os.path.join(a.work, f"{a.data}-{a.classes}-{a.block_mb:g}.zarr")
    if os.path.exists(os.path.join(path, "cols")):
        store = open_dataset(path)
    else:
        store = ingest((X, y), path, overwrite=True)
        columnize(store, block_mb=a.block_mb)
    out = []
    kw = dict(threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0")
    for s in a.s:
        w_ll, t_ll = liblinear_run(X, y, s, 0.01)
        row = {"s": s, "liblinear_train_s": t_ll}
        if a.classes != "all":
            row["liblinear_f"] = l1_objective(w_ll, X, np.where(y > 0, 1.0, -1.0), TYPES[s])
        for nw in a.workers:
            with LocalCluster(n_workers=nw, **kw) as cluster, Client(cluster) as client:
                for mode in ("exact", "parallel"):
                    model, got = run(store, client, s, mode)
                    if a.classes != "all":
                        got["f"] = l1_objective(model.w, X, np.where(y > 0, 1.0, -1.0),
                                                TYPES[s])
                    got["nnz"] = int(np.count_nonzero(model.w))
                    row[f"{mode}_{nw}w"] = got
                    print(json.dumps({"s": s, "workers": nw, "mode": mode, **got}), flush=True)
        print(json.dumps(row), flush=True)
        out.append(row)
    if a.json_out:
        pathlib.Path(a.json_out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
