"""The ``distsvm`` command: ingest | columnize | info | train | predict | export | import.

Shaped like LIBLINEAR's ``train [options] data model``: ``-s``, ``-c``, ``-e``,
``-B``, ``-q`` mean what they mean there.  Errors are one ``ERROR: …`` line on
stderr and a non-zero exit status; ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from storage import open_dataset
from storage.errors import StorageError

from . import __version__
from .errors import ClusterError
from .progress import Progress

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"ERROR: {self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _cluster_options(p):
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address (tcp://host:port); default: an embedded local cluster")
    p.add_argument("--workers", type=int, metavar="N",
                   help="number of workers of the embedded cluster (or to use of an existing one)")


def _columnize_options(p):
    p.add_argument("--memory-mb", type=float, default=512.0, metavar="MB",
                   help="memory bound of each column-view build task (default 512)")


def _common(p):
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="distsvm", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"distsvm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("ingest", help="LIBSVM/svmlight text (.gz/.bz2/.xz too) into a dataset store")
    p.add_argument("source")
    p.add_argument("store")
    p.add_argument("--no-shuffle", action="store_true", help="keep the file's row order")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--block-rows", type=int, metavar="N", help="rows per block")
    size.add_argument("--block-mb", type=float, metavar="MB",
                      help="megabytes of CSR per block (default 64)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--zero-based", action="store_true", help="feature indices start at 0")
    p.add_argument("--n-features", type=int, metavar="N",
                   help="number of features (default: the largest index seen)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("--serial", action="store_true", help="parse in this process, no cluster")
    p.add_argument("--columns", action="store_true",
                   help="also build the column view (as `distsvm columnize` does)")
    _columnize_options(p)
    _cluster_options(p)
    _common(p)

    p = sub.add_parser("columnize", help="build the CSC column view of a store (for --solver pcd)")
    p.add_argument("store")
    p.add_argument("--block-mb", type=float, default=64.0, metavar="MB",
                   help="megabytes of CSC per column block (default 64)")
    p.add_argument("--serial", action="store_true", help="run in this process, no cluster")
    _columnize_options(p)
    _cluster_options(p)
    _common(p)

    p = sub.add_parser("info", help="print and check a store's metadata")
    p.add_argument("store")
    p.add_argument("--no-verify", action="store_true",
                   help="skip reading every block to check checksums and invariants")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")

    p = sub.add_parser("train", help="train a linear classifier on a store")
    p.add_argument("store")
    p.add_argument("model")
    p.add_argument("--solver", choices=("dcd", "pcd", "auto"),
                   help="dcd = dual CD over row blocks (default), pcd = primal CD over column "
                        "blocks, auto = primal when rows far outnumber features")
    p.add_argument("--loss", choices=("hinge", "squared-hinge", "logistic"),
                   help="hinge = L1-loss SVM, squared-hinge = L2-loss SVM (default), "
                        "logistic = logistic regression (pcd)")
    p.add_argument("-s", dest="liblinear_type", type=int, choices=(0, 1, 2, 3), metavar="TYPE",
                   help="LIBLINEAR solver type: 0 = logistic regression primal (pcd), "
                        "1 = L2-loss SVM dual, 2 = L2-loss SVM primal (pcd), 3 = L1-loss SVM dual")
    p.add_argument("--pcd-mode", choices=("exact", "parallel"), default="exact",
                   help="pcd: one worker per round (exact), or all workers on their column "
                        "blocks with a global line search (parallel)")
    p.add_argument("-c", dest="C", type=float, default=1.0, help="cost C (default 1)")
    p.add_argument("-e", dest="eps", type=float, default=0.1,
                   help="stopping tolerance on the projected-gradient violation (default 0.1)")
    p.add_argument("-B", dest="bias", type=float, default=-1.0,
                   help="bias feature value; < 0 means none (default -1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-rounds", type=int, default=1000,
                   help="round limit; reaching it warns (default 1000)")
    p.add_argument("--inner-passes", type=int, default=1,
                   help="DCD passes over a block per visit (default 1)")
    _cluster_options(p)
    _common(p)

    p = sub.add_parser("predict", help="predict a store with a model and report accuracy")
    p.add_argument("store")
    p.add_argument("model", help="a distsvm model or a LIBLINEAR text model")
    p.add_argument("--output", metavar="FILE", help="write one predicted label per line")
    _cluster_options(p)
    _common(p)

    p = sub.add_parser("export", help="write a model in LIBLINEAR's text format")
    p.add_argument("model")
    p.add_argument("liblinear_model")

    p = sub.add_parser("import", help="read a LIBLINEAR text model into distsvm's format")
    p.add_argument("liblinear_model")
    p.add_argument("model")
    return parser


def _ingest(a, progress):
    from .ingest import DEFAULT_BLOCK_MB, ingest
    from .jobs import client_for

    kwargs = dict(dtype=a.dtype, index_base=0 if a.zero_based else 1, shuffle=not a.no_shuffle,
                  seed=a.seed, block_rows=a.block_rows,
                  block_mb=None if a.block_rows else (a.block_mb or DEFAULT_BLOCK_MB),
                  n_features=a.n_features, overwrite=a.overwrite, progress=progress)
    if a.serial:
        d = ingest(a.source, a.store, **kwargs)
        if a.columns:
            _build_columns(d, a, None, progress)
    else:
        with client_for(a.scheduler, a.workers) as c:
            d = ingest(a.source, a.store, client=c, **kwargs)
            if a.columns:
                _build_columns(d, a, c, progress)
    m = d.meta
    return {"store": a.store, "n_rows": m.n_rows, "n_features": m.n_features, "nnz": m.nnz,
            "n_blocks": len(m.blocks), "classes": list(m.classes)}


def _build_columns(d, a, client, progress):
    from .columns import columnize

    return columnize(d, memory_mb=a.memory_mb, block_mb=a.block_mb or 64.0, client=client,
                     progress=progress)


def _columnize(a, progress):
    from .jobs import client_for

    d = open_dataset(a.store)
    if a.serial:
        cm = _build_columns(d, a, None, progress)
    else:
        with client_for(a.scheduler, a.workers) as c:
            cm = _build_columns(d, a, c, progress)
    return {"store": a.store, "n_column_blocks": len(cm.blocks), "passes": cm.passes,
            "memory_bytes": cm.memory_bytes}


def _info(a):
    d = open_dataset(a.store)
    if not a.no_verify:
        d.verify()
    meta = d.meta.to_json()
    meta["verified"] = not a.no_verify
    if a.json:
        print(json.dumps(meta))
        return None
    blocks = meta.pop("blocks")
    for k, v in meta.items():
        print(f"{k:16s} {v}")
    sizes = [b["n_rows"] for b in blocks]
    print(f"{'blocks':16s} {len(blocks)} (rows per block: min {min(sizes)}, max {max(sizes)})")
    return None


def _train(a, progress):
    from .model import save_model
    from .jobs import LIBLINEAR_TYPES, train

    loss = a.loss.replace("-", "_") if a.loss else None
    if a.liblinear_type is not None:
        solver, s_loss = LIBLINEAR_TYPES[a.liblinear_type]
        if a.solver and a.solver != solver:
            raise ValueError(f"-s {a.liblinear_type} means --solver {solver}, "
                             f"which contradicts --solver {a.solver}")
        if loss and loss != s_loss:
            raise ValueError(f"-s {a.liblinear_type} means --loss {s_loss.replace('_', '-')}, "
                             f"which contradicts --loss {a.loss}")
        loss = s_loss
    else:
        solver = a.solver or "dcd"
    model = train(a.store, solver=solver, loss=loss or "squared_hinge", C=a.C, eps=a.eps,
                  bias=a.bias, max_rounds=a.max_rounds, seed=a.seed,
                  inner_passes=a.inner_passes, pcd_mode=a.pcd_mode, scheduler=a.scheduler,
                  n_workers=a.workers,
                  progress=progress, owner="distsvm train")
    save_model(model, a.model)
    s = model.summary
    gap = s["duality_gap"]
    gap = None if gap != gap else gap  # NaN: a primal solver has no dual objective
    progress.note(f"train: {s['rounds']} rounds, primal {s['primal_objective']:.8g}, "
                  + (f"duality gap {gap:.3g}, " if gap is not None else "")
                  + f"{s['train_seconds']:.2f}s; model written to {a.model}")
    keys = ("rounds", "converged", "primal_objective", "dual_objective", "duality_gap",
            "train_seconds", "n_rows", "n_features")
    return {"solver": model.solver, "loss": model.loss, "C": model.params["C"],
            "eps": model.params["eps"], "bias": model.bias, "model": a.model,
            **{k: (None if s[k] != s[k] else s[k]) for k in keys}}


def _predict(a, progress):
    from .model import load_model
    from .jobs import predict

    model = load_model(a.model)
    result = predict(a.store, model, scheduler=a.scheduler, n_workers=a.workers,
                     output=a.output)
    print(f"Accuracy = {100 * result['accuracy']:.4f}% ({round(result['accuracy'] * result['n_rows'])}"
          f"/{result['n_rows']})", file=sys.stderr if a.json else sys.stdout)
    return result


def _convert(a):
    from .model import export_liblinear, import_liblinear, load_model, save_model

    if a.command == "export":
        export_liblinear(load_model(a.model), a.liblinear_model)
    else:
        save_model(import_liblinear(a.liblinear_model), a.model)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"WARNING: {message}", file=sys.stderr)


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    progress = Progress(quiet=getattr(a, "quiet", False))
    warnings.showwarning = _show_warning
    try:
        if a.command == "ingest":
            result = _ingest(a, progress)
        elif a.command == "columnize":
            result = _columnize(a, progress)
        elif a.command == "info":
            result = _info(a)
        elif a.command == "train":
            result = _train(a, progress)
        elif a.command == "predict":
            result = _predict(a, progress)
        else:
            result = _convert(a)
    except (StorageError, ValueError, OSError, ClusterError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    if getattr(a, "json", False) and result is not None:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
